//go:build cgo

// Matrix products of quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K,
// Q6_K) with 8-bit quantized activations, with AVX-512 and VNNI: the
// integer block dots of quant_amd64.c's AVX2 kernels on 64 bytes at a
// time, VPDPBUSD (unsigned by signed bytes into int32) for the 32-value
// blocks and VPMADDUBSW then VPDPWSSD (the pair sums times the 16-bit
// scales into int32) for the K types, so that a K block's scales are
// applied in the vector. Every integer sum is exact; each block's sums
// are then converted and scaled into the token's f32 lanes (FMA), which
// are summed once at the row's end: not the Go loops' (quant.go) order of
// f32 operations, so the results are theirs within rounding.
// Offsets come from Go (tensor.Formats) in off[]: bytes, d, dmin, scales,
// qs, qh, ql.

#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

int kk_avx512_supported(void);

// kq512_supported reports whether the CPU and OS run these kernels:
// AVX-512 F, BW and VL, and AVX512_VNNI.
int kq512_supported(void) {
	__builtin_cpu_init();
	return kk_avx512_supported() && __builtin_cpu_supports("avx512vnni");
}

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

#define KQ5_INLINE static inline __attribute__((always_inline))

// KQ5_UNROLL unrolls the short loops over rows, tokens and a block's
// parts (constant counts after inlining) so that their vectors stay in
// registers: without it GCC -O2 kept the accumulators and the unpacked
// weights in stack arrays, and a prefill spent its time storing and
// reloading them.
#define KQ5_UNROLL _Pragma("GCC unroll 8")

enum { KQ5_BYTES, KQ5_D, KQ5_DMIN, KQ5_SCALES, KQ5_QS, KQ5_QH, KQ5_QL };
enum { KQ5_Q8_0, KQ5_Q4_0, KQ5_Q4_K, KQ5_Q5_K, KQ5_Q6_K, KQ5_Q5_0 };

KQ5_INLINE float kq5_f16(const uint8_t *p) {
	uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
	return _cvtsh_ss(h);
}

KQ5_INLINE uint32_t kq5_u32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

// kq5_bits64 is a mask of the 32 bits of qh at bytes 0-31 and again at
// 32-63 (the two blocks of a pair take qh0 and qh1).
KQ5_INLINE __mmask64 kq5_bits64(uint32_t qh0, uint32_t qh1) { return (__mmask64)qh0 | (__mmask64)qh1 << 32; }

// kq5_pair returns the signed values of blocks b and b+1 of a 32-value
// type in bytes 0-31 and 32-63: Q8_0's bytes as they are; Q4_0's and
// Q5_0's 16 code bytes of each block spread over 128-bit lanes as [low
// nibbles, high nibbles], less 8 (Q4_0), or less 16 where the fifth bit
// is clear (Q5_0).
KQ5_INLINE __m512i kq5_pair(int type, const uint8_t *b0, const uint8_t *b1, const long *off) {
	if (type == KQ5_Q8_0) {
		__m256i q0 = _mm256_loadu_si256((const __m256i *)(b0 + off[KQ5_QS]));
		return _mm512_inserti64x4(_mm512_castsi256_si512(q0), _mm256_loadu_si256((const __m256i *)(b1 + off[KQ5_QS])), 1);
	}
	// [q0, q0, q1, q1], the odd 128-bit lanes shifted down by 4.
	__m512i t = _mm512_inserti64x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(b0 + off[KQ5_QS]))),
				       _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b1 + off[KQ5_QS]))), 1);
	t = _mm512_mask_srli_epi16(t, (__mmask32)0xFF00FF00u, t, 4);
	__m512i v = _mm512_and_si512(t, _mm512_set1_epi8(0x0f));
	if (type == KQ5_Q4_0)
		return _mm512_sub_epi8(v, _mm512_set1_epi8(8));
	__mmask64 h = (__mmask64)kq5_u32(b0 + off[KQ5_QH]) | (__mmask64)kq5_u32(b1 + off[KQ5_QH]) << 32;
	return _mm512_mask_sub_epi8(v, ~h, v, _mm512_set1_epi8(16));
}

// KQ5_T is the most tokens one pass over a weight row serves: the row's
// blocks are unpacked once for all of them. 8 rather than 4: 15-25% more
// GMAC per CPU-second at 64 and 512 tokens for every type
// (BenchmarkQuantRows), the 32 vector registers holding the 2x8
// accumulators.
#define KQ5_T 8

