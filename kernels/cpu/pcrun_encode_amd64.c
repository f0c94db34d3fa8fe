//go:build cgo

// The scale search of codec.KakeyaPC's encoder (cpu.PCScaleTrials): a
// coded component's n values tried at up to 16 scales, the trials side by
// side in the lanes of a vector, one value at a time. Per value and trial
// the cell comes from a CellGrid (a gather of the grid step's count, a
// gather of the bound above it, a compare), the level and the cell's cost
// from two more gathers; the squared error is taken in float64 and summed
// in value order in each trial's lane, as the Go loop sums it, so every
// trial's sums are the Go loop's bit for bit (a product of two floats is
// exact in float64, so the fused multiply-add rounds once, as the Go sum
// does). Values are finite (the encoder checks its input).

#include <stdint.h>
#include <immintrin.h>

#define KK_INLINE static inline __attribute__((always_inline))

// A product and a difference written apart stay apart, as in the Go loop.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

// KK_CELL_TOP is the last grid step (cpu.CellGridSteps - 1).
#define KK_CELL_TOP 1023.0f

// pc_trials512 is kk_pc_trials512 with or without costs.
__attribute__((target("avx512f,avx512bw,avx512vl"))) KK_INLINE void pc_trials512(
	const int ec, const float *col, long n, const float *scale, const float *inv, long k, const int32_t *base,
	float lo, float ginv, const float *bounds, const float *lv, const float *cost, double *e, double *l,
	uint8_t *codes) {
	const __mmask16 km = (__mmask16)((1u << k) - 1);
	const __m512 s = _mm512_maskz_loadu_ps(km, scale), iv = _mm512_maskz_loadu_ps(km, inv);
	const __m512 vlo = _mm512_set1_ps(lo), vg = _mm512_set1_ps(ginv), top = _mm512_set1_ps(KK_CELL_TOP);
	const __m512 zero = _mm512_setzero_ps();
	const __m512i one = _mm512_set1_epi32(1), none = _mm512_setzero_si512();
	__m512d e0 = _mm512_setzero_pd(), e1 = e0, l0 = e0, l1 = e0;
	for (long i = 0; i < n; i++) {
		const __m512 r = _mm512_set1_ps(col[i]);
		const __m512 x = _mm512_mul_ps(r, iv);
		// The grid step: (x - lo)*ginv truncated, 0 where not above 0
		// (MAXPS gives its second operand for a NaN), at most the last.
		const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(x, vlo), vg), zero), top);
		__m512i q = _mm512_mask_i32gather_epi32(none, km, _mm512_cvttps_epi32(t), base, 4);
		const __m512 b = _mm512_mask_i32gather_ps(zero, km, q, bounds, 4);
		q = _mm512_mask_add_epi32(q, _mm512_mask_cmp_ps_mask(km, x, b, _CMP_GT_OQ), q, one);
		const __m512 v = _mm512_mul_ps(_mm512_mask_i32gather_ps(zero, km, q, lv, 4), s);
		const __m512 d = _mm512_sub_ps(r, v);
		const __m512d dlo = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
		const __m512d dhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
		e0 = _mm512_fmadd_pd(dlo, dlo, e0);
		e1 = _mm512_fmadd_pd(dhi, dhi, e1);
		if (ec) {
			const __m512 c = _mm512_mask_i32gather_ps(zero, km, q, cost, 4);
			l0 = _mm512_add_pd(l0, _mm512_cvtps_pd(_mm512_castps512_ps256(c)));
			l1 = _mm512_add_pd(l1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1))));
		}
		_mm_storeu_si128((__m128i *)(codes + 16 * i), _mm512_cvtepi32_epi8(q));
	}
	_mm512_mask_storeu_pd(e, (__mmask8)km, e0);
	_mm512_mask_storeu_pd(e + 8, (__mmask8)(km >> 8), e1);
	if (ec) {
		_mm512_mask_storeu_pd(l, (__mmask8)km, l0);
		_mm512_mask_storeu_pd(l + 8, (__mmask8)(km >> 8), l1);
	}
}

