package codec

import (
	"fmt"
	"math"
	"slices"
)

// A Codebook is a scalar quantizer: sorted reconstruction levels and the
// decision boundaries between neighbours (len(Bounds) == len(Levels)-1).
type Codebook struct {
	Levels []float32
	Bounds []float32
}

// Quantize returns the index of the cell holding x: the number of bounds
// below it.
func (c *Codebook) Quantize(x float32) int {
	// A branch-free count beats a binary search over at most 15 bounds:
	// the comparisons do not depend on each other and never mispredict.
	n := 0
	for _, b := range c.Bounds {
		if x > b {
			n++
		}
	}
	return n
}

// Value returns the reconstruction level of index i.
func (c *Codebook) Value(i int) float32 { return c.Levels[i] }

// Bits returns log2 of the number of levels (0 when it is not a power of two).
func (c *Codebook) Bits() int {
	n := len(c.Levels)
	for b := 1; b <= 8; b++ {
		if n == 1<<b {
			return b
		}
	}
	return 0
}

// Validate reports whether c is usable: 2..256 levels, a power of two,
// finite and strictly increasing, with each boundary between its levels.
func (c *Codebook) Validate() error {
	if c == nil {
		return fmt.Errorf("codec: codebook is nil")
	}
	if c.Bits() == 0 {
		return fmt.Errorf("codec: codebook has %d levels, want a power of two in 2..256", len(c.Levels))
	}
	if len(c.Bounds) != len(c.Levels)-1 {
		return fmt.Errorf("codec: codebook has %d bounds for %d levels, want %d", len(c.Bounds), len(c.Levels), len(c.Levels)-1)
	}
	for i, v := range c.Levels {
		if !finite32(v) {
			return fmt.Errorf("codec: codebook level %d is %v", i, v)
		}
		if i > 0 && !(v > c.Levels[i-1]) {
			return fmt.Errorf("codec: codebook levels not increasing at %d (%v after %v)", i, v, c.Levels[i-1])
		}
	}
	for i, b := range c.Bounds {
		if !(b >= c.Levels[i] && b <= c.Levels[i+1]) {
			return fmt.Errorf("codec: codebook bound %d (%v) outside levels [%v, %v]", i, b, c.Levels[i], c.Levels[i+1])
		}
	}
	return nil
}

