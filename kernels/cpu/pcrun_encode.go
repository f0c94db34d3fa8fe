package cpu

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// CellGridSteps is the number of steps of a CellGrid.
const CellGridSteps = 1024

// A CellGrid finds which of a quantizer's cells a value falls in, the
// number of its sorted bounds below the value, with one table read and
// one comparison: a grid of CellGridSteps steps from the first bound to
// the last maps a value to a step, the table gives the count at the
// lowest float32 of that step, and the value's count is that, or one
// more where the value lies above the next bound. NewCellGrid makes one
// only where every step's floats span at most one bound, which it checks
// for every float32 (a step's floats are an interval, the step being a
// monotone function of the value), so the count is exact: the count a
// binary search of the bounds gives for every value, infinities and NaN
// (0) included.
type CellGrid struct {
	lo, inv float32
	base    [CellGridSteps]int32
	// bounds are the quantizer's bounds, then +Inf: the bound above a
	// count of len(bounds)-1 compares false with every value.
	bounds []float32
	// ent holds, per step, what PCScaleTrials's kernel reads of it in one
	// load: cellEntry's fields (SetCells).
	ent     []float32
	hasCost bool
}

// A step's entry in CellGrid.ent: the count at its lowest float (as
// int32 bits), the bound above that count, the levels and costs of that
// cell and the next; 8 floats, 32 bytes.
const (
	entBase = iota
	entBound
	entLevel0
	entLevel1
	entCost0
	entCost1
	cellEntry = 8
)

// NewCellGrid returns the grid of bounds, sorted ascending, finite, at
// least 1 and at most 255 of them (codes are bytes), with the grid spaced
// as (hi - lo)/(CellGridSteps - 1) from lo = bounds[0] to hi, the last;
// nil where some step's floats span two bounds or more (cells narrower
// than a step), or the bounds are not as required.
func NewCellGrid(bounds []float32) *CellGrid {
	nb := len(bounds)
	if nb < 1 || nb > math.MaxUint8 || !slices.IsSorted(bounds) {
		return nil
	}
	for _, b := range bounds {
		if math.IsInf(float64(b), 0) || b != b {
			return nil
		}
	}
	c := &CellGrid{inv: 1, bounds: append(slices.Clone(bounds), float32(math.Inf(1)))}
	lo, hi := float64(bounds[0]), float64(bounds[nb-1])
	width := (hi - lo) / (CellGridSteps - 1)
	if !(width > 0) {
		width = 1
	}
	c.lo, c.inv = float32(lo), float32(1/width)
	count := func(x float32) int32 { return int32(sort.Search(nb, func(i int) bool { return !(x > bounds[i]) })) }
	// first[g] is the key of the lowest float32 whose step is g or above.
	var first [CellGridSteps + 1]uint32
	kLo, kHi := orderedKey(float32(math.Inf(-1))), orderedKey(float32(math.Inf(1)))
	first[CellGridSteps] = kHi + 1
	for g := 1; g < CellGridSteps; g++ {
		first[g] = kLo + uint32(sort.Search(int(kHi-kLo)+1, func(i int) bool { return c.step(fromOrderedKey(kLo+uint32(i))) >= g }))
	}
	first[0] = kLo
	for g := range CellGridSteps {
		a, b := first[g], first[g+1]
		if a >= b {
			continue // no float32 falls in step g
		}
		xa, xb := fromOrderedKey(a), fromOrderedKey(b-1) // the step's lowest and highest floats
		c.base[g] = count(xa)
		if count(xb)-c.base[g] > 1 {
			return nil
		}
	}
	return c
}

// step returns the grid step of x: 0 below the first bound (and for NaN),
// CellGridSteps-1 from the last up.
func (c *CellGrid) step(x float32) int {
	if t := (x - c.lo) * c.inv; t > 0 {
		if t < CellGridSteps-1 {
			return int(t)
		}
		return CellGridSteps - 1
	}
	return 0
}

// Cell returns the number of bounds below x.
func (c *CellGrid) Cell(x float32) int {
	q := c.base[c.step(x)]
	if x > c.bounds[q] {
		q++
	}
	return int(q)
}

// SetCells gives the grid its quantizer's levels and, unless cost is
// nil, each cell's cost (both one per cell, Bounds()+1), which
// PCScaleTrials reads; it reports false, setting nothing, where their
// lengths are not that.
func (c *CellGrid) SetCells(levels, cost []float32) bool {
	cells := len(c.bounds)
	if len(levels) != cells || cost != nil && len(cost) != cells {
		return false
	}
	c.ent, c.hasCost = make([]float32, CellGridSteps*cellEntry), cost != nil
	for g, q := range c.base {
		e := c.ent[g*cellEntry : (g+1)*cellEntry]
		up := min(int(q)+1, cells-1) // the last cell's next is never taken: its bound is +Inf
		e[entBase], e[entBound] = math.Float32frombits(uint32(q)), c.bounds[q]
		e[entLevel0], e[entLevel1] = levels[q], levels[up]
		if cost != nil {
			e[entCost0], e[entCost1] = cost[q], cost[up]
		}
	}
	return true
}

// Bounds returns the number of the grid's bounds.
func (c *CellGrid) Bounds() int { return len(c.bounds) - 1 }

// orderedKey maps float32 values to integers in their order (-0 before
// +0; NaNs outside the infinities).
func orderedKey(x float32) uint32 {
	b := math.Float32bits(x)
	if b>>31 != 0 {
		return ^b
	}
	return b | 1<<31
}

// fromOrderedKey is orderedKey's inverse.
func fromOrderedKey(k uint32) float32 {
	if k>>31 != 0 {
		return math.Float32frombits(k &^ (1 << 31))
	}
	return math.Float32frombits(^k)
}

// PCMaxTrials is the most trial scales PCScaleTrials takes at once.
const PCMaxTrials = 16

// PCScaleTrials runs, for each trial k of the len(scale) <= PCMaxTrials
// (scale[k] > 0 and inv[k] = 1/scale[k], as float32 divides), the trial of
// codec.KakeyaPC's scale search over the n = len(col) values of a coded
// component: each value r's cell q = g.Cell(r*inv[k]), its squared error
// (r - levels[q]*scale[k])² (in float32 but for the square, taken in
// float64, as is the sum) summed in value order into e[k], with costs the
// cells' costs cost[q] summed likewise into l[k], and q at
// codes[i*PCMaxTrials + k] for value i, levels and cost being those
// SetCells gave g: the arithmetic of the Go loop, value by value, so the
// same sums bit for bit. It reports false, doing nothing, where this CPU
// has no kernel for it or g has no cells set (the caller runs its loop);
// it panics if the lengths do not match or g has no costs and costs are
// asked for.
func PCScaleTrials(g *CellGrid, col, scale, inv []float32, costs bool, e, l []float64, codes []uint8) bool {
	if !hasAVX512 && !hasAVX2C || g.ent == nil {
		return false
	}
	k, n := len(scale), len(col)
	if k < 1 || k > PCMaxTrials || len(inv) != k || len(e) < k || costs && (!g.hasCost || len(l) < k) || len(codes) < n*PCMaxTrials || n < 1 {
		panic(fmt.Sprintf("cpu: PCScaleTrials: %d trials (%d inverses, %d and %d sums), %d values, costs %v (grid's %v), %d codes",
			k, len(inv), len(e), len(l), n, costs, g.hasCost, len(codes)))
	}
	pcScaleTrials(g, col, scale, inv, costs, e, l, codes)
	return true
}
