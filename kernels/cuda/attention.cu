// Causal grouped-query attention over a paged KV cache, flash-decoding
// style. The cache is a block table: for block b and KV head g, entry
// b*kv_heads+g holds the device address of the keys' part, of the values'
// part and their formats (hot float32 or bf16 rows, or the exact bytes of
// the int8, int4, int2, Kakeya or kakeya-pc codecs; keys and values may
// differ). A kakeya-pc part's entry in kptab (keys) or vptab (values)
// holds the address of its codec's pcParams (pcecParams for the
// entropy-coded format, attention_ec.cu); attn_split_pc reads them.
// Keys are stored before RoPE and rotated here. Keys encoded by a
// preconditioned codec (codec.Preconditioned: whitened by the factor L of
// their KV head before the inner codec) have an entry in a third table,
// ltab: the address of that head's inverse factor, by which
// attn_split_pre multiplies the decoded row (k = y Linv) before RoPE; 0
// where keys are plain. attn_split is the same kernel without ltab.
//
// attn_split: block (split, g, tile) takes `rows` query-head rows of KV
// head g (row f of the head is query f/group, head g*group + f%group, so
// every head sharing g reads each key and value once) and the keys
// [split*per, (split+1)*per) of the range those queries see, counted from
// the start of the block of its first key. It walks the
// keys 32 at a time (one per lane): the tile is decoded (a Kakeya tile
// cooperatively: codebook lookup, outliers, inverse Walsh-Hadamard
// transform, skeleton), un-whitened when preconditioned, and rotated into
// shared memory, each warp scores its rows against it and updates their
// online softmax (running max, sum and unnormalised output, in registers),
// then the value tile replaces the key tile and is accumulated. With one
// split the result is final; otherwise the partial state goes to scratch
// and attn_combine merges the splits.
#include "prelude.cuh"

// The block formats' layouts, generated from codec/format.go, as device
// functions.
#define KK_FORMAT_FN KK_DEVICE
#include "formats.h"

// Part formats: hot rows (float32 or bf16, kv_write's formats 0 and 1),
// or the bytes of an encoded block: kkPartEncoded plus its format id,
// whose layout formats.h describes.
enum { kkPartF32, kkPartBF16, kkPartEncoded = 16 };
enum {
	kkPartInt8 = kkPartEncoded + KK_FORMAT_INT8,
	kkPartInt4 = kkPartEncoded + KK_FORMAT_INT4, // int4 and int2, by row or by channel
	kkPartKakeya = kkPartEncoded + KK_FORMAT_KAKEYA,
	kkPartKakeyaPC = kkPartEncoded + KK_FORMAT_KAKEYA_PC,
	kkPartKakeyaPCEC = kkPartEncoded + KK_FORMAT_KAKEYA_PC_EC,
};

#define KK_AT_TILE 32 // keys per tile, one per lane
#define KK_AT_SLOTS 4 // query-head rows per warp
#define KK_AT_DV 8    // head values per lane: head_dim <= 256

KK_DEVICE float kk_half_at(const kk_u8 *p) { return kk_f16(*(const kk_u16 *)p); }

// kk_step_scale returns 2^(-e/16) as codec.stepScale does: a float32
// table value for e mod 16 (a select tree, not an indexed array, which
// would live in local memory) times an exact power of two.
KK_DEVICE float kk_step_scale(int e) {
	int r = e & 15;
	float t = r < 8 ? (r < 4 ? (r < 2 ? (r == 0 ? 0x1p+0f : 0x1.ea4afap-1f) : (r == 2 ? 0x1.d5818ep-1f : 0x1.c199bep-1f))
	                         : (r < 6 ? (r == 4 ? 0x1.ae89fap-1f : 0x1.9c4918p-1f) : (r == 6 ? 0x1.8ace54p-1f : 0x1.7a1148p-1f)))
	                : (r < 12 ? (r < 10 ? (r == 8 ? 0x1.6a09e6p-1f : 0x1.5ab07ep-1f) : (r == 10 ? 0x1.4bfdaep-1f : 0x1.3dea64p-1f))
	                          : (r < 14 ? (r == 12 ? 0x1.306fe0p-1f : 0x1.2387a6p-1f) : (r == 14 ? 0x1.172b84p-1f : 0x1.0b5586p-1f)));
	return t * kk_bits_f32((kk_u32)(127 - (e >> 4)) << 23);
}

// A kk_part is a part opened for reading element by element: where its
// sections start, which formats.h (generated from codec/format.go, the
// one description of each block format) says, and the settings of its
// groups, read once per loop rather than once per element. int8
// (codec.Int8): one fp16 scale per row and group of 32 values, then the
// int8 codes row-major. int4 and int2 (codec.Int4, no rotation, groups of
// G values, G a power of two that the header's tag holds, the code width
// and the groups' direction in its parameter byte): the groups'
// parameters, then the codes row-major as one bit stream, least
// significant bits first. With byte_params (the default) a group's
// parameters are a step code e and a signed zero point z (step s =
// S*2^(-e/16) for the block's fp16 step S, minimum z*s); else an fp16
// (min, step) pair. Groups run along each row (int4, int2: group
// row*ceil(d/G) + col/G) or, per channel, along the tokens (int4-k,
// int2-k: group col*ceil(bs/G) + row/G).
struct kk_part {
	const kk_u8 *p;      // the part: hot rows, or the block with its header
	const kk_u8 *groups; // int8 scales, int4 group parameters
	const kk_u8 *codes;
	int fmt, d, bits, gs, per;
	bool channel, bp;
	float S; // int4 with byte_params: the block's step
};