// pc_trials512x2 is pc_trials512 for k <= 8 trials, two values at a
// time: lanes 0-7 hold value i's trials, lanes 8-15 value i+1's, so a
// gather serves both; each trial's sums still add value i's term, then
// value i+1's.
__attribute__((target("avx512f,avx512bw,avx512vl"))) KK_INLINE void pc_trials512x2(
	const int ec, const float *col, long n, const float *scale, const float *inv, long k, const int32_t *base,
	float lo, float ginv, const float *bounds, const float *lv, const float *cost, double *e, double *l,
	uint8_t *codes) {
	const __mmask16 k1 = (__mmask16)((1u << k) - 1), km = (__mmask16)(k1 | k1 << 8);
	const __m512i half = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
	const __m512 s = _mm512_permutexvar_ps(half, _mm512_maskz_loadu_ps(k1, scale));
	const __m512 iv = _mm512_permutexvar_ps(half, _mm512_maskz_loadu_ps(k1, inv));
	const __m512 vlo = _mm512_set1_ps(lo), vg = _mm512_set1_ps(ginv), top = _mm512_set1_ps(KK_CELL_TOP);
	const __m512 zero = _mm512_setzero_ps();
	const __m512i one = _mm512_set1_epi32(1), none = _mm512_setzero_si512();
	__m512d acc = _mm512_setzero_pd(), len = acc;
	for (long i = 0; i < n; i += 2) {
		// The last of an odd count runs in the low lanes alone.
		const __mmask16 mk = i + 1 < n ? km : k1;
		const __m512 r = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(col[i]), _mm512_set1_ps(col[i + 1 < n ? i + 1 : i]));
		const __m512 x = _mm512_mul_ps(r, iv);
		const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(x, vlo), vg), zero), top);
		__m512i q = _mm512_mask_i32gather_epi32(none, mk, _mm512_cvttps_epi32(t), base, 4);
		const __m512 b = _mm512_mask_i32gather_ps(zero, mk, q, bounds, 4);
		q = _mm512_mask_add_epi32(q, _mm512_mask_cmp_ps_mask(mk, x, b, _CMP_GT_OQ), q, one);
		const __m512 v = _mm512_mul_ps(_mm512_mask_i32gather_ps(zero, mk, q, lv, 4), s);
		const __m512 d = _mm512_sub_ps(r, v);
		const __m512d dlo = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
		acc = _mm512_fmadd_pd(dlo, dlo, acc);
		__m512d c0 = _mm512_setzero_pd(), c1 = c0;
		if (ec) {
			const __m512 c = _mm512_mask_i32gather_ps(zero, mk, q, cost, 4);
			c0 = _mm512_cvtps_pd(_mm512_castps512_ps256(c));
			c1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1)));
			len = _mm512_add_pd(len, c0);
		}
		const __m128i qb = _mm512_cvtepi32_epi8(q);
		_mm_storel_epi64((__m128i *)(codes + 16 * i), qb);
		if (i + 1 < n) {
			const __m512d dhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
			acc = _mm512_fmadd_pd(dhi, dhi, acc);
			if (ec) len = _mm512_add_pd(len, c1);
			_mm_storel_epi64((__m128i *)(codes + 16 * (i + 1)), _mm_unpackhi_epi64(qb, qb));
		}
	}
	_mm512_mask_storeu_pd(e, (__mmask8)k1, acc);
	if (ec) _mm512_mask_storeu_pd(l, (__mmask8)k1, len);
}

// kk_pc_trials512 sets e[t] to the sum over the n values r = col[i] of
// (r - lv[q]*scale[t])², q the cell of r*inv[t] (base, lo, ginv and
// bounds: a cpu.CellGrid), in float64 in value order; l[t] to the sum of
// cost[q] where cost is not NULL; and codes[16*i + t] to q, for the k <=
// 16 trials t. AVX-512.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void kk_pc_trials512(
	const float *col, long n, const float *scale, const float *inv, long k, const int32_t *base, float lo, float ginv,
	const float *bounds, const float *lv, const float *cost, double *e, double *l, uint8_t *codes) {
	if (k <= 8) {
		if (cost) {
			pc_trials512x2(1, col, n, scale, inv, k, base, lo, ginv, bounds, lv, cost, e, l, codes);
		} else {
			pc_trials512x2(0, col, n, scale, inv, k, base, lo, ginv, bounds, lv, cost, e, l, codes);
		}
	} else if (cost) {
		pc_trials512(1, col, n, scale, inv, k, base, lo, ginv, bounds, lv, cost, e, l, codes);
	} else {
		pc_trials512(0, col, n, scale, inv, k, base, lo, ginv, bounds, lv, cost, e, l, codes);
	}
}

