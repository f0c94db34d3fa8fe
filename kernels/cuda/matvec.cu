// Matrix products with a weight stored Rows x Cols (a Hugging Face Linear
// weight) in f32, bf16 or f16: out (n x rows) = x (n x cols) * w^T, with
// float32 accumulation. matvec is decode's kernel (n <= 8: memory-bound,
// every weight read once), matmul the tiled GEMM for any n.
#include "prelude.cuh"

// Weight element types, as template arguments (bf16 and f16 are both raw
// uint16 in memory).
enum { kkF32, kkBF16, kkF16 };

// kk_widen returns element i of w as float32.
template <int DT> KK_DEVICE float kk_widen(const void *w, long long i) {
	if (DT == kkF32)
		return ((const float *)w)[i];
	kk_u16 h = ((const kk_u16 *)w)[i];
	return DT == kkBF16 ? kk_bf16(h) : kk_f16(h);
}

// kk_widen2 widens the two 16-bit elements packed in u, low half first.
template <int DT> KK_DEVICE void kk_widen2(kk_u32 u, float *o) {
	if (DT == kkBF16) {
		o[0] = kk_bits_f32(u << 16);
		o[1] = kk_bits_f32(u & 0xffff0000u);
	} else {
		o[0] = kk_f16((kk_u16)(u & 0xffffu));
		o[1] = kk_f16((kk_u16)(u >> 16));
	}
}

// kk_widen8 loads elements i..i+7 of w (16-byte aligned) with 16-byte
// loads: one for 16-bit weights, two for float32.
template <int DT> KK_DEVICE void kk_widen8(const void *w, long long i, float *o) {
	if (DT == kkF32) {
		const kk_u32x4 *p = (const kk_u32x4 *)((const float *)w + i);
		kk_u32x4 a = p[0], b = p[1];
		for (int k = 0; k < 4; k++) {
			o[k] = kk_bits_f32(a[k]);
			o[4 + k] = kk_bits_f32(b[k]);
		}
		return;
	}
	kk_u32x4 v = *(const kk_u32x4 *)((const kk_u16 *)w + i);
	for (int k = 0; k < 4; k++)
		kk_widen2<DT>(v[k], o + 2 * k);
}

// kk_raw8 holds 8 weights as loaded (16-bit: one 16-byte load; float32:
// two), so that a loop can issue several steps' loads before widening any:
// kk_fetch8 loads, kk_unpack8 widens.
struct kk_raw8 {
	kk_u32x4 a, b;
};
template <int DT> KK_DEVICE kk_raw8 kk_fetch8(const void *w, long long i) {
	kk_raw8 r;
	if (DT == kkF32) {
		r.a = kk_ldw16((const float *)w + i);
		r.b = kk_ldw16((const float *)w + i + 4);
	} else {
		r.a = kk_ldw16((const kk_u16 *)w + i);
		r.b = r.a;
	}
	return r;
}
template <int DT> KK_DEVICE void kk_unpack8(const kk_raw8 &r, float *o) {
	for (int k = 0; k < 4; k++) {
		if (DT == kkF32) {
			o[k] = kk_bits_f32(r.a[k]);
			o[4 + k] = kk_bits_f32(r.b[k]);
		} else {
			kk_widen2<DT>(r.a[k], o + 2 * k);
		}
	}
}

#define KK_MAXN 8

// kk_stage_x copies columns c0..c0+len-1 of the n rows of x (cols values
// each) into xs (row j at xs + j*chunk), normalised when g is set (x *
// inv[j] * g, as rmsnorm writes it). Rows 16-byte aligned (cols and len
// multiples of 4) take 16-byte loads, four a thread issued before any is
// stored, so a block's staging waits for memory about once, not once per
// value a thread copies; the values are the same either way.
KK_DEVICE void kk_stage_x(float *xs, const float *x, const float *g, const float *inv, int n, int cols, int c0,
                          int len, int chunk) {
	if ((cols & 3) == 0 && (len & 3) == 0 && (c0 & 3) == 0 && ((unsigned long long)x & 15) == 0 &&
	    (!g || ((unsigned long long)g & 15) == 0)) {
		int l4 = len >> 2, total = n * l4;
		for (int i0 = threadIdx.x; i0 < total; i0 += 4 * blockDim.x) {
			kk_u32x4 v[4] = {}, gv[4] = {};
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int i = i0 + u * (int)blockDim.x;
				if (i < total) {
					int j = i / l4, c = (i - j * l4) * 4;
					v[u] = kk_ldw16(x + (long long)j * cols + c0 + c);
					if (g)
						gv[u] = kk_ldw16(g + c0 + c);
				}
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				int i = i0 + u * (int)blockDim.x;
				if (i < total) {
					int j = i / l4, c = (i - j * l4) * 4;
#pragma unroll
					for (int e = 0; e < 4; e++) {
						float val = kk_bits_f32(v[u][e]);
						if (g)
							val = val * inv[j] * kk_bits_f32(gv[u][e]);
						xs[j * chunk + c + e] = val;
					}
				}
			}
		}
		return;
	}
	for (int i = threadIdx.x; i < n * len; i += blockDim.x) {
		int j = i / len, c = i - j * len;
		float v = x[(long long)j * cols + c0 + c];
		if (g)
			v = v * inv[j] * g[c0 + c];
		xs[j * chunk + c] = v;
	}
}

