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
// Decode (n <= 8 rows a launch) quantizes x to 8 bits first and takes
// matvec_q8_<t>, integer dot products 4 codes at a time (see "decode: q8
// activations and dp4a" below). matmul_q_<t> (prefill, any n): matmul's
// 64 x 64 tiles with a k-step of one unit, the 64 weight rows' units
// widened into shared memory by 64 threads; with 16-bit prefill GEMMs on
// (the default), dequant_q_<t> widens the weight to bf16 in a bounded
// scratch for them instead. embed_q_<t>: rows of a quantized table.
#include "prelude.cuh"
#include "qformats.h"

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

// ---- decode: q8 activations and dp4a ------------------------------------
//
// Decode's products quantize x first, as the CPU backend does
// (kernels/cpu/quant.go, ggml's q8 activations): quant_x_q8_0 for Q8_0,
// Q4_0 and Q5_0 weights (32 values to an int8 code each and a scale,
// amax/127 rounded to f16; codes round(x/scale) with the unrounded scale,
// halves away from zero), quant_x_q8_k for the K types (256 values to a
// scale that maps the value of largest magnitude to -127, codes rounded
// to the nearest, ties to even, capped at 127, and the sum of each 16
// codes). matvec_q8_<t> then multiplies 4 codes at a time (kk_dp4a), one
// warp per output row and a lane per 32-value unit, and scales each
// block's integer dot product exactly as the CPU kernels do: Q*_0 per
// block float(dot) * (d_w * d_x), the K types per 256-value super-block,
// whose 8 units' integer sums the 8 lanes add by shuffles first, d_w * d_x
// * float(sumi) (less dmin_w * d_x * float(mins) for Q4_K and Q5_K), every
// product rounded once (kk_mul_rn). A block's term is therefore the CPU's
// bit for bit, and an output differs from the CPU's only in the order its
// float32 sum adds the terms.

// kk_round_away is C's roundf: to the nearest integer, halves away from
// zero (v - trunc(v) is exact).
KK_DEVICE float kk_round_away(float v) {
	float t = __builtin_truncf(v);
	if (__builtin_fabsf(v - t) >= 0.5f)
		t += v < 0.0f ? -1.0f : 1.0f;
	return t;
}

// quant_x_q8_0: one warp per 32 values (blocks of them in all), a lane a
// value; d gets the f16-rounded scale, widened.
KK_DEVICE void kk_quant_x_q8_0(kk_i8 *__restrict__ qs, float *__restrict__ d, const float *__restrict__ x,
                               int blocks) {
	int lane = threadIdx.x & 31;
	long long b = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (b >= blocks)
		return; // the whole warp
	float v = x[32 * b + lane];
	float amax = kk_warp_max(__builtin_fabsf(v));
	float s = amax / 127.0f;
	float id = s != 0.0f ? 1.0f / s : 0.0f;
	qs[32 * b + lane] = (kk_i8)(int)kk_round_away(v * id);
	if (lane == 0)
		d[b] = kk_f16(kk_f16_bits(s));
}

