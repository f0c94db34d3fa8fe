// Decode fusions: the matvec of matvec.cu with the operations around it
// done in its prologue and epilogue, so that a decoder layer's decode step
// is a few kernels rather than twenty (see docs/cuda.md):
//
//   - norm_qkv: RMSNorm, the q, k and v projections, their biases, RoPE
//     on q and the new keys and values written into the KV cache;
//   - norm_swiglu: RMSNorm, the gate and up projections, their biases and
//     silu(gate)*up;
//   - matvec_add: a projection and its bias added to the residual stream;
//   - norm_matvec: the final RMSNorm and the output head.
//
// Each computes what the separate kernels compute, in the same float32
// operations (the normalised row is staged exactly as rmsnorm writes it),
// and is tested by emulation against compute/reference.
#include "prelude.cuh"

// kk_inv_rms sets inv[j] (shared memory, visible to every thread after
// the block's next barrier) to 1/sqrt(mean(row^2) + eps) of each of the n
// input rows of x, summed as rmsnorm sums them (a block of 256 threads,
// each taking every 256th column). red is 32 floats of shared memory.
// inv is in shared memory rather than registers because the staging
// indexes it by a row computed at run time, which would put a register
// array in local memory.
KK_DEVICE void kk_inv_rms(float *inv, const float *x, int n, int cols, float eps, float *red) {
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++) {
		if (j < n) {
			const float *row = x + (long long)j * cols;
			float ss = 0.0f;
			// Four values a thread loaded before any is summed, so that
			// the loads are in flight together; the sum's order is
			// rmsnorm's, one value at a time in column order.
			int c = threadIdx.x, bd = blockDim.x;
			for (; c + 3 * bd < cols; c += 4 * bd) {
				float a = row[c], b = row[c + bd], e = row[c + 2 * bd], f = row[c + 3 * bd];
				ss += a * a;
				ss += b * b;
				ss += e * e;
				ss += f * f;
			}
			for (; c < cols; c += bd)
				ss += row[c] * row[c];
			ss = kk_block_sum(ss, red);
			if (threadIdx.x == 0)
				inv[j] = 1.0f / __builtin_sqrtf(ss / (float)cols + eps);
		}
	}
}

