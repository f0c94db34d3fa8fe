//go:build cgo

// Decoding of codec's rANS stream layout 2 (cpu.RANSDecode2) with AVX-512
// and with AVX2: 32 lanes of 32-bit states sharing one stream of 16-bit
// words, decoded a group of 32 symbols at a time. A lane's step is one
// gather of its slot's packed entry (symbol | freq << 8 | bias << 20),
// a multiply-add, the symbol's level picked from registers (or gathered,
// for tables of more than 64 levels at AVX-512, 8 at AVX2), and the
// refill: the lanes below 2^16 take the next words in lane order, which
// one unaligned load and an expand (AVX-512) or a permutation from a
// table indexed by the lanes' mask (AVX2) put in place. The 32 lanes are
// two (four) independent dependency chains, whose only link is the
// stream position, a popcount apart.
//
// Each group reads at most 64 bytes of words; a kernel decodes a group
// only while 64 bytes remain, so it never reads past the stream, and
// returns where it stopped for the Go loop to finish. The arithmetic is
// integer and the levels are copied: the results are the Go decoder's
// bit for bit.

#include <stdint.h>
#include <immintrin.h>

#define KK_INLINE static inline __attribute__((always_inline))

#define KK_RANS_LANES 32
#define KK_RANS_SCALE 12
#define KK_RANS_WORD (1u << 16)

// kk_rans2_next16 and kk_rans2_next8 are the state update of 16 (AVX-512)
// or 8 (AVX2) lanes from their packed table entries e (bits 8-19 the
// symbol's frequency, 20-31 the state's offset within it): x = freq *
// (x >> KK_RANS_SCALE) + offset.
__attribute__((target("avx512f"))) KK_INLINE __m512i kk_rans2_next16(__m512i x, __m512i e) {
	const __m512i m12 = _mm512_set1_epi32((1 << KK_RANS_SCALE) - 1);
	return _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 8), m12), _mm512_srli_epi32(x, KK_RANS_SCALE)),
				_mm512_srli_epi32(e, 20));
}

__attribute__((target("avx2"))) KK_INLINE __m256i kk_rans2_next8(__m256i x, __m256i e) {
	const __m256i m12 = _mm256_set1_epi32((1 << KK_RANS_SCALE) - 1);
	return _mm256_add_epi32(_mm256_mullo_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), m12), _mm256_srli_epi32(x, KK_RANS_SCALE)),
				_mm256_srli_epi32(e, 20));
}

// kk_rans2_decode512 decodes whole groups of component-major symbols
// (per symbols per component, a multiple of 32; out[j] is symbol g0 + j,
// the first g0 of the first component decoded before) into out, starting at
// stream position pos with the lanes' states x, leaves x where it stopped
// and returns the symbols decoded and the position after them, the latter
// shifted left by 32 (one return value, so that the Go side passes no
// pointer to a local).
__attribute__((target("avx512f,avx512bw,avx512vl,popcnt"))) long kk_rans2_decode512(
	float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
	const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale, uint32_t *x) {
	__m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 16);
	const __m512i m12 = _mm512_set1_epi32((1 << KK_RANS_SCALE) - 1), m8 = _mm512_set1_epi32(255);
	const __m512i word = _mm512_set1_epi32(KK_RANS_WORD), bit5 = _mm512_set1_epi32(32);
	long p = pos, k = 0;
	const long nc = (g0 + total) / per;
	// out[at + g] is symbol g of the component at hand.
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const int *e = (const int *)(ent + ent_off[c]);
		const float *l = lv + lev_off[c];
		int ns = nsym[c];
		// The levels in registers, read with masks so as not to pass the
		// table's end.
		__m512 l0 = _mm512_maskz_loadu_ps((__mmask16)(ns >= 16 ? 0xffff : (1u << ns) - 1), l), l1 = l0, l2 = l0, l3 = l0;
		if (ns > 16) l1 = _mm512_maskz_loadu_ps((__mmask16)(ns >= 32 ? 0xffff : (1u << (ns - 16)) - 1), l + 16);
		if (ns > 32) l2 = _mm512_maskz_loadu_ps((__mmask16)(ns >= 48 ? 0xffff : (1u << (ns - 32)) - 1), l + 32);
		if (ns > 48) l3 = _mm512_maskz_loadu_ps((__mmask16)(ns >= 64 ? 0xffff : (1u << (ns - 48)) - 1), l + 48);
		// Each level times the component's scale, one rounding, as the
		// Go loop's l[symbol] * scale.
		const __m512 sc = _mm512_set1_ps(scale[c]);
		l0 = _mm512_mul_ps(l0, sc), l1 = _mm512_mul_ps(l1, sc), l2 = _mm512_mul_ps(l2, sc), l3 = _mm512_mul_ps(l3, sc);
		long g = g0;
		for (; g < per; g += KK_RANS_LANES) {
			if (p + 2 * KK_RANS_LANES > len) break;
			__m512i e0 = _mm512_i32gather_epi32(_mm512_and_si512(x0, m12), e, 4);
			__m512i e1 = _mm512_i32gather_epi32(_mm512_and_si512(x1, m12), e, 4);
			__m512i s0 = _mm512_and_si512(e0, m8), s1 = _mm512_and_si512(e1, m8);
			x0 = kk_rans2_next16(x0, e0);
			x1 = kk_rans2_next16(x1, e1);
			__m512 v0, v1;
			if (ns <= 16) {
				v0 = _mm512_permutexvar_ps(s0, l0);
				v1 = _mm512_permutexvar_ps(s1, l0);
			} else if (ns <= 32) {
				v0 = _mm512_permutex2var_ps(l0, s0, l1);
				v1 = _mm512_permutex2var_ps(l0, s1, l1);
			} else if (ns <= 64) {
				v0 = _mm512_mask_blend_ps(_mm512_test_epi32_mask(s0, bit5), _mm512_permutex2var_ps(l0, s0, l1),
							  _mm512_permutex2var_ps(l2, s0, l3));
				v1 = _mm512_mask_blend_ps(_mm512_test_epi32_mask(s1, bit5), _mm512_permutex2var_ps(l0, s1, l1),
							  _mm512_permutex2var_ps(l2, s1, l3));
			} else {
				v0 = _mm512_mul_ps(_mm512_i32gather_ps(s0, l, 4), sc);
				v1 = _mm512_mul_ps(_mm512_i32gather_ps(s1, l, 4), sc);
			}
			_mm512_storeu_ps(out + at + g, v0);
			_mm512_storeu_ps(out + at + g + 16, v1);
			// The refills, lanes 0-15 then 16-31: 16 words at p
			// widened, the first popcount(m) expanded into the lanes
			// of m.
			__mmask16 r0 = _mm512_cmplt_epu32_mask(x0, word);
			__m512i w0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + p)));
			x0 = _mm512_mask_or_epi32(x0, r0, _mm512_slli_epi32(x0, 16), _mm512_maskz_expand_epi32(r0, w0));
			p += 2 * __builtin_popcount(r0);
			__mmask16 r1 = _mm512_cmplt_epu32_mask(x1, word);
			__m512i w1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + p)));
			x1 = _mm512_mask_or_epi32(x1, r1, _mm512_slli_epi32(x1, 16), _mm512_maskz_expand_epi32(r1, w1));
			p += 2 * __builtin_popcount(r1);
		}
		k += g - g0;
		if (g < per) break;
	}
	_mm512_storeu_si512(x, x0);
	_mm512_storeu_si512(x + 16, x1);
	return p << 32 | k;
}

