// Products with quantized weights (llama.cpp's block types Q8_0, Q4_0,
// Q5_0, Q4_K, Q5_K, Q6_K), read in their stored blocks and widened inside
// the kernels: out (n x rows) = x (n x cols) * w^T in float32. The block
// layouts come from qformats.h, generated from tensor/quant.go. A row of w
// is cols/block blocks; every kernel works on "units" of 32 consecutive
// values of a row (a Q*_0 block, or one of the eight 32-value sub-blocks
// of a K super-block), which kk_q_unit widens exactly as
// tensor.DequantizeRow does (the same float32 products and differences,
// though the device may fuse a multiply and an add).
//
// matvec_q_<t> (decode, n <= 8): one warp per output row, each lane a unit
// at a time (32 lanes: 32 consecutive units, so a warp's loads cover a run
// of the row); x is staged in shared memory with one float of padding per
// 32 values, so the 32 lanes' reads of their units' values fall in 32
// different banks. matmul_q_<t> (prefill, any n): matmul's 64 x 64 tiles
// with a k-step of one unit, the 64 weight rows' units widened into shared
// memory by 64 threads; with 16-bit prefill GEMMs on (the default),
// dequant_q_<t> widens the weight to bf16 in a bounded scratch for them
// instead. embed_q_<t>: rows of a quantized table.
#include "prelude.cuh"
#include "qformats.h"

// kk_qh16 reads a little-endian f16 at b (blocks are byte-aligned).
KK_DEVICE float kk_qh16(const unsigned char *b) { return kk_f16((kk_u16)(b[0] | b[1] << 8)); }

// kk_q_load copies the 4*N bytes at p into r, 4 to a word (little-endian),
// with loads of A bytes (4 or 2), so that a unit's codes take 8 or 16
// loads rather than 32. A block's fields keep the alignment its format
// allows, since a weight starts 256-byte aligned (Upload's allocation) and
// rows and blocks are whole: 4 bytes for Q4_K and Q5_K (blocks of 144 and
// 176 bytes, codes at multiples of 16), 2 for the others (blocks of an
// even number of bytes). kk_q_byte reads byte l of r.
template <int N, int A> KK_DEVICE void kk_q_load(const unsigned char *p, kk_u32 *r) {
	if (A == 4) {
#pragma unroll
		for (int k = 0; k < N; k++)
			r[k] = ((const kk_u32 *)p)[k];
	} else {
#pragma unroll
		for (int k = 0; k < N; k++)
			r[k] = (kk_u32)((const kk_u16 *)p)[2 * k] | (kk_u32)((const kk_u16 *)p)[2 * k + 1] << 16;
	}
}
#define kk_q_byte(r, l) ((int)(((r)[(l) >> 2] >> (8 * ((l) & 3))) & 0xffu))

// kk_q_block and kk_q_bytes are a type's values and bytes per block.
template <int QT> KK_DEVICE constexpr int kk_q_block() {
	return QT == KK_Q_Q8_0   ? KK_Q_Q8_0_BLOCK
	       : QT == KK_Q_Q4_0 ? KK_Q_Q4_0_BLOCK
	       : QT == KK_Q_Q5_0 ? KK_Q_Q5_0_BLOCK
	       : QT == KK_Q_Q4_K ? KK_Q_Q4_K_BLOCK
	       : QT == KK_Q_Q5_K ? KK_Q_Q5_K_BLOCK
	                         : KK_Q_Q6_K_BLOCK;
}
template <int QT> KK_DEVICE constexpr int kk_q_bytes() {
	return QT == KK_Q_Q8_0   ? KK_Q_Q8_0_BYTES
	       : QT == KK_Q_Q4_0 ? KK_Q_Q4_0_BYTES
	       : QT == KK_Q_Q5_0 ? KK_Q_Q5_0_BYTES
	       : QT == KK_Q_Q4_K ? KK_Q_Q4_K_BYTES
	       : QT == KK_Q_Q5_K ? KK_Q_Q5_K_BYTES
	                         : KK_Q_Q6_K_BYTES;
}

