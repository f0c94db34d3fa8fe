// Sampled decoding on the device: draw_rows draws each row's token from
// the softmax of its logits at the row's temperature, over the tokens
// top-k, min-p and top-p keep, with a uniform number the host drew from
// the request's own generator, so that only the token (and where the
// row's first non-finite logit is) crosses back to the host rather than
// the row's logits. It draws what the host Sampler (pick.DrawFiltered)
// draws from the same uniform. With a top-k: the same k candidates in the
// same order and the same float64 arithmetic in the same order, so the
// same token. Without: the same weights, bit for bit, and the same
// inverse-CDF walk (in index order, or in descending weight with top-p);
// only the sums of the weights are associated differently (per thread,
// then a reduction), so a draw may differ only where the uniform (or
// top-p's cut) falls within a float64 rounding of a boundary between two
// tokens.
#include "prelude.cuh"

// kk_draw_row is one row's draw parameters, 32 bytes (compute.DrawRow):
// the uniform in [0, 1), the temperature (> 0; 0 for the arg max), min-p
// (0 = off), top-p (0 or 1 = off) and top-k (0 or at least the row = off,
// else at most KK_DRAW_KMAX).
struct kk_draw_row {
	double u;
	float temperature;
	float min_p;
	float top_p;
	int top_k;
	int pad[2];
};

// KK_DRAW_KMAX is compute.MaxDrawTopK: the most candidates a top-k sorts
// in shared memory.
#define KK_DRAW_KMAX 1024

