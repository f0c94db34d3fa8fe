//go:build cgo

// Matrix products of quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K) with
// 8-bit quantized activations, with AVX2: each block's integer dot product
// by VPMADDUBSW/VPMADDWD, exact; for the K types the block's scaling in
// f32 in the order quant.go's Go loops use, so both give the same bits;
// the 32-value types sum their scaled blocks in 8 f32 lanes (as the
// AVX-512 kernels do), within rounding of the Go loops. The block
// field offsets come from Go (tensor.Formats), in off[]:
// bytes, d, dmin, scales, qs, qh, ql.

#include <stddef.h>
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

// kq_hsum_ps is the sum of v's 8 f32 lanes, in the one order the
// kernels that sum a row's blocks in lanes all use (halves, then pairs).
KQ_INLINE float kq_hsum_ps(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
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
// from about 11 to 16 tokens/s). 8 KiB rather than 2: on an AMD EPYC
// (Zen 5) with two decode threads, 2 KiB left the loads waiting (7B-shape
// Q8_0 decode 23.1 -> 25.5 tok/s with AVX2, 17 -> 22 with AVX-512; 16 and
// 32 KiB no better); the Xeon of the first measurements gained nothing
// past 2 KiB and lost nothing at 8. A macro, for such experiments.
#ifndef KQ_PF
#define KQ_PF 8192
#endif

// kq_prefetch asks for the cache lines of the block of n bytes KQ_PF
// ahead of blk: a prefetch does not fault, so past the matrix's end is
// harmless.
KQ_INLINE void kq_prefetch(const uint8_t *blk, long n) {
	for (long o = 0; o < n; o += 64)
		_mm_prefetch((const char *)(blk + KQ_PF + o), _MM_HINT_T0);
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

// KQ_T is the most tokens one pass over a weight row serves: each block
// is unpacked once for all of them, and each token's sums and scaling are
// the one-token loop's, so a token's result does not depend on the tile.
// 8 rather than 4: the unpacking (Q5_0's fifth bits, the K types' scales
// and high bits) was a good part of a prefill's time.
#define KQ_T 8
_Static_assert(KQ_T == 8, "kq_32 reads 8 token scales per block (one vector)");

// KQ_UNROLL unrolls the short loops over tokens and a block's parts
// (constant counts after inlining), so that their vectors stay in
// registers.
#define KQ_UNROLL _Pragma("GCC unroll 8")

// KQ_WBYTES bounds the weights of the rows one tile of tokens passes over
// before the next tile: they stay in the L1 cache.
#ifndef KQ_WBYTES
#define KQ_WBYTES (24 * 1024)
#endif

// KQ_XBYTES bounds the activations of the tokens one pass over the rows
// serves: the weights stream from memory once per such block of tokens.
#ifndef KQ_XBYTES
#define KQ_XBYTES (256 * 1024)
#endif

// KQ_WXBYTES bounds the widened (16-bit) activations of the tokens one
// pass of kq_rows_q8w over the rows serves.
#ifndef KQ_WXBYTES
#define KQ_WXBYTES (4 * 1024 * 1024)
#endif

// KQ_XS_BLOCKS bounds the blocks of a row kq_rows32 and kq_rows_q8w gather the token
// scales of on its stack (32 KiB, rows of up to 32768 values): wider rows
// multiply the scales one by one, with the same products.
#define KQ_XS_BLOCKS 1024

// kq_32 sets out[t*ldo] for the nt token rows of x (ldx apart) and one row
// of Q4_0 or Q5_0 (Q8_0 has kq_q8w): per block, the signed values
// unpacked once (Q4_0's nibbles less 8; Q5_0's with the fifth bit, less 16) and
// their magnitudes, and the block's scale times the nt tokens' (xs: 8 per
// block, token-major, kq_rows32 gathers them) in one multiply (or, for
// one token and for rows wider than KQ_XS_BLOCKS blocks, gathered 0, one
// by one from xd, with the same products); then per
// token the exact dot of magnitudes by sign-moved activations in 8 int32
// lanes, converted and multiplied by that product into 8 f32 lanes, which
// are summed at the row's end (as the AVX-512 kernels do: not the Go
// loops' order, within rounding). Each token's arithmetic is the same
// for every nt.
KQ_INLINE void kq_32(int type, int nt, int gathered, const uint8_t *w, const long *off, const int8_t *x, long ldx,
		     const float *xs, const float *xd, long ldd, long nb, float *out, long ldo) {
	const __m128i m4 = _mm_set1_epi8(0x0f), e8 = _mm_set1_epi8(8);
	const __m256i b16 = _mm256_set1_epi8(16);
	__m256 acc[KQ_T];
	float sc[8] __attribute__((aligned(32)));
	KQ_UNROLL
	for (int t = 0; t < nt; t++)
		acc[t] = _mm256_setzero_ps();
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		__m256i q;
		__m128i p = _mm_loadu_si128((const __m128i *)(blk + off[KQ_QS]));
		__m128i lo = _mm_and_si128(p, m4), hi = _mm_and_si128(_mm_srli_epi16(p, 4), m4);
		if (type == KQ_Q4_0) {
			q = _mm256_set_m128i(_mm_sub_epi8(hi, e8), _mm_sub_epi8(lo, e8));
		} else {
			__m256i five = _mm256_and_si256(kq_bits32(kq_u32(blk + off[KQ_QH])), b16);
			q = _mm256_sub_epi8(_mm256_or_si256(_mm256_set_m128i(hi, lo), five), b16);
		}
		__m256i aq = _mm256_sign_epi8(q, q);
		// The nt products of scales in one multiply, read back one by one
		// as broadcasts (loads), where one scalar multiply per token was
		// taken before.
		float dw = kq_f16(blk + off[KQ_D]);
		if (gathered) {
			_mm256_store_ps(sc, _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_load_ps(xs + 8 * b)));
			KQ_UNROLL
			for (int t = 0; t < nt; t++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(x + t * ldx + 32 * b));
				__m256i si = kq_dot_us(aq, _mm256_sign_epi8(v, q));
				acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_broadcast_ss(sc + t), acc[t]);
			}
			continue;
		}
		// One token, or rows wider than kq_rows32 gathers the scales of:
		// the same products, one by one.
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			__m256i v = _mm256_loadu_si256((const __m256i *)(x + t * ldx + 32 * b));
			__m256i si = kq_dot_us(aq, _mm256_sign_epi8(v, q));
			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_set1_ps(dw * xd[t * ldd + b]), acc[t]);
		}
	}
	KQ_UNROLL
	for (int t = 0; t < nt; t++) {
		out[t * ldo] = kq_hsum_ps(acc[t]);
	}
}

// kq_wide2 widens two 32-value blocks of signed bytes, b (halves b0, b1)
// and the one after it, c (c0, c1), to 16 bits, interleaved by pairs: in
// each of the four vectors, 32-bit lane j holds two values of b where j is
// even and two of c where it is odd, so that VPMADDWD against a vector of
// the same layout leaves b's pair sums in the even lanes and c's in the
// odd ones. Weights and activations (kq_widen) both go through it, so
// their values meet in the same lanes.
KQ_INLINE void kq_wide2(__m128i b0, __m128i b1, __m128i c0, __m128i c1, __m256i r[4]) {
	__m256i x0 = _mm256_cvtepi8_epi16(b0), x1 = _mm256_cvtepi8_epi16(b1);
	__m256i y0 = _mm256_cvtepi8_epi16(c0), y1 = _mm256_cvtepi8_epi16(c1);
	r[0] = _mm256_unpacklo_epi32(x0, y0);
	r[1] = _mm256_unpackhi_epi32(x0, y0);
	r[2] = _mm256_unpacklo_epi32(x1, y1);
	r[3] = _mm256_unpackhi_epi32(x1, y1);
}

// kq_widen writes the n token rows of q8_0 activations x (nb blocks of 32
// each) as kq_q8w reads them: per pair of blocks, 64 int16 in kq_wide2's
// layout, an odd last block paired with zeros; 64 * ((nb + 1) / 2) values
// a row.
void kq_widen(const int8_t *x, long n, long nb, int16_t *xw) {
	long np = (nb + 1) / 2;
	const __m128i z = _mm_setzero_si128();
	for (long t = 0; t < n; t++) {
		const int8_t *xt = x + t * 32 * nb;
		int16_t *wt = xw + t * 64 * np;
		for (long p = 0; p < np; p++) {
			const int8_t *pb = xt + 64 * p;
			int two = 2 * p + 1 < nb;
			__m256i r[4];
			kq_wide2(_mm_loadu_si128((const __m128i *)pb), _mm_loadu_si128((const __m128i *)(pb + 16)),
				 two ? _mm_loadu_si128((const __m128i *)(pb + 32)) : z,
				 two ? _mm_loadu_si128((const __m128i *)(pb + 48)) : z, r);
			for (int k = 0; k < 4; k++)
				_mm256_storeu_si256((__m256i *)(wt + 64 * p + 16 * k), r[k]);
		}
	}
}

