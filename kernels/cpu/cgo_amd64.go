//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
int kk_avx2_supported(void);
int kk_avx512_supported(void);
int kk_bf16_supported(void);
void kk_pack_pairs(const uint16_t *w, long rows, long cols, long width, long p0, long p1, uint32_t *dst);
void kk_pack_columns(const uint16_t *w, long rows, long cols, long width, long p0, long p1, uint16_t *dst);
void kk_pack_x(const float *x, long n, long cols, long ld, uint16_t *dst);
void kk_gemm_bf16(const uint32_t *panels, long rows, long cols, long p0, long p1, const uint16_t *x, long ld, long n, float *out, long ldo);
void kk_gemm_f32(const uint32_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out, long ldo);
void kk2_round_bf16(const float *x, long n, float *dst);
void kk2_gemm_bf16(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out, long ldo);
void kk2_gemm_f16(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out, long ldo);
void kk_scores(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds);
void kk2_scores(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds);
void kk2_mix(float *o, long m, long d, const float *p, long ldp, const float *v, long n);
void kk_mix(float *o, long m, long d, const float *p, long ldp, const float *v, long n);
void kk2_mixt(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base);
void kk2_mixt_rope(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base,
		   const float *cos, const float *sin);
void kk_mixt(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base);
void kk_mixt_rope(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base,
		  const float *cos, const float *sin);
void kk2_transpose(float *dst, long ldd, const float *src, long lds, long rows, long cols);
void kk_unpack_planes(float *dst, long ldd, long n, const uint8_t *src, long len, const uint8_t *widths, long c,
		      const float *scales, const float *levels);
void kk2_unpack_planes(float *dst, long ldd, long n, const uint8_t *src, long len, const uint8_t *widths, long c,
		       const float *scales, const float *levels);
void kk_fwht_rows64(float *out, const float *v, const float *signs, const float *z, const float *w, long r,
		    const float *rows, long n, const float *cos, const float *sin);
void kk_pc_keys(long nb, long n, long d, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths,
		long c, const float *levels, const float *fields, long mc, const float *mu, const float *mean_rows,
		const float *coded, const float *q, long m, float scale, const float *cos, const float *sin, float *s,
		long lds, long r0, long r1, float *work, const uint64_t *pf, long npf);
void kk2_pc_keys(long nb, long n, long d, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths,
		 long c, const float *levels, const float *fields, long mc, const float *mu, const float *mean_rows,
		 const float *coded, const float *q, long m, float scale, const float *cos, const float *sin, float *s,
		 long lds, long r0, long r1, float *work, const uint64_t *pf, long npf);
void kk_pc_values(long nb, long n, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths, long c,
		  const float *levels, const float *fields, long mc, const float *w, long ldw, long m, long r0, long r1,
		  float *acc, float *macc, float *wsum, float *work, const uint64_t *pf, long npf);
void kk2_pc_values(long nb, long n, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths, long c,
		   const float *levels, const float *fields, long mc, const float *w, long ldw, long m, long r0, long r1,
		   float *acc, float *macc, float *wsum, float *work, const uint64_t *pf, long npf);
void kk_pc_values_end(float *o, long m, long d, const float *acc, long c, const float *coded, const float *macc,
		      long mc, const float *mean_rows, const float *wsum, const float *mu);
void kk2_pc_values_end(float *o, long m, long d, const float *acc, long c, const float *coded, const float *macc,
		       long mc, const float *mean_rows, const float *wsum, const float *mu);
int kq512_supported(void);
long kk_rans2_decode512(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
			const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale, uint32_t *x);
long kk_rans2_decode2(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
		      const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale, uint32_t *x);
long kk_rans2_decode512xn(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
			  const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
			  const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
			  const float *scale0, const float *scale1, const float *scale2, const float *scale3, uint32_t *xs);
long kk_rans2_decode2xn(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
			const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
			const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
			const float *scale0, const float *scale1, const float *scale2, const float *scale3, uint32_t *xs);
int kk_rans2f_supported(void);
long kk_rans2f_decode(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
		      const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
		      const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
		      const float *scale0, const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux,
		      const uint64_t *el, uint32_t *xs);
