// Element-wise and row-wise kernels: embedding lookup, RMSNorm, bias and
// residual adds, SwiGLU's silu(gate)*up, RoPE and the KV cache's writes. Each mirrors the
// operation of compute/reference in float32 arithmetic. Launch geometry is
// compute/cudabackend/launch.go's.
#include "prelude.cuh"

// Embedding: block i copies table row ids[i], widened to float32.
#define KK_EMBED(name, T, widen)                                                          \
	KK_KERNEL void name(float *__restrict__ out, const T *__restrict__ table,              \
	                    const int *__restrict__ ids, int n, int cols) {                    \
		int i = blockIdx.x;                                                                \
		const T *row = table + (long long)ids[i] * cols;                                   \
		for (int c = threadIdx.x; c < cols; c += blockDim.x)                               \
			out[(long long)i * cols + c] = widen(row[c]);                                  \
	}
KK_DEVICE float kk_f32_id(float v) { return v; }
KK_EMBED(embed_f32, float, kk_f32_id)
KK_EMBED(embed_bf16, kk_u16, kk_bf16)
KK_EMBED(embed_f16, kk_u16, kk_f16)

// kk_block_sum returns the sum of v over the block's threads (a multiple
// of 32, at most 1024) to every thread. red holds 32 floats of shared
// memory; the trailing barrier lets the caller reuse it.
KK_DEVICE float kk_block_sum(float v, float *red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	v = kk_warp_sum(v);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = lane < warps ? red[lane] : 0.0f;
	v = kk_warp_sum(v);
	__syncthreads();
	return v;
}

// kk_inv_rms returns 1/sqrt(mean(row²) + eps) for the block's row of
// cols values, every thread the same: rmsnorm's and rmsnorm_add's scale,
// so that both round the normalised values alike.
KK_DEVICE float kk_inv_rms(const float *row, int cols, float eps, float *red) {
	float ss = 0.0f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		ss += row[c] * row[c];
	ss = kk_block_sum(ss, red);
	return 1.0f / __builtin_sqrtf(ss / (float)cols + eps);
}

// RMSNorm: block r normalises row r. out may be x: every read of the row
// happens before the barrier inside kk_block_sum, every write after it.
KK_KERNEL void rmsnorm(float *out, const float *x, const float *__restrict__ w, int rows, int cols, float eps) {
	__shared__ float red[32];
	const float *row = x + (long long)blockIdx.x * cols;
	float inv = kk_inv_rms(row, cols, eps, red);
	float *o = out + (long long)blockIdx.x * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		o[c] = row[c] * inv * w[c];
}

// rmsnorm_add: acc += RMSNorm(x) by w, row by row (block r: row r), the
// normalised values rounded as rmsnorm writes them: Gemma's sandwich norm
// of a layer's attention or MLP output and the residual add in one.
KK_KERNEL void rmsnorm_add(float *__restrict__ acc, const float *__restrict__ x, const float *__restrict__ w, int rows,
                           int cols, float eps) {
	__shared__ float red[32];
	const float *row = x + (long long)blockIdx.x * cols;
	float inv = kk_inv_rms(row, cols, eps, red);
	float *a = acc + (long long)blockIdx.x * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		a[c] += row[c] * inv * w[c];
}

KK_KERNEL void add_rows(float *__restrict__ x, const float *__restrict__ bias, int rows, int cols) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < rows * cols)
		x[i] += bias[i % cols];
}

KK_KERNEL void add(float *__restrict__ x, const float *__restrict__ y, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] += y[i];
}

// silu(g)*u = g/(1+e^-g)*u.
KK_KERNEL void silu_mul(float *__restrict__ gate, const float *__restrict__ up, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float g = gate[i];
		gate[i] = g / (1.0f + kk_exp(-g)) * up[i];
	}
}

// gelu_tanh(g)*u (Gemma's GeGLU), kk_gelu_tanh's formula.
KK_KERNEL void gelu_tanh_mul(float *__restrict__ gate, const float *__restrict__ up, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		gate[i] = kk_gelu_tanh(gate[i]) * up[i];
}

// x *= s (Gemma's embedding scale).
KK_KERNEL void scalar_mul(float *__restrict__ x, float s, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= s;
}

