//go:build cgo

// Matrix products of bf16 and f16 weights with AVX2, FMA and F16C, as C
// with compiler intrinsics: a register-tiled GEMM in the shape of BLIS's
// Haswell micro-kernel (6 tokens x 16 rows, 12 ymm accumulators), the
// weights packed column by column in 16-row panels (kk_pack_columns), bf16
// widened by a zero extension and a shift, f16 by VCVTPH2PS. Activations are f32 and every product is one FMA
// in column order: exact f32 arithmetic on the weights as stored.
//
// Each output is one lane of one tile, summed by the same instructions
// whatever the tile's token count, so a token's results do not depend on
// how many tokens share the call (a decode step's GEMV is the tile of one
// token), nor on the split of work across threads.

#include <stdint.h>
#include <immintrin.h>

#define KK_INLINE static inline __attribute__((always_inline))

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

// kk_avx2_supported reports whether the CPU and OS run these kernels.
int kk_avx2_supported(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

// Everything below runs only after kk_avx2_supported said yes (the
// AVX-512 kernels' panels are packed here too: every AVX-512 CPU has AVX2).
#pragma GCC target("avx2,fma,f16c")

// Weight panels. A panel holds width consecutive rows of a row-major
// matrix, column by column, so a kernel loads one column of width rows as
// one or two vectors and streams the whole panel front to back. Rows past
// the matrix's end, and a pair's missing odd column, are zeros. Packing
// moves 8x8 blocks through registers (one transpose each), so it runs at
// memory speed; the ragged edges go one value at a time.

// transpose8x8 transposes the 8x8 dwords of r: r[i] lane j becomes r[j]
// lane i.
KK_INLINE void transpose8x8(__m256i r[8]) {
	__m256i t[8], u[8];
	// Unrolled, so that t and u stay in registers.
#pragma GCC unroll 4
	for (int i = 0; i < 8; i += 2) {
		t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
	}
#pragma GCC unroll 2
	for (int i = 0; i < 8; i += 4) {
		u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
		u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
		u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
		u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
		r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
	}
}

// kk_pack_pairs packs panels [p0, p1) of the rows x cols matrix of 16-bit
// values w into dst, panel p at dst + p*width*pairs, pairs = (cols+1)/2:
// dword q*width + j of a panel holds row j's columns 2q (low half) and
// 2q+1 (high half). width is a multiple of 8.
void kk_pack_pairs(const uint16_t *w, long rows, long cols, long width, long p0, long p1, uint32_t *dst) {
	long pairs = (cols + 1) / 2, full = cols / 16 * 8; // pairs in whole 8-pair blocks
	for (long p = p0; p < p1; p++) {
		uint32_t *panel = dst + p * width * pairs;
		// Whole 8x8 blocks of the panel's rows that exist, a column block
		// at a time, so each 128-byte column of the panel is written whole.
		long whole = (rows - p * width) / 8 * 8;
		whole = whole < 0 ? 0 : whole > width ? width : whole;
		for (long q0 = 0; q0 < full; q0 += 8) {
			for (long j0 = 0; j0 < whole; j0 += 8) {
				const uint16_t *src = w + (p * width + j0) * cols + 2 * q0;
				__m256i r[8];
				for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i *)(src + i * cols));
				transpose8x8(r);
				for (int k = 0; k < 8; k++)
					_mm256_storeu_si256((__m256i *)(panel + (q0 + k) * width + j0), r[k]);
			}
		}
		// The rest one value at a time: rows past the whole blocks, and
		// the pairs past full.
		for (long j = 0; j < width; j++) {
			long r = p * width + j;
			const uint16_t *row = w + r * cols;
			for (long q = j < whole ? full : 0; q < pairs; q++) {
				uint32_t lo = 0, hi = 0;
				if (r < rows) {
					lo = row[2 * q];
					hi = 2 * q + 1 < cols ? row[2 * q + 1] : 0;
				}
				panel[q * width + j] = lo | hi << 16;
			}
		}
	}
}

// kk_pack_columns packs panels [p0, p1) of the rows x cols matrix of 16-bit
// values w into dst, panel p at dst + p*width*cols: value c*width + j of a
// panel is row j's column c. width is a multiple of 8.
void kk_pack_columns(const uint16_t *w, long rows, long cols, long width, long p0, long p1, uint16_t *dst) {
	long full = cols / 8 * 8;
	for (long p = p0; p < p1; p++) {
		uint16_t *panel = dst + p * width * cols;
		long whole = (rows - p * width) / 8 * 8;
		whole = whole < 0 ? 0 : whole > width ? width : whole;
		for (long c0 = 0; c0 < full; c0 += 8) {
			for (long j0 = 0; j0 < whole; j0 += 8) {
				const uint16_t *src = w + (p * width + j0) * cols + c0;
				__m128i r[8], t[8], u[8];
				for (int i = 0; i < 8; i++) r[i] = _mm_loadu_si128((const __m128i *)(src + i * cols));
				for (int i = 0; i < 8; i += 2) {
					t[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);
					t[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);
				}
				for (int i = 0; i < 8; i += 4) {
					u[i] = _mm_unpacklo_epi32(t[i], t[i + 2]);
					u[i + 1] = _mm_unpackhi_epi32(t[i], t[i + 2]);
					u[i + 2] = _mm_unpacklo_epi32(t[i + 1], t[i + 3]);
					u[i + 3] = _mm_unpackhi_epi32(t[i + 1], t[i + 3]);
				}
				for (int i = 0; i < 4; i++) {
					r[2 * i] = _mm_unpacklo_epi64(u[i], u[i + 4]);
					r[2 * i + 1] = _mm_unpackhi_epi64(u[i], u[i + 4]);
				}
				for (int k = 0; k < 8; k++) _mm_storeu_si128((__m128i *)(panel + (c0 + k) * width + j0), r[k]);
			}
		}
		for (long j = 0; j < width; j++) {
			long r = p * width + j;
			for (long c = j < whole ? full : 0; c < cols; c++) panel[c * width + j] = r < rows ? w[r * cols + c] : 0;
		}
	}
}

