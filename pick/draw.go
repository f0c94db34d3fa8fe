package pick

import "github.com/kakeya-ai/kakeya/internal/mathx"

// Draw returns the token drawn from the row of logits x at temperature
// (> 0) over the tokens min-p keeps, with u, a uniform number in [0, 1):
// the draw the host Sampler makes without top-k and top-p, and what a
// device's draw (compute.Draw) follows. Each token's weight relative to
// the most likely one's is w = exp((l - max)/temperature) rounded to
// float32 (mathx.ExpWeight; the most likely token's is 1), 0 where
// w < minP or NaN; the token is the first, in index order, at which the
// weights' running sum (float64, in index order) passes u times their
// total, the last kept token where rounding runs past it. It returns -1
// for an empty row or one of NaN only. x is overwritten with the weights.
func Draw(x []float32, temperature, minP float32, u float64) int {
	top := ArgMax(x)
	if top < 0 {
		return -1
	}
	inv := 1 / float64(temperature)
	maxL := float64(x[top])
	sum, last := 0.0, 0
	for i, l := range x {
		w := mathx.ExpWeight((float64(l) - maxL) * inv)
		if w < minP || !(w > 0) {
			w = 0
		} else {
			sum += float64(w)
			last = i
		}
		x[i] = w
	}
	r := u * sum
	for i, w := range x {
		if w == 0 {
			continue
		}
		r -= float64(w)
		if r < 0 {
			return i
		}
	}
	return last // r ran past the sum by rounding
}
