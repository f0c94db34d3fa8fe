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

// The kernels of the K types' eight-row interleaved layouts
// (tensor.Q4_Kx8, Q5_Kx8, Q6_Kx8, which Pool.Prepare makes at load; the
// AVX2 kernels of quant_amd64.c read the same bytes) with AVX-512 VNNI:
// two groups side by side, so that a 512-bit vector holds sixteen rows'
// four code bytes, one row a 32-bit lane (the first group's eight rows in
// the low half). Per token, VPDPBUSD multiplies the sixteen rows' four
// unsigned codes by the same four signed activations, broadcast from
// memory, and adds them into the row's lane: a sub-block's products sum
// in 32 bits without a shuffle or a horizontal step, then take the rows'
// scales (VPMULLD) once per sub-block. Each row's integer sums are
// quant.go's, exactly (integer addition in another order), and the
// block's f32 scaling is the Go loop's lane by lane, so every result has
// the Go loops' bits, for any token count, block range or pairing of
// groups: a token's result is the same alone (decode) or in a tile.
// Offsets come from Go in off[] (x8Offsets): group block bytes, d, dmin,
// scales, qs, qh.
enum { KX5_BYTES, KX5_D, KX5_DMIN, KX5_SCALES, KX5_QS, KX5_QH };

// KX5_T is the most tokens one pass over a pair of groups' blocks serves:
// each vector of codes is unpacked once for all of them.
#define KX5_T 8

// kx5_load2 is the 32 bytes at p0 (the first group's eight rows) and the
// 32 at p1 (the second's) as one vector.
KQ5_INLINE __m512i kx5_load2(const uint8_t *p0, const uint8_t *p1) {
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
				  _mm256_loadu_si256((const __m256i *)p1), 1);
}

// kx5_load2x is kx5_load2 for 16 bytes at each.
KQ5_INLINE __m256i kx5_load2x(const uint8_t *p0, const uint8_t *p1) {
	return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
				       _mm_loadu_si128((const __m128i *)p1), 1);
}

