//go:build cgo

// Matrix products of bf16 weights with AVX-512, as C with compiler
// intrinsics: Go's assembler lacks VDPBF16PS, and a register-tiled GEMM
// wants all 32 zmm registers and masked stores. The weights come packed in
// 32-row panels of column pairs (kk_pack_pairs, avx2_amd64.c). Two
// families on that layout:
//
//   - f32 (AVX-512F/BW/VL): weights widened in registers, f32 activations,
//     one FMA per product in column order: exact f32 arithmetic.
//   - bf16 (AVX512_BF16): VDPBF16PS multiplies pairs of bf16 values and adds
//     both products to an f32 lane, so the activations are rounded to bf16
//     first, the arithmetic of llama.cpp's BF16 matmul, for twice the
//     products per instruction.
//
// Accumulation is f32 throughout. Each output is one lane of one tile,
// summed over the columns in order by the same instructions whatever the
// tile's token count, so a token's results do not depend on how many
// tokens share the call (a decode step's GEMV is the GEMM's tile of one
// token), nor on the split of work across threads.

#include <stdint.h>
#include <immintrin.h>

#define KK_INLINE static inline __attribute__((always_inline))

int kk_avx2_supported(void);

// A product and a sum written apart stay apart: no fused multiply-add the
// source does not ask for (GCC contracts by default), so the kernels that
// mirror Go code give its bits.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

// kk_avx512_supported reports whether the CPU and OS run the f32 kernels
// (AVX-512 F, BW and VL) and avx2_amd64.c's, which pack their panels.
int kk_avx512_supported(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && kk_avx2_supported();
}

// kk_bf16_supported reports whether they also run the VDPBF16PS kernels.
int kk_bf16_supported(void) { return kk_avx512_supported() && __builtin_cpu_supports("avx512bf16"); }

// Everything below runs only after kk_avx512_supported said yes, and the
// VDPBF16PS kernels only after kk_bf16_supported did.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

// KK_PANEL is the number of weight rows a GEMM panel holds: two zmm
// registers of f32 outputs.
#define KK_PANEL 32
// KK_MR is the number of tokens one micro-tile holds: 2*KK_MR accumulators
// plus the weight registers and a broadcast fit AVX-512's 32 registers.
#define KK_MR 12

// KK_SWITCH calls TILE(mr, ...) with mr a constant 1..KK_MR, so each tile
// size gets its own unrolled register allocation.
#define KK_SWITCH(TILE, mr, ...)                 \
	switch (mr) {                            \
	case 12: TILE(12, __VA_ARGS__); break;   \
	case 11: TILE(11, __VA_ARGS__); break;   \
	case 10: TILE(10, __VA_ARGS__); break;   \
	case 9: TILE(9, __VA_ARGS__); break;     \
	case 8: TILE(8, __VA_ARGS__); break;     \
	case 7: TILE(7, __VA_ARGS__); break;     \
	case 6: TILE(6, __VA_ARGS__); break;     \
	case 5: TILE(5, __VA_ARGS__); break;     \
	case 4: TILE(4, __VA_ARGS__); break;     \
	case 3: TILE(3, __VA_ARGS__); break;     \
	case 2: TILE(2, __VA_ARGS__); break;     \
	default: TILE(1, __VA_ARGS__); break;    \
	}

// panel_masks sets the store masks of a panel of nr <= 32 rows.
KK_INLINE void panel_masks(int nr, __mmask16 *m0, __mmask16 *m1) {
	*m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	*m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
}

// The bf16 kernels.

// kk_pack_x rounds the n rows of x (each cols floats) to bf16, to nearest
// even, into dst, each row padded with zeros to ld values (ld even, >=
// cols).
void kk_pack_x(const float *x, long n, long cols, long ld, uint16_t *dst) {
	for (long t = 0; t < n; t++) {
		const float *xr = x + t * cols;
		uint16_t *h = dst + t * ld;
		long c = 0;
		for (; c + 16 <= cols; c += 16) {
			__m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(xr + c));
			_mm256_storeu_si256((__m256i *)(h + c), (__m256i)b);
		}
		if (c < cols) {
			__mmask16 m = (__mmask16)((1u << (cols - c)) - 1);
			__m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, xr + c));
			_mm256_mask_storeu_epi16(h + c, m, (__m256i)b);
		}
		for (c = cols; c < ld; c++) h[c] = 0;
	}
}

