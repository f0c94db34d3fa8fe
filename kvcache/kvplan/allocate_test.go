package kvplan

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// brute tries every combination of choices.
func brute(items []Item, budget int64) (best float64, bytes int64, ok bool) {
	best = math.Inf(1)
	idx := make([]int, len(items))
	for {
		var b int64
		var c float64
		for i, it := range items {
			b += it.Choices[idx[i]].Bytes
			c += it.Choices[idx[i]].Cost
		}
		if b <= budget && (c < best || c == best && b < bytes) {
			best, bytes, ok = c, b, true
		}
		i := 0
		for ; i < len(items); i++ {
			if idx[i]++; idx[i] < len(items[i].Choices) {
				break
			}
			idx[i] = 0
		}
		if i == len(items) {
			return best, bytes, ok
		}
	}
}

// Allocate is optimal on small random cases checked by brute force, and
// its picks add up to the bytes and cost it reports, within the budget.
func TestAllocateOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		items := make([]Item, 1+r.IntN(5))
		for i := range items {
			items[i] = Item{Layer: i / 2, KV: i % 2}
			for range 1 + r.IntN(4) {
				items[i].Choices = append(items[i].Choices, Choice{Spec: "x", Bytes: int64(r.IntN(40)), Cost: float64(r.IntN(100)) / 7})
			}
		}
		budget := int64(r.IntN(120))
		want, _, feasible := brute(items, budget)
		pick, cost, bytes, err := Allocate(items, budget)
		if !feasible {
			if err == nil {
				t.Fatalf("trial %d: no combination fits %d bytes, Allocate picked %v", trial, budget, pick)
			}
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		var b int64
		var c float64
		for i, k := range pick {
			b += items[i].Choices[k].Bytes
			c += items[i].Choices[k].Cost
		}
		if b != bytes || math.Abs(c-cost) > 1e-9 || b > budget {
			t.Fatalf("trial %d: picks %v add up to %d bytes, cost %v; reported %d, %v; budget %d", trial, pick, b, c, bytes, cost, budget)
		}
		if math.Abs(cost-want) > 1e-9 {
			t.Fatalf("trial %d: cost %v, brute force finds %v", trial, cost, want)
		}
	}
}

// Boundary layers are just the choice that keeps a side uncompressed: with
// a sensitive first layer, the solver spends its bytes there.
func TestAllocateKeepsSensitiveLayers(t *testing.T) {
	side := func(layer, kv int, harm float64) Item {
		return Item{Layer: layer, KV: kv, Choices: []Choice{
			{Spec: "", Bytes: 256, Cost: 0},
			{Spec: "int8", Bytes: 136, Cost: harm / 100},
			{Spec: "kakeya-block:b=3", Bytes: 60, Cost: harm / 10},
			{Spec: "kakeya-block:b=2", Bytes: 44, Cost: harm},
		}}
	}
	items := []Item{side(0, 0, 10), side(0, 1, 8), side(1, 0, 0.1), side(1, 1, 0.1), side(2, 0, 0.2), side(2, 1, 0.1)}
	pick, cost, bytes, err := Allocate(items, 256*6/4) // a 4x smaller cache
	if err != nil {
		t.Fatal(err)
	}
	// Uniform 3-bit kakeya fits too (360 bytes) but costs 1.85; the
	// allocation keeps layer 0's keys at int8 and pays with 2 bits on the
	// insensitive layers: 0.1 + 0.8 + 0.5.
	if pick[0] != 1 || bytes > 384 || math.Abs(cost-1.4) > 1e-9 {
		t.Errorf("picks %v (%d bytes, cost %v): want layer 0's keys at int8, cost 1.4 within 384 bytes", pick, bytes, cost)
	}
	if _, _, _, err := Allocate(items, 200); err == nil || !strings.Contains(err.Error(), "exceed the budget of 200 bytes") {
		t.Errorf("infeasible budget: err = %v", err)
	}
	if _, _, _, err := Allocate([]Item{{Layer: 3}}, 10); err == nil || !strings.Contains(err.Error(), "layer 3 K has no choices") {
		t.Errorf("no choices: err = %v", err)
	}
}