// kk2_round_bf16 sets dst[i] to x[i] rounded to bf16 (to nearest, ties
// to even; a NaN made quiet, its payload's high bits kept), as an f32:
// tensor.F32ToBF16 then BF16ToF32, bit for bit, 8 values a step. The AVX2
// bf16 GEMM multiplies activations rounded so (the arithmetic of the
// VDPBF16PS kernels), once per MatMul; dst may be x.
void kk2_round_bf16(const float *x, long n, float *dst) {
	const __m256i mag = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
	const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
	const __m256i high = _mm256_set1_epi32((int)0xffff0000u), quiet = _mm256_set1_epi32(0x00400000);
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
		__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, mag), inf);
		__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
		r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
		_mm256_storeu_si256((__m256i *)(dst + i), _mm256_and_si256(r, high));
	}
	for (; i < n; i++) {
		uint32_t u;
		__builtin_memcpy(&u, x + i, 4);
		u = (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u);
		u &= 0xffff0000u;
		__builtin_memcpy(dst + i, &u, 4);
	}
}

// KK2_PANEL is the rows of a panel, KK2_ROWS those of a GEMM tile (two ymm
// registers of f32 outputs): a tile covers half a panel. A GEMV (one token)
// covers a whole panel at once: four FMA chains, one per 8 rows, over one
// contiguous stream of weights; with two, their latency would bound it.
#define KK2_PANEL 32
#define KK2_ROWS 16
// KK2_MR is the tokens of a tile: 12 accumulators, two weight vectors and
// a broadcast fit the 16 ymm registers.
#define KK2_MR 6
// KK2_PF is how many columns ahead of its loads a GEMV or a tile asks for
// the panel's next cache lines (8 KB): with four 16-byte loads per line
// the hardware prefetcher alone falls behind, and one decode thread
// streamed 28-31 GB/s without it, 35-38 with it (a plain read: 30). A
// batched decode step's tiles (a few tokens) stream the weights as a GEMV
// does; there the prefetch took 16 sequences from 127 to 156 tok/s. The
// later tiles of a panel find it cached and the hint costs them little.
#define KK2_PF 128

#define KK2_SWITCH(TILE, mr, ...)               \
	switch (mr) {                           \
	case 6: TILE(6, __VA_ARGS__); break;    \
	case 5: TILE(5, __VA_ARGS__); break;    \
	case 4: TILE(4, __VA_ARGS__); break;    \
	case 3: TILE(3, __VA_ARGS__); break;    \
	case 2: TILE(2, __VA_ARGS__); break;    \
	default: TILE(1, __VA_ARGS__); break;   \
	}

// store8 writes the nr values of a (at most 8; none when nr <= 0).
KK_INLINE void store8(float *out, int nr, __m256 a) {
	if (nr >= 8) {
		_mm256_storeu_ps(out, a);
		return;
	}
	if (nr <= 0) return;
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	_mm256_maskstore_ps(out, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane), a);
}

// The weights of 8 rows of one column: bf16 zero-extended and shifted left
// 16 (a bf16 is the high half of an f32), f16 through VCVTPH2PS.
#define KK2_WIDEN_BF16(q) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(q)), 16))
#define KK2_WIDEN_F16(q) _mm256_cvtph_ps(_mm_loadu_si128(q))

// A tile's 16 weights of one column as two f32 vectors. bf16: interleaved
// with zeros (VPUNPCKLWD/VPUNPCKHWD, a bf16 being the high half of an
// f32), one shuffle each where the widening above takes a shuffle and a
// shift, which competes with the FMAs for their two ports; this leaves
// rows 0-3 and 8-11 in w0, rows 4-7 and 12-15 in w1, which KK2_UNPAIR puts
// back in order at the tile's end. f16: VCVTPH2PS, rows in order.
#define KK2_WIDEN2_BF16(q, w0, w1)                                                               \
	do {                                                                                     \
		__m256i v = _mm256_loadu_si256((const __m256i *)(q));                            \
		w0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));      \
		w1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));      \
	} while (0)
#define KK2_UNPAIR_BF16(a0, a1)                                                                   \
	do {                                                                                     \
		__m256 lo = _mm256_permute2f128_ps(a0, a1, 0x20), hi = _mm256_permute2f128_ps(a0, a1, 0x31); \
		a0 = lo, a1 = hi;                                                                \
	} while (0)
#define KK2_WIDEN2_F16(q, w0, w1) (w0 = KK2_WIDEN_F16(q), w1 = KK2_WIDEN_F16((q) + 1))
#define KK2_UNPAIR_F16(a0, a1) ((void)0)

// KK2_TILE defines name: out[i*ldo + j] for mr tokens and the nr rows of a
// tile from panel (the tile's first row of each column, columns KK2_PANEL
// values apart), the dot products of the weights widened by WIDEN2 with
// the tokens' f32 activations x (row stride ldx), the products added in
// column order (each output's the GEMV's, wherever WIDEN2 puts its row;
// UNPAIR puts the rows back in order).
#define KK2_TILE(name, WIDEN2, UNPAIR)                                                                  \
	KK_INLINE void name(const int mr, const uint16_t *restrict panel, const float *restrict x, long ldx, \
			    long cols, float *restrict out, long ldo, int nr) {                           \
		__m256 a0[KK2_MR], a1[KK2_MR];                                                           \
		_Pragma("GCC unroll 6") for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm256_setzero_ps();    \
		for (long c = 0; c < cols; c++) {                                                        \
			const __m128i *p = (const __m128i *)(panel + c * KK2_PANEL);                     \
			_mm_prefetch((const char *)(panel + (c + KK2_PF) * KK2_PANEL), _MM_HINT_T0);     \
			__m256 w0, w1;                                                                   \
			WIDEN2(p, w0, w1);                                                               \
			_Pragma("GCC unroll 6") for (int i = 0; i < mr; i++) {                           \
				__m256 b = _mm256_broadcast_ss(x + i * ldx + c);                         \
				a0[i] = _mm256_fmadd_ps(w0, b, a0[i]);                                   \
				a1[i] = _mm256_fmadd_ps(w1, b, a1[i]);                                   \
			}                                                                                \
		}                                                                                        \
		_Pragma("GCC unroll 6") for (int i = 0; i < mr; i++) {                                   \
			UNPAIR(a0[i], a1[i]);                                                            \
			store8(out + i * ldo, nr, a0[i]);                                                \
			store8(out + i * ldo + 8, nr - 8, a1[i]);                                        \
		}                                                                                        \
	}

