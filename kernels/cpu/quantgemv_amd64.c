//go:build cgo

// One token's products with K-quant weights (Q4_K, Q5_K, Q6_K) with AVX2:
// a decode step's GEMV, where every weight byte streams from memory once
// and the unpacking per 256-value block is what a thread waits on. The
// tile kernels of quant_amd64.c unpack a block once for up to 8 tokens,
// with its scales taken one by one as scalars; here, with one token to
// serve, a block's scales and mins are unpacked in a few word operations
// and applied from vectors by byte shuffles, the mins' and Q6_K's offset
// products are taken by vector multiplies, and a block's two integer sums
// are reduced together.
//
// Every row's f32 arithmetic is the tile kernels' one-token arithmetic,
// bit for bit (TestQuantKernelsTileInvariant): per block, the exact
// integer sums, then d = dw·xd and dmin = dmw·xd, a = d·sumi, m =
// dmin·mins, sum = sum + (a - m) (Q6_K: sum = sum + d·sumi), blocks in
// order. The block field offsets come from Go (tensor.Formats), in off[]:
// bytes, d, dmin, scales, qs, qh, ql.

#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif
#pragma GCC target("avx2,fma,f16c")

#define KG_INLINE static inline __attribute__((always_inline))

// The indices of off[] and the types, as quant_amd64.c numbers them.
enum { KG_BYTES, KG_D, KG_DMIN, KG_SCALES, KG_QS, KG_QH, KG_QL };
enum { KG_Q4_K = 2, KG_Q5_K = 3, KG_Q6_K = 4 };

// KG_PF is how far ahead of the block being read the weights are
// prefetched (bytes), as quant_amd64.c's KQ_PF.
#ifndef KG_PF
#define KG_PF 8192
#endif

KG_INLINE void kg_prefetch(const uint8_t *blk, long n) {
	for (long o = 0; o < n; o += 64)
		_mm_prefetch((const char *)(blk + KG_PF + o), _MM_HINT_T0);
}

KG_INLINE uint32_t kg_u32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

// kg_bcast16 is a vector of the 16-bit value j of each 128-bit lane of v,
// for j = lo in the low lane and j = hi in the high one.
KG_INLINE __m256i kg_bcast16(__m256i v, int lo, int hi) {
	const __m256i ctl = _mm256_setr_epi8(2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo,
					     2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1,
					     2 * lo, 2 * lo + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi,
					     2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1,
					     2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1);
	return _mm256_shuffle_epi8(v, ctl);
}

// kg_sum2 returns the sums of the 8 int32 lanes of a and of b, in lanes 0
// and 1.
KG_INLINE __m128i kg_sum2(__m256i a, __m256i b) {
	__m128i a4 = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
	__m128i b4 = _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
	__m128i h = _mm_hadd_epi32(a4, b4); // a01 a23 b01 b23
	return _mm_hadd_epi32(h, h);        // a b a b
}

// kg_q45_k returns one row's dot with the token (x, its scales xd per
// block, bsums per 16 values) for Q4_K (five = 0) and Q5_K.
KG_INLINE float kg_q45_k(const uint8_t *w, const long *off, const int8_t *x, const float *xd, const int32_t *bsums,
			 long nb, int five) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(16);
	const __m256i pairs = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KG_BYTES];
		kg_prefetch(blk, off[KG_BYTES]);
		// The 12 scale bytes as ggml's get_scale_min_k4 reads them:
		// scales 0-3 and mins 0-3 are the low 6 bits of bytes 0-3 and
		// 4-7; scales 4-7 take their low 4 bits from bytes 8-11 and
		// their top 2 from the top of bytes 0-3, mins 4-7 the high
		// nibbles of bytes 8-11 and the top of bytes 4-7.
		const uint8_t *sp = blk + off[KG_SCALES];
		uint32_t w0 = kg_u32(sp), w1 = kg_u32(sp + 4), w2 = kg_u32(sp + 8);
		uint32_t sc03 = w0 & 0x3f3f3f3fu, mn03 = w1 & 0x3f3f3f3fu;
		uint32_t sc47 = (w2 & 0x0f0f0f0fu) | (w0 >> 6 & 0x03030303u) << 4;
		uint32_t mn47 = (w2 >> 4 & 0x0f0f0f0fu) | (w1 >> 6 & 0x03030303u) << 4;
		// Scales 0-7 as 16 bits in both lanes.
		__m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_setr_epi32((int)sc03, (int)sc47, 0, 0)));
		// Σ_j min_j · (bsum_2j + bsum_2j+1): the pair sums come out of
		// VPHADDD as pairs 0 1 4 5 | 2 3 6 7, the mins permuted to match.
		const int32_t *bs = bsums + 16 * b;
		__m256i ps = _mm256_hadd_epi32(_mm256_loadu_si256((const __m256i *)bs),
					       _mm256_loadu_si256((const __m256i *)(bs + 8)));
		__m256i mn = _mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)mn03, (int)mn47, 0, 0)), pairs);
		__m256i mins = _mm256_mullo_epi32(ps, mn);
		__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + off[KG_QH])) : _mm256_setzero_si256();
		__m256i acc = _mm256_setzero_si256();
		const int8_t *xb = x + 256 * b;
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(blk + off[KG_QS] + 32 * c));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			if (five) {
				__m256i u0 = _mm256_set1_epi8((char)(1 << (2 * c))), u1 = _mm256_set1_epi8((char)(2 << (2 * c)));
				lo = _mm256_add_epi8(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u0), u0), b16));
				hi = _mm256_add_epi8(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u1), u1), b16));
			}
			// Pair sums of at most 2*31*127 fit 16 bits.
			__m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xb + 64 * c)));
			__m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xb + 64 * c + 32)));
			acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(p0, kg_bcast16(sc, 2 * c, 2 * c)),
								     _mm256_madd_epi16(p1, kg_bcast16(sc, 2 * c + 1, 2 * c + 1))));
		}
		// [sumi, mins] as f32, times [d, dmin] = [dw, dmw]·xd: the
		// scalar products of the tile kernels, two lanes at once.
		__m128 im = _mm_cvtepi32_ps(kg_sum2(acc, mins));
		__m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)*(const uint16_t *)(blk + off[KG_D]) |
								  (uint32_t)*(const uint16_t *)(blk + off[KG_DMIN]) << 16)));
		__m128 am = _mm_mul_ps(_mm_mul_ps(dd, _mm_set1_ps(xd[b])), im);
		sum = sum + (_mm_cvtss_f32(am) - _mm_cvtss_f32(_mm_movehdup_ps(am)));
	}
	return sum;
}