// kk_rans2_expand[m] permutes 8 words so that the j-th lane set in m gets
// word j (the lanes not in m are blended away).
static uint32_t kk_rans2_expand[256][8];

__attribute__((constructor)) static void kk_rans2_init(void) {
	for (int m = 0; m < 256; m++) {
		int j = 0;
		for (int lane = 0; lane < 8; lane++) {
			kk_rans2_expand[m][lane] = j & 7;
			if (m >> lane & 1) j++;
		}
	}
}

// KK_RANS2_STEP8 decodes lanes 8*q..8*q+7 of a group (AVX2).
#define KK_RANS2_STEP8(q)                                                                                                   \
	do {                                                                                                                \
		__m256i e_ = _mm256_i32gather_epi32(e, _mm256_and_si256(x[q], m12), 4);                                    \
		__m256i s_ = _mm256_and_si256(e_, m8);                                                                      \
		x[q] = kk_rans2_next8(x[q], e_);                                                                            \
		__m256 v_ = ns <= 8 ? _mm256_permutevar8x32_ps(l0, s_) : _mm256_mul_ps(_mm256_i32gather_ps(l, s_, 4), sc); \
		_mm256_storeu_ps(out + at + g + 8 * (q), v_);                                                                \
		v[q] = _mm256_cmpeq_epi32(_mm256_srli_epi32(x[q], 16), zero);                                              \
	} while (0)

// KK_RANS2_REFILL8 gives lanes 8*q..8*q+7 below 2^16 their words (AVX2).
#define KK_RANS2_REFILL8(q)                                                                                                 \
	do {                                                                                                                \
		int m_ = _mm256_movemask_ps(_mm256_castsi256_ps(v[q]));                                                     \
		__m256i w_ = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + p)));                          \
		w_ = _mm256_permutevar8x32_epi32(w_, _mm256_loadu_si256((const __m256i *)kk_rans2_expand[m_]));           \
		x[q] = _mm256_blendv_epi8(x[q], _mm256_or_si256(_mm256_slli_epi32(x[q], 16), w_), v[q]);                  \
		p += 2 * __builtin_popcount(m_);                                                                            \
	} while (0)

// kk_rans2_decode2 is kk_rans2_decode512 with AVX2: four chains of 8 lanes.
__attribute__((target("avx2,fma,popcnt"))) long kk_rans2_decode2(float *out, long total, long g0, const uint8_t *src, long len,
								    long pos, long per, const uint32_t *ent, const int32_t *ent_off,
								    const float *lv, const int32_t *lev_off, const int32_t *nsym,
								    const float *scale, uint32_t *xs) {
	__m256i x[4], v[4];
	for (int q = 0; q < 4; q++) x[q] = _mm256_loadu_si256((const __m256i *)(xs + 8 * q));
	const __m256i m12 = _mm256_set1_epi32((1 << KK_RANS_SCALE) - 1), m8 = _mm256_set1_epi32(255);
	const __m256i zero = _mm256_setzero_si256();
	long p = pos, k = 0;
	const long nc = (g0 + total) / per;
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const int *e = (const int *)(ent + ent_off[c]);
		const float *l = lv + lev_off[c];
		int ns = nsym[c];
		const __m256 sc = _mm256_set1_ps(scale[c]);
		__m256 l0 = _mm256_mul_ps(_mm256_maskload_ps(l, _mm256_cmpgt_epi32(_mm256_set1_epi32(ns), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))), sc);
		long g = g0;
		for (; g < per; g += KK_RANS_LANES) {
			if (p + 2 * KK_RANS_LANES > len) break;
			KK_RANS2_STEP8(0);
			KK_RANS2_STEP8(1);
			KK_RANS2_STEP8(2);
			KK_RANS2_STEP8(3);
			KK_RANS2_REFILL8(0);
			KK_RANS2_REFILL8(1);
			KK_RANS2_REFILL8(2);
			KK_RANS2_REFILL8(3);
		}
		k += g - g0;
		if (g < per) break;
	}
	for (int q = 0; q < 4; q++) _mm256_storeu_si256((__m256i *)(xs + 8 * q), x[q]);
	return p << 32 | k;
}

// KK_R2P_LEVELS sets v0 and v1 to the levels of symbols s0 and s1 (lanes
// 0-15 and 16-31 of a group) times sc, from the registers l0-l3 or, past
// 64 levels, gathered from l.
#define KK_R2P_LEVELS(v0, v1, s0, s1, sc)                                                                                   \
	do {                                                                                                                \
		if (ns <= 16) {                                                                                             \
			v0 = _mm512_permutexvar_ps(s0, l0);                                                                 \
			v1 = _mm512_permutexvar_ps(s1, l0);                                                                 \
		} else if (ns <= 32) {                                                                                      \
			v0 = _mm512_permutex2var_ps(l0, s0, l1);                                                            \
			v1 = _mm512_permutex2var_ps(l0, s1, l1);                                                            \
		} else if (ns <= 64) {                                                                                      \
			v0 = _mm512_mask_blend_ps(_mm512_test_epi32_mask(s0, bit5), _mm512_permutex2var_ps(l0, s0, l1),     \
						  _mm512_permutex2var_ps(l2, s0, l3));                                      \
			v1 = _mm512_mask_blend_ps(_mm512_test_epi32_mask(s1, bit5), _mm512_permutex2var_ps(l0, s1, l1),     \
						  _mm512_permutex2var_ps(l2, s1, l3));                                      \
		} else {                                                                                                    \
			v0 = _mm512_i32gather_ps(s0, l, 4);                                                                 \
			v1 = _mm512_i32gather_ps(s1, l, 4);                                                                 \
		}                                                                                                           \
		v0 = _mm512_mul_ps(v0, sc);                                                                                 \
		v1 = _mm512_mul_ps(v1, sc);                                                                                 \
	} while (0)

// KK_R2P_REFILL gives the lanes of x below 2^16 the next words of src at
// p, in lane order.
#define KK_R2P_REFILL(x, src, p)                                                                                            \
	do {                                                                                                                \
		__mmask16 r_ = _mm512_cmplt_epu32_mask(x, word);                                                            \
		__m512i w_ = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((src) + (p))));                     \
		x = _mm512_mask_or_epi32(x, r_, _mm512_slli_epi32(x, 16), _mm512_maskz_expand_epi32(r_, w_));               \
		p += 2 * __builtin_popcount(r_);                                                                            \
	} while (0)