// CodebookFromLevels builds a nearest-neighbour codebook from sorted levels:
// the bounds are the midpoints, as for any Lloyd–Max optimum.
func CodebookFromLevels(levels []float32) (*Codebook, error) {
	c := &Codebook{Levels: slices.Clone(levels), Bounds: make([]float32, max(len(levels)-1, 0))}
	for i := range c.Bounds {
		c.Bounds[i] = (levels[i] + levels[i+1]) / 2
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// GaussianCodebook computes the Lloyd–Max quantizer of N(0,1) with 2^bits
// levels (bits in 1..8) by Lloyd iterations on exact Gaussian integrals.
func GaussianCodebook(bits int) (*Codebook, error) {
	if bits < 1 || bits > 8 {
		return nil, fmt.Errorf("codec: gaussian codebook: bits %d not in 1..8", bits)
	}
	k := 1 << bits
	y := make([]float64, k)
	t := make([]float64, k+1)
	for i := range y { // start at the quantiles' centres of a uniform spread
		y[i] = 4 * (float64(i) + 0.5 - float64(k)/2) / float64(k) * 1.5
	}
	t[0], t[k] = math.Inf(-1), math.Inf(1)
	for iter := 0; iter < 100000; iter++ {
		for i := 1; i < k; i++ {
			t[i] = (y[i-1] + y[i]) / 2
		}
		change := 0.0
		for i := range y {
			// Centroid of N(0,1) on (a, b): (φ(a) - φ(b)) / (Φ(b) - Φ(a)),
			// with the mass from erfc differences to stay exact in the tails.
			a, b := t[i], t[i+1]
			mass := gaussMass(a, b)
			if mass <= 0 {
				continue
			}
			v := (normPDF(a) - normPDF(b)) / mass
			change = max(change, math.Abs(v-y[i]))
			y[i] = v
		}
		if change < 1e-13 {
			break
		}
	}
	levels := make([]float32, k)
	for i, v := range y {
		levels[i] = float32(v)
	}
	// Enforce exact symmetry, which the iteration keeps only to rounding.
	for i := 0; i < k/2; i++ {
		m := (levels[k-1-i] - levels[i]) / 2
		levels[i], levels[k-1-i] = -m, m
	}
	return CodebookFromLevels(levels)
}

func normPDF(x float64) float64 {
	if math.IsInf(x, 0) {
		return 0
	}
	return math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
}

// gaussMass returns P(a < X < b) for X ~ N(0,1).
func gaussMass(a, b float64) float64 {
	if a >= 0 { // both in the upper tail: difference of erfc is exact there
		return 0.5 * (math.Erfc(a/math.Sqrt2) - math.Erfc(b/math.Sqrt2))
	}
	if b <= 0 {
		return 0.5 * (math.Erfc(-b/math.Sqrt2) - math.Erfc(-a/math.Sqrt2))
	}
	return 1 - 0.5*math.Erfc(-a/math.Sqrt2) - 0.5*math.Erfc(b/math.Sqrt2)
}

// TrainLloydMax fits a 2^bits-level scalar quantizer to samples by 1-D
// k-means (Lloyd iterations) started from the samples' quantiles.
func TrainLloydMax(samples []float32, bits int) (*Codebook, error) {
	if bits < 1 || bits > 8 {
		return nil, fmt.Errorf("codec: train codebook: bits %d not in 1..8", bits)
	}
	k := 1 << bits
	if len(samples) < k {
		return nil, fmt.Errorf("codec: train codebook: %d samples for a %d-bit codebook, want at least %d (one per level)", len(samples), bits, k)
	}
	s := make([]float64, len(samples))
	for i, v := range samples {
		if !finite32(v) {
			return nil, fmt.Errorf("codec: train codebook: sample %d is %v", i, v)
		}
		s[i] = float64(v)
	}
	slices.Sort(s)
	// prefix[i] = sum of s[:i], so a cell's mean costs two lookups.
	prefix := make([]float64, len(s)+1)
	for i, v := range s {
		prefix[i+1] = prefix[i] + v
	}
	y := make([]float64, k)
	for i := range y {
		y[i] = s[min(len(s)-1, int((float64(i)+0.5)/float64(k)*float64(len(s))))]
	}
	cut := make([]int, k+1)
	cut[k] = len(s)
	for iter := 0; iter < 1000; iter++ {
		for i := 1; i < k; i++ {
			b := (y[i-1] + y[i]) / 2
			j, _ := slices.BinarySearch(s, b)
			// Ties at the boundary go to the lower cell, as in Quantize.
			for j < len(s) && s[j] <= b {
				j++
			}
			cut[i] = j
		}
		change := 0.0
		for i := range y {
			lo, hi := cut[i], cut[i+1]
			if hi <= lo {
				continue // empty cell keeps its level
			}
			v := (prefix[hi] - prefix[lo]) / float64(hi-lo)
			change = max(change, math.Abs(v-y[i]))
			y[i] = v
		}
		if change <= 1e-9*(1+math.Abs(s[len(s)-1]-s[0])) {
			break
		}
	}
	levels := make([]float32, k)
	for i, v := range y {
		levels[i] = float32(v)
		if i > 0 && !(levels[i] > levels[i-1]) {
			// Fewer distinct samples than levels: keep the levels distinct.
			levels[i] = math.Nextafter32(levels[i-1], float32(math.Inf(1)))
		}
	}
	return CodebookFromLevels(levels)
}

func finite32(v float32) bool { return v-v == 0 }