// tile computes mr tokens' outputs for the panel's rows: out[i*ldo + j] for
// j < 32 under masks m0 (rows 0..15) and m1 (16..31), from the tokens' bf16
// activations read as dword pairs (row stride ldq dwords); pairs is the
// panel's depth.
KK_INLINE void tile(const int mr, const uint32_t *restrict panel, const uint32_t *restrict xq, long ldq,
		    long pairs, float *restrict out, long ldo, __mmask16 m0, __mmask16 m1) {
	__m512 a0[KK_MR], a1[KK_MR];
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm512_setzero_ps();
	for (long q = 0; q < pairs; q++) {
		// The panel's lines 8 KB (64 pairs) ahead: a batched decode step's
		// few-token tiles stream the weights from memory, and the hardware
		// prefetcher alone left the FMAs waiting (16 sequences: 316-329
		// tok/s without, 348-381 with; prefill unchanged).
		_mm_prefetch((const char *)(panel + (q + 64) * KK_PANEL), _MM_HINT_T0);
		_mm_prefetch((const char *)(panel + (q + 64) * KK_PANEL + 16), _MM_HINT_T0);
		__m512bh w0 = (__m512bh)_mm512_loadu_si512(panel + q * KK_PANEL);
		__m512bh w1 = (__m512bh)_mm512_loadu_si512(panel + q * KK_PANEL + 16);
#pragma GCC unroll 12
		for (int i = 0; i < mr; i++) {
			__m512bh b = (__m512bh)_mm512_set1_epi32((int)xq[i * ldq + q]);
			a0[i] = _mm512_dpbf16_ps(a0[i], w0, b);
			a1[i] = _mm512_dpbf16_ps(a1[i], w1, b);
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) {
		_mm512_mask_storeu_ps(out + i * ldo, m0, a0[i]);
		_mm512_mask_storeu_ps(out + i * ldo + 16, m1, a1[i]);
	}
}

// kk_gemm_bf16 computes out[t*ldo + r] = Σ_c x[t][c]·w[r][c] for the n
// tokens and the rows of panels [p0, p1) of the rows x cols weights packed
// at panels. x holds kk_pack_x's bf16 rows of stride ld.
void kk_gemm_bf16(const uint32_t *panels, long rows, long cols, long p0, long p1, const uint16_t *x, long ld, long n,
		  float *out, long ldo) {
	long pairs = (cols + 1) / 2, ldq = ld / 2;
	for (long p = p0; p < p1; p++) {
		const uint32_t *panel = panels + p * KK_PANEL * pairs;
		long r0 = p * KK_PANEL;
		int nr = rows - r0 < KK_PANEL ? (int)(rows - r0) : KK_PANEL;
		__mmask16 m0, m1;
		panel_masks(nr, &m0, &m1);
		for (long t = 0; t < n; t += KK_MR) {
			int mr = n - t < KK_MR ? (int)(n - t) : KK_MR;
			KK_SWITCH(tile, mr, panel, (const uint32_t *)x + t * ldq, ldq, pairs, out + t * ldo + r0, ldo, m0, m1)
		}
	}
}

// The exact f32 kernels: bf16 weights widened in registers (a bf16 is the
// high half of an f32), f32 activations, one FMA per product in column
// order, so every output is the plain f32 sum of its products, c = 0 first.

// tile_f32 is tile for f32 activations x (row stride ldx) on the same
// packed panel: each pair's dword holds the even column in its low half and
// the odd one in its high half, widened by a shift and a mask.
KK_INLINE void tile_f32(const int mr, const uint32_t *restrict panel, const float *restrict x, long ldx,
			long cols, float *restrict out, long ldo, __mmask16 m0, __mmask16 m1) {
	__m512 a0[KK_MR], a1[KK_MR];
	const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) a0[i] = a1[i] = _mm512_setzero_ps();
	long pairs = cols / 2;
	for (long q = 0; q < pairs; q++) {
		__m512i p0 = _mm512_loadu_si512(panel + q * KK_PANEL);
		__m512i p1 = _mm512_loadu_si512(panel + q * KK_PANEL + 16);
		__m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(p0, 16));
		__m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(p1, 16));
		__m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(p0, hi));
		__m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(p1, hi));
#pragma GCC unroll 12
		for (int i = 0; i < mr; i++) {
			__m512 b = _mm512_set1_ps(x[i * ldx + 2 * q]);
			a0[i] = _mm512_fmadd_ps(e0, b, a0[i]);
			a1[i] = _mm512_fmadd_ps(e1, b, a1[i]);
			b = _mm512_set1_ps(x[i * ldx + 2 * q + 1]);
			a0[i] = _mm512_fmadd_ps(o0, b, a0[i]);
			a1[i] = _mm512_fmadd_ps(o1, b, a1[i]);
		}
	}
	if (cols & 1) {
		// The last column sits alone in the low half of its pair.
		__m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(panel + pairs * KK_PANEL), 16));
		__m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(panel + pairs * KK_PANEL + 16), 16));
#pragma GCC unroll 12
		for (int i = 0; i < mr; i++) {
			__m512 b = _mm512_set1_ps(x[i * ldx + cols - 1]);
			a0[i] = _mm512_fmadd_ps(e0, b, a0[i]);
			a1[i] = _mm512_fmadd_ps(e1, b, a1[i]);
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < mr; i++) {
		_mm512_mask_storeu_ps(out + i * ldo, m0, a0[i]);
		_mm512_mask_storeu_ps(out + i * ldo + 16, m1, a1[i]);
	}
}

