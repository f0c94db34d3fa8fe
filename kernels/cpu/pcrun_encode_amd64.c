//go:build cgo

// The scale search of codec.KakeyaPC's encoder (cpu.PCScaleTrials): a
// coded component's n values tried at up to 16 scales, eight trials side
// by side in the lanes of a vector, one value at a time. Per value and
// trial the cell comes from a CellGrid: the lane's grid step's entry (the
// count at the step's lowest float, the bound above it, the two cells'
// levels and costs) read with one 32-byte load, the eight lanes' entries
// transposed into fields, and one compare picks the cell, its level and
// its cost. A gather per field measured slower on this CPU (about 13
// cycles a gather at AVX2 and AVX-512 alike). The squared error is taken
// in float64 and summed in value order in each trial's lane, as the Go
// loop sums it, so every trial's sums are the Go loop's bit for bit (a
// product of two floats is exact in float64, so the fused multiply-add
// rounds once, as the Go sum does). Values are finite (the encoder
// checks its input).

#include <stdint.h>
#include <immintrin.h>

#define KK_INLINE static inline __attribute__((always_inline))

// A product and a difference written apart stay apart, as in the Go loop.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

// KK_CELL_TOP is the last grid step (cpu.CellGridSteps - 1); KK_CELL_ENT
// the floats of a step's entry (cellEntry).
#define KK_CELL_TOP 1023.0f
#define KK_CELL_ENT 8

// tr8 transposes the 8x8 floats of r: r[c][j] becomes r[j][c].
__attribute__((target("avx2"))) KK_INLINE void tr8(__m256 r[8]) {
	const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
	const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
	const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
	const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
	const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
	const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
	const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
	const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
	r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
	r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
	r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
	r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// pc_trials8 is kk2_pc_trials for trials [8h, 8h+8) (lanes at or past k
// computed but not stored), with or without costs.
__attribute__((target("avx2,fma"))) KK_INLINE void pc_trials8(const int ec, const float *col, long n,
							       const float *scale, const float *inv, long k, long h,
							       const float *ent, float lo, float ginv, double *e, double *l,
							       uint8_t *codes) {
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i mi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(k - 8 * h)), lane);
	const __m256 s = _mm256_maskload_ps(scale + 8 * h, mi), iv = _mm256_maskload_ps(inv + 8 * h, mi);
	const __m256 vlo = _mm256_set1_ps(lo), vg = _mm256_set1_ps(ginv), top = _mm256_set1_ps(KK_CELL_TOP);
	const __m256 zero = _mm256_setzero_ps();
	__m256d e0 = _mm256_setzero_pd(), e1 = e0, l0 = e0, l1 = e0;
	for (long i = 0; i < n; i++) {
		const __m256 r = _mm256_broadcast_ss(col + i);
		const __m256 x = _mm256_mul_ps(r, iv);
		// The grid step: (x - lo)*ginv truncated, 0 where not above 0
		// (MAXPS gives its second operand for a NaN), at most the last.
		const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(x, vlo), vg), zero), top);
		int32_t g[8];
		_mm256_storeu_si256((__m256i *)g, _mm256_cvttps_epi32(t));
		__m256 f[8];
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) f[j] = _mm256_loadu_ps(ent + (long)g[j] * KK_CELL_ENT);
		tr8(f);
		// f: the counts (int32 bits), the bounds above them, the levels
		// and costs of those cells and the next.
		const __m256 up = _mm256_cmp_ps(x, f[1], _CMP_GT_OQ);
		// A true compare is -1: subtracting it adds one.
		const __m256i q = _mm256_sub_epi32(_mm256_castps_si256(f[0]), _mm256_castps_si256(up));
		const __m256 v = _mm256_mul_ps(_mm256_blendv_ps(f[2], f[3], up), s);
		const __m256 d = _mm256_sub_ps(r, v);
		const __m256d dlo = _mm256_cvtps_pd(_mm256_castps256_ps128(d)), dhi = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
		e0 = _mm256_fmadd_pd(dlo, dlo, e0);
		e1 = _mm256_fmadd_pd(dhi, dhi, e1);
		if (ec) {
			const __m256 c = _mm256_blendv_ps(f[4], f[5], up);
			l0 = _mm256_add_pd(l0, _mm256_cvtps_pd(_mm256_castps256_ps128(c)));
			l1 = _mm256_add_pd(l1, _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1)));
		}
		// Cells 0..255 packed to bytes: dwords to words to bytes.
		const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
		_mm_storel_epi64((__m128i *)(codes + 16 * i + 8 * h), _mm_packus_epi16(w, w));
	}
	double out[16];
	_mm256_storeu_pd(out, e0);
	_mm256_storeu_pd(out + 4, e1);
	_mm256_storeu_pd(out + 8, l0);
	_mm256_storeu_pd(out + 12, l1);
	for (long t = 8 * h; t < k && t < 8 * h + 8; t++) {
		e[t] = out[t - 8 * h];
		if (ec) l[t] = out[8 + t - 8 * h];
	}
}

// kk2_pc_trials sets e[t] to the sum over the n values r = col[i] of
// (r - lv[q]*scale[t])², q the cell of r*inv[t] (ent, lo and ginv: a
// cpu.CellGrid with its cells set), in float64 in value order; l[t] to
// the sum of the cells' costs where ec; and codes[16*i + t] to q, for the
// k <= 16 trials t, eight at a time. AVX2.
__attribute__((target("avx2,fma"))) void kk2_pc_trials(const float *col, long n, const float *scale, const float *inv,
							 long k, const float *ent, float lo, float ginv, long ec,
							 double *e, double *l, uint8_t *codes) {
	for (long h = 0; 8 * h < k; h++) {
		if (ec) {
			pc_trials8(1, col, n, scale, inv, k, h, ent, lo, ginv, e, l, codes);
		} else {
			pc_trials8(0, col, n, scale, inv, k, h, ent, lo, ginv, e, l, codes);
		}
	}
}
