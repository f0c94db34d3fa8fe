//go:build cgo

// Matrix products of bf16 and f16 weights with NEON (every arm64 CPU has
// it), as C with arm_neon.h intrinsics: the register tile of the AVX2
// kernels (avx2_amd64.c), 6 tokens x 16 rows in 24 of NEON's 32 vector
// registers, on the same 32-row column panels (kk_pack_columns below).
// bf16 weights widen by a shift (a bf16 is the high half of an f32), f16
// by FCVTL. Activations are f32 and every product is one FMA in column
// order: exact f32 arithmetic on the weights as stored.
//
// Each output is one lane of one tile, summed by the same instructions
// whatever the tile's token count, so a token's results do not depend on
// how many tokens share the call (a decode step's GEMV is the tile of one
// token), nor on the split of work across threads.

#include <stdint.h>
#include <arm_neon.h>

#define KK_INLINE static inline __attribute__((always_inline))

// A product and a sum written apart stay apart; the FMAs below are asked
// for explicitly.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

// KKN_PANEL is the rows of a panel and KKN_ROWS those of a GEMM tile
// (four q registers of f32 outputs), half a panel; KKN_MR is the tokens of
// a tile. A GEMV (one token) covers a whole panel: eight FMA chains over
// one contiguous stream of weights.
#define KKN_PANEL 32
#define KKN_ROWS 16
#define KKN_MR 6

// kk_pack_columns packs panels [p0, p1) of the rows x cols matrix of 16-bit
// values w into dst, panel p at dst + p*width*cols: value c*width + j of a
// panel is row j's column c; rows past the matrix are zeros. A block of
// columns is copied for every row before the next, so the panel lines it
// writes stay in L1.
void kk_pack_columns(const uint16_t *w, long rows, long cols, long width, long p0, long p1, uint16_t *dst) {
	const long block = 64;
	for (long p = p0; p < p1; p++) {
		uint16_t *panel = dst + p * width * cols;
		for (long c0 = 0; c0 < cols; c0 += block) {
			long c1 = c0 + block < cols ? c0 + block : cols;
			for (long j = 0; j < width; j++) {
				long r = p * width + j;
				uint16_t *d = panel + j;
				if (r >= rows) {
					for (long c = c0; c < c1; c++) d[c * width] = 0;
					continue;
				}
				const uint16_t *row = w + r * cols;
				for (long c = c0; c < c1; c++) d[c * width] = row[c];
			}
		}
	}
}

#define KKN_SWITCH(TILE, mr, ...)               \
	switch (mr) {                           \
	case 6: TILE(6, __VA_ARGS__); break;    \
	case 5: TILE(5, __VA_ARGS__); break;    \
	case 4: TILE(4, __VA_ARGS__); break;    \
	case 3: TILE(3, __VA_ARGS__); break;    \
	case 2: TILE(2, __VA_ARGS__); break;    \
	default: TILE(1, __VA_ARGS__); break;   \
	}

// store writes the first nr (<= 4*nv) values of the nv vectors a.
KK_INLINE void store(float *out, int nr, const float32x4_t *a, int nv) {
	if (nr >= 4 * nv) {
		for (int k = 0; k < nv; k++) vst1q_f32(out + 4 * k, a[k]);
		return;
	}
	float t[4 * 8];
	for (int k = 0; k < nv; k++) vst1q_f32(t + 4 * k, a[k]);
	for (int j = 0; j < nr; j++) out[j] = t[j];
}

// widen_bf16 widens the 16 bf16 values at p (one column of a panel).
KK_INLINE void widen_bf16(const uint16_t *p, float32x4_t w[4]) {
	uint16x8_t lo = vld1q_u16(p), hi = vld1q_u16(p + 8);
	w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(lo), 16));
	w[1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(lo), 16));
	w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hi), 16));
	w[3] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(hi), 16));
}

// widen_f16 widens the 16 IEEE halves at p.
KK_INLINE void widen_f16(const uint16_t *p, float32x4_t w[4]) {
	float16x8_t lo = vreinterpretq_f16_u16(vld1q_u16(p)), hi = vreinterpretq_f16_u16(vld1q_u16(p + 8));
	w[0] = vcvt_f32_f16(vget_low_f16(lo));
	w[1] = vcvt_high_f32_f16(lo);
	w[2] = vcvt_f32_f16(vget_low_f16(hi));
	w[3] = vcvt_high_f32_f16(hi);
}

