package codec

import (
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// NextPow2 returns the smallest power of two >= n (1 for n <= 1).
func NextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// WHT applies the orthonormal fast Walsh–Hadamard transform to x in place.
// len(x) must be a power of two; with the 1/sqrt(n) scale the transform is
// its own inverse and preserves the Euclidean norm.
func WHT(x []float32) error {
	if n := len(x); n == 0 || n&(n-1) != 0 {
		return fmt.Errorf("codec: WHT: length %d is not a power of two", n)
	}
	fwht(x)
	return nil
}

// WHTPadded copies x into dst zero-padded to NextPow2(len(x)), transforms it
// and returns the padded slice (reusing dst's storage when large enough).
func WHTPadded(dst, x []float32) []float32 {
	p := NextPow2(len(x))
	if cap(dst) < p {
		dst = make([]float32, p)
	}
	dst = dst[:p]
	copy(dst, x)
	clear(dst[len(x):])
	fwht(dst)
	return dst
}

// fwht is the unchecked in-place transform; len(x) is a power of two.
func fwht(x []float32) {
	fwhtRaw(x)
	s := float32(1 / math.Sqrt(float64(len(x))))
	for i := range x {
		x[i] *= s
	}
}

// fwhtRaw is fwht without the 1/sqrt(n) scale, for callers that fold the
// scale into a pass of their own.
func fwhtRaw(x []float32) {
	n := len(x)
	switch {
	case n < 2:
		return
	case n == 2:
		x[0], x[1] = x[0]+x[1], x[0]-x[1]
		return
	case n == 4:
		a, b, c, d := x[0], x[1], x[2], x[3]
		s0, d0, s1, d1 := a+b, a-b, c+d, c-d
		x[0], x[1], x[2], x[3] = s0+s1, d0+d1, s0-s1, d0-d1
		return
	}
	cpu.FWHT(x)
}

// randomSigns returns n values of ±1 drawn from a SplitMix64 stream seeded
// by seed, so a codec's randomized Hadamard rotation is fixed by its seed.
func randomSigns(n int, seed uint64) []float32 {
	s := make([]float32, n)
	state := seed
	var bits uint64
	for i := range s {
		if i%64 == 0 {
			state += 0x9e3779b97f4a7c15
			z := state
			z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			bits = z ^ z>>31
		}
		if bits&1 == 0 {
			s[i] = 1
		} else {
			s[i] = -1
		}
		bits >>= 1
	}
	return s
}