// x = c tanh(x/c) (Gemma 2's final logit softcap), kk_softcap's formula.
KK_KERNEL void softcap(float *__restrict__ x, float c, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = kk_softcap(x[i], c);
}

// RoPE, rotate-half pairing: thread t turns the pair (x[j], x[j+d/2]) of
// one head of one row by the angle of frequency j at the row's position.
KK_KERNEL void rope(float *__restrict__ x, int rows, int heads, int d, int start,
                    const float *__restrict__ cos, const float *__restrict__ sin) {
	int half = d >> 1;
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= rows * heads * half)
		return;
	int j = t % half, rh = t / half, r = rh / heads;
	float *v = x + (long long)rh * d;
	int p = (start + r) * half + j;
	float c = cos[p], s = sin[p];
	float a = v[j], b = v[j + half];
	v[j] = a * c - b * s;
	v[j + half] = b * c + a * s;
}

// kk_f32_to_bf16 rounds to the nearest bfloat16, ties to even, as
// compute.F32ToBF16: a NaN stays a NaN (quiet, sign kept) rather than
// rounding into an infinity.
KK_DEVICE kk_u16 kk_f32_to_bf16(float f) {
	kk_u32 u = kk_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (kk_u16)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (kk_u16)(u >> 16);
}

// KV-cache writes: entry e of the table (blockIdx.y) copies rows rows of d
// values, row r from src_e + r*stride, to rows row.. of the hot part at
// dst_e, float32 (fmt 0) or rounded to bf16 (fmt 1). tab holds n part
// addresses, then n source addresses: every KV head's keys and values of
// a layer in one launch, with the table unchanged while the rows move
// through a block.
KK_KERNEL void kv_write(const kk_u64 *__restrict__ tab, int n, int row, int rows, int d, int stride, int fmt) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= rows * d)
		return;
	int e = blockIdx.y, r = i / d, c = i - r * d;
	float v = ((const float *)tab[n + e])[(long long)r * stride + c];
	long long at = (long long)(row + r) * d + c;
	if (fmt == 0)
		((float *)tab[e])[at] = v;
	else
		((kk_u16 *)tab[e])[at] = kk_f32_to_bf16(v);
}

// copy_runs copies n runs of 32-bit words in stream order, from the
// backend's step parameters to device tables that launches queued after it
// read (a layer's block table when a block starts or is encoded): run r
// (blockIdx.x) is the 16-byte record runs[2r], runs[2r+1]: its destination,
// then its word count in the low 32 bits and where its words lie in the
// high 32, counted in words from runs. A table so updated costs the host no
// synchronous copy behind the queued work.
KK_KERNEL void copy_runs(const kk_u64 *__restrict__ runs, int n) {
	if ((int)blockIdx.x >= n)
		return;
	kk_u32 *dst = (kk_u32 *)runs[2 * blockIdx.x];
	kk_u64 w = runs[2 * blockIdx.x + 1];
	int words = (int)(w & 0xffffffffu);
	const kk_u32 *src = (const kk_u32 *)runs + (w >> 32);
	for (int i = threadIdx.x; i < words; i += blockDim.x)
		dst[i] = src[i];
}

// kv_write_runs is kv_write for several runs of writes at once (a step's
// sequences, each at its own cache row): run z (blockIdx.z) takes its
// table and row from the 16-byte slot z of the backend's step parameters
// at slots (the table's address, then the row as int32), so that the
// launch is the same from one step to the next. Every run has n parts of
// rows rows.
KK_KERNEL void kv_write_runs(const kk_u64 *__restrict__ slots, int n, int rows, int d, int stride, int fmt) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= rows * d)
		return;
	const kk_u64 *tab = (const kk_u64 *)slots[2 * blockIdx.z];
	int row = ((const int *)slots)[4 * blockIdx.z + 2];
	int e = blockIdx.y, r = i / d, c = i - r * d;
	float v = ((const float *)tab[n + e])[(long long)r * stride + c];
	long long at = (long long)(row + r) * d + c;
	if (fmt == 0)
		((float *)tab[e])[at] = v;
	else
		((kk_u16 *)tab[e])[at] = kk_f32_to_bf16(v);
}