// KQ5_PF is how far ahead of the blocks being read the kernels prefetch
// the weights (bytes): a decode streams every weight once from memory,
// and one thread's sequential reads alone left it waiting on them (with
// the prefetch, Qwen2.5-0.5B Q4_K_M decode on one thread went from about
// 11 to 16 tokens/s; 1 KiB ahead gave 14, 4 and 8 KiB no more than 2 on
// that Xeon; on an AMD EPYC, Zen 5, 8 KiB took 7B-shape Q8_0 decode on two
// threads from 17 to 22 tok/s: see quant_amd64.c's KQ_PF).
#ifndef KQ5_PF
#define KQ5_PF 8192
#endif

// KQ5_KPF: whether the K kernels prefetch ahead in the row when a call
// takes rows in block ranges (ln set).
#ifndef KQ5_KPF
#define KQ5_KPF 1
#endif

// KQ5_XBYTES bounds the activations one pass of a row range reads (the
// 32-value types'): 1 MiB rather than 256 KiB took 7B-shape Q8_0 ffn_down
// (3584x18944, n=512, one thread) from 93-100 to 115-118 GMAC per
// CPU-second, its rows then streamed once per 48 tokens, not per 8.
#ifndef KQ5_XBYTES
#define KQ5_XBYTES (1024 * 1024)
#endif

// KQ5_WBYTES bounds the weights of the rows one tile of tokens passes over
// before the next tile.
#ifndef KQ5_WBYTES
#define KQ5_WBYTES (24 * 1024)
#endif

// kq5_prefetch asks for the cache lines of the n bytes KQ5_PF ahead of
// p: a prefetch does not fault, so past the matrix's end is harmless.
KQ5_INLINE void kq5_prefetch(const uint8_t *p, long n) {
	for (long o = 0; o < n; o += 64)
		_mm_prefetch((const char *)(p + KQ5_PF + o), _MM_HINT_T0);
}

// kq5_dw returns the f16 scales of blocks at p0 and p1 in f32 lanes 0-7
// and 8-15.
KQ5_INLINE __m512 kq5_dw(const uint8_t *p0, const uint8_t *p1, long d) {
	const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	__m128i dh = _mm_insert_epi16(_mm_cvtsi32_si128(*(const uint16_t *)(p0 + d)), *(const uint16_t *)(p1 + d), 1);
	return _mm512_permutexvar_ps(half, _mm512_castps128_ps512(_mm_cvtph_ps(dh)));
}

// kq5_rows32 sets out[r*1 + t*ldo] for the nr rows (1 or 2, rowb bytes
// apart) at w and the nt token rows of x, for a 32-value type. Per pair
// of blocks: each row's signed values unpacked once, with 128 times their
// sums (per 4 values) negated; per token, the activations offset by 128
// (unsigned) once for both rows, and per row VPDPBUSD from those negated
// sums gives each 4 values' exact integer dot in an int32 lane, converted
// and multiplied by its block's two scales into an f32 lane accumulator,
// reduced at the end of the row. A token's result does not depend on nt
// or nr.
KQ5_INLINE void kq5_rows32(int type, int nr, int nt, const uint8_t *w, long rowb, const long *off, const int8_t *x,
			   long ldx, const float *xd, long ldd, long nb, float *out, long ldo) {
	const __m512i flip = _mm512_set1_epi8((char)0x80), c128 = _mm512_set1_epi8((char)0x80);
	const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	__m512 acc[2][KQ5_T];
	KQ5_UNROLL
	for (int r = 0; r < nr; r++)
		KQ5_UNROLL
		for (int t = 0; t < nt; t++)
			acc[r][t] = _mm512_setzero_ps();
	long b = 0;
	for (; b + 1 < nb; b += 2) {
		__m512i v[2], neg[2];
		__m512 dw[2];
		KQ5_UNROLL
		for (int r = 0; r < nr; r++) {
			const uint8_t *p0 = w + r * rowb + b * off[KQ5_BYTES], *p1 = p0 + off[KQ5_BYTES];
			kq5_prefetch(p0, 2 * off[KQ5_BYTES]);
			v[r] = kq5_pair(type, p0, p1, off);
			neg[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, v[r]));
			dw[r] = kq5_dw(p0, p1, off[KQ5_D]);
		}
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			__m512i u = _mm512_xor_si512(_mm512_loadu_si512((const void *)(x + t * ldx + 32 * b)), flip);
			__m512 dx = _mm512_permutexvar_ps(half, _mm512_castpd_ps(_mm512_castpd128_pd512(_mm_load_sd((const double *)(xd + t * ldd + b)))));
			KQ5_UNROLL
			for (int r = 0; r < nr; r++) {
				__m512i si = _mm512_dpbusd_epi32(neg[r], u, v[r]);
				acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(dw[r], dx), acc[r][t]);
			}
		}
	}
	if (b < nb) { // the last block alone: the pair's second half is zero
		__m512i v[2], neg[2];
		__m512 dw[2];
		KQ5_UNROLL
		for (int r = 0; r < nr; r++) {
			const uint8_t *p0 = w + r * rowb + b * off[KQ5_BYTES];
			v[r] = _mm512_maskz_mov_epi8((__mmask64)0xFFFFFFFFULL, kq5_pair(type, p0, p0, off));
			neg[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, v[r]));
			dw[r] = _mm512_set1_ps(kq5_f16(p0 + off[KQ5_D]));
		}
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			__m512i xv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x + t * ldx + 32 * b)));
			__m512i u = _mm512_xor_si512(_mm512_inserti64x4(xv, _mm256_setzero_si256(), 1), flip);
			__m512 dx = _mm512_set1_ps(xd[t * ldd + b]);
			KQ5_UNROLL
			for (int r = 0; r < nr; r++) {
				__m512i si = _mm512_dpbusd_epi32(neg[r], u, v[r]);
				acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(dw[r], dx), acc[r][t]);
			}
		}
	}
	KQ5_UNROLL
	for (int r = 0; r < nr; r++)
		KQ5_UNROLL
		for (int t = 0; t < nt; t++)
			out[r + t * ldo] = _mm512_reduce_add_ps(acc[r][t]);
}