// kk_gemm_f32 is kk_gemm_bf16 with the n tokens' f32 activations x (row
// stride cols) used as they are.
void kk_gemm_f32(const uint32_t *panels, long rows, long cols, long p0, long p1, const float *x, long n, float *out,
		 long ldo) {
	long pairs = (cols + 1) / 2;
	for (long p = p0; p < p1; p++) {
		const uint32_t *panel = panels + p * KK_PANEL * pairs;
		long r0 = p * KK_PANEL;
		int nr = rows - r0 < KK_PANEL ? (int)(rows - r0) : KK_PANEL;
		__mmask16 m0, m1;
		panel_masks(nr, &m0, &m1);
		for (long t = 0; t < n; t += KK_MR) {
			int mr = n - t < KK_MR ? (int)(n - t) : KK_MR;
			KK_SWITCH(tile_f32, mr, panel, x + t * cols, cols, cols, out + t * ldo + r0, ldo, m0, m1)
		}
	}
}

// Attention over a block of cached rows: scores of m query rows against n
// key rows, and the probability-weighted sum of n value rows into m output
// rows. Both are small matrix products (m is a KV group's heads times a few
// query tokens, n a cache block), tiled so each key or value row loaded
// serves several query rows. Every output's arithmetic is the same wherever
// it falls in a tile: a score sums lane-wise FMAs over its row in 16-value
// steps and then its 16 lanes by one fixed tree; an output value adds one
// FMA per row, rows in order.

// KK_QR and KK_KR are the query and key rows of a score tile: 16
// accumulators, one zmm of scores after the reduction.
#define KK_QR 4
#define KK_KR 4

// reduce16 returns the lane sums of a[0..15] as one vector, lane p holding
// a[p]'s sum, every sum by the same tree: lanes 0+2 and 1+3 of each
// 128-bit quarter, their sum, then quarters 0+1 and 2+3, their sum.
KK_INLINE __m512 reduce16(const __m512 a[16]) {
	__m512 t[8], u[4];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
				     _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		__m512d x = _mm512_castps_pd(t[2 * i]), y = _mm512_castps_pd(t[2 * i + 1]);
		u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
				     _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
	}
	__m512 v0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
	__m512 v1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
	return _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x88), _mm512_shuffle_f32x4(v0, v1, 0xdd));
}

// kk_scores sets s[i*lds + k] = scale * (q[i*d:]·keys[k*d:]) for the m
// query rows and n key rows of d values. Tiles past the last row or key
// repeat it and store nothing for it.
void kk_scores(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds) {
	const __m512 sc = _mm512_set1_ps(scale);
	const __mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : 0xffff;
	for (long i0 = 0; i0 < m; i0 += KK_QR) {
		const float *qr[KK_QR];
		for (int r = 0; r < KK_QR; r++) qr[r] = q + (i0 + r < m ? i0 + r : m - 1) * d;
		int mr = m - i0 < KK_QR ? (int)(m - i0) : KK_QR;
		for (long k0 = 0; k0 < n; k0 += KK_KR) {
			const float *kr[KK_KR];
			for (int c = 0; c < KK_KR; c++) kr[c] = keys + (k0 + c < n ? k0 + c : n - 1) * d;
			__m512 acc[KK_QR * KK_KR];
#pragma GCC unroll 16
			for (int i = 0; i < KK_QR * KK_KR; i++) acc[i] = _mm512_setzero_ps();
			for (long j = 0; j < d; j += 16) {
				__mmask16 mk = j + 16 <= d ? 0xffff : tail;
				__m512 qv[KK_QR], kv[KK_KR];
#pragma GCC unroll 4
				for (int r = 0; r < KK_QR; r++) qv[r] = _mm512_maskz_loadu_ps(mk, qr[r] + j);
#pragma GCC unroll 4
				for (int c = 0; c < KK_KR; c++) kv[c] = _mm512_maskz_loadu_ps(mk, kr[c] + j);
#pragma GCC unroll 4
				for (int r = 0; r < KK_QR; r++)
#pragma GCC unroll 4
					for (int c = 0; c < KK_KR; c++)
						acc[r * KK_KR + c] = _mm512_fmadd_ps(qv[r], kv[c], acc[r * KK_KR + c]);
			}
			__m512 sum = _mm512_mul_ps(reduce16(acc), sc);
			__mmask8 keep = n - k0 < KK_KR ? (__mmask8)((1u << (n - k0)) - 1) : 0xf;
			for (int r = 0; r < mr; r++) {
				__m128 row;
				switch (r) {
				case 0: row = _mm512_extractf32x4_ps(sum, 0); break;
				case 1: row = _mm512_extractf32x4_ps(sum, 1); break;
				case 2: row = _mm512_extractf32x4_ps(sum, 2); break;
				default: row = _mm512_extractf32x4_ps(sum, 3); break;
				}
				_mm_mask_storeu_ps(s + (i0 + r) * lds + k0, keep, row);
			}
		}
	}
}

// KK_PR is the output rows of a weighted-sum tile, each up to 64 values
// in nc <= 4 zmm accumulators: 24 of AVX-512's 32 registers at most.
#define KK_PR 6

