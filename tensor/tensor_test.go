package tensor

import (
	"math"
	"testing"
)

// halfValue decodes an IEEE 754 binary16 pattern from its definition, as an
// independent reference for F16ToF32.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	man := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if man != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(man, -24)
	}
	return sign * math.Ldexp(1+man/1024, exp-15)
}

func TestF16ToF32AllValues(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got, want := F16ToF32(h), halfValue(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestF16RoundTripAllValues(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16ToF32(h)
		back := F32ToF16(f)
		if f != f {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 || back&0x8000 != h&0x8000 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

// TestF32ToF16TiesToEven checks every midpoint between adjacent finite
// halves (exact in f32) rounds to the even neighbour, and one f32 ulp either
// side of it rounds to the nearer one.
func TestF32ToF16TiesToEven(t *testing.T) {
	for i := range 0x7bff {
		for _, sign := range []uint16{0, 0x8000} {
			a, b := uint16(i)|sign, uint16(i+1)|sign
			mid := float32((halfValue(a) + halfValue(b)) / 2)
			if float64(mid) != (halfValue(a)+halfValue(b))/2 {
				t.Fatalf("midpoint of %#04x and %#04x not exact in f32", a, b)
			}
			even := a
			if a&1 == 1 {
				even = b
			}
			if got := F32ToF16(mid); got != even {
				t.Fatalf("F32ToF16(%v) = %#04x, want even neighbour %#04x", mid, got, even)
			}
			below := math.Nextafter32(mid, 0)
			above := math.Nextafter32(mid, float32(math.Copysign(math.Inf(1), float64(mid))))
			if got := F32ToF16(below); got != a {
				t.Fatalf("F32ToF16(%v) = %#04x, want %#04x", below, got, a)
			}
			if got := F32ToF16(above); got != b {
				t.Fatalf("F32ToF16(%v) = %#04x, want %#04x", above, got, b)
			}
		}
	}
}

func TestF32ToF16Special(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{0, 0},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65519.99, 0x7bff},
		{65520, 0x7c00}, // the tie above MaxFloat16 rounds to infinity
		{1e10, 0x7c00},
		{-1e10, 0xfc00},
		{float32(math.Inf(1)), 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{0x1p-24, 0x0001},   // smallest subnormal
		{0x1p-25, 0x0000},   // tie between 0 and 2^-24: even is 0
		{0x1.8p-24, 0x0002}, // tie between 1 and 2 subnormal ulps: even is 2
		{0x1.000002p-25, 0x0001},
		{0x1p-30, 0},
		{0x1p-14, 0x0400},     // smallest normal
		{0x1.ff8p-15, 0x03ff}, // largest subnormal
		{0x1.ffcp-15, 0x0400}, // its tie with the smallest normal: even is 0x0400
		{float32(math.SmallestNonzeroFloat32), 0},
	}
	for _, tt := range tests {
		if got := F32ToF16(tt.in); got != tt.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
}

func TestBF16AllValues(t *testing.T) {
	for i := range 1 << 16 {
		b := uint16(i)
		f := BF16ToF32(b)
		if math.Float32bits(f) != uint32(b)<<16 {
			t.Fatalf("BF16ToF32(%#04x) bits = %#08x", b, math.Float32bits(f))
		}
		back := F32ToBF16(f)
		if f != f {
			if back&0x7f80 != 0x7f80 || back&0x7f == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", b, back)
			}
			continue
		}
		if back != b {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", b, back)
		}
	}
}

func TestF32ToBF16TiesToEven(t *testing.T) {
	for i := range 0x7f7f {
		a, b := uint16(i), uint16(i+1)
		mid := math.Float32frombits(uint32(a)<<16 | 0x8000)
		even := a
		if a&1 == 1 {
			even = b
		}
		if got := F32ToBF16(mid); got != even {
			t.Fatalf("F32ToBF16(%v) = %#04x, want %#04x", mid, got, even)
		}
		if got := F32ToBF16(math.Float32frombits(math.Float32bits(mid) - 1)); got != a {
			t.Fatalf("below midpoint of %#04x rounds to %#04x", a, got)
		}
		if got := F32ToBF16(math.Float32frombits(math.Float32bits(mid) + 1)); got != b {
			t.Fatalf("above midpoint of %#04x rounds to %#04x", a, got)
		}
	}
	if got := F32ToBF16(math.MaxFloat32); got != 0x7f80 {
		t.Errorf("F32ToBF16(MaxFloat32) = %#04x, want +Inf 0x7f80", got)
	}
	if got := F32ToBF16(float32(math.Inf(-1))); got != 0xff80 {
		t.Errorf("F32ToBF16(-Inf) = %#04x", got)
	}
	// A NaN whose payload sits only in the low half must stay a NaN.
	if got := F32ToBF16(math.Float32frombits(0x7f800001)); got&0x7f == 0 {
		t.Errorf("F32ToBF16(NaN 0x7f800001) = %#04x, not a NaN", got)
	}
}