// kq_q8w_pair adds to acc[t] the nt tokens' dots with the Q8_0 blocks at
// blk and blk + bb (two set; else the first alone, against zeros): both
// blocks' weights widened once (kq_wide2), then per token four VPMADDWD
// against the widened activations (xw), their sums (b's in the even
// lanes, c's in the odd) converted once and multiplied by the block
// scales' products in one FMA. The products: the two weight scales times
// the tokens' (xs, 16 per pair: token-major pairs, gathered by
// kq_rows32), or one by one from xd (one token, or rows wider than
// KQ_XS_BLOCKS blocks), the same f32 products either way.
KQ_INLINE void kq_q8w_pair(int nt, int gathered, int two, const uint8_t *blk, long bb, const long *off,
			   const int16_t *xw, long ldx, const float *xs, const float *xd, long ldd, long b,
			   __m256 *acc) {
	const __m128i z = _mm_setzero_si128();
	float sc[16] __attribute__((aligned(32)));
	kq_prefetch(blk, 2 * bb);
	const uint8_t *qb = blk + off[KQ_QS], *qc = blk + bb + off[KQ_QS];
	__m256i r[4];
	kq_wide2(_mm_loadu_si128((const __m128i *)qb), _mm_loadu_si128((const __m128i *)(qb + 16)),
		 two ? _mm_loadu_si128((const __m128i *)qc) : z, two ? _mm_loadu_si128((const __m128i *)(qc + 16)) : z,
		 r);
	uint32_t hb = (uint32_t)blk[off[KQ_D]] | (uint32_t)blk[off[KQ_D] + 1] << 8;
	uint32_t hc = two ? (uint32_t)blk[bb + off[KQ_D]] | (uint32_t)blk[bb + off[KQ_D] + 1] << 8 : 0;
	// [db, dc] four times.
	__m256 wv = _mm256_cvtph_ps(_mm_set1_epi32((int)(hb | hc << 16)));
	if (gathered) {
		_mm256_store_ps(sc, _mm256_mul_ps(wv, _mm256_load_ps(xs + 8 * b)));
		_mm256_store_ps(sc + 8, _mm256_mul_ps(wv, _mm256_load_ps(xs + 8 * b + 8)));
	}
	KQ_UNROLL
	for (int t = 0; t < nt; t++) {
		const int16_t *xt = xw + t * ldx + 32 * b;
		__m256i s0 = _mm256_add_epi32(_mm256_madd_epi16(r[0], _mm256_loadu_si256((const __m256i *)xt)),
					      _mm256_madd_epi16(r[1], _mm256_loadu_si256((const __m256i *)(xt + 16))));
		__m256i s1 = _mm256_add_epi32(_mm256_madd_epi16(r[2], _mm256_loadu_si256((const __m256i *)(xt + 32))),
					      _mm256_madd_epi16(r[3], _mm256_loadu_si256((const __m256i *)(xt + 48))));
		__m256 p;
		if (gathered) {
			p = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(sc + 2 * t)));
		} else {
			// The token's two scales, adjacent in xd (the partner of an
			// odd last block 0), times [db, dc] in the vector: the
			// gathered path's products. (Scalar products stored for a
			// broadcast made a decode wait on store forwarding.)
			const float *d = xd + t * ldd + b;
			__m128 xv = two ? _mm_castpd_ps(_mm_load_sd((const double *)d)) : _mm_load_ss(d);
			p = _mm256_mul_ps(wv, _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(xv))));
		}
		acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), p, acc[t]);
	}
}

// kq_q8w is kq_32 for Q8_0 with 16-bit arithmetic, over blocks [b0, b1)
// of one row (b0 even), adding to the row's nt accumulators acc (8 f32
// lanes a token, kept across calls): blocks in pairs (kq_q8w_pair), one
// VPMADDWD per 16 products where the sign trick takes three operations per
// 32, and each pair's two blocks in one conversion and one FMA; xw holds
// the tile's activations widened (kq_widen, ldx values a token). Each
// token's arithmetic is the same for every nt, and the same however a row
// is split into calls.
KQ_INLINE void kq_q8w(int nt, int gathered, const uint8_t *w, const long *off, const int16_t *xw, long ldx,
		      const float *xs, const float *xd, long ldd, long b0, long b1, __m256 *acc) {
	__m256 a[KQ_T];
	long bb = off[KQ_BYTES];
	KQ_UNROLL
	for (int t = 0; t < nt; t++)
		a[t] = acc[t];
	long b = b0;
	for (; b + 1 < b1; b += 2)
		kq_q8w_pair(nt, gathered, 1, w + b * bb, bb, off, xw, ldx, xs, xd, ldd, b, a);
	if (b < b1)
		kq_q8w_pair(nt, gathered, 0, w + b * bb, bb, off, xw, ldx, xs, xd, ldd, b, a);
	KQ_UNROLL
	for (int t = 0; t < nt; t++)
		acc[t] = a[t];
}

// KQ_WCHUNK is how many blocks of a row kq_rows_q8w takes per pass: a
// tile's widened activations for them (16 KiB for 8 tokens) stay in the
// L1 cache while a chunk of rows passes over them; whole rows of a wide
// matrix (ffn_down's 4864 values, 76 KiB for 8 tokens) came from L2 for
// every row.
#ifndef KQ_WCHUNK
#define KQ_WCHUNK 32
#endif

// KQ_RC bounds the rows of a chunk of kq_rows_q8w (their accumulators on
// the stack).
#define KQ_RC 32

// KQ_TILEQ8 runs kq_q8w for the rows of a chunk over one pass's blocks,
// nt tokens, the scales gathered or not (constants).
#define KQ_TILEQ8(nt, g)                                                                                           \
	for (long r = c0; r < ce; r++)                                                                             \
		kq_q8w(nt, g, w + r * rowb, off, xwi, ldw, xs, di, nb, b0, b1, acc[r - c0]);

// KQ_GATHERED runs TILE(nt, g), a tile macro taking the gathered-scales
// flag as a constant, with g as the tile has its scales (gathered, set
// per tile): both instantiations, one branch; one token never has them
// gathered (one instantiation).
#define KQ_GATHERED(TILE, nt)                                                                                      \
	do {                                                                                                       \
		if ((nt) > 1 && gathered) {                                                                        \
			TILE(nt, 1);                                                                               \
		} else {                                                                                           \
			TILE(nt, 0);                                                                               \
		}                                                                                                  \
	} while (0)

// KQ_BY_T runs TILE(k) for the constant k equal to nt, the tokens of a
// tile (1 to 8; more run as 8), so that each token count has its own
// instantiation of the kernel, its loops over tokens unrolled.
#define KQ_BY_T(nt, TILE)                                                                                          \
	switch (nt) {                                                                                              \
	case 1:                                                                                                    \
		TILE(1);                                                                                           \
		break;                                                                                             \
	case 2:                                                                                                    \
		TILE(2);                                                                                           \
		break;                                                                                             \
	case 3:                                                                                                    \
		TILE(3);                                                                                           \
		break;                                                                                             \
	case 4:                                                                                                    \
		TILE(4);                                                                                           \
		break;                                                                                             \
	case 5:                                                                                                    \
		TILE(5);                                                                                           \
		break;                                                                                             \
	case 6:                                                                                                    \
		TILE(6);                                                                                           \
		break;                                                                                             \
	case 7:                                                                                                    \
		TILE(7);                                                                                           \
		break;                                                                                             \
	default:                                                                                                   \
		TILE(8);                                                                                           \
		break;                                                                                             \
	}

// KQ_TILEQ8G is KQ_TILEQ8 with the scales gathered or not as the tile has
// them (gathered): a constant inside.
#define KQ_TILEQ8G(nt) KQ_GATHERED(KQ_TILEQ8, nt)

// kq_rows_q8w is kq_rows for Q8_0 (kq_q8w): tokens in tiles of KQ_T with
// their scales gathered once per tile (the pairs' scales token by token);
// rows in chunks whose weights over KQ_WCHUNK blocks stay in L1, and each
// tile's activations taken KQ_WCHUNK blocks at a time for all the rows of
// a chunk, with the rows' accumulators kept between passes.
static void kq_rows_q8w(const uint8_t *w, long rowb, long r0, long r1, const long *off, const int16_t *xw,
			const float *xd, long n, long cols, float *out, long ldo) {
	long nb = cols / 32, ldw = 64 * ((nb + 1) / 2);
	float xs[8 * (KQ_XS_BLOCKS + 1)] __attribute__((aligned(32)));
	__m256 acc[KQ_RC][KQ_T];
	// Fewer tokens than a tile (a decode) take rows whole and in order, so
	// that the weights prefetched ahead are the ones read next: there the
	// weights' stream from memory is what a pass waits on.
	long cb = nb < KQ_WCHUNK || n < KQ_T ? nb : KQ_WCHUNK;
	long rc = KQ_WBYTES / (cb * off[KQ_BYTES]);
	rc = rc < 1 ? 1 : rc > KQ_RC ? KQ_RC : rc;
	// Token blocks of about KQ_WXBYTES of widened activations: the passes
	// over a chunk's weights take KQ_WCHUNK blocks of them at a time, so
	// the whole block need not stay in L2, and each block streams the
	// matrix once more (7B ffn_down, 3,584 x 18,944: at 512 KiB, 13
	// tokens a block, 48 GMAC/s on one thread; at 4 MiB, 110 tokens, 61).
	long tb = KQ_WXBYTES / (2 * cols);
	tb = tb < KQ_T ? KQ_T : tb - tb % KQ_T;
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = r0; c0 < r1; c0 += rc) {
			long ce = c0 + rc < r1 ? c0 + rc : r1;
			for (long i = t0; i < n && i < t0 + tb; i += KQ_T) {
				long nt = n - i < KQ_T ? n - i : KQ_T;
				const float *di = xd + i * nb;
				const int16_t *xwi = xw + i * ldw;
				int gathered = nt > 1 && nb <= KQ_XS_BLOCKS;
				if (gathered)
					// Per pair of blocks, the tokens' two scales in turn;
					// an odd last block's partner 0.
					for (long b = 0; b < nb + nb % 2; b += 2)
						for (long t = 0; t < 8; t++) {
							xs[8 * b + 2 * t] = t < nt ? di[t * nb + b] : 0;
							xs[8 * b + 2 * t + 1] = t < nt && b + 1 < nb ? di[t * nb + b + 1] : 0;
						}
				for (long r = 0; r < ce - c0; r++)
					for (int t = 0; t < KQ_T; t++)
						acc[r][t] = _mm256_setzero_ps();
				for (long b0 = 0; b0 < nb; b0 += cb) {
					long b1 = b0 + cb < nb ? b0 + cb : nb;
					KQ_BY_T(nt, KQ_TILEQ8G);
				}
				for (long r = c0; r < ce; r++)
					for (long t = 0; t < nt; t++)
						out[(i + t) * ldo + r] = kq_hsum_ps(acc[r - c0][t]);
			}
		}
}