// matvec: wpr warps (1, 2, 4 or 8) share one output row and read it once
// for all n input rows, each lane 8 consecutive weights (a 16-byte load)
// at a time, a warp covering 256 consecutive columns per step and the
// wpr warps of a row interleaved by steps; four steps are loaded before
// any is used, to keep more loads in flight. x is staged in shared
// memory chunk columns at a time (chunk a multiple of 8, so the weights'
// 16-byte alignment holds in every chunk). A warp's partial sums meet by
// shuffles, the wpr warps' through shared memory. Small matrices take
// wpr > 1 so that there are enough warps to keep the memory busy. Warps
// past the last row stay for the barriers; a row whose length is not a
// multiple of 8 (or a weight not 16-byte aligned) takes scalar loads.
// kk_dot8 adds to acc[j] the dot product of 8 weights with the 8 staged
// values of input row j at xs + j*chunk (32-byte aligned: two 16-byte
// shared loads), for j < n.
KK_DEVICE void kk_dot8(float *acc, const float *wv, const float *xs, int chunk, int n) {
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++) {
		if (j < n) {
			const kk_f32x4 *xr = (const kk_f32x4 *)(xs + j * chunk);
			kk_f32x4 a = xr[0], b = xr[1];
			float s = acc[j];
#pragma unroll
			for (int k = 0; k < 4; k++)
				s += wv[k] * a[k] + wv[4 + k] * b[k];
			acc[j] = s;
		}
	}
}

template <int DT>
KK_DEVICE void kk_matvec(float *__restrict__ out, const float *__restrict__ x, const void *__restrict__ w, int n,
                         int rows, int cols, int chunk, int wpr) {
	KK_DYN_SHARED(float, xs);
	__shared__ float red[8][KK_MAXN];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	int part = warp % wpr, row = blockIdx.x * (warps / wpr) + warp / wpr;
	bool live = row < rows;
	bool vec = (cols & 7) == 0 && ((unsigned long long)w & 15) == 0;
	long long base = (long long)row * cols;
	float acc[KK_MAXN];
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++)
		acc[j] = 0.0f;
	for (int c0 = 0; c0 < cols; c0 += chunk) {
		int len = cols - c0 < chunk ? cols - c0 : chunk;
		__syncthreads(); // the previous chunk is consumed
		kk_stage_x(xs, x, 0, 0, n, cols, c0, len, chunk);
		__syncthreads();
		if (!live)
			continue;
		if (vec) {
			int step = 256 * wpr, c = (part * 32 + lane) * 8;
			for (; c + 3 * step < len; c += 4 * step) {
				kk_raw8 rw[4];
#pragma unroll
				for (int u = 0; u < 4; u++)
					rw[u] = kk_fetch8<DT>(w, base + c0 + c + u * step);
#pragma unroll
				for (int u = 0; u < 4; u++) {
					float wv[8];
					kk_unpack8<DT>(rw[u], wv);
					kk_dot8(acc, wv, xs + c + u * step, chunk, n);
				}
			}
			for (; c < len; c += step) {
				float w0[8];
				kk_widen8<DT>(w, base + c0 + c, w0);
				kk_dot8(acc, w0, xs + c, chunk, n);
			}
		} else {
			for (int c = part * 32 + lane; c < len; c += 32 * wpr) {
				float wv = kk_widen<DT>(w, base + c0 + c);
#pragma unroll
				for (int j = 0; j < KK_MAXN; j++)
					if (j < n)
						acc[j] += wv * xs[j * chunk + c];
			}
		}
	}
	if (live) {
#pragma unroll
		for (int j = 0; j < KK_MAXN; j++) {
			if (j < n) {
				float s = kk_warp_sum(acc[j]);
				if (wpr == 1) {
					if (lane == 0)
						out[(long long)j * rows + row] = s;
				} else if (lane == 0) {
					red[warp][j] = s;
				}
			}
		}
	}
	if (wpr == 1)
		return;
	__syncthreads();
	if (live && part == 0 && lane < n) {
		float s = 0.0f;
		for (int p = 0; p < wpr; p++)
			s += red[warp + p][lane];
		out[(long long)lane * rows + row] = s;
	}
}

