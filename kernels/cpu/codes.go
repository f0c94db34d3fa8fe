package cpu

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Kernels for decoding quantized blocks: packed codes straight to their
// levels, IEEE halves to float32, and the whole Walsh–Hadamard transform.

// UnpackLookup sets dst[i] = table[c] for the i-th code c of width bits
// (1..4) in src, a little-endian bit stream with the first code in the
// least significant bits (codec.PackBits's layout). Unpacking and lookup are
// one pass, with no array of codes in between. It panics if bits is outside
// 1..4 or src holds fewer than len(dst) codes.
func UnpackLookup(dst []float32, src []byte, bits int, table *[16]float32) {
	if bits < 1 || bits > 4 || len(src) < (len(dst)*bits+7)/8 {
		panic(fmt.Sprintf("cpu: UnpackLookup: %d codes of %d bits from %d bytes", len(dst), bits, len(src)))
	}
	unpackLookup(dst, src, bits, table)
}

func unpackLookupScalar(dst []float32, src []byte, bits int, t *[16]float32) {
	mask := uint32(1)<<bits - 1
	var acc uint32
	nacc, p := 0, 0
	for i := range dst {
		if nacc < bits {
			// A byte at a time never reads past the last code's byte.
			acc |= uint32(src[p]) << nacc
			p++
			nacc += 8
		}
		dst[i] = t[acc&mask]
		acc >>= bits
		nacc -= bits
	}
}

// WidenF16 sets dst[i] to the IEEE half-precision value stored little-endian
// at src[2i:2i+2], as tensor.F16ToF32 does, and reports whether all of them
// were finite. It panics if src is shorter than 2*len(dst) bytes.
func WidenF16(dst []float32, src []byte) bool {
	if len(src) < 2*len(dst) {
		panic(fmt.Sprintf("cpu: WidenF16: %d values from %d bytes", len(dst), len(src)))
	}
	return widenF16(dst, src)
}

func widenF16Scalar(dst []float32, src []byte) bool {
	ok := true
	for i := range dst {
		h := uint16(src[2*i]) | uint16(src[2*i+1])<<8
		dst[i] = tensor.F16ToF32(h)
		ok = ok && h&0x7c00 != 0x7c00
	}
	return ok
}

// FWHT applies the unnormalized fast Walsh–Hadamard transform to x in
// place: the butterfly stages h = 1, 2, 4, ..., len(x)/2 in that order, each
// setting x[i], x[i+h] = x[i]+x[i+h], x[i]-x[i+h]. Every implementation runs
// the same additions in the same order, so results are bit-identical across
// builds. It panics if len(x) is not a power of two >= 8.
func FWHT(x []float32) {
	n := len(x)
	if n < 8 || n&(n-1) != 0 {
		panic(fmt.Sprintf("cpu: FWHT: length %d is not a power of two >= 8", n))
	}
	fwht(x)
}

// fwht8Scalar runs the stages h = 1, 2, 4, which stay within groups of eight
// neighbours, on every group of x.
func fwht8Scalar(x []float32) {
	for i := 0; i+8 <= len(x); i += 8 {
		g := (*[8]float32)(x[i : i+8])
		a0, a1 := g[0]+g[1], g[0]-g[1]
		a2, a3 := g[2]+g[3], g[2]-g[3]
		a4, a5 := g[4]+g[5], g[4]-g[5]
		a6, a7 := g[6]+g[7], g[6]-g[7]
		b0, b1, b2, b3 := a0+a2, a1+a3, a0-a2, a1-a3
		b4, b5, b6, b7 := a4+a6, a5+a7, a4-a6, a5-a7
		g[0], g[1], g[2], g[3] = b0+b4, b1+b5, b2+b6, b3+b7
		g[4], g[5], g[6], g[7] = b0-b4, b1-b5, b2-b6, b3-b7
	}
}

func fwhtScalar(x []float32) {
	fwht8Scalar(x)
	hadamardStagesScalar(x)
}

// FWHTAxpy finishes a row decoded in a rotated domain: it applies FWHT to v
// (len(v) a power of two >= 8; v is overwritten), sets out = v[:d]·signs + z
// with d = len(out), then adds w[c]·rows[c*d:(c+1)*d] for each c in order.
// The result is exactly that of FWHT, MulAdd and AxpyBlock in turn; fused,
// a row of 64 stays in registers from the first stage to the last axpy. z
// may be out. It panics if the lengths do not match.
func FWHTAxpy(out, v, signs, z, w, rows []float32) {
	d, n := len(out), len(v)
	if n < 8 || n&(n-1) != 0 || d > n || len(signs) < d || len(z) != d || len(rows) < len(w)*d {
		panic(fmt.Sprintf("cpu: FWHTAxpy: out %d, v %d, signs %d, z %d, w %d, rows %d elements", d, n, len(signs), len(z), len(w), len(rows)))
	}
	fwhtAxpy(out, v, signs[:d], z, w, rows[:len(w)*d])
}