// quant_x_q8_k: one warp per 256 values, 8 consecutive ones a lane. The
// value of largest magnitude is the first such (the CPU's strict >), so
// the warp reduces (magnitude, index) pairs and takes the value from the
// lane that holds it.
KK_DEVICE void kk_quant_x_q8_k(kk_i8 *__restrict__ qs, float *__restrict__ d, int *__restrict__ bsums,
                               const float *__restrict__ x, int blocks) {
	int lane = threadIdx.x & 31;
	long long b = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (b >= blocks)
		return; // the whole warp
	const float *xb = x + 256 * b + 8 * lane;
	float v[8];
	float amax = 0.0f, mx = 0.0f;
	int at = 8 * lane;
#pragma unroll
	for (int k = 0; k < 8; k++) {
		v[k] = xb[k];
		float a = __builtin_fabsf(v[k]);
		if (a > amax) {
			amax = a;
			mx = v[k];
			at = 8 * lane + k;
		}
	}
	for (int o = 16; o > 0; o >>= 1) {
		float oa = __shfl_xor_sync(0xffffffffu, amax, o);
		int oat = __shfl_xor_sync(0xffffffffu, at, o);
		if (oa > amax || (oa == amax && oat < at)) {
			amax = oa;
			at = oat;
		}
	}
	mx = __shfl_sync(0xffffffffu, mx, at >> 3);
	kk_u32 w[2] = {0, 0};
	int sum = 0;
	float iscale = amax != 0.0f ? -127.0f / mx : 0.0f;
	if (amax != 0.0f) {
#pragma unroll
		for (int k = 0; k < 8; k++) {
			int q = (int)__builtin_rintf(iscale * v[k]);
			q = q < 127 ? q : 127;
			sum += q;
			w[k >> 2] |= (kk_u32)(q & 0xff) << (8 * (k & 3));
		}
	}
	kk_u32 *o = (kk_u32 *)(qs + 256 * b + 8 * lane);
	o[0] = w[0];
	o[1] = w[1];
	sum += __shfl_xor_sync(0xffffffffu, sum, 1);
	if ((lane & 1) == 0)
		bsums[16 * b + (lane >> 1)] = sum;
	if (lane == 0)
		d[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
}

static_assert(KK_Q_Q4_K_BYTES % 16 == 0 && KK_Q_Q4_K_QS % 16 == 0 && KK_Q_Q5_K_BYTES % 16 == 0 &&
                  KK_Q_Q5_K_QS % 16 == 0 && KK_Q_Q5_K_QH % 16 == 0,
              "kk_q8_codes reads Q4_K and Q5_K codes 16 bytes at a time");

// kk_bsub4 subtracts s (at most 32) from each of v's four bytes (each at
// most 127), giving signed bytes, with no borrow between them.
KK_DEVICE kk_u32 kk_bsub4(kk_u32 v, kk_u32 s) { return ((v | 0x80808080u) - s * 0x01010101u) ^ 0x80808080u; }

// kk_spread4 moves bits 0..3 of h to bit 0 of bytes 0..3.
KK_DEVICE kk_u32 kk_spread4(kk_u32 h) { return ((h & 15u) * 0x00204081u) & 0x01010101u; }

// kk_q8_codes reads unit u of a row as the CPU's integer dot products see
// it: c holds its 32 signed codes (value k in byte k%4 of c[k/4]; Q6_K's
// without their offset of 32, which matvec_q8 subtracts through x's sums); d (and
// dmin) the block's f16 scales; sc0 the integer scale of the unit (Q6_K:
// of its first 16 values, sc1 of the last 16); m Q4_K's and Q5_K's 6-bit
// min.
// kk_q8_h16 reads an f16 field of a block: every block and field of the
// quantized formats is 2-byte aligned (even sizes and offsets).
KK_DEVICE float kk_q8_h16(const unsigned char *p) { return kk_f16_cvt(*(const kk_u16 *)p); }

template <int QT>
KK_DEVICE void kk_q8_codes(const unsigned char *row, int u, kk_u32 *c, float &d, float &dmin, int &sc0, int &sc1,
                           int &m) {
	constexpr int per = kk_q_block<QT>() / 32;
	const unsigned char *b = row + (long long)(u / per) * kk_q_bytes<QT>();
	int s = u % per;
	dmin = 0.0f;
	sc0 = sc1 = 1;
	m = 0;
	if (QT == KK_Q_Q8_0) {
		d = kk_q8_h16(b + KK_Q_Q8_0_D);
		kk_q_load<8, 2>(b + KK_Q_Q8_0_QS, c);
	} else if (QT == KK_Q_Q4_0) {
		d = kk_q8_h16(b + KK_Q_Q4_0_D);
		kk_u32 qs[4];
		kk_q_load<4, 2>(b + KK_Q_Q4_0_QS, qs);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			c[k] = kk_bsub4(qs[k] & 0x0f0f0f0fu, 8);
			c[k + 4] = kk_bsub4(qs[k] >> 4 & 0x0f0f0f0fu, 8);
		}
	} else if (QT == KK_Q_Q5_0) {
		d = kk_q8_h16(b + KK_Q_Q5_0_D);
		const kk_u16 *h = (const kk_u16 *)(b + KK_Q_Q5_0_QH);
		kk_u32 qh = (kk_u32)h[0] | (kk_u32)h[1] << 16; // bit v: value v's fifth bit
		kk_u32 qs[4];
		kk_q_load<4, 2>(b + KK_Q_Q5_0_QS, qs);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			c[k] = kk_bsub4((qs[k] & 0x0f0f0f0fu) | kk_spread4(qh >> 4 * k) << 4, 16);
			c[k + 4] = kk_bsub4((qs[k] >> 4 & 0x0f0f0f0fu) | kk_spread4(qh >> (16 + 4 * k)) << 4, 16);
		}
	} else if (QT == KK_Q_Q4_K || QT == KK_Q_Q5_K) {
		const int D = QT == KK_Q_Q4_K ? KK_Q_Q4_K_D : KK_Q_Q5_K_D;
		const int DMIN = QT == KK_Q_Q4_K ? KK_Q_Q4_K_DMIN : KK_Q_Q5_K_DMIN;
		const int SC = QT == KK_Q_Q4_K ? KK_Q_Q4_K_SCALES : KK_Q_Q5_K_SCALES;
		const int QS = QT == KK_Q_Q4_K ? KK_Q_Q4_K_QS : KK_Q_Q5_K_QS;
		const unsigned char *q = b + SC;
		if (s < 4) {
			sc0 = q[s] & 63;
			m = q[s + 4] & 63;
		} else {
			sc0 = (q[s + 4] & 15) | (q[s - 4] >> 6) << 4;
			m = (q[s + 4] >> 4) | (q[s] >> 6) << 4;
		}
		d = kk_q8_h16(b + D);
		dmin = kk_q8_h16(b + DMIN);
		// Blocks of 144 and 176 bytes, codes and qh at multiples of 16 from
		// a 256-byte aligned weight: 16-byte loads.
		kk_u32x4 v0 = kk_ldw16(b + QS + 32 * (s >> 1)), v1 = kk_ldw16(b + QS + 32 * (s >> 1) + 16);
		int shift = (s & 1) * 4;
		kk_u32 qh[8];
		if (QT == KK_Q_Q5_K) {
			kk_u32x4 h0 = kk_ldw16(b + KK_Q_Q5_K_QH), h1 = kk_ldw16(b + KK_Q_Q5_K_QH + 16);
#pragma unroll
			for (int k = 0; k < 4; k++) {
				qh[k] = h0[k];
				qh[k + 4] = h1[k];
			}
		}
#pragma unroll
		for (int k = 0; k < 4; k++) {
			c[k] = v0[k];
			c[k + 4] = v1[k];
		}
#pragma unroll
		for (int k = 0; k < 8; k++) {
			c[k] = c[k] >> shift & 0x0f0f0f0fu;
			if (QT == KK_Q_Q5_K)
				c[k] |= (qh[k] >> s & 0x01010101u) << 4;
		}
	} else {
		// Q6_K: half s/4 of the super-block (128 values), quarter t = s%4:
		// the low (t < 2) or high nibbles of ql[l + 32*(t&1)], bits 2t of
		// qh[l], scales 2t and 2t+1 of the half's 8 (16 values each).
		int half = s >> 2, t = s & 3;
		kk_u32 ql[8], qh[8];
		kk_q_load<8, 2>(b + KK_Q_Q6_K_QL + 64 * half + 32 * (t & 1), ql);
		kk_q_load<8, 2>(b + KK_Q_Q6_K_QH + 32 * half, qh);
		const unsigned char *sc = b + KK_Q_Q6_K_SCALES + 8 * half + 2 * t;
		d = kk_q8_h16(b + KK_Q_Q6_K_D);
		sc0 = (signed char)sc[0];
		sc1 = (signed char)sc[1];
		int shift = (t >> 1) * 4;
		// The codes as stored, 0..63: matvec_q8 takes the offset of 32 off
		// the dot product through x's sums of 16.
#pragma unroll
		for (int k = 0; k < 8; k++)
			c[k] = (ql[k] >> shift & 0x0f0f0f0fu) | (qh[k] >> 2 * t & 0x03030303u) << 4;
	}
}

