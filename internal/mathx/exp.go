// Package mathx holds math functions the engine's hot host loops call in
// place of package math's, where math's are slow in the build the project
// ships.
//
// Exp: on amd64, math.Exp is assembly that mixes legacy SSE and VEX
// (FMA) instructions. In a GOEXPERIMENT=simd build the upper halves of
// the vector registers are left dirty around calls into assembly, and
// each switch between the two encodings then stalls: measured on the
// development machine (Intel Xeon, AVX-512), math.Exp takes ~1,050 ns a
// call in a simd build against ~8 ns in a plain one. Exp here is the
// same fdlibm algorithm as math's portable Go version, compiled Go (one
// encoding throughout), ~8 ns either way. The log-softmax of a
// 151,936-entry vocabulary is 0.16 s a row with math.Exp in the simd
// build.
package mathx

import "math"

// The fdlibm constants of math's portable exp.
const (
	ln2Hi     = 6.93147180369123816490e-01
	ln2Lo     = 1.90821492927058770002e-10
	log2e     = 1.44269504088896338700e+00
	overflow  = 7.09782712893383973096e+02
	underflow = -7.45133219101941108420e+02
	nearZero  = 1.0 / (1 << 28) // 2**-28

	p1 = 1.66666666666666657415e-01  /* 0x3FC55555; 0x55555555 */
	p2 = -2.77777777770155933842e-03 /* 0xBF66C16C; 0x16BEBD93 */
	p3 = 6.61375632143793436117e-05  /* 0x3F11566A; 0xAF25DE2C */
	p4 = -1.65339022054652515390e-06 /* 0xBEBBBD41; 0xC5D26BF1 */
	p5 = 4.13813679705723846039e-08  /* 0x3E663769; 0x72BEA4D0 */
)

// Exp returns e**x, as math.Exp does (within two ulps of its assembly;
// exactly where math runs its portable version): Exp(+Inf) = +Inf, Exp(NaN) = NaN, 0 below
// about -745.13 and +Inf above about 709.78.
func Exp(x float64) float64 {
	switch {
	case x != x || x > overflow: // NaN, or too large (+Inf included)
		if x != x {
			return x
		}
		return math.Inf(1)
	case x < underflow: // -Inf included
		return 0
	case -nearZero < x && x < nearZero:
		return 1 + x
	}
	// Reduce: x = k*ln2 + r, |r| <= 0.5*ln2.
	var k int
	if x < 0 {
		k = int(log2e*x - 0.5)
	} else {
		k = int(log2e*x + 0.5)
	}
	hi := x - float64(k)*ln2Hi
	lo := float64(k) * ln2Lo
	// e**r by a rational approximation, then times 2**k.
	r := hi - lo
	t := r * r
	c := r - t*(p1+t*(p2+t*(p3+t*(p4+t*p5))))
	y := 1 - ((lo - (r*c)/(2-c)) - hi)
	return math.Ldexp(y, k)
}

// ExpWeight returns e**x rounded to float32, for x <= 0 (a softmax weight
// relative to the largest): Exp's reduction and polynomial, with 2**k put
// together from its bits instead of math.Ldexp (about twice as fast), and
// 0 below -104, where every float32 result would round to 0 or be
// subnormal (NaN gives NaN).
func ExpWeight(x float64) float32 {
	switch {
	case x != x:
		return float32(x)
	case x < -104:
		return 0
	case x > -nearZero:
		return float32(1 + x)
	}
	k := int(log2e*x - 0.5)
	hi := x - float64(k)*ln2Hi
	lo := float64(k) * ln2Lo
	r := hi - lo
	t := r * r
	c := r - t*(p1+t*(p2+t*(p3+t*(p4+t*p5))))
	y := 1 - ((lo - (r*c)/(2-c)) - hi)
	return float32(y * math.Float64frombits(uint64(k+1023)<<52))
}
