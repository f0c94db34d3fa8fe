//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
void kk_pc_trials512(const float *col, long n, const float *scale, const float *inv, long k, const int32_t *base, float lo,
		     float ginv, const float *bounds, const float *lv, const float *cost, double *e, double *l, uint8_t *codes);
void kk2_pc_trials(const float *col, long n, const float *scale, const float *inv, long k, const int32_t *base, float lo,
		   float ginv, const float *bounds, const float *lv, const float *cost, double *e, double *l, uint8_t *codes);
*/
import "C"

import "unsafe"

// pcScaleTrials is PCScaleTrials's kernel call; the lengths are checked.
func pcScaleTrials(g *CellGrid, col, scale, inv, levels, cost []float32, e, l []float64, codes []uint8) {
	var cp *C.float
	var lp *C.double
	if cost != nil {
		cp, lp = (*C.float)(unsafe.Pointer(&cost[0])), (*C.double)(unsafe.Pointer(&l[0]))
	}
	col0, sc0, inv0 := (*C.float)(unsafe.Pointer(&col[0])), (*C.float)(unsafe.Pointer(&scale[0])), (*C.float)(unsafe.Pointer(&inv[0]))
	base, bounds, lv := (*C.int32_t)(unsafe.Pointer(&g.base[0])), (*C.float)(unsafe.Pointer(&g.bounds[0])), (*C.float)(unsafe.Pointer(&levels[0]))
	e0, codes0 := (*C.double)(unsafe.Pointer(&e[0])), (*C.uint8_t)(unsafe.Pointer(&codes[0]))
	if hasAVX512 {
		C.kk_pc_trials512(col0, C.long(len(col)), sc0, inv0, C.long(len(scale)), base, C.float(g.lo), C.float(g.inv), bounds, lv, cp, e0, lp, codes0)
		return
	}
	C.kk2_pc_trials(col0, C.long(len(col)), sc0, inv0, C.long(len(scale)), base, C.float(g.lo), C.float(g.inv), bounds, lv, cp, e0, lp, codes0)
}
