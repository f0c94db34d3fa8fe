//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
void kk_pack_columns(const uint16_t *w, long rows, long cols, long width, long p0, long p1, uint16_t *dst);
void kkn_gemm_bf16(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out, long ldo);
void kkn_gemm_f16(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out, long ldo);
*/
import "C"

import "unsafe"

// cpuNEON is true: NEON is part of every arm64 CPU (ARMv8-A), and hasNEON
// is as far as $KAKEYA_CPU allows.
const cpuNEON = true

var hasNEON = isaCap >= levelSIMD

func u16n(s []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(&s[0])) }
func f32n(s []float32) *C.float   { return (*C.float)(unsafe.Pointer(&s[0])) }

// packColumns packs panels [p0, p1) of the rows x cols matrix w into dst
// in the column layout (kk_pack_columns in neon_arm64.c).
func packColumns(w []uint16, rows, cols, width, p0, p1 int, dst []uint16) {
	if p0 >= p1 {
		return
	}
	_, _ = w[rows*cols-1], dst[columnsLen(p1, width, cols)-1]
	C.kk_pack_columns(u16n(w), C.long(rows), C.long(cols), C.long(width), C.long(p0), C.long(p1), u16n(dst))
}

// gemmNEONBF16 sets out[t*rows+r] = w[r]·x[t] for the rows of panels [p0,
// p1) of the 32-row column panels of bf16 weights and the n tokens of f32
// activations x (row stride cols).
func gemmNEONBF16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	_, _, _ = panels[columnsLen(p1, 32, cols)-1], out[(n-1)*rows+min(p1*32, rows)-1], x[n*cols-1]
	C.kkn_gemm_bf16(u16n(panels), C.long(rows), C.long(cols), C.long(p0), C.long(p1), f32n(x), C.long(n), f32n(out), C.long(rows))
}

// gemmNEONF16 is gemmNEONBF16 for f16 weights.
func gemmNEONF16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	_, _, _ = panels[columnsLen(p1, 32, cols)-1], out[(n-1)*rows+min(p1*32, rows)-1], x[n*cols-1]
	C.kkn_gemm_f16(u16n(panels), C.long(rows), C.long(cols), C.long(p0), C.long(p1), f32n(x), C.long(n), f32n(out), C.long(rows))
}