// KK2_GEMV defines name: one token's outputs for the nr rows of a whole
// panel, each summed as a tile of one token sums it (the same FMAs in the
// same order), four chains at once.
#define KK2_GEMV(name, WIDEN)                                                                            \
	KK_INLINE void name(const uint16_t *restrict panel, const float *restrict x, long cols,              \
			    float *restrict out, int nr) {                                                 \
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                             \
		for (long c = 0; c < cols; c++) {                                                        \
			const __m128i *p = (const __m128i *)(panel + c * KK2_PANEL);                     \
			_mm_prefetch((const char *)(panel + (c + KK2_PF) * KK2_PANEL), _MM_HINT_T0);     \
			__m256 b = _mm256_broadcast_ss(x + c);                                           \
			a0 = _mm256_fmadd_ps(WIDEN(p), b, a0);                                           \
			a1 = _mm256_fmadd_ps(WIDEN(p + 1), b, a1);                                       \
			a2 = _mm256_fmadd_ps(WIDEN(p + 2), b, a2);                                       \
			a3 = _mm256_fmadd_ps(WIDEN(p + 3), b, a3);                                       \
		}                                                                                        \
		store8(out, nr, a0);                                                                     \
		store8(out + 8, nr - 8, a1);                                                             \
		store8(out + 16, nr - 16, a2);                                                           \
		store8(out + 24, nr - 24, a3);                                                           \
	}

KK2_TILE(tile_bf16, KK2_WIDEN2_BF16, KK2_UNPAIR_BF16)
KK2_TILE(tile_f16, KK2_WIDEN2_F16, KK2_UNPAIR_F16)
KK2_GEMV(gemv_bf16, KK2_WIDEN_BF16)
KK2_GEMV(gemv_f16, KK2_WIDEN_F16)

// KK2_GEMM defines name: out[t*ldo + r] = Σ_c x[t][c]·w[r][c] for the n
// tokens (f32 rows of stride cols) and the rows of panels [p0, p1) of the
// rows x cols weights packed at panels by kk_pack_columns (width
// KK2_PANEL): one token by GEMV, more by tiles of KK2_MR tokens and half a
// panel.
#define KK2_GEMM(name, TILE, GEMV)                                                                       \
	void name(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n,     \
		  float *out, long ldo) {                                                                \
		for (long p = p0; p < p1; p++) {                                                         \
			const uint16_t *panel = panels + p * KK2_PANEL * cols;                           \
			long r0 = p * KK2_PANEL;                                                         \
			int nr = rows - r0 < KK2_PANEL ? (int)(rows - r0) : KK2_PANEL;                   \
			if (n == 1) {                                                                    \
				GEMV(panel, x, cols, out + r0, nr);                                      \
				continue;                                                                \
			}                                                                                \
			for (int h = 0; h < nr; h += KK2_ROWS) {                                         \
				int hr = nr - h < KK2_ROWS ? nr - h : KK2_ROWS;                          \
				for (long t = 0; t < n; t += KK2_MR) {                                   \
					int mr = n - t < KK2_MR ? (int)(n - t) : KK2_MR;                 \
					KK2_SWITCH(TILE, mr, panel + h, x + t * cols, cols, cols,        \
						   out + t * ldo + r0 + h, ldo, hr)                      \
				}                                                                        \
			}                                                                                \
		}                                                                                        \
	}

// kk2_gemm_bf16 and kk2_gemm_f16 multiply bf16 and f16 weights.
KK2_GEMM(kk2_gemm_bf16, tile_bf16, gemv_bf16)
KK2_GEMM(kk2_gemm_f16, tile_f16, gemv_f16)

// Attention over a block of cached rows, as avx512_amd64.c's kk_scores and
// kk_mix do it with AVX-512: scores of m query rows against n key rows, and
// the probability-weighted sum of n value rows into m output rows, tiled
// so each key or value row loaded serves several query rows. Every
// output's arithmetic is the same wherever it falls in a tile: a score sums
// lane-wise FMAs over its row in 8-value steps (the last one masked), then
// its 8 lanes by one fixed tree; an output value adds one FMA per row, rows
// in order.

// KK2_QR and KK2_KR are the query and key rows of a score tile: 8
// accumulators, one ymm of scores after the reduction.
#define KK2_QR 4
#define KK2_KR 2

// reduce8 returns the lane sums of a[0..7] as one vector, lane p holding
// a[p]'s sum, every sum by the same tree: adjacent lanes, then pairs, then
// the two halves.
KK_INLINE __m256 reduce8(const __m256 a[8]) {
	__m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
	__m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
	__m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// kk2_scores sets s[i*lds + k] = scale * (q[i*d:]·keys[k*d:]) for the m
// query rows and n key rows of d values. Tiles past the last row or key
// repeat it and store nothing for it.
void kk2_scores(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds) {
	const __m256 sc = _mm256_set1_ps(scale);
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(d % 8 ? d % 8 : 8)), lane);
	for (long i0 = 0; i0 < m; i0 += KK2_QR) {
		const float *qr[KK2_QR];
		for (int r = 0; r < KK2_QR; r++) qr[r] = q + (i0 + r < m ? i0 + r : m - 1) * d;
		int mr = m - i0 < KK2_QR ? (int)(m - i0) : KK2_QR;
		for (long k0 = 0; k0 < n; k0 += KK2_KR) {
			const float *kr[KK2_KR];
			for (int c = 0; c < KK2_KR; c++) kr[c] = keys + (k0 + c < n ? k0 + c : n - 1) * d;
			__m256 acc[KK2_QR * KK2_KR];
#pragma GCC unroll 8
			for (int i = 0; i < KK2_QR * KK2_KR; i++) acc[i] = _mm256_setzero_ps();
			for (long j = 0; j < d; j += 8) {
				__m256i mk = j + 8 <= d ? _mm256_set1_epi32(-1) : tail;
				__m256 qv[KK2_QR], kv[KK2_KR];
#pragma GCC unroll 4
				for (int r = 0; r < KK2_QR; r++) qv[r] = _mm256_maskload_ps(qr[r] + j, mk);
#pragma GCC unroll 2
				for (int c = 0; c < KK2_KR; c++) kv[c] = _mm256_maskload_ps(kr[c] + j, mk);
#pragma GCC unroll 4
				for (int r = 0; r < KK2_QR; r++)
#pragma GCC unroll 2
					for (int c = 0; c < KK2_KR; c++)
						acc[r * KK2_KR + c] = _mm256_fmadd_ps(qv[r], kv[c], acc[r * KK2_KR + c]);
			}
			float out[8];
			_mm256_storeu_ps(out, _mm256_mul_ps(reduce8(acc), sc));
			int kc = n - k0 < KK2_KR ? (int)(n - k0) : KK2_KR;
			for (int r = 0; r < mr; r++)
				for (int c = 0; c < kc; c++) s[(i0 + r) * lds + k0 + c] = out[r * KK2_KR + c];
		}
	}
}