// kk_dots2: the block's warps, wpr to a unit, compute for each of the
// block's units the dot products of one or two weight rows (row ra of wa,
// and row rb of wb when two) with each of the n input rows of x, the input
// normalised first when g is set (x * inv * g, as rmsnorm writes it). x is
// staged in shared memory xs chunk columns at a time, as kk_matvec does;
// every warp stays for the barriers (the first makes inv visible). On
// return part[warp][0 or 1][j] holds each warp's share: a unit's dot
// products are the sums over its wpr warps, in warp order.
template <int DT, bool TWO>
KK_DEVICE void kk_dots2(float (*part)[2][KK_MAXN], float *xs, const float *x, const float *g, const float *inv,
                        const void *wa, long long ra, const void *wb, long long rb, bool live, int n, int cols,
                        int chunk, int wpr) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, p = warp % wpr;
	bool vec = (cols & 7) == 0 && ((unsigned long long)wa & 15) == 0 && (!TWO || ((unsigned long long)wb & 15) == 0);
	long long ba = ra * cols, bb = rb * cols;
	float acc[2][KK_MAXN];
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++)
		acc[0][j] = acc[1][j] = 0.0f;
	for (int c0 = 0; c0 < cols; c0 += chunk) {
		int len = cols - c0 < chunk ? cols - c0 : chunk;
		__syncthreads(); // the previous chunk is consumed
		kk_stage_x(xs, x, g, inv, n, cols, c0, len, chunk);
		__syncthreads();
		if (!live)
			continue;
		if (vec) {
			// U steps' loads (two matrices: 2 steps, else 4) are issued
			// before any is used, to keep 4 16-byte loads a lane in
			// flight; the sums run in column order as one step at a time.
			const int U = TWO ? 2 : 4;
			int step = 256 * wpr, c = (p * 32 + lane) * 8;
			for (; c + (U - 1) * step < len; c += U * step) {
				kk_raw8 r0[U], r1[U];
#pragma unroll
				for (int u = 0; u < U; u++) {
					r0[u] = kk_fetch8<DT>(wa, ba + c0 + c + u * step);
					if (TWO)
						r1[u] = kk_fetch8<DT>(wb, bb + c0 + c + u * step);
				}
#pragma unroll
				for (int u = 0; u < U; u++) {
					float w0[8], w1[8];
					kk_unpack8<DT>(r0[u], w0);
					kk_dot8(acc[0], w0, xs + c + u * step, chunk, n);
					if (TWO) {
						kk_unpack8<DT>(r1[u], w1);
						kk_dot8(acc[1], w1, xs + c + u * step, chunk, n);
					}
				}
			}
			for (; c < len; c += step) {
				float w0[8], w1[8];
				kk_widen8<DT>(wa, ba + c0 + c, w0);
				if (TWO)
					kk_widen8<DT>(wb, bb + c0 + c, w1);
				kk_dot8(acc[0], w0, xs + c, chunk, n);
				if (TWO)
					kk_dot8(acc[1], w1, xs + c, chunk, n);
			}
		} else {
			for (int c = p * 32 + lane; c < len; c += 32 * wpr) {
				float v0 = kk_widen<DT>(wa, ba + c0 + c);
				float v1 = TWO ? kk_widen<DT>(wb, bb + c0 + c) : 0.0f;
#pragma unroll
				for (int j = 0; j < KK_MAXN; j++) {
					if (j < n) {
						acc[0][j] += v0 * xs[j * chunk + c];
						if (TWO)
							acc[1][j] += v1 * xs[j * chunk + c];
					}
				}
			}
		}
	}
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++) {
		if (j < n) {
			float s0 = kk_warp_sum(acc[0][j]);
			float s1 = TWO ? kk_warp_sum(acc[1][j]) : 0.0f;
			if (lane == 0) {
				part[warp][0][j] = s0;
				part[warp][1][j] = s1;
			}
		}
	}
	__syncthreads();
}

// kk_unit_sum returns dot product k (0 or 1) of input row j of the unit
// whose first warp is w0.
KK_DEVICE float kk_unit_sum(float (*part)[2][KK_MAXN], int w0, int wpr, int k, int j) {
	float s = 0.0f;
	for (int p = 0; p < wpr; p++)
		s += part[w0 + p][k][j];
	return s;
}

// kk_qk_norm normalises each head of the n rows of q and k by RMSNorm
// (weights qn and kn, eps) as rmsnorm does a row of d values, then rotates
// q's heads at their positions as rope does and writes k's heads to the
// cache's parts when tab is set (see kk_norm_qkv): Qwen3's per-head norms,
// run by the one block of norm_qkv that finishes last. red is 32 floats of
// shared memory.
KK_DEVICE void kk_qk_norm(float *q, float *k, int n, int heads, int kv_heads, int d, const float *qn, const float *kn,
                          float eps, int start, const int *pos, const float *cos, const float *sin, const kk_u64 *tab,
                          int row, int fmt, float *red) {
	int half = d >> 1;
	for (int j = 0; j < n; j++) {
		int at = pos ? pos[j] : start + j;
		for (int h = 0; h < heads + kv_heads; h++) {
			bool isq = h < heads;
			int kh = h - heads;
			// Volatile: other blocks wrote the head, and this SM's L1 is
			// not coherent with their writes.
			volatile float *x = isq ? q + ((long long)j * heads + h) * d : k + ((long long)j * kv_heads + kh) * d;
			const float *w = isq ? qn : kn;
			float ss = 0.0f;
			for (int c = threadIdx.x; c < d; c += blockDim.x)
				ss += x[c] * x[c];
			ss = kk_block_sum(ss, red); // every read of x is before its barrier
			float inv = 1.0f / __builtin_sqrtf(ss / (float)d + eps);
			for (int c = threadIdx.x; c < half; c += blockDim.x) {
				float a = x[c] * inv * w[c], b = x[c + half] * inv * w[c + half];
				if (isq) {
					int p = at * half + c;
					float cs = cos[p], sn = sin[p];
					x[c] = a * cs - b * sn;
					x[c + half] = b * cs + a * sn;
					continue;
				}
				x[c] = a;
				x[c + half] = b;
				if (tab) {
					long long o = (long long)(row + j) * d + c;
					kk_u64 pt = tab[kh];
					if (fmt == 0) {
						((float *)pt)[o] = a;
						((float *)pt)[o + half] = b;
					} else {
						((kk_u16 *)pt)[o] = kk_f32_to_bf16(a);
						((kk_u16 *)pt)[o + half] = kk_f32_to_bf16(b);
					}
				}
			}
		}
	}
}