// kk_part_open opens a part of format fmt (kkPart...) of bs rows of d
// values at p.
KK_DEVICE kk_part kk_part_open(const kk_u8 *p, int fmt, int bs, int d) {
	kk_part v = {};
	v.p = p;
	v.fmt = fmt;
	v.d = d;
	if (fmt == kkPartInt8) {
		v.groups = p + kk_int8_scales_off(bs, d);
		v.codes = p + kk_int8_codes_off(bs, d);
		v.per = (d + 31) >> 5;
	} else if (fmt == kkPartInt4) {
		v.channel = kk_int4_per_channel(p) != 0;
		v.bits = (int)kk_int4_bits(p);
		long long g = kk_int4_group(p), bp = kk_int4_byte_params(p);
		v.bp = bp != 0;
		v.gs = __builtin_ctz((unsigned)g);
		v.per = v.channel ? (bs + (int)g - 1) >> v.gs : (d + (int)g - 1) >> v.gs;
		v.groups = p + kk_int4_groups_off(bs, d, v.bits, g, v.channel, 0, bp);
		v.codes = p + kk_int4_codes_off(bs, d, v.bits, g, v.channel, 0, bp);
		if (v.bp)
			v.S = kk_half_at(p + kk_int4_step_off(bs, d, v.bits, g, v.channel, 0, bp));
	}
	return v;
}

// kk_part_value returns element (row, col) of an opened part.
KK_DEVICE float kk_part_value(const kk_part &v, int row, int col) {
	int i = row * v.d + col;
	if (v.fmt == kkPartF32)
		return ((const float *)v.p)[i];
	if (v.fmt == kkPartBF16)
		return kk_bf16(((const kk_u16 *)v.p)[i]);
	if (v.fmt == kkPartInt8) {
		float s = kk_half_at(v.groups + 2 * (row * v.per + (col >> 5)));
		return (float)(kk_i8)v.codes[i] * s;
	}
	int k = v.channel ? col * v.per + (row >> v.gs) : row * v.per + (col >> v.gs);
	int bit = i * v.bits;
	int code = (v.codes[bit >> 3] >> (bit & 7)) & ((1 << v.bits) - 1);
	if (v.bp) {
		float s = v.S * kk_step_scale(v.groups[2 * k]);
		return (float)(kk_i8)v.groups[2 * k + 1] * s + (float)code * s;
	}
	const kk_u8 *mp = v.groups + 4 * k;
	return kk_half_at(mp) + (float)code * kk_half_at(mp + 2);
}

// kk_load8 sets x to the 8 values of a hot part (kkPartF32 or kkPartBF16)
// at element i (a multiple of 8, the part 16-byte aligned) with 16-byte
// loads: one of 8 bf16 values, two of float32.
KK_DEVICE void kk_load8(const kk_u8 *p, int fmt, int i, float *x) {
	if (fmt == kkPartBF16) {
		kk_f32x4 v = kk_ldg4((const float *)(p + 2LL * i));
#pragma unroll
		for (int e = 0; e < 4; e++) {
			kk_u32 u = kk_f32_bits(v[e]);
			x[2 * e] = kk_bits_f32(u << 16);
			x[2 * e + 1] = kk_bits_f32(u & 0xffff0000u);
		}
		return;
	}
	kk_f32x4 a = kk_ldg4((const float *)p + i), b = kk_ldg4((const float *)p + i + 4);
#pragma unroll
	for (int e = 0; e < 4; e++) {
		x[e] = a[e];
		x[4 + e] = b[e];
	}
}

// kk_vec8 reports whether a hot part of format fmt at p is read 8 values
// at a time (kk_load8): hot, 16-byte aligned, rows of whole 16-value
// runs (so both halves of a RoPE pair start 16-byte aligned).
KK_DEVICE bool kk_vec8(const kk_u8 *p, int fmt, int d) {
	return (fmt == kkPartF32 || fmt == kkPartBF16) && (d & 15) == 0 && ((unsigned long long)p & 15) == 0;
}

// kk_part_vec8 reports whether an opened part is read 8 values at a time
// (kk_part_load8): hot rows as kk_vec8 says, or int8 with rows of whole
// 16-value runs (8 values at a multiple of 8 never cross a group of 32).
KK_DEVICE bool kk_part_vec8(const kk_part &v) {
	return kk_vec8(v.p, v.fmt, v.d) || (v.fmt == kkPartInt8 && (v.d & 15) == 0);
}

// kk_part_load8 sets x to the 8 values at (row, col..col+7) of an opened
// part that kk_part_vec8 admits (col a multiple of 8): hot rows by
// kk_load8; int8 as one scale and 8 codes, an 8-byte load where the codes
// are 8-byte aligned.
KK_DEVICE void kk_part_load8(const kk_part &v, int row, int col, float *x) {
	int i = row * v.d + col;
	if (v.fmt != kkPartInt8) {
		kk_load8(v.p, v.fmt, i, x);
		return;
	}
	float s = kk_half_at(v.groups + 2 * (row * v.per + (col >> 5)));
	const kk_u8 *c = v.codes + i;
	if (((unsigned long long)c & 7) == 0) {
		kk_u64 u = *(const kk_u64 *)c;
#pragma unroll
		for (int e = 0; e < 8; e++)
			x[e] = (float)(kk_i8)(kk_u8)(u >> (8 * e)) * s;
		return;
	}
#pragma unroll
	for (int e = 0; e < 8; e++)
		x[e] = (float)(kk_i8)c[e] * s;
}

// Kakeya parts may sit at any byte offset: read their 16- and 32-bit
// fields a byte at a time.
KK_DEVICE kk_u32 kk_u16_at(const kk_u8 *p) { return (kk_u32)p[0] | (kk_u32)p[1] << 8; }
KK_DEVICE float kk_f16_at(const kk_u8 *p) { return kk_f16((kk_u16)kk_u16_at(p)); }

// kk_bits_at returns the code of the given width (at most 8) at bit offset
// bit of a little-endian bit stream, least significant bits first.
KK_DEVICE int kk_bits_at(const kk_u8 *s, long long bit, int width) {
	kk_u32 v = s[bit >> 3];
	if ((bit & 7) + width > 8)
		v |= (kk_u32)s[(bit >> 3) + 1] << 8;
	return (int)(v >> (bit & 7)) & ((1 << width) - 1);
}