KQ5_INLINE __m512i kx5_bcast4(const void *p) {
	int v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

// kx5_prefetch asks for the cache lines of the blocks about KQ5_PF bytes
// ahead of block b of the pair of groups at w0 and w1 (nb blocks of bb
// bytes each; one: w0 alone), which a decode reads in turn: each group's
// block b + KQ5_PF / (2 bb), or past the groups' last block the next
// pair's (the groups lie one after another), so that the stream of the
// pair, not each group's, runs ahead (with short rows, 8 KiB ahead of a
// group's block lands in the next group, which the pair has read).
KQ5_INLINE void kx5_prefetch(const uint8_t *w0, const uint8_t *w1, int one, long b, long nb, long bb) {
	long a = b + (KQ5_PF + 2 * bb - 1) / (2 * bb);
	const uint8_t *f0 = a < nb ? w0 + a * bb : w0 + (one ? nb : 2 * nb) * bb + (a - nb) * bb;
	for (long o = 0; o < bb; o += 64)
		_mm_prefetch((const char *)(f0 + o), _MM_HINT_T0);
	if (one)
		return;
	const uint8_t *f1 = a < nb ? w1 + a * bb : w1 + 2 * nb * bb + (a - nb) * bb;
	for (long o = 0; o < bb; o += 64)
		_mm_prefetch((const char *)(f1 + o), _MM_HINT_T0);
}

// kx5_sums_in starts the nt tokens' f32 sums of the sixteen rows (eight
// where one is set: a single group) for blocks from b0: zero at the rows'
// first block, else what the previous range of blocks left in out.
KQ5_INLINE void kx5_sums_in(int nt, __m512 *sumv, int carry, int one, const float *out, long ldo) {
	KQ5_UNROLL
	for (int t = 0; t < nt; t++)
		sumv[t] = !carry ? _mm512_setzero_ps()
			: one	 ? _mm512_maskz_loadu_ps(0xFF, out + t * ldo)
				 : _mm512_loadu_ps(out + t * ldo);
}

KQ5_INLINE void kx5_sums_out(int nt, const __m512 *sumv, int one, float *out, long ldo) {
	KQ5_UNROLL
	for (int t = 0; t < nt; t++) {
		if (one)
			_mm512_mask_storeu_ps(out + t * ldo, 0xFF, sumv[t]);
		else
			_mm512_storeu_ps(out + t * ldo, sumv[t]);
	}
}

// kx5_q45k adds to the nt tokens' sums (out, ldo apart; carry: from a
// previous range of blocks, else from zero) the blocks [0, nb) at w0 and
// w1 of two groups of Q4_Kx8 (five = 0) or Q5_Kx8 (w1 = w0 and one set:
// the first group alone). Per block, the sixteen rows' 6-bit scales and
// mins unpacked once; per sub-block j (32 values), its eight vectors of
// codes (four values a row each) against the tokens' activations by
// VPDPBUSD, then times the rows' scale j; the mins once per block (four
// VPDPWSSD of the rows' pairs of mins by the token's pairs of sub-block
// sums); then the Go loop's f32 scaling (d = dw·xd, dmin = dmw·xd, a =
// d·sumi, m = dmin·mins, sum = sum + (a - m)), row r in lane r.
KQ5_INLINE void kx5_q45k(int nt, const uint8_t *w0, const uint8_t *w1, int one, long nb, const long *off,
			 const int8_t *x, long ldx, const float *xd, long ldd, const int32_t *bsums, long ldb, int five,
			 int pf, int carry, float *out, long ldo) {
	const __m512i m4 = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi8(0x3f), m3 = _mm512_set1_epi8(3);
	const __m512i lsb = _mm512_set1_epi8(1);
	__m512 sumv[KX5_T];
	kx5_sums_in(nt, sumv, carry, one, out, ldo);
	for (long b = 0; b < nb; b++) {
		const uint8_t *p0 = w0 + b * off[KX5_BYTES], *p1 = w1 + b * off[KX5_BYTES];
		if (pf)
			kx5_prefetch(w0, w1, one, b, nb, off[KX5_BYTES]);
		// The scales and mins, as quant_amd64.c's kx_unpack_sm for both
		// groups: a = bytes 0-31 and 32-63 of each group's packed
		// values, h their top nibbles (bytes 64-95).
		const uint8_t *s0 = p0 + off[KX5_SCALES], *s1 = p1 + off[KX5_SCALES];
		__m512i a0 = kx5_load2(s0, s1), a1 = kx5_load2(s0 + 32, s1 + 32), h = kx5_load2(s0 + 64, s1 + 64);
		// Scales 8j + r (j < 4 from a0, else a1), each group's in its half:
		// qword j of a half is sub-block j's eight rows; lane-pairs
		// [group 0, group 1] of sub-block j in 128-bit lane j.
		const __m512i pq = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
		__m512i sc[2] = {_mm512_permutexvar_epi64(pq, _mm512_and_si512(a0, m6)),
				 _mm512_permutexvar_epi64(pq, _mm512_and_si512(a1, m6))};
		// Mins 64 + 16k + 2r + i: low 2 bits from a's top, top 4 from h.
		__m512i mlo = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a0, 6), m3),
					      _mm512_slli_epi16(_mm512_and_si512(h, m4), 2));
		__m512i mhi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a1, 6), m3),
					      _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m4), 2));
		// Part k's pairs of mins: 16 bytes of each group's half (mlo for
		// k < 2, mhi for k >= 2), 128-bit lanes [k, k + 2] of the half's
		// pair, widened to 16 bits: row r's pair in 32-bit lane r.
		__m512i mk[4];
		{
			__m512i lo = _mm512_shuffle_i64x2(mlo, mlo, 0xD8), hi = _mm512_shuffle_i64x2(mhi, mhi, 0xD8);
			mk[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(lo));
			mk[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(lo, 1));
			mk[2] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(hi));
			mk[3] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(hi, 1));
		}
		const uint8_t *q0 = p0 + off[KX5_QS], *q1 = p1 + off[KX5_QS];
		const uint8_t *h0 = p0 + off[KX5_QH], *h1 = p1 + off[KX5_QH];
		// The tokens' sub-block sums S_j = bsum_2j + bsum_2j+1 (at most
		// 32 x 127: 16 bits), as pairs (S_2k, S_2k+1) in dword k.
		int32_t bp[KX5_T][4] __attribute__((aligned(16)));
		__m512i isum[KX5_T];
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			isum[t] = _mm512_setzero_si512();
			__m256i s16 = _mm512_cvtepi32_epi16(_mm512_loadu_si512((const void *)(bsums + t * ldb + 16 * b)));
			_mm_store_si128((__m128i *)bp[t], _mm256_cvtepi32_epi16(_mm256_madd_epi16(s16, _mm256_set1_epi16(1))));
		}
		uint8_t scb[128] __attribute__((aligned(64)));
		_mm512_store_si512((void *)scb, sc[0]);
		_mm512_store_si512((void *)(scb + 64), sc[1]);
		for (int c = 0; c < 4; c++) { // part c: sub-blocks 2c (low nibbles), 2c+1 (high)
			KQ5_UNROLL
			for (int hb = 0; hb < 2; hb++) {
				int j = 2 * c + hb;
				__m512i scj = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(scb + 16 * j)));
				// Bit j of each qh byte (Q5_K's fifth bits) to bit 0 of its
				// byte by a 16-bit shift, masked, then to bit 4.
				__m128i cj = _mm_cvtsi32_si128(j);
				__m512i acc[KX5_T];
				KQ5_UNROLL
				for (int t = 0; t < nt; t++)
					acc[t] = _mm512_setzero_si512();
				KQ5_UNROLL
				for (int k = 0; k < 8; k++) {
					__m512i q = kx5_load2(q0 + 256 * c + 32 * k, q1 + 256 * c + 32 * k);
					__m512i v = hb ? _mm512_and_si512(_mm512_srli_epi16(q, 4), m4) : _mm512_and_si512(q, m4);
					if (five) {
						__m512i f = _mm512_and_si512(_mm512_srl_epi16(kx5_load2(h0 + 32 * k, h1 + 32 * k), cj), lsb);
						v = _mm512_or_si512(v, _mm512_slli_epi16(f, 4));
					}
					KQ5_UNROLL
					for (int t = 0; t < nt; t++)
						acc[t] = _mm512_dpbusd_epi32(acc[t], v, kx5_bcast4(x + t * ldx + 256 * b + 32 * j + 4 * k));
				}
				KQ5_UNROLL
				for (int t = 0; t < nt; t++)
					isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(acc[t], scj));
			}
		}
		__m512 dw = _mm512_cvtph_ps(kx5_load2x(p0 + off[KX5_D], p1 + off[KX5_D]));
		__m512 dm = _mm512_cvtph_ps(kx5_load2x(p0 + off[KX5_DMIN], p1 + off[KX5_DMIN]));
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			__m512i ms = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mk[0], kx5_bcast4(bp[t]));
			ms = _mm512_dpwssd_epi32(ms, mk[1], kx5_bcast4(bp[t] + 1));
			ms = _mm512_dpwssd_epi32(ms, mk[2], kx5_bcast4(bp[t] + 2));
			ms = _mm512_dpwssd_epi32(ms, mk[3], kx5_bcast4(bp[t] + 3));
			__m512 xv = _mm512_set1_ps(xd[t * ldd + b]);
			__m512 a = _mm512_mul_ps(_mm512_mul_ps(dw, xv), _mm512_cvtepi32_ps(isum[t]));
			__m512 m = _mm512_mul_ps(_mm512_mul_ps(dm, xv), _mm512_cvtepi32_ps(ms));
			sumv[t] = _mm512_add_ps(sumv[t], _mm512_sub_ps(a, m));
		}
	}
	kx5_sums_out(nt, sumv, one, out, ldo);
}