// norm_qkv: RMSNorm of x (weight g), then the q, k and v projections plus
// their biases (bq, bk, bv; null for none); q's heads are rotated at
// positions start.. (or, when pos is set, row j at position pos[j], rows
// of several sequences), RoPE with rotate-half pairing and d/2 cos and
// sin values per position; k and v are written unrotated to k and v and,
// when tab is set, to rows row.. of the cache's hot parts: tab holds the part
// addresses of the kv_heads heads' keys, then of their values, float32
// (fmt 0) or bf16 (fmt 1, rounded as kv_write rounds). A unit is a pair of
// rows (j, j + d/2) of one head, so that the rotation's two values meet in
// one thread: heads*d/2 units of q, then kv_heads*d/2 of k and of v.
//
// When step is set, tab, row and start are read from it instead (a slot of
// the backend's step parameters: tab's address, then row and start as
// int32), so that a decode step's launch is the same from one position to
// the next and a captured graph replays it.
//
// With qn and kn set (Qwen3's per-head norms), each head of q and k is
// normalised by RMSNorm before q's rotation and k's cache write. A head
// spans several blocks, so the blocks write q and k as projected and the
// one that finishes last, counted by *cnt (zero before the launch, and
// after it again), normalises every head (kk_qk_norm).
template <int DT>
KK_DEVICE void kk_norm_qkv(float *q, float *k, float *v, const float *x, const float *g, float eps, const void *wq,
                           const void *wk, const void *wv, const float *bq, const float *bk, const float *bv, int n,
                           int heads, int kv_heads, int d, int cols, int start, const int *pos, const float *cos,
                           const float *sin, const kk_u64 *tab, int row, int fmt, int chunk, int wpr,
                           const kk_u64 *step, const float *qn, const float *kn, int *cnt) {
	if (step) {
		tab = (const kk_u64 *)step[0];
		row = ((const int *)step)[2];
		start = ((const int *)step)[3];
	}
	KK_DYN_SHARED(float, xs);
	__shared__ float red[32];
	__shared__ float part[8][2][KK_MAXN];
	int half = d >> 1, warp = threadIdx.x >> 5, per = (blockDim.x >> 5) / wpr;
	int qu = heads * half, ku = kv_heads * half;
	int u = blockIdx.x * per + warp / wpr;
	// The unit's matrix (0 q, 1 k, 2 v), head and pair index.
	int m = u < qu ? 0 : u < qu + ku ? 1 : 2;
	int ui = m == 0 ? u : m == 1 ? u - qu : u - qu - ku;
	int h = ui / half, jj = ui - h * half;
	const void *w = m == 0 ? wq : m == 1 ? wk : wv;
	long long ra = (long long)h * d + jj;
	__shared__ float inv[KK_MAXN];
	kk_inv_rms(inv, x, n, cols, eps, red);
	kk_dots2<DT, true>(part, xs, x, g, inv, w, ra, w, ra + half, u < qu + 2 * ku, n, cols, chunk, wpr);
	// Epilogue: a thread per unit and input row. With per-head norms (qn
	// set) q and k are written as projected; the block that finishes last
	// normalises, rotates and caches them (kk_qk_norm).
	int t = threadIdx.x;
	int lu = t / n, j = t - lu * n;
	u = blockIdx.x * per + lu;
	if (t < per * n && u < qu + 2 * ku) {
		m = u < qu ? 0 : u < qu + ku ? 1 : 2;
		ui = m == 0 ? u : m == 1 ? u - qu : u - qu - ku;
		h = ui / half, jj = ui - h * half;
		int r0 = h * d + jj, r1 = r0 + half;
		float a = kk_unit_sum(part, lu * wpr, wpr, 0, j), b = kk_unit_sum(part, lu * wpr, wpr, 1, j);
		const float *bias = m == 0 ? bq : m == 1 ? bk : bv;
		if (bias) {
			a += bias[r0];
			b += bias[r1];
		}
		if (m == 0) {
			long long o = (long long)j * heads * d;
			if (qn) {
				q[o + r0] = a;
				q[o + r1] = b;
			} else {
				int p = (pos ? pos[j] : start + j) * half + jj;
				float c = cos[p], s = sin[p];
				q[o + r0] = a * c - b * s;
				q[o + r1] = b * c + a * s;
			}
		} else {
			float *dst = m == 1 ? k : v;
			long long o = (long long)j * kv_heads * d;
			dst[o + r0] = a;
			dst[o + r1] = b;
			if (tab && !(qn && m == 1)) {
				long long at = (long long)(row + j) * d + jj;
				kk_u64 pt = tab[(m - 1) * kv_heads + h];
				if (fmt == 0) {
					((float *)pt)[at] = a;
					((float *)pt)[at + half] = b;
				} else {
					((kk_u16 *)pt)[at] = kk_f32_to_bf16(a);
					((kk_u16 *)pt)[at + half] = kk_f32_to_bf16(b);
				}
			}
		}
	}
	if (!qn)
		return;
	// The last block to finish (a ticket from cnt, which it resets for
	// the next launch) sees every block's q and k.
	__shared__ int last;
	__threadfence();
	__syncthreads();
	if (t == 0)
		last = atomicAdd(cnt, 1) == (int)gridDim.x - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	if (t == 0)
		*cnt = 0;
	kk_qk_norm(q, k, n, heads, kv_heads, d, qn, kn, eps, start, pos, cos, sin, tab, row, fmt, red);
}