// kg_q6_k is kg_q45_k for Q6_K: per 32 values the 6-bit codes (low 4 bits
// from ql, top 2 from qh) and their two scales of 16 applied by one
// VPMADDWD; the codes' offset of 32 taken off as Σ_g sc_g·32·bsum_g.
KG_INLINE float kg_q6_k(const uint8_t *w, const long *off, const int8_t *x, const float *xd, const int32_t *bsums,
			long nb) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KG_BYTES];
		kg_prefetch(blk, off[KG_BYTES]);
		__m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + off[KG_SCALES]));
		// Scales 0-7 and 8-15 as 16 bits, each set in both lanes.
		__m256i s16 = _mm256_cvtepi8_epi16(sc8);
		__m256i slo = _mm256_permute2x128_si256(s16, s16, 0x00), shi = _mm256_permute2x128_si256(s16, s16, 0x11);
		const int32_t *bs = bsums + 16 * b;
		__m256i off32 = _mm256_add_epi32(
		    _mm256_mullo_epi32(_mm256_cvtepi8_epi32(sc8), _mm256_loadu_si256((const __m256i *)bs)),
		    _mm256_mullo_epi32(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8)), _mm256_loadu_si256((const __m256i *)(bs + 8))));
		__m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off32, 5));
		const int8_t *xb = x + 256 * b;
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = blk + off[KG_QL] + 64 * h;
			__m256i qh = _mm256_loadu_si256((const __m256i *)(blk + off[KG_QH] + 32 * h));
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i s = h ? shi : slo;
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) {
				__m256i l = k & 1 ? l1 : l0;
				__m256i q = _mm256_or_si256(_mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4),
							    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2), 4));
				// Pair sums of at most 2*63*127 fit 16 bits.
				__m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(xb + 128 * h + 32 * k)));
				acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, kg_bcast16(s, 2 * k, 2 * k + 1)));
			}
		}
		__m128i t = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
		t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
		t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
		float dw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*(const uint16_t *)(blk + off[KG_D]))));
		float d = dw * xd[b];
		sum = sum + d * (float)_mm_cvtsi128_si32(t);
	}
	return sum;
}

// kq_gemv_k sets out[r] for rows [r0, r1) of w (rowb bytes each, type
// Q4_K, Q5_K or Q6_K) and one token of q8_K activations: x (cols int8),
// xd (its scale per 256), bsums (its sums per 16).
void kq_gemv_k(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
	       const float *xd, const int32_t *bsums, long cols, float *out) {
	long nb = cols / 256;
	for (long r = r0; r < r1; r++) {
		const uint8_t *wr = w + r * rowb;
		switch (type) {
		case KG_Q4_K:
			out[r] = kg_q45_k(wr, off, x, xd, bsums, nb, 0);
			break;
		case KG_Q5_K:
			out[r] = kg_q45_k(wr, off, x, xd, bsums, nb, 1);
			break;
		default:
			out[r] = kg_q6_k(wr, off, x, xd, bsums, nb);
			break;
		}
	}
}
