// Package pick holds the picks made over a row of logits that every
// device must agree on: the greedy token (ArgMax) and where a row first
// holds a non-finite value (FirstNonFinite), the sampled draw at a
// temperature and min-p from a given uniform (Draw), and the host
// Sampler's whole draw with top-k and top-p too (DrawFiltered). The CPU
// engine, the batched model step, the samplers and the CUDA backend's
// argmax, draw_rows and draw_split kernels all follow these rules, so a
// greedy run picks, and a seeded sampled run draws, the same tokens on
// every backend.
//
// It is a leaf but for internal/mathx (Draw's exp), and any package may
// use it.
package pick

// ArgMax returns the index of the largest value of x: NaN is skipped, the
// first of equal largest values wins (+0 and -0 are equal), and it
// returns -1 when x is empty or holds only NaN.
func ArgMax(x []float32) int {
	best := -1
	var bv float32
	for i, v := range x {
		if v != v { // NaN
			continue
		}
		if best < 0 || v > bv {
			best, bv = i, v
		}
	}
	return best
}

// FirstNonFinite returns the index of the first NaN, +Inf or -Inf of x,
// or -1 when every value is finite.
func FirstNonFinite(x []float32) int {
	for i, v := range x {
		// v-v is 0 for every finite v and NaN for NaN and ±Inf.
		if v-v != 0 {
			return i
		}
	}
	return -1
}