// mix_tile adds p's weights times the n value rows to mr <= KK_PR output
// rows, values [j, j+16*nc) of each (masks m[c] for the nc vectors): row r's
// weight for value row k is p[r*rs + k*ks]. The sums start from base's
// values [j, j+16*nc) in every row when base is not NULL, else from o's.
KK_INLINE void mix_tile(const int mr, const int nc, float *o, long d, const float *p, long rs, long ks,
			const float *v, long n, long j, const __mmask16 m[4], const float *base) {
	__m512 acc[KK_PR][4];
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
		for (int c = 0; c < nc; c++)
			acc[r][c] = _mm512_maskz_loadu_ps(m[c], (base ? base : o + r * d) + j + 16 * c);
	for (long k = 0; k < n; k++) {
		__m512 vv[4];
#pragma GCC unroll 4
		for (int c = 0; c < nc; c++) vv[c] = _mm512_maskz_loadu_ps(m[c], v + k * d + j + 16 * c);
#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m512 w = _mm512_set1_ps(p[r * rs + k * ks]);
#pragma GCC unroll 4
			for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(w, vv[c], acc[r][c]);
		}
	}
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
		for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(o + r * d + j + 16 * c, m[c], acc[r][c]);
}

// MIX_ROWS calls mix_tile for mr rows (1..KK_PR) and nc vectors, each pair
// of constants its own unrolled register allocation.
#define MIX_ROWS(nc)                                                                 \
	switch (mr) {                                                                \
	case 6: mix_tile(6, nc, oi, d, pi, rs, ks, v, n, j, mk, base); break;        \
	case 5: mix_tile(5, nc, oi, d, pi, rs, ks, v, n, j, mk, base); break;        \
	case 4: mix_tile(4, nc, oi, d, pi, rs, ks, v, n, j, mk, base); break;        \
	case 3: mix_tile(3, nc, oi, d, pi, rs, ks, v, n, j, mk, base); break;        \
	case 2: mix_tile(2, nc, oi, d, pi, rs, ks, v, n, j, mk, base); break;        \
	default: mix_tile(1, nc, oi, d, pi, rs, ks, v, n, j, mk, base); break;       \
	}

// mix runs the tiles of kk_mix and kk_mixt: output row i's weight for
// value row k is p[i*rs + k*ks].
KK_INLINE void mix(float *o, long m, long d, const float *p, long rs, long ks, const float *v, long n,
		   const float *base) {
	for (long j = 0; j < d; j += 64) {
		__mmask16 mk[4];
		for (int c = 0; c < 4; c++) {
			long left = d - j - 16 * c;
			mk[c] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
		}
		long left = d - j;
		int nc = left >= 64 ? 4 : (int)((left + 15) / 16);
		for (long i0 = 0; i0 < m; i0 += KK_PR) {
			float *oi = o + i0 * d;
			const float *pi = p + i0 * rs;
			int mr = m - i0 < KK_PR ? (int)(m - i0) : KK_PR;
			switch (nc) {
			case 4: MIX_ROWS(4) break;
			case 3: MIX_ROWS(3) break;
			case 2: MIX_ROWS(2) break;
			default: MIX_ROWS(1) break;
			}
		}
	}
}

// kk_mix adds sum_k p[i*ldp + k] * v[k*d:] to o[i*d:] for the m output rows
// and n value rows of d values, k in order for every output value.
void kk_mix(float *o, long m, long d, const float *p, long ldp, const float *v, long n) {
	mix(o, m, d, p, ldp, 1, v, n, NULL);
}

// kk_mixt sets o[i*d:] to base (o[i*d:] when base is NULL) plus sum_k
// p[k*ldp + i] * v[k*d:]: kk_mix with the weights transposed, the same
// instructions in the same order.
void kk_mixt(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base) {
	mix(o, m, d, p, 1, ldp, v, n, base);
}

// mixt_rope_tile is kk_mixt for mr whole rows of d = 16*nr values (nr 2, 4
// or 8, mr*nr <= 24 accumulators), each row then rotated by RoPE in its
// registers as ropeCopy does: values c and c + d/2 with cos and sin [r*d/2,
// (r+1)*d/2) of row r.
KK_INLINE void mixt_rope_tile(const int mr, const int nr, float *o, const float *p, long ldp, const float *v, long n,
			      const float *base, const float *cos, const float *sin) {
	const long d = 16 * nr, h = d / 2;
	__m512 acc[6][8];
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
		for (int c = 0; c < nr; c++) acc[r][c] = _mm512_loadu_ps((base ? base : o + r * d) + 16 * c);
	for (long k = 0; k < n; k++) {
#pragma GCC unroll 6
		for (int r = 0; r < mr; r++) {
			__m512 w = _mm512_set1_ps(p[k * ldp + r]);
#pragma GCC unroll 8
			for (int c = 0; c < nr; c++) acc[r][c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + k * d + 16 * c), acc[r][c]);
		}
	}
#pragma GCC unroll 6
	for (int r = 0; r < mr; r++) {
#pragma GCC unroll 4
		for (int c = 0; c < nr / 2; c++) {
			__m512 co = _mm512_loadu_ps(cos + r * h + 16 * c), si = _mm512_loadu_ps(sin + r * h + 16 * c);
			__m512 a = acc[r][c], b = acc[r][c + nr / 2];
			acc[r][c] = _mm512_sub_ps(_mm512_mul_ps(a, co), _mm512_mul_ps(b, si));
			acc[r][c + nr / 2] = _mm512_add_ps(_mm512_mul_ps(b, co), _mm512_mul_ps(a, si));
		}
#pragma GCC unroll 8
		for (int c = 0; c < nr; c++) _mm512_storeu_ps(o + r * d + 16 * c, acc[r][c]);
	}
}

