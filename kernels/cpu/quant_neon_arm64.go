//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
int kqn_dotprod_supported(void);
void kqn_rows(int sdot, int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
	      const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo);
*/
import "C"

import "unsafe"

// cpuQuantDot reports whether this CPU runs the SDOT kernels of
// quant_neon_arm64.c (Armv8.2-A DotProd); hasQuantDot whether they run,
// as far as $KAKEYA_CPU allows (neon). Without it the plain NEON kernels
// run, which every arm64 CPU does.
var (
	cpuQuantDot = C.kqn_dotprod_supported() != 0
	hasQuantDot = cpuQuantDot && hasNEON
)

// quantRowsNEON is qTask's rows [r0, r1) by quant_neon_arm64.c's kernels,
// with SDOT when sdot is set: the Go loops' results bit for bit.
func quantRowsNEON(t *qTask, r0, r1 int, sdot bool) {
	rows, cols := t.w.Rows, t.w.Cols
	bs := (*C.int32_t)(t.cSums(r1))
	dot := C.int(0)
	if sdot {
		dot = 1
	}
	C.kqn_rows(dot, C.int(t.l.kind), (*C.uint8_t)(unsafe.Pointer(&t.w.Q[0])), C.long(t.rowB), C.long(r0), C.long(r1),
		(*C.long)(unsafe.Pointer(&t.l.off[0])), (*C.int8_t)(unsafe.Pointer(&t.a.qs[0])),
		(*C.float)(unsafe.Pointer(&t.a.d[0])), bs, C.long(t.n), C.long(cols),
		(*C.float)(unsafe.Pointer(&t.out[0])), C.long(rows))
}
