//go:build cgo

// Matrix products of quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)
// with 8-bit quantized activations, with NEON: the arm64 counterpart of
// quant_amd64.c, each weight row unpacked once for up to 4 tokens and read
// 2 KiB ahead. The int8 block dots are taken by SDOT (vdotq_s32) where the
// CPU has the dot product instructions (Armv8.2-A's optional DotProd,
// checked at run time), else by SMULL and SADALP, which every arm64 CPU
// runs; both are exact. Each block's f32 scaling and the running sum
// follow quant.go's Go loops, for every type, so the results are theirs
// bit for bit. The block field offsets come from Go (tensor.Formats), in
// off[]: bytes, d, dmin, scales, qs, qh, ql.

#include <stdint.h>
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

// A product and a sum written apart stay apart, as in the Go loops.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define KQN_INLINE static inline __attribute__((always_inline))
#define KQN_UNROLL _Pragma("GCC unroll 8")

enum { KQN_BYTES, KQN_D, KQN_DMIN, KQN_SCALES, KQN_QS, KQN_QH, KQN_QL };
enum { KQN_Q8_0, KQN_Q4_0, KQN_Q4_K, KQN_Q5_K, KQN_Q6_K, KQN_Q5_0 };

// KQN_T is the most tokens one pass over a weight row serves; a token's
// sums are the one-token loop's, so its result does not depend on the
// tile.
#define KQN_T 4

// KQN_PF is how far ahead of the block being read the weights are
// prefetched (bytes), as quant_amd64.c's KQ_PF: a decode streams every
// weight once from memory.
#define KQN_PF 2048

// kqn_prefetch asks for the cache lines of the block of n bytes KQN_PF
// ahead of blk (a prefetch does not fault past the matrix's end).
KQN_INLINE void kqn_prefetch(const uint8_t *blk, long n) {
	for (long o = 0; o < n; o += 64)
		__builtin_prefetch(blk + KQN_PF + o, 0, 3);
}

// kqn_f16 reads the little-endian f16 at p, exactly widened.
KQN_INLINE float kqn_f16(const uint8_t *p) {
	__fp16 h;
	__builtin_memcpy(&h, p, 2);
	return (float)h;
}

// kqn_scale_min is ggml's get_scale_min_k4 (tensor.ScaleMinK4).
KQN_INLINE void kqn_scale_min(int j, const uint8_t *q, int32_t *sc, int32_t *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

// kqn_unpack32 sets q0 and q1 to the signed values 0-15 and 16-31 of a
// 32-value block: Q8_0's bytes; Q4_0's low and high nibbles less 8;
// Q5_0's with the fifth bit (bit i of qh for value i), less 16.
KQN_INLINE void kqn_unpack32(int type, const uint8_t *blk, const long *off, int8x16_t *q0, int8x16_t *q1) {
	const uint8_t *qs = blk + off[KQN_QS];
	if (type == KQN_Q8_0) {
		*q0 = vld1q_s8((const int8_t *)qs), *q1 = vld1q_s8((const int8_t *)qs + 16);
		return;
	}
	uint8x16_t p = vld1q_u8(qs);
	uint8x16_t lo = vandq_u8(p, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(p, 4);
	if (type == KQN_Q4_0) {
		*q0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(8));
		*q1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(8));
		return;
	}
	// Byte i/8 of qh at byte i, then its bit i%8 tested.
	static const uint8_t sel0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
	static const uint8_t sel1[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
	static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
	uint32_t qh;
	__builtin_memcpy(&qh, blk + off[KQN_QH], 4);
	uint8x16_t h = vreinterpretq_u8_u32(vdupq_n_u32(qh)), b = vld1q_u8(bit), b16 = vdupq_n_u8(16);
	uint8x16_t f0 = vandq_u8(vtstq_u8(vqtbl1q_u8(h, vld1q_u8(sel0)), b), b16);
	uint8x16_t f1 = vandq_u8(vtstq_u8(vqtbl1q_u8(h, vld1q_u8(sel1)), b), b16);
	*q0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, f0)), vreinterpretq_s8_u8(b16));
	*q1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, f1)), vreinterpretq_s8_u8(b16));
}

// The plain NEON kernels: each dot by SMULL (8 products of 16 bits, at
// most 128*128) and SADALP (their pairs added to 4 int32 lanes).
KQN_INLINE int32x4_t kqn_dot_plain(int32x4_t acc, int8x16_t a, int8x16_t b) {
	acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
	return vpadalq_s16(acc, vmull_high_s8(a, b));
}

#define KQN(name) kqn_##name##_plain
#define KQN_ATTR
#include "quant_neon_arm64.h"
#undef KQN
#undef KQN_ATTR

// The DotProd kernels: each dot by one SDOT (4 products of 4 bytes per
// lane).
#define KQN_ATTR __attribute__((target("arch=armv8.2-a+dotprod")))
KQN_INLINE KQN_ATTR int32x4_t kqn_dot_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

#define KQN(name) kqn_##name##_sdot
#include "quant_neon_arm64.h"
#undef KQN
#undef KQN_ATTR

// kqn_dotprod_supported reports whether the CPU runs SDOT: from the
// kernel's HWCAP_ASIMDDP on Linux; every Apple arm64 CPU (M1 on) has it;
// elsewhere it is not assumed.
int kqn_dotprod_supported(void) {
#if defined(__linux__)
	return (getauxval(AT_HWCAP) & (1UL << 20)) != 0; // HWCAP_ASIMDDP
#elif defined(__APPLE__)
	return 1;
#else
	return 0;
#endif
}

// kqn_rows sets out[i*ldo + r] for rows [r0, r1) of w (rowb bytes each) and
// the n token rows of quantized activations x (cols int8 each, with xd's
// scales per group of 32 or 256 and, for the K types, bsums per 16), with
// SDOT when sdot is set (the caller checks kqn_dotprod_supported).
void kqn_rows(int sdot, int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
	      const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	if (sdot)
		kqn_rows_sdot(type, w, rowb, r0, r1, off, x, xd, bsums, n, cols, out, ldo);
	else
		kqn_rows_plain(type, w, rowb, r0, r1, off, x, xd, bsums, n, cols, out, ldo);
}