// kk_rans2_streams is kk_rans2_decode512 over ns (2 to 4, a constant
// once inlined) streams of the same tables side by side (blocks of one
// codec: 2*ns dependency chains where one stream has two), from the same
// symbol g0 of the first component: stream j's symbols go to out[j], its
// scales are scale[j], its lanes xs[32*j:], its bytes src[j][:len[j]]
// from position pos[j]. It decodes whole groups while each stream has 64
// bytes left, and returns how many symbols of each it decoded, leaving
// each stream's position in pos and lanes in xs.
__attribute__((target("avx512f,avx512bw,avx512vl,popcnt"))) KK_INLINE long kk_rans2_streams(const int ns, float *const *out, long total, long g0, const uint8_t *const *src, const long *len,
				long *pos, long per, const uint32_t *ent, const int32_t *ent_off, const float *lv,
				const int32_t *lev_off, const int32_t *nsym, const float *const *scale, uint32_t *xs) {
	__m512i x[8];
	long p[4];
#pragma GCC unroll 8
	for (int j = 0; j < 2 * ns; j++) x[j] = _mm512_loadu_si512(xs + 16 * j);
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) p[j] = pos[j];
	const __m512i m12 = _mm512_set1_epi32((1 << KK_RANS_SCALE) - 1), m8 = _mm512_set1_epi32(255);
	const __m512i word = _mm512_set1_epi32(KK_RANS_WORD), bit5 = _mm512_set1_epi32(32);
	long k = 0;
	const long nc = (g0 + total) / per;
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const int *e = (const int *)(ent + ent_off[c]);
		const float *l = lv + lev_off[c];
		int nsy = nsym[c];
		__m512 l0 = _mm512_maskz_loadu_ps((__mmask16)(nsy >= 16 ? 0xffff : (1u << nsy) - 1), l), l1 = l0, l2 = l0, l3 = l0;
		if (nsy > 16) l1 = _mm512_maskz_loadu_ps((__mmask16)(nsy >= 32 ? 0xffff : (1u << (nsy - 16)) - 1), l + 16);
		if (nsy > 32) l2 = _mm512_maskz_loadu_ps((__mmask16)(nsy >= 48 ? 0xffff : (1u << (nsy - 32)) - 1), l + 32);
		if (nsy > 48) l3 = _mm512_maskz_loadu_ps((__mmask16)(nsy >= 64 ? 0xffff : (1u << (nsy - 48)) - 1), l + 48);
		__m512 sc[4];
#pragma GCC unroll 4
		for (int j = 0; j < ns; j++) sc[j] = _mm512_set1_ps(scale[j][c]);
		long g = g0;
		for (; g < per; g += KK_RANS_LANES) {
			int room = 1;
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) room &= p[j] + 2 * KK_RANS_LANES <= len[j];
			if (!room) break;
			__m512i en[8];
#pragma GCC unroll 8
			for (int h = 0; h < 2 * ns; h++) en[h] = _mm512_i32gather_epi32(_mm512_and_si512(x[h], m12), e, 4);
#pragma GCC unroll 8
			for (int h = 0; h < 2 * ns; h++) x[h] = kk_rans2_next16(x[h], en[h]);
#pragma GCC unroll 8
			for (int h = 0; h < 2 * ns; h++) {
				// Lanes 0-15 of every stream, then lanes 16-31.
				int j = h % ns, q = h / ns;
				KK_R2P_REFILL(x[2 * j + q], src[j], p[j]);
			}
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) {
				__m512 v0, v1;
				const int ns = nsy;
				KK_R2P_LEVELS(v0, v1, _mm512_and_si512(en[2 * j], m8), _mm512_and_si512(en[2 * j + 1], m8), sc[j]);
				_mm512_storeu_ps(out[j] + at + g, v0);
				_mm512_storeu_ps(out[j] + at + g + 16, v1);
			}
		}
		k += g - g0;
		if (g < per) break;
	}
#pragma GCC unroll 8
	for (int j = 0; j < 2 * ns; j++) _mm512_storeu_si512(xs + 16 * j, x[j]);
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) pos[j] = p[j];
	return k;
}

// KK_RANS_XN is the body of the entry points of 2 to 4 streams (ns 2, 3
// or 4; the unused streams' pointers null): it calls the streams kernel
// fn, inlined for each ns, with the streams' pointers as arrays and then
// the kernel's own trailing arguments.
#define KK_RANS_XN(fn, ...)                                                                                               \
	do {                                                                                                              \
		float *const out[4] = {out0, out1, out2, out3};                                                           \
		const uint8_t *const src[4] = {src0, src1, src2, src3};                                                   \
		const float *const scale[4] = {scale0, scale1, scale2, scale3};                                           \
		switch (ns) {                                                                                             \
		case 2:                                                                                                   \
			return fn(2, out, total, g0, src, len, pos, per, ent, ent_off, lv, lev_off, nsym, scale, __VA_ARGS__); \
		case 3:                                                                                                   \
			return fn(3, out, total, g0, src, len, pos, per, ent, ent_off, lv, lev_off, nsym, scale, __VA_ARGS__); \
		default:                                                                                                  \
			return fn(4, out, total, g0, src, len, pos, per, ent, ent_off, lv, lev_off, nsym, scale, __VA_ARGS__); \
		}                                                                                                         \
	} while (0)

// kk_rans2_decode512xn is kk_rans2_streams for ns = 2, 3 or 4 streams, the
// unused ones' pointers null.
__attribute__((target("avx512f,avx512bw,avx512vl,popcnt"))) long kk_rans2_decode512xn(
	long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
	const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
	const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
	const float *scale0, const float *scale1, const float *scale2, const float *scale3, uint32_t *xs) {
	KK_RANS_XN(kk_rans2_streams, xs);
}

// kk_rans2_streams2 is kk_rans2_decode2 (AVX2) over ns streams side by
// side, as kk_rans2_streams: 4*ns chains of 8 lanes.
// kk_rans2_refill2 renormalizes the 4*ns chains of 8 lanes of the AVX2
// stream kernels (kk_rans2_streams2, kk_rans2c_streams): each lane set in
// v (its state below 2^16) shifts in its stream's next 16-bit word, in
// lane order, lanes 0-7 of every stream first, then 8-15, ...
__attribute__((target("avx2,fma,popcnt"))) KK_INLINE void kk_rans2_refill2(const int ns, __m256i *x, const __m256i *v,
									      const uint8_t *const *src, long *p) {
#pragma GCC unroll 16
	for (int h = 0; h < 4 * ns; h++) {
		const int j = h % ns, q = h / ns, i = 4 * j + q;
		int m_ = _mm256_movemask_ps(_mm256_castsi256_ps(v[i]));
		__m256i w_ = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src[j] + p[j])));
		w_ = _mm256_permutevar8x32_epi32(w_, _mm256_loadu_si256((const __m256i *)kk_rans2_expand[m_]));
		x[i] = _mm256_blendv_epi8(x[i], _mm256_or_si256(_mm256_slli_epi32(x[i], 16), w_), v[i]);
		p[j] += 2 * __builtin_popcount(m_);
	}
}

