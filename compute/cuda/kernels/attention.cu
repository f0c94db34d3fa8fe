// Causal grouped-query attention over a paged KV cache, flash-decoding
// style. The cache is a block table: for block b and KV head g, entry
// b*kv_heads+g holds the device address of the keys' part, of the values'
// part and their formats (hot float32 or bf16 rows, or the exact bytes of
// the int8, int4 or int2 codecs; keys and values may differ). Keys are
// stored before RoPE and rotated here.
//
// attn_split: block (split, g, tile) takes `rows` query-head rows of KV
// head g (row f of the head is query f/group, head g*group + f%group, so
// every head sharing g reads each key and value once) and the KV blocks
// [split*per, (split+1)*per) of the range those queries see. It walks the
// keys 32 at a time (one per lane): the tile is decoded and rotated into
// shared memory, each warp scores its rows against it and updates their
// online softmax (running max, sum and unnormalised output, in registers),
// then the value tile replaces the key tile and is accumulated. With one
// split the result is final; otherwise the partial state goes to scratch
// and attn_combine merges the splits.
#include "prelude.cuh"

enum { kkPartF32, kkPartBF16, kkPartInt8, kkPartInt4, kkPartInt4K, kkPartInt2, kkPartInt2K };

#define KK_AT_TILE 32 // keys per tile, one per lane
#define KK_AT_SLOTS 4 // query-head rows per warp
#define KK_AT_DV 8    // head values per lane: head_dim <= 256

KK_DEVICE float kk_half_at(const kk_u8 *p) { return kk_f16(*(const kk_u16 *)p); }

// kk_part_value returns element (row, col) of a part of bs rows of d
// values. int8 (codec.Int8): after the 16-byte header, one fp16 scale per
// row and group of 32 values, then the int8 codes row-major. int4 and int2
// (codec.Int4, groups of 32, no rotation): after the header, an fp16
// (min, step) pair per group, then the codes row-major as one bit stream,
// least significant bits first. Groups run along each row (int4, int2:
// group row*ceil(d/32) + col/32) or, per channel, along the tokens
// (int4-k, int2-k: group col*ceil(bs/32) + row/32).
KK_DEVICE float kk_part_value(const kk_u8 *p, int fmt, int bs, int d, int row, int col) {
	int i = row * d + col;
	if (fmt == kkPartF32)
		return ((const float *)p)[i];
	if (fmt == kkPartBF16)
		return kk_bf16(((const kk_u16 *)p)[i]);
	const kk_u8 *pl = p + 16;
	if (fmt == kkPartInt8) {
		int groups = (d + 31) >> 5;
		float s = kk_half_at(pl + 2 * (row * groups + (col >> 5)));
		return (float)(kk_i8)pl[2 * bs * groups + i] * s;
	}
	bool channel = fmt == kkPartInt4K || fmt == kkPartInt2K;
	int bits = fmt == kkPartInt2 || fmt == kkPartInt2K ? 2 : 4;
	int per = channel ? (bs + 31) >> 5 : (d + 31) >> 5;
	int k = channel ? col * per + (row >> 5) : row * per + (col >> 5);
	int ngroups = channel ? d * per : bs * per;
	const kk_u8 *mp = pl + 4 * k;
	int bit = i * bits;
	int code = (pl[4 * ngroups + (bit >> 3)] >> (bit & 7)) & ((1 << bits) - 1);
	return kk_half_at(mp) + (float)code * kk_half_at(mp + 2);
}

