// Prefill attention on the tensor cores: causal grouped-query attention of
// many queries over a paged KV cache, flash-attention style, with the
// products QK^T and PV as bf16 mma.sync m16n8k16 with float32
// accumulation. attn_split (attention.cu) computes the same in float32 on
// the CUDA cores; the backend takes this kernel for a call of more than
// maxMatVecRows queries when its matrix products are 16-bit too (not under
// --matmul f32) and the layer's parts are hot (float32 or bf16 rows),
// int8, int4 or int2, or (attn_prefill_pc_*) fixed-rate kakeya-pc too (no
// Kakeya, entropy-coded kakeya-pc or preconditioned keys, whose tiles
// need attn_split's cooperative decoding), at head dims 64 and 128.
//
// Block (tile, g) takes 64 query-head rows of KV head g (row f is query
// f/group, head g*group + f%group, as in attn_split: every head sharing g
// reads each key and value once), 16 per warp, and walks the keys its rows
// see 32 at a time: the key tile is read from its blocks, rotated by RoPE
// (keys are stored before it) and rounded to bf16 into shared memory, the
// value tile likewise but transposed (so that a B fragment of PV is one
// 32-bit load); each warp scores its 16 rows against the 32 keys (4 x D/16
// mma), masks what its rows do not see, updates their online softmax in
// registers (the row's maximum agreed by the 4 lanes that hold it), and
// feeds the probabilities, rounded to bf16, straight from the score
// accumulators into PV as A fragments (the m16n8 accumulator layout is
// the A fragment's). The queries are scaled by 1/sqrt(D), rotated when
// rot is set, and rounded to bf16 once, into fragments held in registers
// for the whole walk.
#include "prelude.cuh"

#define KK_PF_BQ 64 // query-head rows per block
#define KK_PF_BK 32 // keys per tile

// kk_pf_pack packs two float32 values as bf16, a in the low half.
KK_DEVICE kk_u32 kk_pf_pack(float a, float b) {
	return (kk_u32)kk_f32_to_bf16(a) | (kk_u32)kk_f32_to_bf16(b) << 16;
}

// kk_pf_load8 sets x to the 8 values at (row, c..c+7) of a part of format
// fmt (hot and int8: kk_part_load8; int4, int2: element by element).
template <int D>
KK_DEVICE void kk_pf_load8(const kk_u8 *p, int fmt, int bs, int row, int c, float *x) {
	kk_part v = kk_part_open(p, fmt, bs, D);
	if (kk_part_vec8(v)) {
		kk_part_load8(v, row, c, x);
		return;
	}
#pragma unroll
	for (int e = 0; e < 8; e++)
		x[e] = kk_part_value(v, row, c + e);
}