__attribute__((target("avx2,fma,popcnt"))) KK_INLINE long kk_rans2_streams2(
	const int ns, float *const *out, long total, long g0, const uint8_t *const *src, const long *len, long *pos, long per,
	const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
	const float *const *scale, uint32_t *xs) {
	__m256i x[16], v[16];
	long p[4];
#pragma GCC unroll 16
	for (int j = 0; j < 4 * ns; j++) x[j] = _mm256_loadu_si256((const __m256i *)(xs + 8 * j));
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) p[j] = pos[j];
	const __m256i m12 = _mm256_set1_epi32((1 << KK_RANS_SCALE) - 1), m8 = _mm256_set1_epi32(255);
	const __m256i zero = _mm256_setzero_si256();
	long k = 0;
	const long nc = (g0 + total) / per;
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const int *e = (const int *)(ent + ent_off[c]);
		const float *l = lv + lev_off[c];
		const int nsy = nsym[c];
		const __m256 l0 = _mm256_maskload_ps(l, _mm256_cmpgt_epi32(_mm256_set1_epi32(nsy), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
		long g = g0;
		for (; g < per; g += KK_RANS_LANES) {
			int room = 1;
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) room &= p[j] + 2 * KK_RANS_LANES <= len[j];
			if (!room) break;
#pragma GCC unroll 16
			for (int h = 0; h < 4 * ns; h++) {
				const int j = h / 4, q = h % 4;
				const __m256 sc = _mm256_set1_ps(scale[j][c]);
				__m256i e_ = _mm256_i32gather_epi32(e, _mm256_and_si256(x[h], m12), 4);
				__m256i s_ = _mm256_and_si256(e_, m8);
				x[h] = kk_rans2_next8(x[h], e_);
				__m256 v_ = nsy <= 8 ? _mm256_permutevar8x32_ps(l0, s_) : _mm256_i32gather_ps(l, s_, 4);
				_mm256_storeu_ps(out[j] + at + g + 8 * q, _mm256_mul_ps(v_, sc));
				v[h] = _mm256_cmpeq_epi32(_mm256_srli_epi32(x[h], 16), zero);
			}
			kk_rans2_refill2(ns, x, v, src, p);
		}
		k += g - g0;
		if (g < per) break;
	}
#pragma GCC unroll 16
	for (int j = 0; j < 4 * ns; j++) _mm256_storeu_si256((__m256i *)(xs + 8 * j), x[j]);
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) pos[j] = p[j];
	return k;
}

// kk_rans2_decode2xn is kk_rans2_decode512xn with AVX2.
__attribute__((target("avx2,fma,popcnt"))) long kk_rans2_decode2xn(
	long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
	const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
	const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
	const float *scale0, const float *scale1, const float *scale2, const float *scale3, uint32_t *xs) {
	KK_RANS_XN(kk_rans2_streams2, xs);
}

// The gather-free lookup (kernels/cpu/rans.go's RANSLookup): a table's
// symbols, frequencies and starts found in registers, for CPUs with
// AVX512_VBMI (VPERMI2B) and AVX512_VPOPCNTDQ, where a gather of 16 lanes
// costs as much as some thirty permutes (AMD Zen 5).

// kk_rans2f_supported reports whether the CPU and OS run the kernels below.
int kk_rans2f_supported(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
	       __builtin_cpu_supports("avx512vpopcntdq");
}

#define KK_RF_FIRST 0
#define KK_RF_LINK 32
#define KK_RF_BOUND 64
#define KK_RF_FS 128
#define KK_RF_BASE 192
#define KK_RF_COUNT 193
#define KK_RF_MODE 194
#define KK_RF_EL 196
#define KK_RF_CMP 197
#define KK_RF_CMPBASE 198
#define KK_RF_FREQ 208
#define KK_RF_START 224
#define KK_RF_WORDS 256
#define KK_RF_GATHER 0
#define KK_RF_NARROW 1
#define KK_RF_WIDE 2

#define KK_RF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,avx512vpopcntdq,popcnt")))

// A kk_rf holds one table's lookup in registers, and its window's levels.
typedef struct {
	__m512i first0, first1, link0, link1, b0, b1, b2, b3, f0, f1, f2, f3;
	__m512 l0, l1, l2, l3;
} kk_rf;

// kk_rf_load reads the lookup a and the levels of its window from l (the
// table's levels, ns of them) into t, and returns its mode.
KK_RF_TARGET KK_INLINE int kk_rf_load(kk_rf *t, const uint32_t *a, const float *l, int ns) {
	int mode = (int)a[KK_RF_MODE];
	// The window's levels, read with masks so as not to pass the table's
	// end: the gather mode's from 0 (used for tables of up to 64).
	int base = mode == KK_RF_GATHER ? 0 : (int)a[KK_RF_BASE];
	int w = mode == KK_RF_GATHER ? 64 : (int)a[KK_RF_COUNT];
	if (w > ns - base) w = ns - base;
	const float *lw = l + base;
	__m512 z = _mm512_setzero_ps();
	t->l0 = w > 0 ? _mm512_maskz_loadu_ps((__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1), lw) : z;
	t->l1 = w > 16 ? _mm512_maskz_loadu_ps((__mmask16)(w >= 32 ? 0xffff : (1u << (w - 16)) - 1), lw + 16) : z;
	t->l2 = w > 32 ? _mm512_maskz_loadu_ps((__mmask16)(w >= 48 ? 0xffff : (1u << (w - 32)) - 1), lw + 32) : z;
	t->l3 = w > 48 ? _mm512_maskz_loadu_ps((__mmask16)(w >= 64 ? 0xffff : (1u << (w - 48)) - 1), lw + 48) : z;
	if (mode == KK_RF_GATHER) return mode;
	t->first0 = _mm512_loadu_si512(a + KK_RF_FIRST), t->first1 = _mm512_loadu_si512(a + KK_RF_FIRST + 16);
	t->link0 = _mm512_loadu_si512(a + KK_RF_LINK), t->link1 = _mm512_loadu_si512(a + KK_RF_LINK + 16);
	t->b0 = _mm512_loadu_si512(a + KK_RF_BOUND), t->b1 = _mm512_loadu_si512(a + KK_RF_BOUND + 16);
	t->b2 = _mm512_loadu_si512(a + KK_RF_BOUND + 32), t->b3 = _mm512_loadu_si512(a + KK_RF_BOUND + 48);
	t->f0 = _mm512_loadu_si512(a + KK_RF_FS), t->f1 = _mm512_loadu_si512(a + KK_RF_FS + 16);
	t->f2 = _mm512_loadu_si512(a + KK_RF_FS + 32), t->f3 = _mm512_loadu_si512(a + KK_RF_FS + 48);
	return mode;
}

