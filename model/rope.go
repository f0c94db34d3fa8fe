package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/kakeya-ai/kakeya/weights"
)

// invFreq returns the RoPE inverse frequencies of a head of dim d the way
// Hugging Face computes them in float32, rope_scaling applied.
func invFreq(d int, theta float64, rs *weights.RopeScaling) ([]float32, error) {
	half := d / 2
	inv := make([]float32, half)
	base := float64(float32(theta))
	for i := range inv {
		// torch: 1.0 / (base ** (arange(0, d, 2).float() / d)) in float32.
		e := float32(2*i) / float32(d)
		inv[i] = 1 / float32(math.Pow(base, float64(e)))
	}
	if rs == nil {
		return inv, nil
	}
	switch rs.Type {
	case "", "default":
	case "linear":
		if rs.Factor <= 0 {
			return nil, fmt.Errorf("rope_scaling linear: factor %g, want > 0", rs.Factor)
		}
		for i := range inv {
			inv[i] /= float32(rs.Factor)
		}
	case "llama3":
		if err := llama3Scale(inv, rs); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("rope_scaling type %q is not supported (want default, linear or llama3)", rs.Type)
	}
	return inv, nil
}

// llama3Scale applies Llama 3.1's frequency-dependent scaling in place:
// high frequencies are kept, low ones divided by the factor, and the band
// between interpolated smoothly.
func llama3Scale(inv []float32, rs *weights.RopeScaling) error {
	f, lo, hi, orig := rs.Factor, rs.LowFreqFactor, rs.HighFreqFactor, float64(rs.OriginalMaxPositionEmbeddings)
	if f <= 0 || lo <= 0 || hi <= lo || orig <= 0 {
		return fmt.Errorf("rope_scaling llama3: factor %g, low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings %g: want positive factors with high > low", f, lo, hi, orig)
	}
	lowWavelen, highWavelen := orig/lo, orig/hi
	for i, v := range inv {
		x := float64(v)
		wavelen := 2 * math.Pi / x
		switch {
		case wavelen < highWavelen:
		case wavelen > lowWavelen:
			x /= f
		default:
			smooth := (orig/wavelen - lo) / (hi - lo)
			x = (1-smooth)*x/f + smooth*x
		}
		inv[i] = float32(x)
	}
	return nil
}

// ropeTables returns cos and sin of pos·inv_freq for positions [0, n), d/2
// values per position, computed like Hugging Face: the angle in float32.
func ropeTables(inv []float32, n int) (cos, sin []float32) {
	half := len(inv)
	cos, sin = make([]float32, n*half), make([]float32, n*half)
	for p := 0; p < n; p++ {
		for i, f := range inv {
			a := float64(float32(p) * f)
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return cos, sin
}

// sameRope returns the index in ropes of one whose inverse frequencies
// are inv, -1 if none: layer kinds of one RoPE share its tables.
func sameRope(ropes []rope, inv []float32) int {
	for i, r := range ropes {
		if slices.Equal(r.invFreq, inv) {
			return i
		}
	}
	return -1
}