KK_KERNEL void __launch_bounds__(256)
    attn_split(float *__restrict__ out, const float *__restrict__ q, float *__restrict__ scratch, int n, int start,
               int heads, int kv_heads, int d, int window, int bs, const kk_u64 *__restrict__ ktab,
               const kk_u64 *__restrict__ vtab, const int *__restrict__ fmts, int blocks, const float *__restrict__ cos,
               const float *__restrict__ sin, int rows, int per, int splits) {
	KK_DYN_SHARED(float, sm);
	float *qs = sm;                           // rows x d: the queries, scaled
	float *kv = qs + rows * d;                // KK_AT_TILE x (d+1): keys, then values
	float *ps = kv + KK_AT_TILE * (d + 1);    // rows x KK_AT_TILE: probabilities
	const int ld = d + 1;                     // odd stride: lanes reading rows hit distinct banks
	int split = blockIdx.x, g = blockIdx.y;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	int group = heads / kv_heads, half = d >> 1;
	int f0 = blockIdx.z * rows;
	int tr = n * group - f0 < rows ? n * group - f0 : rows; // rows of this tile
	float scale = 1.0f / __builtin_sqrtf((float)d);

	for (int i = threadIdx.x; i < rows * d; i += blockDim.x) {
		int r = i / d, c = i - r * d;
		float v = 0.0f;
		if (r < tr) {
			int f = f0 + r, qi = f / group, h = g * group + f % group;
			v = q[((long long)qi * heads + h) * d + c] * scale;
		}
		qs[i] = v;
	}

	// The keys some row of the tile sees, and this split's blocks of them.
	int qlo = start + f0 / group, qhi = start + (f0 + tr - 1) / group;
	int kbeg = window > 0 && qlo - window + 1 > 0 ? qlo - window + 1 : 0;
	int kend = qhi + 1;
	int b0 = kbeg / bs + split * per;
	int b1 = kbeg / bs + (split + 1) * per;
	if (b1 > (kend + bs - 1) / bs)
		b1 = (kend + bs - 1) / bs;

	float m[KK_AT_SLOTS], l[KK_AT_SLOTS], alpha[KK_AT_SLOTS], acc[KK_AT_SLOTS][KK_AT_DV];
	int qpos[KK_AT_SLOTS], first[KK_AT_SLOTS];
#pragma unroll
	for (int s = 0; s < KK_AT_SLOTS; s++) {
		m[s] = -__builtin_inff();
		l[s] = 0.0f;
		alpha[s] = 1.0f;
#pragma unroll
		for (int k = 0; k < KK_AT_DV; k++)
			acc[s][k] = 0.0f;
		int r = s * warps + warp;
		qpos[s] = start + (f0 + r) / group;
		first[s] = window > 0 && qpos[s] - window + 1 > 0 ? qpos[s] - window + 1 : 0;
	}

	for (int b = b0; b < b1; b++) {
		const kk_u8 *kp = (const kk_u8 *)ktab[(long long)b * kv_heads + g];
		const kk_u8 *vp = (const kk_u8 *)vtab[(long long)b * kv_heads + g];
		int fmt = fmts[(long long)b * kv_heads + g];
		// One format for both parts, or the key's and the value's.
		int kfmt = fmt & 0xff, vfmt = fmt >> 16 ? (fmt >> 8) & 0xff : kfmt;
		int lo = b * bs > kbeg ? b * bs : kbeg;
		int hi = (b + 1) * bs < kend ? (b + 1) * bs : kend;
		for (int p0 = lo; p0 < hi; p0 += KK_AT_TILE) {
			int tn = hi - p0 < KK_AT_TILE ? hi - p0 : KK_AT_TILE;
			__syncthreads(); // the previous tile's values (and the queries) are done
			for (int i = threadIdx.x; i < tn * half; i += blockDim.x) {
				int j = i / half, c = i - j * half, pos = p0 + j, row = pos - b * bs;
				float x0 = kk_part_value(kp, kfmt, bs, d, row, c);
				float x1 = kk_part_value(kp, kfmt, bs, d, row, c + half);
				float cs = cos[(long long)pos * half + c], sn = sin[(long long)pos * half + c];
				kv[j * ld + c] = x0 * cs - x1 * sn;
				kv[j * ld + c + half] = x1 * cs + x0 * sn;
			}
			__syncthreads();
#pragma unroll
			for (int s = 0; s < KK_AT_SLOTS; s++) {
				int r = s * warps + warp;
				if (r >= tr)
					continue; // warp-uniform
				int pos = p0 + lane;
				bool see = lane < tn && pos >= first[s] && pos <= qpos[s];
				float sc = -__builtin_inff();
				if (see) {
					const float *qr = qs + r * d, *kr = kv + lane * ld;
					float dot = 0.0f;
					for (int c = 0; c < d; c++)
						dot += qr[c] * kr[c];
					sc = dot;
				}
				float mx = __builtin_fmaxf(m[s], kk_warp_max(sc));
				float p = 0.0f;
				alpha[s] = 1.0f;
				if (mx != -__builtin_inff()) {
					alpha[s] = kk_exp(m[s] - mx);
					if (see)
						p = kk_exp(sc - mx);
					m[s] = mx;
				}
				l[s] = l[s] * alpha[s] + kk_warp_sum(p);
				ps[r * KK_AT_TILE + lane] = p;
			}
			__syncthreads(); // the keys are scored
			for (int i = threadIdx.x; i < tn * d; i += blockDim.x) {
				int j = i / d, c = i - j * d;
				kv[j * ld + c] = kk_part_value(vp, vfmt, bs, d, p0 + j - b * bs, c);
			}
			__syncthreads();
#pragma unroll
			for (int s = 0; s < KK_AT_SLOTS; s++) {
				int r = s * warps + warp;
				if (r >= tr)
					continue;
				const float *pr = ps + r * KK_AT_TILE;
#pragma unroll
				for (int k = 0; k < KK_AT_DV; k++) {
					int c = lane + 32 * k;
					if (c < d) {
						float a = acc[s][k] * alpha[s];
						for (int j = 0; j < tn; j++)
							a += pr[j] * kv[j * ld + c];
						acc[s][k] = a;
					}
				}
			}
		}
	}

	int nr = n * heads;
#pragma unroll
	for (int s = 0; s < KK_AT_SLOTS; s++) {
		int r = s * warps + warp;
		if (r >= tr)
			continue;
		int f = f0 + r, R = (f / group) * heads + g * group + f % group;
		if (splits == 1) {
			float inv = 1.0f / l[s];
#pragma unroll
			for (int k = 0; k < KK_AT_DV; k++) {
				int c = lane + 32 * k;
				if (c < d)
					out[(long long)R * d + c] = acc[s][k] * inv;
			}
			continue;
		}
		long long at = (long long)split * nr + R;
		if (lane == 0) {
			scratch[2 * at] = m[s];
			scratch[2 * at + 1] = l[s];
		}
		float *o = scratch + 2LL * splits * nr + at * d;
#pragma unroll
		for (int k = 0; k < KK_AT_DV; k++) {
			int c = lane + 32 * k;
			if (c < d)
				o[c] = acc[s][k];
		}
	}
}

