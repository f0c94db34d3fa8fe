package mathx

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Exp agrees with math.Exp within two ulps (each is within about an ulp
// of e**x) over the whole range, and
// exactly at the special values.
func TestExp(t *testing.T) {
	special := []struct{ x, want float64 }{
		{math.Inf(1), math.Inf(1)},
		{math.Inf(-1), 0},
		{0, 1},
		{math.Copysign(0, -1), 1},
		{710, math.Inf(1)},
		{-746, 0},
		{1, math.E},
	}
	for _, s := range special {
		if got := Exp(s.x); got != s.want {
			t.Errorf("Exp(%v) = %v, want %v", s.x, got, s.want)
		}
	}
	if got := Exp(math.NaN()); !math.IsNaN(got) {
		t.Errorf("Exp(NaN) = %v", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	check := func(x float64) {
		got, want := Exp(x), math.Exp(x)
		if got == want {
			return
		}
		if ulp := math.Abs(math.Nextafter(want, math.Inf(1)) - want); math.Abs(got-want) > 2*ulp {
			t.Fatalf("Exp(%v) = %v, math.Exp %v: more than two ulps apart", x, got, want)
		}
	}
	for range 200000 {
		check(r.Float64()*1455 - 745) // the whole range, denormal results included
		check(r.NormFloat64() * 8)    // where logits differences lie
	}
	for x := -1e-8; x < 1e-8; x += 1e-10 {
		check(x)
	}
}

func BenchmarkExp(b *testing.B) {
	var s float64
	x := -3.0
	for b.Loop() {
		s += Exp(x)
		x -= 1e-9
	}
	_ = s
}