// KK2_PR is the most output rows of a weighted-sum tile, each 16 values in
// two ymm accumulators: 12 accumulators, the value row's two vectors and
// the broadcast weight fill 15 of the 16 ymm registers (BLIS's Haswell
// shape), and each value row loaded serves 12 FMAs rather than 8.
#define KK2_PR 6

// tile_rows returns the rows of the next tile when left output rows
// remain: KK2_PR, but two near-equal tiles for the last 7 to 11 rows, since
// a tile of one or two rows has too few accumulators to hide the FMA
// latency (7 rows, a GQA group, run as 4 + 3 rather than 6 + 1). Any
// split gives the same bits: each output is its own chain of FMAs over k
// in order.
KK_INLINE int tile_rows(long left) {
	if (left <= KK2_PR) return (int)left;
	if (left < 2 * KK2_PR) return (int)(left + 1) / 2;
	return KK2_PR;
}

// load16 and store16 move values [j, j+16) of a row: unmasked when full
// (the whole 16 are in the row), else under the masks m0, m1.
#define KK2_LOAD(full, p, m) ((full) ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m))
#define KK2_STORE(full, p, m, a)                    \
	do {                                        \
		if (full)                           \
			_mm256_storeu_ps(p, a);     \
		else                                \
			_mm256_maskstore_ps(p, m, a); \
	} while (0)

// mix_tile adds p's weights times the n value rows to mr <= KK2_PR output
// rows, values [j, j+16) of each (masks m0, m1 for the two vectors, unless
// full): row r's weight for value row k is p[r*rs + k*ks]. The sums start
// from base's values [j, j+16) in every row when base is not NULL, else
// from o's.
KK_INLINE void mix_tile(const int mr, const int full, float *o, long d, const float *p, long rs, long ks,
			const float *v, long n, long j, __m256i m0, __m256i m1, const float *base) {
	__m256 a0[KK2_PR], a1[KK2_PR];
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++) {
		const float *b = base ? base : o + r * d;
		a0[r] = KK2_LOAD(full, b + j, m0);
		a1[r] = KK2_LOAD(full, b + j + 8, m1);
	}
	for (long k = 0; k < n; k++) {
		__m256 v0 = KK2_LOAD(full, v + k * d + j, m0), v1 = KK2_LOAD(full, v + k * d + j + 8, m1);
#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m256 b = _mm256_broadcast_ss(p + r * rs + k * ks);
			a0[r] = _mm256_fmadd_ps(b, v0, a0[r]);
			a1[r] = _mm256_fmadd_ps(b, v1, a1[r]);
		}
	}
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++) {
		KK2_STORE(full, o + r * d + j, m0, a0[r]);
		KK2_STORE(full, o + r * d + j + 8, m1, a1[r]);
	}
}

// mix runs the tiles of kk2_mix and kk2_mixt: output row i's weight for
// value row k is p[i*rs + k*ks].
KK_INLINE void mix(float *o, long m, long d, const float *p, long rs, long ks, const float *v, long n,
		   const float *base) {
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	for (long j = 0; j < d; j += 16) {
		__m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(d - j)), lane);
		__m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(d - j - 8)), lane);
		for (long i0 = 0, mr; i0 < m; i0 += mr) {
			mr = tile_rows(m - i0);
			float *oi = o + i0 * d;
			const float *pi = p + i0 * rs;
			if (d - j >= 16) {
				switch (mr) {
				case 6: mix_tile(6, 1, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 5: mix_tile(5, 1, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 4: mix_tile(4, 1, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 3: mix_tile(3, 1, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 2: mix_tile(2, 1, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				default: mix_tile(1, 1, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				}
			} else {
				switch (mr) {
				case 6: mix_tile(6, 0, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 5: mix_tile(5, 0, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 4: mix_tile(4, 0, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 3: mix_tile(3, 0, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				case 2: mix_tile(2, 0, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				default: mix_tile(1, 0, oi, d, pi, rs, ks, v, n, j, m0, m1, base); break;
				}
			}
		}
	}
}

// kk2_mix adds Σ_k p[i*ldp + k]·v[k*d:] to o[i*d:] for the m output rows
// and n value rows of d values, k in order.
void kk2_mix(float *o, long m, long d, const float *p, long ldp, const float *v, long n) {
	mix(o, m, d, p, ldp, 1, v, n, NULL);
}

// kk2_mixt sets o[i*d:] to base (o[i*d:] when base is NULL) plus Σ_k
// p[k*ldp + i]·v[k*d:]: kk2_mix with the weights transposed, the same
// instructions in the same order.
void kk2_mixt(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base) {
	mix(o, m, d, p, 1, ldp, v, n, base);
}

// kk2_mixt_rope is kk2_mixt followed by RoPE on each output row as
// ropeCopy does (values c and c + d/2 of row i rotated by cos and sin
// [i*d/2, (i+1)*d/2)), d/2 a multiple of 8: the rows are rotated while
// they are still in cache, in the one call.
void kk2_mixt_rope(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base,
		   const float *cos, const float *sin) {
	mix(o, m, d, p, 1, ldp, v, n, base);
	const long h = d / 2;
	for (long i = 0; i < m; i++) {
		float *x1 = o + i * d, *x2 = x1 + h;
		const float *c = cos + i * h, *s = sin + i * h;
		for (long k = 0; k < h; k += 8) {
			__m256 a = _mm256_loadu_ps(x1 + k), b = _mm256_loadu_ps(x2 + k);
			__m256 co = _mm256_loadu_ps(c + k), si = _mm256_loadu_ps(s + k);
			_mm256_storeu_ps(x1 + k, _mm256_sub_ps(_mm256_mul_ps(a, co), _mm256_mul_ps(b, si)));
			_mm256_storeu_ps(x2 + k, _mm256_add_ps(_mm256_mul_ps(b, co), _mm256_mul_ps(a, si)));
		}
	}
}

// Code planes (avx512_amd64.c's kk_unpack_planes, eight codes at a time):
// eight w-bit codes are w bytes, loaded as 8 (copied near the end of the
// codes) and broadcast to both 128-bit lanes; a byte shuffle gives lane k
// the two bytes holding code k, a variable shift and a mask leave the code.
// Levels are picked by VPERMPS from the eight registers of the plane's
// scaled levels, the register chosen by a tree of blends on the code's
// bits 3, 4 and 5.

// codes8 returns the eight codes at p, of which avail bytes may be read.
KK_INLINE __m256i codes8(const uint8_t *p, long avail, __m256i ctl, __m256i shift, __m256i mask) {
	uint64_t u = 0;
	if (avail >= 8) {
		__builtin_memcpy(&u, p, 8);
	} else {
		__builtin_memcpy(&u, p, (size_t)avail);
	}
	__m256i x = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)u), ctl);
	return _mm256_and_si256(_mm256_srlv_epi32(x, shift), mask);
}

// pick returns the levels of the codes idx from the 2^w levels in t[0..7],
// eight per register.
KK_INLINE __m256 pick(const int w, __m256i idx, const __m256 t[8]) {
	if (w <= 3) return _mm256_permutevar8x32_ps(t[0], idx);
	__m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));
	__m256 l01 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[0], idx), _mm256_permutevar8x32_ps(t[1], idx), b3);
	if (w == 4) return l01;
	__m256 b4 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 27));
	__m256 l23 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[2], idx), _mm256_permutevar8x32_ps(t[3], idx), b3);
	__m256 l03 = _mm256_blendv_ps(l01, l23, b4);
	if (w == 5) return l03;
	__m256 l45 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[4], idx), _mm256_permutevar8x32_ps(t[5], idx), b3);
	__m256 l67 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[6], idx), _mm256_permutevar8x32_ps(t[7], idx), b3);
	__m256 l47 = _mm256_blendv_ps(l45, l67, b4);
	return _mm256_blendv_ps(l03, l47, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 26)));
}