long kk_rans2f_decode1(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
		       const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale,
		       const uint32_t *aux, const uint64_t *el, uint32_t *x);
long kk_rans2c_decode(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
		      const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
		      const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
		      const float *scale0, const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux,
		      const uint64_t *el, uint32_t *xs);
long kk_rans2c_decode1(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
		       const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale,
		       const uint32_t *aux, const uint64_t *el, uint32_t *x);
void kq512_rows(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
		const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo);
void kq_rows(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
	     const int16_t *xw, const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo);
void kq_rows_x8(int type, const uint8_t *w, long gb, long g0, long g1, const long *off, const int8_t *x, const int16_t *xw,
		const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo);
void kq512_rows_x8(int type, const uint8_t *w, long gb, long g0, long g1, const long *off, const int8_t *x,
		   const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo);
void kq_widen(const int8_t *x, long n, long nb, int16_t *xw);
void kq_quant_q8_0(const float *x, long nb, int8_t *qs, float *d, int32_t *sums);
void kq_quant_q8_k(const float *x, long nb, int8_t *qs, float *d, int32_t *bsums);
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// cpuAVX2C reports whether this CPU runs avx2_amd64.c's kernels (AVX2, FMA
// and F16C), cpuAVX512 whether it runs avx512_amd64.c's f32 kernels
// (AVX-512 F, BW and VL, with the OS saving their state), and cpuBF16Dot
// whether it also runs the VDPBF16PS ones (AVX512_BF16). The has flags are
// the same as far as $KAKEYA_CPU allows.
var (
	cpuAVX2C   = C.kk_avx2_supported() != 0
	cpuAVX512  = C.kk_avx512_supported() != 0
	cpuBF16Dot = C.kk_bf16_supported() != 0
	hasAVX2C   = cpuAVX2C && isaCap >= levelAVX2
	hasAVX512  = cpuAVX512 && isaCap >= levelAVX512
	hasBF16Dot = cpuBF16Dot && isaCap >= levelAVX512BF16
	// cpuQuant512 reports whether this CPU runs quant_avx512_amd64.c's
	// kernels for quantized weights (AVX-512 F, BW, VL and VNNI);
	// hasQuant512 whether they run, as far as $KAKEYA_CPU allows (avx512
	// and up).
	cpuQuant512 = C.kq512_supported() != 0
	hasQuant512 = cpuQuant512 && isaCap >= levelAVX512
	// cpuRANSLookup reports whether this CPU runs rans_amd64.c's
	// gather-free rANS kernels (AVX-512 F, BW, VL, VBMI and VPOPCNTDQ);
	// hasRANSLookup whether they run, as far as $KAKEYA_CPU allows.
	cpuRANSLookup = C.kk_rans2f_supported() != 0
	hasRANSLookup = cpuRANSLookup && isaCap >= levelAVX512
)

// The wrappers below check the extent of every slice they pass, since C
// cannot; the C side keeps no pointer past the call.

func u16p(s []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(&s[0])) }

func f32p(s []float32) *C.float { return (*C.float)(unsafe.Pointer(&s[0])) }

// packX rounds x's n rows of cols values to bf16 rows of stride ld (even,
// >= cols) in dst.
func packX(x []float32, n, cols, ld int, dst []uint16) {
	_, _ = x[n*cols-1], dst[n*ld-1]
	C.kk_pack_x(f32p(x), C.long(n), C.long(cols), C.long(ld), u16p(dst))
}

// roundBF16 sets dst[:len(x)] to x's values rounded to bf16, as f32
// (kk2_round_bf16: tensor.F32ToBF16 then BF16ToF32, bit for bit); AVX2.
func roundBF16(x, dst []float32) {
	if len(x) == 0 {
		return
	}
	_ = dst[len(x)-1]
	C.kk2_round_bf16(f32p(x), C.long(len(x)), f32p(dst))
}

// u32q passes packed uint16 panels to C as the dwords of column pairs.
func u32q(s []uint16) *C.uint32_t { return (*C.uint32_t)(unsafe.Pointer(&s[0])) }