// kq_bcast16 is a vector of the 16-bit value lo of v's low 128-bit lane in
// its low lane and of value hi of its high lane in its high one (one byte
// shuffle; lo and hi constants after inlining).
KQ_INLINE __m256i kq_bcast16(__m256i v, int lo, int hi) {
	const __m256i ctl = _mm256_setr_epi8(2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo,
					     2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1,
					     2 * lo, 2 * lo + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi,
					     2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1,
					     2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1);
	return _mm256_shuffle_epi8(v, ctl);
}

// kq_sum2 returns the sums of the 8 int32 lanes of a and of b, in lanes 0
// and 1 (and again in 2 and 3).
KQ_INLINE __m128i kq_sum2(__m256i a, __m256i b) {
	__m128i a4 = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
	__m128i b4 = _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
	__m128i h = _mm_hadd_epi32(a4, b4); // a01 a23 b01 b23
	return _mm_hadd_epi32(h, h);
}

// kq_hsum8 returns the sums of the 8 int32 lanes of each of a[0..7], sum t
// in lane t: three levels of VPHADDD and one exchange of 128-bit halves,
// where eight reductions one by one take about five times the operations.
KQ_INLINE __m256i kq_hsum8(const __m256i a[8]) {
	__m256i h0 = _mm256_hadd_epi32(a[0], a[1]), h1 = _mm256_hadd_epi32(a[2], a[3]);
	__m256i h2 = _mm256_hadd_epi32(a[4], a[5]), h3 = _mm256_hadd_epi32(a[6], a[7]);
	// Sums of lanes 0-3 of a[0..3] in g0's low half, of lanes 4-7 in its
	// high half; g1 the same for a[4..7].
	__m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
	return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

// kq_xd8 gathers the nt tokens' activation scales of block b (xd, ldd
// apart) into f32 lanes 0..nt-1, zeros past them.
KQ_INLINE __m256 kq_xd8(int nt, const float *xd, long ldd, long b) {
	if (nt == 8 && ldd <= 0x7fffffff / 8) {
		const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ldd));
		return _mm256_i32gather_ps(xd + b, idx, 4);
	}
	float v[8] __attribute__((aligned(32))) = {0};
	for (int t = 0; t < nt; t++)
		v[t] = xd[t * ldd + b];
	return _mm256_load_ps(v);
}

// kq_store_sums sets out[t*ldo] for the nt tokens: sum1 for one, else
// lane t of sumv.
KQ_INLINE void kq_store_sums(int nt, float sum1, __m256 sumv, float *out, long ldo) {
	if (nt == 1) {
		out[0] = sum1;
		return;
	}
	float v[8] __attribute__((aligned(32)));
	_mm256_store_ps(v, sumv);
	for (int t = 0; t < nt; t++)
		out[t * ldo] = v[t];
}

// kq_k4_scales unpacks a Q4_K/Q5_K block's 12 scale bytes at sp as
// ggml's get_scale_min_k4 reads them, in word operations (scales 0-3 and
// mins 0-3 are the low 6 bits of bytes 0-3 and 4-7; scales 4-7 take their
// low 4 bits from bytes 8-11 and their top 2 from the top of bytes 0-3,
// mins 4-7 the high nibbles of bytes 8-11 and the top of bytes 4-7): the
// scales widened to 16 bits in both 128-bit lanes (for kq_bcast16), the
// mins to 32 bits in the order of VPHADDD's pair sums, 0 1 4 5 2 3 6 7.
KQ_INLINE void kq_k4_scales(const uint8_t *sp, __m256i *sc, __m256i *mn) {
	const __m256i pairs = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
	uint32_t w0 = kq_u32(sp), w1 = kq_u32(sp + 4), w2 = kq_u32(sp + 8);
	uint32_t sc03 = w0 & 0x3f3f3f3fu, mn03 = w1 & 0x3f3f3f3fu;
	uint32_t sc47 = (w2 & 0x0f0f0f0fu) | (w0 >> 6 & 0x03030303u) << 4;
	uint32_t mn47 = (w2 >> 4 & 0x0f0f0f0fu) | (w1 >> 6 & 0x03030303u) << 4;
	*sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_setr_epi32((int)sc03, (int)sc47, 0, 0)));
	*mn = _mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)mn03, (int)mn47, 0, 0)), pairs);
}

// kq_q45_runs unpacks the two 32-value runs of a Q4_K/Q5_K block's 64-value
// part c: the low nibbles (run 2c) and the high (run 2c+1), with the fifth
// bits from qh for Q5_K (five set).
KQ_INLINE void kq_q45_runs(const uint8_t *blk, const long *off, __m256i qh, int c, int five, __m256i *lo, __m256i *hi) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(16);
	__m256i q = _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QS] + 32 * c));
	*lo = _mm256_and_si256(q, m4);
	*hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
	if (five) {
		__m256i u0 = _mm256_set1_epi8((char)(1 << (2 * c))), u1 = _mm256_set1_epi8((char)(2 << (2 * c)));
		*lo = _mm256_add_epi8(*lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u0), u0), b16));
		*hi = _mm256_add_epi8(*hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u1), u1), b16));
	}
}

// kq_q6_codes returns the 6-bit codes (0-63) of run k (0-3) of a Q6_K
// block's half: the low 4 bits from the nibbles of l (ql's bytes 0-31 for
// runs 0 and 2, 32-63 for 1 and 3; high nibbles for runs 2 and 3), the top
// 2 from bits 2k of qh, shifted straight to bits 4-5 (one 16-bit shift,
// none for k = 2, and one mask: a byte's bits move within their word, and
// the mask keeps each byte's own two).
KQ_INLINE __m256i kq_q6_codes(__m256i l, __m256i qh, int k) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
	__m256i hb = k < 2 ? _mm256_slli_epi16(qh, 4 - 2 * k) : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
	return _mm256_or_si256(_mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4), _mm256_and_si256(hb, m30));
}