// MIXT_ROPE calls mixt_rope_tile for mr rows (1..rows) and nr vectors.
#define MIXT_ROPE(nr, rows)                                                                              \
	for (long i0 = 0; i0 < m; i0 += rows) {                                                          \
		float *oi = o + i0 * d;                                                                  \
		const float *pi = p + i0, *ci = cos + i0 * (d / 2), *si = sin + i0 * (d / 2);             \
		switch (m - i0 < rows ? m - i0 : rows) {                                                 \
		case 6: mixt_rope_tile(6, nr, oi, pi, ldp, v, n, base, ci, si); break;                    \
		case 5: mixt_rope_tile(5, nr, oi, pi, ldp, v, n, base, ci, si); break;                    \
		case 4: mixt_rope_tile(4, nr, oi, pi, ldp, v, n, base, ci, si); break;                    \
		case 3: mixt_rope_tile(3, nr, oi, pi, ldp, v, n, base, ci, si); break;                    \
		case 2: mixt_rope_tile(2, nr, oi, pi, ldp, v, n, base, ci, si); break;                    \
		default: mixt_rope_tile(1, nr, oi, pi, ldp, v, n, base, ci, si); break;                   \
		}                                                                                        \
	}

// kk_mixt_rope is kk_mixt followed by RoPE on each output row, in
// registers, for d = 32, 64 or 128: row i's values c and c + d/2 rotated
// by cos and sin [i*d/2, (i+1)*d/2).
void kk_mixt_rope(float *o, long m, long d, const float *p, long ldp, const float *v, long n, const float *base,
		  const float *cos, const float *sin) {
	switch (d) {
	case 32: MIXT_ROPE(2, 6) break;
	case 64: MIXT_ROPE(4, 6) break;
	default: MIXT_ROPE(8, 3) break;
	}
}

// Code planes: plane t holds n codes of w_t bits, code i at bit i*w_t of
// the plane, least significant bit first, padded to a byte. Sixteen codes
// are 2*w_t bytes: one 16-byte load (masked near the end of the codes)
// broadcast to the four 128-bit lanes, a byte shuffle that gives lane k
// the two bytes holding code k, a variable shift and a mask leave the
// codes as permute indices into the plane's scaled levels (up to 64, four
// registers).

// codes16 returns the sixteen codes of width w at p, of which avail bytes
// may be read: ctl gives dword k bytes k*w/8 and k*w/8 + 1 of the group,
// shift moves code k down by k*w%8.
KK_INLINE __m512i codes16(const uint8_t *p, long avail, __m512i ctl, __m512i shift, __m512i mask) {
	__m128i b = avail >= 16 ? _mm_loadu_si128((const __m128i *)p)
				: _mm_maskz_loadu_epi8((__mmask16)((1u << avail) - 1), p);
	__m512i x = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(b), ctl);
	return _mm512_and_si512(_mm512_srlv_epi32(x, shift), mask);
}

// kk_unpack_planes sets dst[t*ldd + i] = levels[w*64 + c] * scales[t] for
// code c, the i-th of plane t's n codes of width w = widths[t] (1..6), for
// the c planes laid end to end in src (len bytes).
void kk_unpack_planes(float *dst, long ldd, long n, const uint8_t *src, long len, const uint8_t *widths, long c,
		      const float *scales, const float *levels) {
	const uint8_t *end = src + len;
	const __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);
	for (long t = 0; t < c; t++) {
		int w = widths[t];
		const __m512 s = _mm512_set1_ps(scales[t]);
		const float *lv = levels + w * 64;
		__m512 t0 = _mm512_mul_ps(_mm512_loadu_ps(lv), s), t1 = _mm512_mul_ps(_mm512_loadu_ps(lv + 16), s);
		__m512 t2 = _mm512_mul_ps(_mm512_loadu_ps(lv + 32), s), t3 = _mm512_mul_ps(_mm512_loadu_ps(lv + 48), s);
		const __m512i mask = _mm512_set1_epi32((1 << w) - 1), bit5 = _mm512_set1_epi32(32);
		const __m512i kw = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
						      _mm512_set1_epi32(w));
		const __m512i b = _mm512_srli_epi32(kw, 3);
		// Bytes b and b+1, then two zeros (shuffle indices with bit 7 set).
		const __m512i ctl = _mm512_add_epi32(_mm512_or_si512(b, _mm512_slli_epi32(b, 8)),
						     _mm512_set1_epi32((int)0x80800100));
		const __m512i shift = _mm512_and_si512(kw, _mm512_set1_epi32(7));
		float *out = dst + t * ldd;
		const uint8_t *p = src;
		for (long i = 0; i < n; i += 16, p += 2 * w) {
			__m512i idx = codes16(p, end - p, ctl, shift, mask);
			__m512 y;
			if (w <= 4) {
				y = _mm512_permutexvar_ps(idx, t0);
			} else if (w == 5) {
				y = _mm512_permutex2var_ps(t0, idx, t1);
			} else {
				__m512 lo = _mm512_permutex2var_ps(t0, idx, t1), hi = _mm512_permutex2var_ps(t2, idx, t3);
				y = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, bit5), lo, hi);
			}
			if (i + 16 <= n) {
				_mm512_storeu_ps(out + i, y);
			} else {
				_mm512_mask_storeu_ps(out + i, tail, y);
			}
		}
		src += (n * w + 7) / 8;
	}
}

