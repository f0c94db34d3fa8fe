package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// countBelow is the number of bounds below x by binary search: what a
// CellGrid's Cell must give.
func countBelow(bounds []float32, x float32) int {
	return sort.Search(len(bounds), func(i int) bool { return !(x > bounds[i]) })
}

// cellGridCases are bounds a CellGrid is made for: uniform cells as the
// entropy-constrained quantizers have (3 to 255 cells), Gaussian-spaced
// ones as Lloyd–Max's, one bound, a pair nearly equal (no grid: both fall
// in one step) and bounds off zero.
func cellGridCases() map[string][]float32 {
	out := map[string][]float32{}
	for _, cells := range []int{2, 3, 16, 95, 255, 256} {
		b := make([]float32, cells-1)
		for i := range b {
			b[i] = float32((float64(i) - float64(cells-2)/2) * 0.37)
		}
		out["uniform"+strconv.Itoa(cells)] = b
	}
	g := make([]float32, 63)
	for i := range g {
		p := (float64(i) + 1) / 64
		g[i] = float32(math.Sqrt2 * math.Erfinv(2*p-1))
	}
	out["gaussian64"] = g
	out["one"] = []float32{0.25}
	out["tight"] = []float32{-1, 0, 1e-4, 1}
	out["offset"] = []float32{3, 3.5, 4, 7, 11}
	return out
}

// TestCellGrid holds every grid's Cell to the binary search: on a sweep
// across the bounds, at each bound and its neighbouring floats, at every
// grid step's edges, at random floats of every magnitude, far out, at the
// infinities and NaN. Bounds whose cells are narrower than a step, unsorted
// or too many get no grid.
func TestCellGrid(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for name, bd := range cellGridCases() {
		g := NewCellGrid(bd)
		if (g == nil) != (name == "tight") {
			t.Fatalf("%s: grid %v", name, g != nil)
		}
		if g == nil {
			continue
		}
		if g.Bounds() != len(bd) {
			t.Fatalf("%s: %d bounds, want %d", name, g.Bounds(), len(bd))
		}
		xs := []float32{float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1)), 1e30, -1e30, math.MaxFloat32, -math.MaxFloat32}
		for _, v := range bd {
			xs = append(xs, v, math.Nextafter32(v, float32(math.Inf(-1))), math.Nextafter32(v, float32(math.Inf(1))), -v)
		}
		lo, hi := bd[0]-1, bd[len(bd)-1]+1
		for i := range 20001 {
			xs = append(xs, lo+(hi-lo)*float32(i)/20000)
		}
		for s := range CellGridSteps {
			e := g.lo + float32(s)/g.inv
			xs = append(xs, e, math.Nextafter32(e, float32(math.Inf(-1))), math.Nextafter32(e, float32(math.Inf(1))))
		}
		for range 100000 {
			xs = append(xs, math.Float32frombits(rng.Uint32()))
		}
		for _, x := range xs {
			if got, want := g.Cell(x), countBelow(bd, x); got != want {
				t.Fatalf("%s: Cell(%v) = %d, want %d", name, x, got, want)
			}
		}
	}
	for _, bd := range [][]float32{nil, {1, 0}, {0, float32(math.Inf(1))}, make([]float32, 256)} {
		if NewCellGrid(bd) != nil {
			t.Errorf("NewCellGrid(%d bounds %v...) made a grid", len(bd), bd[:min(len(bd), 2)])
		}
	}
}

// scaleTrialsRef is PCScaleTrials's loop in Go: the codec's arithmetic.
func scaleTrialsRef(g *CellGrid, col, scale, inv, levels, cost []float32, e, l []float64, codes []uint8) {
	for k, s := range scale {
		var se, sl float64
		for i, r := range col {
			q := countBelow(g.bounds[:g.Bounds()], r*inv[k])
			v := levels[q] * s
			se += float64(r-v) * float64(r-v)
			if cost != nil {
				sl += float64(cost[q])
			}
			codes[i*PCMaxTrials+k] = uint8(q)
		}
		e[k], l[k] = se, sl
	}
}

// TestPCScaleTrials holds the kernel to the Go loop, sums bit for bit and
// every code, over 1 to 16 trials, with and without costs, on values of
// every kind (Gaussian, heavy-tailed, tiny, ties and zeros, far outside the
// bounds) and every grid of cellGridCases; SetCells takes one level and
// cost a cell, nothing else.
func TestPCScaleTrials(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ran := false
	for name, bd := range cellGridCases() {
		g := NewCellGrid(bd)
		if g == nil {
			continue
		}
		cells := len(bd) + 1
		levels, cost := make([]float32, cells), make([]float32, cells)
		for i := range levels {
			levels[i] = float32(rng.NormFloat64())
			cost[i] = float32(rng.Float64() * 9)
		}
		slices.Sort(levels)
		if !g.SetCells(levels, cost) || g.SetCells(levels[1:], cost) || g.SetCells(levels, cost[1:]) {
			t.Fatalf("%s: SetCells of %d levels and costs: want true, and false for one short", name, cells)
		}
		for trial := range 40 {
			n := []int{64, 1, 17, 64, 63}[trial%5]
			k := 1 + trial%PCMaxTrials
			col := make([]float32, n)
			for i := range col {
				switch trial % 4 {
				case 0:
					col[i] = float32(rng.NormFloat64())
				case 1:
					col[i] = float32(rng.NormFloat64() / (0.05 + rng.Float64()) * 10)
				case 2:
					col[i] = float32(rng.NormFloat64()) * 1e-3
				default:
					col[i] = float32(rng.IntN(5)-2) / 4
				}
			}
			scale, inv := make([]float32, k), make([]float32, k)
			for j := range scale {
				scale[j] = float32(0.6+0.1*float64(j)) * float32(0.5+rng.Float64())
				inv[j] = 1 / scale[j]
			}
			for _, withCost := range []bool{false, true} {
				cs := cost
				if !withCost {
					cs = nil
				}
				e, l, codes := make([]float64, k), make([]float64, k), make([]uint8, n*PCMaxTrials)
				we, wl, wcodes := make([]float64, k), make([]float64, k), make([]uint8, n*PCMaxTrials)
				if !PCScaleTrials(g, col, scale, inv, withCost, e, l, codes) {
					t.Skipf("no kernel at %s", Features())
				}
				ran = true
				scaleTrialsRef(g, col, scale, inv, levels, cs, we, wl, wcodes)
				for j := range k {
					if math.Float64bits(e[j]) != math.Float64bits(we[j]) || withCost && math.Float64bits(l[j]) != math.Float64bits(wl[j]) {
						t.Fatalf("%s, %d values, trial %d of %d, costs %v: sums %v and %v, want %v and %v", name, n, j, k, withCost, e[j], l[j], we[j], wl[j])
					}
					for i := range n {
						if codes[i*PCMaxTrials+j] != wcodes[i*PCMaxTrials+j] {
							t.Fatalf("%s, %d values, trial %d of %d: code of value %d (%v) %d, want %d", name, n, j, k, i, col[i], codes[i*PCMaxTrials+j], wcodes[i*PCMaxTrials+j])
						}
					}
				}
			}
		}
	}
	if !ran {
		t.Fatal("no case ran")
	}
	defer func() {
		if recover() == nil {
			t.Error("17 trials: no panic")
		}
	}()
	g := NewCellGrid([]float32{0})
	g.SetCells(make([]float32, 2), nil)
	PCScaleTrials(g, make([]float32, 4), make([]float32, 17), make([]float32, 17), false, make([]float64, 17), nil, make([]uint8, 64))
}
