package kvplan

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// A Choice is one way to store one layer's keys or values: a codec spec
// ("" keeps them uncompressed, as a boundary layer does), what it costs in
// bytes (per token, as the cache accounts them), and its predicted harm
// (e.g. the KL divergence calibration measured with only this layer side
// compressed this way).
type Choice struct {
	Spec  string
	Bytes int64
	Cost  float64
}

// An Item is the choices of one side (kv 0 keys, 1 values) of one layer.
type Item struct {
	Layer, KV int
	Choices   []Choice
}

// Allocate picks one choice per item so that the chosen bytes add up to at
// most budget with the least total cost, treating costs as additive. It is
// exact: a dynamic program over the Pareto frontier of (bytes, cost) of
// the items so far, which stays small because a point dominated in both is
// dropped. It returns the index of the choice per item and the total cost
// and bytes; an error when even the cheapest choices exceed the budget.
func Allocate(items []Item, budget int64) (pick []int, cost float64, bytes int64, err error) {
	type point struct {
		bytes  int64
		cost   float64
		parent int // index in the previous frontier
		choice int
	}
	if len(items) == 0 {
		return nil, 0, 0, errors.New("kvplan: allocate: no items")
	}
	frontier := []point{{parent: -1, choice: -1}}
	var trail [][]point
	for i, it := range items {
		if len(it.Choices) == 0 {
			return nil, 0, 0, fmt.Errorf("kvplan: allocate: layer %d %s has no choices", it.Layer, kvName(it.KV))
		}
		var next []point
		for pi, p := range frontier {
			for ci, c := range it.Choices {
				if c.Bytes < 0 || math.IsNaN(c.Cost) {
					return nil, 0, 0, fmt.Errorf("kvplan: allocate: layer %d %s choice %q: bytes %d, cost %v", it.Layer, kvName(it.KV), c.Spec, c.Bytes, c.Cost)
				}
				if b := p.bytes + c.Bytes; b <= budget {
					next = append(next, point{bytes: b, cost: p.cost + c.Cost, parent: pi, choice: ci})
				}
			}
		}
		if len(next) == 0 {
			return nil, 0, 0, fmt.Errorf("kvplan: allocate: the smallest choices of the first %d layer sides already exceed the budget of %d bytes", i+1, budget)
		}
		// Keep the Pareto frontier: by bytes ascending, each point must
		// cost strictly less than every point with fewer bytes.
		slices.SortStableFunc(next, func(a, b point) int {
			if c := cmp.Compare(a.bytes, b.bytes); c != 0 {
				return c
			}
			return cmp.Compare(a.cost, b.cost)
		})
		kept := next[:0]
		best := math.Inf(1)
		for _, p := range next {
			if p.cost < best {
				kept = append(kept, p)
				best = p.cost
			}
		}
		trail = append(trail, frontier)
		frontier = kept
	}
	// The last point of the frontier has the least cost.
	end := frontier[len(frontier)-1]
	pick = make([]int, len(items))
	p := end
	for i := len(items) - 1; i >= 0; i-- {
		pick[i] = p.choice
		if i > 0 {
			p = trail[i][p.parent]
		}
	}
	return pick, end.cost, end.bytes, nil
}