// The Walsh-Hadamard rows of a kakeya block: each row of 64 held in four
// zmm registers through the six butterfly stages, in the order and with
// the arithmetic of codes_amd64.go's fwhtAxpy64 (stage h adds x[i^h] to
// +-x[i] with one FMA, h = 1, 2, 4, 8 inside a register, 16 and 32
// across), so both give the same bits.

// fwht_stages runs the in-register stages h = 1, 2, 4, 8 on one register,
// each partner x[i^h] brought by an immediate shuffle.
KK_INLINE __m512 fwht_stages(__m512 v, const __m512 sign[4]) {
	v = _mm512_fmadd_ps(v, sign[0], _mm512_permute_ps(v, 0xb1));
	v = _mm512_fmadd_ps(v, sign[1], _mm512_permute_ps(v, 0x4e));
	v = _mm512_fmadd_ps(v, sign[2], _mm512_shuffle_f32x4(v, v, 0xb1));
	return _mm512_fmadd_ps(v, sign[3], _mm512_shuffle_f32x4(v, v, 0x4e));
}

// kk_fwht_rows64 sets out row i (64 values) to signs ⊙ FWHT(v row i) + z +
// sum_c w[i*r + c] * rows[c*64:], then, when cos is not NULL, rotates it by
// RoPE with cos and sin [i*32, i*32+32) as ropeCopy does.
void kk_fwht_rows64(float *out, const float *v, const float *signs, const float *z, const float *w, long r,
		    const float *rows, long n, const float *cos, const float *sin) {
	__m512 sign[4];
	for (int s = 0; s < 4; s++) {
		float si[16];
		for (int i = 0; i < 16; i++) si[i] = (i & (1 << s)) ? -1.0f : 1.0f;
		sign[s] = _mm512_loadu_ps(si);
	}
	__m512 sg[4], zz[4];
	for (int c = 0; c < 4; c++) {
		sg[c] = _mm512_loadu_ps(signs + 16 * c);
		zz[c] = _mm512_loadu_ps(z + 16 * c);
	}
	for (long i = 0; i < n; i++) {
		__m512 x[4];
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			x[c] = fwht_stages(_mm512_loadu_ps(v + i * 64 + 16 * c), sign);
		}
		__m512 t0 = _mm512_add_ps(x[0], x[1]), t1 = _mm512_sub_ps(x[0], x[1]);
		__m512 t2 = _mm512_add_ps(x[2], x[3]), t3 = _mm512_sub_ps(x[2], x[3]);
		x[0] = _mm512_add_ps(t0, t2), x[2] = _mm512_sub_ps(t0, t2);
		x[1] = _mm512_add_ps(t1, t3), x[3] = _mm512_sub_ps(t1, t3);
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) x[c] = _mm512_fmadd_ps(x[c], sg[c], zz[c]);
		for (long c = 0; c < r; c++) {
			__m512 a = _mm512_set1_ps(w[i * r + c]);
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) x[k] = _mm512_fmadd_ps(a, _mm512_loadu_ps(rows + c * 64 + 16 * k), x[k]);
		}
		if (cos) {
			// Values j and j+32 rotate together: x[0], x[1] with x[2], x[3].
#pragma GCC unroll 2
			for (int k = 0; k < 2; k++) {
				__m512 co = _mm512_loadu_ps(cos + i * 32 + 16 * k), si = _mm512_loadu_ps(sin + i * 32 + 16 * k);
				__m512 a = x[k], b = x[k + 2];
				x[k] = _mm512_sub_ps(_mm512_mul_ps(a, co), _mm512_mul_ps(b, si));
				x[k + 2] = _mm512_add_ps(_mm512_mul_ps(b, co), _mm512_mul_ps(a, si));
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) _mm512_storeu_ps(out + i * 64 + 16 * c, x[c]);
	}
}

// Runs of kakeya-pc blocks (codec.KakeyaPC's ScoreRun and AddWeightedRun):
// nb consecutive blocks of one KV head, each n rows of d values, taken in
// one call rather than several per block. Block j's fields are its mc
// stored means then its c scales at fields[j*(mc+c)]; its latents (c x n,
// scale times level, one component per row) come from its code planes,
// pbytes of them at planes + j*pbytes, or, when planes is NULL, are
// lat[j*c*n:]. Block j's rows are [lo, hi): [r0, n) for the first, [0, r1)
// for the last, [0, n) between (r0 and r1 both for a run of one).

