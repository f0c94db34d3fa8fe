package pick

import (
	"container/heap"
	"math"
	"slices"

	"github.com/kakeya-ai/kakeya/internal/mathx"
)

// A Filter is a sampled draw's filters beside its temperature: the host
// Sampler's top-k, top-p and min-p. The zero Filter keeps every token.
type Filter struct {
	TopK int     // keep the TopK most likely tokens; 0 (or >= the row) = all
	TopP float32 // keep the most likely tokens holding TopP of the weight; 0 or 1 = all
	MinP float32 // drop tokens whose weight is below MinP times the most likely's; 0 = off
}

// TopKActive reports whether f's top-k cuts a row of cols tokens.
func (f Filter) TopKActive(cols int) bool { return f.TopK > 0 && f.TopK < cols }

// TopPActive reports whether f's top-p cuts anything.
func (f Filter) TopPActive() bool { return f.TopP > 0 && f.TopP < 1 }

// Scratch is DrawFiltered's working space, kept between calls so that a
// draw allocates nothing once it has grown. One Scratch serves one draw at
// a time.
type Scratch struct {
	c candidates
}

// DrawFiltered returns the token drawn from the row of logits x at
// temperature (> 0) over the tokens f keeps, with u, a uniform number in
// [0, 1): the host Sampler's draw, which a device's draw (compute.Draw)
// follows. x is overwritten.
//
// With a top-k below the row (f.TopKActive) it draws from the k most
// likely tokens: the k largest logits, ties at the k-th value going to
// the lower index, sorted by descending logit (ties by index); each gets
// p = exp((l - max)/temperature) in float64 (mathx.Exp), summed in that
// order; min-p drops tokens from the end of the list while
// p < minP times the first's (subtracting each from the sum), top-p then
// cuts the list after the first token at which the running sum reaches
// topP times the sum (which becomes the sum); the token is the first at
// which u times the sum, less each p in turn, falls below 0 (the last
// kept where rounding runs past it).
//
// Otherwise it weighs every token as Draw does (float32 weights
// w = mathx.ExpWeight((l - max)/temperature), 0 below min-p), their sum
// in index order; without top-p it is Draw. With top-p, the kept tokens
// sorted by descending weight (ties by index) are cut after the first at
// which the running float64 sum of weights reaches topP times the sum,
// and the token is the first in that order at which u times the cut's
// running sum, less each weight in turn, falls below 0 (the cut's last
// token where rounding runs past it; the arg max where no weight is kept,
// the largest logit being infinite). Only the tokens of the binary
// octaves of weight that hold topP of the sum are sorted.
//
// It returns -1 for an empty row or one of NaN only.
func DrawFiltered(x []float32, temperature float32, f Filter, u float64, s *Scratch) int {
	if f.TopKActive(len(x)) {
		return s.drawTopK(x, temperature, f, u)
	}
	if !f.TopPActive() {
		return Draw(x, temperature, f.MinP, u)
	}
	return s.drawTopP(x, temperature, f, u)
}

// drawTopK is DrawFiltered with a top-k below the row.
func (s *Scratch) drawTopK(logits []float32, temperature float32, f Filter, u float64) int {
	c := &s.c
	c.topK(logits, f.TopK)
	inv := 1 / float64(temperature)
	maxL := float64(c.logit[0])
	sum := 0.0
	for i := range c.id {
		p := mathx.Exp((float64(c.logit[i]) - maxL) * inv)
		c.prob[i] = p
		sum += p
	}
	n := len(c.id)
	if f.MinP > 0 {
		floor := float64(f.MinP) * c.prob[0]
		for n > 1 && c.prob[n-1] < floor {
			sum -= c.prob[n-1]
			n--
		}
	}
	if p := float64(f.TopP); p > 0 && p < 1 {
		cum := 0.0
		for i := 0; i < n; i++ {
			cum += c.prob[i]
			if cum >= p*sum {
				sum = cum
				n = i + 1
				break
			}
		}
	}
	r := u * sum
	for i := 0; i < n; i++ {
		r -= c.prob[i]
		if r < 0 {
			return int(c.id[i])
		}
	}
	return int(c.id[n-1])
}