// kk_rf_step decodes 16 lanes x of a group by the lookup t: their states
// advanced (before the refill) and their levels (unscaled) in *v. In the
// wide mode it returns 0, x and *v untouched, when a lane lies outside
// the window, for the gather to decode the 16.
KK_RF_TARGET KK_INLINE int kk_rf_step(const int wide, __m512i *x, __m512 *v, const kk_rf *t) {
	const __m512i m12 = _mm512_set1_epi32((1 << KK_RANS_SCALE) - 1), m31 = _mm512_set1_epi32(31);
	const __m512i m16 = _mm512_set1_epi32(0xffff), bit5 = _mm512_set1_epi32(32);
	const __mmask64 byte0 = 0x1111111111111111ull;
	__m512i slot = _mm512_and_si512(*x, m12);
	// The bucket, slot >> 5, is bits 0-6 of byte 0 of x >> 5, which is
	// all VPERMI2B reads of a lane's byte 0 (the others are zeroed).
	__m512i hi = _mm512_srli_epi32(*x, 5);
	__m512i first = _mm512_maskz_permutex2var_epi8(byte0, t->first0, hi, t->first1);
	__m512i link = _mm512_maskz_permutex2var_epi8(byte0, t->link0, hi, t->link1);
	__m512i bm = _mm512_permutex2var_epi32(t->b0, link, t->b1);
	if (wide) bm = _mm512_mask_blend_epi32(_mm512_test_epi32_mask(link, bit5), bm, _mm512_permutex2var_epi32(t->b2, link, t->b3));
	// The starts at bits 0..slot%32 of the bitmap: those left after a
	// shift left by 31 - slot%32.
	__m512i r = _mm512_add_epi32(first, _mm512_popcnt_epi32(_mm512_sllv_epi32(bm, _mm512_andnot_si512(*x, m31))));
	__m512i fs;
	if (wide) {
		if (_mm512_test_epi32_mask(r, _mm512_set1_epi32(0xc0))) return 0;
		__mmask16 up = _mm512_test_epi32_mask(r, bit5);
		fs = _mm512_mask_blend_epi32(up, _mm512_permutex2var_epi32(t->f0, r, t->f1), _mm512_permutex2var_epi32(t->f2, r, t->f3));
		*v = _mm512_mask_blend_ps(up, _mm512_permutex2var_ps(t->l0, r, t->l1), _mm512_permutex2var_ps(t->l2, r, t->l3));
	} else {
		fs = _mm512_permutex2var_epi32(t->f0, r, t->f1);
		*v = _mm512_permutex2var_ps(t->l0, r, t->l1);
	}
	*x = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(fs, m16), _mm512_srli_epi32(*x, KK_RANS_SCALE)),
			      _mm512_sub_epi32(slot, _mm512_srli_epi32(fs, 16)));
	return 1;
}

// kk_load8el reads the 8 slots idx of a table's slot entries w (each
// the packed entry, then its symbol's level's bits: RANSLookup's el) by
// eight 64-bit loads straight into vector halves, and splits them into
// the entries *e and the levels *lv: one load a lane for both, where
// kk_load8 of the entries and then of the levels took two, the second
// waiting on the first.
__attribute__((target("avx2"))) KK_INLINE void kk_load8el(const uint64_t *w, __m256i idx, __m256i *e, __m256 *lv) {
	__m128i lo = _mm256_castsi256_si128(idx), hi = _mm256_extracti128_si256(idx, 1);
	uint64_t a = (uint64_t)_mm_cvtsi128_si64(lo), b = (uint64_t)_mm_extract_epi64(lo, 1);
	uint64_t c = (uint64_t)_mm_cvtsi128_si64(hi), d = (uint64_t)_mm_extract_epi64(hi, 1);
	__m128d q01 = _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(w + (uint32_t)a))), (const double *)(w + (a >> 32)));
	__m128d q23 = _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(w + (uint32_t)b))), (const double *)(w + (b >> 32)));
	__m128d q45 = _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(w + (uint32_t)c))), (const double *)(w + (c >> 32)));
	__m128d q67 = _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(w + (uint32_t)d))), (const double *)(w + (d >> 32)));
	// Lanes 0, 1, 4, 5 and 2, 3, 6, 7: the even dwords are the entries
	// in lane order, the odd ones the levels.
	__m256 x0 = _mm256_castpd_ps(_mm256_insertf128_pd(_mm256_castpd128_pd256(q01), q45, 1));
	__m256 x1 = _mm256_castpd_ps(_mm256_insertf128_pd(_mm256_castpd128_pd256(q23), q67, 1));
	*e = _mm256_castps_si256(_mm256_shuffle_ps(x0, x1, 0x88));
	*lv = _mm256_shuffle_ps(x0, x1, 0xdd);
}

// kk_rf_gather is kk_rf_step by the gather of the packed entries e, the
// levels gathered from l (tables of more than 64 levels) or permuted from
// the registers of t (whose window then starts at 0); or, where the table
// has slot entries w, by loads of each lane's entry and level at once
// (kk_load8el), which on AMD Zen 5 run 1.2-1.3x the two gathers' rate
// (BenchmarkRANS2DecodeStreams/all/4/levels, load 8).
KK_RF_TARGET KK_INLINE void kk_rf_gather(__m512i *x, __m512 *v, const int *e, const float *l, int ns, const kk_rf *t,
					  const uint64_t *w) {
	const __m512i m12 = _mm512_set1_epi32((1 << KK_RANS_SCALE) - 1), m8 = _mm512_set1_epi32(255);
	const __m512i bit5 = _mm512_set1_epi32(32);
	if (w) {
		// The slot entries: each lane's entry and level by one load, in
		// two halves of 8 lanes.
		__m512i slot = _mm512_and_si512(*x, m12);
		__m256i e0, e1;
		__m256 v0, v1;
		kk_load8el(w, _mm512_castsi512_si256(slot), &e0, &v0);
		kk_load8el(w, _mm512_extracti64x4_epi64(slot, 1), &e1, &v1);
		*x = kk_rans2_next16(*x, _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1));
		*v = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(v0)), _mm256_castps_pd(v1), 1));
		return;
	}
	__m512i en = _mm512_i32gather_epi32(_mm512_and_si512(*x, m12), e, 4);
	__m512i s = _mm512_and_si512(en, m8);
	*x = kk_rans2_next16(*x, en);
	if (ns <= 64)
		*v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(s, bit5), _mm512_permutex2var_ps(t->l0, s, t->l1),
					  _mm512_permutex2var_ps(t->l2, s, t->l3));
	else
		*v = _mm512_i32gather_ps(s, l, 4);
}