// norm_swiglu: out (n rows of rows values) = silu(xn*wg^T + bg) * (xn*wu^T
// + bu) for xn the RMSNorm of x (weight g); bg and bu may be null; with
// act 1, gelu_tanh instead of silu (Gemma's GeGLU, as gelu_tanh_mul). A
// unit is one output row: its gate and up rows are read by the same warps.
template <int DT>
KK_DEVICE void kk_norm_swiglu(float *out, const float *x, const float *g, float eps, const void *wg, const void *wu,
                              const float *bg, const float *bu, int n, int rows, int cols, int chunk, int wpr,
                              int act) {
	KK_DYN_SHARED(float, xs);
	__shared__ float red[32];
	__shared__ float part[8][2][KK_MAXN];
	int warp = threadIdx.x >> 5, per = (blockDim.x >> 5) / wpr;
	int r = blockIdx.x * per + warp / wpr;
	__shared__ float inv[KK_MAXN];
	kk_inv_rms(inv, x, n, cols, eps, red);
	kk_dots2<DT, true>(part, xs, x, g, inv, wg, r, wu, r, r < rows, n, cols, chunk, wpr);
	int t = threadIdx.x;
	if (t >= per * n)
		return;
	int lu = t / n, j = t - lu * n;
	r = blockIdx.x * per + lu;
	if (r >= rows)
		return;
	float a = kk_unit_sum(part, lu * wpr, wpr, 0, j), b = kk_unit_sum(part, lu * wpr, wpr, 1, j);
	if (bg)
		a += bg[r];
	if (bu)
		b += bu[r];
	out[(long long)j * rows + r] = (act ? kk_gelu_tanh(a) : a / (1.0f + kk_exp(-a))) * b;
}