// attn_combine: block R merges the splits' states of query-head row R:
// out = sum_s e^(m_s-M) acc_s / sum_s e^(m_s-M) l_s with M the largest
// m_s (a split that saw no key has l_s = 0 and m_s = -inf).
KK_KERNEL void __launch_bounds__(128)
    attn_combine(float *__restrict__ out, const float *__restrict__ scratch, int n, int heads, int d, int splits) {
	int R = blockIdx.x, nr = n * heads;
	float M = -__builtin_inff();
	for (int s = 0; s < splits; s++)
		M = __builtin_fmaxf(M, scratch[2 * ((long long)s * nr + R)]);
	float L = 0.0f;
	for (int s = 0; s < splits; s++) {
		long long at = (long long)s * nr + R;
		if (scratch[2 * at + 1] > 0.0f)
			L += scratch[2 * at + 1] * kk_exp(scratch[2 * at] - M);
	}
	float inv = 1.0f / L;
	for (int c = threadIdx.x; c < d; c += blockDim.x) {
		float v = 0.0f;
		for (int s = 0; s < splits; s++) {
			long long at = (long long)s * nr + R;
			if (scratch[2 * at + 1] > 0.0f)
				v += scratch[2LL * splits * nr + at * d + c] * kk_exp(scratch[2 * at] - M);
		}
		out[(long long)R * d + c] = v * inv;
	}
}
