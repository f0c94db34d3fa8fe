//go:build cgo

// Matrix products of bf16 weights on CPUs with AVX512_BF16, through the
// VDPBF16PS instruction (Go's assembler has no mnemonic for it, so these few
// kernels are C with compiler intrinsics). VDPBF16PS multiplies pairs of
// bf16 values and adds both products to an f32 lane, so the activations are
// given as bf16 too: as one plane (x rounded to bf16, the arithmetic of
// llama.cpp's BF16 matmul) or as two (hi = bf16(x), lo = bf16(x - hi)),
// whose sum carries 16 bits of x's mantissa and gives products within about
// 2^-17 of the f32 ones. Accumulation is f32 throughout, and every output's
// sum runs in one fixed order whatever the split of work across threads.

#include <stdint.h>
#include <immintrin.h>

#define KK_INLINE static inline __attribute__((always_inline))

// kk_bf16_supported reports whether the CPU and OS run AVX512_BF16 code.
int kk_bf16_supported(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

// Everything below runs only after kk_bf16_supported said yes.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

// KK_PANEL is the number of weight rows a GEMM panel holds: two zmm
// registers of f32 outputs.
#define KK_PANEL 32
// KK_MR is the number of tokens one micro-tile holds: 2*KK_MR accumulators
// plus two weight registers and a broadcast fit AVX-512's 32 registers.
#define KK_MR 12

// kk_pack_x rounds the n rows of x (each cols floats) to bf16 into hi, and
// when lo is not NULL their remainders x - hi into lo, each row padded with
// zeros to ld values (ld even, >= cols). Rounding is to nearest even.
void kk_pack_x(const float *x, long n, long cols, long ld, uint16_t *hi, uint16_t *lo) {
	for (long t = 0; t < n; t++) {
		const float *xr = x + t * cols;
		uint16_t *h = hi + t * ld, *l = lo ? lo + t * ld : 0;
		long c = 0;
		for (; c + 16 <= cols; c += 16) {
			__m512 v = _mm512_loadu_ps(xr + c);
			__m256bh b = _mm512_cvtneps_pbh(v);
			_mm256_storeu_si256((__m256i *)(h + c), (__m256i)b);
			if (l) {
				__m512 r = _mm512_sub_ps(v, _mm512_cvtpbh_ps(b));
				_mm256_storeu_si256((__m256i *)(l + c), (__m256i)_mm512_cvtneps_pbh(r));
			}
		}
		if (c < cols) {
			__mmask16 m = (__mmask16)((1u << (cols - c)) - 1);
			__m512 v = _mm512_maskz_loadu_ps(m, xr + c);
			__m256bh b = _mm512_cvtneps_pbh(v);
			_mm256_mask_storeu_epi16(h + c, m, (__m256i)b);
			if (l) {
				__m512 r = _mm512_sub_ps(v, _mm512_cvtpbh_ps(b));
				_mm256_mask_storeu_epi16(l + c, m, (__m256i)_mm512_cvtneps_pbh(r));
			}
		}
		for (c = cols; c < ld; c++) {
			h[c] = 0;
			if (l) l[c] = 0;
		}
	}
}

// pack_panel copies rows [0, nr) of w (row stride cols) into panel as pairs:
// for pair q, KK_PANEL dwords holding (w[j][2q], w[j][2q+1]) for j = 0..31,
// zero past nr rows or cols columns.
KK_INLINE void pack_panel(const uint16_t *w, long cols, int nr, uint32_t *panel) {
	long pairs = (cols + 1) / 2, even = cols & ~1L;
	for (int j = 0; j < KK_PANEL; j++) {
		uint32_t *dst = panel + j;
		if (j >= nr) {
			for (long q = 0; q < pairs; q++) dst[q * KK_PANEL] = 0;
			continue;
		}
		const uint16_t *row = w + (long)j * cols;
		long q = 0;
		for (; 2 * q < even; q++) {
			dst[q * KK_PANEL] = (uint32_t)row[2 * q] | (uint32_t)row[2 * q + 1] << 16;
		}
		if (cols & 1) dst[q * KK_PANEL] = row[cols - 1];
	}
}

// tile computes mr tokens' outputs for the panel's rows: out[i*ldo + j] for
// j < 32 under masks m0 (rows 0..15) and m1 (16..31). x planes hold ld bf16
// per token; pairs is the panel's depth.
KK_INLINE void tile(const int mr, const int planes, const uint32_t *restrict panel,
		    const uint32_t *restrict xh, const uint32_t *restrict xl, long ldq, long pairs,
		    float *restrict out, long ldo, __mmask16 m0, __mmask16 m1) {
	__m512 a0[KK_MR], a1[KK_MR];
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm512_setzero_ps();
	for (long q = 0; q < pairs; q++) {
		__m512bh w0 = (__m512bh)_mm512_loadu_si512(panel + q * KK_PANEL);
		__m512bh w1 = (__m512bh)_mm512_loadu_si512(panel + q * KK_PANEL + 16);
#pragma GCC unroll 12
		for (int i = 0; i < mr; i++) {
			__m512bh b = (__m512bh)_mm512_set1_epi32((int)xh[i * ldq + q]);
			a0[i] = _mm512_dpbf16_ps(a0[i], w0, b);
			a1[i] = _mm512_dpbf16_ps(a1[i], w1, b);
			if (planes == 2) {
				b = (__m512bh)_mm512_set1_epi32((int)xl[i * ldq + q]);
				a0[i] = _mm512_dpbf16_ps(a0[i], w0, b);
				a1[i] = _mm512_dpbf16_ps(a1[i], w1, b);
			}
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) {
		_mm512_mask_storeu_ps(out + i * ldo, m0, a0[i]);
		_mm512_mask_storeu_ps(out + i * ldo + 16, m1, a1[i]);
	}
}

#define KK_TILES(planes)                                                                                       \
	switch (mr) {                                                                                          \
	case 12: tile(12, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                          \
	case 11: tile(11, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                          \
	case 10: tile(10, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                          \
	case 9: tile(9, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 8: tile(8, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 7: tile(7, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 6: tile(6, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 5: tile(5, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 4: tile(4, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 3: tile(3, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	case 2: tile(2, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                            \
	default: tile(1, planes, panel, xh, xl, ldq, pairs, o, ldo, m0, m1); break;                           \
	}

// kk_gemm_panel computes out[t*ldo + j] = Σ_c x[t][c]·w[j][c] for the n
// tokens and the nr <= 32 weight rows starting at w (row stride cols),
// packing the rows into panel (KK_PANEL * ld/2 dwords of scratch) first. xh
// and xl (NULL for one plane) are kk_pack_x's planes with row stride ld.
void kk_gemm_panel(const uint16_t *w, long cols, int nr, uint32_t *panel,
			     const uint16_t *xh16, const uint16_t *xl16, long ld, long n,
			     float *out, long ldo) {
	long pairs = (cols + 1) / 2, ldq = ld / 2;
	pack_panel(w, cols, nr, panel);
	__mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	__mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
	const uint32_t *xh0 = (const uint32_t *)xh16, *xl0 = (const uint32_t *)xl16;
	for (long t = 0; t < n; t += KK_MR) {
		int mr = n - t < KK_MR ? (int)(n - t) : KK_MR;
		const uint32_t *xh = xh0 + t * ldq, *xl = xl0 ? xl0 + t * ldq : 0;
		float *o = out + t * ldo;
		if (xl) {
			KK_TILES(2)
		} else {
			KK_TILES(1)
		}
	}
}

// gemv_row returns the dot product of one weight row with the x planes.
// Rows are read one after another, whole: one sequential stream for the
// hardware prefetcher, which interleaved rows would break into several
// (measured: 20 GB/s for one stream against 12 for four on the lm_head).
KK_INLINE float gemv_row(const int planes, const uint16_t *restrict w, long cols,
			 const uint16_t *restrict xh, const uint16_t *restrict xl) {
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
	long c = 0;
	for (; c + 64 <= cols; c += 64) {
		__m512bh v0 = (__m512bh)_mm512_loadu_si512(w + c);
		__m512bh v1 = (__m512bh)_mm512_loadu_si512(w + c + 32);
		a0 = _mm512_dpbf16_ps(a0, v0, (__m512bh)_mm512_loadu_si512(xh + c));
		a1 = _mm512_dpbf16_ps(a1, v1, (__m512bh)_mm512_loadu_si512(xh + c + 32));
		if (planes == 2) {
			b0 = _mm512_dpbf16_ps(b0, v0, (__m512bh)_mm512_loadu_si512(xl + c));
			b1 = _mm512_dpbf16_ps(b1, v1, (__m512bh)_mm512_loadu_si512(xl + c + 32));
		}
	}
	for (; c < cols; c += 32) {
		__mmask32 m = cols - c >= 32 ? 0xffffffffu : (__mmask32)((1ull << (cols - c)) - 1);
		__m512bh v = (__m512bh)_mm512_maskz_loadu_epi16(m, w + c);
		a0 = _mm512_dpbf16_ps(a0, v, (__m512bh)_mm512_maskz_loadu_epi16(m, xh + c));
		if (planes == 2) b0 = _mm512_dpbf16_ps(b0, v, (__m512bh)_mm512_maskz_loadu_epi16(m, xl + c));
	}
	__m512 s = _mm512_add_ps(a0, a1);
	if (planes == 2) s = _mm512_add_ps(s, _mm512_add_ps(b0, b1));
	return _mm512_reduce_add_ps(s);
}

// kk_gemv sets out[r] = w[r]·x for rows [lo, hi) of w (row stride cols),
// with x given as kk_pack_x's planes (xl NULL for one).
void kk_gemv(const uint16_t *w, long cols, long lo, long hi, const uint16_t *xh, const uint16_t *xl, float *out) {
	if (xl) {
		for (long r = lo; r < hi; r++) out[r] = gemv_row(2, w + r * cols, cols, xh, xl);
	} else {
		for (long r = lo; r < hi; r++) out[r] = gemv_row(1, w + r * cols, cols, xh, xh);
	}
}