// With PC (attn_prefill_pc_*) the layer may also hold kakeya_pc parts
// (format 8, codec.KakeyaPC fixed rate; kptab and vptab give each entry's
// pcParams): a tile from such a part is decoded as attn_split_pc decodes
// it (kk_pc_tile: the latents, then their basis product on the tensor
// cores, tf32 split in three) into a float32 tile that takes the
// queries' shared memory once their fragments are in registers, then
// rotated and rounded to bf16 into the same key and value tiles; the
// walk's tiles then stop at block boundaries (a part is decoded one tile
// of at most 32 of its rows at a time).
template <int D, bool PC>
KK_DEVICE void kk_attn_prefill(float *__restrict__ out, const float *__restrict__ q, int n, int start, int heads,
                               int kv_heads, int window, int bs, const kk_u64 *__restrict__ ktab,
                               const kk_u64 *__restrict__ vtab, const int *__restrict__ fmts,
                               const float *__restrict__ cos, const float *__restrict__ sin, int rot, int row0,
                               int tile, int g, float qscale, float cap, const kk_u64 *__restrict__ kptab,
                               const kk_u64 *__restrict__ vptab) {
	const int LQ = D + 8;            // query and key rows, 16-bit values (padded: conflict-free fragments)
	const int LV = KK_PF_BK + 8;     // transposed value rows
	const int KS = D / 16, NB = D / 8; // k-steps of QK^T, n-tiles of PV
	__shared__ __attribute__((aligned(16))) kk_u16 qs[KK_PF_BQ * LQ];
	__shared__ __attribute__((aligned(16))) kk_u16 ks[KK_PF_BK * LQ];
	__shared__ __attribute__((aligned(16))) kk_u16 vt[D * LV];
	// PC: a kakeya_pc tile in float32 (32 rows of LT, LT = 1 mod 32 for
	// kk_pc_mix_tc's conflict-free latent reads), over qs: the queries are
	// in registers before the first tile (32 x (D+1) x 4 bytes fit in
	// 64 x (D+8) x 2).
	const int LT = D + 1;
	float *tf = (float *)qs;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
	int group = heads / kv_heads, half = D / 2;
	int f0 = tile * KK_PF_BQ;
	int tr = n * group - f0 < KK_PF_BQ ? n * group - f0 : KK_PF_BQ; // rows of this tile
	float scale = qscale > 0.0f ? qscale : 1.0f / __builtin_sqrtf((float)D); // Gemma's query scale where set

	// The queries, scaled, rotated when rot is set, in bf16.
	for (int i = threadIdx.x; i < KK_PF_BQ * half; i += blockDim.x) {
		int r = i / half, c = i - r * half;
		float a = 0.0f, b = 0.0f;
		if (r < tr) {
			int f = f0 + r, qi = f / group, h = g * group + f % group;
			const float *qr = q + ((long long)(row0 + qi) * heads + h) * D;
			a = qr[c];
			b = qr[c + half];
			if (rot) {
				long long at = (long long)(start + qi) * half + c;
				float cs = cos[at], sn = sin[at], a2 = a * cs - b * sn;
				b = b * cs + a * sn;
				a = a2;
			}
			a *= scale;
			b *= scale;
		}
		qs[r * LQ + c] = kk_f32_to_bf16(a);
		qs[r * LQ + c + half] = kk_f32_to_bf16(b);
	}
	__syncthreads();
	const kk_u32 *qs32 = (const kk_u32 *)qs, *ks32 = (const kk_u32 *)ks, *vt32 = (const kk_u32 *)vt;
	int ra = warp * 16 + gq; // this lane's rows: ra and ra + 8
	kk_u32 qf[KS][4];
#pragma unroll
	for (int k = 0; k < KS; k++) {
		int c = 8 * k + tq;
		qf[k][0] = qs32[ra * (LQ / 2) + c];
		qf[k][1] = qs32[(ra + 8) * (LQ / 2) + c];
		qf[k][2] = qs32[ra * (LQ / 2) + c + 4];
		qf[k][3] = qs32[(ra + 8) * (LQ / 2) + c + 4];
	}
	// Each of the lane's rows: live, its position and its first key seen.
	bool live[2];
	int qp[2], fk[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		int r = ra + 8 * h;
		live[h] = r < tr;
		qp[h] = start + (f0 + r) / group;
		fk[h] = window > 0 && qp[h] - window + 1 > 0 ? qp[h] - window + 1 : 0;
	}
	// The keys some row of the tile sees.
	int qlo = start + f0 / group, qhi = start + (f0 + tr - 1) / group;
	int kbeg = window > 0 && qlo - window + 1 > 0 ? qlo - window + 1 : 0, kend = qhi + 1;

	float o[NB][4], mrow[2], lrow[2];
#pragma unroll
	for (int nb = 0; nb < NB; nb++)
		o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
	mrow[0] = mrow[1] = -__builtin_inff();
	lrow[0] = lrow[1] = 0.0f;

	for (int k0 = kbeg, k1; k0 < kend; k0 = k1) {
		k1 = k0 + KK_PF_BK < kend ? k0 + KK_PF_BK : kend; // this tile's keys: [k0, k1)
		// PC: the tile stays in one block, whose formats say whether a
		// part is kakeya_pc (the same for the whole CTA).
		bool kpc = false, vpc = false;
		long long pe = 0;
		if (PC) {
			int pb = k0 / bs;
			if ((pb + 1) * bs < k1)
				k1 = (pb + 1) * bs;
			pe = (long long)pb * kv_heads + g;
			int fmt = fmts[pe], kf = fmt & 0xff, vf = fmt >> 16 ? (fmt >> 8) & 0xff : kf;
			kpc = kf == kkPartKakeyaPC;
			vpc = vf == kkPartKakeyaPC;
		}
		__syncthreads(); // the previous tile is consumed
		if (PC && kpc) {
			kk_pc_tile(tf, LT, (const kk_u8 *)ktab[pe], (const float *)kptab[pe], bs, D, k0 - (k0 / bs) * bs,
			           k1 - k0); // syncs
			for (int i = threadIdx.x; i < KK_PF_BK * (half / 8); i += blockDim.x) {
				int j = i / (half / 8), c = (i - j * (half / 8)) * 8, p = k0 + j;
				float x0[8], x1[8];
#pragma unroll
				for (int e2 = 0; e2 < 8; e2++) {
					x0[e2] = x1[e2] = 0.0f;
					if (p < k1) {
						float a = tf[j * LT + c + e2], b = tf[j * LT + c + half + e2];
						float cs = cos[(long long)p * half + c + e2], sn = sin[(long long)p * half + c + e2];
						x0[e2] = a * cs - b * sn;
						x1[e2] = b * cs + a * sn;
					}
				}
				kk_u32 *kr = (kk_u32 *)(ks + j * LQ);
#pragma unroll
				for (int e2 = 0; e2 < 8; e2 += 2) {
					kr[(c + e2) >> 1] = kk_pf_pack(x0[e2], x0[e2 + 1]);
					kr[(c + half + e2) >> 1] = kk_pf_pack(x1[e2], x1[e2 + 1]);
				}
			}
		} else
		// Keys: rotated at their positions, 8 columns of each half a
		// thread; positions past kend as zeros (masked below).
		for (int i = threadIdx.x; i < KK_PF_BK * (half / 8); i += blockDim.x) {
			int j = i / (half / 8), c = (i - j * (half / 8)) * 8, p = k0 + j;
			float x0[8], x1[8];
			if (p < k1) {
				long long e = (long long)(p / bs) * kv_heads + g;
				const kk_u8 *kp = (const kk_u8 *)ktab[e];
				int kf = fmts[e] & 0xff, row = p % bs;
				kk_pf_load8<D>(kp, kf, bs, row, c, x0);
				kk_pf_load8<D>(kp, kf, bs, row, c + half, x1);
				const float *cp = cos + (long long)p * half + c, *sp = sin + (long long)p * half + c;
#pragma unroll
				for (int e2 = 0; e2 < 8; e2++) {
					float a = x0[e2], b = x1[e2], cs = cp[e2], sn = sp[e2];
					x0[e2] = a * cs - b * sn;
					x1[e2] = b * cs + a * sn;
				}
			} else {
#pragma unroll
				for (int e2 = 0; e2 < 8; e2++)
					x0[e2] = x1[e2] = 0.0f;
			}
			kk_u32 *kr = (kk_u32 *)(ks + j * LQ);
#pragma unroll
			for (int e2 = 0; e2 < 8; e2 += 2) {
				kr[(c + e2) >> 1] = kk_pf_pack(x0[e2], x0[e2 + 1]);
				kr[(c + half + e2) >> 1] = kk_pf_pack(x1[e2], x1[e2 + 1]);
			}
		}
		// Values, transposed: vt[c][j] is value c of key k0+j.
		if (PC && vpc) {
			if (kpc)
				__syncthreads(); // the keys' float tile is read
			kk_pc_tile(tf, LT, (const kk_u8 *)vtab[pe], (const float *)vptab[pe], bs, D, k0 - (k0 / bs) * bs,
			           k1 - k0); // syncs
			for (int i = threadIdx.x; i < KK_PF_BK * D; i += blockDim.x) {
				int c = i / KK_PF_BK, j = i - c * KK_PF_BK; // lanes along j: one tile column a warp
				vt[c * LV + j] = kk_f32_to_bf16(k0 + j < k1 ? tf[j * LT + c] : 0.0f);
			}
		} else
		for (int i = threadIdx.x; i < KK_PF_BK * (D / 8); i += blockDim.x) {
			int j = i / (D / 8), c = (i - j * (D / 8)) * 8, p = k0 + j;
			float x[8];
			if (p < k1) {
				long long e = (long long)(p / bs) * kv_heads + g;
				int fmt = fmts[e], kf = fmt & 0xff, vf = fmt >> 16 ? (fmt >> 8) & 0xff : kf;
				kk_pf_load8<D>((const kk_u8 *)vtab[e], vf, bs, p % bs, c, x);
			} else {
#pragma unroll
				for (int e2 = 0; e2 < 8; e2++)
					x[e2] = 0.0f;
			}
#pragma unroll
			for (int e2 = 0; e2 < 8; e2++)
				vt[(c + e2) * LV + j] = kk_f32_to_bf16(x[e2]);
		}
		__syncthreads();

		// Scores of the warp's 16 rows against the 32 keys.
		float s[KK_PF_BK / 8][4];
#pragma unroll
		for (int b = 0; b < KK_PF_BK / 8; b++)
			s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.0f;
#pragma unroll
		for (int k = 0; k < KS; k++)
#pragma unroll
			for (int b = 0; b < KK_PF_BK / 8; b++) {
				kk_u32 bf[2];
				bf[0] = ks32[(8 * b + gq) * (LQ / 2) + 8 * k + tq];
				bf[1] = ks32[(8 * b + gq) * (LQ / 2) + 8 * k + tq + 4];
				kk_mma_bf16(s[b], qf[k], bf);
			}
		// Mask, then the online softmax of each of the lane's rows.
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float mx = -__builtin_inff();
#pragma unroll
			for (int b = 0; b < KK_PF_BK / 8; b++)
#pragma unroll
				for (int e2 = 0; e2 < 2; e2++) {
					int p = k0 + 8 * b + 2 * tq + e2;
					bool see = live[h] && p < k1 && p >= fk[h] && p <= qp[h];
					float v = see ? s[b][2 * h + e2] : -__builtin_inff();
					if (see && cap > 0.0f)
						v = kk_softcap(v, cap); // Gemma 2's score softcap
					s[b][2 * h + e2] = v;
					mx = __builtin_fmaxf(mx, v);
				}
			mx = __builtin_fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = __builtin_fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			float mn = __builtin_fmaxf(mrow[h], mx);
			float alpha = mrow[h] == -__builtin_inff() ? 0.0f : kk_exp(mrow[h] - mn);
			mrow[h] = mn;
			float sum = 0.0f;
#pragma unroll
			for (int b = 0; b < KK_PF_BK / 8; b++)
#pragma unroll
				for (int e2 = 0; e2 < 2; e2++) {
					float v = s[b][2 * h + e2];
					float pr = v == -__builtin_inff() ? 0.0f : kk_exp(v - mn);
					s[b][2 * h + e2] = pr;
					sum += pr;
				}
			lrow[h] = lrow[h] * alpha + sum; // this lane's share; the 4 lanes' meet at the end
#pragma unroll
			for (int nb = 0; nb < NB; nb++) {
				o[nb][2 * h] *= alpha;
				o[nb][2 * h + 1] *= alpha;
			}
		}
		// O += P V, P's A fragments from the score accumulators.
#pragma unroll
		for (int t = 0; t < KK_PF_BK / 16; t++) {
			kk_u32 pa[4];
			pa[0] = kk_pf_pack(s[2 * t][0], s[2 * t][1]);
			pa[1] = kk_pf_pack(s[2 * t][2], s[2 * t][3]);
			pa[2] = kk_pf_pack(s[2 * t + 1][0], s[2 * t + 1][1]);
			pa[3] = kk_pf_pack(s[2 * t + 1][2], s[2 * t + 1][3]);
#pragma unroll
			for (int nb = 0; nb < NB; nb++) {
				kk_u32 bf[2];
				bf[0] = vt32[(8 * nb + gq) * (LV / 2) + 8 * t + tq];
				bf[1] = vt32[(8 * nb + gq) * (LV / 2) + 8 * t + tq + 4];
				kk_mma_bf16(o[nb], pa, bf);
			}
		}
	}

	// Normalise and write the live rows.