// kk_rans2f_streams is kk_rans2_streams (ns = 1 to 4 streams side by
// side) with each component's symbols looked up by its table's lookup in
// aux (aux + KK_RF_WORDS * (ent_off[c] >> KK_RANS_SCALE)): the narrow and
// wide modes in registers, the gather mode (and a wide mode's vectors with
// a lane outside the window) by the gather.
KK_RF_TARGET KK_INLINE long kk_rans2f_streams(const int ns, float *const *out, long total, long g0, const uint8_t *const *src,
					     const long *len, long *pos, long per, const uint32_t *ent, const int32_t *ent_off,
					     const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *const *scale,
					     const uint32_t *aux, const uint64_t *el, uint32_t *xs) {
	__m512i x[8];
	long p[4];
#pragma GCC unroll 8
	for (int j = 0; j < 2 * ns; j++) x[j] = _mm512_loadu_si512(xs + 16 * j);
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) p[j] = pos[j];
	const __m512i word = _mm512_set1_epi32(KK_RANS_WORD);
	long k = 0;
	const long nc = (g0 + total) / per;
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const int *e = (const int *)(ent + ent_off[c]);
		const float *l = lv + lev_off[c];
		const int nsy = nsym[c];
		kk_rf t;
		int mode = kk_rf_load(&t, aux + (long)KK_RF_WORDS * (ent_off[c] >> KK_RANS_SCALE), l, nsy);
		const uint32_t *a = aux + (long)KK_RF_WORDS * (ent_off[c] >> KK_RANS_SCALE);
		const uint64_t *w = el && a[KK_RF_EL] ? el + (long)(a[KK_RF_EL] - 1) * (1 << KK_RANS_SCALE) : 0;
		__m512 sc[4];
#pragma GCC unroll 4
		for (int j = 0; j < ns; j++) sc[j] = _mm512_set1_ps(scale[j][c]);
		long g = g0;
		for (; g < per; g += KK_RANS_LANES) {
			int room = 1;
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) room &= p[j] + 2 * KK_RANS_LANES <= len[j];
			if (!room) break;
			__m512 v[8];
			if (mode == KK_RF_NARROW) {
#pragma GCC unroll 8
				for (int h = 0; h < 2 * ns; h++) kk_rf_step(0, &x[h], &v[h], &t);
			} else if (mode == KK_RF_WIDE) {
#pragma GCC unroll 8
				for (int h = 0; h < 2 * ns; h++)
					if (!kk_rf_step(1, &x[h], &v[h], &t)) kk_rf_gather(&x[h], &v[h], e, l, nsy, &t, w);
			} else {
#pragma GCC unroll 8
				for (int h = 0; h < 2 * ns; h++) kk_rf_gather(&x[h], &v[h], e, l, nsy, &t, w);
			}
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) {
				// The refill of all 32 lanes at once: the group's 32
				// words at p expanded into the lanes below 2^16 (16-bit
				// lanes), whose load waits on no lane of this group.
				__mmask16 r0 = _mm512_cmplt_epu32_mask(x[2 * j], word), r1 = _mm512_cmplt_epu32_mask(x[2 * j + 1], word);
				__m512i w = _mm512_maskz_expand_epi16(_mm512_kunpackw(r1, r0), _mm512_loadu_si512(src[j] + p[j]));
				x[2 * j] = _mm512_mask_or_epi32(x[2 * j], r0, _mm512_slli_epi32(x[2 * j], 16), _mm512_cvtepu16_epi32(_mm512_castsi512_si256(w)));
				x[2 * j + 1] = _mm512_mask_or_epi32(x[2 * j + 1], r1, _mm512_slli_epi32(x[2 * j + 1], 16),
								    _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(w, 1)));
				p[j] += 2 * (__builtin_popcount(r0) + __builtin_popcount(r1));
			}
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) {
				_mm512_storeu_ps(out[j] + at + g, _mm512_mul_ps(v[2 * j], sc[j]));
				_mm512_storeu_ps(out[j] + at + g + 16, _mm512_mul_ps(v[2 * j + 1], sc[j]));
			}
		}
		k += g - g0;
		if (g < per) break;
	}
#pragma GCC unroll 8
	for (int j = 0; j < 2 * ns; j++) _mm512_storeu_si512(xs + 16 * j, x[j]);
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) pos[j] = p[j];
	return k;
}

// kk_rans2f_decode is kk_rans2f_streams for ns = 2, 3 or 4 streams, the
// unused ones' pointers null.
KK_RF_TARGET long kk_rans2f_decode(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0,
				   const uint8_t *src0, const uint8_t *src1, const uint8_t *src2, const uint8_t *src3,
				   const long *len, long *pos, long per, const uint32_t *ent, const int32_t *ent_off,
				   const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale0,
				   const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux, const uint64_t *el,
				   uint32_t *xs) {
	KK_RANS_XN(kk_rans2f_streams, aux, el, xs);
}

// kk_rans2f_decode1 is kk_rans2f_streams of one stream, called as
// kk_rans2_decode512: it returns the symbols decoded and, shifted left by
// 32, the position after them.
KK_RF_TARGET long kk_rans2f_decode1(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per,
				    const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off,
				    const int32_t *nsym, const float *scale, const uint32_t *aux, const uint64_t *el, uint32_t *xs) {
	float *const o[1] = {out};
	const uint8_t *const s[1] = {src};
	const float *const sc[1] = {scale};
	long k = kk_rans2f_streams(1, o, total, g0, s, &len, &pos, per, ent, ent_off, lv, lev_off, nsym, sc, aux, el, xs);
	return pos << 32 | k;
}

// The AVX2 kernels' lookup for tables of up to 16 symbols (the narrow
// mode's, whose window starts at 0): a lane's symbol is the number of the
// table's starts past the first at or below its slot, counted by 16-bit
// compares of 16 lanes' slots against each start broadcast, its frequency
// and start (the lookup's fs words) and its level permuted from two
// registers each; up to 8 symbols, its frequency, its start and its level
// times the scale from one register each (the lookup's frequencies and
// starts apart, and the levels scaled once per 32 lanes). The gather of 8 lanes costs about as much as 30
// compares on AMD Zen 5, and tables over 8 levels gathered their levels
// too. Larger tables, and those of over 6 symbols where the lookup has
// slot entries (NewRANSLookupLevels: a slot's packed entry and its
// level in 64 bits), read each lane's entry and level by one load
// (kk_load8el); without slot entries, its entry and then its level by
// two (kk_load8), their levels permuted from registers up to 16.

#define KK_RC_MAX 16