// packPairs packs panels [p0, p1) of the rows x cols matrix w into dst in
// the column-pair layout (kk_pack_pairs).
func packPairs(w []uint16, rows, cols, width, p0, p1 int, dst []uint16) {
	if p0 >= p1 {
		return
	}
	_, _ = w[rows*cols-1], dst[pairsLen(p1, width, cols)-1]
	C.kk_pack_pairs(u16p(w), C.long(rows), C.long(cols), C.long(width), C.long(p0), C.long(p1), u32q(dst))
}

// packColumns packs panels [p0, p1) in the column layout (kk_pack_columns).
func packColumns(w []uint16, rows, cols, width, p0, p1 int, dst []uint16) {
	if p0 >= p1 {
		return
	}
	_, _ = w[rows*cols-1], dst[columnsLen(p1, width, cols)-1]
	C.kk_pack_columns(u16p(w), C.long(rows), C.long(cols), C.long(width), C.long(p0), C.long(p1), u16p(dst))
}

// checkGemm checks the extents a panel GEMM reads and writes: the need
// values of panels that reach panel p1, and n tokens' outputs of the rows
// those panels hold.
func checkGemm(panels []uint16, need, rows, p1, width, n int, out []float32) {
	_, _ = panels[need-1], out[(n-1)*rows+min(p1*width, rows)-1]
}

// gemmBF16 sets out[t*rows+r] = w[r]·x[t] for the rows of panels [p0, p1)
// of the 32-row column-pair panels and the n tokens of packX's bf16 rows x
// (stride ld): the VDPBF16PS kernels.
func gemmBF16(panels []uint16, rows, cols, p0, p1 int, x []uint16, ld, n int, out []float32) {
	checkGemm(panels, pairsLen(p1, 32, cols), rows, p1, 32, n, out)
	_ = x[n*ld-1]
	C.kk_gemm_bf16(u32q(panels), C.long(rows), C.long(cols), C.long(p0), C.long(p1), u16p(x), C.long(ld), C.long(n),
		f32p(out), C.long(rows))
}

// gemmF32 is gemmBF16 with the f32 activations x (row stride cols): the
// AVX-512 f32 kernels.
func gemmF32(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	checkGemm(panels, pairsLen(p1, 32, cols), rows, p1, 32, n, out)
	_ = x[n*cols-1]
	C.kk_gemm_f32(u32q(panels), C.long(rows), C.long(cols), C.long(p0), C.long(p1), f32p(x), C.long(n),
		f32p(out), C.long(rows))
}

// gemm2BF16 is gemmF32 on 32-row column panels: the AVX2 kernels.
func gemm2BF16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	checkGemm(panels, columnsLen(p1, 32, cols), rows, p1, 32, n, out)
	_ = x[n*cols-1]
	C.kk2_gemm_bf16(u16p(panels), C.long(rows), C.long(cols), C.long(p0), C.long(p1), f32p(x), C.long(n),
		f32p(out), C.long(rows))
}

// gemm2F16 is gemm2BF16 for f16 weights.
func gemm2F16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	checkGemm(panels, columnsLen(p1, 32, cols), rows, p1, 32, n, out)
	_ = x[n*cols-1]
	C.kk2_gemm_f16(u16p(panels), C.long(rows), C.long(cols), C.long(p0), C.long(p1), f32p(x), C.long(n),
		f32p(out), C.long(rows))
}

// scoresAVX512 is ScoreBlock's AVX-512 kernel; the lengths are checked.
func scoresAVX512(s []float32, lds int, q []float32, m int, keys []float32, n, d int, scale float32) {
	C.kk_scores(f32p(q), C.long(m), C.long(d), f32p(keys), C.long(n), C.float(scale), f32p(s), C.long(lds))
}

// scoresAVX2 and mixAVX2 are ScoreBlock's and MixBlock's AVX2 kernels; the
// lengths are checked.
func scoresAVX2(s []float32, lds int, q []float32, m int, keys []float32, n, d int, scale float32) {
	if m == 0 || n == 0 {
		return
	}
	C.kk2_scores(f32p(q), C.long(m), C.long(d), f32p(keys), C.long(n), C.float(scale), f32p(s), C.long(lds))
}