// pc_trials8 is kk2_pc_trials for trials [8h, 8h+8) (lanes at or past k
// masked off), with or without costs.
__attribute__((target("avx2,fma"))) KK_INLINE void pc_trials8(const int ec, const float *col, long n,
							       const float *scale, const float *inv, long k, long h,
							       const int32_t *base, float lo, float ginv,
							       const float *bounds, const float *lv, const float *cost,
							       double *e, double *l, uint8_t *codes) {
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i mi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(k - 8 * h)), lane);
	const __m256 m = _mm256_castsi256_ps(mi);
	const __m256 s = _mm256_maskload_ps(scale + 8 * h, mi), iv = _mm256_maskload_ps(inv + 8 * h, mi);
	const __m256 vlo = _mm256_set1_ps(lo), vg = _mm256_set1_ps(ginv), top = _mm256_set1_ps(KK_CELL_TOP);
	const __m256 zero = _mm256_setzero_ps();
	const __m256i none = _mm256_setzero_si256();
	__m256d e0 = _mm256_setzero_pd(), e1 = e0, l0 = e0, l1 = e0;
	for (long i = 0; i < n; i++) {
		const __m256 r = _mm256_broadcast_ss(col + i);
		const __m256 x = _mm256_mul_ps(r, iv);
		const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(x, vlo), vg), zero), top);
		__m256i q = _mm256_mask_i32gather_epi32(none, (const int *)base, _mm256_cvttps_epi32(t), mi, 4);
		const __m256 b = _mm256_mask_i32gather_ps(zero, bounds, q, m, 4);
		// A true compare is -1: subtracting it adds one.
		q = _mm256_sub_epi32(q, _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(x, b, _CMP_GT_OQ)), mi));
		const __m256 v = _mm256_mul_ps(_mm256_mask_i32gather_ps(zero, lv, q, m, 4), s);
		const __m256 d = _mm256_sub_ps(r, v);
		const __m256d dlo = _mm256_cvtps_pd(_mm256_castps256_ps128(d)), dhi = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
		e0 = _mm256_fmadd_pd(dlo, dlo, e0);
		e1 = _mm256_fmadd_pd(dhi, dhi, e1);
		if (ec) {
			const __m256 c = _mm256_mask_i32gather_ps(zero, cost, q, m, 4);
			l0 = _mm256_add_pd(l0, _mm256_cvtps_pd(_mm256_castps256_ps128(c)));
			l1 = _mm256_add_pd(l1, _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1)));
		}
		// Codes 0..255 packed to bytes: dwords to words to bytes.
		const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
		_mm_storel_epi64((__m128i *)(codes + 16 * i + 8 * h), _mm_packus_epi16(w, w));
	}
	double out[16];
	_mm256_storeu_pd(out, e0);
	_mm256_storeu_pd(out + 4, e1);
	if (ec) {
		_mm256_storeu_pd(out + 8, l0);
		_mm256_storeu_pd(out + 12, l1);
	}
	for (long t = 8 * h; t < k && t < 8 * h + 8; t++) {
		e[t] = out[t - 8 * h];
		if (ec) l[t] = out[8 + t - 8 * h];
	}
}

// kk2_pc_trials is kk_pc_trials512 with AVX2: eight trials at a time.
__attribute__((target("avx2,fma"))) void kk2_pc_trials(const float *col, long n, const float *scale, const float *inv,
							 long k, const int32_t *base, float lo, float ginv,
							 const float *bounds, const float *lv, const float *cost, double *e,
							 double *l, uint8_t *codes) {
	for (long h = 0; 8 * h < k; h++) {
		if (cost) {
			pc_trials8(1, col, n, scale, inv, k, h, base, lo, ginv, bounds, lv, cost, e, l, codes);
		} else {
			pc_trials8(0, col, n, scale, inv, k, h, base, lo, ginv, bounds, lv, cost, e, l, codes);
		}
	}
}