// kk_load8 is _mm256_i32gather_epi32(t, idx, 4) by eight scalar loads
// inserted into the vector, which AMD Zen 5 runs in about half VPGATHERDD's
// time; the indices are those of a table's slots or symbols.
__attribute__((target("avx2,fma,popcnt"))) KK_INLINE __m256i kk_load8(const int *t, __m256i idx) {
	__m128i lo = _mm256_castsi256_si128(idx), hi = _mm256_extracti128_si256(idx, 1);
	uint64_t a = (uint64_t)_mm_cvtsi128_si64(lo), b = (uint64_t)_mm_extract_epi64(lo, 1);
	uint64_t c = (uint64_t)_mm_cvtsi128_si64(hi), d = (uint64_t)_mm_extract_epi64(hi, 1);
	__m128i r0 = _mm_cvtsi32_si128(t[(uint32_t)a]);
	r0 = _mm_insert_epi32(r0, t[a >> 32], 1), r0 = _mm_insert_epi32(r0, t[(uint32_t)b], 2), r0 = _mm_insert_epi32(r0, t[b >> 32], 3);
	__m128i r1 = _mm_cvtsi32_si128(t[(uint32_t)c]);
	r1 = _mm_insert_epi32(r1, t[c >> 32], 1), r1 = _mm_insert_epi32(r1, t[(uint32_t)d], 2), r1 = _mm_insert_epi32(r1, t[d >> 32], 3);
	return _mm256_inserti128_si256(_mm256_castsi128_si256(r0), r1, 1);
}

// KK_RC_EL decodes chain h (lanes 8*q to 8*q+7 of stream j) of a group
// of kk_rans2c_streams by the slot entries w.
#define KK_RC_EL(h, j, q)                                                                                             \
	do {                                                                                                          \
		__m256i e_;                                                                                           \
		__m256 v_;                                                                                            \
		kk_load8el(w, _mm256_and_si256(x[h], m12), &e_, &v_);                                                 \
		x[h] = kk_rans2_next8(x[h], e_);                                                                      \
		_mm256_storeu_ps(out[j] + at + g + 8 * (q), _mm256_mul_ps(v_, _mm256_set1_ps(scale[j][c])));        \
		v[h] = _mm256_cmpeq_epi32(_mm256_srli_epi32(x[h], 16), zero);                                        \
	} while (0)