KK_KERNEL void __launch_bounds__(256) matvec_f32(float *out, const float *x, const float *w, int n, int rows, int cols, int chunk, int wpr) {
	kk_matvec<kkF32>(out, x, w, n, rows, cols, chunk, wpr);
}
KK_KERNEL void __launch_bounds__(256) matvec_bf16(float *out, const float *x, const kk_u16 *w, int n, int rows, int cols, int chunk, int wpr) {
	kk_matvec<kkBF16>(out, x, w, n, rows, cols, chunk, wpr);
}
KK_KERNEL void __launch_bounds__(256) matvec_f16(float *out, const float *x, const kk_u16 *w, int n, int rows, int cols, int chunk, int wpr) {
	kk_matvec<kkF16>(out, x, w, n, rows, cols, chunk, wpr);
}

// matmul: a block computes a 64 x 64 tile of out (64 input rows by 64
// weight rows), stepping through the columns 16 at a time: both operands'
// slices are staged in shared memory column-major (so a thread reads its 4
// consecutive rows of each in one sweep) and each of the 256 threads
// accumulates a 4 x 4 sub-tile in registers. Out-of-range rows and columns
// are staged as zeros and not written.
#define KK_MM_T 64
#define KK_MM_K 16
#define KK_MM_PAD 4

// kk_tile_mac adds column k of the staged tiles (K columns of 64 rows
// each) to a thread's 4 x 4 sub-tile: input rows ty*4.. of xs by weight
// rows tx*4.. of ws.
template <int K>
KK_DEVICE void kk_tile_mac(float (&acc)[4][4], const float (&xs)[K][KK_MM_T + KK_MM_PAD],
                           const float (&ws)[K][KK_MM_T + KK_MM_PAD], int k, int tx, int ty) {
	float a[4], b[4];
#pragma unroll
	for (int q = 0; q < 4; q++) {
		a[q] = xs[k][ty * 4 + q];
		b[q] = ws[k][tx * 4 + q];
	}
#pragma unroll
	for (int p = 0; p < 4; p++)
#pragma unroll
		for (int q = 0; q < 4; q++)
			acc[p][q] += a[p] * b[q];
}

// kk_tile_store writes a thread's 4 x 4 sub-tile of the 64 x 64 tile at
// input row i0, weight row r0 into out (n rows of rows), leaving out
// what lies past either end.
KK_DEVICE void kk_tile_store(float *__restrict__ out, const float (&acc)[4][4], int i0, int r0, int tx, int ty, int n,
                             int rows) {
#pragma unroll
	for (int p = 0; p < 4; p++) {
		int i = i0 + ty * 4 + p;
#pragma unroll
		for (int q = 0; q < 4; q++) {
			int r = r0 + tx * 4 + q;
			if (i < n && r < rows)
				out[(long long)i * rows + r] = acc[p][q];
		}
	}
}
template <int DT>
KK_DEVICE void kk_matmul(float *__restrict__ out, const float *__restrict__ x, const void *__restrict__ w, int n,
                         int rows, int cols) {
	__shared__ float xs[KK_MM_K][KK_MM_T + KK_MM_PAD];
	__shared__ float ws[KK_MM_K][KK_MM_T + KK_MM_PAD];
	int t = threadIdx.x, tx = t & 15, ty = t >> 4;
	int r0 = blockIdx.x * KK_MM_T, i0 = blockIdx.y * KK_MM_T;
	float acc[4][4] = {};
	for (int k0 = 0; k0 < cols; k0 += KK_MM_K) {
#pragma unroll
		for (int q = 0; q < 4; q++) {
			int e = t + 256 * q, rr = e >> 4, k = e & 15;
			int c = k0 + k;
			int i = i0 + rr, r = r0 + rr;
			xs[k][rr] = i < n && c < cols ? x[(long long)i * cols + c] : 0.0f;
			ws[k][rr] = r < rows && c < cols ? kk_widen<DT>(w, (long long)r * cols + c) : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int k = 0; k < KK_MM_K; k++) {
			kk_tile_mac(acc, xs, ws, k, tx, ty);
		}
		__syncthreads();
	}
	kk_tile_store(out, acc, i0, r0, tx, ty, n, rows);
}

KK_KERNEL void __launch_bounds__(256) matmul_f32(float *out, const float *x, const float *w, int n, int rows, int cols) {
	kk_matmul<kkF32>(out, x, w, n, rows, cols);
}
KK_KERNEL void __launch_bounds__(256) matmul_bf16(float *out, const float *x, const kk_u16 *w, int n, int rows, int cols) {
	kk_matmul<kkBF16>(out, x, w, n, rows, cols);
}
KK_KERNEL void __launch_bounds__(256) matmul_f16(float *out, const float *x, const kk_u16 *w, int n, int rows, int cols) {
	kk_matmul<kkF16>(out, x, w, n, rows, cols);
}
