// Greedy sampling on the device: argmax picks each row's token, so that
// only its id (and where its first non-finite logit is) crosses back to
// the host rather than the row's logits. It picks what pick.ArgMax
// picks: NaN skipped, the first of equal largest values.
#include "prelude.cuh"

// kk_better reports whether candidate (v, i) beats (bv, bi): any
// candidate beats none (bi < 0), a larger value a smaller one, and of
// equal values the lower index wins, so that the block's reduction finds
// the first largest, as a scan from the left does (+0 and -0 are equal).
KK_DEVICE bool kk_better(float v, int i, float bv, int bi) {
	return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

// kk_row_argmax: the block (256 threads) scans row (cols values) and
// leaves in sv[0] and si[0] its largest value and that value's index (NaN
// skipped, the first of equal largest values; si[0] is -1 for a row of
// NaN only) and in sb[0] the index of its first NaN or ±Inf (-1 if none),
// for every thread after the last barrier. argmax and draw_rows' max pass.
KK_DEVICE void kk_row_argmax(const float *__restrict__ row, int cols, float *sv, int *si, int *sb) {
	int t = threadIdx.x;
	float bv = 0.0f;
	int bi = -1, bad = -1;
	for (int c = t; c < cols; c += blockDim.x) {
		float v = row[c];
		if (v - v != 0.0f && bad < 0)
			bad = c; // NaN or ±Inf: v - v is 0 for every finite v
		if (v == v && kk_better(v, c, bv, bi)) {
			bv = v;
			bi = c;
		}
	}
	sv[t] = bv;
	si[t] = bi;
	sb[t] = bad;
	__syncthreads();
	for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
		if (t < s) {
			if (kk_better(sv[t + s], si[t + s], sv[t], si[t])) {
				sv[t] = sv[t + s];
				si[t] = si[t + s];
			}
			int o = sb[t + s];
			if (o >= 0 && (sb[t] < 0 || o < sb[t]))
				sb[t] = o;
		}
		__syncthreads();
	}
}

// argmax: block r (256 threads) scans row r of x (cols values) and sets
// out[2r] to the index of its largest value (NaN skipped; -1 for a row of
// NaN only) and out[2r+1] to the index of its first NaN or ±Inf, -1 if
// none.
KK_KERNEL void __launch_bounds__(256) argmax(int *__restrict__ out, const float *__restrict__ x, int cols) {
	__shared__ float sv[256];
	__shared__ int si[256], sb[256];
	kk_row_argmax(x + (long long)blockIdx.x * cols, cols, sv, si, sb);
	if (threadIdx.x == 0) {
		out[2 * blockIdx.x] = si[0];
		out[2 * blockIdx.x + 1] = sb[0];
	}
}