// score_rows sets s[i*lds + k] = scale * (q[i*d:]·keys[k*d:]) for the m
// query rows and n key rows, each sum as kk_scores makes it (FMAs over d
// in 16-lane chunks from zero, then reduce16's tree), so the same bits,
// with sixteen keys per reduction rather than kk_scores's four keys of four
// query rows: no work on repeated rows when m is below four.
KK_INLINE void score_rows_dv(const int dv, const float *q, long m, const float *keys, long n, float scale, float *s,
			      long lds) {
	const long d = 16 * dv;
	const __m512 sc = _mm512_set1_ps(scale);
	for (long i = 0; i < m; i++) {
		__m512 qv[8];
#pragma GCC unroll 8
		for (int j = 0; j < dv; j++) qv[j] = _mm512_loadu_ps(q + i * d + 16 * j);
		for (long k0 = 0; k0 < n; k0 += 16) {
			long nk = n - k0 < 16 ? n - k0 : 16;
			__m512 acc[16];
#pragma GCC unroll 16
			for (int c = 0; c < 16; c++) {
				const float *kr = keys + (k0 + (c < nk ? c : nk - 1)) * d;
				__m512 a = _mm512_setzero_ps();
#pragma GCC unroll 8
				for (int j = 0; j < dv; j++) a = _mm512_fmadd_ps(qv[j], _mm512_loadu_ps(kr + 16 * j), a);
				acc[c] = a;
			}
			_mm512_mask_storeu_ps(s + i * lds + k0, (__mmask16)((1u << nk) - 1), _mm512_mul_ps(reduce16(acc), sc));
		}
	}
}

// score_rows is score_rows_dv for d = 32, 64 or 128.
KK_INLINE void score_rows(const float *q, long m, long d, const float *keys, long n, float scale, float *s, long lds) {
	switch (d) {
	case 32: score_rows_dv(2, q, m, keys, n, scale, s, lds); break;
	case 64: score_rows_dv(4, q, m, keys, n, scale, s, lds); break;
	default: score_rows_dv(8, q, m, keys, n, scale, s, lds); break;
	}
}

// pc_prefetch asks for the cache lines of block j's share (of nb) of the
// npf blocks in pf, (address, length) pairs: the blocks a run reads next,
// whose misses then overlap this block's arithmetic rather than stall the
// next call. A prefetch does not fault: any address is harmless.
KK_INLINE void pc_prefetch(const uint64_t *pf, long npf, long j, long nb) {
	for (long k = j * npf / nb; k < (j + 1) * npf / nb; k++) {
		const uintptr_t a = (uintptr_t)pf[2 * k], e = a + (uintptr_t)pf[2 * k + 1];
		for (uintptr_t p = a & ~(uintptr_t)63; p < e; p += 64) _mm_prefetch((const char *)p, _MM_HINT_T0);
	}
}

// kk_pc_keys sets s[i*lds + j*n + r] to scale times query row i's product
// with row r of block j's keys rotated at their positions (cos and sin
// from row 0 of block 0, d/2 per row), for the m query rows of q and each
// block's rows [lo, hi): per block its constant row (mu plus the means
// times mean_rows, as kk_mix sums them), its latents, its rows rebuilt
// and rotated (kk_mixt_rope) and scored (score_rows), the arithmetic of
// those kernels called one by one. work holds d + n*d + c*n floats. d is
// 32, 64 or 128. The npf blocks of pf, (address, length) pairs, are
// prefetched as it goes, block j's share with block j (pc_prefetch).
void kk_pc_keys(long nb, long n, long d, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths,
		long c, const float *levels, const float *fields, long mc, const float *mu, const float *mean_rows,
		const float *coded, const float *q, long m, float scale, const float *cos, const float *sin, float *s,
		long lds, long r0, long r1, float *work, const uint64_t *pf, long npf) {
	const long h = d / 2;
	float *base = work, *rot = work + d, *lt = rot + n * d;
	for (long j = 0; j < nb; j++) {
		pc_prefetch(pf, npf, j, nb);
		const float *means = fields + j * (mc + c), *scales = means + mc;
		for (long i = 0; i < d; i++) base[i] = mu[i];
		if (mc > 0) kk_mix(base, 1, d, means, mc, mean_rows, mc);
		const float *l = lt;
		if (planes) {
			kk_unpack_planes(lt, n, n, planes + j * pbytes, pbytes, widths, c, scales, levels);
		} else {
			l = lat + j * c * n;
		}
		kk_mixt_rope(rot, n, d, l, n, coded, c, base, cos + j * n * h, sin + j * n * h);
		long lo = j == 0 ? r0 : 0, hi = j == nb - 1 ? r1 : n;
		score_rows(q, m, d, rot + lo * d, hi - lo, scale, s + j * n + lo, lds);
	}
}