// kq5_scales_k4 unpacks a Q4_K/Q5_K block's 12 scale bytes into 8 scales
// (bytes of *sc) and 8 mins (bytes of *m), ggml's get_scale_min_k4 for j =
// 0..7, in registers: j < 4 are the low 6 bits of bytes j and j+4; j >= 4
// take their low 4 bits from byte j+4 and their top 2 from the top bits
// of bytes j-4 and j.
KQ5_INLINE void kq5_scales_k4(const uint8_t *q, uint64_t *sc, uint64_t *m) {
	uint32_t u0, u1, u2;
	memcpy(&u0, q, 4);
	memcpy(&u1, q + 4, 4);
	memcpy(&u2, q + 8, 4);
	const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
	*sc = (uint64_t)(u0 & k6) | (uint64_t)((u2 & k4) | ((u0 >> 6) & k2) << 4) << 32;
	*m = (uint64_t)(u1 & k6) | (uint64_t)(((u2 >> 4) & k4) | ((u1 >> 6) & k2) << 4) << 32;
}

// kq5_lanes_in starts the K kernels' f32 lane accumulators of nt tokens
// for blocks from b0: zero at a row's first block, else the lanes a
// previous range of the row's blocks left in lanes (16 floats a token),
// so that a row taken in ranges of blocks sums its lanes in the same
// order, with the same bits, as in one pass.
KQ5_INLINE void kq5_lanes_in(int nt, __m512 *acc, long b0, const float *lanes) {
	KQ5_UNROLL
	for (int t = 0; t < nt; t++)
		acc[t] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(lanes + 16 * t);
}

// kq5_lanes_out ends a range of blocks: at the row's end (last) each
// token's lanes reduced into out[t*ldo], else kept in lanes for the next
// range.
KQ5_INLINE void kq5_lanes_out(int nt, const __m512 *acc, int last, float *lanes, float *out, long ldo) {
	KQ5_UNROLL
	for (int t = 0; t < nt; t++) {
		if (last)
			out[t * ldo] = _mm512_reduce_add_ps(acc[t]);
		else
			_mm512_store_ps(lanes + 16 * t, acc[t]);
	}
}

