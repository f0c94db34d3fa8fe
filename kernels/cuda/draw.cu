// Sampled decoding on the device: draw_rows draws each row's token from
// the softmax of its logits at the row's temperature, over the tokens
// min-p keeps, with a uniform number the host drew from the request's own
// generator, so that only the token (and where the row's first non-finite
// logit is) crosses back to the host rather than the row's logits. It
// draws what the host Sampler (sampling.go, sampleAll without top-p) draws
// from the same uniform: the same weights, bit for bit, and the same
// inverse-CDF walk in index order; only the sum of the weights is
// associated differently (per thread chunk, then a scan), so a draw may
// differ only where the uniform falls within a float64 rounding of a
// boundary between two tokens.
#include "prelude.cuh"

// kk_draw_row is one row's draw parameters, 16 bytes (compute.DrawRow):
// the uniform in [0, 1), the temperature (> 0; 0 for the arg max) and
// min-p (0 = off).
struct kk_draw_row {
	double u;
	float temperature;
	float min_p;
};

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
	return (float)kk_dmul(y, __builtin_bit_cast(double, (kk_u64)(k + 1023) << 52));
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

// draw_rows: block r (256 threads) draws row r of x (cols values) with
// rows[r] (at temperature 0 its arg max, as argmax picks it, so that a
// step of greedy and sampled rows is one launch) and sets out[2r] to the
// token and out[2r+1] to the index of the
// row's first NaN or ±Inf, -1 if none (the token is -1 for a row of NaN
// only, as argmax's).
//
// A max pass (argmax's rules) gives the most likely token. The walk then
// narrows a range of the row, the whole row first: each thread sums the
// weights of its contiguous chunk of the range in float64, a scan of the
// 256 chunk sums gives each chunk's start in the cumulative weight, and
// the chunk holding the target (u times the row's sum at the first level)
// becomes the next range, the target less the weight before it; a range
// of at most 256 tokens ends it at one token (3 levels for 151,936
// tokens). Where rounding leaves the target past the range's weight, the
// draw takes the range's last kept token, as the host's walk does when it
// runs past its sum.
KK_KERNEL void __launch_bounds__(256) draw_rows(int *__restrict__ out, const float *__restrict__ x, const struct kk_draw_row *__restrict__ rows, int cols) {
	__shared__ float sv[256];
	__shared__ int si[256], sb[256];
	__shared__ double ss[256];
	__shared__ int sl[256];
	__shared__ int next_lo, next_hi;
	__shared__ double next_r;
	const float *row = x + (long long)blockIdx.x * cols;
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
	const double inv = 1.0 / (double)p.temperature;
	const float floor = p.min_p;
	int lo = 0, hi = cols;
	double r = 0;
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
		__syncthreads(); // the last level's next_* and result are read
		ss[t] = s;
		sl[t] = last;
		if (t == 0)
			next_lo = -1;
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
		if (level == 0)
			r = kk_dmul(p.u, ss[255]);
		double before = t > 0 ? ss[t - 1] : 0.0;
		if (r >= before && r < ss[t]) { // one thread at most: the scan is monotone
			next_lo = a;
			next_hi = e;
			next_r = kk_dsub(r, before);
		}
		__syncthreads();
		if (next_lo < 0 || ch == 1) {
			if (t == 0) {
				int tok = next_lo;
				if (tok < 0) // past the range's weight by rounding
					tok = sl[255] >= 0 ? sl[255] : 0;
				out[2 * blockIdx.x] = tok;
				out[2 * blockIdx.x + 1] = sb[0];
			}
			return;
		}
		lo = next_lo;
		hi = next_hi;
		r = next_r;
	}
}