func mixAVX2(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	if m == 0 || n == 0 {
		return
	}
	C.kk2_mix(f32p(o), C.long(m), C.long(d), f32p(p), C.long(ldp), f32p(vals), C.long(n))
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

// mixTAVX512 and mixTAVX2 are MixBlockT's kernels; the lengths are checked.
func mixTAVX512(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	if m == 0 || n == 0 {
		mixRowsT(o, m, base, p, ldp, vals, n, d) // only base's rows to copy
		return
	}
	C.kk_mixt(f32p(o), C.long(m), C.long(d), f32p(p), C.long(ldp), f32p(vals), C.long(n), f32pOrNil(base))
}

// mixTRoPEAVX512 is MixBlockTRoPE's kernel for d = 32, 64 and 128, m and
// n > 0; the lengths are checked.
func mixTRoPEAVX512(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int, cos, sin []float32) {
	C.kk_mixt_rope(f32p(o), C.long(m), C.long(d), f32p(p), C.long(ldp), f32p(vals), C.long(n), f32pOrNil(base),
		f32p(cos), f32p(sin))
}

// mixTRoPEAVX2 is MixBlockTRoPE's AVX2 kernel for d a multiple of 16, m
// and n > 0; the lengths are checked.
func mixTRoPEAVX2(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int, cos, sin []float32) {
	C.kk2_mixt_rope(f32p(o), C.long(m), C.long(d), f32p(p), C.long(ldp), f32p(vals), C.long(n), f32pOrNil(base),
		f32p(cos), f32p(sin))
}

func mixTAVX2(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	if m == 0 || n == 0 {
		mixRowsT(o, m, base, p, ldp, vals, n, d)
		return
	}
	C.kk2_mixt(f32p(o), C.long(m), C.long(d), f32p(p), C.long(ldp), f32p(vals), C.long(n), f32pOrNil(base))
}

func f32pOrNil(s []float32) *C.float {
	if s == nil {
		return nil
	}
	return f32p(s)
}

// unpackPlanesAVX512 and unpackPlanesAVX2 are UnpackPlanes's kernels; the
// lengths are checked, and src is exactly the planes (the kernels read
// nothing past it).
func unpackPlanesAVX512(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32) {
	C.kk_unpack_planes(f32p(dst), C.long(ldd), C.long(n), (*C.uint8_t)(&src[0]), C.long(len(src)),
		(*C.uint8_t)(&widths[0]), C.long(len(widths)), f32p(scales), f32p(levels[:]))
}

func unpackPlanesAVX2(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32) {
	C.kk2_unpack_planes(f32p(dst), C.long(ldd), C.long(n), (*C.uint8_t)(&src[0]), C.long(len(src)),
		(*C.uint8_t)(&widths[0]), C.long(len(widths)), f32p(scales), f32p(levels[:]))
}

// transposeAVX2 is Transpose's kernel; the lengths are checked.
func transposeAVX2(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	C.kk2_transpose(f32p(dst), C.long(ldd), f32p(src), C.long(lds), C.long(rows), C.long(cols))
}

// quantRowsC is qTask's rows [r0, r1) by the C kernels: AVX-512 VNNI
// (quant_avx512_amd64.c) where the CPU runs them, else AVX2
// (quant_amd64.c); both give the Go loops' integer block dots exactly,
// the AVX2 K types their f32 scaling bit for bit too; the rest sum the
// scaled blocks in vector lanes, within rounding.
func quantRowsC(t *qTask, r0, r1 int) { quantRowsISA(t, r0, r1, hasQuant512) }

// quantRowsISA is quantRowsC with the kernel family chosen: AVX-512 VNNI
// when avx512 is set.
func quantRowsISA(t *qTask, r0, r1 int, avx512 bool) {
	rows, cols := t.w.Rows, t.w.Cols
	bs := (*C.int32_t)(t.cSums(r1))
	w := (*C.uint8_t)(unsafe.Pointer(&t.w.Q[0]))
	off := (*C.long)(unsafe.Pointer(&t.l.off[0]))
	x := (*C.int8_t)(unsafe.Pointer(&t.a.qs[0]))
	if avx512 {
		C.kq512_rows(C.int(t.l.kind), w, C.long(t.rowB), C.long(r0), C.long(r1), off, x, f32p(t.a.d), bs,
			C.long(t.n), C.long(cols), f32p(t.out), C.long(rows))
		return
	}
	xw := (*C.int16_t)(nil)
	if wideActs(t.l) {
		_ = t.a.wide[t.n*wideCols(cols)-1]
		xw = (*C.int16_t)(unsafe.Pointer(&t.a.wide[0]))
	}
	C.kq_rows(C.int(t.l.kind), w, C.long(t.rowB), C.long(r0), C.long(r1), off, x, xw, f32p(t.a.d), bs,
		C.long(t.n), C.long(cols), f32p(t.out), C.long(rows))
}

// quantRowsX8 is qTask's rows [r0, r1) (r0 a multiple of the interleaved
// group) from t.x8: its groups by the interleaved kernels (the AVX-512
// ones, kq512_rows_x8, for the types that have them where they run, else
// the AVX2 ones, kq_rows_x8), the rows after them by the AVX2 kq_rows over
// the stored rows that t.x8 keeps. All give the Go loops' bits, but for
// the 32-value types' rows after the groups (kq_rows' f32 lanes, within
// rounding).
func quantRowsX8(t *qTask, r0, r1 int) { quantRowsX8ISA(t, r0, r1, hasQuant512) }

// quantRowsX8ISA is quantRowsX8 with the kernel family of the groups
// chosen: AVX-512 VNNI when avx512 is set, t's type has such kernels
// (x8AVX512) and t has more than one token, else AVX2.
func quantRowsX8ISA(t *qTask, r0, r1 int, avx512 bool) {
	iv, rows, cols := t.x8, t.w.Rows, t.w.Cols
	if gr := iv.f.Rows; r0%gr != 0 || r1 < iv.rows && r1%gr != 0 {
		panic(fmt.Sprintf("cpu: rows [%d, %d) split a group of %d interleaved rows", r0, r1, gr))
	}
	_ = t.a.qs[t.n*cols-1]
	_ = t.out[(t.n-1)*rows+r1-1]
	x := (*C.int8_t)(unsafe.Pointer(&t.a.qs[0]))
	bs := (*C.int32_t)(unsafe.Pointer(&t.l.off[0])) // unread for Q8_0
	switch {
	case t.l.kQuant:
		_ = t.a.bsums[t.n*cols/16-1]
		bs = (*C.int32_t)(unsafe.Pointer(&t.a.bsums[0]))
	case blockSums(t.l):
		_ = t.a.sums[t.n*cols/32-1]
		bs = (*C.int32_t)(unsafe.Pointer(&t.a.sums[0]))
	}
	xw := (*C.int16_t)(nil)
	if wideActs(t.l) {
		_ = t.a.wide[t.n*wideCols(cols)-1]
		xw = (*C.int16_t)(unsafe.Pointer(&t.a.wide[0]))
	}
	if g0, g1 := r0/iv.f.Rows, min(r1, iv.rows)/iv.f.Rows; g0 < g1 {
		_ = iv.groups[g1*iv.gb-1]
		// One token takes the AVX2 kernels: the same bits, and in a
		// model's decode (q7l4-Q4_K_M, one thread) 28.6-31.7 tok/s
		// against the AVX-512 ones' 25.8-26.6 (the stored rows' 30.2-32.5),
		// where BenchmarkQuantRows7B n=1 had them the other way round.
		if avx512 && x8AVX512(t.w.DType) && t.n > 1 {
			C.kq512_rows_x8(C.int(t.l.kind), (*C.uint8_t)(unsafe.Pointer(&iv.groups[0])), C.long(iv.gb), C.long(g0), C.long(g1),
				(*C.long)(unsafe.Pointer(&iv.off[0])), x, f32p(t.a.d), bs, C.long(t.n), C.long(cols), f32p(t.out), C.long(rows))
		} else {
			C.kq_rows_x8(C.int(t.l.kind), (*C.uint8_t)(unsafe.Pointer(&iv.groups[0])), C.long(iv.gb), C.long(g0), C.long(g1),
				(*C.long)(unsafe.Pointer(&iv.off[0])), x, xw, f32p(t.a.d), bs, C.long(t.n), C.long(cols), f32p(t.out), C.long(rows))
		}
	}
	if r0 = max(r0, iv.rows); r0 < r1 {
		_ = iv.rest[(r1-iv.rows)*t.rowB-1]
		C.kq_rows(C.int(t.l.kind), (*C.uint8_t)(unsafe.Pointer(&iv.rest[0])), C.long(t.rowB), C.long(r0-iv.rows),
			C.long(r1-iv.rows), (*C.long)(unsafe.Pointer(&t.l.off[0])), x, xw, f32p(t.a.d), bs,
			C.long(t.n), C.long(cols), f32p(t.out[iv.rows:]), C.long(rows))
	}
}

// widenActsC writes token rows [lo, hi) of a's q8_0 activations widened
// into a.wide, as the AVX2 Q8_0 kernel reads them (quant_amd64.c's
// kq_widen).
func widenActsC(a *qActs, lo, hi, cols int) {
	wc := wideCols(cols)
	qs, xw := a.qs[lo*cols:hi*cols], a.wide[lo*wc:hi*wc]
	C.kq_widen((*C.int8_t)(unsafe.Pointer(&qs[0])), C.long(hi-lo), C.long(cols/32), (*C.int16_t)(unsafe.Pointer(&xw[0])))
}

// ransDecode2C is RANSDecode2's kernel call; RANSDecode2 checked the
// tables' extents, and whether lk's slot entries hold their levels (el).
func ransDecode2C(out []float32, g0 int, src []byte, pos, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale []float32, x *[RANSLanes]uint32, el bool) (int, int) {
	if len(src)-pos < 2*RANSLanes {
		return 0, pos
	}
	o, s, e, eo, l, lo, ns, xs := f32p(out), (*C.uint8_t)(&src[0]), (*C.uint32_t)(&ent[0]), (*C.int32_t)(&entOff[0]),
		f32p(lv), (*C.int32_t)(&levOff[0]), (*C.int32_t)(&nsym[0]), (*C.uint32_t)(&x[0])
	sc := f32p(scale)
	var k C.long
	switch {
	case lk != nil && hasRANSLookup:
		k = C.kk_rans2f_decode1(o, C.long(len(out)), C.long(g0), s, C.long(len(src)), C.long(pos), C.long(per), e, eo, l, lo, ns, sc, (*C.uint32_t)(&lk.aux[0]), ransElC(lk, el), xs)
	case hasAVX512:
		k = C.kk_rans2_decode512(o, C.long(len(out)), C.long(g0), s, C.long(len(src)), C.long(pos), C.long(per), e, eo, l, lo, ns, sc, xs)
	case lk != nil:
		k = C.kk_rans2c_decode1(o, C.long(len(out)), C.long(g0), s, C.long(len(src)), C.long(pos), C.long(per), e, eo, l, lo, ns, sc, (*C.uint32_t)(&lk.aux[0]), ransElC(lk, el), xs)
	default:
		k = C.kk_rans2_decode2(o, C.long(len(out)), C.long(g0), s, C.long(len(src)), C.long(pos), C.long(per), e, eo, l, lo, ns, sc, xs)
	}
	return int(k & (1<<32 - 1)), int(k >> 32)
}

// ransElC is lk's slot entries for the lookup kernels (kk_rans2c_* at
// AVX2, and kk_rans2f_* for the lanes they do not find in registers)
// where el says they hold the decode's levels, else null: the kernels
// then read the levels from lv.
func ransElC(lk *RANSLookup, el bool) *C.uint64_t {
	if !el {
		return nil
	}
	return (*C.uint64_t)(&lk.el[0])
}

// ransDecode2StreamsC is RANSDecode2Streams's kernel call;
// RANSDecode2Streams checked the extents.
func ransDecode2StreamsC(out [][]float32, g0 int, src [][]byte, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale [][]float32, st *RANSStreams, el bool) int {
	var o [RANSMaxStreams]*C.float
	var s [RANSMaxStreams]*C.uint8_t
	var sc [RANSMaxStreams]*C.float
	for j := range out {
		o[j], s[j], sc[j] = f32p(out[j]), (*C.uint8_t)(&src[j][0]), f32p(scale[j])
	}
	ns, n, l, p := C.long(len(out)), C.long(len(out[0])), (*C.long)(unsafe.Pointer(&st.len[0])), (*C.long)(unsafe.Pointer(&st.Pos[0]))
	e, eo, lv0, lo, nsy, x := (*C.uint32_t)(&ent[0]), (*C.int32_t)(&entOff[0]), f32p(lv), (*C.int32_t)(&levOff[0]), (*C.int32_t)(&nsym[0]), (*C.uint32_t)(&st.X[0][0])
	var k C.long
	switch {
	case lk != nil && hasRANSLookup:
		k = C.kk_rans2f_decode(ns, o[0], o[1], o[2], o[3], n, C.long(g0), s[0], s[1], s[2], s[3], l, p, C.long(per), e, eo, lv0, lo, nsy, sc[0], sc[1], sc[2], sc[3], (*C.uint32_t)(&lk.aux[0]), ransElC(lk, el), x)
	case hasAVX512:
		k = C.kk_rans2_decode512xn(ns, o[0], o[1], o[2], o[3], n, C.long(g0), s[0], s[1], s[2], s[3], l, p, C.long(per), e, eo, lv0, lo, nsy, sc[0], sc[1], sc[2], sc[3], x)
	case lk != nil:
		k = C.kk_rans2c_decode(ns, o[0], o[1], o[2], o[3], n, C.long(g0), s[0], s[1], s[2], s[3], l, p, C.long(per), e, eo, lv0, lo, nsy, sc[0], sc[1], sc[2], sc[3], (*C.uint32_t)(&lk.aux[0]), ransElC(lk, el), x)
	default:
		k = C.kk_rans2_decode2xn(ns, o[0], o[1], o[2], o[3], n, C.long(g0), s[0], s[1], s[2], s[3], l, p, C.long(per), e, eo, lv0, lo, nsy, sc[0], sc[1], sc[2], sc[3], x)
	}
	return int(k)
}

// quantizeActsC is qQuant's token rows [lo, hi) (lo < hi) by
// quant_amd64.c's AVX2 quantizers, which give the Go loops' bits.
func quantizeActsC(q *qQuant, lo, hi int) {
	c := q.cols
	x := q.x[lo*c : hi*c]
	qs := q.a.qs[lo*c : hi*c]
	if q.k {
		d, bs := q.a.d[lo*c/256:hi*c/256], q.a.bsums[lo*c/16:hi*c/16]
		C.kq_quant_q8_k(f32p(x), C.long(len(d)), (*C.int8_t)(unsafe.Pointer(&qs[0])), f32p(d), (*C.int32_t)(unsafe.Pointer(&bs[0])))
		return
	}
	d := q.a.d[lo*c/32 : hi*c/32]
	sums := (*C.int32_t)(nil)
	if q.sums {
		sums = (*C.int32_t)(unsafe.Pointer(&q.a.sums[lo*c/32 : hi*c/32][0]))
	}
	C.kq_quant_q8_0(f32p(x), C.long(len(d)), (*C.int8_t)(unsafe.Pointer(&qs[0])), f32p(d), sums)
}

// pcLatents returns the C pointers of r's planes and latents: one of them
// nil.
func pcLatents(r *PCRun) (*C.uint8_t, *C.float) {
	if r.Planes != nil {
		return (*C.uint8_t)(&r.Planes[0]), nil
	}
	return nil, f32p(r.Lat)
}

// pcPrefetch returns r.Prefetch's pairs for the kernels and their count:
// nil and 0 where there are none. The pairs are integers, not pointers,
// so cgo's checks let them pass.
func pcPrefetch(r *PCRun) (*C.uint64_t, C.long) {
	if len(r.Prefetch) < 2 {
		return nil, 0
	}
	return (*C.uint64_t)(unsafe.Pointer(&r.Prefetch[0])), C.long(len(r.Prefetch) / 2)
}

// f32pOrEmpty is f32p, nil for an empty slice.
func f32pOrEmpty(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return f32p(s)
}

// pcScoreRun is PCScoreRun's kernel call; the lengths are checked.
func pcScoreRun(r *PCRun, nb int, s []float32, lds int, q []float32, m int, scale float32, cos, sin []float32, r0, r1 int, work []float32) {
	planes, lat := pcLatents(r)
	pf, npf := pcPrefetch(r)
	if hasAVX512 {
		C.kk_pc_keys(C.long(nb), C.long(r.N), C.long(r.D), planes, C.long(r.PlaneBytes), lat, (*C.uint8_t)(&r.Widths[0]),
			C.long(r.C), f32p(r.Levels[:]), f32p(r.Fields), C.long(r.M), f32p(r.Mu), f32pOrEmpty(r.MeanRows),
			f32p(r.Coded), f32p(q), C.long(m), C.float(scale), f32p(cos), f32p(sin), f32p(s), C.long(lds),
			C.long(r0), C.long(r1), f32p(work), pf, npf)
		return
	}
	C.kk2_pc_keys(C.long(nb), C.long(r.N), C.long(r.D), planes, C.long(r.PlaneBytes), lat, (*C.uint8_t)(&r.Widths[0]),
		C.long(r.C), f32p(r.Levels[:]), f32p(r.Fields), C.long(r.M), f32p(r.Mu), f32pOrEmpty(r.MeanRows),
		f32p(r.Coded), f32p(q), C.long(m), C.float(scale), f32p(cos), f32p(sin), f32p(s), C.long(lds),
		C.long(r0), C.long(r1), f32p(work), pf, npf)
}

// pcAddRun is PCAddRun's kernel call; the lengths are checked.
func pcAddRun(r *PCRun, nb int, w []float32, ldw, m, r0, r1 int, acc, macc, wsum, work []float32) {
	planes, lat := pcLatents(r)
	pf, npf := pcPrefetch(r)
	if hasAVX512 {
		C.kk_pc_values(C.long(nb), C.long(r.N), planes, C.long(r.PlaneBytes), lat, (*C.uint8_t)(&r.Widths[0]), C.long(r.C),
			f32p(r.Levels[:]), f32p(r.Fields), C.long(r.M), f32p(w), C.long(ldw), C.long(m), C.long(r0), C.long(r1),
			f32p(acc), f32pOrEmpty(macc), f32p(wsum), f32p(work), pf, npf)
		return
	}
	C.kk2_pc_values(C.long(nb), C.long(r.N), planes, C.long(r.PlaneBytes), lat, (*C.uint8_t)(&r.Widths[0]), C.long(r.C),
		f32p(r.Levels[:]), f32p(r.Fields), C.long(r.M), f32p(w), C.long(ldw), C.long(m), C.long(r0), C.long(r1),
		f32p(acc), f32pOrEmpty(macc), f32p(wsum), f32p(work), pf, npf)
}

// pcAddRunEnd is PCAddRunEnd's kernel call; the lengths are checked.
func pcAddRunEnd(r *PCRun, o []float32, m int, acc, macc, wsum []float32) {
	if hasAVX512 {
		C.kk_pc_values_end(f32p(o), C.long(m), C.long(r.D), f32p(acc), C.long(r.C), f32p(r.Coded), f32pOrEmpty(macc),
			C.long(r.M), f32pOrEmpty(r.MeanRows), f32p(wsum), f32p(r.Mu))
		return
	}
	C.kk2_pc_values_end(f32p(o), C.long(m), C.long(r.D), f32p(acc), C.long(r.C), f32p(r.Coded), f32pOrEmpty(macc),
		C.long(r.M), f32pOrEmpty(r.MeanRows), f32p(wsum), f32p(r.Mu))
}