// kq5_q45_k sets out[t*ldo] to the dot of one row (w) with the nt token
// rows of x for Q4_K (five = 0) and Q5_K: per block, the scales and the
// 4-bit (5-bit) values unpacked once, and per token the integer sum over
// the block in the vector, reduced once, then the Go loops' f32 scaling.
KQ5_INLINE void kq5_q45_k(int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx, const float *xd,
			  long ldd, const int32_t *bsums, long ldb, long b0, long b1, long nb, int five, float *ln,
			  float *out, long ldo) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m512 acc_f[KQ5_T];
	kq5_lanes_in(nt, acc_f, b0, ln);
	for (long b = b0; b < b1; b++) {
		const uint8_t *blk = w + b * off[KQ5_BYTES];
		if (KQ5_KPF || ln == NULL)
			kq5_prefetch(blk, off[KQ5_BYTES]);
		uint64_t sc, mn;
		kq5_scales_k4(blk + off[KQ5_SCALES], &sc, &mn);
		__m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
		// The mins twice each, as 16-bit lanes against the pairs of sums.
		__m128i m8 = _mm_cvtsi64_si128((long long)mn);
		__m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
		__m512i qh = _mm512_setzero_si512();
		if (five) {
			__m256i h = _mm256_loadu_si256((const __m256i *)(blk + off[KQ5_QH]));
			qh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
		}
		__m512i v[4], scv[4];
		KQ5_UNROLL
		for (int c = 0; c < 4; c++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(blk + off[KQ5_QS] + 32 * c));
			v[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
						  _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
			if (five) {
				__m512i u = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
							       _mm256_set1_epi8((char)(2 << (2 * c))), 1);
				v[c] = _mm512_mask_add_epi8(v[c], _mm512_test_epi8_mask(qh, u), v[c], _mm512_set1_epi8(16));
			}
			__m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
			scv[c] = _mm512_permutexvar_epi16(idx, sc16);
		}
		float dw = kq5_f16(blk + off[KQ5_D]), dmw = kq5_f16(blk + off[KQ5_DMIN]);
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			const int8_t *xs = x + t * ldx + 256 * b;
			const int32_t *bs = bsums + t * ldb + 16 * b;
			__m512i acc = _mm512_setzero_si512();
			KQ5_UNROLL
			for (int c = 0; c < 4; c++)
				acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(v[c], _mm512_loadu_si512((const void *)(xs + 64 * c))), scv[c]);
			// Each sum of 16 activations fits 16 bits (at most 16*127).
			__m256i mp = _mm256_madd_epi16(_mm512_cvtepi32_epi16(_mm512_loadu_si512((const void *)bs)), mn16);
			// The block's scaled sums and mins (int32 lanes, exact) into the
			// token's f32 lanes, reduced once at the row's end.
			float dx = xd[t * ldd + b];
			acc_f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(dw * dx), acc_f[t]);
			acc_f[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(mp)), _mm512_set1_ps(dmw * dx), acc_f[t]);
		}
	}
	kq5_lanes_out(nt, acc_f, b1 == nb, ln, out, ldo);
}

// kq5_q6_k is kq5_q45_k for Q6_K.
KQ5_INLINE void kq5_q6_k(int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx, const float *xd,
			 long ldd, const int32_t *bsums, long ldb, long b0, long b1, long nb, float *ln, float *out,
			 long ldo) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	// int16 lanes 8g..8g+7 of a pair of 32-value runs take scale group g.
	const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001, 0x00010001, 0x00020002,
					      0x00020002, 0x00020002, 0x00020002, 0x00030003, 0x00030003, 0x00030003,
					      0x00030003);
	__m512 acc_f[KQ5_T];
	kq5_lanes_in(nt, acc_f, b0, ln);
	for (long b = b0; b < b1; b++) {
		const uint8_t *blk = w + b * off[KQ5_BYTES];
		if (KQ5_KPF || ln == NULL)
			kq5_prefetch(blk, off[KQ5_BYTES]);
		__m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + off[KQ5_SCALES]));
		__m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
		__m512i sc32 = _mm512_cvtepi8_epi32(sc8);
		__m512i v[4], scv[4];
		KQ5_UNROLL
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = blk + off[KQ5_QL] + 64 * h;
			__m256i qh = _mm256_loadu_si256((const __m256i *)(blk + off[KQ5_QH] + 32 * h));
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
			__m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4),
						     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
			__m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
						     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
			__m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
						     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
			v[2 * h] = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
			v[2 * h + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(q2), q3, 1);
			scv[2 * h] = _mm512_permutexvar_epi16(_mm512_add_epi16(i01, _mm512_set1_epi16((short)(8 * h))), sc16);
			scv[2 * h + 1] = _mm512_permutexvar_epi16(_mm512_add_epi16(i01, _mm512_set1_epi16((short)(8 * h + 4))), sc16);
		}
		float dw = kq5_f16(blk + off[KQ5_D]);
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			const int8_t *xs = x + t * ldx + 256 * b;
			// The offset of 32: Σ_g sc_g·32·bsum_g, taken off first.
			__m512i acc = _mm512_sub_epi32(_mm512_setzero_si512(),
				_mm512_slli_epi32(_mm512_mullo_epi32(sc32, _mm512_loadu_si512((const void *)(bsums + t * ldb + 16 * b))), 5));
			KQ5_UNROLL
			for (int k = 0; k < 4; k++)
				acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(v[k], _mm512_loadu_si512((const void *)(xs + 64 * k))), scv[k]);
			acc_f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(dw * xd[t * ldd + b]), acc_f[t]);
		}
	}
	kq5_lanes_out(nt, acc_f, b1 == nb, ln, out, ldo);
}