// kk_q_unit widens unit u of a row (values 32u .. 32u+31) into v.
template <int QT> KK_DEVICE void kk_q_unit(const unsigned char *row, int u, float *v) {
	constexpr int per = kk_q_block<QT>() / 32;
	const unsigned char *b = row + (long long)(u / per) * kk_q_bytes<QT>();
	int s = u % per;
	if (QT == KK_Q_Q8_0) {
		float d = kk_qh16(b + KK_Q_Q8_0_D);
		kk_u32 qs[8];
		kk_q_load<8, 2>(b + KK_Q_Q8_0_QS, qs);
#pragma unroll
		for (int j = 0; j < 32; j++)
			v[j] = (float)(signed char)kk_q_byte(qs, j) * d;
	} else if (QT == KK_Q_Q4_0) {
		float d = kk_qh16(b + KK_Q_Q4_0_D);
		kk_u32 qs[4];
		kk_q_load<4, 2>(b + KK_Q_Q4_0_QS, qs);
#pragma unroll
		for (int j = 0; j < 16; j++) {
			int q = kk_q_byte(qs, j);
			v[j] = (float)((q & 15) - 8) * d;
			v[j + 16] = (float)((q >> 4) - 8) * d;
		}
	} else if (QT == KK_Q_Q5_0) {
		float d = kk_qh16(b + KK_Q_Q5_0_D);
		const unsigned char *h = b + KK_Q_Q5_0_QH;
		kk_u32 qh = (kk_u32)h[0] | (kk_u32)h[1] << 8 | (kk_u32)h[2] << 16 | (kk_u32)h[3] << 24;
		kk_u32 qs[4];
		kk_q_load<4, 2>(b + KK_Q_Q5_0_QS, qs);
#pragma unroll
		for (int j = 0; j < 16; j++) {
			int q = kk_q_byte(qs, j);
			int h0 = (qh >> j << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
			v[j] = (float)(((q & 15) | h0) - 16) * d;
			v[j + 16] = (float)(((q >> 4) | h1) - 16) * d;
		}
	} else if (QT == KK_Q_Q4_K || QT == KK_Q_Q5_K) {
		// Sub-block s: scale/min pair s of the 12 packed bytes
		// (get_scale_min_k4), the low (even s) or high nibbles of the 32
		// bytes at 32*(s/2), and for Q5_K bit s of each qh byte.
		const int D = QT == KK_Q_Q4_K ? KK_Q_Q4_K_D : KK_Q_Q5_K_D;
		const int DMIN = QT == KK_Q_Q4_K ? KK_Q_Q4_K_DMIN : KK_Q_Q5_K_DMIN;
		const int SC = QT == KK_Q_Q4_K ? KK_Q_Q4_K_SCALES : KK_Q_Q5_K_SCALES;
		const int QS = QT == KK_Q_Q4_K ? KK_Q_Q4_K_QS : KK_Q_Q5_K_QS;
		const unsigned char *q = b + SC;
		int sc, m;
		if (s < 4) {
			sc = q[s] & 63;
			m = q[s + 4] & 63;
		} else {
			sc = (q[s + 4] & 15) | (q[s - 4] >> 6) << 4;
			m = (q[s + 4] >> 4) | (q[s] >> 6) << 4;
		}
		float d1 = kk_qh16(b + D) * (float)sc, m1 = kk_qh16(b + DMIN) * (float)m;
		kk_u32 ql[8], qh[8];
		kk_q_load<8, 4>(b + QS + 32 * (s >> 1), ql);
		if (QT == KK_Q_Q5_K)
			kk_q_load<8, 4>(b + KK_Q_Q5_K_QH, qh);
		int shift = (s & 1) * 4;
#pragma unroll
		for (int l = 0; l < 32; l++) {
			int x = (kk_q_byte(ql, l) >> shift) & 15;
			if (QT == KK_Q_Q5_K)
				x += ((kk_q_byte(qh, l) >> s) & 1) << 4;
			v[l] = d1 * (float)x - m1;
		}
	} else {
		// Q6_K: half s/4 of the super-block (128 values), quarter t = s%4:
		// the low (t < 2) or high nibbles of ql[l + 32*(t&1)], bits 2t of
		// qh[l], scale 2t + l/16 of the half's 8.
		int half = s >> 2, t = s & 3;
		kk_u32 ql[8], qh[8];
		kk_q_load<8, 2>(b + KK_Q_Q6_K_QL + 64 * half + 32 * (t & 1), ql);
		kk_q_load<8, 2>(b + KK_Q_Q6_K_QH + 32 * half, qh);
		const unsigned char *sc = b + KK_Q_Q6_K_SCALES + 8 * half + 2 * t;
		float d = kk_qh16(b + KK_Q_Q6_K_D);
		float d0 = d * (float)(signed char)sc[0], d1 = d * (float)(signed char)sc[1];
		int shift = (t >> 1) * 4;
#pragma unroll
		for (int l = 0; l < 32; l++) {
			int x = (((kk_q_byte(ql, l) >> shift) & 15) | ((kk_q_byte(qh, l) >> (2 * t)) & 3) << 4) - 32;
			v[l] = (l < 16 ? d0 : d1) * (float)x;
		}
	}
}

// The staged x of matvec_q: value c of input row j at xs[j*pitch + c +
// c/32], pitch = chunk + chunk/32.
KK_DEVICE int kk_q_pad(int c) { return c + (c >> 5); }

template <int QT>
KK_DEVICE void kk_matvec_q(float *__restrict__ out, const float *__restrict__ x, const unsigned char *__restrict__ w,
                           int n, int rows, int cols, int chunk) {
	KK_DYN_SHARED(float, xs);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	int row = blockIdx.x * warps + warp;
	bool live = row < rows;
	int pitch = kk_q_pad(chunk);
	long long rowBytes = (long long)(cols / kk_q_block<QT>()) * kk_q_bytes<QT>();
	const unsigned char *wr = w + (long long)(live ? row : 0) * rowBytes;
	float acc[KK_MAXN];
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++)
		acc[j] = 0.0f;
	for (int c0 = 0; c0 < cols; c0 += chunk) {
		int len = cols - c0 < chunk ? cols - c0 : chunk;
		__syncthreads(); // the previous chunk is consumed
		for (int i = threadIdx.x; i < n * len; i += blockDim.x) {
			int j = i / len, c = i - j * len;
			xs[j * pitch + kk_q_pad(c)] = x[(long long)j * cols + c0 + c];
		}
		__syncthreads();
		if (!live)
			continue;
		for (int u = lane; u < len / 32; u += 32) {
			float v[32];
			kk_q_unit<QT>(wr, c0 / 32 + u, v);
#pragma unroll
			for (int j = 0; j < KK_MAXN; j++) {
				if (j < n) {
					const float *xr = xs + j * pitch + 33 * u;
					float s = 0.0f;
#pragma unroll
					for (int k = 0; k < 32; k++)
						s += v[k] * xr[k];
					acc[j] += s;
				}
			}
		}
	}
	if (!live)
		return;
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++) {
		if (j < n) {
			float s = kk_warp_sum(acc[j]);
			if (lane == 0)
				out[(long long)j * rows + row] = s;
		}
	}
}