// kk_kakeya_tile decodes rows row0..row0+tn-1 of a Kakeya part (codec
// kakeya: mean + low-rank skeleton + Walsh-Hadamard-rotated residual
// quantized by a codebook, plus exact outliers) into tile (row j at
// tile + j*ld, ld > P = NextPow2(d)). prm holds what the bytes do not: the
// residual's code width, its codebook levels and the rotation's signs
// (kakeyaParams in launch.go). The whole block calls it: it syncs.
KK_DEVICE void kk_kakeya_tile(float *tile, int ld, const kk_u8 *part, const float *__restrict__ prm, int bs, int d,
                              int P, int row0, int tn) {
	int bits = (int)kk_f32_bits(prm[0]);
	const float *levels = prm + 4, *signs = prm + 20;
	// The layout, from formats.h.
	int r = (int)kk_kakeya_rank(part), cbits = (int)kk_kakeya_coef_bits(part);
	int m = (int)kk_kakeya_outliers(part);
#define KK_KAKEYA_AT(section) (part + kk_kakeya_##section##_off(bs, d, bits, r, cbits, m))
	const kk_u8 *mean = KK_KAKEYA_AT(mean), *basis = KK_KAKEYA_AT(basis);
	const kk_u8 *cscales = KK_KAKEYA_AT(coef_scales), *coef = KK_KAKEYA_AT(coefs);
	const kk_u8 *norms = KK_KAKEYA_AT(norms), *codes = KK_KAKEYA_AT(codes), *outs = KK_KAKEYA_AT(outliers);
#undef KK_KAKEYA_AT
	int posLen = (int)kk_kakeya_pos_bytes(bs, d, bits, r, cbits, m);
	float invP = 1.0f / (float)P;
	// The residual in its rotated domain: levels times norm/P, the
	// transform's scale folded in.
	for (int i = threadIdx.x; i < tn * P; i += blockDim.x) {
		int j = i / P, c = i - j * P, row = row0 + j;
		int code = kk_bits_at(codes, ((long long)row * P + c) * bits, bits);
		tile[j * ld + c] = levels[code] * (kk_f16_at(norms + 2 * row) * invP);
	}
	__syncthreads();
	for (int k = threadIdx.x; k < m; k += blockDim.x) {
		const kk_u8 *e = outs + (long long)k * (posLen + 2);
		long long pos = posLen == 2 ? (long long)kk_u16_at(e) : (long long)(kk_u16_at(e) | kk_u16_at(e + 2) << 16);
		int row = (int)(pos / P);
		if (row >= row0 && row < row0 + tn)
			tile[(row - row0) * ld + (int)(pos - (long long)row * P)] =
			    kk_f16_at(e + posLen) * (kk_f16_at(norms + 2 * row) * invP);
	}
	// The unnormalised Walsh-Hadamard transform, stage by stage.
	int halfP = P >> 1;
	for (int h = 1; h < P; h <<= 1) {
		__syncthreads();
		for (int i = threadIdx.x; i < tn * halfP; i += blockDim.x) {
			int j = i / halfP, t = i - j * halfP;
			int x = (t / h) * 2 * h + t % h;
			float *v = tile + j * ld;
			float a = v[x], b = v[x + h];
			v[x] = a + b;
			v[x + h] = a - b;
		}
	}
	__syncthreads();
	// Signs, mean and skeleton: each thread rewrites its own elements.
	float half = (float)(1 << (cbits - 1));
	for (int i = threadIdx.x; i < tn * d; i += blockDim.x) {
		int j = i / d, c = i - j * d, row = row0 + j;
		float v = tile[j * ld + c] * signs[c] + kk_f16_at(mean + 2 * c);
		for (int k = 0; k < r; k++) {
			float cf;
			if (cbits == 16)
				cf = kk_f16_at(coef + 2 * ((long long)row * r + k));
			else
				cf = ((float)kk_bits_at(coef, ((long long)row * r + k) * cbits, cbits) - half) *
				     kk_f16_at(cscales + 2 * k);
			v += cf * kk_f16_at(basis + 2 * (k * d + c));
		}
		tile[j * ld + c] = v;
	}
	__syncthreads();
}

#define KK_AT_UW 32     // un-whitened columns per warp: head_dim / 8 <= 32
#define KK_PC_LEVELS 128 // pcParams' level words (and bound words): widths 1..6, 2^b levels at 2^b - 2
#define KK_PC_STEPS 8     // pcParams' scale step words

// kk_unwhiten multiplies each row y of tile (tn <= KK_AT_TILE rows of d
// values, row j at tile + j*ld) by a head's lower-triangular inverse
// factor Linv (d x d), in place: k_c = sum over i >= c of y_i Linv[i][c],
// summed in increasing i as codec.Preconditioned.Decode sums. Lane j
// computes row j (its reads of the tile fall in distinct banks, ld being
// odd) and warp w the columns w, w+8, ... (M = ceil(d/8) of them, spread
// so that every warp's share of the triangle is about the same); each
// value of Linv it reads then serves 32 key rows. lp holds Linv as
// unwhitenLayout (launch.go) lays it out for that: for each row i and warp
// w, the M values [i][w+8m], zero-padded to a multiple of 4, each 4 one
// 16-byte load, the same address for the whole warp. The factor (64 KiB
// at d = 128, 256 KiB at 256, in float32 for accuracy) stays in global
// memory, too big for shared memory beside the tile; every key tile of
// the head reads it, so it stays in the caches. The whole block calls it:
// it syncs between the reads of the tile and the writes.
KK_DEVICE void kk_unwhiten(float *tile, int ld, const float *__restrict__ lp, int d, int tn) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int m4 = (((d + 7) >> 3) + 3) & ~3;
	bool live = lane < tn;
	const float *y = tile + lane * ld;
	float o[KK_AT_UW];