// kq_q45_k is kq_32 for Q4_K (five = 0) and Q5_K. Per block, once for the
// nt tokens: the scales and mins unpacked (kq_k4_scales); per 64-value
// part the two 32-value runs unpacked once (kq_q45_runs). Per token: the runs' pair sums
// times their scales (VPMADDWD) gathered in one vector; Σ min_j·(bsum_2j +
// bsum_2j+1) by one VPHADDD and one VPMULLD (the pair sums come out as
// pairs 0 1 4 5 | 2 3 6 7, the mins permuted to match); both sums reduced
// together; then the block's f32 scaling, the one-token arithmetic of the
// Go loops: d = dw·xd and dmin = dmw·xd, a = d·sumi, m = dmin·mins, sum =
// sum + (a - m), two lanes at once.
KQ_INLINE void kq_q45_k(int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx, const float *xd,
			long ldd, const int32_t *bsums, long ldb, long nb, int five, float *out, long ldo) {
	float sum1 = 0; // one token
	__m256 sumv = _mm256_setzero_ps(); // more: token t in lane t
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		const uint8_t *sp = blk + off[KQ_SCALES];
		__m256i sc, mn;
		kq_k4_scales(sp, &sc, &mn);
		__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QH])) : _mm256_setzero_si256();
		__m256i acc[KQ_T];
		KQ_UNROLL
		for (int t = 0; t < nt; t++)
			acc[t] = _mm256_setzero_si256();
		KQ_UNROLL
		for (int c = 0; c < 4; c++) {
			__m256i lo, hi;
			kq_q45_runs(blk, off, qh, c, five, &lo, &hi);
			__m256i sv0 = kq_bcast16(sc, 2 * c, 2 * c), sv1 = kq_bcast16(sc, 2 * c + 1, 2 * c + 1);
			KQ_UNROLL
			for (int t = 0; t < nt; t++) {
				const int8_t *xs = x + t * ldx + 256 * b + 64 * c;
				// Pair sums of at most 2*31*127 fit 16 bits.
				__m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xs));
				__m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xs + 32)));
				acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(_mm256_madd_epi16(p0, sv0), _mm256_madd_epi16(p1, sv1)));
			}
		}
		// [dw, dmw] in f32 lanes 0 and 1.
		__m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)blk[off[KQ_D]] | (uint32_t)blk[off[KQ_D] + 1] << 8 |
								  (uint32_t)blk[off[KQ_DMIN]] << 16 |
								  (uint32_t)blk[off[KQ_DMIN] + 1] << 24)));
		if (nt == 1) {
			__m256i ps = _mm256_hadd_epi32(_mm256_loadu_si256((const __m256i *)(bsums + 16 * b)),
						       _mm256_loadu_si256((const __m256i *)(bsums + 16 * b + 8)));
			__m128 im = _mm_cvtepi32_ps(kq_sum2(acc[0], _mm256_mullo_epi32(ps, mn)));
			__m128 am = _mm_mul_ps(_mm_mul_ps(dd, _mm_set1_ps(xd[b])), im);
			sum1 = sum1 + (_mm_cvtss_f32(am) - _mm_cvtss_f32(_mm_movehdup_ps(am)));
			continue;
		}
		// Several tokens: their sums reduced together, token t in lane t,
		// and the same f32 operations lane by lane.
		__m256i mins[KQ_T];
		KQ_UNROLL
		for (int t = 0; t < KQ_T; t++) {
			if (t >= nt) {
				acc[t] = mins[t] = _mm256_setzero_si256();
				continue;
			}
			const int32_t *bs = bsums + t * ldb + 16 * b;
			__m256i ps = _mm256_hadd_epi32(_mm256_loadu_si256((const __m256i *)bs),
						       _mm256_loadu_si256((const __m256i *)(bs + 8)));
			mins[t] = _mm256_mullo_epi32(ps, mn);
		}
		__m256 xv = kq_xd8(nt, xd, ldd, b);
		__m256 d = _mm256_mul_ps(_mm256_set1_ps(_mm_cvtss_f32(dd)), xv);
		__m256 dmin = _mm256_mul_ps(_mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(dd))), xv);
		__m256 a = _mm256_mul_ps(d, _mm256_cvtepi32_ps(kq_hsum8(acc)));
		__m256 m = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(kq_hsum8(mins)));
		sumv = _mm256_add_ps(sumv, _mm256_sub_ps(a, m));
	}
	kq_store_sums(nt, sum1, sumv, out, ldo);
}

// kq_q6_k is kq_q45_k for Q6_K: per block the 16 int8 scales widened once
// (16 bits, 0-7 and 8-15 each in both lanes, for the byte shuffles; 32
// bits for the offset); per 32-value run the 6-bit values unpacked once
// and its two 16-value groups' scales in one vector; per token the codes'
// offset of 32 taken off first, as Σ_g sc_g·32·bsum_g by two VPMULLD;
// then d = dw·xd, sum = sum + d·sumi.
KQ_INLINE void kq_q6_k(int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx, const float *xd,
		       long ldd, const int32_t *bsums, long ldb, long nb, float *out, long ldo) {
	float sum1 = 0;
	__m256 sumv = _mm256_setzero_ps();
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQ_BYTES];
		kq_prefetch(blk, off[KQ_BYTES]);
		__m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + off[KQ_SCALES]));
		__m256i s16 = _mm256_cvtepi8_epi16(sc8);
		__m256i slo = _mm256_permute2x128_si256(s16, s16, 0x00), shi = _mm256_permute2x128_si256(s16, s16, 0x11);
		__m256i s32a = _mm256_cvtepi8_epi32(sc8), s32b = _mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8));
		__m256i acc[KQ_T];
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			const int32_t *bs = bsums + t * ldb + 16 * b;
			__m256i o = _mm256_add_epi32(_mm256_mullo_epi32(s32a, _mm256_loadu_si256((const __m256i *)bs)),
						     _mm256_mullo_epi32(s32b, _mm256_loadu_si256((const __m256i *)(bs + 8))));
			acc[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(o, 5));
		}
		KQ_UNROLL
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = blk + off[KQ_QL] + 64 * h;
			__m256i qh = _mm256_loadu_si256((const __m256i *)(blk + off[KQ_QH] + 32 * h));
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			KQ_UNROLL
			for (int k = 0; k < 4; k++) {
				__m256i q = kq_q6_codes(k & 1 ? l1 : l0, qh, k);
				__m256i sv = kq_bcast16(h ? shi : slo, 2 * k, 2 * k + 1);
				KQ_UNROLL
				for (int t = 0; t < nt; t++) {
					const int8_t *xs = x + t * ldx + 256 * b + 128 * h + 32 * k;
					// Pair sums of at most 2*63*127 fit 16 bits.
					__m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)xs));
					acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, sv));
				}
			}
		}
		float dw = kq_f16(blk + off[KQ_D]);
		if (nt == 1) {
			float d = dw * xd[b];
			float p = d * (float)kq_hsum(acc[0]);
			sum1 = sum1 + p;
			continue;
		}
		KQ_UNROLL
		for (int t = nt; t < KQ_T; t++)
			acc[t] = _mm256_setzero_si256();
		__m256 d = _mm256_mul_ps(_mm256_set1_ps(dw), kq_xd8(nt, xd, ldd, b));
		sumv = _mm256_add_ps(sumv, _mm256_mul_ps(d, _mm256_cvtepi32_ps(kq_hsum8(acc))));
	}
	kq_store_sums(nt, sum1, sumv, out, ldo);
}

// KQ_TILE32 runs one row of a 32-value type against nt tokens, nt and g
// (the scales gathered in xs) constants.
#define KQ_TILE32(nt, g)                                                                                           \
	switch (type) {                                                                                            \
	case KQ_Q4_0:                                                                                              \
		kq_32(KQ_Q4_0, nt, g, wr, off, xi, cols, xs, di, nb, nb, o, ldo);                                 \
		break;                                                                                             \
	default:                                                                                                   \
		kq_32(KQ_Q5_0, nt, g, wr, off, xi, cols, xs, di, nb, nb, o, ldo);                                 \
		break;                                                                                             \
	}

// KQ_TILE32G runs KQ_TILE32 for nt tokens with the token scales gathered
// per block (gathered, set per tile) or read in place.
#define KQ_TILE32G(nt) KQ_GATHERED(KQ_TILE32, nt)

// kq_rows32 is kq_rows for Q4_0 and Q5_0: tokens in tiles of KQ_T,
// each tile's activation scales gathered once (8 per block, token-major)
// for the rows of a chunk; rows in chunks whose weights stay in L1 while
// a tile passes over them.
static void kq_rows32(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
		      const float *xd, long n, long cols, float *out, long ldo) {
	long nb = cols / 32;
	float xs[8 * KQ_XS_BLOCKS] __attribute__((aligned(32)));
	long tb = KQ_XBYTES / cols;
	tb = tb < KQ_T ? KQ_T : tb - tb % KQ_T;
	long rc = KQ_WBYTES / rowb;
	rc = rc < 1 ? 1 : rc;
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = r0; c0 < r1; c0 += rc)
			for (long i = t0; i < n && i < t0 + tb; i += KQ_T) {
				long nt = n - i < KQ_T ? n - i : KQ_T;
				const float *di = xd + i * nb;
				int gathered = nt > 1 && nb <= KQ_XS_BLOCKS;
				if (gathered)
					for (long b = 0; b < nb; b++)
						for (long t = 0; t < 8; t++)
							xs[8 * b + t] = t < nt ? di[t * nb + b] : 0;
				for (long r = c0; r < r1 && r < c0 + rc; r++) {
					const uint8_t *wr = w + r * rowb;
					const int8_t *xi = x + i * cols;
					float *o = out + i * ldo + r;
					KQ_BY_T(nt, KQ_TILE32G);
				}
			}
}

// KQ_TILE runs one row of a K type against nt tokens, nt a constant.
#define KQ_TILE(nt)                                                                                                \
	switch (type) {                                                                                            \
	case KQ_Q4_K:                                                                                              \
		kq_q45_k(nt, wr, off, xi, cols, di, nb, bi, cols / 16, nb, 0, o, ldo);                            \
		break;                                                                                             \
	case KQ_Q5_K:                                                                                              \
		kq_q45_k(nt, wr, off, xi, cols, di, nb, bi, cols / 16, nb, 1, o, ldo);                            \
		break;                                                                                             \
	case KQ_Q6_K:                                                                                              \
		kq_q6_k(nt, wr, off, xi, cols, di, nb, bi, cols / 16, nb, o, ldo);                                \
		break;                                                                                             \
	}