#pragma unroll
	for (int h = 0; h < 2; h++) {
		float l = lrow[h];
		l += __shfl_xor_sync(0xffffffffu, l, 1);
		l += __shfl_xor_sync(0xffffffffu, l, 2);
		if (!live[h])
			continue;
		int f = f0 + ra + 8 * h, qi = f / group, hh = g * group + f % group;
		float inv = 1.0f / l;
		float *orow = out + ((long long)(row0 + qi) * heads + hh) * D;
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			orow[8 * nb + 2 * tq] = o[nb][2 * h] * inv;
			orow[8 * nb + 2 * tq + 1] = o[nb][2 * h + 1] * inv;
		}
	}
}

// attn_prefill_d<D>: one sequence's call, block (tile, g).
// attn_prefill_batch_d<D>: a batched call's passes (kk_attn_pass,
// kk_attn_seq as attn_batch reads them, tile0 counted in this kernel's
// 64-row tiles): block (z, g) runs tile z - tile0 of the last pass whose
// tile0 is at or before z; a tile past its pass's rows leaves at once.
// attn_prefill_pc_d<D>, attn_prefill_batch_pc_d<D>: the same over layers
// that also hold kakeya_pc parts (the one-sequence kernel takes the kptab
// and vptab block tables after softcap; the batched one reads them from
// kk_attn_seq), kernels of their own so that the registers of the basis
// product do not cost the other layers' occupancy.
#define KK_ATTN_PREFILL(D, SUF, PC)                                                                                     \
	KK_KERNEL void __launch_bounds__(128)                                                                              \
	    attn_prefill##SUF##_d##D(float *__restrict__ out, const float *__restrict__ q, int n, int start, int heads,   \
	                             int kv_heads, int window, int bs, const kk_u64 *__restrict__ ktab,                   \
	                             const kk_u64 *__restrict__ vtab, const int *__restrict__ fmts,                       \
	                             const float *__restrict__ cos, const float *__restrict__ sin, int rot, float scale,  \
	                             float softcap KK_PF_PCARGS##PC) {                                                     \
		kk_attn_prefill<D, PC>(out, q, n, start, heads, kv_heads, window, bs, ktab, vtab, fmts, cos, sin, rot, 0,   \
		                       blockIdx.x, blockIdx.y, scale, softcap, KK_PF_PCTABS##PC);                          \
	}                                                                                                                 \
	KK_KERNEL void __launch_bounds__(128)                                                                              \
	    attn_prefill_batch##SUF##_d##D(float *__restrict__ out, const float *__restrict__ q,                           \
	                                   const kk_attn_pass *__restrict__ passes, const kk_attn_seq *__restrict__ seqs, \
	                                   int npasses, int heads, int kv_heads, int window, int bs,                      \
	                                   const float *__restrict__ cos, const float *__restrict__ sin, int rot,         \
	                                   float scale, float softcap) {                                                  \
		int z = blockIdx.x, lo = 0, hi = npasses - 1;                                                                \
		while (lo < hi) {                                                                                            \
			int mid = (lo + hi + 1) >> 1;                                                                        \
			if (passes[mid].tile0 <= z)                                                                          \
				lo = mid;                                                                                    \
			else                                                                                                 \
				hi = mid - 1;                                                                                \
		}                                                                                                            \
		kk_attn_pass ps = passes[lo];                                                                                \
		int group = heads / kv_heads;                                                                                \
		if (ps.n <= 0 || z - ps.tile0 >= (ps.n * group + KK_PF_BQ - 1) / KK_PF_BQ)                                   \
			return;                                                                                              \
		kk_attn_seq sq = seqs[lo];                                                                                   \
		kk_attn_prefill<D, PC>(out, q, ps.n, ps.start, heads, kv_heads, window, bs, sq.ktab, sq.vtab, sq.fmts, cos,  \
		                       sin, rot, ps.row0, z - ps.tile0, blockIdx.y, scale, softcap, sq.kptab, sq.vptab);     \
	}
