package codec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// e4m3Values lists every finite E4M3 value from the format's definition,
// written out independently of fp8Value: ±m/8·2^-6 for the subnormals,
// ±(1+m/8)·2^(e-7) for e in 1..15 (e = 15, m = 7 is NaN).
func e4m3Values() map[byte]float64 {
	vals := map[byte]float64{}
	for c := 0; c < 256; c++ {
		s, e, m := c>>7, (c>>3)&15, c&7
		if e == 15 && m == 7 {
			continue
		}
		v := (1 + float64(m)/8) * math.Pow(2, float64(e-7))
		if e == 0 {
			v = float64(m) / 8 * math.Pow(2, -6)
		}
		if s == 1 {
			v = -v
		}
		vals[byte(c)] = v
	}
	return vals
}

func TestFP8Values(t *testing.T) {
	vals := e4m3Values()
	if len(vals) != 254 {
		t.Fatalf("%d finite codes, want 254", len(vals))
	}
	for c, want := range vals {
		if got := fp8Values[c]; float64(got) != want {
			t.Errorf("code %#02x: %v, want %v", c, got, want)
		}
		// Every finite value encodes to itself (±0 keep their sign).
		if got := fp8Encode(float32(want)); got != c && !(want == 0 && got&0x7f == 0 && got&0x80 == c&0x80) {
			t.Errorf("encode(%v) = %#02x, want %#02x", want, got, c)
		}
	}
	if fp8Values[0x7e] != 448 || fp8Values[0x01] != float32(math.Ldexp(1, -9)) {
		t.Errorf("max %v, min subnormal %v", fp8Values[0x7e], fp8Values[0x01])
	}
	for _, c := range []byte{0x7f, 0xff} {
		if !math.IsNaN(float64(fp8Values[c])) {
			t.Errorf("code %#02x is %v, want NaN", c, fp8Values[c])
		}
	}
}

// fp8Want returns the code nearest to v among the finite values, ties to
// the code with an even mantissa, by exhaustive search.
func fp8Want(v float64, vals map[byte]float64) byte {
	best, bestErr := byte(0), math.Inf(1)
	for c, x := range vals {
		if (x == 0) && c != 0 { // one zero: +0
			continue
		}
		e := math.Abs(v - x)
		if e < bestErr || (e == bestErr && c&1 == 0 && best&1 == 1) {
			best, bestErr = c, e
		}
	}
	return best
}

// Encoding picks the nearest value, ties to even, for values at and
// between every pair of neighbours and at random.
func TestFP8EncodeNearest(t *testing.T) {
	vals := e4m3Values()
	r := rand.New(rand.NewPCG(1, 2))
	var probes []float64
	for _, x := range vals {
		for _, y := range vals {
			if x >= 0 && y > x && y-x < 1e9 && len(probes) < 200000 {
				probes = append(probes, (x+y)/2) // midpoints: the ties
			}
		}
		probes = append(probes, x*(1+r.Float64()*0.1), x)
	}
	for range 20000 {
		probes = append(probes, (r.Float64()*2-1)*448)
	}
	for _, v := range probes {
		if math.Abs(v) > 448 {
			continue
		}
		got, want := fp8Encode(float32(v)), fp8Want(float64(float32(v)), vals)
		if got&0x7f == 0 && want == 0 { // -0 for small negatives is fine
			continue
		}
		if got != want {
			t.Fatalf("encode(%v) = %#02x (%v), want %#02x (%v)", v, got, fp8Values[got], want, vals[want])
		}
	}
}

// A block round-trips within half a step of E4M3 at its scale; an
// all-zero block decodes to zeros; corrupt blocks are refused.
func TestFP8Block(t *testing.T) {
	const n, d = 16, 64
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, n*d)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	x[5] = 40 // the block's absmax
	enc, err := FP8{}.Encode(nil, x, n, d)
	if err != nil {
		t.Fatal(err)
	}
	if want := 16 + 4 + n*d; len(enc) != want {
		t.Fatalf("block of %d bytes, want %d", len(enc), want)
	}
	got := make([]float32, n*d)
	if err := (FP8{}).Decode(got, enc, n, d); err != nil {
		t.Fatal(err)
	}
	scale := float64(40) / 448
	for i, v := range x {
		// Relative step 2^-3 for normals, half of it for rounding; the
		// subnormal step is 2^-9 * scale.
		tol := math.Max(math.Abs(float64(v))/16, math.Ldexp(scale, -10)) * (1 + 1e-6)
		if e := math.Abs(float64(got[i]) - float64(v)); e > tol {
			t.Fatalf("value %d: %v decoded as %v (error %v > %v)", i, v, got[i], e, tol)
		}
	}
	if got[5] != 40 {
		t.Errorf("absmax %v decoded as %v, want it exact", x[5], got[5])
	}
	zero, _ := FP8{}.Encode(nil, make([]float32, n*d), n, d)
	if err := (FP8{}).Decode(got, zero, n, d); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 0 {
			t.Fatalf("zero block decodes %v at %d", v, i)
		}
	}
	bad := append([]byte(nil), enc...)
	bad[len(bad)-1] = 0x7f
	seal(bad)
	if err := (FP8{}).Decode(got, bad, n, d); err == nil {
		t.Error("a NaN code decoded without error")
	}
	bad = append(bad[:0], enc...)
	bad[20] ^= 1
	if err := (FP8{}).Decode(got, bad, n, d); err == nil {
		t.Error("a corrupt block decoded without error")
	}
}
