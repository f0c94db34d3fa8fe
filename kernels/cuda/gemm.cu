// Prefill's matrix products on the tensor cores: out (n rows of rows
// float32) = x (n rows of cols) times w (rows x cols, bf16 or f16 as
// stored) transposed, with the activations rounded to the weights' 16-bit
// type first and the products summed in float32. Launch geometry is
// compute/cudabackend/gemm.go's.
#include "prelude.cuh"

// to_bf16: the activations rounded to bf16, ties to even, as
// tensor.F32ToBF16 and the CPU backend's bf16 matmul round them.
KK_KERNEL void to_bf16(kk_u16 *__restrict__ out, const float *__restrict__ x, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = kk_f32_to_bf16(x[i]);
}

// kk_f32_to_f16 rounds to the nearest IEEE half, ties to even, as
// tensor.F32ToF16: beyond 65504 to infinity, below 2^-14 to a subnormal,
// NaN to a quiet NaN.
KK_DEVICE kk_u16 kk_f32_to_f16(float f) {
	kk_u32 u = kk_f32_bits(f), a = u & 0x7fffffffu;
	kk_u16 sign = (kk_u16)((u >> 16) & 0x8000u);
	if (a > 0x7f800000u)
		return sign | 0x7e00u;
	if (a >= 0x477ff000u) // 65520 and above round to infinity
		return sign | 0x7c00u;
	if (a >= 0x38800000u) { // a normal half: rebias the exponent, round the mantissa
		kk_u32 r = a - 0x38000000u;
		r += 0xfffu + ((r >> 13) & 1u);
		return sign | (kk_u16)(r >> 13);
	}
	if (a < 0x33000000u) // below 2^-25: zero
		return sign;
	kk_u32 e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
	int shift = 126 - (int)e; // 14 to 24: the value in units of 2^-24
	kk_u32 q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1u)))
		q++;
	return sign | (kk_u16)q;
}

// to_f16_rows: block r rounds row r of x to f16 after scaling it by a power
// of two 2^-k (k >= 0, the least that brings the row's largest magnitude
// below 2^15), so that activations beyond f16's range (65504) do not
// overflow; scale[r] = 2^k, by which the GEMM multiplies the row's
// results. Rows within range (k = 0) round exactly as tensor.F32ToF16.
// Non-finite values pass through as infinities and NaNs.
KK_KERNEL void __launch_bounds__(256) to_f16_rows(kk_u16 *__restrict__ out, float *__restrict__ scale,
                                                  const float *__restrict__ x, int rows, int cols) {
	__shared__ float red[32];
	const float *row = x + (long long)blockIdx.x * cols;
	float m = 0.0f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		m = __builtin_fmaxf(m, __builtin_fabsf(row[c]));
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	m = kk_warp_max(m);
	if (lane == 0)
		red[warp] = m;
	__syncthreads();
	m = kk_warp_max(lane < warps ? red[lane] : 0.0f);
	int k = 0, e = (int)((kk_f32_bits(m) >> 23) & 0xffu) - 127; // m's binary exponent
	if (m >= 32768.0f && e < 128)
		k = e - 14; // m * 2^-k < 2^(e+1-k) = 2^15
	float inv = kk_bits_f32((kk_u32)(127 - k) << 23);
	if (threadIdx.x == 0)
		scale[blockIdx.x] = kk_bits_f32((kk_u32)(127 + k) << 23);
	kk_u16 *o = out + (long long)blockIdx.x * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		o[c] = kk_f32_to_f16(row[c] * inv);
}

// scale_rows multiplies each of rows rows of x (cols float32) by scale[r]:
// after cuBLAS's f16 GEMM, the scaling to_f16_rows took out.
KK_KERNEL void scale_rows(float *__restrict__ x, const float *__restrict__ scale, int rows, int cols) {
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < (long long)rows * cols)
		x[i] *= scale[i / cols];
}

// gemm_bf16, gemm_f16: a block of 4 warps computes a 64 x 64 tile of out
// (64 activation rows by 64 weight rows), stepping through the columns 32
// at a time. Both operands' slices are staged in shared memory as they lie
// in global memory (row-major, 16-bit, rows padded to 40 values so that
// the fragment loads of a warp hit 32 different banks); each warp owns a
// 32 x 32 sub-tile: 2 x 4 tensor-core products m16n8k16 per 16 columns
// (kk_mma), with 32 float32 accumulators per thread.
//
// The fragments need no ldmatrix: with A = x (M x K, row-major) and
// B = w transposed (K x N, column-major, which is w row-major), every
// register of a fragment is two consecutive 16-bit values of one row of x
// or of w, one 32-bit shared load. Columns past cols and rows past n or
// rows are staged as zeros and not written; a vec launch (cols a multiple
// of 8) loads 8 values at a time, the next slice into registers while the
// tensor cores work on this one, else one value at a time. scale (f16
// only, may be null) multiplies output row i by scale[i].
#define KK_GM_BM 64
#define KK_GM_BN 64
#define KK_GM_BK 32
#define KK_GM_LD (KK_GM_BK + 8)

// kk_gm_fetch loads this thread's share of a 64 x 32 slice of a row-major
// 16-bit matrix of nrows x cols (rows r0.., columns k0..; cols a multiple
// of 8) into registers, 8 values a load, zeros outside: 256 groups of 8,
// 2 per thread. kk_gm_put stores them into the shared slice.
KK_DEVICE void kk_gm_fetch(kk_u32x4 v[2], const kk_u16 *__restrict__ g, int r0, int nrows, int k0, int cols) {
#pragma unroll
	for (int q = 0; q < 2; q++) {
		int e = threadIdx.x + 128 * q, r = r0 + (e >> 2), k = k0 + (e & 3) * 8;
		kk_u32x4 z = {0, 0, 0, 0};
		v[q] = z;
		if (r < nrows && k < cols)
			v[q] = *(const kk_u32x4 *)(g + (long long)r * cols + k);
	}
}
KK_DEVICE void kk_gm_put(kk_u32 (*s)[KK_GM_LD / 2], const kk_u32x4 v[2]) {
#pragma unroll
	for (int q = 0; q < 2; q++) {
		int e = threadIdx.x + 128 * q;
		kk_u32 *d = &s[e >> 2][(e & 3) * 4];
		d[0] = v[q][0], d[1] = v[q][1], d[2] = v[q][2], d[3] = v[q][3];
	}
}