// kx5_q6k is kx5_q45k for Q6_Kx8: per 16-value sub-block u, its four
// vectors of 6-bit codes (three masked from the loads, the fourth
// gathered from their top bits) against the tokens' activations by
// VPDPBUSD, times the rows' signed scale u; less 32·Σ_u scale_u·bsum_u
// (VPDPWSSD of the rows' pairs of scales, times -32, by the token's pairs
// of sums):
// quant.go's dotQ6K's integers; then sum = sum + (dw·xd)·sumi, row r in
// lane r.
KQ5_INLINE void kx5_q6k(int nt, const uint8_t *w0, const uint8_t *w1, int one, long nb, const long *off,
			const int8_t *x, long ldx, const float *xd, long ldd, const int32_t *bsums, long ldb, int pf,
			int carry, float *out, long ldo) {
	const __m512i m6 = _mm512_set1_epi8(0x3f), c03 = _mm512_set1_epi8(0x03), c0c = _mm512_set1_epi8(0x0c),
		      c30 = _mm512_set1_epi8(0x30);
	__m512 sumv[KX5_T];
	kx5_sums_in(nt, sumv, carry, one, out, ldo);
	for (long b = 0; b < nb; b++) {
		const uint8_t *p0 = w0 + b * off[KX5_BYTES], *p1 = w1 + b * off[KX5_BYTES];
		if (pf)
			kx5_prefetch(w0, w1, one, b, nb, off[KX5_BYTES]);
		const uint8_t *s0 = p0 + off[KX5_SCALES], *s1 = p1 + off[KX5_SCALES];
		const uint8_t *q0 = p0 + off[KX5_QS], *q1 = p1 + off[KX5_QS];
		// The tokens' sums of 16 (at most 16 x 127: 16 bits) as pairs
		// (bsum_2p, bsum_2p+1) in dword p.
		int32_t bp[KX5_T][8] __attribute__((aligned(32)));
		__m512i isum[KX5_T];
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			isum[t] = _mm512_setzero_si512();
			_mm256_store_si256((__m256i *)bp[t],
					   _mm512_cvtepi32_epi16(_mm512_loadu_si512((const void *)(bsums + t * ldb + 16 * b))));
		}
		for (int p = 0; p < 8; p++) { // sub-blocks 2p and 2p+1
			// Row r's scales of the pair in 32-bit lane r (16-bit words).
			__m512i sp = _mm512_cvtepi8_epi16(kx5_load2x(s0 + 16 * p, s1 + 16 * p));
			// The codes' offset: -32 times the scales (16 bits) by the
			// pair of sums.
			__m512i sn = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(sp, 5));
			KQ5_UNROLL
			for (int t = 0; t < nt; t++)
				isum[t] = _mm512_dpwssd_epi32(isum[t], sn, kx5_bcast4(bp[t] + p));
			KQ5_UNROLL
			for (int e = 0; e < 2; e++) {
				int u = 2 * p + e;
				__m512i scu = e ? _mm512_srai_epi32(sp, 16) : _mm512_srai_epi32(_mm512_slli_epi32(sp, 16), 16);
				const uint8_t *c0 = q0 + 96 * u, *c1 = q1 + 96 * u;
				__m512i r0 = kx5_load2(c0, c1), r1 = kx5_load2(c0 + 32, c1 + 32), r2 = kx5_load2(c0 + 64, c1 + 64);
				__m512i v3 = _mm512_or_si512(
					_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(r0, 6), c03),
							_mm512_and_si512(_mm512_srli_epi16(r1, 4), c0c)),
					_mm512_and_si512(_mm512_srli_epi16(r2, 2), c30));
				__m512i v[4] = {_mm512_and_si512(r0, m6), _mm512_and_si512(r1, m6), _mm512_and_si512(r2, m6), v3};
				__m512i acc[KX5_T];
				KQ5_UNROLL
				for (int t = 0; t < nt; t++) {
					const int8_t *xs = x + t * ldx + 256 * b + 16 * u;
					__m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[0], kx5_bcast4(xs));
					s = _mm512_dpbusd_epi32(s, v[1], kx5_bcast4(xs + 4));
					s = _mm512_dpbusd_epi32(s, v[2], kx5_bcast4(xs + 8));
					acc[t] = _mm512_dpbusd_epi32(s, v[3], kx5_bcast4(xs + 12));
				}
				KQ5_UNROLL
				for (int t = 0; t < nt; t++)
					isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(acc[t], scu));
			}
		}
		__m512 dw = _mm512_cvtph_ps(kx5_load2x(p0 + off[KX5_D], p1 + off[KX5_D]));
		KQ5_UNROLL
		for (int t = 0; t < nt; t++) {
			__m512 xv = _mm512_set1_ps(xd[t * ldd + b]);
			sumv[t] = _mm512_add_ps(sumv[t], _mm512_mul_ps(_mm512_mul_ps(dw, xv), _mm512_cvtepi32_ps(isum[t])));
		}
	}
	kx5_sums_out(nt, sumv, one, out, ldo);
}