// kq_rows sets out[i*ldo + r] for rows [r0, r1) of w (rowb bytes each) and
// the n token rows of quantized activations x (cols int8 each, with xd's
// scales per group of 32 or 256 and, for the K types, bsums per 16; for
// Q8_0, xw: x widened by kq_widen, which is what its kernel reads): each
// row is unpacked once per KQ_T tokens. Where these kernels run, Pool.Prepare
// interleaves every type's matrices of eight rows or more (kq_rows_x8), so
// in a model they take the few rows past a matrix's last group; the
// one-token kernels of several stored rows at once (four of Q4_0/Q5_0,
// eight of Q4_K/Q5_K) went when every type's groups took their place.
void kq_rows(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off, const int8_t *x,
	     const int16_t *xw, const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	if (type == KQ_Q8_0) {
		kq_rows_q8w(w, rowb, r0, r1, off, xw, xd, n, cols, out, ldo);
		return;
	}
	if (type == KQ_Q4_0 || type == KQ_Q5_0) {
		kq_rows32(type, w, rowb, r0, r1, off, x, xd, n, cols, out, ldo);
		return;
	}
	long nb = cols / 256;
	// Tokens in blocks of about 256 KiB of activations, which stay in the
	// L2 cache while the rows pass over them.
	long tb = KQ_XBYTES / cols;
	tb = tb < KQ_T ? KQ_T : tb - tb % KQ_T;
	// Rows in chunks of about KQ_WBYTES, which stay in the L1 cache while
	// each tile of tokens passes over them, so that a tile's activations
	// come from L2 once per chunk rather than once per row.
	long rc = KQ_WBYTES / rowb;
	rc = rc < 1 ? 1 : rc;
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = r0; c0 < r1; c0 += rc)
			for (long i = t0; i < n && i < t0 + tb; i += KQ_T)
				for (long r = c0; r < r1 && r < c0 + rc; r++) {
					const uint8_t *wr = w + r * rowb;
					const int8_t *xi = x + i * cols;
					const float *di = xd + i * nb;
					const int32_t *bi = bsums + i * (cols / 16);
					float *o = out + i * ldo + r;
					KQ_BY_T(n - i < KQ_T ? n - i : KQ_T, KQ_TILE);
				}
}

// The kernels of Q4_K with eight rows interleaved (tensor.Q4_Kx8, which
// InterleaveRows makes at load where these kernels run): a group block
// holds eight rows' block b, their codes four bytes a row in each 256-bit
// vector, so that one VPMADDUBSW multiplies eight rows' four values by the
// same four activations (a 32-bit broadcast from memory); a sub-block's
// eight such products, summed in 16 bits (at most 8 x 2 x 15 x 127 =
// 30,480), then take the eight rows' scales in one VPMADDWD. About 30
// vector operations per 256 multiply-adds, where the row-at-a-time
// kernels take about 60. The field offsets come from Go, in off[]:
// group block bytes, d, dmin, scales (the scales and mins packed), qs.
enum { KX_BYTES, KX_D, KX_DMIN, KX_SCALES, KX_QS, KX_QH };

// KX_T is the most tokens kx_q4k takes at once: their 16-bit sums (two
// vectors a token) and the unpacked codes stay in registers.
#define KX_T 4

// kx_scales16 is the eight rows' sub-block scales at p (row r at byte r)
// as 16-bit pairs, row r's in 32-bit lane r (both words): VPMADDWD's
// factors for sums laid out a row a lane.
KQ_INLINE __m256i kx_scales16(const uint8_t *p) {
	const __m256i ctl = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1, 4, -1, 4, -1, 5, -1,
					     5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
	long long v;
	__builtin_memcpy(&v, p, 8);
	return _mm256_shuffle_epi8(_mm256_set1_epi64x(v), ctl);
}

// kx_unpack_sm unpacks the eight rows' 6-bit scales and mins (the 96
// packed bytes at p, as tensor.Q4_Kx8 describes them) to bytes at sm: the
// 64 scales (scale j of row r at 8j + r), then the 64 mins (min 2k+i of
// row r at 64 + 16k + 2r + i). Thirteen vector operations for the eight
// rows.
KQ_INLINE void kx_unpack_sm(const uint8_t *p, uint8_t *sm) {
	const __m256i m6 = _mm256_set1_epi8(0x3f), m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0f);
	__m256i a0 = _mm256_loadu_si256((const __m256i *)p), a1 = _mm256_loadu_si256((const __m256i *)(p + 32));
	__m256i b = _mm256_loadu_si256((const __m256i *)(p + 64));
	_mm256_store_si256((__m256i *)sm, _mm256_and_si256(a0, m6));
	_mm256_store_si256((__m256i *)(sm + 32), _mm256_and_si256(a1, m6));
	// A min's low 2 bits from the top of byte q (or 32 + q), its top 4
	// from byte 64 + q's low (high) nibble: each nibble moved to bits 2-5
	// of its own byte by a 16-bit shift, with nothing from its neighbour
	// once masked.
	__m256i l0 = _mm256_and_si256(_mm256_srli_epi16(a0, 6), m3), l1 = _mm256_and_si256(_mm256_srli_epi16(a1, 6), m3);
	__m256i h0 = _mm256_slli_epi16(_mm256_and_si256(b, m4), 2);
	__m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), 2);
	_mm256_store_si256((__m256i *)(sm + 64), _mm256_or_si256(l0, h0));
	_mm256_store_si256((__m256i *)(sm + 96), _mm256_or_si256(l1, h1));
}

// kx_bit4 is bit k (0..7) of each byte of h moved to bit 4, the byte's
// other bits cleared (one 16-bit shift and a mask: a byte's bit k lands
// on bit 4 of the same byte, and the mask keeps it alone): the fifth bits
// of Q5_Kx8's and Q5_0x8's codes.
KQ_INLINE __m256i kx_bit4(__m256i h, int k) {
	__m256i v = k < 4 ? _mm256_slli_epi16(h, 4 - k) : k == 4 ? h : _mm256_srli_epi16(h, k - 4);
	return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

// kx_zero and kx_store start the nt tokens' f32 sums of eight rows at
// zero and store them to out (ldo apart): the interleaved kernels' first
// and last steps.
KQ_INLINE void kx_zero(int nt, __m256 *sumv) {
	KQ_UNROLL
	for (int t = 0; t < nt; t++)
		sumv[t] = _mm256_setzero_ps();
}

KQ_INLINE void kx_store(int nt, const __m256 *sumv, float *out, long ldo) {
	KQ_UNROLL
	for (int t = 0; t < nt; t++)
		_mm256_storeu_ps(out + t * ldo, sumv[t]);
}

KQ_INLINE __m256i kx_bcast4(const int8_t *p) {
	int v;
	__builtin_memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

// kx_q4k sets out[t*ldo + 0..7] for the nt tokens (x, xd, bsums ldx, ldd,
// ldb apart) and the eight rows of the group at w (nb group blocks) of
// Q4_Kx8 (five = 0) or Q5_Kx8: per block, the rows' integer sums exactly
// as quant.go's dotQ45K takes them (Σ_j scale_j·dot_j and Σ_j
// min_j·(bsum_2j + bsum_2j+1), in another order, with the same values),
// then per token the Go loop's f32 scaling lane by lane (d = dw·xd, dmin
// = dmw·xd, a = d·sumi, m = dmin·mins, sum = sum + (a - m)), row r in lane
// r: each row's result has the Go loop's bits, whatever nt is. Q5_K's
// fifth bits come from one qh vector per four values a row, moved to bit 4
// of each code byte; its codes (up to 31) let four products' pair sums
// share 16 bits (4 x 2 x 31 x 127 = 31,496), not eight, so its sub-block
// sums take the scales every four.
KQ_INLINE void kx_q4k(int nt, const uint8_t *w, long nb, const long *off, const int8_t *x, long ldx, const float *xd,
		      long ldd, const int32_t *bsums, long ldb, int five, float *out, long ldo) {
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	uint8_t sm[128] __attribute__((aligned(32)));
	__m256 sumv[KX_T];
	kx_zero(nt, sumv);
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KX_BYTES];
		kq_prefetch(blk, off[KX_BYTES]);
		const uint8_t *qs = blk + off[KX_QS], *sp = sm, *mp = sm + 64;
		kx_unpack_sm(blk + off[KX_SCALES], sm);
		__m256i isum[KX_T], msum[KX_T], mk[4];
		// Row r's mins 2k and 2k+1 in 32-bit lane r.
		KQ_UNROLL
		for (int k = 0; k < 4; k++)
			mk[k] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(mp + 16 * k)));
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			const int32_t *bs = bsums + t * ldb + 16 * b;
			// Pair sums of 16-value groups (at most 32 x 127 in
			// magnitude: 16 bits), as words: dword 0 (ps0, ps1), 1
			// (ps4, ps5), 4 (ps2, ps3), 5 (ps6, ps7).
			__m256i h = _mm256_hadd_epi32(_mm256_loadu_si256((const __m256i *)bs),
						      _mm256_loadu_si256((const __m256i *)(bs + 8)));
			__m256i p = _mm256_packs_epi32(h, h);
			__m256i m01 = _mm256_add_epi32(_mm256_madd_epi16(mk[0], _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(0))),
						       _mm256_madd_epi16(mk[1], _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(4))));
			__m256i m23 = _mm256_add_epi32(_mm256_madd_epi16(mk[2], _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(1))),
						       _mm256_madd_epi16(mk[3], _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(5))));
			msum[t] = _mm256_add_epi32(m01, m23);
			isum[t] = _mm256_setzero_si256();
		}
		KQ_UNROLL
		for (int c = 0; c < 4; c++) {
			__m256i al[KX_T], ah[KX_T];
			__m256i s0 = kx_scales16(sp + 16 * c), s1 = kx_scales16(sp + 16 * c + 8);
			KQ_UNROLL
			for (int k = 0; k < 8; k++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 256 * c + 32 * k));
				__m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
				if (five) {
					// Bits 2c and 2c+1 of each qh byte to bit 4 (a
					// 16-bit shift: the mask keeps the byte's own bit).
					__m256i h = _mm256_loadu_si256((const __m256i *)(blk + off[KX_QH] + 32 * k));
					lo = _mm256_or_si256(lo, kx_bit4(h, 2 * c));
					hi = _mm256_or_si256(hi, kx_bit4(h, 2 * c + 1));
				}
				KQ_UNROLL
				for (int t = 0; t < nt; t++) {
					const int8_t *xs = x + t * ldx + 256 * b + 64 * c + 4 * k;
					__m256i pl = _mm256_maddubs_epi16(lo, kx_bcast4(xs));
					__m256i ph = _mm256_maddubs_epi16(hi, kx_bcast4(xs + 32));
					int first = five ? k % 4 == 0 : k == 0;
					al[t] = first ? pl : _mm256_add_epi16(al[t], pl);
					ah[t] = first ? ph : _mm256_add_epi16(ah[t], ph);
				}
				if (k == 7 || (five && k == 3)) {
					KQ_UNROLL
					for (int t = 0; t < nt; t++)
						isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(al[t], s0), _mm256_madd_epi16(ah[t], s1)));
				}
			}
		}
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + off[KX_D])));
		__m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + off[KX_DMIN])));
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			__m256 xv = _mm256_set1_ps(xd[t * ldd + b]);
			__m256 a = _mm256_mul_ps(_mm256_mul_ps(dw, xv), _mm256_cvtepi32_ps(isum[t]));
			__m256 m = _mm256_mul_ps(_mm256_mul_ps(dm, xv), _mm256_cvtepi32_ps(msum[t]));
			sumv[t] = _mm256_add_ps(sumv[t], _mm256_sub_ps(a, m));
		}
	}
	kx_store(nt, sumv, out, ldo);
}