// matmul_q: see kk_matmul (matvec.cu); the k-step is one unit, whose 32
// values of 64 weight rows threads 0..63 widen into ws.
#define KK_MQ_K 32
template <int QT>
KK_DEVICE void kk_matmul_q(float *__restrict__ out, const float *__restrict__ x, const unsigned char *__restrict__ w,
                           int n, int rows, int cols) {
	__shared__ float xs[KK_MQ_K][KK_MM_T + KK_MM_PAD];
	__shared__ float ws[KK_MQ_K][KK_MM_T + KK_MM_PAD];
	int t = threadIdx.x, tx = t & 15, ty = t >> 4;
	int r0 = blockIdx.x * KK_MM_T, i0 = blockIdx.y * KK_MM_T;
	long long rowBytes = (long long)(cols / kk_q_block<QT>()) * kk_q_bytes<QT>();
	float acc[4][4] = {};
	for (int k0 = 0; k0 < cols; k0 += KK_MQ_K) {
#pragma unroll
		for (int q = 0; q < 8; q++) {
			int e = t + 256 * q, rr = e >> 5, k = e & 31;
			int i = i0 + rr;
			xs[k][rr] = i < n ? x[(long long)i * cols + k0 + k] : 0.0f;
		}
		if (t < KK_MM_T) {
			int r = r0 + t;
			float v[32];
			if (r < rows) {
				kk_q_unit<QT>(w + (long long)r * rowBytes, k0 / 32, v);
			} else {
#pragma unroll
				for (int k = 0; k < 32; k++)
					v[k] = 0.0f;
			}
#pragma unroll
			for (int k = 0; k < 32; k++)
				ws[k][t] = v[k];
		}
		__syncthreads();
#pragma unroll 8
		for (int k = 0; k < KK_MQ_K; k++) {
			kk_tile_mac(acc, xs, ws, k, tx, ty);
		}
		__syncthreads();
	}
	kk_tile_store(out, acc, i0, r0, tx, ty, n, rows);
}

