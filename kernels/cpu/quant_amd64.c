//go:build cgo

// Matrix products of quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K) with
// 8-bit quantized activations, with AVX2: each block's integer dot product
// by VPMADDUBSW/VPMADDWD, exact, then the block's scaling in f32 in the
// order quant.go's Go loops use, so both give the same bits. The block
// field offsets come from Go (tensor.Formats), in off[]:
// bytes, d, dmin, scales, qs, qh, ql.

#include <stdint.h>
#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif
#pragma GCC target("avx2,fma,f16c")

#define KQ_INLINE static inline __attribute__((always_inline))

enum { KQ_BYTES, KQ_D, KQ_DMIN, KQ_SCALES, KQ_QS, KQ_QH, KQ_QL };
enum { KQ_Q8_0, KQ_Q4_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_Q5_0 };

KQ_INLINE float kq_f16(const uint8_t *p) {
	uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
	return _cvtsh_ss(h);
}

KQ_INLINE int32_t kq_hsum(__m256i v) {
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

KQ_INLINE int32_t kq_hsum128(__m128i s) {
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

// Σ a[i]*b[i] for unsigned a (at most 128) and signed b, as 8 int32 partial
// sums: lanes 0-3 hold bytes 0-15, lanes 4-7 bytes 16-31.
KQ_INLINE __m256i kq_dot_us(__m256i a, __m256i b) {
	return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// Σ a[i]*b[i] for signed a and b.
KQ_INLINE __m256i kq_dot_ss(__m256i a, __m256i b) {
	return kq_dot_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// KQ_PF is how far ahead of the block being read the kernels prefetch
// the weights (bytes): a decode streams every weight once from memory,
// and one thread's sequential reads alone left it waiting on them (with
// the prefetch, Qwen2.5-0.5B Q4_K_M decode on one AVX-512 thread went
// from about 11 to 16 tokens/s).
#define KQ_PF 2048

// kq_prefetch asks for the cache lines of the block of n bytes KQ_PF
// ahead of blk: a prefetch does not fault, so past the matrix's end is
// harmless.
KQ_INLINE void kq_prefetch(const uint8_t *blk, long n) {
	for (long o = 0; o < n; o += 64)
		_mm_prefetch((const char *)(blk + KQ_PF + o), _MM_HINT_T0);
}

static float kq_q8_0(const uint8_t *w, const long *off, const int8_t *x, const float *xd, long nb) {
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		__m256i q = _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QS]));
		__m256i v = _mm256_loadu_si256((const __m256i *)(x + 32 * b));
		int32_t si = kq_hsum(kq_dot_ss(q, v));
		float s = kq_f16(blk + off[KQ_D]) * xd[b];
		float p = (float)si * s;
		sum = sum + p;
	}
	return sum;
}

static float kq_q4_0(const uint8_t *w, const long *off, const int8_t *x, const float *xd, long nb) {
	const __m128i m4 = _mm_set1_epi8(0x0f), e8 = _mm_set1_epi8(8);
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		__m128i q = _mm_loadu_si128((const __m128i *)(blk + off[KQ_QS]));
		__m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), e8);
		__m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), e8);
		__m256i nib = _mm256_set_m128i(hi, lo);
		__m256i v = _mm256_loadu_si256((const __m256i *)(x + 32 * b));
		int32_t si = kq_hsum(kq_dot_ss(nib, v));
		float s = kq_f16(blk + off[KQ_D]) * xd[b];
		float p = (float)si * s;
		sum = sum + p;
	}
	return sum;
}

// kq_bits32 spreads the 32 bits of qh over 32 bytes: 0xFF where bit j of
// qh is set, at byte j.
KQ_INLINE __m256i kq_bits32(uint32_t qh) {
	const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
					      3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
	return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

KQ_INLINE uint32_t kq_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static float kq_q5_0(const uint8_t *w, const long *off, const int8_t *x, const float *xd, long nb) {
	const __m128i m4 = _mm_set1_epi8(0x0f);
	const __m256i b16 = _mm256_set1_epi8(16);
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		__m128i q = _mm_loadu_si128((const __m128i *)(blk + off[KQ_QS]));
		__m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
		__m256i five = _mm256_and_si256(kq_bits32(kq_u32(blk + off[KQ_QH])), b16);
		nib = _mm256_sub_epi8(_mm256_or_si256(nib, five), b16);
		__m256i v = _mm256_loadu_si256((const __m256i *)(x + 32 * b));
		int32_t si = kq_hsum(kq_dot_ss(nib, v));
		float s = kq_f16(blk + off[KQ_D]) * xd[b];
		float p = (float)si * s;
		sum = sum + p;
	}
	return sum;
}