// KQ5_ROWS32 runs nr rows (a constant, 1 or 2) of a 32-value type against
// nt tokens (a constant).
#define KQ5_ROWS32(nr, nt)                                                                                         \
	switch (type) {                                                                                            \
	case KQ5_Q8_0:                                                                                             \
		kq5_rows32(KQ5_Q8_0, nr, nt, wr, rowb, off, xi, cols, di, nb, nb, o, ldo);                        \
		break;                                                                                             \
	case KQ5_Q4_0:                                                                                             \
		kq5_rows32(KQ5_Q4_0, nr, nt, wr, rowb, off, xi, cols, di, nb, nb, o, ldo);                        \
		break;                                                                                             \
	default:                                                                                                   \
		kq5_rows32(KQ5_Q5_0, nr, nt, wr, rowb, off, xi, cols, di, nb, nb, o, ldo);                        \
		break;                                                                                             \
	}

// KQ5_TILE runs nr rows (two at a time for the 32-value types, else one)
// against nt tokens, nt a constant.
#define KQ5_TILE(nt)                                                                                               \
	switch (type) {                                                                                            \
	case KQ5_Q8_0:                                                                                             \
	case KQ5_Q4_0:                                                                                             \
	case KQ5_Q5_0:                                                                                             \
		if (nr == 2) {                                                                                     \
			KQ5_ROWS32(2, nt);                                                                         \
		} else {                                                                                           \
			KQ5_ROWS32(1, nt);                                                                         \
		}                                                                                                  \
		break;                                                                                             \
	case KQ5_Q4_K:                                                                                             \
		kq5_q45_k(nt, wr, off, xi, cols, di, nb, bi, cols / 16, k0, k1, nb, 0, ln, o, ldo);                           \
		break;                                                                                             \
	case KQ5_Q5_K:                                                                                             \
		kq5_q45_k(nt, wr, off, xi, cols, di, nb, bi, cols / 16, k0, k1, nb, 1, ln, o, ldo);                           \
		break;                                                                                             \
	case KQ5_Q6_K:                                                                                             \
		kq5_q6_k(nt, wr, off, xi, cols, di, nb, bi, cols / 16, k0, k1, nb, ln, o, ldo);                               \
		break;                                                                                             \
	}

// KQ5_BY_NT runs KQ5_TILE for the tile's token count, n - i up to KQ5_T.
#define KQ5_BY_NT                                                                                                  \
	switch (n - i < KQ5_T ? n - i : KQ5_T) {                                                                   \
	case 1:                                                                                                    \
		KQ5_TILE(1);                                                                                       \
		break;                                                                                             \
	case 2:                                                                                                    \
		KQ5_TILE(2);                                                                                       \
		break;                                                                                             \
	case 3:                                                                                                    \
		KQ5_TILE(3);                                                                                       \
		break;                                                                                             \
	case 4:                                                                                                    \
		KQ5_TILE(4);                                                                                       \
		break;                                                                                             \
	case 5:                                                                                                    \
		KQ5_TILE(5);                                                                                       \
		break;                                                                                             \
	case 6:                                                                                                    \
		KQ5_TILE(6);                                                                                       \
		break;                                                                                             \
	case 7:                                                                                                    \
		KQ5_TILE(7);                                                                                       \
		break;                                                                                             \
	default:                                                                                                   \
		KQ5_TILE(8);                                                                                       \
		break;                                                                                             \
	}

// KQ5_KXBYTES bounds the activations of a K type's token block, as
// KQ5_XBYTES the 32-value types'.
#ifndef KQ5_KXBYTES
#define KQ5_KXBYTES (1024 * 1024)
#endif

// KQ5_KC is how many 256-value blocks of a row a K type's tile takes
// before the next row, when a call has more than one tile of tokens:
// the tile's activations for those blocks (KQ5_T x 2 KiB) then stay in
// the L1 cache while KQ5_KR rows pass over them, and those rows' blocks
// (KQ5_KR x KQ5_KC blocks) while the token block's tiles pass over them.
// Without it a long row (ffn_down's 18,944 values) read its tile's 150 KB
// of activations from L2 for every row.
#ifndef KQ5_KC
#define KQ5_KC 8
#endif
#ifndef KQ5_KR
#define KQ5_KR 8
#endif