// KX5_GC is how many groups (a multiple of 2) a chunk of a prefill's
// groups holds: each tile of tokens passes over the chunk's blocks of a
// range before the next tile.
#ifndef KX5_GC
#define KX5_GC 4
#endif

// KX5_KC is how many blocks of a row a prefill's range takes (0: the
// whole row): the tile's activations for them stay in L1 while the chunk's
// groups pass over them. The sums carry from range to range in out.
#ifndef KX5_KC
#define KX5_KC 8
#endif

// KX5_TB is the most tokens of a prefill's token block (a multiple of
// KX5_T), whose activations (at most KQ5_KXBYTES) stay in L2 while the
// groups stream past.
#ifndef KX5_TB
#define KX5_TB 64
#endif

// KX5_PAIR runs groups g and g+1 (g alone where g+1 is not below ge) of
// blocks [k0, k1) against the nt tokens from token i (nt a constant).
#define KX5_PAIR(nt)                                                                                               \
	do {                                                                                                       \
		int one = g + 1 >= ge;                                                                             \
		const uint8_t *wa = w + g * gb + k0 * off[KX5_BYTES], *wb = one ? wa : wa + gb;                    \
		float *o = out + i * ldo + 8 * g;                                                                  \
		const int8_t *xi = x + i * cols + 256 * k0;                                                        \
		const float *di = xd + i * nb + k0;                                                                \
		const int32_t *bi = bsums + i * lb + 16 * k0;                                                      \
		if (type == KQ5_Q6_K)                                                                              \
			kx5_q6k(nt, wa, wb, one, k1 - k0, off, xi, cols, di, nb, bi, lb, pf, k0 > 0, o, ldo);      \
		else                                                                                               \
			kx5_q45k(nt, wa, wb, one, k1 - k0, off, xi, cols, di, nb, bi, lb, type == KQ5_Q5_K, pf,     \
				 k0 > 0, o, ldo);                                                                  \
	} while (0)

