//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
void kk2_pc_trials(const float *col, long n, const float *scale, const float *inv, long k, const float *ent, float lo,
		   float ginv, long ec, double *e, double *l, uint8_t *codes);
*/
import "C"

import "unsafe"

// pcScaleTrials is PCScaleTrials's kernel call; the lengths are checked.
// The AVX2 kernel runs at AVX-512 too: it reads each lane's step entry
// with one load, where a gather (the AVX-512 one's) takes one load a
// field.
func pcScaleTrials(g *CellGrid, col, scale, inv []float32, costs bool, e, l []float64, codes []uint8) {
	ec, lp := C.long(0), (*C.double)(nil)
	if costs {
		ec, lp = 1, (*C.double)(unsafe.Pointer(&l[0]))
	}
	C.kk2_pc_trials((*C.float)(unsafe.Pointer(&col[0])), C.long(len(col)), (*C.float)(unsafe.Pointer(&scale[0])),
		(*C.float)(unsafe.Pointer(&inv[0])), C.long(len(scale)), (*C.float)(unsafe.Pointer(&g.ent[0])), C.float(g.lo), C.float(g.inv),
		ec, (*C.double)(unsafe.Pointer(&e[0])), lp, (*C.uint8_t)(unsafe.Pointer(&codes[0])))
}