// kq_scale_min is ggml's get_scale_min_k4.
KQ_INLINE void kq_scale_min(int j, const uint8_t *q, int32_t *sc, int32_t *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

static float kq_q45_k(const uint8_t *w, const long *off, const int8_t *x, const float *xd, const int32_t *bsums,
		      long nb, int five) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(16);
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		const uint8_t *sc = blk + off[KQ_SCALES];
		const int8_t *xs = x + 256 * b;
		const int32_t *bs = bsums + 16 * b;
		__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QH])) : _mm256_setzero_si256();
		int32_t sumi = 0, mins = 0;
		for (int c = 0; c < 4; c++) {
			int32_t s0, m0, s1, m1;
			kq_scale_min(2 * c, sc, &s0, &m0);
			kq_scale_min(2 * c + 1, sc, &s1, &m1);
			__m256i q = _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QS] + 32 * c));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			if (five) {
				__m256i u0 = _mm256_set1_epi8((char)(1 << (2 * c))), u1 = _mm256_set1_epi8((char)(2 << (2 * c)));
				lo = _mm256_add_epi8(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u0), u0), b16));
				hi = _mm256_add_epi8(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u1), u1), b16));
			}
			int32_t d0 = kq_hsum(kq_dot_us(lo, _mm256_loadu_si256((const __m256i *)(xs + 64 * c))));
			int32_t d1 = kq_hsum(kq_dot_us(hi, _mm256_loadu_si256((const __m256i *)(xs + 64 * c + 32))));
			sumi += s0 * d0 + s1 * d1;
			mins += m0 * (bs[4 * c] + bs[4 * c + 1]) + m1 * (bs[4 * c + 2] + bs[4 * c + 3]);
		}
		float d = kq_f16(blk + off[KQ_D]) * xd[b];
		float dmin = kq_f16(blk + off[KQ_DMIN]) * xd[b];
		float a = d * (float)sumi, m = dmin * (float)mins;
		sum = sum + (a - m);
	}
	return sum;
}

static float kq_q6_k(const uint8_t *w, const long *off, const int8_t *x, const float *xd, const int32_t *bsums,
		     long nb) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	float sum = 0;
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		const int8_t *sc = (const int8_t *)(blk + off[KQ_SCALES]);
		const int32_t *bs = bsums + 16 * b;
		int32_t sumi = 0;
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = blk + off[KQ_QL] + 64 * h;
			const int8_t *xs = x + 256 * b + 128 * h;
			__m256i qh = _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QH] + 32 * h));
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i q[4];
			q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
			q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
			q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
			q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
			for (int k = 0; k < 4; k++) {
				__m256i p = kq_dot_us(q[k], _mm256_loadu_si256((const __m256i *)(xs + 32 * k)));
				int32_t g0 = kq_hsum128(_mm256_castsi256_si128(p));
				int32_t g1 = kq_hsum128(_mm256_extracti128_si256(p, 1));
				int i0 = 8 * h + 2 * k, i1 = i0 + 1;
				sumi += (int32_t)sc[i0] * (g0 - 32 * bs[i0]) + (int32_t)sc[i1] * (g1 - 32 * bs[i1]);
			}
		}
		float d = kq_f16(blk + off[KQ_D]) * xd[b];
		float p = d * (float)sumi;
		sum = sum + p;
	}
	return sum;
}

// kq_rows sets out[i*ldo + r] for rows [r0, r1) of w (rowb bytes each) and
// the n token rows of quantized activations x (cols int8 each, with xd's
// scales per group of 32 or 256 and, for the K types, bsums per 16).
void kq_rows(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
	     const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	long group = (type == KQ_Q8_0 || type == KQ_Q4_0 || type == KQ_Q5_0) ? 32 : 256;
	long nb = cols / group;
	// Tokens in blocks of about 256 KiB of activations, which stay in the
	// L2 cache while the rows pass over them.
	long tb = 256 * 1024 / cols;
	tb = tb < 1 ? 1 : tb;
	for (long t0 = 0; t0 < n; t0 += tb)
	for (long r = r0; r < r1; r++) {
		const uint8_t *wr = w + r * rowb;
		for (long i = t0; i < n && i < t0 + tb; i++) {
			const int8_t *xi = x + i * cols;
			const float *di = xd + i * nb;
			const int32_t *bi = bsums + i * (cols / 16);
			float s = 0;
			switch (type) {
			case KQ_Q8_0:
				s = kq_q8_0(wr, off, xi, di, nb);
				break;
			case KQ_Q4_0:
				s = kq_q4_0(wr, off, xi, di, nb);
				break;
			case KQ_Q5_0:
				s = kq_q5_0(wr, off, xi, di, nb);
				break;
			case KQ_Q4_K:
				s = kq_q45_k(wr, off, xi, di, bi, nb, 0);
				break;
			case KQ_Q5_K:
				s = kq_q45_k(wr, off, xi, di, bi, nb, 1);
				break;
			case KQ_Q6_K:
				s = kq_q6_k(wr, off, xi, di, bi, nb);
				break;
			}
			out[i * ldo + r] = s;
		}
	}
}