// embed_q: block i widens row ids[i] of the table into row i of out, a
// unit a thread.
template <int QT>
KK_DEVICE void kk_embed_q(float *__restrict__ out, const unsigned char *__restrict__ table, const int *__restrict__ ids,
                          int n, int cols) {
	long long rowBytes = (long long)(cols / kk_q_block<QT>()) * kk_q_bytes<QT>();
	const unsigned char *row = table + (long long)ids[blockIdx.x] * rowBytes;
	float *o = out + (long long)blockIdx.x * cols;
	for (int u = threadIdx.x; u < cols / 32; u += blockDim.x) {
		float v[32];
		kk_q_unit<QT>(row, u, v);
		for (int k = 0; k < 32; k++)
			o[32 * u + k] = v[k];
	}
}

// dequant_q: widens units units of w (consecutive rows' blocks) to bf16,
// rounded to nearest even, a unit a thread: the prefill path's bounded
// scratch for the 16-bit GEMMs (quant.go).
template <int QT>
KK_DEVICE void kk_dequant_q(kk_u16 *__restrict__ out, const unsigned char *__restrict__ w, int cols, int units) {
	long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (u >= units)
		return;
	int per = cols / 32;
	long long row = u / per;
	long long rowBytes = (long long)(cols / kk_q_block<QT>()) * kk_q_bytes<QT>();
	float v[32];
	kk_q_unit<QT>(w + row * rowBytes, (int)(u - row * per), v);
	kk_u32 *o = (kk_u32 *)(out + 32 * u);
#pragma unroll
	for (int k = 0; k < 16; k++)
		o[k] = (kk_u32)kk_f32_to_bf16(v[2 * k]) | (kk_u32)kk_f32_to_bf16(v[2 * k + 1]) << 16;
}

#define KK_QUANT_KERNELS(name, QT)                                                                                     \
	KK_KERNEL void __launch_bounds__(256)                                                                          \
	    matvec_q_##name(float *out, const float *x, const unsigned char *w, int n, int rows, int cols, int chunk) { \
		kk_matvec_q<QT>(out, x, w, n, rows, cols, chunk);                                                      \
	}                                                                                                              \
	KK_KERNEL void __launch_bounds__(256)                                                                          \
	    matmul_q_##name(float *out, const float *x, const unsigned char *w, int n, int rows, int cols) {           \
		kk_matmul_q<QT>(out, x, w, n, rows, cols);                                                             \
	}                                                                                                              \
	KK_KERNEL void __launch_bounds__(256)                                                                          \
	    embed_q_##name(float *out, const unsigned char *table, const int *ids, int n, int cols) {                  \
		kk_embed_q<QT>(out, table, ids, n, cols);                                                              \
	}                                                                                                              \
	KK_KERNEL void __launch_bounds__(256)                                                                          \
	    dequant_q_##name(kk_u16 *out, const unsigned char *w, int cols, int units) {                               \
		kk_dequant_q<QT>(out, w, cols, units);                                                                 \
	}
KK_QUANT_KERNELS(q8_0, KK_Q_Q8_0)
KK_QUANT_KERNELS(q4_0, KK_Q_Q4_0)
KK_QUANT_KERNELS(q5_0, KK_Q_Q5_0)
KK_QUANT_KERNELS(q4_k, KK_Q_Q4_K)
KK_QUANT_KERNELS(q5_k, KK_Q_Q5_K)
KK_QUANT_KERNELS(q6_k, KK_Q_Q6_K)