// KQ5_KTB is the most tokens of a K type's token block (a multiple of
// KQ5_T): the lanes a row's block ranges leave for the next are kept for
// KQ5_KR rows of that many tokens.
#ifndef KQ5_KTB
#define KQ5_KTB 64
#endif

// kq5_rows_k is kq512_rows for the K types when n > KQ5_T: tokens in
// blocks of up to KQ5_KTB, rows in chunks of KQ5_KR and each row's blocks
// in ranges of KQ5_KC, each tile's f32 lanes kept between ranges, so that
// a token's result has the bits of one pass over the row.
static void kq5_rows_k(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
		       const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	static const int nr = 1; // KQ5_TILE's 32-value branch, unused here
	long nb = cols / 256;
	long tb = KQ5_KXBYTES / cols;
	tb = tb < KQ5_T ? KQ5_T : tb > KQ5_KTB ? KQ5_KTB : tb - tb % KQ5_T;
	float lanes[KQ5_KR * KQ5_KTB * 16] __attribute__((aligned(64)));
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = r0; c0 < r1; c0 += KQ5_KR)
			for (long k0 = 0; k0 < nb; k0 += KQ5_KC) {
				long k1 = k0 + KQ5_KC < nb ? k0 + KQ5_KC : nb;
				for (long i = t0; i < n && i < t0 + tb; i += KQ5_T)
					for (long r = c0; r < r1 && r < c0 + KQ5_KR; r++) {
						const uint8_t *wr = w + r * rowb;
						const int8_t *xi = x + i * cols;
						const float *di = xd + i * nb;
						const int32_t *bi = bsums + i * (cols / 16);
						float *o = out + i * ldo + r;
						float *ln = lanes + ((r - c0) * KQ5_KTB + (i - t0)) * 16;
						KQ5_BY_NT
					}
			}
}

// kq512_rows is quant_amd64.c's kq_rows with these kernels: each weight row
// is unpacked once per KQ5_T tokens, the 32-value types' rows two at a
// time, sharing each token's activations — but one at a time for one
// token (a decode), whose pass waits on the weights' stream from memory:
// one row's sequential reads with the prefetch ahead of them went 1.45-1.6x
// as fast as two rows' interleaved (BenchmarkQuantRows7B Q8_0 n=1, one
// thread of an AMD EPYC, Zen 5: 25 -> 36-37 GMAC per CPU-second for
// 18944x3584, 20 -> 32-33 for 3584x18944).
void kq512_rows(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
		const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	int is32 = type == KQ5_Q8_0 || type == KQ5_Q4_0 || type == KQ5_Q5_0;
	if (!is32 && n > KQ5_T) {
		kq5_rows_k(type, w, rowb, r0, r1, off, x, xd, bsums, n, cols, out, ldo);
		return;
	}
	long nb = cols / (is32 ? 32 : 256);
	// A K type's tile takes its row's blocks in one range.
	const long k0 = 0, k1 = nb;
	float *ln = NULL;
	// Tokens in blocks of about KQ5_XBYTES of activations, which stay in
	// the L2 cache while the rows pass over them: a prefill's whole
	// activations would not, and each row would stream them again.
	long tb = KQ5_XBYTES / cols;
	tb = tb < KQ5_T ? KQ5_T : tb - tb % KQ5_T;
	// Rows in chunks of about KQ5_WBYTES, which stay in the L1 cache while
	// each tile of tokens passes over them: a tile's activations then come
	// from L2 once per chunk rather than once per row (or pair).
	long rc = KQ5_WBYTES / rowb;
	rc = rc < 2 ? 2 : rc - rc % 2;
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = r0; c0 < r1; c0 += rc)
			for (long i = t0; i < n && i < t0 + tb; i += KQ5_T) {
				int nr;
				for (long r = c0; r < r1 && r < c0 + rc; r += nr) {
					nr = is32 && n > 1 && r + 1 < r1 && r + 1 < c0 + rc ? 2 : 1;
					const uint8_t *wr = w + r * rowb;
					const int8_t *xi = x + i * cols;
					const float *di = xd + i * nb;
					const int32_t *bi = bsums + i * (cols / 16);
					float *o = out + i * ldo + r;
					KQ5_BY_NT
				}
			}
}