// kx_scales6 is the eight rows' signed scales of two sub-blocks (16 bytes
// at p, as tensor.Q6_Kx8 lays them out: row r's pair at bytes 2r, 2r+1)
// widened to 16 bits: row r's pair in 32-bit lane r.
KQ_INLINE __m256i kx_scales6(const uint8_t *p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)); }

// kx_q6k is kx_q4k for Q6_K with eight rows interleaved (tensor.Q6_Kx8).
// Per group block: the rows' integer sums as quant.go's dotQ6K takes them
// (Σ_j sc_j·Σ(q - 32)·x over the 16-value sub-blocks j, as Σ_j sc_j·Σ q·x
// less 32·Σ_j sc_j·bsum_j: the same integers), then per token the Go
// loop's f32 scaling lane by lane (d = dw·xd, sum = sum + d·sumi), row r
// in lane r, so each row's result has the Go loop's bits whatever nt is.
// A sub-block's codes are four vectors (three masked from the loads, the
// fourth gathered from their top bits); one VPMADDUBSW per vector and
// token, two of them summed in 16 bits (4 x 63 x 127 = 32,004 at most; a
// third would overflow), then the rows' scales by VPMADDWD.
KQ_INLINE void kx_q6k(int nt, const uint8_t *w, long nb, const long *off, const int8_t *x, long ldx, const float *xd,
		      long ldd, const int32_t *bsums, long ldb, float *out, long ldo) {
	const __m256i m6 = _mm256_set1_epi8(0x3f), mc = _mm256_set1_epi8((char)0xc0);
	// Row r's scale of the pair's first (second) sub-block in both words
	// of lane r.
	const __m256i dup0 = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8,
					      9, 8, 9, 12, 13, 12, 13);
	const __m256i dup1 = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6, 7, 6,
					      7, 10, 11, 10, 11, 14, 15, 14, 15);
	__m256 sumv[KX_T];
	kx_zero(nt, sumv);
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KX_BYTES];
		kq_prefetch(blk, off[KX_BYTES]);
		const uint8_t *sc = blk + off[KX_SCALES], *qs = blk + off[KX_QS];
		__m256i isum[KX_T];
		// The codes' offset: -32·Σ_j sc_j·bsum_j, the 16 sums packed to
		// 16 bits (at most 16 x 127), pair k (sums 2k, 2k+1) at dword
		// 0 1 4 5 2 3 6 7 of the (lane-wise) pack, broadcast against the
		// rows' scale pairs.
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			const int32_t *bs = bsums + t * ldb + 16 * b;
			__m256i p = _mm256_packs_epi32(_mm256_loadu_si256((const __m256i *)bs),
						       _mm256_loadu_si256((const __m256i *)(bs + 8)));
			__m256i ms = _mm256_setzero_si256();
			KQ_UNROLL
			for (int k = 0; k < 8; k++) {
				static const int at8[8] = {0, 1, 4, 5, 2, 3, 6, 7};
				int at = at8[k];
				ms = _mm256_add_epi32(ms, _mm256_madd_epi16(kx_scales6(sc + 16 * k),
									    _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(at))));
			}
			isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ms, 5));
		}
		KQ_UNROLL
		for (int u = 0; u < 16; u++) {
			__m256i s = _mm256_shuffle_epi8(kx_scales6(sc + 16 * (u / 2)), u % 2 ? dup1 : dup0);
			const uint8_t *q = qs + 96 * u;
			__m256i a = _mm256_loadu_si256((const __m256i *)q), b1 = _mm256_loadu_si256((const __m256i *)(q + 32));
			__m256i c = _mm256_loadu_si256((const __m256i *)(q + 64));
			__m256i c0 = _mm256_and_si256(a, m6), c1 = _mm256_and_si256(b1, m6), c2 = _mm256_and_si256(c, m6);
			// Each byte's top 2 bits alone, shifted within their word to
			// bits 0-1, 2-3 and 4-5 of their own byte.
			__m256i c3 = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(a, mc), 6),
								     _mm256_srli_epi16(_mm256_and_si256(b1, mc), 4)),
						     _mm256_srli_epi16(_mm256_and_si256(c, mc), 2));
			KQ_UNROLL
			for (int t = 0; t < nt; t++) {
				const int8_t *xs = x + t * ldx + 256 * b + 16 * u;
				__m256i p0 = _mm256_maddubs_epi16(c0, kx_bcast4(xs)), p1 = _mm256_maddubs_epi16(c1, kx_bcast4(xs + 4));
				__m256i p2 = _mm256_maddubs_epi16(c2, kx_bcast4(xs + 8)), p3 = _mm256_maddubs_epi16(c3, kx_bcast4(xs + 12));
				isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p0, p1), s),
										     _mm256_madd_epi16(_mm256_add_epi16(p2, p3), s)));
			}
		}
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + off[KX_D])));
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			__m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(xd[t * ldd + b]));
			sumv[t] = _mm256_add_ps(sumv[t], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[t])));
		}
	}
	kx_store(nt, sumv, out, ldo);
}

// KX8_PAIR is the 32-bit word of a pair of blocks' widened activations
// (kq_widen's layout) holding values 2p and 2p+1 of the pair's first
// block; the second block's are the word after it. For p = 4q + j that is
// KX8_PAIR(4q) + 0, 2, 8, 10 for j = 0..3.
#define KX8_PAIR(p) (8 * (2 * ((p) / 8) + ((p) % 4) / 2) + 4 * (((p) % 8) / 4) + 2 * ((p) % 2))

// kx_bcast4l is the 32 bits at p in every lane, by VBROADCASTSS from
// memory: a load alone, where GCC makes kx_bcast4 a VMOVD and a
// VPBROADCASTD, an operation on a vector port per broadcast.
KQ_INLINE __m256i kx_bcast4l(const void *p) { return _mm256_castps_si256(_mm256_broadcast_ss((const float *)p)); }