// FWHTAxpyRows is FWHTAxpy on n rows: row i of out (d values at i*d) from
// row i of v (p values at i*p) and w[i*r:(i+1)*r], with the same signs, z
// and rows for all. It panics if the lengths do not match.
func FWHTAxpyRows(out, v, signs, z, w, rows []float32, n, d, p, r int) {
	if n < 0 || r < 0 || p < 8 || p&(p-1) != 0 || d > p || len(out) < n*d || len(v) < n*p ||
		len(signs) < d || len(z) != d || len(w) < n*r || len(rows) < r*d {
		panic(fmt.Sprintf("cpu: FWHTAxpyRows: n=%d d=%d p=%d r=%d with out %d, v %d, signs %d, z %d, w %d, rows %d elements", n, d, p, r, len(out), len(v), len(signs), len(z), len(w), len(rows)))
	}
	fwhtAxpyRows(out, v, signs[:d], z, w, rows[:r*d], n, d, p, r, nil, nil)
}

// FWHTAxpyRoPERows is FWHTAxpyRows followed by RoPEBlock on out in place
// (row i rotated by cos and sin [i*d/2, (i+1)*d/2)), bit for bit, in one
// pass: attention's keys are cached before RoPE and rotated as a block is
// decoded. It panics if d is odd or the lengths do not match.
func FWHTAxpyRoPERows(out, v, signs, z, w, rows []float32, n, d, p, r int, cos, sin []float32) {
	h := d / 2
	if n < 0 || r < 0 || p < 8 || p&(p-1) != 0 || d > p || d%2 != 0 || len(out) < n*d || len(v) < n*p ||
		len(signs) < d || len(z) != d || len(w) < n*r || len(rows) < r*d || len(cos) < n*h || len(sin) < n*h {
		panic(fmt.Sprintf("cpu: FWHTAxpyRoPERows: n=%d d=%d p=%d r=%d with out %d, v %d, signs %d, z %d, w %d, rows %d, cos %d, sin %d elements", n, d, p, r, len(out), len(v), len(signs), len(z), len(w), len(rows), len(cos), len(sin)))
	}
	fwhtAxpyRows(out, v, signs[:d], z, w, rows[:r*d], n, d, p, r, cos, sin)
}

// fwhtAxpyRowsParts is FWHTAxpyRows, then RoPE when cos is not nil, one
// row at a time through the separate kernels.
func fwhtAxpyRowsParts(out, v, signs, z, w, rows []float32, n, d, p, r int, cos, sin []float32) {
	h := d / 2
	for i := range n {
		o := out[i*d : (i+1)*d]
		fwhtAxpyParts(o, v[i*p:(i+1)*p], signs, z, w[i*r:(i+1)*r], rows)
		if cos != nil {
			ropeCopy(o, o, cos[i*h:(i+1)*h], sin[i*h:(i+1)*h])
		}
	}
}

func fwhtAxpyParts(out, v, signs, z, w, rows []float32) {
	fwht(v)
	mulAdd(out, v[:len(out)], signs, z)
	axpyBlock(out, w, rows)
}

// UnpackLookupRows decodes len(scales) rows of cols codes of width bits
// (1..4) from src, laid out as UnpackLookup's stream with each row starting
// on a byte (cols*bits a multiple of 8): element j of row i, at
// dst[i*stride+j], is table[c]·scales[i] for the row's j-th code c. That is
// UnpackLookup with the table scaled per row, for a whole block in one call.
// It panics if the lengths do not match.
func UnpackLookupRows(dst []float32, stride, cols int, src []byte, bits int, table *[16]float32, scales []float32) {
	n := len(scales)
	if bits < 1 || bits > 4 || cols < 0 || cols*bits%8 != 0 || stride < cols ||
		n > 0 && (len(dst) < (n-1)*stride+cols || len(src) < n*cols*bits/8) {
		panic(fmt.Sprintf("cpu: UnpackLookupRows: %d rows of %d codes of %d bits (stride %d) into %d values from %d bytes", n, cols, bits, stride, len(dst), len(src)))
	}
	unpackLookupRows(dst, stride, cols, src, bits, table, scales)
}