#pragma unroll
	for (int m = 0; m < KK_AT_UW; m++)
		o[m] = 0.0f;
	// Row i of Linv reaches columns <= i: this warp's m <= (i-warp)/8.
	for (int i = warp; i < d; i++) {
		float yi = live ? y[i] : 0.0f;
		int last = (i - warp) >> 3;
		const float *li = lp + ((long long)i * 8 + warp) * m4;
#pragma unroll
		for (int g = 0; g < KK_AT_UW / 4; g++) {
			if (4 * g > last)
				break; // warp-uniform
			kk_f32x4 v = kk_ldg4(li + 4 * g);
#pragma unroll
			for (int e = 0; e < 4; e++)
				if (4 * g + e <= last)
					o[4 * g + e] += yi * v[e];
		}
	}
	__syncthreads(); // every warp has read the rows
	if (live) {
#pragma unroll
		for (int m = 0; m < KK_AT_UW; m++) {
			int c = warp + 8 * m;
			if (c < d)
				tile[lane * ld + c] = o[m];
		}
	}
}

// kk_pc_mix sets rows j < tn of tile (row j at tile + j*ld) to mu + sum_k
// y_jk B[k] from their latents y_j0..y_j(M-1) in the same row's first M
// columns: lane j of each warp computes row j for the warp's columns (w,
// w+warps, ...; NC of them at most), reading each basis value once for
// the tile's rows (the same address across the warp: one broadcast load),
// summed in registers and written back after a barrier. The whole block
// calls it: it syncs.
template <int NC>
KK_DEVICE void kk_pc_mix(float *tile, int ld, const float *__restrict__ mu, const float *__restrict__ basis, int M, int d,
                         int tn) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	bool live = lane < tn;
	const float *y = tile + lane * ld;
	float o[NC];
#pragma unroll
	for (int m = 0; m < NC; m++) {
		int c = warp + warps * m;
		o[m] = c < d ? mu[c] : 0.0f;
	}
	for (int k = 0; k < M; k++) {
		float yk = live ? y[k] : 0.0f;
		const float *bk = basis + (long long)k * d;
#pragma unroll
		for (int m = 0; m < NC; m++) {
			int c = warp + warps * m;
			if (c < d)
				o[m] += yk * bk[c];
		}
	}
	__syncthreads(); // every warp has read the latents
	if (live) {
#pragma unroll
		for (int m = 0; m < NC; m++) {
			int c = warp + warps * m;
			if (c < d)
				tile[lane * ld + c] = o[m];
		}
	}
	__syncthreads();
}

// kk_pc_mix_tc is kk_pc_mix on the tensor cores: the tile's latents Y
// (tn <= 32 rows of M, in their rows' first M columns) times the basis B
// (M x d, float32; frag below) as mma.sync m16n8k8 with tf32 operands and float32
// accumulators, then the calibration mean mu added. tf32 keeps 11
// significant bits and float32's exponent range, so each operand is split,
// x_hi = tf32(x) and x_lo = tf32(x - x_hi) (x to 2^-22 of itself), and
// three products are summed into one accumulator, Y_hi B_hi + Y_hi B_lo +
// Y_lo B_hi (the dropped Y_lo B_lo is 2^-22 of a term): each term within
// about 2^-21 of the float32 product, against the scalar loop's 2^-24, and
// no scaling, so no latent or basis value can overflow a narrower type.
// Warp w computes the d/8 column tiles w, w+warps, ... (NT of them at
// most) for both 16-row tiles, so each value of B is read and split by one
// warp only (the latents, from shared memory, by every warp). k-step s of
// column group q (64 columns) takes the latents' columns 64q + s + 8i
// (i = 0..7 the MMA's k) rather than 8 adjacent ones: lane (g, t) reads
// row g's column 64q + s + 8t, bank g + s + 8t (ld = 1 mod 32 from d = 32
// on), 32 lanes in 32 banks. B is read in that order from frag, the
// codec's copy of it in fragment order (pcBasisFrags in launch.go: zeros
// past M): one 8-byte load a lane per k-step and column tile, 256
// contiguous bytes a warp. The basis loads of four k-steps (two at
// NT = 4) are issued before their products, the latents' addresses
// clamped into the tile and the values past M or tn replaced by 0: one L2
// round trip per four k-steps, not one per k. The whole block calls it:
// it syncs.
template <int NT>
KK_DEVICE void kk_pc_mix_tc(float *tile, int ld, const float *__restrict__ mu, const float *__restrict__ frag, int M,
                            int d, int tn) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	int g = lane >> 2, t = lane & 3, nt = d >> 3, mt = tn > 16 ? 2 : 1;
	float acc[2][NT][4];
#pragma unroll
	for (int m = 0; m < 2; m++)