// unpack_plane decodes one plane of n codes of width w (a constant, so
// pick's tree is unrolled for it).
KK_INLINE void unpack_plane(const int w, float *out, long n, const uint8_t *p, const uint8_t *end, __m256 s,
			    const float *lv) {
	__m256 t[8];
	const int regs = w <= 3 ? 1 : 1 << (w - 3);
	for (int r = 0; r < regs; r++) t[r] = _mm256_mul_ps(_mm256_loadu_ps(lv + 8 * r), s);
	const __m256i kw = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(w));
	const __m256i b = _mm256_srli_epi32(kw, 3);
	// Bytes b and b+1, then two zeros (shuffle indices with bit 7 set).
	const __m256i ctl = _mm256_add_epi32(_mm256_or_si256(b, _mm256_slli_epi32(b, 8)), _mm256_set1_epi32((int)0x80800100));
	const __m256i shift = _mm256_and_si256(kw, _mm256_set1_epi32(7));
	const __m256i mask = _mm256_set1_epi32((1 << w) - 1);
	long i = 0;
	for (; i + 8 <= n; i += 8, p += w) _mm256_storeu_ps(out + i, pick(w, codes8(p, end - p, ctl, shift, mask), t));
	if (i < n) {
		float y[8];
		_mm256_storeu_ps(y, pick(w, codes8(p, end - p, ctl, shift, mask), t));
		for (long k = 0; i + k < n; k++) out[i + k] = y[k];
	}
}

// kk2_unpack_planes is kk_unpack_planes: dst[t*ldd + i] = levels[w*64 + c] *
// scales[t] for code c, the i-th of plane t's n codes of width w =
// widths[t] (1..6), for the c planes laid end to end in src (len bytes).
void kk2_unpack_planes(float *dst, long ldd, long n, const uint8_t *src, long len, const uint8_t *widths, long c,
		       const float *scales, const float *levels) {
	const uint8_t *end = src + len;
	for (long t = 0; t < c; t++) {
		int w = widths[t];
		__m256 s = _mm256_set1_ps(scales[t]);
		const float *lv = levels + w * 64;
		float *out = dst + t * ldd;
		switch (w) {
		case 1: unpack_plane(1, out, n, src, end, s, lv); break;
		case 2: unpack_plane(2, out, n, src, end, s, lv); break;
		case 3: unpack_plane(3, out, n, src, end, s, lv); break;
		case 4: unpack_plane(4, out, n, src, end, s, lv); break;
		case 5: unpack_plane(5, out, n, src, end, s, lv); break;
		default: unpack_plane(6, out, n, src, end, s, lv); break;
		}
		src += (n * w + 7) / 8;
	}
}

// kk2_transpose sets dst[i*ldd + t] = src[t*lds + i] for the rows t < rows
// and columns i < cols of src: 8x8 blocks through registers
// (transpose8x8), the ragged edges one value at a time.
void kk2_transpose(float *dst, long ldd, const float *src, long lds, long rows, long cols) {
	long r8 = rows & ~7L, c8 = cols & ~7L;
	for (long t0 = 0; t0 < r8; t0 += 8) {
		for (long i0 = 0; i0 < c8; i0 += 8) {
			__m256i r[8];
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_si256((const __m256i *)(src + (t0 + k) * lds + i0));
			transpose8x8(r);
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(dst + (i0 + k) * ldd + t0), r[k]);
		}
		for (long i = c8; i < cols; i++)
			for (long t = t0; t < t0 + 8; t++) dst[i * ldd + t] = src[t * lds + i];
	}
	for (long t = r8; t < rows; t++)
		for (long i = 0; i < cols; i++) dst[i * ldd + t] = src[t * lds + i];
}

// Runs of kakeya-pc blocks: avx512_amd64.c's kk_pc_keys, kk_pc_values and
// kk_pc_values_end with AVX2, the same arguments and arithmetic but eight
// lanes (acc's vectors use the first 8 of their 16 floats).

// score_rows2 is kk2_scores with eight keys per reduction (reduce8's tree
// over FMAs from zero in 8-lane chunks, so the same bits) and no work on
// repeated query rows.
KK_INLINE void score_rows2_dv(const int dv, const float *q, long m, const float *keys, long n, float scale, float *s,
			       long lds) {
	const long d = 8 * dv;
	const __m256 sc = _mm256_set1_ps(scale);
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	for (long i = 0; i < m; i++) {
		const float *qi = q + i * d;
		for (long k0 = 0; k0 < n; k0 += 8) {
			long nk = n - k0 < 8 ? n - k0 : 8;
			__m256 acc[8];
#pragma GCC unroll 8
			for (int c = 0; c < 8; c++) {
				const float *kr = keys + (k0 + (c < nk ? c : nk - 1)) * d;
				__m256 a = _mm256_setzero_ps();
#pragma GCC unroll 16
				for (int j = 0; j < dv; j++) a = _mm256_fmadd_ps(_mm256_loadu_ps(qi + 8 * j), _mm256_loadu_ps(kr + 8 * j), a);
				acc[c] = a;
			}
			__m256 y = _mm256_mul_ps(reduce8(acc), sc);
			if (nk == 8) {
				_mm256_storeu_ps(s + i * lds + k0, y);
			} else {
				_mm256_maskstore_ps(s + i * lds + k0, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nk), lane), y);
			}
		}
	}
}