// kk_rans2c_streams is kk_rans2_streams2 (ns = 1 to 4 streams of 8-lane
// chains side by side) with aux's lookups: the narrow mode's tables of up
// to 16 symbols by compares, the rest by loads, of each slot's entry and
// level at once where el holds the table's slot entries (aux's word
// KK_RF_EL is their block + 1), else of the entry and then the level.
__attribute__((target("avx2,fma,popcnt"))) KK_INLINE long kk_rans2c_streams(
	const int ns, float *const *out, long total, long g0, const uint8_t *const *src, const long *len, long *pos, long per,
	const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
	const float *const *scale, const uint32_t *aux, const uint64_t *el, uint32_t *xs) {
	__m256i x[16], v[16];
	long p[4];
#pragma GCC unroll 16
	for (int j = 0; j < 4 * ns; j++) x[j] = _mm256_loadu_si256((const __m256i *)(xs + 8 * j));
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) p[j] = pos[j];
	const __m256i m12 = _mm256_set1_epi32((1 << KK_RANS_SCALE) - 1), m8 = _mm256_set1_epi32(255);
	const __m256i m16 = _mm256_set1_epi32(0xffff), zero = _mm256_setzero_si256();
	long k = 0;
	const long nc = (g0 + total) / per;
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const int *e = (const int *)(ent + ent_off[c]);
		const float *l = lv + lev_off[c];
		const int nsy = nsym[c];
		const uint32_t *a = aux + (long)KK_RF_WORDS * (ent_off[c] >> KK_RANS_SCALE);
		const uint64_t *w = el && a[KK_RF_EL] ? el + (long)(a[KK_RF_EL] - 1) * (1 << KK_RANS_SCALE) : 0;
		// The compares' window: all of a table of up to 8 symbols, or 8
		// of up to 16 symbols with slot entries, its lanes outside them
		// read from the slot entries.
		const int cmp8 = a[KK_RF_MODE] == KK_RF_NARROW && a[KK_RF_CMP] && (nsy <= 8 || (nsy <= 16 && w));
		const int cb = cmp8 ? (int)a[KK_RF_CMPBASE] : 0, cw = nsy < 8 ? nsy : 8;
		const int cmp = !cmp8 && !w && a[KK_RF_MODE] == KK_RF_NARROW && nsy <= KK_RC_MAX;
		// The starts less 1 as 16-bit words, the fs words (the window's:
		// the frequencies and the starts apart) and the levels of up to 16
		// symbols (the window's from cb).
		__m256i bnd[KK_RC_MAX - 1], f0 = zero, f1 = zero, lo = zero, hi = zero;
		if (cmp) {
			for (int i = 1; i < nsy; i++) bnd[i - 1] = _mm256_set1_epi16((short)((a[KK_RF_FS + i] >> 16) - 1));
			f0 = _mm256_loadu_si256((const __m256i *)(a + KK_RF_FS)), f1 = _mm256_loadu_si256((const __m256i *)(a + KK_RF_FS + 8));
		} else if (cmp8) {
			for (int i = 1; i < cw; i++) bnd[i - 1] = _mm256_set1_epi16((short)(a[KK_RF_START + i] - 1));
			f0 = _mm256_loadu_si256((const __m256i *)(a + KK_RF_FREQ)), f1 = _mm256_loadu_si256((const __m256i *)(a + KK_RF_START));
			// A slot below lo or above hi lies outside the window.
			lo = _mm256_set1_epi16((short)a[KK_RF_START]);
			hi = _mm256_set1_epi16((short)(a[KK_RF_START + cw - 1] + a[KK_RF_FREQ + cw - 1] - 1));
		}
		const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
		const __m256 l0 = _mm256_maskload_ps(l + cb, _mm256_cmpgt_epi32(_mm256_set1_epi32(nsy - cb), idx));
		const __m256 l1 = nsy > 8 && !cmp8 ? _mm256_maskload_ps(l + 8, _mm256_cmpgt_epi32(_mm256_set1_epi32(nsy - 8), idx)) : l0;
		long g = g0;
		for (; g < per; g += KK_RANS_LANES) {
			int room = 1;
#pragma GCC unroll 4
			for (int j = 0; j < ns; j++) room &= p[j] + 2 * KK_RANS_LANES <= len[j];
			if (!room) break;
			if (cmp8) {
#pragma GCC unroll 4
				for (int j = 0; j < ns; j++) {
					// The levels times the scale, then permuted: the
					// same products as permuted, then scaled.
					const __m256 ls = _mm256_mul_ps(l0, _mm256_set1_ps(scale[j][c]));
					__m256i s[4], sw[2], n0 = zero, n1 = zero;
#pragma GCC unroll 4
					for (int q = 0; q < 4; q++) s[q] = _mm256_and_si256(x[4 * j + q], m12);
					sw[0] = _mm256_packus_epi32(s[0], s[1]), sw[1] = _mm256_packus_epi32(s[2], s[3]);
					if (nsy > 8) {
						// A lane outside the window: the stream's 32
						// lanes from the slot entries.
						__m256i o = _mm256_or_si256(_mm256_or_si256(_mm256_cmpgt_epi16(lo, sw[0]), _mm256_cmpgt_epi16(sw[0], hi)),
									    _mm256_or_si256(_mm256_cmpgt_epi16(lo, sw[1]), _mm256_cmpgt_epi16(sw[1], hi)));
						if (__builtin_expect(!_mm256_testz_si256(o, o), 0)) {
#pragma GCC unroll 4
							for (int q = 0; q < 4; q++) KK_RC_EL(4 * j + q, j, q);
							continue;
						}
					}
					for (int i = 0; i < cw - 1; i++) {
						n0 = _mm256_sub_epi16(n0, _mm256_cmpgt_epi16(sw[0], bnd[i]));
						n1 = _mm256_sub_epi16(n1, _mm256_cmpgt_epi16(sw[1], bnd[i]));
					}
					__m256i sy[4] = {_mm256_unpacklo_epi16(n0, zero), _mm256_unpackhi_epi16(n0, zero),
							 _mm256_unpacklo_epi16(n1, zero), _mm256_unpackhi_epi16(n1, zero)};
#pragma GCC unroll 4
					for (int q = 0; q < 4; q++) {
						const int h = 4 * j + q;
						__m256i fr = _mm256_permutevar8x32_epi32(f0, sy[q]), st = _mm256_permutevar8x32_epi32(f1, sy[q]);
						x[h] = _mm256_add_epi32(_mm256_mullo_epi32(fr, _mm256_srli_epi32(x[h], KK_RANS_SCALE)), _mm256_sub_epi32(s[q], st));
						_mm256_storeu_ps(out[j] + at + g + 8 * q, _mm256_permutevar8x32_ps(ls, sy[q]));
						v[h] = _mm256_cmpeq_epi32(_mm256_srli_epi32(x[h], 16), zero);
					}
				}
			} else if (cmp) {
#pragma GCC unroll 4
				for (int j = 0; j < ns; j++) {
					const __m256 sc = _mm256_set1_ps(scale[j][c]);
					// Lanes 0-7 and 8-15 packed to 16 words (in the
					// order of packus: 0-3, 8-11, 4-7, 12-15), 16-31 too.
					__m256i s[4], w[2], n0 = zero, n1 = zero;
#pragma GCC unroll 4
					for (int q = 0; q < 4; q++) s[q] = _mm256_and_si256(x[4 * j + q], m12);
					w[0] = _mm256_packus_epi32(s[0], s[1]), w[1] = _mm256_packus_epi32(s[2], s[3]);
					for (int i = 0; i < nsy - 1; i++) {
						n0 = _mm256_sub_epi16(n0, _mm256_cmpgt_epi16(w[0], bnd[i]));
						n1 = _mm256_sub_epi16(n1, _mm256_cmpgt_epi16(w[1], bnd[i]));
					}
					__m256i sy[4] = {_mm256_unpacklo_epi16(n0, zero), _mm256_unpackhi_epi16(n0, zero),
							 _mm256_unpacklo_epi16(n1, zero), _mm256_unpackhi_epi16(n1, zero)};
#pragma GCC unroll 4
					for (int q = 0; q < 4; q++) {
						const int h = 4 * j + q;
						// Bit 3 of the symbol to the sign: which register.
						__m256 up = _mm256_castsi256_ps(_mm256_slli_epi32(sy[q], 28));
						__m256i fs = _mm256_castps_si256(_mm256_blendv_ps(
							_mm256_castsi256_ps(_mm256_permutevar8x32_epi32(f0, sy[q])),
							_mm256_castsi256_ps(_mm256_permutevar8x32_epi32(f1, sy[q])), up));
						__m256 v_ = _mm256_blendv_ps(_mm256_permutevar8x32_ps(l0, sy[q]), _mm256_permutevar8x32_ps(l1, sy[q]), up);
						x[h] = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_and_si256(fs, m16), _mm256_srli_epi32(x[h], KK_RANS_SCALE)),
									_mm256_sub_epi32(s[q], _mm256_srli_epi32(fs, 16)));
						_mm256_storeu_ps(out[j] + at + g + 8 * q, _mm256_mul_ps(v_, sc));
						v[h] = _mm256_cmpeq_epi32(_mm256_srli_epi32(x[h], 16), zero);
					}
				}
			} else if (w) {
#pragma GCC unroll 16
				for (int h = 0; h < 4 * ns; h++) KK_RC_EL(h, h / 4, h % 4);
			} else {
#pragma GCC unroll 16
				for (int h = 0; h < 4 * ns; h++) {
					const int j = h / 4, q = h % 4;
					const __m256 sc = _mm256_set1_ps(scale[j][c]);
					__m256i e_ = kk_load8(e, _mm256_and_si256(x[h], m12));
					__m256i s_ = _mm256_and_si256(e_, m8);
					x[h] = kk_rans2_next8(x[h], e_);
					__m256 v_;
					if (nsy <= 16)
						v_ = _mm256_blendv_ps(_mm256_permutevar8x32_ps(l0, s_), _mm256_permutevar8x32_ps(l1, s_),
								      _mm256_castsi256_ps(_mm256_slli_epi32(s_, 28)));
					else
						v_ = _mm256_castsi256_ps(kk_load8((const int *)l, s_));
					_mm256_storeu_ps(out[j] + at + g + 8 * q, _mm256_mul_ps(v_, sc));
					v[h] = _mm256_cmpeq_epi32(_mm256_srli_epi32(x[h], 16), zero);
				}
			}
			kk_rans2_refill2(ns, x, v, src, p);
		}
		k += g - g0;
		if (g < per) break;
	}
#pragma GCC unroll 16
	for (int j = 0; j < 4 * ns; j++) _mm256_storeu_si256((__m256i *)(xs + 8 * j), x[j]);
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) pos[j] = p[j];
	return k;
}

// kk_rans2c_decode is kk_rans2c_streams for ns = 2, 3 or 4 streams, the
// unused ones' pointers null.
__attribute__((target("avx2,fma,popcnt"))) long kk_rans2c_decode(
	long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
	const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
	const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
	const float *scale0, const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux, const uint64_t *el,
	uint32_t *xs) {
	KK_RANS_XN(kk_rans2c_streams, aux, el, xs);
}

// kk_rans2c_decode1 is kk_rans2c_streams of one stream, called as
// kk_rans2_decode2.
__attribute__((target("avx2,fma,popcnt"))) long kk_rans2c_decode1(float *out, long total, long g0, const uint8_t *src, long len,
								     long pos, long per, const uint32_t *ent, const int32_t *ent_off,
								     const float *lv, const int32_t *lev_off, const int32_t *nsym,
								     const float *scale, const uint32_t *aux, const uint64_t *el, uint32_t *xs) {
	float *const o[1] = {out};
	const uint8_t *const s[1] = {src};
	const float *const sc[1] = {scale};
	long k = kk_rans2c_streams(1, o, total, g0, s, &len, &pos, per, ent, ent_off, lv, lev_off, nsym, sc, aux, el, xs);
	return pos << 32 | k;
}
