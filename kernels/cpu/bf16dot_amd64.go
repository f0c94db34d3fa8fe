//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
int kk_bf16_supported(void);
void kk_pack_x(const float *x, long n, long cols, long ld, uint16_t *hi, uint16_t *lo);
void kk_gemm_panel(const uint16_t *w, long cols, int nr, uint32_t *panel, const uint16_t *xh, const uint16_t *xl, long ld, long n, float *out, long ldo);
void kk_gemv(const uint16_t *w, long cols, long lo, long hi, const uint16_t *xh, const uint16_t *xl, float *out);
*/
import "C"

import (
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
)

// hasBF16Dot reports whether this CPU runs bf16dot_amd64.c's VDPBF16PS
// kernels (AVX512_BF16 with the OS saving AVX-512 state).
var hasBF16Dot = C.kk_bf16_supported() != 0

// The cgo wrappers below take slices the caller has sized; the C side keeps
// no pointer past the call.

func u16p(s []uint16) *C.uint16_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint16_t)(unsafe.Pointer(&s[0]))
}

// packX writes x's n rows of cols values as bf16 planes of row stride ld
// (even, >= cols): hi = bf16(x), and lo = bf16(x - hi) when lo is not nil.
func packX(x []float32, n, cols, ld int, hi, lo []uint16) {
	_ = x[n*cols-1]
	_ = hi[n*ld-1]
	if lo != nil {
		_ = lo[n*ld-1]
	}
	C.kk_pack_x((*C.float)(&x[0]), C.long(n), C.long(cols), C.long(ld), u16p(hi), u16p(lo))
}

// gemmPanelBF16 sets out[t*ldo+j] = w[r0+j]·x[t] for the nr <= panelRows
// rows from r0 and the n tokens of the planes; panel is scratch of
// panelRows*ld/2 values.
func gemmPanelBF16(w *compute.Mat, r0, nr int, panel []float32, xh, xl []uint16, ld, n int, out []float32, ldo int) {
	_ = w.U16[(r0+nr)*w.Cols-1]
	_ = panel[panelRows*ld/2-1]
	_ = out[(n-1)*ldo+nr-1]
	C.kk_gemm_panel(u16p(w.U16[r0*w.Cols:]), C.long(w.Cols), C.int(nr), (*C.uint32_t)(unsafe.Pointer(&panel[0])),
		u16p(xh), u16p(xl), C.long(ld), C.long(n), (*C.float)(&out[0]), C.long(ldo))
}

// gemvBF16 sets out[r] = w[r]·x for rows [lo, hi) from x's planes.
func gemvBF16(w *compute.Mat, lo, hi int, xh, xl []uint16, out []float32) {
	_ = w.U16[hi*w.Cols-1]
	_ = out[hi-1]
	C.kk_gemv(u16p(w.U16), C.long(w.Cols), C.long(lo), C.long(hi), u16p(xh), u16p(xl), (*C.float)(&out[0]))
}
