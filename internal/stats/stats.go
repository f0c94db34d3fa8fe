// Package stats holds the summary statistics the benchmark tools report
// over repeated measurements.
package stats

import (
	"math"
	"slices"
)

// Median returns the median of v (the mean of the middle two for an even
// count), leaving v as it is; NaN for an empty v.
func Median(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