// kx_madd_acc is acc + VPMADDWD(a, b), as one asm statement: written in
// intrinsics, GCC pairs the products before adding them to the sums (a
// register more per pair) and, with kx_q8's sixteen rows and four tokens,
// spills sums to the stack in the inner loop.
KQ_INLINE __m256i kx_madd_acc(__m256i acc, __m256i a, __m256i b) {
	__m256i t;
	__asm__("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(a), "x"(b));
	return acc;
}

// kx_q32 is kx_q4k for Q4_0 (five = 0) and Q5_0 with eight rows
// interleaved (tensor.Q4_0x8, tensor.Q5_0x8): per group block, the four
// vectors of codes (eight rows' four bytes each) unpacked once for the
// tile, their low nibbles and their high ones (values 16 on) unsigned, with
// Q5_0's fifth bits moved to bit 4 from the one qh vector (a 16-bit shift
// and a mask per vector, the trick of Q5_Kx8); per token one VPMADDUBSW of
// each against four activations broadcast from memory, summed in 16 bits
// (Q5_0: the four low and the four high products apart, at most 4 x 2 x 31
// x 127 = 31,496 each; Q4_0: all eight, at most 8 x 2 x 15 x 127 =
// 30,480), widened by VPMADDWD, less the codes' offset (16 or 8) times the
// block's activation sum (sums, lds apart: Σ(u - o)·x = Σu·x - o·Σx, the
// same integer); then the Go loop's f32 scaling lane by lane (s = dw·xd,
// sum = sum + si·s), row r in lane r: each row's result has dotQ4_0's or
// dotQ5_0's bits whatever nt is.
KQ_INLINE void kx_q32(int five, int nt, const uint8_t *w, long nb, const long *off, const int8_t *x, long ldx,
		      const float *xd, long ldd, const int32_t *sums, long lds, float *out, long ldo) {
	const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
	__m256 sumv[KX_T];
	kx_zero(nt, sumv);
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KX_BYTES];
		kq_prefetch(blk, off[KX_BYTES]);
		const uint8_t *qs = blk + off[KX_QS];
		__m256i h = five ? _mm256_loadu_si256((const __m256i *)(blk + off[KX_QH])) : _mm256_setzero_si256();
		__m256i al[KX_T], ah[KX_T];
		KQ_UNROLL
		for (int k = 0; k < 4; k++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
			__m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			if (five) {
				// Bits 2k and 2k+1 of each qh byte to bit 4 (the
				// mask keeps the byte's own bit).
				lo = _mm256_or_si256(lo, kx_bit4(h, 2 * k));
				hi = _mm256_or_si256(hi, kx_bit4(h, 2 * k + 1));
			}
			KQ_UNROLL
			for (int t = 0; t < nt; t++) {
				const int8_t *xs = x + t * ldx + 32 * b + 4 * k;
				__m256i pl = _mm256_maddubs_epi16(lo, kx_bcast4l(xs));
				__m256i ph = _mm256_maddubs_epi16(hi, kx_bcast4l(xs + 16));
				if (five) {
					al[t] = k == 0 ? pl : _mm256_add_epi16(al[t], pl);
					ah[t] = k == 0 ? ph : _mm256_add_epi16(ah[t], ph);
				} else {
					__m256i p = _mm256_add_epi16(pl, ph);
					al[t] = k == 0 ? p : _mm256_add_epi16(al[t], p);
				}
			}
		}
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + off[KX_D])));
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			__m256i si = _mm256_madd_epi16(al[t], ones);
			if (five)
				si = _mm256_add_epi32(si, _mm256_madd_epi16(ah[t], ones));
			__m256i o = _mm256_slli_epi32(_mm256_set1_epi32(sums[t * lds + b]), five ? 4 : 3);
			si = _mm256_sub_epi32(si, o);
			__m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(xd[t * ldd + b]));
			sumv[t] = _mm256_add_ps(sumv[t], _mm256_mul_ps(_mm256_cvtepi32_ps(si), d));
		}
	}
	kx_store(nt, sumv, out, ldo);
}

// kx_q8 is kx_q4k for Q8_0 with eight rows interleaved (tensor.Q8_0x8),
// for ng (1 or 2) groups gb bytes apart, the second's rows in out[t*ldo +
// 8..15], over the nb group blocks at w, with the tokens' activations
// widened (xw, kq_widen's layout from an even block, ldw values a token)
// and their scales (xd, ldd apart). Per block, the codes widened to 16
// bits once for the tile (a row's pair of values in each 32-bit lane), per
// token the activation pairs broadcast from memory, one VPMADDWD per
// vector and group (16 per 256 products, where the row-at-a-time kernel
// takes 24 on the FMA ports), summed exactly in 32 bits; then the Go
// loop's f32 scaling lane by lane (s = dw·xd, sum = sum + si·s), row r in
// lane r: each row's result has dotQ8_0's bits whatever nt and ng are, and
// however the blocks are split across calls (cont: sums carried in out
// from the blocks before; else they start at zero).
//
// The inner loop is the group count's:
//   - two groups (prefill tiles): pairs 2h and 2h+1 of both groups at a
//     time, each broadcast serving 16 rows (half the loads), each product
//     added to its sum by kx_madd_acc so that GCC keeps the 8 sums, 4
//     weight vectors and the broadcast in 14 registers; the f32 sums then
//     live in out (loaded, added, stored once per block: the same
//     operations in the same order);
//   - one group (one token, and a tile's odd last group): a quarter of the
//     block (four pairs) at a time, its four products summed as a tree and
//     the f32 sums in registers, where the two-group loop's serial chain
//     of multiply-adds and its sums in out cost a decode 18% (0.5B Q8_0,
//     AVX2, one thread: 55 -> 45 tok/s).
KQ_INLINE void kx_q8(int ng, int nt, const uint8_t *w, long gb, long nb, const long *off, const int16_t *xw, long ldw,
		     const float *xd, long ldd, int cont, float *out, long ldo) {
	__m256 sumv[KX_T];
	KQ_UNROLL
	for (int t = 0; t < nt; t++) {
		if (ng == 1) {
			sumv[t] = cont ? _mm256_loadu_ps(out + t * ldo) : _mm256_setzero_ps();
		} else if (!cont) {
			KQ_UNROLL
			for (int g = 0; g < ng; g++)
				_mm256_storeu_ps(out + t * ldo + 8 * g, _mm256_setzero_ps());
		}
	}
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KX_BYTES];
		KQ_UNROLL
		for (int g = 0; g < ng; g++)
			kq_prefetch(blk + g * gb, off[KX_BYTES]);
		const uint8_t *qs = blk + off[KX_QS];
		const int16_t *xb = xw + 64 * (b / 2) + 2 * (b & 1);
		__m256i isum[2][KX_T];
		KQ_UNROLL
		for (int g = 0; g < ng; g++)
			KQ_UNROLL
			for (int t = 0; t < nt; t++)
				isum[g][t] = _mm256_setzero_si256();
		if (ng == 1) {
			// Not unrolled: unrolled, GCC loads all 16 weight vectors
			// at once and spills the tokens' sums.
#pragma GCC unroll 1
			for (int q = 0; q < 4; q++) {
				__m256i wv[4];
				KQ_UNROLL
				for (int j = 0; j < 4; j++)
					wv[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 64 * q + 16 * j)));
				// Pairs 4q..4q+3 at words KX8_PAIR(4q) + 0, 2, 8, 10.
				const int8_t *xq = (const int8_t *)xb + 4 * KX8_PAIR(4 * q);
				KQ_UNROLL
				for (int t = 0; t < nt; t++) {
					const int8_t *xt = xq + 2 * t * ldw;
					__m256i s01 = _mm256_add_epi32(_mm256_madd_epi16(wv[0], kx_bcast4l(xt)),
								       _mm256_madd_epi16(wv[1], kx_bcast4l(xt + 8)));
					__m256i s23 = _mm256_add_epi32(_mm256_madd_epi16(wv[2], kx_bcast4l(xt + 32)),
								       _mm256_madd_epi16(wv[3], kx_bcast4l(xt + 40)));
					isum[0][t] = _mm256_add_epi32(isum[0][t], _mm256_add_epi32(s01, s23));
				}
			}
		} else {
			// Not unrolled, for the same reason.
#pragma GCC unroll 1
			for (int h = 0; h < 8; h++) {
				__m256i wv[2][2];
				KQ_UNROLL
				for (int g = 0; g < ng; g++)
					KQ_UNROLL
					for (int j = 0; j < 2; j++)
						wv[g][j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + g * gb + 32 * h + 16 * j)));
				// Pair 2h at word KX8_PAIR(2h), pair 2h+1 two words on.
				const int8_t *xq = (const int8_t *)xb + 4 * KX8_PAIR(2 * h);
				KQ_UNROLL
				for (int t = 0; t < nt; t++) {
					const int8_t *xt = xq + 2 * t * ldw;
					__m256i x0 = kx_bcast4l(xt);
					KQ_UNROLL
					for (int g = 0; g < ng; g++)
						isum[g][t] = kx_madd_acc(isum[g][t], wv[g][0], x0);
					__m256i x1 = kx_bcast4l(xt + 8);
					KQ_UNROLL
					for (int g = 0; g < ng; g++)
						isum[g][t] = kx_madd_acc(isum[g][t], wv[g][1], x1);
				}
			}
		}
		__m256 dw[2];
		KQ_UNROLL
		for (int g = 0; g < ng; g++)
			dw[g] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + g * gb + off[KX_D])));
		KQ_UNROLL
		for (int t = 0; t < nt; t++) {
			__m256 xs = _mm256_set1_ps(xd[t * ldd + b]);
			KQ_UNROLL
			for (int g = 0; g < ng; g++) {
				__m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[g][t]), _mm256_mul_ps(dw[g], xs));
				if (ng == 1) {
					sumv[t] = _mm256_add_ps(sumv[t], p);
					continue;
				}
				float *o = out + t * ldo + 8 * g;
				_mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), p));
			}
		}
	}
	if (ng == 1)
		kx_store(nt, sumv, out, ldo);
}