// kk_q_unit widens unit u of a row (values 32u .. 32u+31) into v, from
// the codes kk_q8_codes reads: Q*_0's code times the block's scale; Q4_K's
// and Q5_K's d·scale times the code less dmin·min; Q6_K's d·scale of its
// 16 values times the code less its offset of 32 (tensor.DequantizeRow's
// products and differences).
template <int QT> KK_DEVICE void kk_q_unit(const unsigned char *row, int u, float *v) {
	kk_u32 c[8];
	float d, dmin;
	int sc0, sc1, m;
	kk_q8_codes<QT>(row, u, c, d, dmin, sc0, sc1, m);
	if (QT == KK_Q_Q8_0 || QT == KK_Q_Q4_0 || QT == KK_Q_Q5_0) {
#pragma unroll
		for (int l = 0; l < 32; l++)
			v[l] = (float)(signed char)kk_q_byte(c, l) * d;
	} else if (QT == KK_Q_Q4_K || QT == KK_Q_Q5_K) {
		float d1 = d * (float)sc0, m1 = dmin * (float)m;
#pragma unroll
		for (int l = 0; l < 32; l++)
			v[l] = d1 * (float)kk_q_byte(c, l) - m1;
	} else {
		float d0 = d * (float)sc0, d1 = d * (float)sc1;
#pragma unroll
		for (int l = 0; l < 32; l++)
			v[l] = (l < 16 ? d0 : d1) * (float)(kk_q_byte(c, l) - 32);
	}
}

