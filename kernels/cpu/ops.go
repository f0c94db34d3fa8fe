package cpu

import (
	"fmt"
	"math"
)

// The element-wise ops work on one vector on the calling goroutine: at
// decoder widths they take microseconds, less than waking workers would.

// Dot returns Σ a[i]·b[i] accumulated in f32 over several partial sums.
// It panics if the lengths differ.
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("cpu: Dot: lengths %d and %d", len(a), len(b)))
	}
	return dot(a, b)
}

// Axpy adds alpha·x to y. It panics if the lengths differ.
func Axpy(alpha float32, x, y []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("cpu: Axpy: lengths %d and %d", len(x), len(y)))
	}
	axpy(alpha, x, y)
}

// Add adds x to dst element-wise (the residual connection). It panics if the
// lengths differ.
func Add(dst, x []float32) {
	if len(dst) != len(x) {
		panic(fmt.Sprintf("cpu: Add: lengths %d and %d", len(dst), len(x)))
	}
	add(dst, x)
}

// Scale multiplies x by s in place.
func Scale(x []float32, s float32) { scale(x, s) }

// HadamardStages applies the butterfly stages h = 8, 16, ..., len(x)/2 of
// an unnormalized fast Walsh–Hadamard transform to x, whose length must be
// a power of two >= 8; the stages below 8 are the caller's (they mix
// neighbours within one vector register).
func HadamardStages(x []float32) {
	n := len(x)
	if n < 8 || n&(n-1) != 0 {
		panic(fmt.Sprintf("cpu: HadamardStages: length %d is not a power of two >= 8", n))
	}
	hadamardStages(x)
}

func hadamardStagesScalar(x []float32) {
	n := len(x)
	for h := 8; h < n; h <<= 1 {
		for i := 0; i < n; i += h << 1 {
			butterfly(x[i:i+h], x[i+h:i+2*h])
		}
	}
}

// Lookup sets dst[i] = table[codes[i]&15] for i < len(dst): decoding
// scalar-quantizer codes of up to 4 bits. codes may run past len(dst) (the
// rest of a block); the vector path then reads ahead instead of stopping
// early. It panics if codes is shorter than dst.
func Lookup(dst []float32, codes []uint8, table *[16]float32) {
	if len(codes) < len(dst) {
		panic(fmt.Sprintf("cpu: Lookup: %d codes for %d values", len(codes), len(dst)))
	}
	lookup(dst, codes, table)
}

func lookupScalar(dst []float32, codes []uint8, table *[16]float32) {
	codes = codes[:len(dst)]
	for i, c := range codes {
		dst[i] = table[c&15]
	}
}

// MulAdd sets dst = x*y + z element-wise. It panics if the lengths differ.
func MulAdd(dst, x, y, z []float32) {
	if len(x) != len(dst) || len(y) != len(dst) || len(z) != len(dst) {
		panic(fmt.Sprintf("cpu: MulAdd: dst %d, x %d, y %d, z %d elements", len(dst), len(x), len(y), len(z)))
	}
	mulAdd(dst, x, y, z)
}

// RMSNorm sets out = x / sqrt(mean(x²) + eps) · weight in f32, as Hugging
// Face's RMSNorm does. out may alias x. It panics if the lengths differ.
func RMSNorm(out, x, weight []float32, eps float32) {
	if len(out) != len(x) || len(weight) != len(x) {
		panic(fmt.Sprintf("cpu: RMSNorm: out %d, x %d, weight %d elements", len(out), len(x), len(weight)))
	}
	if len(x) == 0 {
		return
	}
	ms := sumSquares(x) / float32(len(x))
	inv := float32(1 / math.Sqrt(float64(ms+eps)))
	mulScaled(out, x, weight, inv)
}

// SiLUMul sets gate[i] = silu(gate[i])·up[i], where silu(g) = g/(1+e^-g):
// the SwiGLU activation. It panics if the lengths differ.
func SiLUMul(gate, up []float32) {
	if len(gate) != len(up) {
		panic(fmt.Sprintf("cpu: SiLUMul: lengths %d and %d", len(gate), len(up)))
	}
	siluMul(gate, up)
}

// Softmax replaces x by exp(x - max x) normalised to sum to 1. Entries of
// -Inf become 0; a vector with no finite maximum gives NaNs.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	softmax(x)
}

// RoPE rotates one head vector in place in Hugging Face's rotate_half
// layout: with h = len(cos), x1 = x[:h], x2 = x[h:], it sets
// x1 = x1·cos - x2·sin and x2 = x2·cos + x1·sin. It panics unless
// len(x) == 2·len(cos) and len(sin) == len(cos).
func RoPE(x, cos, sin []float32) {
	if len(x) != 2*len(cos) || len(sin) != len(cos) {
		panic(fmt.Sprintf("cpu: RoPE: x %d, cos %d, sin %d elements", len(x), len(cos), len(sin)))
	}
	rope(x, cos, sin)
}

// Scalar element-wise loops: the fallback, and the SIMD paths' tails.

func dotScalar(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyScalar(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func addScalar(dst, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += x[i]
	}
}

func butterflyScalar(lo, hi []float32) {
	hi = hi[:len(lo)]
	for i, a := range lo {
		b := hi[i]
		lo[i], hi[i] = a+b, a-b
	}
}

func mulAddScalar(dst, x, y, z []float32) {
	x, y, z = x[:len(dst)], y[:len(dst)], z[:len(dst)]
	for i := range dst {
		dst[i] = x[i]*y[i] + z[i]
	}
}

func scaleScalar(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func sumSquaresScalar(x []float32) float32 {
	return dotScalar(x, x)
}

func mulScaledScalar(out, x, w []float32, s float32) {
	x, w = x[:len(out)], w[:len(out)]
	for i := range out {
		out[i] = x[i] * s * w[i]
	}
}

func siluMulScalar(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		gate[i] = float32(float64(g)/(1+math.Exp(-float64(g)))) * up[i]
	}
}

func softmaxScalar(x []float32) {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	scaleScalar(x, 1/sum)
}

func ropeScalar(x, cos, sin []float32) {
	h := len(cos)
	x1, x2, sin := x[:h], x[h:2*h], sin[:h]
	for i, c := range cos {
		a, b := x1[i], x2[i]
		x1[i] = a*c - b*sin[i]
		x2[i] = b*c + a*sin[i]
	}
}
