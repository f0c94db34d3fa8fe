package codec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sylvester returns the unnormalised Hadamard matrix H_n by the Sylvester
// construction, the textbook definition the fast transform must match.
func sylvester(n int) [][]float64 {
	h := [][]float64{{1}}
	for len(h) < n {
		m := len(h)
		nh := make([][]float64, 2*m)
		for i := range nh {
			nh[i] = make([]float64, 2*m)
			for j := range nh[i] {
				v := h[i%m][j%m]
				if i >= m && j >= m {
					v = -v
				}
				nh[i][j] = v
			}
		}
		h = nh
	}
	return h
}

func TestWHTMatchesHadamardMatrix(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8, 16, 64, 128} {
		r := rand.New(rand.NewPCG(uint64(n), 1))
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		y := append([]float32(nil), x...)
		if err := WHT(y); err != nil {
			t.Fatal(err)
		}
		h := sylvester(n)
		var nx, ny float64
		for i := 0; i < n; i++ {
			var want float64
			for j := 0; j < n; j++ {
				want += h[i][j] * float64(x[j])
			}
			want /= math.Sqrt(float64(n))
			if math.Abs(want-float64(y[i])) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("n=%d: y[%d] = %v, want %v", n, i, y[i], want)
			}
			nx += float64(x[i]) * float64(x[i])
			ny += float64(y[i]) * float64(y[i])
		}
		if math.Abs(nx-ny) > 1e-5*nx {
			t.Errorf("n=%d: norm² %v -> %v, want preserved", n, nx, ny)
		}
		if err := WHT(y); err != nil { // self-inverse
			t.Fatal(err)
		}
		for i := range x {
			if math.Abs(float64(y[i]-x[i])) > 1e-5 {
				t.Fatalf("n=%d: WHT(WHT(x))[%d] = %v, want %v", n, i, y[i], x[i])
			}
		}
	}
}

func TestWHTErrorsAndPadding(t *testing.T) {
	for _, n := range []int{0, 3, 6, 100} {
		if err := WHT(make([]float32, n)); err == nil {
			t.Errorf("WHT(len %d) = nil error, want one", n)
		}
	}
	x := []float32{1, 2, 3, 4, 5}
	y := WHTPadded(nil, x)
	if len(y) != 8 {
		t.Fatalf("WHTPadded len = %d, want 8", len(y))
	}
	z := []float32{1, 2, 3, 4, 5, 0, 0, 0}
	fwht(z)
	for i := range z {
		if y[i] != z[i] {
			t.Fatalf("padded[%d] = %v, want %v", i, y[i], z[i])
		}
	}
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 4, 64: 64, 65: 128, 80: 128} {
		if got := NextPow2(n); got != want {
			t.Errorf("NextPow2(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestRandomSignsDeterministic(t *testing.T) {
	a, b, c := randomSigns(256, 1), randomSigns(256, 1), randomSigns(256, 2)
	plus, same := 0, true
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed gave different signs")
		}
		if a[i] != c[i] {
			same = false
		}
		if a[i] == 1 {
			plus++
		}
	}
	if same {
		t.Error("different seeds gave identical signs")
	}
	if plus < 96 || plus > 160 {
		t.Errorf("%d of 256 signs positive, want about half", plus)
	}
}

// Kakeya.Signs gives the rotation's signs as the codec draws them, and all
// ones without RandomSigns.
func TestKakeyaSigns(t *testing.T) {
	for _, random := range []bool{true, false} {
		k := mustKakeya(t, func(o *KakeyaOptions) { o.RandomSigns, o.Seed = random, 7 })
		want := randomSigns(256, 7)
		for i, s := range k.Signs(256) {
			if !random {
				want[i] = 1
			}
			if s != want[i] {
				t.Fatalf("random %v: sign %d = %v, want %v", random, i, s, want[i])
			}
		}
	}
}