#pragma unroll
		for (int i = 0; i < NT; i++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[m][i][e] = 0.0f;
	// This warp's column tiles, clamped to ones that exist.
	int ntile[NT];
#pragma unroll
	for (int i = 0; i < NT; i++) {
		int w = warp + warps * i;
		ntile[i] = w < nt ? w : nt - 1;
	}
	// This lane's latent rows (the tile has 32: rows past tn read as 0).
	int rr[4] = {g, g + 8, g + 16, g + 24};
	// R steps at a time (R = 4, 2 where a warp holds 4 column tiles, to
	// bound the registers the basis values in flight take): steps
	// s0..s0+R-1 of group q, step s taking columns q + s + 8i. Their basis
	// values are loaded first (the L2 round trip), the latents (shared
	// memory) step by step.
	const int R = NT >= 4 ? 2 : 4;
	for (int u = 0;; u++) {
		int q = u / (8 / R) * 64, s0 = u % (8 / R) * R;
		if (q + s0 >= M)
			break; // warp-uniform: steps past M hold no latent
		float bv[R][NT][2];
#pragma unroll
		for (int j = 0; j < R; j++) {
#pragma unroll
			for (int i = 0; i < NT; i++)
				kk_ldg2(frag + ((((long long)(q >> 6) * 8 + s0 + j) * nt + ntile[i]) * 32 + lane) * 2, bv[j][i][0],
				        bv[j][i][1]);
		}
#pragma unroll
		for (int j = 0; j < R; j++) {
			// Steps past M (warp-uniform) hold no latent: their products are skipped.
			bool step = q + s0 + j < M;
			int ka = q + s0 + j + 8 * t, kb = ka + 32;
			bool va = ka < M, vb = kb < M;
			int ca = va ? ka : M - 1, cb = vb ? kb : M - 1;
			float yv[2][4];
#pragma unroll
			for (int m = 0; m < 2; m++) {
				yv[m][0] = tile[rr[2 * m] * ld + ca];
				yv[m][1] = tile[rr[2 * m + 1] * ld + ca];
				yv[m][2] = tile[rr[2 * m] * ld + cb];
				yv[m][3] = tile[rr[2 * m + 1] * ld + cb];
			}
			kk_u32 bh[NT][2], bl[NT][2];
#pragma unroll
			for (int i = 0; i < NT; i++) {
#pragma unroll
				for (int h = 0; h < 2; h++) {
					float b = (h ? vb : va) ? bv[j][i][h] : 0.0f;
					bh[i][h] = kk_tf32(b);
					bl[i][h] = kk_tf32(b - kk_bits_f32(bh[i][h]));
				}
			}
#pragma unroll
			for (int m = 0; m < 2; m++) {
				kk_u32 yh[4], yl[4];
#pragma unroll
				for (int e = 0; e < 4; e++) {
					bool on = (e < 2 ? va : vb) && rr[2 * m + (e & 1)] < tn;
					float y = on ? yv[m][e] : 0.0f;
					yh[e] = kk_tf32(y);
					yl[e] = kk_tf32(y - kk_bits_f32(yh[e]));
				}
#pragma unroll
				for (int i = 0; i < NT; i++) {
					if (step && m < mt && warp + warps * i < nt) { // warp-uniform
						kk_mma_tf32(acc[m][i], yh, bh[i]);
						kk_mma_tf32(acc[m][i], yh, bl[i]);
						kk_mma_tf32(acc[m][i], yl, bh[i]);
					}
				}
			}
		}
	}
	__syncthreads(); // every warp has read the latents
#pragma unroll
	for (int m = 0; m < 2; m++) {
#pragma unroll
		for (int i = 0; i < NT; i++) {
			if (m >= mt || warp + warps * i >= nt)
				continue;
			int c = (warp + warps * i) * 8 + 2 * t;
			float m0 = mu[c], m1 = mu[c + 1];
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int r = 16 * m + g + 8 * h;
				if (r < tn) {
					tile[r * ld + c] = acc[m][i][2 * h] + m0;
					tile[r * ld + c + 1] = acc[m][i][2 * h + 1] + m1;
				}
			}
		}
	}
	__syncthreads();
}

// kk_pc_finish turns the latents of rows j < tn (in their first M
// columns) into the rows: on the tensor cores (kk_pc_mix_tc) where d is a
// multiple of 8 and a warp's share of the d/8 column tiles is at most 4
// (d <= 256 with 8 warps), else by kk_pc_mix sized to the columns per
// warp (at d = 64 8 per basis row, not kk_pc_mix's most, 32, mostly
// predicated off). The whole block calls it: it syncs.
KK_DEVICE void kk_pc_finish(float *tile, int ld, const float *__restrict__ mu, const float *__restrict__ basis, int M,
                            int d, int tn) {
	int warps = blockDim.x >> 5, ntw = ((d >> 3) + warps - 1) / warps;
	if ((d & 7) == 0 && ntw <= 4 && M > 0) {
		// The basis in fragment order follows the row-major one, from an
		// 8-byte boundary (pcBasisFrags in launch.go).
		const float *frag = basis + (long long)M * d;
		frag += ((unsigned long long)frag >> 2) & 1;
		if (ntw <= 1)
			kk_pc_mix_tc<1>(tile, ld, mu, frag, M, d, tn);
		else if (ntw <= 2)
			kk_pc_mix_tc<2>(tile, ld, mu, frag, M, d, tn);
		else
			kk_pc_mix_tc<4>(tile, ld, mu, frag, M, d, tn);
		return;
	}
	int nc = (d + warps - 1) / warps;
	if (nc <= 8)
		kk_pc_mix<8>(tile, ld, mu, basis, M, d, tn);
	else if (nc <= 16)
		kk_pc_mix<16>(tile, ld, mu, basis, M, d, tn);
	else
		kk_pc_mix<KK_AT_UW>(tile, ld, mu, basis, M, d, tn);
}