// matvec_add: acc (n rows of rows values) += x*w^T + bias (bias null for
// none): a projection added to the residual stream. A unit is one output
// row.
template <int DT>
KK_DEVICE void kk_matvec_add(float *acc, const float *x, const void *w, const float *bias, int n, int rows, int cols,
                             int chunk, int wpr) {
	KK_DYN_SHARED(float, xs);
	__shared__ float part[8][2][KK_MAXN];
	int warp = threadIdx.x >> 5, per = (blockDim.x >> 5) / wpr;
	int r = blockIdx.x * per + warp / wpr;
	kk_dots2<DT, false>(part, xs, x, 0, 0, w, r, w, r, r < rows, n, cols, chunk, wpr);
	int t = threadIdx.x;
	if (t >= per * n)
		return;
	int lu = t / n, j = t - lu * n;
	r = blockIdx.x * per + lu;
	if (r >= rows)
		return;
	float s = kk_unit_sum(part, lu * wpr, wpr, 0, j);
	if (bias)
		s += bias[r];
	acc[(long long)j * rows + r] += s;
}

// norm_matvec: out (n rows of rows values) = xn*w^T for xn the RMSNorm of
// x (weight g): the final norm and the output head. A unit is one output
// row.
template <int DT>
KK_DEVICE void kk_norm_matvec(float *out, const float *x, const float *g, float eps, const void *w, int n, int rows,
                              int cols, int chunk, int wpr) {
	KK_DYN_SHARED(float, xs);
	__shared__ float red[32];
	__shared__ float inv[KK_MAXN];
	__shared__ float part[8][2][KK_MAXN];
	int warp = threadIdx.x >> 5, per = (blockDim.x >> 5) / wpr;
	int r = blockIdx.x * per + warp / wpr;
	kk_inv_rms(inv, x, n, cols, eps, red);
	kk_dots2<DT, false>(part, xs, x, g, inv, w, r, w, r, r < rows, n, cols, chunk, wpr);
	int t = threadIdx.x;
	if (t >= per * n)
		return;
	int lu = t / n, j = t - lu * n;
	r = blockIdx.x * per + lu;
	if (r < rows)
		out[(long long)j * rows + r] = kk_unit_sum(part, lu * wpr, wpr, 0, j);
}

#define KK_FUSED(DT, sfx, T)                                                                                        \
	KK_KERNEL void __launch_bounds__(256)                                                                            \
	    norm_qkv_##sfx(float *q, float *k, float *v, const float *x, const float *g, float eps, const T *wq,          \
	                   const T *wk, const T *wv, const float *bq, const float *bk, const float *bv, int n, int heads,    \
	                   int kv_heads, int d, int cols, int start, const int *pos, const float *cos, const float *sin,     \
	                   const kk_u64 *tab, int row, int fmt, int chunk, int wpr, const kk_u64 *step, const float *qn,    \
	                   const float *kn, int *cnt) {                                                                     \
		kk_norm_qkv<DT>(q, k, v, x, g, eps, wq, wk, wv, bq, bk, bv, n, heads, kv_heads, d, cols, start, pos, cos, sin,\
		                tab, row, fmt, chunk, wpr, step, qn, kn, cnt);                                                 \
	}                                                                                                                \
	KK_KERNEL void __launch_bounds__(256)                                                                            \
	    norm_swiglu_##sfx(float *out, const float *x, const float *g, float eps, const T *wg, const T *wu,            \
	                      const float *bg, const float *bu, int n, int rows, int cols, int chunk, int wpr, int act) {   \
		kk_norm_swiglu<DT>(out, x, g, eps, wg, wu, bg, bu, n, rows, cols, chunk, wpr, act);                          \
	}                                                                                                                \
	KK_KERNEL void __launch_bounds__(256) matvec_add_##sfx(float *acc, const float *x, const T *w, const float *bias, \
	                                                       int n, int rows, int cols, int chunk, int wpr) {          \
		kk_matvec_add<DT>(acc, x, w, bias, n, rows, cols, chunk, wpr);                                               \
	}                                                                                                                \
	KK_KERNEL void __launch_bounds__(256) norm_matvec_##sfx(float *out, const float *x, const float *g, float eps,   \
	                                                        const T *w, int n, int rows, int cols, int chunk,       \
	                                                        int wpr) {                                               \
		kk_norm_matvec<DT>(out, x, g, eps, w, n, rows, cols, chunk, wpr);                                            \
	}
KK_FUSED(kkF32, f32, float)
KK_FUSED(kkBF16, bf16, kk_u16)
KK_FUSED(kkF16, f16, kk_u16)