// kk_dmul, kk_dadd and kk_dsub are float64 operations rounded each on
// its own: the device's by mul.rn.f64 and add.rn.f64 in inline assembly
// (clang's -ffp-contract=fast, the CUDA default, fuses a * b + c into
// fma.rn.f64 whatever the source's pragmas or intrinsics say, and ptxas
// does not fuse operations with an explicit rounding), the emulator's by
// plain x86-64 SSE2 arithmetic, as Go's on amd64.
#ifdef KK_EMU
KK_DEVICE double kk_dmul(double a, double b) { return a * b; }
KK_DEVICE double kk_dadd(double a, double b) { return a + b; }
#else
KK_DEVICE double kk_dmul(double a, double b) {
	double r;
	asm("mul.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
	return r;
}
KK_DEVICE double kk_dadd(double a, double b) {
	double r;
	asm("add.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
	return r;
}
#endif
KK_DEVICE double kk_dsub(double a, double b) { return kk_dadd(a, -b); }

// kk_exp_poly is the reduction and polynomial of Go's math.Exp (for x <= 0)
// that kk_exp_weight and kk_exp64 share, each step rounded on its own:
// e**x = y * 2**k, y returned.
KK_DEVICE double kk_exp_poly(double x, int *kp) {
	int k = (int)kk_dsub(kk_dmul(1.44269504088896338700e+00, x), 0.5);
	double hi = kk_dsub(x, kk_dmul((double)k, 6.93147180369123816490e-01));
	double lo = kk_dmul((double)k, 1.90821492927058770002e-10);
	double r = kk_dsub(hi, lo);
	double t = kk_dmul(r, r);
	double q = kk_dadd(-1.65339022054652515390e-06, kk_dmul(t, 4.13813679705723846039e-08));
	q = kk_dadd(6.61375632143793436117e-05, kk_dmul(t, q));
	q = kk_dadd(-2.77777777770155933842e-03, kk_dmul(t, q));
	q = kk_dadd(1.66666666666666657415e-01, kk_dmul(t, q));
	double c = kk_dsub(r, kk_dmul(t, q));
	double y = kk_dsub(1, kk_dsub(kk_dsub(lo, kk_dmul(r, c) / kk_dsub(2, c)), hi));
	*kp = k;
	return y;
}

// kk_exp_weight is mathx.ExpWeight: exp(x) for x <= 0, in float64 and
// rounded once to float32, by the same reduction and polynomial with the
// same roundings in the same order (no fused multiply-adds), so that the
// device's weights are the host's bit for bit.
KK_DEVICE float kk_exp_weight(double x) {
	if (x != x)
		return (float)x;
	if (x < -104)
		return 0;
	if (x > -0x1p-28)
		return (float)kk_dadd(1, x);
	int k;
	double y = kk_exp_poly(x, &k);
	return (float)kk_dmul(y, __builtin_bit_cast(double, (kk_u64)(k + 1023) << 52));
}

// kk_exp64 is mathx.Exp for x <= 0 (and NaN): e**x in float64 by the
// same reduction and polynomial with the same roundings, scaled by 2**k as
// math.Ldexp does (one rounding, also where the result is subnormal); the
// top-k draw's weights, as the host's.
KK_DEVICE double kk_exp64(double x) {
	if (x != x)
		return x;
	if (x < -7.45133219101941108420e+02)
		return 0;
	if (-0x1p-28 < x && x < 0x1p-28)
		return kk_dadd(1, x);
	int k;
	double y = kk_exp_poly(x, &k);
	if (k >= -1022)
		return kk_dmul(y, __builtin_bit_cast(double, (kk_u64)(k + 1023) << 52));
	return kk_dmul(kk_dmul(y, __builtin_bit_cast(double, (kk_u64)(k + 53 + 1023) << 52)), 0x1p-53);
}

// kk_draw_weight is a token's weight relative to the most likely one's,
// w = exp((l - max)/T) in float32, 0 for a token min-p drops (w < min-p)
// and for NaN, as sampleAll weighs it.
KK_DEVICE float kk_draw_weight(float l, double maxl, double inv, float floor) {
	float w = kk_exp_weight(kk_dmul(kk_dsub((double)l, maxl), inv));
	if (w < floor || !(w > 0))
		w = 0;
	return w;
}

// kk_logit_key is a logit's key in an unsigned order that is the logits'
// (-0 as +0; NaN the lowest, below -Inf).
KK_DEVICE kk_u32 kk_logit_key(float l) {
	if (l != l)
		return 0;
	kk_u32 b = __builtin_bit_cast(kk_u32, l);
	if (b == 0x80000000u)
		b = 0;
	return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// kk_key_logit is the logit of a key kk_logit_key gave.
KK_DEVICE float kk_key_logit(kk_u32 k) {
	return __builtin_bit_cast(float, (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// kk_ldcg loads a float cached in L2 only (ld.global.cg): the weights a
// top-p draw wrote over the row, which other blocks of draw_split wrote,
// so that no stale line of this SM's L1 is read.
#ifdef KK_EMU
KK_DEVICE float kk_ldcg(const float *p) { return *p; }
#else
KK_DEVICE float kk_ldcg(const float *p) {
	float v;
	asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
	return v;
}
#endif

// kk_row_key is entry c's key in a search over row: in a top-k one
// (weights 0: the logit's key), in a top-p one (weights 1: the bits of the
// weight row holds, in the weights' order), or over candidates (row holds
// the keys themselves: weights 2, top-k's logit keys; weights 3, top-p's
// weights' bits). Searches by weight (weights 1 and 3) sum the weights.
KK_DEVICE kk_u32 kk_row_key(const float *row, int c, int weights) {
	if (weights >= 2)
		return ((const kk_u32 *)row)[c];
	return weights ? __builtin_bit_cast(kk_u32, kk_ldcg(row + c)) : kk_logit_key(row[c]);
}

// kk_radix is what kk_radix_find leaves in shared memory: the key found,
// the count (as a double) or weight of the tokens with larger keys, and
// how many tokens have the key.
struct kk_radix {
	kk_u32 key;
	double above;
	int n;
};

// kk_radix_find: the block (256 threads) finds among row's keys >= kmin
// (kk_row_key) the one at target from the top, four bits a pass (8 passes
// over the row): by count (weights 0; target a rank, 1 for the largest),
// the key v with count(> v) < target <= count(>= v); by weight (weights
// 1), with weight(> v) < target <= weight(>= v) when ge, else
// weight(> v) <= target < weight(>= v). Each pass, each thread counts and
// weighs its tokens of the keys still in play by the pass's digit
// (float64, in stride order), and a fixed-shape reduction (big: 16 x 256
// doubles, part: 256) adds the threads' sums, so the result does not
// depend on scheduling; thread 0 then takes digits from the largest down.
// Where rounding leaves the target past every digit's weight, it takes the
// smallest digit held, as the host's walks take their last token. It
// leaves the result in *res for every thread after its last barrier.
KK_DEVICE void kk_radix_find(const float *row, int cols, int weights, int ge, kk_u32 kmin, double target, double *big, double *part, int *hn, struct kk_radix *res) {
	int t = threadIdx.x;
	if (t == 0) {
		res->key = 0;
		res->above = 0;
		res->n = 0;
	}
	for (int shift = 28; shift >= 0; shift -= 4) {
		__syncthreads(); // the last pass's hn, part and res read
		if (t < 16)
			hn[t] = 0;
		__syncthreads(); // res and hn set
		kk_u64 want = (kk_u64)res->key >> (shift + 4);
		int n[16];
		double m[16];
		for (int d = 0; d < 16; d++) {
			n[d] = 0;
			m[d] = 0;
		}
		for (int c = t; c < cols; c += 256) {
			kk_u32 k = kk_row_key(row, c, weights);
			if (k < kmin || ((kk_u64)k >> (shift + 4)) != want)
				continue;
			int d = (k >> shift) & 15;
			n[d]++;
			if (weights & 1)
				m[d] = kk_dadd(m[d], (double)__builtin_bit_cast(float, k));
		}
		for (int d = 0; d < 16; d++) {
			if (n[d])
				atomicAdd(&hn[d], n[d]);
			big[d * 256 + t] = m[d];
		}
		__syncthreads();
		{ // thread t adds 16 threads' sums of digit t/16
			int d = t >> 4, g = t & 15;
			double s = 0;
			for (int i = 0; i < 16; i++)
				s = kk_dadd(s, big[d * 256 + g * 16 + i]);
			part[t] = s;
		}
		__syncthreads();
		if (t == 0) {
			double above = res->above;
			int pick = -1, low = -1;
			double pa = 0, la = 0;
			for (int d = 15; d >= 0; d--) {
				if (hn[d] == 0)
					continue;
				double md = (double)hn[d];
				if (weights & 1) {
					md = 0;
					for (int g = 0; g < 16; g++)
						md = kk_dadd(md, part[d * 16 + g]);
				}
				double next = kk_dadd(above, md);
				low = d;
				la = above;
				if (ge ? next >= target : next > target) {
					pick = d;
					pa = above;
					break;
				}
				above = next;
			}
			if (pick < 0) { // past the weight by rounding: the smallest
				pick = low;
				pa = la;
			}
			if (pick >= 0) {
				res->key |= (kk_u32)pick << shift;
				res->above = pa;
				res->n = hn[pick];
			}
		}
	}
	__syncthreads();
}

// kk_nth_key: the block (256 threads) finds the index of the token with
// key v that is nth (from 0) in index order among those with key v, each
// thread over its contiguous chunk of the row with a scan (sl) of the
// chunks' counts; *found is -1 where there is none, for every thread
// after the last barrier. With dst (top-k), it instead writes the tokens
// (ids[c], or c + base without ids) and keys of the first nth such
// entries to dst and dkey.
KK_DEVICE void kk_nth_key(const float *row, int cols, int weights, kk_u32 v, int nth, int *sl, int *found, int *dst, kk_u32 *dkey, const int *ids, int base) {
	int t = threadIdx.x;
	int ch = (cols + 255) / 256;
	int a = t * ch < cols ? t * ch : cols;
	int e = a + ch < cols ? a + ch : cols;
	int n = 0;
	for (int c = a; c < e; c++)
		n += kk_row_key(row, c, weights) == v;
	if (t == 0)
		*found = -1;
	sl[t] = n;
	__syncthreads();
	for (int o = 1; o < 256; o <<= 1) { // inclusive scan of the counts
		int x = t >= o ? sl[t - o] : 0;
		__syncthreads();
		sl[t] += x;
		__syncthreads();
	}
	int before = sl[t] - n;
	if (dst) {
		for (int c = a; c < e && before < nth; c++)
			if (kk_row_key(row, c, weights) == v) {
				dst[before] = ids ? ids[c] : c + base;
				dkey[before] = v;
				before++;
			}
	} else if (nth >= before && nth < sl[t]) {
		for (int c = a; c < e; c++)
			if (kk_row_key(row, c, weights) == v && before++ == nth) {
				*found = ids ? ids[c] : c + base;
				break;
			}
	}
	__syncthreads();
}

// kk_draw_before reports whether candidate (ka, ia) comes before (kb, ib):
// the larger logit first, the lower index first among equal ones.
KK_DEVICE int kk_draw_before(kk_u32 ka, int ia, kk_u32 kb, int ib) {
	return ka > kb || (ka == kb && ia < ib);
}

// kk_topk_select: the block (256 threads) leaves in shared memory (ckey,
// cid: big's first 4 KB and next 4 KB) the kk = min(k, n) best entries of
// src (n entries, keys kk_row_key(src, c, mode): mode 0 logits, mode 2
// candidates' keys), sorted, and returns kk: the kk largest keys, ties at
// the kk-th key going to the entry first in src (kk_radix_find by count
// gives the kk-th's key, the entries above it go to shared memory, then
// the first of those equal to it, kk_nth_key), then a bitonic sort of
// (key, token), larger key first, lower token first. An entry's token is
// ids[c], or c + base without ids. k <= KK_DRAW_KMAX.
KK_DEVICE int kk_topk_select(const float *src, int n, int mode, const int *ids, int base, int k, double *big, double *part, int *hn, int *sl, struct kk_radix *res, int *misc) {
	int t = threadIdx.x;
	if (k > n)
		k = n;
	kk_radix_find(src, n, mode, 1, 0, (double)k, big, part, hn, res);
	kk_u32 v = res->key;
	int above = (int)res->above;
	kk_u32 *ckey = (kk_u32 *)big;
	int *cid = (int *)(ckey + KK_DRAW_KMAX);
	int P = 1;
	while (P < k)
		P <<= 1;
	if (t == 0)
		misc[0] = 0;
	for (int i = k + t; i < P; i += 256) { // padding, after every entry
		ckey[i] = 0;
		cid[i] = 0x7fffffff;
	}
	__syncthreads();
	for (int c = t; c < n; c += 256) { // the keys above the k-th's
		kk_u32 key = kk_row_key(src, c, mode);
		if (key > v) {
			int slot = atomicAdd(&misc[0], 1);
			ckey[slot] = key;
			cid[slot] = ids ? ids[c] : c + base;
		}
	}
	// The k-th's key: the first k - above of them in src's order.
	kk_nth_key(src, n, mode, v, k - above, sl, &misc[1], cid + above, ckey + above, ids, base);
	for (int size = 2; size <= P; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int i = t; i < P; i += 256) {
				int l = i ^ stride;
				if (l > i) {
					int first = (i & size) == 0;
					int sw = first ? kk_draw_before(ckey[l], cid[l], ckey[i], cid[i]) : kk_draw_before(ckey[i], cid[i], ckey[l], cid[l]);
					if (sw) {
						kk_u32 tk = ckey[i];
						int ti = cid[i];
						ckey[i] = ckey[l];
						cid[i] = cid[l];
						ckey[l] = tk;
						cid[l] = ti;
					}
				}
			}
			__syncthreads();
		}
	}
	return k;
}

// kk_topk_draw: the block (256 threads) draws from the k candidates
// kk_topk_select left, as pick.DrawFiltered does: each candidate's exp in
// float64 in parallel (kk_exp64), then thread 0 runs the host's sums,
// min-p, top-p and walk over them in the host's order, each operation
// rounded as the host's. Returns the token to thread 0.
KK_DEVICE int kk_topk_draw(const struct kk_draw_row *p, int k, double *big) {
	int t = threadIdx.x;
	kk_u32 *ckey = (kk_u32 *)big;
	int *cid = (int *)(ckey + KK_DRAW_KMAX);
	double *cprob = big + KK_DRAW_KMAX;
	const double maxl = (double)kk_key_logit(ckey[0]);
	const double inv = 1.0 / (double)p->temperature;
	for (int i = t; i < k; i += 256)
		cprob[i] = kk_exp64(kk_dmul(kk_dsub((double)kk_key_logit(ckey[i]), maxl), inv));
	__syncthreads();
	if (t != 0)
		return -1;
	double sum = 0;
	for (int i = 0; i < k; i++)
		sum = kk_dadd(sum, cprob[i]);
	int n = k;
	if (p->min_p > 0) {
		double floor = kk_dmul((double)p->min_p, cprob[0]);
		while (n > 1 && cprob[n - 1] < floor) {
			sum = kk_dsub(sum, cprob[n - 1]);
			n--;
		}
	}
	double tp = (double)p->top_p;
	if (tp > 0 && tp < 1) {
		double cum = 0;
		for (int i = 0; i < n; i++) {
			cum = kk_dadd(cum, cprob[i]);
			if (cum >= kk_dmul(tp, sum)) {
				sum = cum;
				n = i + 1;
				break;
			}
		}
	}
	double r = kk_dmul(p->u, sum);
	for (int i = 0; i < n; i++) {
		r = kk_dsub(r, cprob[i]);
		if (r < 0)
			return cid[i];
	}
	return cid[n - 1];
}

// kk_draw_topk: the block (256 threads) draws row's token with a top-k
// (0 < k < cols, k <= KK_DRAW_KMAX) as pick.DrawFiltered does: the k
// largest logits (ties at the k-th value to the lower index), sorted
// (kk_topk_select), then kk_topk_draw. Returns the token to thread 0.
KK_DEVICE int kk_draw_topk(const float *row, int cols, const struct kk_draw_row *p, double *big, double *part, int *hn, int *sl, struct kk_radix *res, int *misc) {
	int k = kk_topk_select(row, cols, 0, 0, 0, p->top_k, big, part, hn, sl, res, misc);
	return kk_topk_draw(p, k, big);
}

// kk_draw_weigh: the block (256 threads) weighs the tokens lo..hi of row
// (kk_draw_weight), writing each weight over its logit where store, and
// returns to every thread their float64 sum (per thread in stride order,
// then a tree through ss); with oct (128 ints in shared memory, zeroed
// before a barrier), it also counts the kept tokens by binary exponent
// of weight there.
KK_DEVICE double kk_draw_weigh(float *row, int lo, int hi, const struct kk_draw_row *p, double maxl, int store, double *ss, int *oct) {
	int t = threadIdx.x;
	const double inv = 1.0 / (double)p->temperature;
	double s = 0;
	for (int c = lo + t; c < hi; c += 256) {
		float w = kk_draw_weight(row[c], maxl, inv, p->min_p);
		if (store)
			row[c] = w;
		if (w > 0) {
			s = kk_dadd(s, (double)w);
			if (oct)
				atomicAdd(&oct[__builtin_bit_cast(kk_u32, w) >> 23], 1);
		}
	}
	__syncthreads(); // ss's last readers are done
	ss[t] = s;
	__syncthreads();
	for (int o = 128; o > 0; o >>= 1) {
		if (t < o)
			ss[t] = kk_dadd(ss[t], ss[t + o]);
		__syncthreads();
	}
	double S = ss[0];
	__syncthreads(); // S read before ss is written again
	return S;
}

KK_DEVICE int kk_draw_cut(const float *row, int cols, int mode, const int *ids, const struct kk_draw_row *p, double S, int top, double *big, double *part, int *hn, int *sl, struct kk_radix *res, int *misc);
KK_DEVICE int kk_topp_prefiltered(const float *row, int cols, const struct kk_draw_row *p, double S, int top, const int *oct, int cap, kk_u32 *akey, int *aid, int *pre, double *big, double *part, int *hn, int *sl, struct kk_radix *res, int *misc);

// KK_TOPP_SHARED is the most tokens draw_rows gathers for a top-p's
// searches (in shared memory: 8 KB).
#define KK_TOPP_SHARED 1024

// kk_draw_topp: the block (256 threads) draws row's token with a top-p
// and no top-k, as pick.DrawFiltered does, without sorting: row becomes
// its weights (kk_draw_weight, the host's bit for bit) and their sum S;
// kk_radix_find by weight finds the weight w at which the tokens in
// descending order (ties by index) reach top-p times S, the host's cut:
// those of larger weights and the first j of weight w, j the fewest that
// reach it; the walk's target u times the cut's weight C then gives the
// weight group the token is in (kk_radix_find again, over the cut), and
// its place in the group, in index order (kk_nth_key). The sums are
// associated otherwise than the host's running ones, so the cut and the
// token can differ from the host's only where top-p times S or u times C
// lies within their roundings of a boundary. Returns the token to every
// thread.
//
// The tokens that hold the cut are found first where they are few
// (kk_topp_prefiltered, up to KK_TOPP_SHARED gathered into akey and aid
// in shared memory), which spares most passes over the row.
KK_DEVICE int kk_draw_topp(float *row, int cols, const struct kk_draw_row *p, double maxl, int top, double *big, double *part, int *hn, int *sl, double *ss, struct kk_radix *res, int *misc, int *oct, kk_u32 *akey, int *aid, int *pre) {
	for (int i = threadIdx.x; i < 128; i += 256)
		oct[i] = 0;
	__syncthreads();
	double S = kk_draw_weigh(row, 0, cols, p, maxl, 1, ss, oct);
	return kk_topp_prefiltered(row, cols, p, S, top, oct, KK_TOPP_SHARED, akey, aid, pre, big, part, hn, sl, res, misc);
}

// kk_draw_cut is kk_draw_topp once row holds its weights (mode 1) and S
// their sum, or once row holds the weights' bits of candidates that hold
// the cut (mode 3, their tokens in ids, in index order): the two searches
// and the token. Returns the token to every thread.
KK_DEVICE int kk_draw_cut(const float *row, int cols, int mode, const int *ids, const struct kk_draw_row *p, double S, int top, double *big, double *part, int *hn, int *sl, struct kk_radix *res, int *misc) {
	if (!(S > 0)) // nothing kept (the largest logit is infinite): the arg max
		return top;
	kk_radix_find(row, cols, mode, 1, 1, kk_dmul((double)p->top_p, S), big, part, hn, res);
	kk_u32 vcut = res->key;
	double w = (double)__builtin_bit_cast(float, vcut);
	double above = res->above;
	int ncut = res->n;
	// j, the fewest tokens of weight w after the larger ones that reach
	// top-p times S, and the cut's weight.
	double q = kk_dsub(kk_dmul((double)p->top_p, S), above) / w;
	int j = ncut;
	if (q < (double)ncut) {
		j = (int)q;
		if ((double)j < q)
			j++;
		if (j < 1)
			j = 1;
	}
	double C = kk_dadd(above, kk_dmul((double)j, w));
	__syncthreads(); // res read before the next search writes it
	kk_radix_find(row, cols, mode, 0, vcut, kk_dmul(p->u, C), big, part, hn, res);
	kk_u32 v = res->key;
	double wv = (double)__builtin_bit_cast(float, v);
	int n = v == vcut ? j : res->n;
	double qi = kk_dsub(kk_dmul(p->u, C), res->above) / wv;
	int i = n - 1;
	if (qi < (double)(n - 1)) {
		i = (int)qi;
		if (i < 0)
			i = 0;
	}
	kk_nth_key(row, cols, mode, v, i, sl, &misc[1], 0, 0, ids, 0);
	return misc[1] >= 0 ? misc[1] : top;
}

// kk_topp_octave is run by one thread: from the kept tokens' counts by
// binary exponent of weight (oct: octave e, 1..127, holds weights in
// [2^(e-127), 2^(e-126)), 0 the subnormal ones) and their sum S, it sets
// pre[0] to the highest octave e above which the weight surely reaches
// top-p times S (counting each token at its octave's least weight, or S
// less the most the tokens below could hold, S within 2^-30 of the exact
// sum), 0 where none is sure, and pre[1] to how many tokens are at or
// above it, -1 if more than cap. The tokens of weight at least 2^(e-127)
// (any kept one at e = 0) hold top-p's cut and walk.
KK_DEVICE void kk_topp_octave(const int *oct, double S, float top_p, int cap, int *pre) {
	double ub = 0;
	for (int e = 0; e < 128; e++)
		ub = kk_dadd(ub, kk_dmul((double)oct[e], __builtin_bit_cast(double, (kk_u64)(e - 126 + 1023) << 52)));
	double need = kk_dmul(kk_dmul((double)top_p, S), 1 + 0x1p-20), lb = 0, above = 0;
	int e = 127, n = 0;
	for (; e > 0; e--) {
		n += oct[e];
		lb = kk_dadd(lb, kk_dmul((double)oct[e], __builtin_bit_cast(double, (kk_u64)(e - 127 + 1023) << 52)));
		above = kk_dadd(above, kk_dmul((double)oct[e], __builtin_bit_cast(double, (kk_u64)(e - 126 + 1023) << 52)));
		double lb2 = kk_dsub(kk_dsub(S, kk_dsub(ub, above)), kk_dmul(S, 0x1p-30));
		if (lb >= need || lb2 >= need)
			break;
	}
	if (e == 0)
		n += oct[0];
	pre[0] = e;
	pre[1] = n <= cap ? n : -1;
}

// kk_topp_prefiltered: the block (256 threads) draws a top-p row whose
// weights row holds (their sum S, their counts by octave oct, in shared
// memory) as kk_draw_cut does, over only the tokens kk_topp_octave says
// hold the cut where they are at most cap: gathered in index order
// (contiguous chunks, a scan of their counts) into akey and aid, the
// weights read through L2 (other blocks may have written them). Returns
// the token to every thread.
KK_DEVICE int kk_topp_prefiltered(const float *row, int cols, const struct kk_draw_row *p, double S, int top, const int *oct, int cap, kk_u32 *akey, int *aid, int *pre, double *big, double *part, int *hn, int *sl, struct kk_radix *res, int *misc) {
	int t = threadIdx.x;
	if (t == 0)
		kk_topp_octave(oct, S, p->top_p, cap, pre);
	__syncthreads();
	if (pre[1] < 0 || !(S > 0))
		return kk_draw_cut(row, cols, 1, 0, p, S, top, big, part, hn, sl, res, misc);
	kk_u32 kmin = pre[0] > 0 ? (kk_u32)pre[0] << 23 : 1;
	int ch = (cols + 255) / 256;
	int a = t * ch < cols ? t * ch : cols;
	int e = a + ch < cols ? a + ch : cols;
	int n = 0;
	for (int c = a; c < e; c++)
		n += __builtin_bit_cast(kk_u32, kk_ldcg(row + c)) >= kmin;
	sl[t] = n;
	__syncthreads();
	for (int o = 1; o < 256; o <<= 1) {
		int v = t >= o ? sl[t - o] : 0;
		__syncthreads();
		sl[t] += v;
		__syncthreads();
	}
	int at = sl[t] - n;
	for (int c = a; c < e; c++) {
		kk_u32 k = __builtin_bit_cast(kk_u32, kk_ldcg(row + c));
		if (k >= kmin) {
			akey[at] = k;
			aid[at] = c;
			at++;
		}
	}
	__syncthreads();
	return kk_draw_cut((const float *)akey, pre[1], 3, aid, p, S, top, big, part, hn, sl, res, misc);
}

// kk_draw_walk: the block (256 threads) finds the token of row's range
// lo..hi (kept weights, kk_draw_weight) at which the cumulative weight in
// index order passes r (u times the range's weight where scale is set),
// narrowing the range: each thread sums the weights of its contiguous
// chunk in float64, a scan of the 256 chunk sums gives each chunk's start
// in the cumulative weight, and the chunk holding the target becomes the
// next range, the target less the weight before it; a range of at most
// 256 tokens ends it at one token (3 levels for 151,936 tokens). Where
// rounding leaves the target past the range's weight, it takes the
// range's last kept token (0 if none), as the host's walk does when it
// runs past its sum. Returns the token to thread 0.
KK_DEVICE int kk_draw_walk(const float *row, int lo, int hi, const struct kk_draw_row *p, double maxl, double r, int scale, double *ss, int *sl, int *nx, double *nr) {
	int t = threadIdx.x;
	const double inv = 1.0 / (double)p->temperature;
	const float floor = p->min_p;
	for (int level = 0;; level++) {
		int ch = (hi - lo + 255) / 256;
		int a = lo + t * ch < hi ? lo + t * ch : hi;
		int e = a + ch < hi ? a + ch : hi;
		double s = 0;
		int last = -1;
		for (int c = a; c < e; c++) {
			float w = kk_draw_weight(row[c], maxl, inv, floor);
			if (w > 0) {
				s = kk_dadd(s, (double)w);
				last = c;
			}
		}
		__syncthreads(); // the last level's nx, nr and scans are read
		ss[t] = s;
		sl[t] = last;
		if (t == 0)
			nx[0] = -1;
		__syncthreads();
		// Inclusive scans: the chunk sums' (in chunk order) and the
		// largest kept index's.
		for (int o = 1; o < 256; o <<= 1) {
			double sv2 = t >= o ? ss[t - o] : 0.0;
			int lv = t >= o ? sl[t - o] : -1;
			__syncthreads();
			ss[t] = kk_dadd(ss[t], sv2);
			if (lv > sl[t])
				sl[t] = lv;
			__syncthreads();
		}
		if (level == 0 && scale)
			r = kk_dmul(p->u, ss[255]);
		double before = t > 0 ? ss[t - 1] : 0.0;
		if (r >= before && r < ss[t]) { // one thread at most: the scan is monotone
			nx[0] = a;
			nx[1] = e;
			nr[0] = kk_dsub(r, before);
		}
		__syncthreads();
		if (nx[0] < 0 || ch == 1) {
			int tok = nx[0];
			if (tok < 0) // past the range's weight by rounding
				tok = sl[255] >= 0 ? sl[255] : 0;
			__syncthreads(); // nx and sl read before a later use
			return tok;
		}
		lo = nx[0];
		hi = nx[1];
		r = nr[0];
	}
}

// draw_rows: block r (256 threads) draws row r of x (cols values) with
// rows[r] (at temperature 0 its arg max, as argmax picks it, so that a
// step of greedy and sampled rows is one launch) and sets out[2r] to the
// token and out[2r+1] to the index of the row's first NaN or ±Inf, -1 if
// none (the token is -1 for a row of NaN only, as argmax's). A row with
// top-p and no top-k is overwritten with its weights.
//
// A max pass (argmax's rules) gives the most likely token. With a top-k,
// kk_draw_topk; with a top-p, kk_draw_topp; otherwise the walk over the
// whole row, kk_draw_walk.
KK_KERNEL void __launch_bounds__(256) draw_rows(int *__restrict__ out, float *__restrict__ x, const struct kk_draw_row *__restrict__ rows, int cols) {
	__shared__ float sv[256];
	__shared__ int si[256], sb[256];
	__shared__ double ss[256];
	__shared__ int sl[256];
	__shared__ int nx[2];
	__shared__ double nr[1];
	__shared__ double big[16 * 256]; // kk_radix_find's sums, then top-k's candidates
	__shared__ int hn[16];
	__shared__ struct kk_radix res;
	__shared__ int misc[2];
	__shared__ int oct[128], pre[2];
	__shared__ kk_u32 akey[KK_TOPP_SHARED];
	__shared__ int aid[KK_TOPP_SHARED];
	float *row = x + (long long)blockIdx.x * cols;
	int t = threadIdx.x;
	kk_row_argmax(row, cols, sv, si, sb); // the max pass
	if (si[0] < 0) { // NaN only
		if (t == 0) {
			out[2 * blockIdx.x] = -1;
			out[2 * blockIdx.x + 1] = sb[0];
		}
		return;
	}
	const struct kk_draw_row p = rows[blockIdx.x];
	if (p.temperature == 0) { // the arg max, as argmax
		if (t == 0) {
			out[2 * blockIdx.x] = si[0];
			out[2 * blockIdx.x + 1] = sb[0];
		}
		return;
	}
	const double maxl = sv[0];
	if (p.top_k > 0 && p.top_k < cols) {
		int tok = kk_draw_topk(row, cols, &p, big, ss, hn, sl, &res, misc);
		if (t == 0) {
			out[2 * blockIdx.x] = tok;
			out[2 * blockIdx.x + 1] = sb[0];
		}
		return;
	}
	if (p.top_p > 0 && p.top_p < 1) {
		int bad = sb[0], top = si[0];
		int tok = kk_draw_topp(row, cols, &p, maxl, top, big, ss, hn, sl, ss, &res, misc, oct, akey, aid, pre);
		if (t == 0) {
			out[2 * blockIdx.x] = tok;
			out[2 * blockIdx.x + 1] = bad;
		}
		return;
	}
	int tok = kk_draw_walk(row, 0, cols, &p, maxl, p.u, 1, ss, sl, nx, nr);
	if (t == 0) {
		out[2 * blockIdx.x] = tok;
		out[2 * blockIdx.x + 1] = sb[0];
	}
}

// A row drawn by several blocks (draw_split_max, then draw_split): the
// row's parts, ps tokens each (a multiple of 32, so that no 128-byte line
// holds two parts' tokens), one block each, a scratch area per row
// (stride bytes: a kk_split_head, a kk_split_part per part, then for a
// top-k of at most kmax, kmax keys and kmax tokens per part twice: each
// part's candidates, then all of them gathered) and two
// counters per row in counts (the blocks of each kernel done), which start
// at 0 (the backend zeroes them once, apart from the scratch, whose
// layout changes with the parts) and are left at 0 by the last block of
// each kernel, so the pair replays in a graph.
struct kk_split_head {
	int pad0[2];
	int top;      // the row's arg max (-1 for a row of NaN only)
	int bad;      // its first NaN or ±Inf (-1 if none)
	float maxv;   // its largest value
	int pad[3];
};
struct kk_split_part {
	double sum; // the part's kept weight
	float maxv; // its largest value and that value's index
	int idx;
	int bad; // its first NaN or ±Inf
	int cnt; // its top-k candidates
};

// kk_ldcg_u32 loads a 32-bit word cached in L2 only, as kk_ldcg.
#ifdef KK_EMU
KK_DEVICE kk_u32 kk_ldcg_u32(const kk_u32 *p) { return *p; }
#else
KK_DEVICE kk_u32 kk_ldcg_u32(const kk_u32 *p) {
	kk_u32 v;
	asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
}
#endif

// kk_split_arrive: after every thread of the block wrote what the last
// block reads, the block counts itself in at *count; returns to every
// thread whether it is the row's last block (which then resets *count).
KK_DEVICE int kk_split_arrive(int *count, int parts, int *last) {
	__threadfence(); // this thread's writes before the count
	__syncthreads();
	if (threadIdx.x == 0)
		*last = atomicAdd(count, 1) == parts - 1;
	__syncthreads();
	if (!*last)
		return 0;
	__threadfence(); // the other blocks' writes before this block's reads
	if (threadIdx.x == 0)
		*(volatile int *)count = 0;
	return 1;
}

// draw_split_max: block (b, r) (256 threads) takes the largest value of
// part b of row r of x (argmax's rules) and its first NaN or ±Inf; the
// row's last block reduces the parts' in part order into the row's head.
KK_KERNEL void __launch_bounds__(256) draw_split_max(const float *__restrict__ x, int cols, int ps, char *__restrict__ scratch, int stride, int *__restrict__ counts) {
	__shared__ float sv[256];
	__shared__ int si[256], sb[256];
	__shared__ int last;
	int r = blockIdx.y, b = blockIdx.x, parts = gridDim.x;
	int lo = b * ps, hi = lo + ps < cols ? lo + ps : cols;
	struct kk_split_head *h = (struct kk_split_head *)(scratch + (long long)r * stride);
	struct kk_split_part *pp = (struct kk_split_part *)(h + 1);
	kk_row_argmax(x + (long long)r * cols + lo, hi - lo, sv, si, sb);
	if (threadIdx.x == 0) {
		pp[b].maxv = sv[0];
		pp[b].idx = si[0] >= 0 ? si[0] + lo : -1;
		pp[b].bad = sb[0] >= 0 ? sb[0] + lo : -1;
	}
	if (!kk_split_arrive(&counts[2 * r], parts, &last) || threadIdx.x != 0)
		return;
	volatile struct kk_split_part *vp = pp;
	float bv = 0.0f;
	int bi = -1, bad = -1;
	for (int i = 0; i < parts; i++) {
		float v = vp[i].maxv;
		int vi = vp[i].idx, vb = vp[i].bad;
		if (kk_better(v, vi, bv, bi)) {
			bv = v;
			bi = vi;
		}
		if (vb >= 0 && (bad < 0 || vb < bad))
			bad = vb;
	}
	volatile struct kk_split_head *vh = h;
	vh->maxv = bv;
	vh->top = bi;
	vh->bad = bad;
}

// draw_split: block (b, r) (256 threads) draws row r of x with rows[r] as
// draw_rows does, after draw_split_max, part b's tokens weighed by this
// block: their weight summed (and, with top-p and no top-k, written over
// the logits); the row's last block then draws. Without top-k and top-p
// it finds the part holding u times the row's weight (the parts' sums in
// part order) and walks that part (kk_draw_walk); with top-p it runs
// kk_draw_cut over the row's weights; with a top-k, each block leaves its
// part's k best (kk_topk_select) in the scratch, and the last block
// gathers them in part order (so that equal keys stay in index order) and
// selects and draws the row's k best from them. It sets out[2r] and
// out[2r+1] as draw_rows.
KK_KERNEL void __launch_bounds__(256) draw_split(int *__restrict__ out, float *__restrict__ x, const struct kk_draw_row *__restrict__ rows, int cols, int ps, char *__restrict__ scratch, int stride, int *__restrict__ counts) {
	__shared__ double ss[256];
	__shared__ int sl[256];
	__shared__ int nx[2];
	__shared__ double nr[1];
	__shared__ double big[16 * 256];
	__shared__ int hn[16];
	__shared__ struct kk_radix res;
	__shared__ int misc[2];
	__shared__ int last;
	__shared__ int hn2[128];
	__shared__ int pre[2];
	int r = blockIdx.y, b = blockIdx.x, parts = gridDim.x, t = threadIdx.x;
	int lo = b * ps, hi = lo + ps < cols ? lo + ps : cols;
	float *row = x + (long long)r * cols;
	struct kk_split_head *h = (struct kk_split_head *)(scratch + (long long)r * stride);
	struct kk_split_part *pp = (struct kk_split_part *)(h + 1);
	volatile struct kk_split_head *vh = h;
	const int top = vh->top;
	const double maxl = vh->maxv;
	const struct kk_draw_row p = rows[r];
	// 0: the arg max (or a row of NaN only); 1: top-k; 2: top-p; 3: the walk.
	int mode = top < 0 || p.temperature == 0 ? 0 : p.top_k > 0 && p.top_k < cols ? 1 : p.top_p > 0 && p.top_p < 1 ? 2 : 3;
	double s = 0;
	for (int i = t; i < 128; i += 256)
		hn2[i] = 0;
	__syncthreads();
	if (mode >= 2)
		s = kk_draw_weigh(row, lo, hi, &p, maxl, mode == 2, ss, mode == 2 ? hn2 : 0);
	const int kmax = (stride - (int)sizeof(struct kk_split_head) - parts * (int)sizeof(struct kk_split_part)) / (16 * parts);
	kk_u32 *gkey = (kk_u32 *)(pp + parts); // each part's candidates
	int *gid = (int *)(gkey + parts * kmax);
	kk_u32 *akey = (kk_u32 *)(gid + parts * kmax); // all of them, gathered
	int *aid = (int *)(akey + parts * kmax);
	int cnt = 0;
	if (mode == 2) // the part's kept tokens by binary exponent of weight
		for (int i = t; i < 128; i += 256)
			((int *)gkey)[b * 128 + i] = hn2[i];
	if (mode == 1) {
		cnt = kk_topk_select(row + lo, hi - lo, 0, 0, lo, p.top_k, big, ss, hn, sl, &res, misc);
		kk_u32 *ckey = (kk_u32 *)big;
		int *cid = (int *)(ckey + KK_DRAW_KMAX);
		for (int i = t; i < cnt; i += 256) {
			gkey[b * kmax + i] = ckey[i];
			gid[b * kmax + i] = cid[i];
		}
	}
	if (t == 0) {
		pp[b].sum = s;
		pp[b].cnt = cnt;
	}
	if (!kk_split_arrive(&counts[2 * r + 1], parts, &last))
		return;
	int tok = top;
	volatile struct kk_split_part *vp = pp;
	if (mode == 1) {
		int n = 0;
		for (int i = 0; i < parts; i++) {
			int ci = vp[i].cnt;
			for (int j = t; j < ci; j += 256) {
				akey[n + j] = kk_ldcg_u32(gkey + i * kmax + j);
				aid[n + j] = (int)kk_ldcg_u32((const kk_u32 *)gid + i * kmax + j);
			}
			n += ci;
		}
		__syncthreads();
		int k = kk_topk_select((const float *)akey, n, 2, aid, 0, p.top_k, big, ss, hn, sl, &res, misc);
		tok = kk_topk_draw(&p, k, big);
	} else if (mode == 2) {
		double S = 0;
		for (int i = 0; i < parts; i++)
			S = kk_dadd(S, vp[i].sum);
		// The prefilter (kk_topp_octave): the parts' counts summed.
		for (int i = t; i < 128; i += 256) {
			int n = 0;
			for (int j = 0; j < parts; j++)
				n += (int)kk_ldcg_u32((const kk_u32 *)gkey + j * 128 + i);
			hn2[i] = n;
		}
		__syncthreads();
		const int cap = parts * kmax < 16384 ? parts * kmax : 16384;
		tok = kk_topp_prefiltered(row, cols, &p, S, top, hn2, cap, akey, aid, pre, big, ss, hn, sl, &res, misc);
	} else if (mode == 3) {
		// The part holding u times the row's weight, and the target
		// within it; past the weight by rounding, the last part with
		// weight, whose walk then takes its last kept token.
		double S = 0;
		for (int i = 0; i < parts; i++)
			S = kk_dadd(S, vp[i].sum);
		double target = kk_dmul(p.u, S), before = 0;
		int q = -1, lastq = 0;
		double lastb = 0;
		for (int i = 0; i < parts; i++) {
			double si = vp[i].sum;
			if (si > 0) {
				lastq = i;
				lastb = before;
			}
			double next = kk_dadd(before, si);
			if (target >= before && target < next) {
				q = i;
				break;
			}
			before = next;
		}
		if (q < 0) {
			q = lastq;
			before = lastb;
			target = kk_dadd(before, vp[q].sum);
		}
		int qlo = q * ps, qhi = qlo + ps < cols ? qlo + ps : cols;
		tok = kk_draw_walk(row, qlo, qhi, &p, maxl, kk_dsub(target, before), 0, ss, sl, nx, nr);
	}
	if (t == 0) {
		out[2 * r] = tok;
		out[2 * r + 1] = vh->bad;
	}
}
