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
	for (int i = 0; i < 8; i += 2) {
		t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
	}
	for (int i = 0; i < 8; i += 4) {
		u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
		u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
		u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
		u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
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

// KK2_PANEL is the rows of a panel: two ymm registers of f32 outputs.
#define KK2_PANEL 16
// KK2_MR is the tokens of a tile: 12 accumulators, two weight vectors and
// a broadcast fit the 16 ymm registers.
#define KK2_MR 6

#define KK2_SWITCH(TILE, mr, ...)               \
	switch (mr) {                           \
	case 6: TILE(6, __VA_ARGS__); break;    \
	case 5: TILE(5, __VA_ARGS__); break;    \
	case 4: TILE(4, __VA_ARGS__); break;    \
	case 3: TILE(3, __VA_ARGS__); break;    \
	case 2: TILE(2, __VA_ARGS__); break;    \
	default: TILE(1, __VA_ARGS__); break;   \
	}

// store16 writes the nr <= 16 values of a0 (rows 0..7) and a1 (8..15).
KK_INLINE void store16(float *out, int nr, __m256 a0, __m256 a1) {
	if (nr == KK2_PANEL) {
		_mm256_storeu_ps(out, a0);
		_mm256_storeu_ps(out + 8, a1);
		return;
	}
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);
	__m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lane);
	_mm256_maskstore_ps(out, m0, a0);
	_mm256_maskstore_ps(out + 8, m1, a1);
}

// tile_bf16 sets out[i*ldo + j] for mr tokens and the panel's nr rows:
// the dot products of the bf16 rows, packed column by column, with the
// tokens' f32 activations x (row stride ldx), adding the products in
// column order. A bf16 is the high half of an f32: zero-extended to 32 bits
// and shifted left 16, eight of them are eight f32s.
KK_INLINE void tile_bf16(const int mr, const uint16_t *restrict panel, const float *restrict x, long ldx, long cols,
			 float *restrict out, long ldo, int nr) {
	__m256 a0[KK2_MR], a1[KK2_MR];
#pragma GCC unroll 6
	for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm256_setzero_ps();
	for (long c = 0; c < cols; c++) {
		const __m128i *p = (const __m128i *)(panel + c * KK2_PANEL);
		__m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p)), 16));
		__m256 w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p + 1)), 16));
#pragma GCC unroll 6
		for (int i = 0; i < mr; i++) {
			__m256 b = _mm256_broadcast_ss(x + i * ldx + c);
			a0[i] = _mm256_fmadd_ps(w0, b, a0[i]);
			a1[i] = _mm256_fmadd_ps(w1, b, a1[i]);
		}
	}
#pragma GCC unroll 6
	for (int i = 0; i < mr; i++) store16(out + i * ldo, nr, a0[i], a1[i]);
}

// tile_f16 is tile_bf16 for f16 rows packed column by column.
KK_INLINE void tile_f16(const int mr, const uint16_t *restrict panel, const float *restrict x, long ldx, long cols,
			float *restrict out, long ldo, int nr) {
	__m256 a0[KK2_MR], a1[KK2_MR];
#pragma GCC unroll 6
	for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm256_setzero_ps();
	for (long c = 0; c < cols; c++) {
		const __m128i *p = (const __m128i *)(panel + c * KK2_PANEL);
		__m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(p));
		__m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
#pragma GCC unroll 6
		for (int i = 0; i < mr; i++) {
			__m256 b = _mm256_broadcast_ss(x + i * ldx + c);
			a0[i] = _mm256_fmadd_ps(w0, b, a0[i]);
			a1[i] = _mm256_fmadd_ps(w1, b, a1[i]);
		}
	}
#pragma GCC unroll 6
	for (int i = 0; i < mr; i++) store16(out + i * ldo, nr, a0[i], a1[i]);
}

// kk2_gemm_bf16 computes out[t*ldo + r] = Σ_c x[t][c]·w[r][c] for the n
// tokens (f32 rows of stride cols) and the rows of panels [p0, p1) of the
// rows x cols bf16 weights packed at panels by kk_pack_columns.
void kk2_gemm_bf16(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out,
		   long ldo) {
	for (long p = p0; p < p1; p++) {
		const uint16_t *panel = panels + p * KK2_PANEL * cols;
		long r0 = p * KK2_PANEL;
		int nr = rows - r0 < KK2_PANEL ? (int)(rows - r0) : KK2_PANEL;
		for (long t = 0; t < n; t += KK2_MR) {
			int mr = n - t < KK2_MR ? (int)(n - t) : KK2_MR;
			KK2_SWITCH(tile_bf16, mr, panel, x + t * cols, cols, cols, out + t * ldo + r0, ldo, nr)
		}
	}
}

// kk2_gemm_f16 is kk2_gemm_bf16 for f16 weights packed by kk_pack_columns.
void kk2_gemm_f16(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out,
		  long ldo) {
	for (long p = p0; p < p1; p++) {
		const uint16_t *panel = panels + p * KK2_PANEL * cols;
		long r0 = p * KK2_PANEL;
		int nr = rows - r0 < KK2_PANEL ? (int)(rows - r0) : KK2_PANEL;
		for (long t = 0; t < n; t += KK2_MR) {
			int mr = n - t < KK2_MR ? (int)(n - t) : KK2_MR;
			KK2_SWITCH(tile_f16, mr, panel, x + t * cols, cols, cols, out + t * ldo + r0, ldo, nr)
		}
	}
}