#define KX5_BY_NT(m)                                                                                               \
	switch (m) {                                                                                               \
	case 1:                                                                                                    \
		KX5_PAIR(1);                                                                                       \
		break;                                                                                             \
	case 2:                                                                                                    \
		KX5_PAIR(2);                                                                                       \
		break;                                                                                             \
	case 3:                                                                                                    \
		KX5_PAIR(3);                                                                                       \
		break;                                                                                             \
	case 4:                                                                                                    \
		KX5_PAIR(4);                                                                                       \
		break;                                                                                             \
	case 5:                                                                                                    \
		KX5_PAIR(5);                                                                                       \
		break;                                                                                             \
	case 6:                                                                                                    \
		KX5_PAIR(6);                                                                                       \
		break;                                                                                             \
	case 7:                                                                                                    \
		KX5_PAIR(7);                                                                                       \
		break;                                                                                             \
	default:                                                                                                   \
		KX5_PAIR(8);                                                                                       \
		break;                                                                                             \
	}

// kq512_rows_x8 is quant_amd64.c's kq_rows_x8 with these kernels, for the
// K types (KQ5_Q4_K: tensor.Q4_Kx8, KQ5_Q5_K: Q5_Kx8, KQ5_Q6_K: Q6_Kx8):
// out[i*ldo + 8g + r] for rows r of the groups [g0, g1), two groups at a
// time. Up to KX5_T tokens take the groups whole and in order, prefetching
// ahead (a decode waits on the weights' stream). More take tokens in
// blocks of up to KX5_TB, groups in chunks of KX5_GC and blocks in ranges
// of KX5_KC, each tile of KX5_T tokens of the block passing over the
// chunk's range in turn, the sums carried from range to range in out.
void kq512_rows_x8(int type, const uint8_t *w, long gb, long g0, long g1, const long *off, const int8_t *x,
		   const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	long nb = cols / 256, lb = cols / 16;
	if (n <= KX5_T) {
		const int pf = 1;
		const long i = 0, k0 = 0, k1 = nb, ge = g1;
		for (long g = g0; g < g1; g += 2)
			KX5_BY_NT(n);
		return;
	}
	const int pf = 0;
	long tb = KQ5_KXBYTES / cols;
	tb = tb < KX5_T ? KX5_T : tb > KX5_TB ? KX5_TB : tb - tb % KX5_T;
	long kc = KX5_KC > 0 && KX5_KC < nb ? KX5_KC : nb;
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = g0; c0 < g1; c0 += KX5_GC) {
			long ge = c0 + KX5_GC < g1 ? c0 + KX5_GC : g1;
			for (long k0 = 0; k0 < nb; k0 += kc) {
				long k1 = k0 + kc < nb ? k0 + kc : nb;
				for (long i = t0; i < n && i < t0 + tb; i += KX5_T)
					for (long g = c0; g < ge; g += 2)
						KX5_BY_NT(n - i < KX5_T ? n - i : KX5_T);
			}
		}
}