// drawTopP is DrawFiltered with a top-p and no top-k below the row. The
// kept weights' sums by binary exponent (one pass) give the highest power
// of two t such that the tokens with w >= t hold at least p of the sum,
// and only those are sorted (by descending weight, ties by index) to find
// the cut, at most one octave of weights more than it needs.
func (s *Scratch) drawTopP(logits []float32, temperature float32, f Filter, u float64) int {
	top := ArgMax(logits)
	if top < 0 {
		return -1
	}
	p := float64(f.TopP)
	inv := 1 / float64(temperature)
	maxL := float64(logits[top])
	floor := f.MinP // the most likely token's weight is exactly 1
	sum := 0.0
	for i, l := range logits {
		w := mathx.ExpWeight((float64(l) - maxL) * inv)
		if w < floor || !(w > 0) {
			w = 0
		} else {
			sum += float64(w)
		}
		logits[i] = w
	}
	if !(sum > 0) { // nothing kept (the largest logit is infinite): the arg max
		return top
	}
	// The weight held at each binary exponent, the largest first, down to
	// the exponent t whose octave completes p of the sum.
	var octave [256]float64
	for _, w := range logits {
		if w > 0 {
			octave[math.Float32bits(w)>>23] += float64(w)
		}
	}
	t, held := uint32(255), 0.0
	for ; t > 0; t-- {
		if held += octave[t]; held >= p*sum {
			break
		}
	}
	nc := 0
	for _, w := range logits {
		if w > 0 && math.Float32bits(w)>>23 >= t {
			nc++
		}
	}
	c := &s.c
	c.reset(nc)
	for i, w := range logits {
		if w > 0 && math.Float32bits(w)>>23 >= t {
			c.id = append(c.id, int32(i))
			c.logit = append(c.logit, w)
		}
	}
	c.sortDesc() // by weight, ties by id
	n, cum := len(c.id), 0.0
	for i, w := range c.logit {
		cum += float64(w)
		if cum >= p*sum {
			n = i + 1
			break
		}
	}
	r := u * cum
	for i, w := range c.logit[:n] {
		r -= float64(w)
		if r < 0 {
			return int(c.id[i])
		}
	}
	return int(c.id[n-1])
}

// candidates is a struct of parallel slices so heap and sort move no
// interfaces per element; it implements heap.Interface as a min-heap
// under the order (logit, then descending id), so that its root is the
// worst of the best k: the lowest logit, the highest id among equal ones.
type candidates struct {
	id    []int32
	logit []float32
	prob  []float64
	order []int32
}

// topK fills the candidate list with the k highest logits (k < len), ties
// at the k-th value going to the lower index, sorted by descending logit
// (ties by index).
func (c *candidates) topK(logits []float32, k int) {
	c.reset(k)
	// A min-heap of the best k seen so far: O(V log k). A later token
	// equal to the root is worse than it (a higher index), so only a
	// larger logit replaces the root.
	for i, l := range logits {
		if len(c.id) < k {
			c.id = append(c.id, int32(i))
			c.logit = append(c.logit, l)
			if len(c.id) == k {
				heap.Init(c)
			}
			continue
		}
		if l > c.logit[0] {
			c.id[0], c.logit[0] = int32(i), l
			heap.Fix(c, 0)
		}
	}
	c.sortDesc()
	c.prob = c.prob[:len(c.id)]
}

func (c *candidates) reset(k int) {
	if cap(c.id) < k {
		c.id = make([]int32, 0, k)
		c.logit = make([]float32, 0, k)
		c.prob = make([]float64, k)
		c.order = make([]int32, 0, k)
	}
	c.id, c.logit, c.prob = c.id[:0], c.logit[:0], c.prob[:k]
}

func (c *candidates) Len() int { return len(c.id) }
func (c *candidates) Less(i, j int) bool {
	li, lj := c.logit[i], c.logit[j]
	return li < lj || li == lj && c.id[i] > c.id[j]
}
func (c *candidates) Swap(i, j int) {
	c.id[i], c.id[j] = c.id[j], c.id[i]
	c.logit[i], c.logit[j] = c.logit[j], c.logit[i]
}
func (c *candidates) Push(any) { panic("candidates: fixed size") }
func (c *candidates) Pop() any { panic("candidates: fixed size") }

// sortDesc orders by descending logit, ties by ascending id, so results do
// not depend on the heap's internal order.
func (c *candidates) sortDesc() {
	c.order = c.order[:0]
	for i := range c.id {
		c.order = append(c.order, int32(i))
	}
	slices.SortFunc(c.order, func(a, b int32) int {
		la, lb := c.logit[a], c.logit[b]
		switch {
		case la > lb:
			return -1
		case la < lb:
			return 1
		}
		return int(c.id[a] - c.id[b])
	})
	// Gather through scratch: prob holds the logits, order becomes the ids.
	for i, o := range c.order {
		c.prob[i] = float64(c.logit[o])
		c.order[i] = c.id[o]
	}
	for i := range c.order {
		c.logit[i] = float32(c.prob[i])
	}
	copy(c.id, c.order)
}