#define KK_PF_PCARGSfalse
#define KK_PF_PCTABSfalse 0, 0
#define KK_PF_PCARGStrue , const kk_u64 *__restrict__ kptab, const kk_u64 *__restrict__ vptab
#define KK_PF_PCTABStrue kptab, vptab
KK_ATTN_PREFILL(64, , false)
KK_ATTN_PREFILL(128, , false)
KK_ATTN_PREFILL(64, _pc, true)
KK_ATTN_PREFILL(128, _pc, true)
#undef KK_ATTN_PREFILL

// pc_unpack decodes a prefill call's kakeya_pc parts once, for
// attn_prefill_d<D> to read as hot bf16 blocks, where the _pc kernels
// decode every key and value tile again in each row tile's CTA that walks
// it (a chunk of n rows: about n x group / 64 times), and its
// kakeya_pc_ec parts (entropy coded), which no tensor-core kernel reads
// (attn_split_pc decodes them per key tile and split). Block (x, y, z)
// takes rows 32x.. of entry e0 + y of the layer's block table (ktab,
// vtab, fmts, kptab, vptab as attn_split_pc reads them), keys (z = 0) or
// values (z = 1): a part of either format is decoded as kk_pc_tile or
// kk_pcec_tile does (its latents, then their basis product on the tensor
// cores, plus the calibration mean) into a float32 tile of 32 x (d + 1)
// in dynamic shared memory, and its rows are rounded to bf16 into
// scratch, at entry e's slot of 2 x bs x d values (keys first): keys as
// stored, before RoPE, which attn_prefill applies to hot keys. The call's
// table ctab (n entries: key addresses, value addresses, then the formats
// as int32) gets each entry's parts, the scratch slot in place of a
// decoded part and bf16 as its format; entries before e0 are left as
// they are (the call reads none).
KK_KERNEL void __launch_bounds__(256)
    pc_unpack(kk_u64 *__restrict__ ctab, const kk_u64 *__restrict__ ktab, const kk_u64 *__restrict__ vtab,
              const int *__restrict__ fmts, const kk_u64 *__restrict__ kptab, const kk_u64 *__restrict__ vptab,
              kk_u16 *__restrict__ scratch, int e0, int n, int bs, int d) {
	KK_DYN_SHARED(float, tile);
	int e = e0 + blockIdx.y, side = blockIdx.z, row0 = blockIdx.x * 32;
	int fmt = fmts[e], kf = fmt & 0xff, vf = fmt >> 16 ? (fmt >> 8) & 0xff : kf;
	int f = side ? vf : kf;
	const kk_u64 *tab = side ? vtab : ktab;
	kk_u16 *dst = scratch + ((long long)blockIdx.y * 2 + side) * bs * d;
	bool kpc = kf == kkPartKakeyaPC || kf == kkPartKakeyaPCEC, vpc = vf == kkPartKakeyaPC || vf == kkPartKakeyaPCEC;
	bool pc = side ? vpc : kpc;
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		ctab[(long long)side * n + e] = pc ? (kk_u64)dst : tab[e];
		if (side == 0) {
			int k2 = kpc ? kkPartBF16 : kf, v2 = vpc ? kkPartBF16 : vf;
			((int *)(ctab + 2 * (long long)n))[e] = k2 == v2 ? k2 : (k2 | v2 << 8 | 1 << 16);
		}
	}
	int tn = bs - row0 < 32 ? bs - row0 : 32;
	if (!pc || tn <= 0) // block-uniform
		return;
	int ld = d + 1;
	const float *prm = (const float *)(side ? vptab : kptab)[e];
	if (f == kkPartKakeyaPC)
		kk_pc_tile(tile, ld, (const kk_u8 *)tab[e], prm, bs, d, row0, tn); // syncs
	else
		kk_pcec_tile(tile, ld, (const kk_u8 *)tab[e], prm, bs, d, row0, tn); // syncs
	for (int i = threadIdx.x; i < tn * d; i += blockDim.x) {
		int j = i / d, c = i - j * d;
		dst[(long long)(row0 + j) * d + c] = kk_f32_to_bf16(tile[j * ld + c]);
	}
}