// kk_pc_tile decodes rows row0..row0+tn-1 (tn <= 32) of a kakeya_pc part
// (codec.KakeyaPC: rows in a calibrated principal basis, bits per
// component) into tile (row j at tile + j*ld, ld > d). prm is the codec's
// pcParams (launch.go): M stored components, each with its code width,
// where its codes lie, its index among the coded ones; the quantizers'
// levels and bounds, the scale steps; the calibration mean mu and the stored components' basis rows
// B (M x d). First each row's latents, y_k = m_k + s_t level(c_k) (the
// block's mean of component k, plus for a coded one its scale times the
// level of its code), go to the tile's first M columns; then kk_pc_mix
// multiplies them by the basis. The whole block calls it: it syncs.
KK_DEVICE void kk_pc_tile(float *tile, int ld, const kk_u8 *part, const float *__restrict__ prm, int bs, int d,
                          int row0, int tn) {
	const int *pi = (const int *)prm;
	int M = pi[0];
	// The layout, from formats.h.
	long long C = pi[1], cb = pi[7] >> 8;
	const kk_u8 *means = part + kk_kakeya_pc_means_off(bs, d, M, C, cb);
	const kk_u8 *scales = part + kk_kakeya_pc_scales_off(bs, d, M, C, cb);
	const kk_u8 *codes = part + kk_kakeya_pc_codes_off(bs, d, M, C, cb);
	const int *info = pi + 8;
	const float *levels = prm + 8 + 4 * M, *mu = levels + 2 * KK_PC_LEVELS + KK_PC_STEPS, *basis = mu + d;
	if (M <= (int)blockDim.x) {
		// Each of the first G*M threads (G = blockDim.x / M) keeps one
		// component (threadIdx.x % M) for every G-th row, so the
		// component's mean, code width, code position, scale and level
		// table are read once, not per row: a row's latent is then one
		// code read and one level lookup.
		int step = blockDim.x / M, k = threadIdx.x % M;
		float mean = kk_f16_at(means + 2 * k), sc = 0.0f;
		int w = info[4 * k];
		long long base = 0, stride = 0;
		const float *lv = levels;
		if (w > 0) {
			base = info[4 * k + 1];
			stride = info[4 * k + 2];
			sc = kk_f16_at(scales + 2 * info[4 * k + 3]);
			lv = levels + (1 << w) - 2;
		}
		for (int j = threadIdx.x / M; j < tn && (int)threadIdx.x < step * M; j += step) {
			float y = mean;
			if (w > 0)
				y += sc * lv[kk_bits_at(codes, base + (long long)(row0 + j) * stride, w)];
			tile[j * ld + k] = y;
		}
	} else {
		for (int i = threadIdx.x; i < tn * M; i += blockDim.x) {
			int j = i / M, k = i - j * M, row = row0 + j;
			float y = kk_f16_at(means + 2 * k);
			int w = info[4 * k];
			if (w > 0) {
				int code = kk_bits_at(codes, (long long)info[4 * k + 1] + (long long)row * info[4 * k + 2], w);
				y += kk_f16_at(scales + 2 * info[4 * k + 3]) * levels[(1 << w) - 2 + code];
			}
			tile[j * ld + k] = y;
		}
	}
	__syncthreads();
	kk_pc_finish(tile, ld, mu, basis, M, d, tn);
}

// kk_pcec_tile decodes rows of a kakeya_pc_ec part as kk_pc_tile does a
// kakeya_pc part's: attention_ec.cu, which all.cu includes after this file.
KK_DEVICE void kk_pcec_tile(float *tile, int ld, const kk_u8 *part, const float *__restrict__ prm, int bs, int d,
                            int row0, int tn);