// TILE sets out[i*ldo + j] for mr tokens and the nr rows of a tile from
// panel (the tile's first row of each column, columns KKN_PANEL values
// apart): the dot products of the weights, widened by WIDEN, with the
// tokens' f32 activations x (row stride ldx), adding the products in
// column order.
#define KKN_TILE(name, WIDEN)                                                                            \
	KK_INLINE void name(const int mr, const uint16_t *restrict panel, const float *restrict x, long ldx, \
			    long cols, float *restrict out, long ldo, int nr) {                           \
		float32x4_t a[KKN_MR][4];                                                                \
		for (int i = 0; i < mr; i++)                                                             \
			for (int k = 0; k < 4; k++) a[i][k] = vdupq_n_f32(0);                            \
		for (long c = 0; c < cols; c++) {                                                        \
			float32x4_t w[4];                                                                \
			WIDEN(panel + c * KKN_PANEL, w);                                                 \
			for (int i = 0; i < mr; i++) {                                                   \
				float32x4_t b = vdupq_n_f32(x[i * ldx + c]);                             \
				for (int k = 0; k < 4; k++) a[i][k] = vfmaq_f32(a[i][k], w[k], b);       \
			}                                                                                \
		}                                                                                        \
		for (int i = 0; i < mr; i++) store(out + i * ldo, nr, a[i], 4);                          \
	}

// GEMV sets one token's outputs for the nr rows of a whole panel, each
// summed as a tile of one token sums it (the same FMAs in the same order),
// eight chains at once.
#define KKN_GEMV(name, WIDEN)                                                                            \
	KK_INLINE void name(const uint16_t *restrict panel, const float *restrict x, long cols,              \
			    float *restrict out, int nr) {                                                 \
		float32x4_t a[8];                                                                        \
		for (int k = 0; k < 8; k++) a[k] = vdupq_n_f32(0);                                       \
		for (long c = 0; c < cols; c++) {                                                        \
			float32x4_t w[8];                                                                \
			WIDEN(panel + c * KKN_PANEL, w);                                                 \
			WIDEN(panel + c * KKN_PANEL + KKN_ROWS, w + 4);                                  \
			float32x4_t b = vdupq_n_f32(x[c]);                                               \
			for (int k = 0; k < 8; k++) a[k] = vfmaq_f32(a[k], w[k], b);                     \
		}                                                                                        \
		store(out, nr, a, 8);                                                                    \
	}

KKN_TILE(tile_bf16, widen_bf16)
KKN_TILE(tile_f16, widen_f16)
KKN_GEMV(gemv_bf16, widen_bf16)
KKN_GEMV(gemv_f16, widen_f16)

// KKN_GEMM defines a GEMM over panels [p0, p1): out[t*ldo + r] = Σ_c
// x[t][c]·w[r][c] for the n tokens (f32 rows of stride cols); one token by
// GEMV, more by tiles of KKN_MR tokens and half a panel.
#define KKN_GEMM(name, TILE, GEMV)                                                                       \
	void name(const uint16_t *panels, long rows, long cols, long p0, long p1, const float *x, long n,     \
		  float *out, long ldo) {                                                                \
		for (long p = p0; p < p1; p++) {                                                         \
			const uint16_t *panel = panels + p * KKN_PANEL * cols;                           \
			long r0 = p * KKN_PANEL;                                                         \
			int nr = rows - r0 < KKN_PANEL ? (int)(rows - r0) : KKN_PANEL;                   \
			if (n == 1) {                                                                    \
				GEMV(panel, x, cols, out + r0, nr);                                      \
				continue;                                                                \
			}                                                                                \
			for (int h = 0; h < nr; h += KKN_ROWS) {                                         \
				int hr = nr - h < KKN_ROWS ? nr - h : KKN_ROWS;                          \
				for (long t = 0; t < n; t += KKN_MR) {                                   \
					int mr = n - t < KKN_MR ? (int)(n - t) : KKN_MR;                 \
					KKN_SWITCH(TILE, mr, panel + h, x + t * cols, cols, cols,        \
						   out + t * ldo + r0 + h, ldo, hr)                      \
				}                                                                        \
			}                                                                                \
		}                                                                                        \
	}

KKN_GEMM(kkn_gemm_bf16, tile_bf16, gemv_bf16)
KKN_GEMM(kkn_gemm_f16, tile_f16, gemv_f16)