// kk_gm_stage copies the slice one value at a time (any cols).
KK_DEVICE void kk_gm_stage(kk_u32 (*s)[KK_GM_LD / 2], const kk_u16 *__restrict__ g, int r0, int nrows, int k0, int cols) {
	for (int e = threadIdx.x; e < KK_GM_BM * KK_GM_BK / 2; e += 128) {
		int rr = e >> 4, c = (e & 15) * 2;
		int r = r0 + rr, k = k0 + c;
		kk_u32 lo = r < nrows && k < cols ? g[(long long)r * cols + k] : 0u;
		kk_u32 hi = r < nrows && k + 1 < cols ? g[(long long)r * cols + k + 1] : 0u;
		s[rr][c >> 1] = lo | hi << 16;
	}
}

template <int F16>
KK_DEVICE void kk_gemm(float *__restrict__ out, const kk_u16 *__restrict__ x, const kk_u16 *__restrict__ w,
                       const float *__restrict__ scale, int n, int rows, int cols, int vec) {
	// Pairs of 16-bit values, so that a fragment register is one 32-bit load.
	__shared__ __attribute__((aligned(16))) kk_u32 xs[KK_GM_BM][KK_GM_LD / 2];
	__shared__ __attribute__((aligned(16))) kk_u32 ws[KK_GM_BN][KK_GM_LD / 2];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int g = lane >> 2, tq = lane & 3;
	int wm = (warp >> 1) * 32, wn = (warp & 1) * 32; // the warp's sub-tile in the block's
	int r0 = blockIdx.x * KK_GM_BN, i0 = blockIdx.y * KK_GM_BM;
	float acc[2][4][4];
#pragma unroll
	for (int a = 0; a < 2; a++)
#pragma unroll
		for (int b = 0; b < 4; b++)
#pragma unroll
			for (int c = 0; c < 4; c++)
				acc[a][b][c] = 0.0f;
	// With vec, the next slice's global loads are issued into registers
	// before the tensor cores work on this one, so that they overlap.
	kk_u32x4 px[2], pw[2];
	if (vec) {
		kk_gm_fetch(px, x, i0, n, 0, cols);
		kk_gm_fetch(pw, w, r0, rows, 0, cols);
	}
	for (int k0 = 0; k0 < cols; k0 += KK_GM_BK) {
		if (vec) {
			kk_gm_put(xs, px);
			kk_gm_put(ws, pw);
		} else {
			kk_gm_stage(xs, x, i0, n, k0, cols);
			kk_gm_stage(ws, w, r0, rows, k0, cols);
		}
		__syncthreads();
		if (vec && k0 + KK_GM_BK < cols) {
			kk_gm_fetch(px, x, i0, n, k0 + KK_GM_BK, cols);
			kk_gm_fetch(pw, w, r0, rows, k0 + KK_GM_BK, cols);
		}
#pragma unroll
		for (int kk = 0; kk < KK_GM_BK; kk += 16) {
			kk_u32 af[2][4], bf[4][2];
#pragma unroll
			for (int a = 0; a < 2; a++) {
				int m = wm + 16 * a + g;
				int c = kk / 2 + tq; // the pair of columns kk + 2 tq, +1
				af[a][0] = xs[m][c];
				af[a][1] = xs[m + 8][c];
				af[a][2] = xs[m][c + 4];
				af[a][3] = xs[m + 8][c + 4];
			}
#pragma unroll
			for (int b = 0; b < 4; b++) {
				int nn = wn + 8 * b + g;
				bf[b][0] = ws[nn][kk / 2 + tq];
				bf[b][1] = ws[nn][kk / 2 + tq + 4];
			}
#pragma unroll
			for (int a = 0; a < 2; a++)
#pragma unroll
				for (int b = 0; b < 4; b++) {
					if (F16)
						kk_mma_f16(acc[a][b], af[a], bf[b]);
					else
						kk_mma_bf16(acc[a][b], af[a], bf[b]);
				}
		}
		__syncthreads();
	}
#pragma unroll
	for (int a = 0; a < 2; a++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = i0 + wm + 16 * a + g + 8 * h;
			if (i >= n)
				continue;
			float s = F16 && scale ? scale[i] : 1.0f;
#pragma unroll
			for (int b = 0; b < 4; b++)
#pragma unroll
				for (int c = 0; c < 2; c++) {
					int r = r0 + wn + 8 * b + 2 * tq + c;
					if (r < rows)
						out[(long long)i * rows + r] = acc[a][b][2 * h + c] * s;
				}
		}
}

KK_KERNEL void __launch_bounds__(128) gemm_bf16(float *out, const kk_u16 *x, const kk_u16 *w, const float *scale, int n,
                                                int rows, int cols, int vec) {
	kk_gemm<0>(out, x, w, scale, n, rows, cols, vec);
}
KK_KERNEL void __launch_bounds__(128) gemm_f16(float *out, const kk_u16 *x, const kk_u16 *w, const float *scale, int n,
                                               int rows, int cols, int vec) {
	kk_gemm<1>(out, x, w, scale, n, rows, cols, vec);
}
