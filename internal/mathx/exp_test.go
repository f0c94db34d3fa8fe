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

// ExpWeight is Exp rounded to float32, bit for bit, over the weights'
// domain (x <= 0), the float32 underflow boundary and the special values
// included.
func TestExpWeight(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	check := func(x float64) {
		if got, want := ExpWeight(x), float32(Exp(x)); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("ExpWeight(%v) = %v (%#x), float32(Exp) %v (%#x)", x, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	for range 200000 {
		check(-r.Float64() * 120)             // down past float32's underflow
		check(-math.Abs(r.NormFloat64()) * 8) // where logits differences lie
	}
	for x := -103.0; x > -105; x -= 1e-4 {
		check(x)
	}
	for _, x := range []float64{0, math.Copysign(0, -1), -1e-9, -math.SmallestNonzeroFloat64, -745.2, math.Inf(-1)} {
		check(x)
	}
	if got := ExpWeight(math.NaN()); got == got {
		t.Errorf("ExpWeight(NaN) = %v", got)
	}
}
