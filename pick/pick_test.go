package pick

import (
	"math"
	"testing"
)

func TestArgMax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	tests := []struct {
		name string
		x    []float32
		want int
	}{
		{"empty", nil, -1},
		{"one NaN", []float32{nan}, -1},
		{"only NaN", []float32{nan, nan}, -1},
		{"one", []float32{1}, 0},
		{"first of equal", []float32{1, 3, 3, 2}, 1},
		{"NaN first skipped", []float32{nan, -5, -4}, 2},
		{"NaN beside equal", []float32{nan, 1, 1}, 1},
		{"-Inf then finite", []float32{-inf, -1e30}, 1},
		{"+Inf wins over NaN after it", []float32{-1, inf, nan, 1e30}, 1},
		{"-Inf only", []float32{-inf, -inf}, 0},
		{"-Inf, 0, +Inf", []float32{-inf, 0, inf}, 2},
		{"+0 and -0 equal", []float32{negZero, 0}, 0},
		{"-0 after +0", []float32{0, negZero}, 0},
	}
	for _, tt := range tests {
		if got := ArgMax(tt.x); got != tt.want {
			t.Errorf("%s: ArgMax(%v) = %d, want %d", tt.name, tt.x, got, tt.want)
		}
	}
}

func TestFirstNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		x    []float32
		want int
	}{
		{nil, -1},
		{[]float32{0, -1, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}, -1},
		{[]float32{1, nan, inf}, 1},
		{[]float32{1, 2, -inf}, 2},
		{[]float32{inf}, 0},
		{[]float32{nan}, 0},
	}
	for _, tt := range tests {
		if got := FirstNonFinite(tt.x); got != tt.want {
			t.Errorf("FirstNonFinite(%v) = %d, want %d", tt.x, got, tt.want)
		}
	}
}