// score_rows2 is kk2_scores with eight keys per reduction (reduce8's tree
// over FMAs from zero in 8-lane chunks, so the same bits) and no work on
// repeated query rows, for d a multiple of 16.
KK_INLINE void score_rows2(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds) {
	switch (d) {
	case 32: score_rows2_dv(4, q, m, keys, n, scale, s, lds); return;
	case 64: score_rows2_dv(8, q, m, keys, n, scale, s, lds); return;
	case 128: score_rows2_dv(16, q, m, keys, n, scale, s, lds); return;
	}
	kk2_scores(q, m, d, keys, n, scale, s, lds);
}

// base_row2 sets base to mu plus Σ_t means[t]·rows[t*d:] for the mc rows
// of d values (a multiple of 16), each value one chain of FMAs over t in
// order from mu: kk2_mix's arithmetic for one output row, with up to 64
// values' chains in flight at once where kk2_mix's one-row tile has 16.
KK_INLINE void base_row2_nv(const int nv, float *base, const float *mu, const float *means, long mc, const float *rows,
			    long d) {
	__m256 a[8];
#pragma GCC unroll 8
	for (int v = 0; v < nv; v++) a[v] = _mm256_loadu_ps(mu + 8 * v);
	for (long t = 0; t < mc; t++) {
		__m256 b = _mm256_broadcast_ss(means + t);
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) a[v] = _mm256_fmadd_ps(b, _mm256_loadu_ps(rows + t * d + 8 * v), a[v]);
	}
#pragma GCC unroll 8
	for (int v = 0; v < nv; v++) _mm256_storeu_ps(base + 8 * v, a[v]);
}

KK_INLINE void base_row2(float *base, long d, const float *mu, const float *means, long mc, const float *rows) {
	for (long j = 0; j < d; j += 64) {
		switch (d - j >= 64 ? 8 : (d - j) / 8) {
		case 8: base_row2_nv(8, base + j, mu + j, means, mc, rows + j, d); break;
		case 6: base_row2_nv(6, base + j, mu + j, means, mc, rows + j, d); break;
		case 4: base_row2_nv(4, base + j, mu + j, means, mc, rows + j, d); break;
		default: base_row2_nv(2, base + j, mu + j, means, mc, rows + j, d); break;
		}
	}
}

// Keys rebuilt from code bytes: a block's codes are first unpacked to one
// byte each (codes_to_bytes, a few instructions per eight codes whatever
// their width), and each component's 2^w levels scaled once into a table
// (level_tables); the rebuild then broadcasts each latent straight from
// its table, by the code byte, where UnpackPlanes's float planes take a
// tree of permutes and blends per eight codes of 4 to 6 bits. A level
// times its scale is the same product either way.

// codes_to_bytes sets out[t*n + i] to code i of plane t, for the c planes
// of n codes laid end to end at src (len bytes).
KK_INLINE void codes_to_bytes(uint8_t *out, long n, const uint8_t *src, long len, const uint8_t *widths, long c) {
	const uint8_t *end = src + len;
	// The low byte of each dword: bytes 0, 4, 8, 12 of each 128-bit lane.
	const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
					      -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
	const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
	for (long t = 0; t < c; t++) {
		const int w = widths[t];
		const __m256i kw = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(w));
		const __m256i b = _mm256_srli_epi32(kw, 3);
		const __m256i ctl =
			_mm256_add_epi32(_mm256_or_si256(b, _mm256_slli_epi32(b, 8)), _mm256_set1_epi32((int)0x80800100));
		const __m256i shift = _mm256_and_si256(kw, _mm256_set1_epi32(7));
		const __m256i mask = _mm256_set1_epi32((1 << w) - 1);
		const uint8_t *p = src;
		uint8_t *o = out + t * n;
		long i = 0;
		for (; i < n; i += 8, p += w) {
			__m256i x = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(codes8(p, end - p, ctl, shift, mask), pick), join);
			if (i + 8 <= n) {
				_mm_storel_epi64((__m128i *)(o + i), _mm256_castsi256_si128(x));
			} else {
				uint8_t y[8];
				_mm_storel_epi64((__m128i *)y, _mm256_castsi256_si128(x));
				for (long k = 0; i + k < n; k++) o[i + k] = y[k];
			}
		}
		src += (n * w + 7) / 8;
	}
}

// level_tables sets tab[t*64 + k] to levels[w*64 + k]·scales[t] for the 2^w
// levels of each plane t of width w = widths[t].
KK_INLINE void level_tables(float *tab, const uint8_t *widths, long c, const float *scales, const float *levels) {
	for (long t = 0; t < c; t++) {
		const int w = widths[t];
		const __m256 s = _mm256_set1_ps(scales[t]);
		const float *lv = levels + w * 64;
		float *o = tab + t * 64;
		if (w < 3) {
			for (int k = 0; k < 1 << w; k++) o[k] = lv[k] * scales[t];
			continue;
		}
		for (int k = 0; k < 1 << w; k += 8) _mm256_storeu_ps(o + k, _mm256_mul_ps(_mm256_loadu_ps(lv + k), s));
	}
}

// KK2_RT is the most rows (tokens) of a rebuild tile: 6 rows x 16 values
// (8 and their 8 RoPE partners d/2 further) in 12 accumulators, beside
// the two basis vectors and a broadcast latent: 15 of the 16 ymm
// registers (3 rows x 32 values spilled one accumulator).
#define KK2_RT 6

