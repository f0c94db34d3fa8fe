package cpu

import (
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/internal/mathx"
)

// The element-wise operations Gemma adds to the Llama family's: GELU-tanh
// gating, softcapping and scaling. GELU-tanh gating runs over every
// token's feed-forward row (6,912 values a token at Gemma 3 1B), so it has
// an AVX2 loop as SiLU gating does; the others are scalar loops in float64
// through mathx.Exp (math.Exp is slow in a simd build, see mathx). Each
// value takes the same arithmetic wherever it sits, so prefill and decode
// agree bit for bit.

// sqrt2OverPi is √(2/π), GELU's tanh approximation's factor.
var sqrt2OverPi = math.Sqrt(2 / math.Pi)

// GELUTanhMul sets gate[i] = gelu_tanh(gate[i])·up[i], where gelu_tanh(g)
// = g/2·(1 + tanh(√(2/π)·(g + 0.044715·g³))), computed as
// g/(1 + e^(-2u)) with u the tanh's argument (the same function): Gemma's
// GeGLU. It panics if the lengths differ.
func GELUTanhMul(gate, up []float32) {
	if len(gate) != len(up) {
		panic(fmt.Sprintf("cpu: GELUTanhMul: lengths %d and %d", len(gate), len(up)))
	}
	geluTanhMul(gate, up)
}

// geluTanhMulScalar is GELUTanhMul's loop without SIMD, in float64.
func geluTanhMulScalar(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		x := float64(g)
		u := sqrt2OverPi * (x + 0.044715*x*x*x)
		gate[i] = float32(x/(1+mathx.Exp(-2*u))) * up[i]
	}
}

// Softcap sets x[i] = c·tanh(x[i]/c), computed as c·(1 - 2/(e^(2x/c) + 1)).
func Softcap(x []float32, c float32) {
	cc := float64(c)
	for i, v := range x {
		e := mathx.Exp(2 * float64(v) / cc)
		x[i] = float32(cc * (1 - 2/(e+1)))
	}
}
