package codec

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestGaussianCodebookKnownValues(t *testing.T) {
	// Positive levels of the Lloyd–Max quantizer for N(0,1) (Max 1960).
	tests := []struct {
		bits int
		pos  []float64
		mse  float64
	}{
		{1, []float64{0.7979}, 0.3634},
		{2, []float64{0.4528, 1.510}, 0.1175},
		{3, []float64{0.2451, 0.7560, 1.344, 2.152}, 0.03454},
		{4, []float64{0.1284, 0.3881, 0.6568, 0.9424, 1.256, 1.618, 2.069, 2.733}, 0.009497},
	}
	for _, tt := range tests {
		cb, err := GaussianCodebook(tt.bits)
		if err != nil {
			t.Fatal(err)
		}
		k := len(cb.Levels)
		for i, want := range tt.pos {
			if got := float64(cb.Levels[k/2+i]); math.Abs(got-want) > 1e-3 {
				t.Errorf("b=%d level +%d = %.5f, want %.4f", tt.bits, i, got, want)
			}
			if cb.Levels[k/2-1-i] != -cb.Levels[k/2+i] {
				t.Errorf("b=%d not symmetric at %d", tt.bits, i)
			}
		}
		// Distortion by numerical integration against the known value.
		var mse float64
		const h = 1e-3
		for x := -10.0; x < 10; x += h {
			e := x - float64(cb.Value(cb.Quantize(float32(x))))
			mse += e * e * normPDF(x) * h
		}
		if math.Abs(mse-tt.mse) > 2e-3*tt.mse+1e-5 {
			t.Errorf("b=%d distortion %.6f, want %.6f", tt.bits, mse, tt.mse)
		}
	}
	if _, err := GaussianCodebook(0); err == nil {
		t.Error("bits 0 accepted")
	}
}

func TestQuantizeIsNearestLevel(t *testing.T) {
	cb, _ := GaussianCodebook(3)
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 10000; i++ {
		x := float32(r.NormFloat64() * 2)
		best := 0
		for j, l := range cb.Levels {
			if math.Abs(float64(x-l)) < math.Abs(float64(x-cb.Levels[best])) {
				best = j
			}
		}
		if got := cb.Quantize(x); got != best && math.Abs(float64(x-cb.Levels[got])) != math.Abs(float64(x-cb.Levels[best])) {
			t.Fatalf("Quantize(%v) = %d, nearest is %d", x, got, best)
		}
	}
}

func TestTrainLloydMax(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	s := make([]float32, 200000)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	for bits := 1; bits <= 4; bits++ {
		got, err := TrainLloydMax(s, bits)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := GaussianCodebook(bits)
		for i := range want.Levels {
			if d := math.Abs(float64(got.Levels[i] - want.Levels[i])); d > 0.03 {
				t.Errorf("b=%d level %d = %.4f, Gaussian optimum %.4f", bits, i, got.Levels[i], want.Levels[i])
			}
		}
	}
	// Degenerate data still yields a valid, strictly increasing codebook.
	cb, err := TrainLloydMax([]float32{1, 1, 1, 1, 1, 2, 2, 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct {
		s    []float32
		bits int
	}{{s[:3], 2}, {s, 0}, {s, 9}, {[]float32{1, 2, float32(math.NaN()), 4}, 1}} {
		if _, err := TrainLloydMax(bad.s, bad.bits); err == nil {
			t.Errorf("TrainLloydMax(len %d, %d bits) accepted", len(bad.s), bad.bits)
		}
	}
}

func TestCodebookValidate(t *testing.T) {
	for _, c := range []*Codebook{
		nil,
		{Levels: []float32{1, 2, 3}, Bounds: []float32{1.5, 2.5}},
		{Levels: []float32{2, 1}, Bounds: []float32{1.5}},
		{Levels: []float32{1, 2}, Bounds: []float32{3}},
		{Levels: []float32{1, 2}, Bounds: nil},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
	}
}