// rebuild_tile sets rows [r0, r0+mr) of rot, values [j, j+8) and [j+h,
// j+h+8): base plus Σ_k lat(k, r)·coded[k*d:], k in order (kk2_mixt's
// chains), rotated by RoPE in registers as kk2_mixt_rope's second pass
// does. lat(k, r) is tab[k*64 + codes[k*n + r]] bycode, else lat[k*n + r].
KK_INLINE void rebuild_tile(const int mr, const int bycode, float *rot, long d, long j, long r0, const uint8_t *codes,
			    const float *tab, const float *lat, long n, const float *coded, long c, const float *base,
			    const float *cos, const float *sin) {
	const long h = d / 2;
	__m256 lo[KK2_RT], hi[KK2_RT];
	const __m256 b0 = _mm256_loadu_ps(base + j), b1 = _mm256_loadu_ps(base + h + j);
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++) lo[r] = b0, hi[r] = b1;
	const uint8_t *cr = codes + r0;
	const float *lr = lat + r0;
	for (long k = 0; k < c; k++, cr += n, lr += n, tab += 64) {
		const float *u = coded + k * d;
		const __m256 u0 = _mm256_loadu_ps(u + j), u1 = _mm256_loadu_ps(u + h + j);
#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m256 b = bycode ? _mm256_broadcast_ss(tab + cr[r]) : _mm256_broadcast_ss(lr + r);
			lo[r] = _mm256_fmadd_ps(b, u0, lo[r]);
			hi[r] = _mm256_fmadd_ps(b, u1, hi[r]);
		}
	}
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++) {
		const __m256 cv = _mm256_loadu_ps(cos + (r0 + r) * h + j), sv = _mm256_loadu_ps(sin + (r0 + r) * h + j);
		float *o = rot + (r0 + r) * d + j;
		_mm256_storeu_ps(o, _mm256_sub_ps(_mm256_mul_ps(lo[r], cv), _mm256_mul_ps(hi[r], sv)));
		_mm256_storeu_ps(o + h, _mm256_add_ps(_mm256_mul_ps(hi[r], cv), _mm256_mul_ps(lo[r], sv)));
	}
}

#define KK2_REBUILD_ROWS(bycode)                                                                                      \
	for (long r0 = 0; r0 < n; r0 += KK2_RT) {                                                                      \
		switch (n - r0 < KK2_RT ? n - r0 : KK2_RT) {                                                           \
		case 6: rebuild_tile(6, bycode, rot, d, j, r0, codes, tab, lat, n, coded, c, base, cos, sin); break; \
		case 5: rebuild_tile(5, bycode, rot, d, j, r0, codes, tab, lat, n, coded, c, base, cos, sin); break; \
		case 4: rebuild_tile(4, bycode, rot, d, j, r0, codes, tab, lat, n, coded, c, base, cos, sin); break; \
		case 3: rebuild_tile(3, bycode, rot, d, j, r0, codes, tab, lat, n, coded, c, base, cos, sin); break; \
		case 2: rebuild_tile(2, bycode, rot, d, j, r0, codes, tab, lat, n, coded, c, base, cos, sin); break; \
		default: rebuild_tile(1, bycode, rot, d, j, r0, codes, tab, lat, n, coded, c, base, cos, sin); break; \
		}                                                                                                      \
	}

// rebuild_rope sets the n rows of rot to the block's keys rebuilt and
// rotated, kk2_mixt_rope's bits, for d a multiple of 16: from code bytes
// and level tables where codes is not NULL, else from the latents lat.
KK_INLINE void rebuild_rope(float *rot, long n, long d, const uint8_t *codes, const float *tab, const float *lat,
			    const float *coded, long c, const float *base, const float *cos, const float *sin) {
	for (long j = 0; j < d / 2; j += 8) {
		if (codes) {
			KK2_REBUILD_ROWS(1)
		} else {
			KK2_REBUILD_ROWS(0)
		}
	}
}

// pc_prefetch asks for the cache lines of block j's share (of nb) of the
// npf blocks in pf, (address, length) pairs: the blocks a run reads next,
// whose misses then overlap this block's arithmetic rather than stall the
// next call. A prefetch does not fault: any address is harmless.
KK_INLINE void pc_prefetch2(const uint64_t *pf, long npf, long j, long nb) {
	for (long k = j * npf / nb; k < (j + 1) * npf / nb; k++) {
		const uintptr_t a = (uintptr_t)pf[2 * k], e = a + (uintptr_t)pf[2 * k + 1];
		for (uintptr_t p = a & ~(uintptr_t)63; p < e; p += 64) _mm_prefetch((const char *)p, _MM_HINT_T0);
	}
}

// kk2_pc_keys is avx512_amd64.c's kk_pc_keys with AVX2 (d a multiple of
// 16), the keys rebuilt from code bytes and level tables (or format 9's
// latents) with RoPE in registers (rebuild_rope): kk2_unpack_planes and
// kk2_mixt_rope's bits. work holds d + n*d + c*n + 64*c floats; the npf
// blocks of pf are prefetched as it goes (pc_prefetch2).
void kk2_pc_keys(long nb, long n, long d, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths,
		 long c, const float *levels, const float *fields, long mc, const float *mu, const float *mean_rows,
		 const float *coded, const float *q, long m, float scale, const float *cos, const float *sin, float *s,
		 long lds, long r0, long r1, float *work, const uint64_t *pf, long npf) {
	const long h = d / 2;
	float *base = work, *rot = work + d, *lt = rot + n * d, *tab = lt + c * n;
	uint8_t *codes = (uint8_t *)lt;
	for (long j = 0; j < nb; j++) {
		pc_prefetch2(pf, npf, j, nb);
		const float *means = fields + j * (mc + c), *scales = means + mc;
		base_row2(base, d, mu, means, mc, mean_rows);
		const float *cj = cos + j * n * h, *sj = sin + j * n * h;
		if (planes) {
			codes_to_bytes(codes, n, planes + j * pbytes, pbytes, widths, c);
			level_tables(tab, widths, c, scales, levels);
			rebuild_rope(rot, n, d, codes, tab, NULL, coded, c, base, cj, sj);
		} else {
			rebuild_rope(rot, n, d, NULL, NULL, lat + j * c * n, coded, c, base, cj, sj);
		}
		long lo = j == 0 ? r0 : 0, hi = j == nb - 1 ? r1 : n;
		score_rows2(q, m, d, rot + lo * d, hi - lo, scale, s + j * n + lo, lds);
	}
}

// hsum8 returns the sum of a's lanes.
KK_INLINE float hsum8(__m256 a) {
	__m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	x = _mm_add_ps(x, _mm_movehl_ps(x, x));
	x = _mm_add_ss(x, _mm_movehdup_ps(x));
	return _mm_cvtss_f32(x);
}