// kk_attn_split is attn_split, and with PRE attn_split_pre, which also
// un-whitens the keys of the parts whose ltab entry is set: a kernel of
// its own, so that the registers kk_unwhiten holds do not cost the
// occupancy of layers without preconditioned keys; with PC too
// attn_split_pc, which also reads kakeya_pc parts (kk_pc_tile, with the
// pcParams of their kptab and vptab entries).
template <bool PRE, bool PC>
KK_DEVICE void kk_attn_split(float *__restrict__ out, const float *__restrict__ q, float *__restrict__ scratch, int n,
                             int start, int heads, int kv_heads, int d, int window, int bs,
                             const kk_u64 *__restrict__ ktab, const kk_u64 *__restrict__ vtab,
                             const int *__restrict__ fmts, int blocks, const float *__restrict__ cos,
                             const float *__restrict__ sin, int rows, int per, int splits,
                             const float *__restrict__ kprm, const float *__restrict__ vprm,
                             const kk_u64 *__restrict__ ltab, const kk_u64 *__restrict__ kptab,
                             const kk_u64 *__restrict__ vptab, const int *__restrict__ startp, int row0, int ntot,
                             int tile, int rot, float qscale, float cap) {
	if (startp)
		start = *startp; // a decode step's position, from the backend's step parameters
	KK_DYN_SHARED(float, sm);
	float *qs = sm;                           // rows x d: the queries, scaled
	int P = 1; // NextPow2(d): a Kakeya row's rotated width
	while (P < d)
		P <<= 1;
	const int ld = P + 1;                     // odd stride: lanes reading rows hit distinct banks
	float *kv = qs + rows * d;                // KK_AT_TILE x ld: keys, then values
	float *ps = kv + KK_AT_TILE * ld;         // rows x KK_AT_TILE: probabilities
	int split = blockIdx.x, g = blockIdx.y;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	int group = heads / kv_heads, half = d >> 1;
	int f0 = tile * rows;
	int tr = n * group - f0 < rows ? n * group - f0 : rows; // rows of this tile
	// The scores' scale: qscale where set (Gemma's query_pre_attn_scalar),
	// else 1/sqrt(d).
	float scale = qscale > 0.0f ? qscale : 1.0f / __builtin_sqrtf((float)d);

	for (int i = threadIdx.x; i < rows * d; i += blockDim.x) {
		int r = i / d, c = i - r * d;
		float v = 0.0f;
		if (r < tr) {
			int f = f0 + r, qi = f / group, h = g * group + f % group;
			const float *qr = q + ((long long)(row0 + qi) * heads + h) * d;
			v = qr[c];
			if (rot) { // q before RoPE: rotated here at its position, as rope does
				int cc = c < half ? c : c - half;
				long long at = (long long)(start + qi) * half + cc;
				float cs = cos[at], sn = sin[at];
				v = c < half ? v * cs - qr[c + half] * sn : v * cs + qr[c - half] * sn;
			}
			v *= scale;
		}
		qs[i] = v;
	}

	// The keys some row of the tile sees, and this split's blocks of them.
	int qlo = start + f0 / group, qhi = start + (f0 + tr - 1) / group;
	int kbeg = window > 0 && qlo - window + 1 > 0 ? qlo - window + 1 : 0;
	int kend = qhi + 1;
	// per keys per split (whole key tiles or whole blocks), from the
	// block of the first key seen.
	int k0 = kbeg / bs * bs + split * per, k1 = k0 + per;
	k0 = k0 > kbeg ? k0 : kbeg;
	k1 = k1 < kend ? k1 : kend;
	int b0 = k0 / bs, b1 = k0 < k1 ? (k1 + bs - 1) / bs : b0;

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
		// The head's inverse factor when the keys are preconditioned
		// (attn_split_pc takes no ltab where no keys are).
		const float *kl = PRE && ltab ? (const float *)ltab[(long long)b * kv_heads + g] : 0;
		// One format for both parts, or the key's and the value's.
		int kfmt = fmt & 0xff, vfmt = fmt >> 16 ? (fmt >> 8) & 0xff : kfmt;
		int lo = b * bs > k0 ? b * bs : k0;
		int hi = (b + 1) * bs < k1 ? (b + 1) * bs : k1;
		for (int p0 = lo; p0 < hi; p0 += KK_AT_TILE) {
			int tn = hi - p0 < KK_AT_TILE ? hi - p0 : KK_AT_TILE;
			__syncthreads(); // the previous tile's values (and the queries) are done
			// The keys are decoded into the tile first when a Kakeya part
			// needs the whole tile's cooperation or the rows are to be
			// un-whitened; other rows are read as RoPE rotates them.
			bool staged = kfmt == kkPartKakeya || kl || (PC && (kfmt == kkPartKakeyaPC || kfmt == kkPartKakeyaPCEC));
			if (kfmt == kkPartKakeya) {
				kk_kakeya_tile(kv, ld, kp, kprm, bs, d, P, p0 - b * bs, tn);
			} else if (PC && kfmt == kkPartKakeyaPC) {
				kk_pc_tile(kv, ld, kp, (const float *)kptab[(long long)b * kv_heads + g], bs, d, p0 - b * bs, tn);
			} else if (PC && kfmt == kkPartKakeyaPCEC) {
				kk_pcec_tile(kv, ld, kp, (const float *)kptab[(long long)b * kv_heads + g], bs, d, p0 - b * bs, tn);
			} else if (kl) {
				kk_part kpart = kk_part_open(kp, kfmt, bs, d);
				for (int i = threadIdx.x; i < tn * d; i += blockDim.x) {
					int j = i / d, c = i - j * d;
					kv[j * ld + c] = kk_part_value(kpart, p0 + j - b * bs, c);
				}
				__syncthreads();
			}
			if (kl) {
				kk_unwhiten(kv, ld, kl, d, tn);
				__syncthreads();
			}
			kk_part kpart = kk_part_open(kp, staged ? kkPartF32 : kfmt, bs, d);
			if (!staged && kk_part_vec8(kpart) && (((unsigned long long)cos | (unsigned long long)sin) & 15) == 0) {
				// Hot or int8 rows 8 values at a time: 16-byte loads of
				// the key (8 bytes of int8 codes) and of the RoPE tables.
				int h8 = half >> 3;
				for (int i = threadIdx.x; i < tn * h8; i += blockDim.x) {
					int j = i / h8, c = (i - j * h8) * 8, pos = p0 + j, row = pos - b * bs;
					float x0[8], x1[8];
					kk_part_load8(kpart, row, c, x0);
					kk_part_load8(kpart, row, c + half, x1);
					const float *cp = cos + (long long)pos * half + c, *sp = sin + (long long)pos * half + c;
					kk_f32x4 c0 = kk_ldg4(cp), c1 = kk_ldg4(cp + 4), s0 = kk_ldg4(sp), s1 = kk_ldg4(sp + 4);
#pragma unroll
					for (int e = 0; e < 8; e++) {
						float cs = e < 4 ? c0[e & 3] : c1[e & 3], sn = e < 4 ? s0[e & 3] : s1[e & 3];
						kv[j * ld + c + e] = x0[e] * cs - x1[e] * sn;
						kv[j * ld + c + half + e] = x1[e] * cs + x0[e] * sn;
					}
				}
			} else
			for (int i = threadIdx.x; i < tn * half; i += blockDim.x) {
				int j = i / half, c = i - j * half, pos = p0 + j, row = pos - b * bs;
				float x0, x1;
				if (staged) {
					x0 = kv[j * ld + c];
					x1 = kv[j * ld + c + half];
				} else {
					x0 = kk_part_value(kpart, row, c);
					x1 = kk_part_value(kpart, row, c + half);
				}
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
					// Four partial sums: a quarter of the dependent
					// chain of one.
					const float *qr = qs + r * d, *kr = kv + lane * ld;
					float d0 = 0.0f;
					for (int c = 0; c < d; c++)
						d0 += qr[c] * kr[c];
					// Gemma 2's softcap bounds the scaled score.
					sc = cap > 0.0f ? kk_softcap(d0, cap) : d0;
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
			if (vfmt == kkPartKakeya) {
				kk_kakeya_tile(kv, ld, vp, vprm, bs, d, P, p0 - b * bs, tn);
			} else if (PC && vfmt == kkPartKakeyaPC) {
				kk_pc_tile(kv, ld, vp, (const float *)vptab[(long long)b * kv_heads + g], bs, d, p0 - b * bs, tn);
			} else if (PC && vfmt == kkPartKakeyaPCEC) {
				kk_pcec_tile(kv, ld, vp, (const float *)vptab[(long long)b * kv_heads + g], bs, d, p0 - b * bs, tn);
			} else if (kk_vec8(vp, vfmt, d) || (vfmt == kkPartInt8 && (d & 15) == 0)) {
				kk_part vpart = kk_part_open(vp, vfmt, bs, d);
				int d8 = d >> 3;
				for (int i = threadIdx.x; i < tn * d8; i += blockDim.x) {
					int j = i / d8, c = (i - j * d8) * 8;
					float x[8];
					kk_part_load8(vpart, p0 + j - b * bs, c, x);
#pragma unroll
					for (int e = 0; e < 8; e++)
						kv[j * ld + c + e] = x[e];
				}
				__syncthreads();
			} else {
				kk_part vpart = kk_part_open(vp, vfmt, bs, d);
				for (int i = threadIdx.x; i < tn * d; i += blockDim.x) {
					int j = i / d, c = i - j * d;
					kv[j * ld + c] = kk_part_value(vpart, p0 + j - b * bs, c);
				}
				__syncthreads();
			}
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

	int nr = ntot * heads;
#pragma unroll
	for (int s = 0; s < KK_AT_SLOTS; s++) {
		int r = s * warps + warp;
		if (r >= tr)
			continue;
		int f = f0 + r, R = (row0 + f / group) * heads + g * group + f % group;
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

#define KK_ATTN_SPLIT(name, PRE, PC)                                                                                    \
	KK_KERNEL void __launch_bounds__(256)                                                                              \
	    name(float *__restrict__ out, const float *__restrict__ q, float *__restrict__ scratch, int n, int start,       \
	         int heads, int kv_heads, int d, int window, int bs, const kk_u64 *__restrict__ ktab,                     \
	         const kk_u64 *__restrict__ vtab, const int *__restrict__ fmts, int blocks, const float *__restrict__ cos, \
	         const float *__restrict__ sin, int rows, int per, int splits, const float *__restrict__ kprm,            \
	         const float *__restrict__ vprm, const kk_u64 *__restrict__ ltab, const kk_u64 *__restrict__ kptab,       \
	         const kk_u64 *__restrict__ vptab, const int *__restrict__ startp, float scale, float softcap) {           \
		kk_attn_split<PRE, PC>(out, q, scratch, n, start, heads, kv_heads, d, window, bs, ktab, vtab, fmts, blocks,  \
		                       cos, sin, rows, per, splits, kprm, vprm, ltab, kptab, vptab, startp, 0, n, blockIdx.z, \
		                       0, scale, softcap);                                                                    \
	}
KK_ATTN_SPLIT(attn_split, false, false)
KK_ATTN_SPLIT(attn_split_pre, true, false)
KK_ATTN_SPLIT(attn_split_pc, true, true)
#undef KK_ATTN_SPLIT

// A batched attention call (attn_batch) runs the split pass of every
// sequence of a forward step in one launch. Each sequence's rows are a
// pass: kk_attn_pass, per step (the backend's step parameters), says where
// its rows start among the step's (row0), how many (n), its first
// position and its first row tile among the launch's (tile0, ascending);
// kk_attn_seq, per layer, where its block tables are. Block (split, g, z)
// finds the pass of tile z by binary search and runs attn_split's body for
// that pass's tile z - tile0; a tile past every pass's (a batch padded to
// its launch's size) returns at once. The scratch and attn_combine run
// over the step's ntot rows, as for one sequence of ntot rows. With rot
// set, q holds the queries before RoPE, rotated as they are loaded (the
// step then launches no rope per sequence).
struct kk_attn_pass {
	int row0, n, start, tile0;
};
struct kk_attn_seq {
	const kk_u64 *ktab, *vtab;
	const int *fmts;
	const kk_u64 *ltab, *kptab, *vptab;
	const float *kprm, *vprm;
};

template <bool PRE, bool PC>
KK_DEVICE void kk_attn_batch(float *__restrict__ out, const float *__restrict__ q, float *__restrict__ scratch,
                             const kk_attn_pass *__restrict__ passes, const kk_attn_seq *__restrict__ seqs,
                             int npasses, int ntot, int heads, int kv_heads, int d, int window, int bs,
                             const float *__restrict__ cos, const float *__restrict__ sin, int rows, int per,
                             int splits, int rot, float scale, float softcap) {
	int z = blockIdx.z, lo = 0, hi = npasses - 1;
	while (lo < hi) { // the last pass whose first tile is at or before z
		int mid = (lo + hi + 1) >> 1;
		if (passes[mid].tile0 <= z)
			lo = mid;
		else
			hi = mid - 1;
	}
	kk_attn_pass ps = passes[lo];
	int group = heads / kv_heads;
	if (ps.n <= 0 || z - ps.tile0 >= (ps.n * group + rows - 1) / rows)
		return; // a padding tile: the whole block leaves
	kk_attn_seq sq = seqs[lo];
	kk_attn_split<PRE, PC>(out, q, scratch, ps.n, ps.start, heads, kv_heads, d, window, bs, sq.ktab, sq.vtab, sq.fmts,
	                       0, cos, sin, rows, per, splits, sq.kprm, sq.vprm, sq.ltab, sq.kptab, sq.vptab, 0,
	                       ps.row0, ntot, z - ps.tile0, rot, scale, softcap);
}

#define KK_ATTN_BATCH(name, PRE, PC)                                                                                    \
	KK_KERNEL void __launch_bounds__(256)                                                                              \
	    name(float *__restrict__ out, const float *__restrict__ q, float *__restrict__ scratch,                         \
	         const kk_attn_pass *__restrict__ passes, const kk_attn_seq *__restrict__ seqs, int npasses, int ntot,    \
	         int heads, int kv_heads, int d, int window, int bs, const float *__restrict__ cos,                       \
	         const float *__restrict__ sin, int rows, int per, int splits, int rot, float scale, float softcap) {     \
		kk_attn_batch<PRE, PC>(out, q, scratch, passes, seqs, npasses, ntot, heads, kv_heads, d, window, bs, cos, sin, \
		                       rows, per, splits, rot, scale, softcap);                                               \
	}
KK_ATTN_BATCH(attn_batch, false, false)
KK_ATTN_BATCH(attn_batch_pre, true, false)
KK_ATTN_BATCH(attn_batch_pc, true, true)
#undef KK_ATTN_BATCH

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
