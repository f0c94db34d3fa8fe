package pick

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/mathx"
)

// A top-k keeps the k largest logits, ties at the k-th value going to the
// lower index (whatever the heap's order), sorted by descending logit,
// ties by index: the first k of a stable sort by descending logit.
func TestTopKTies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(x []float32, k int) {
		t.Helper()
		var c candidates
		c.topK(x, k)
		order := make([]int, len(x))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(x[b], x[a]) })
		for i := range k {
			if int(c.id[i]) != order[i] || c.logit[i] != x[order[i]] {
				t.Fatalf("top-%d of %v: candidate %d is %d (%v), want %d", k, x, i, c.id[i], c.logit[i], order[i])
			}
		}
	}
	check([]float32{5, 5, 7}, 2) // the heap's root, token 0, was once evicted
	check([]float32{1, 5, 5, 5}, 2)
	check([]float32{0, float32(math.Copysign(0, -1)), 0, -1}, 2) // -0 equals +0
	for range 200 {
		n := 1 + r.IntN(300)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.IntN(5))
		}
		check(x, 1+r.IntN(n))
	}
}

// DrawFiltered draws what a plain reference draws: every token sorted
// (by descending logit or weight, ties by index), the Sampler's filters
// and walk over the sorted list, for top-k, top-p (whose octave prefilter
// sorts only part of the row) and min-p, alone and together.
func TestDrawFilteredReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	reference := func(x []float32, temp float32, f Filter, u float64) int {
		order := make([]int, len(x))
		for i := range order {
			order[i] = i
		}
		maxL := float64(x[ArgMax(x)])
		inv := 1 / float64(temp)
		if f.TopKActive(len(x)) {
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(x[b], x[a]) })
			order = order[:f.TopK]
			p := make([]float64, len(order))
			sum := 0.0
			for i, id := range order {
				p[i] = mathx.Exp((float64(x[id]) - maxL) * inv)
				sum += p[i]
			}
			n := len(order)
			for f.MinP > 0 && n > 1 && p[n-1] < float64(f.MinP)*p[0] {
				sum -= p[n-1]
				n--
			}
			if f.TopPActive() {
				cum := 0.0
				for i := range n {
					if cum += p[i]; cum >= float64(f.TopP)*sum {
						sum, n = cum, i+1
						break
					}
				}
			}
			u *= sum
			for i := range n {
				if u -= p[i]; u < 0 {
					return order[i]
				}
			}
			return order[n-1]
		}
		w := make([]float32, len(x))
		sum := 0.0
		for i, l := range x {
			if w[i] = mathx.ExpWeight((float64(l) - maxL) * inv); w[i] < f.MinP {
				w[i] = 0
			}
			sum += float64(w[i])
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(w[b], w[a]) })
		n, cum := len(order), 0.0
		for i, id := range order {
			if cum += float64(w[id]); cum >= float64(f.TopP)*sum {
				n = i + 1
				break
			}
		}
		u *= cum
		for _, id := range order[:n] {
			if u -= float64(w[id]); u < 0 {
				return id
			}
		}
		return order[n-1]
	}
	var s Scratch
	for _, f := range []Filter{
		{TopK: 1}, {TopK: 40}, {TopK: 40, TopP: 0.9, MinP: 0.05}, {TopK: 7, MinP: 1},
		{TopP: 0.9}, {TopP: 0.5, MinP: 0.1}, {TopP: 0.01}, {TopP: 0.99},
	} {
		for i := range 300 {
			n := 50 + r.IntN(500)
			x := make([]float32, n)
			for j := range x {
				if i%2 == 0 {
					x[j] = float32(r.IntN(8)) // ties
				} else {
					x[j] = float32(r.NormFloat64() * 3)
				}
			}
			temp, u := float32(0.3+2*r.Float64()), r.Float64()
			want := reference(slices.Clone(x), temp, f, u)
			if got := DrawFiltered(x, temp, f, u, &s); got != want {
				t.Fatalf("%+v at %v, u %v, row %d: drew %d, the reference %d", f, temp, u, i, got, want)
			}
		}
	}
	if got := DrawFiltered([]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 1, Filter{TopP: 0.5}, 0.3, &s); got != 0 {
		t.Errorf("a row of -Inf with top-p drew %d, want the arg max 0", got)
	}
}