// pc_values_rows2 is kk2_pc_values's sums for one block of nv <= 8
// vectors of rows, two components at a time so their FMA chains overlap.
KK_INLINE void pc_values_rows2(const int nv, long m, const float *w, long ldw, const __m256i rm[8], const __m256i lm[8],
			       const float *l, long n, long c, const float *means, long mc, float *acc, float *macc,
			       float *wsum) {
	for (long i = 0; i < m; i++) {
		const float *wi = w + i * ldw;
		__m256 wv[8], tot = _mm256_setzero_ps();
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) {
			wv[v] = _mm256_maskload_ps(wi + 8 * v, rm[v]);
			tot = _mm256_add_ps(tot, wv[v]);
		}
		float wt = hsum8(tot);
		wsum[i] += wt;
		for (long t = 0; t < mc; t++) macc[i * mc + t] += wt * means[t];
		float *ai = acc + i * c * 16;
		long t = 0;
		for (; t + 2 <= c; t += 2) {
			__m256 a0 = _mm256_loadu_ps(ai + 16 * t), a1 = _mm256_loadu_ps(ai + 16 * (t + 1));
#pragma GCC unroll 8
			for (int v = 0; v < nv; v++) {
				a0 = _mm256_fmadd_ps(wv[v], _mm256_maskload_ps(l + t * n + 8 * v, lm[v]), a0);
				a1 = _mm256_fmadd_ps(wv[v], _mm256_maskload_ps(l + (t + 1) * n + 8 * v, lm[v]), a1);
			}
			_mm256_storeu_ps(ai + 16 * t, a0);
			_mm256_storeu_ps(ai + 16 * (t + 1), a1);
		}
		for (; t < c; t++) {
			__m256 a = _mm256_loadu_ps(ai + 16 * t);
#pragma GCC unroll 8
			for (int v = 0; v < nv; v++) a = _mm256_fmadd_ps(wv[v], _mm256_maskload_ps(l + t * n + 8 * v, lm[v]), a);
			_mm256_storeu_ps(ai + 16 * t, a);
		}
	}
}

void kk2_pc_values(long nb, long n, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths, long c,
		   const float *levels, const float *fields, long mc, const float *w, long ldw, long m, long r0, long r1,
		   float *acc, float *macc, float *wsum, float *work, const uint64_t *pf, long npf) {
	const long nv = (n + 7) / 8;
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	for (long j = 0; j < nb; j++) {
		pc_prefetch2(pf, npf, j, nb);
		const float *means = fields + j * (mc + c), *scales = means + mc;
		const float *l = work;
		if (planes) {
			kk2_unpack_planes(work, n, n, planes + j * pbytes, pbytes, widths, c, scales, levels);
		} else {
			l = lat + j * c * n;
		}
		long lo = j == 0 ? r0 : 0, hi = j == nb - 1 ? r1 : n;
		__m256i rm[8], lm[8];
		for (long v = 0; v < 8; v++) {
			__m256i r = _mm256_add_epi32(lane, _mm256_set1_epi32((int)(8 * v)));
			rm[v] = _mm256_and_si256(_mm256_cmpgt_epi32(r, _mm256_set1_epi32((int)lo - 1)),
						 _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), r));
			lm[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), r);
		}
		switch (nv) {
		case 1: pc_values_rows2(1, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 2: pc_values_rows2(2, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 3: pc_values_rows2(3, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 4: pc_values_rows2(4, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 5: pc_values_rows2(5, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 6: pc_values_rows2(6, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 7: pc_values_rows2(7, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		default: pc_values_rows2(8, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		}
	}
}

// pc_end_nv adds to o's values [j, j+8*nv) (o at value j) Σ_t hs[t]·coded
// rows, Σ_t mw[t]·mean rows and ws·mu (each at value j, rows d apart),
// each value one chain of FMAs in that order: up to 64 values' chains in
// flight, where one 8-value chain at a time waited on its own latency.
KK_INLINE void pc_end_nv(const int nv, float *o, long d, const float *hs, long c, const float *coded, const float *mw,
			 long mc, const float *mean_rows, float ws, const float *mu) {
	__m256 x[8];
#pragma GCC unroll 8
	for (int v = 0; v < nv; v++) x[v] = _mm256_loadu_ps(o + 8 * v);
	for (long t = 0; t < c; t++) {
		__m256 b = _mm256_broadcast_ss(hs + t);
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) x[v] = _mm256_fmadd_ps(b, _mm256_loadu_ps(coded + t * d + 8 * v), x[v]);
	}
	for (long t = 0; t < mc; t++) {
		__m256 b = _mm256_broadcast_ss(mw + t);
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) x[v] = _mm256_fmadd_ps(b, _mm256_loadu_ps(mean_rows + t * d + 8 * v), x[v]);
	}
	__m256 b = _mm256_set1_ps(ws);
#pragma GCC unroll 8
	for (int v = 0; v < nv; v++) _mm256_storeu_ps(o + 8 * v, _mm256_fmadd_ps(b, _mm256_loadu_ps(mu + 8 * v), x[v]));
}

// kk2_pc_values_end is kk_pc_values_end with AVX2, d a multiple of 16:
// each output value gets its component sums' products with the coded
// rows, then the means', then the total weight's with mu, one FMA each in
// that order; each component's sum is its 8 lanes' (hsum8) once per row.
void kk2_pc_values_end(float *o, long m, long d, const float *acc, long c, const float *coded, const float *macc,
		       long mc, const float *mean_rows, const float *wsum, const float *mu) {
	float hs[c > 0 ? c : 1];
	for (long i = 0; i < m; i++) {
		const float *ai = acc + i * c * 16;
		for (long t = 0; t < c; t++) hs[t] = hsum8(_mm256_loadu_ps(ai + 16 * t));
		for (long j = 0; j < d; j += 64) {
			float *oi = o + i * d + j;
			const float *mw = macc + i * mc, *mr = mc > 0 ? mean_rows + j : mean_rows;
			switch (d - j >= 64 ? 8 : (d - j) / 8) {
			case 8: pc_end_nv(8, oi, d, hs, c, coded + j, mw, mc, mr, wsum[i], mu + j); break;
			case 6: pc_end_nv(6, oi, d, hs, c, coded + j, mw, mc, mr, wsum[i], mu + j); break;
			case 4: pc_end_nv(4, oi, d, hs, c, coded + j, mw, mc, mr, wsum[i], mu + j); break;
			default: pc_end_nv(2, oi, d, hs, c, coded + j, mw, mc, mr, wsum[i], mu + j); break;
			}
		}
	}
}