// matvec_q8: out (n <= 8 rows of rows) = the quantized x (qx, dx, and for
// the K types bsums; quant_x_q8_*) times w transposed. One warp per output
// row; a lane per unit, 32 consecutive units a warp step, each unit's
// weight codes unpacked once for the n input rows.
template <int QT>
KK_DEVICE void kk_matvec_q8(float *__restrict__ out, const kk_i8 *__restrict__ qx, const float *__restrict__ dx,
                            const int *__restrict__ bsums, const unsigned char *__restrict__ w, int n, int rows,
                            int cols) {
	constexpr bool K = kk_q_block<QT>() == 256;
	int lane = threadIdx.x & 31;
	int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (row >= rows)
		return; // the whole warp
	int units = cols / 32;
	const unsigned char *wr = w + (long long)row * (cols / kk_q_block<QT>()) * kk_q_bytes<QT>();
	float acc[KK_MAXN];
#pragma unroll
	for (int j = 0; j < KK_MAXN; j++)
		acc[j] = 0.0f;
	for (int u0 = 0; u0 < units; u0 += 32) {
		int u = u0 + lane;
		bool ok = u < units; // a K row's units are whole super-blocks: lanes drop out 8 at a time
		kk_u32 c[8];
		float d = 0.0f, dmin = 0.0f;
		int sc0 = 0, sc1 = 0, m = 0;
		if (ok) {
			kk_q8_codes<QT>(wr, u, c, d, dmin, sc0, sc1, m);
		} else {
#pragma unroll
			for (int k = 0; k < 8; k++)
				c[k] = 0;
		}
		int uu = ok ? u : 0;
#pragma unroll
		for (int j = 0; j < KK_MAXN; j++) {
			if (j >= n)
				continue; // n is the same for every lane: a uniform branch
			// 16-byte loads: the scratch is 256-byte aligned, rows whole units.
			const kk_i8 *xp = qx + (long long)j * cols + 32 * uu;
			kk_u32x4 x0 = kk_ldw16(xp), x1 = kk_ldw16(xp + 16);
			int d0 = 0, d1 = 0;
#pragma unroll
			for (int k = 0; k < 4; k++) {
				d0 = kk_dp4a((int)c[k], (int)x0[k], d0);
				d1 = kk_dp4a((int)c[k + 4], (int)x1[k], d1);
			}
			if (!K) {
				if (ok)
					acc[j] += kk_mul_rn((float)(d0 + d1), kk_mul_rn(d, dx[(long long)j * units + u]));
				continue;
			}
			int is = 0, im = 0;
			if (ok) {
				const int *bs = bsums + (long long)j * (cols / 16) + 2 * u;
				if (QT == KK_Q_Q6_K) {
					// sum (q - 32) x = sum q x - 32 sum x, per 16 values:
					// the same integer as the CPU's.
					is = sc0 * (d0 - 32 * bs[0]) + sc1 * (d1 - 32 * bs[1]);
				} else {
					is = sc0 * (d0 + d1);
					im = m * (bs[0] + bs[1]);
				}
			}
#pragma unroll
			for (int o = 1; o < 8; o <<= 1) {
				is += __shfl_xor_sync(0xffffffffu, is, o);
				if (QT != KK_Q_Q6_K)
					im += __shfl_xor_sync(0xffffffffu, im, o);
			}
			if (ok && (lane & 7) == 0) {
				float xd = dx[(long long)j * (cols / 256) + u / 8];
				float t = kk_mul_rn(kk_mul_rn(d, xd), (float)is);
				if (QT != KK_Q_Q6_K)
					t -= kk_mul_rn(kk_mul_rn(dmin, xd), (float)im);
				acc[j] += t;
			}
		}
	}
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
	KK_KERNEL void __launch_bounds__(256) matvec_q8_##name(float *out, const kk_i8 *qx, const float *dx,           \
	                                                       const int *bsums, const unsigned char *w, int n,        \
	                                                       int rows, int cols) {                                   \
		kk_matvec_q8<QT>(out, qx, dx, bsums, w, n, rows, cols);                                                \
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
KK_KERNEL void __launch_bounds__(256) quant_x_q8_0(kk_i8 *qs, float *d, const float *x, int blocks) {
	kk_quant_x_q8_0(qs, d, x, blocks);
}
KK_KERNEL void __launch_bounds__(256) quant_x_q8_k(kk_i8 *qs, float *d, int *bsums, const float *x, int blocks) {
	kk_quant_x_q8_k(qs, d, bsums, x, blocks);
}
KK_QUANT_KERNELS(q8_0, KK_Q_Q8_0)
KK_QUANT_KERNELS(q4_0, KK_Q_Q4_0)
KK_QUANT_KERNELS(q5_0, KK_Q_Q5_0)
KK_QUANT_KERNELS(q4_k, KK_Q_Q4_K)
KK_QUANT_KERNELS(q5_k, KK_Q_Q5_K)
KK_QUANT_KERNELS(q6_k, KK_Q_Q6_K)