// KX_GROUP runs group g of the interleaved type over blocks [b0, b1)
// against the nt tokens from token i (nt a constant); for Q8_0, groups g
// and g+1 together where gs is 2.
#define KX_GROUP(nt)                                                                                               \
	do {                                                                                                       \
		const uint8_t *wg = w + g * gb + b0 * off[KX_BYTES];                                               \
		float *o = out + i * ldo + 8 * g;                                                                  \
		const int8_t *xi = x + i * cols + (cols / nb) * b0;                                                \
		const float *di = xd + i * nb + b0;                                                                \
		const int32_t *bi = bsums + i * lb + (lb / nb) * b0;                                               \
		if (type == KQ_Q5_0)                                                                               \
			kx_q32(1, nt, wg, b1 - b0, off, xi, cols, di, nb, bi, lb, o, ldo);                          \
		else if (type == KQ_Q4_0)                                                                          \
			kx_q32(0, nt, wg, b1 - b0, off, xi, cols, di, nb, bi, lb, o, ldo);                          \
		else if (type == KQ_Q8_0 && gs == 2)                                                               \
			kx_q8(2, nt, wg, gb, b1 - b0, off, xw + i * ldw + 32 * b0, ldw, di, nb, b0 > 0, o, ldo);  \
		else if (type == KQ_Q8_0)                                                                          \
			kx_q8(1, nt, wg, gb, b1 - b0, off, xw + i * ldw + 32 * b0, ldw, di, nb, b0 > 0, o, ldo);  \
		else if (type == KQ_Q6_K)                                                                          \
			kx_q6k(nt, wg, b1 - b0, off, xi, cols, di, nb, bi, lb, o, ldo);                             \
		else if (type == KQ_Q5_K)                                                                          \
			kx_q4k(nt, wg, b1 - b0, off, xi, cols, di, nb, bi, lb, 1, o, ldo);                          \
		else                                                                                               \
			kx_q4k(nt, wg, b1 - b0, off, xi, cols, di, nb, bi, lb, 0, o, ldo);                          \
	} while (0)

// kq_rows_x8 sets out[i*ldo + 8g + r] for rows r of the groups [g0, g1)
// of interleaved weights w (type KQ_Q4_K: tensor.Q4_Kx8, KQ_Q5_K:
// tensor.Q5_Kx8, KQ_Q6_K: tensor.Q6_Kx8, KQ_Q8_0: tensor.Q8_0x8, KQ_Q4_0:
// tensor.Q4_0x8, KQ_Q5_0: tensor.Q5_0x8; gb bytes a group) and the n token
// rows of activations: q8_K for the K types (x, cols each, xd's scales per
// 256, bsums per 16), q8_0 for the 32-value types (xd's scales per 32; for
// Q8_0 xw, x widened by kq_widen, which is what its kernel reads; for Q4_0
// and Q5_0 x, and in bsums each block's sum). One token takes the groups whole and in order (the weights'
// stream is what it waits on). More take tokens in blocks (of about
// KQ_XBYTES of q8_K activations, KQ_WXBYTES of widened q8_0 ones: each
// block streams the matrix once), groups in chunks of about KQ_WBYTES
// over a pass's blocks (whole rows for the K types, KQ_WCHUNK blocks for
// Q8_0, whose wide rows' activations would not stay in L1), which each
// tile of KX_T tokens of the block passes over in turn, the sums carried
// from one pass to the next in out.
void kq_rows_x8(int type, const uint8_t *w, long gb, long g0, long g1, const long *off, const int8_t *x,
		const int16_t *xw, const float *xd, const int32_t *bsums, long n, long cols, float *out, long ldo) {
	int q8 = type == KQ_Q8_0, q32 = type == KQ_Q4_0 || type == KQ_Q5_0;
	// Blocks a row; bsums' values a token (the K types' sums of 16, the
	// 32-value types' of 32).
	long nb = q8 || q32 ? cols / 32 : cols / 256, lb = q32 ? nb : cols / 16, ldw = q8 ? 64 * ((nb + 1) / 2) : 0;
	long gs = 1; // groups per call: Q8_0's tiles take two where there are two
	if (n == 1) {
		long i = 0, b0 = 0, b1 = nb;
		for (long g = g0; g < g1; g++)
			KX_GROUP(1);
		return;
	}
	long tb = q8 ? KQ_WXBYTES / (2 * cols) : KQ_XBYTES / cols;
	tb = tb < KX_T ? KX_T : tb - tb % KX_T;
	long cb = q8 && nb > KQ_WCHUNK ? KQ_WCHUNK : nb;
	long gc = KQ_WBYTES / (cb * off[KX_BYTES]);
	gc = gc < 1 ? 1 : q8 && gc > 2 ? gc - gc % 2 : gc; // Q8_0: whole pairs of groups
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long c0 = g0; c0 < g1; c0 += gc)
			for (long b0 = 0; b0 < nb; b0 += cb) {
				long b1 = b0 + cb < nb ? b0 + cb : nb;
				for (long i = t0; i < n && i < t0 + tb; i += KX_T)
					for (long g = c0, ge = g1 < c0 + gc ? g1 : c0 + gc; g < ge; g += gs) {
						gs = q8 && g + 1 < ge ? 2 : 1;
						switch (n - i < KX_T ? n - i : KX_T) {
						case 1:
							KX_GROUP(1);
							break;
						case 2:
							KX_GROUP(2);
							break;
						case 3:
							KX_GROUP(3);
							break;
						default:
							KX_GROUP(4);
							break;
						}
					}
			}
}

// kq_round_away is C's roundf on 8 lanes, exactly: the magnitude's floor,
// plus one where the fraction (exact) is at least a half, with t's sign;
// then as int32.
KQ_INLINE __m256i kq_round_away(__m256 t) {
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 a = _mm256_andnot_ps(sign, t);
	__m256 fl = _mm256_floor_ps(a);
	__m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a, fl), _mm256_set1_ps(0.5f), _CMP_GE_OQ), _mm256_set1_ps(1.0f));
	return _mm256_cvttps_epi32(_mm256_or_ps(_mm256_add_ps(fl, up), _mm256_and_ps(t, sign)));
}

// kq_pack32 stores the 32 int32 lanes of q[0..3] (each in [-128, 127]) as
// 32 bytes in order.
KQ_INLINE void kq_pack32(int8_t *dst, const __m256i *q) {
	// packs works within 128-bit lanes: dwords come out as q0[0:4],
	// q1[0:4], q2[0:4], q3[0:4], q0[4:8], ... and are put back in order.
	__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
	p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)dst, p);
}

KQ_INLINE float kq_hmax(__m256 m) {
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

// kq_quant_q8_0 quantizes the nb blocks of 32 values at x as quant.go's
// quantizeQ8_0 (ggml's quantize_row_q8_0), bit for bit: the scale
// amax/127, each value times its inverse rounded half away from zero,
// and the scale rounded to f16 (to nearest even) and back; where sums is
// not null, with each block's sum of its 32 quantized values.
void kq_quant_q8_0(const float *x, long nb, int8_t *qs, float *d, int32_t *sums) {
	const __m256 sign = _mm256_set1_ps(-0.0f);
	for (long b = 0; b < nb; b++) {
		const float *v = x + 32 * b;
		__m256 f[4];
		KQ_UNROLL
		for (int i = 0; i < 4; i++)
			f[i] = _mm256_loadu_ps(v + 8 * i);
		__m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, f[0]), _mm256_andnot_ps(sign, f[1])),
					 _mm256_max_ps(_mm256_andnot_ps(sign, f[2]), _mm256_andnot_ps(sign, f[3])));
		float s = kq_hmax(m) / 127.0f;
		__m256 id = _mm256_set1_ps(s != 0 ? 1.0f / s : 0.0f);
		__m256i q[4];
		KQ_UNROLL
		for (int i = 0; i < 4; i++)
			q[i] = kq_round_away(_mm256_mul_ps(f[i], id));
		kq_pack32(qs + 32 * b, q);
		if (sums)
			sums[b] = kq_hsum(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
		d[b] = _cvtsh_ss(_cvtss_sh(s, _MM_FROUND_TO_NEAREST_INT));
	}
}

// kq_quant_q8_k quantizes the nb blocks of 256 values at x as quant.go's
// quantizeQ8_K (ggml's quantize_row_q8_K), bit for bit: the scale maps
// the first value of largest magnitude to -127, values rounded to the
// nearest even and capped at 127, with the sum of each 16.
void kq_quant_q8_k(const float *x, long nb, int8_t *qs, float *d, int32_t *bsums) {
	const __m256 sign = _mm256_set1_ps(-0.0f);
	for (long b = 0; b < nb; b++) {
		const float *v = x + 256 * b;
		int8_t *q = qs + 256 * b;
		int32_t *bs = bsums + 16 * b;
		__m256 m = _mm256_setzero_ps();
		for (int i = 0; i < 32; i++)
			m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * i)));
		float amax = kq_hmax(m);
		if (amax == 0) {
			d[b] = 0;
			for (int i = 0; i < 256; i++)
				q[i] = 0;
			for (int g = 0; g < 16; g++)
				bs[g] = 0;
			continue;
		}
		// The first value of that magnitude, its sign kept.
		__m256 am = _mm256_set1_ps(amax);
		int j = 0;
		for (int i = 0; i < 32; i++) {
			int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * i)), am, _CMP_EQ_OQ));
			if (k) {
				j = 8 * i + __builtin_ctz((unsigned)k);
				break;
			}
		}
		float iscale = -127.0f / v[j];
		__m256 is = _mm256_set1_ps(iscale), cap = _mm256_set1_ps(127.0f);
		for (int g = 0; g < 8; g++) { // 32 values: two sums of 16
			__m256i qi[4];
			KQ_UNROLL
			for (int i = 0; i < 4; i++) {
				__m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 32 * g + 8 * i), is),
							   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
				qi[i] = _mm256_cvttps_epi32(_mm256_min_ps(r, cap));
			}
			kq_pack32(q + 32 * g, qi);
			bs[2 * g] = kq_hsum(_mm256_add_epi32(qi[0], qi[1]));
			bs[2 * g + 1] = kq_hsum(_mm256_add_epi32(qi[2], qi[3]));
		}
		d[b] = 1.0f / iscale;
	}
}