func unpackLookupRowsScalar(dst []float32, stride, cols int, src []byte, bits int, table *[16]float32, scales []float32) {
	rowBytes := cols * bits / 8
	for i, s := range scales {
		var t [16]float32
		for c, l := range table {
			t[c] = l * s
		}
		unpackLookupScalar(dst[i*stride:i*stride+cols], src[i*rowBytes:(i+1)*rowBytes], bits, &t)
	}
}

// UnpackAffine decodes len(params)/2 groups of g codes of width bits (1..4)
// from src, laid out as UnpackLookup's stream with g*bits a multiple of 8:
// group k's values, dst[k*g:(k+1)*g], are m + float32(c)*s for its codes c,
// with (m, s) = (params[2k], params[2k+1]) — a multiply, then an add, each
// rounded, as the scalar expression is. It panics if the lengths do not
// match.
func UnpackAffine(dst []float32, src []byte, bits, g int, params []float32) {
	groups := len(params) / 2
	if bits < 1 || bits > 4 || g <= 0 || g*bits%8 != 0 || len(params)%2 != 0 ||
		len(dst) < groups*g || len(src) < groups*g*bits/8 {
		panic(fmt.Sprintf("cpu: UnpackAffine: %d groups of %d codes of %d bits into %d values from %d bytes", groups, g, bits, len(dst), len(src)))
	}
	if bits == 4 && g%16 == 0 && unpackAffine4(dst, src, g, params) {
		return
	}
	var t [16]float32
	gb := g * bits / 8
	for k := range groups {
		affineTable(&t, params[2*k], params[2*k+1])
		unpackLookup(dst[k*g:(k+1)*g], src[k*gb:(k+1)*gb], bits, &t)
	}
}

func affineTableScalar(t *[16]float32, m, s float32) {
	for q := range t {
		t[q] = m + float32(q)*s
	}
}

// QuantError returns the squared error of coding the values g on the
// levels m + q*s, q an integer in [0, top], each term weighted by the
// value's square: the sum of v^2 * (v - (m + q*s))^2 with q = (v-m)/s
// rounded to the nearest integer (ties to even) and clamped, or q = 0
// when s is 0. Once a partial sum reaches best it may stop there and
// return it (a value >= best), so a search that keeps the smallest result
// loses nothing. Every implementation sums in one order (value i in lane
// i%8, then the lanes pairwise), so results are bit-identical across
// builds. top must be below 2^22 and the values finite.
func QuantError(g []float32, m, s, top, best float32) float32 {
	var inv float32
	if s > 0 {
		inv = 1 / s
	}
	return quantError(g, m, s, inv, top, best)
}

// quantTerm is one value's term of QuantError.
func quantTerm(v, m, s, inv, top float32) float32 {
	x := (v - m) * inv
	if x < 0 {
		x = 0
	}
	if x > top {
		x = top
	}
	// x + 1.5*2^23 rounds x (in [0, 2^22)) to an integer, ties to even,
	// without an int conversion. The conversions keep the compiler from
	// fusing the multiply and add, as the SIMD kernel does not.
	q := float32(x+0x1.8p23) - 0x1.8p23
	d := v - (m + float32(q*s))
	return v * v * d * d
}

// laneSum adds QuantError's eight lanes in its fixed order.
func laneSum(l *[8]float32) float32 {
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

func quantErrorScalar(g []float32, m, s, inv, top, best float32) float32 {
	var l [8]float32
	i := 0
	for ; i+8 <= len(g); i += 8 {
		for k := range l {
			l[k] += quantTerm(g[i+k], m, s, inv, top)
		}
		if i&24 == 8 && laneSum(&l) >= best {
			return laneSum(&l)
		}
	}
	for ; i < len(g); i++ {
		l[i&7] += quantTerm(g[i], m, s, inv, top)
	}
	return laneSum(&l)
}

// DequantInt8 sets dst[k*g+j] = float32(int8(src[k*g+j])) * scales[k] for
// the len(scales) groups of g signed bytes in src. It panics if the lengths
// do not match.
func DequantInt8(dst []float32, src []byte, g int, scales []float32) {
	n := len(scales) * g
	if g <= 0 || len(dst) < n || len(src) < n {
		panic(fmt.Sprintf("cpu: DequantInt8: %d groups of %d into %d values from %d bytes", len(scales), g, len(dst), len(src)))
	}
	dequantInt8(dst[:n], src[:n], g, scales)
}

func dequantInt8Scalar(dst []float32, src []byte, g int, scales []float32) {
	for k, s := range scales {
		out, in := dst[k*g:(k+1)*g], src[k*g:(k+1)*g]
		for j, c := range in {
			out[j] = float32(int8(c)) * s
		}
	}
}
