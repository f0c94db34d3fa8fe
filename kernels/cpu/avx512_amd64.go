//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
int kk_avx512_supported(void);
int kk_bf16_supported(void);
void kk_pack_x(const float *x, long n, long cols, long ld, uint16_t *dst);
void kk_gemm_panel(const uint16_t *w, long cols, int nr, uint32_t *panel, const uint16_t *x, long ld, long n, float *out, long ldo);
void kk_gemv(const uint16_t *w, long cols, long lo, long hi, const uint16_t *x, float *out);
void kk_gemm_panel_f32(const uint16_t *w, long cols, int nr, uint32_t *panel, const float *x, long n, float *out, long ldo);
void kk_split_x(const float *x, long cols, float *xe, float *xo);
void kk_gemv_f32(const uint16_t *w, long cols, long lo, long hi, const float *xe, const float *xo, float *out);
void kk_scores(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds);
void kk_mix(float *o, long m, long d, const float *p, long ldp, const float *v, long n);
void kk_fwht_rows64(float *out, const float *v, const float *signs, const float *z, const float *w, long r,
		    const float *rows, long n, const float *cos, const float *sin);
*/
import "C"

import (
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
)

// hasAVX512 reports whether this CPU runs avx512_amd64.c's f32 kernels
// (AVX-512 F, BW and VL, with the OS saving their state), and hasBF16Dot
// whether it also runs the VDPBF16PS ones (AVX512_BF16).
var (
	hasAVX512  = C.kk_avx512_supported() != 0
	hasBF16Dot = C.kk_bf16_supported() != 0
)

// The wrappers below check the extent of every slice they pass, since C
// cannot; the C side keeps no pointer past the call.

func u16p(s []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(&s[0])) }

func f32p(s []float32) *C.float { return (*C.float)(unsafe.Pointer(&s[0])) }

// u32p passes float32 scratch to C as the dwords of a packed panel.
func u32p(s []float32) *C.uint32_t { return (*C.uint32_t)(unsafe.Pointer(&s[0])) }

// packX rounds x's n rows of cols values to bf16 rows of stride ld (even,
// >= cols) in dst.
func packX(x []float32, n, cols, ld int, dst []uint16) {
	_, _ = x[n*cols-1], dst[n*ld-1]
	C.kk_pack_x(f32p(x), C.long(n), C.long(cols), C.long(ld), u16p(dst))
}

// gemmPanelBF16 sets out[t*ldo+j] = w[r0+j]·x[t] for the nr <= panelRows
// rows from r0 and the n tokens of packX's rows x; panel is scratch of
// panelRows*ld/2 values.
func gemmPanelBF16(w *compute.Mat, r0, nr int, panel []float32, x []uint16, ld, n int, out []float32, ldo int) {
	_, _, _, _ = w.U16[(r0+nr)*w.Cols-1], panel[panelRows*ld/2-1], x[n*ld-1], out[(n-1)*ldo+nr-1]
	C.kk_gemm_panel(u16p(w.U16[r0*w.Cols:]), C.long(w.Cols), C.int(nr), u32p(panel),
		u16p(x), C.long(ld), C.long(n), f32p(out), C.long(ldo))
}

// gemvBF16 sets out[r] = w[r]·x for rows [lo, hi) from packX's x.
func gemvBF16(w *compute.Mat, lo, hi int, x []uint16, out []float32) {
	_, _, _ = w.U16[hi*w.Cols-1], x[w.Cols-1], out[hi-1]
	C.kk_gemv(u16p(w.U16), C.long(w.Cols), C.long(lo), C.long(hi), u16p(x), f32p(out))
}

// gemmPanelF32 is gemmPanelBF16 for the f32 activations x (row stride
// w.Cols) as they are.
func gemmPanelF32(w *compute.Mat, r0, nr int, panel, x []float32, n int, out []float32, ldo int) {
	ld := w.Cols + w.Cols&1
	_, _, _, _ = w.U16[(r0+nr)*w.Cols-1], panel[panelRows*ld/2-1], x[n*w.Cols-1], out[(n-1)*ldo+nr-1]
	C.kk_gemm_panel_f32(u16p(w.U16[r0*w.Cols:]), C.long(w.Cols), C.int(nr), u32p(panel),
		f32p(x), C.long(n), f32p(out), C.long(ldo))
}

// splitX copies x's even-indexed values into xe and odd-indexed ones into
// xo, zero-padded to splitLen(len(x)), for gemvF32.
func splitX(x, xe, xo []float32) {
	n := splitLen(len(x))
	_, _ = xe[n-1], xo[n-1]
	C.kk_split_x(f32p(x), C.long(len(x)), f32p(xe), f32p(xo))
}

// gemvF32 sets out[r] = w[r]·x for rows [lo, hi) from splitX's halves.
func gemvF32(w *compute.Mat, lo, hi int, xe, xo, out []float32) {
	n := splitLen(w.Cols)
	_, _, _, _ = w.U16[hi*w.Cols-1], xe[n-1], xo[n-1], out[hi-1]
	C.kk_gemv_f32(u16p(w.U16), C.long(w.Cols), C.long(lo), C.long(hi), f32p(xe), f32p(xo), f32p(out))
}

// scoresAVX512 is ScoreBlock's AVX-512 kernel; the lengths are checked.
func scoresAVX512(s []float32, lds int, q []float32, m int, keys []float32, n, d int, scale float32) {
	C.kk_scores(f32p(q), C.long(m), C.long(d), f32p(keys), C.long(n), C.float(scale), f32p(s), C.long(lds))
}

// mixAVX512 is MixBlock's AVX-512 kernel; the lengths are checked.
func mixAVX512(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	C.kk_mix(f32p(o), C.long(m), C.long(d), f32p(p), C.long(ldp), f32p(vals), C.long(n))
}

// fwhtRows64AVX512 is FWHTAxpyRows (cos nil) or FWHTAxpyRoPERows for rows of
// 64 values (d = p = 64); the lengths are checked.
func fwhtRows64AVX512(out, v, signs, z, w, rows []float32, n, r int, cos, sin []float32) {
	if n == 0 {
		return
	}
	var wp, rp, cp, sp *C.float
	if r > 0 {
		wp, rp = f32p(w), f32p(rows)
	}
	if cos != nil {
		cp, sp = f32p(cos), f32p(sin)
	}
	C.kk_fwht_rows64(f32p(out), f32p(v), f32p(signs), f32p(z), wp, C.long(r), rp, C.long(n), cp, sp)
}