// pc_values_rows is kk_pc_values's sums for one block of nv <= 4 vectors
// of rows, four components at a time so their FMA chains overlap.
KK_INLINE void pc_values_rows(const int nv, long m, const float *w, long ldw, const __mmask16 rm[4],
			      const __mmask16 lm[4], const float *l, long n, long c, const float *means, long mc,
			      float *acc, float *macc, float *wsum) {
	for (long i = 0; i < m; i++) {
		const float *wi = w + i * ldw;
		__m512 wv[4], tot = _mm512_setzero_ps();
#pragma GCC unroll 4
		for (int v = 0; v < nv; v++) {
			wv[v] = _mm512_maskz_loadu_ps(rm[v], wi + 16 * v);
			tot = _mm512_add_ps(tot, wv[v]);
		}
		float wt = _mm512_reduce_add_ps(tot);
		wsum[i] += wt;
		for (long t = 0; t < mc; t++) macc[i * mc + t] += wt * means[t];
		float *ai = acc + i * c * 16;
		long t = 0;
		for (; t + 4 <= c; t += 4) {
			__m512 a[4];
#pragma GCC unroll 4
			for (int u = 0; u < 4; u++) a[u] = _mm512_loadu_ps(ai + 16 * (t + u));
#pragma GCC unroll 4
			for (int v = 0; v < nv; v++)
#pragma GCC unroll 4
				for (int u = 0; u < 4; u++)
					a[u] = _mm512_fmadd_ps(wv[v], _mm512_maskz_loadu_ps(lm[v], l + (t + u) * n + 16 * v), a[u]);
#pragma GCC unroll 4
			for (int u = 0; u < 4; u++) _mm512_storeu_ps(ai + 16 * (t + u), a[u]);
		}
		for (; t < c; t++) {
			__m512 a = _mm512_loadu_ps(ai + 16 * t);
#pragma GCC unroll 4
			for (int v = 0; v < nv; v++) a = _mm512_fmadd_ps(wv[v], _mm512_maskz_loadu_ps(lm[v], l + t * n + 16 * v), a);
			_mm512_storeu_ps(ai + 16 * t, a);
		}
	}
}

// kk_pc_values adds, for the m weight rows of w (row i's weight of block
// j's row r at w[i*ldw + j*n + r], rows outside [lo, hi) weighing
// nothing), the weighted sums of each block's latents to acc (m x c
// vectors of 16 lanes: lane k sums the rows r = k mod 16), of its means to
// macc (m x mc, each weighted by the block's sum of weights) and of the
// weights to wsum (m): the value rows' sums in the basis, which
// kk_pc_values_end turns into rows. n is at most 64; work holds c*n
// floats. The npf blocks of pf are prefetched as in kk_pc_keys.
void kk_pc_values(long nb, long n, const uint8_t *planes, long pbytes, const float *lat, const uint8_t *widths, long c,
		  const float *levels, const float *fields, long mc, const float *w, long ldw, long m, long r0, long r1,
		  float *acc, float *macc, float *wsum, float *work, const uint64_t *pf, long npf) {
	const long nv = (n + 15) / 16;
	for (long j = 0; j < nb; j++) {
		pc_prefetch(pf, npf, j, nb);
		const float *means = fields + j * (mc + c), *scales = means + mc;
		const float *l = work;
		if (planes) {
			kk_unpack_planes(work, n, n, planes + j * pbytes, pbytes, widths, c, scales, levels);
		} else {
			l = lat + j * c * n;
		}
		long lo = j == 0 ? r0 : 0, hi = j == nb - 1 ? r1 : n;
		__mmask16 rm[4], lm[4];
		for (long v = 0; v < 4; v++) {
			long a = 16 * v, b = a + 16;
			long x0 = lo > a ? lo : a, x1 = hi < b ? hi : b, y1 = n < b ? n : b;
			rm[v] = x1 > x0 ? (__mmask16)(((1u << (x1 - a)) - 1) & ~((1u << (x0 - a)) - 1)) : 0;
			lm[v] = y1 > a ? (__mmask16)((1u << (y1 - a)) - 1) : 0;
		}
		switch (nv) {
		case 1: pc_values_rows(1, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 2: pc_values_rows(2, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		case 3: pc_values_rows(3, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		default: pc_values_rows(4, m, w + j * n, ldw, rm, lm, l, n, c, means, mc, acc, macc, wsum); break;
		}
	}
}

// kk_pc_values_end adds to each of the m rows of o (d values) the sums
// kk_pc_values left: each component's lanes summed times its basis row
// (coded, c x d), the means' sums times theirs (mean_rows, mc x d), and
// the weights' sum times mu.
void kk_pc_values_end(float *o, long m, long d, const float *acc, long c, const float *coded, const float *macc,
		      long mc, const float *mean_rows, const float *wsum, const float *mu) {
	const __mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : 0xffff;
	for (long i = 0; i < m; i++) {
		const float *ai = acc + i * c * 16;
		for (long j = 0; j < d; j += 16) {
			__mmask16 mk = j + 16 <= d ? 0xffff : tail;
			float *oi = o + i * d + j;
			__m512 x = _mm512_maskz_loadu_ps(mk, oi);
			for (long t = 0; t < c; t++)
				x = _mm512_fmadd_ps(_mm512_set1_ps(_mm512_reduce_add_ps(_mm512_loadu_ps(ai + 16 * t))),
						    _mm512_maskz_loadu_ps(mk, coded + t * d + j), x);
			for (long t = 0; t < mc; t++)
				x = _mm512_fmadd_ps(_mm512_set1_ps(macc[i * mc + t]), _mm512_maskz_loadu_ps(mk, mean_rows + t * d + j), x);
			x = _mm512_fmadd_ps(_mm512_set1_ps(wsum[i]), _mm512_maskz_loadu_ps(mk, mu + j), x);
			_mm512_mask_storeu_ps(oi, mk, x);
		}
	}
}
