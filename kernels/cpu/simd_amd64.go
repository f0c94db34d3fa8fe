//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"simd/archsimd"

	"github.com/kakeya-ai/kakeya/tensor"
)

// hasAVX2 selects the 256-bit Go loops. Matrix products of bf16 and f16
// weights go through the C kernels instead where the CPU runs them
// (hasAVX2C, hasAVX512).
var (
	cpuAVX2 = archsimd.X86.AVX2() && archsimd.X86.FMA()
	hasAVX2 = cpuAVX2 && isaCap >= levelAVX2
)

var avx2Kernels = kernelSet{
	name:   "avx2",
	gemv:   gemvAVX2,
	cvt:    cvtAVX2,
	dot4x2: dot4x2AVX2,
	dot4x1: dot4x1AVX2,
	dot1:   dot1AVX2,
}

// loops returns the Go loops this CPU runs and their description.
func loops() (*kernelSet, string) {
	if hasAVX2 {
		return &avx2Kernels, "avx2+fma (GOEXPERIMENT=simd)"
	}
	if isaCap < levelAVX2 {
		return &scalarKernels, "scalar"
	}
	return &scalarKernels, "scalar (the CPU lacks AVX2/FMA)"
}

type f32x8 = archsimd.Float32x8

func load8(s []float32) f32x8 { return archsimd.LoadFloat32x8((*[8]float32)(s)) }

func store8(v f32x8, s []float32) { v.Store((*[8]float32)(s)) }

// zero8 returns zeros by the VEX-encoded vpxor a zero value compiles
// to; BroadcastFloat32x8(0) starts from a legacy-SSE xorps, whose
// transition from the AVX state stalls.
func zero8() (z f32x8) { return }

// clearUpper ends a run of 256-bit code (VZEROUPPER) before scalar Go
// code runs: Go compiles float32 and float64 arithmetic, moves and
// zeroing to legacy-SSE instructions, and each of them after AVX code
// that left the upper halves dirty stalls on this project's Xeon (the
// transition penalty). Every AVX path calls it after its last vector
// instruction, before a scalar tail and before it returns. The compiler
// knows it clobbers every vector register and keeps none live across it.
func clearUpper() { archsimd.ClearAVXUpperBits() }

// bf16x8 widens 8 bfloat16s: their bits are the high half of an f32.
func bf16x8(s []uint16) f32x8 {
	return archsimd.LoadUint16x8((*[8]uint16)(s)).ExtendToUint32().ShiftAllLeft(16).AsFloat32x8()
}

// f16x8 widens 8 IEEE halves without F16C: the exponent and mantissa bits
// shifted into f32 position and scaled by 2^112 give the value of normal and
// subnormal halves alike; exponent 31 (Inf/NaN) is then forced to 255.
func f16x8(s []uint16) f32x8 {
	u := archsimd.LoadUint16x8((*[8]uint16)(s)).ExtendToUint32()
	em := u.And(archsimd.BroadcastUint32x8(0x7fff)).ShiftAllLeft(13)
	f := em.AsFloat32x8().Mul(archsimd.BroadcastFloat32x8(0x1p112)).AsUint32x8()
	special := em.AsInt32x8().Greater(archsimd.BroadcastInt32x8(0x0f7fffff))
	f = f.Or(archsimd.BroadcastUint32x8(0x7f800000).Masked(special))
	return f.Or(u.And(archsimd.BroadcastUint32x8(0x8000)).ShiftAllLeft(16)).AsFloat32x8()
}

// hsum4 returns [Σa, Σb, Σc, Σd].
func hsum4(a, b, c, d f32x8) archsimd.Float32x4 {
	t := a.AddPairsGrouped(b).AddPairsGrouped(c.AddPairsGrouped(d))
	return t.GetLo().Add(t.GetHi())
}

// hsum returns Σa: a ends its run of 256-bit code (clearUpper).
func hsum(a f32x8) float32 {
	var t [8]float32
	a.Store(&t)
	clearUpper()
	return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]))
}

func cvtRow(dst []float32, w *tensor.Mat, off int) {
	if hasAVX2 {
		cvtAVX2(dst, w, off)
		return
	}
	cvtScalar(dst, w, off)
}

func cvtAVX2(dst []float32, w *tensor.Mat, off int) {
	n := len(dst)
	switch w.DType {
	case tensor.F32:
		copy(dst, w.F32[off:off+n])
		return
	case tensor.BF16:
		src := w.U16[off : off+n]
		i := 0
		for ; i+8 <= n; i += 8 {
			store8(bf16x8(src[i:i+8]), dst[i:i+8])
		}
		clearUpper()
		for ; i < n; i++ {
			dst[i] = tensor.BF16ToF32(src[i])
		}
	case tensor.F16:
		src := w.U16[off : off+n]
		i := 0
		for ; i+8 <= n; i += 8 {
			store8(f16x8(src[i:i+8]), dst[i:i+8])
		}
		clearUpper()
		for ; i < n; i++ {
			dst[i] = tensor.F16ToF32(src[i])
		}
	}
}

// gemvAVX2 is gemmTile's arithmetic for one token (see kernelSet.dot1):
// four rows at a time, one FMA chain each, over each tileK-column tile,
// widening the weights in registers instead of through a scratch tile.
func gemvAVX2(out, x []float32, w *tensor.Mat, lo, hi int, _ []float32) {
	cols := w.Cols
	x = x[:cols]
	r := lo
	for ; r+4 <= hi; r += 4 {
		var sum, d [4]float32
		for k0 := 0; k0 < cols; k0 += tileK {
			kc := min(tileK, cols-k0)
			gemv4(&d, w, r, k0, x[k0:k0+kc])
			if k0 == 0 {
				sum = d
				continue
			}
			for j := range sum {
				sum[j] += d[j]
			}
		}
		copy(out[r:r+4], sum[:])
	}
	for ; r < hi; r++ {
		var sum float32
		for k0 := 0; k0 < cols; k0 += tileK {
			kc := min(tileK, cols-k0)
			accum1(&sum, gemv1(w, r, k0, x[k0:k0+kc]), k0 == 0)
		}
		out[r] = sum
	}
}

// gemv4 sets d[j] to the dot product of x with columns [k0, k0+len(x)) of
// row r+j, as dot4x1AVX2 computes it on the converted rows.
func gemv4(d *[4]float32, w *tensor.Mat, r, k0 int, x []float32) {
	k, cols := len(x), w.Cols
	o := r*cols + k0
	switch w.DType {
	case tensor.BF16:
		gemv4BF16(d, w.U16[o:], cols, x)
	case tensor.F16:
		gemv4F16(d, w.U16[o:], cols, x)
	default:
		dot4x1AVX2(w.F32[o:], cols, x, d)
		return
	}
	for c := k &^ 7; c < k; c++ {
		u := x[c]
		d[0] += float32(widen(w, o+c) * u)
		d[1] += float32(widen(w, o+cols+c) * u)
		d[2] += float32(widen(w, o+2*cols+c) * u)
		d[3] += float32(widen(w, o+3*cols+c) * u)
	}
}

// gemv1 is gemv4 for the one row r.
func gemv1(w *tensor.Mat, r, k0 int, x []float32) float32 {
	k := len(x)
	o := r*w.Cols + k0
	a, z := zero8(), zero8()
	switch w.DType {
	case tensor.BF16:
		row := w.U16[o : o+k]
		for c := 0; c <= k-8; c += 8 {
			a = bf16x8(row[c:c+8]).MulAdd(load8(x[c:c+8]), a)
		}
	case tensor.F16:
		row := w.U16[o : o+k]
		for c := 0; c <= k-8; c += 8 {
			a = f16x8(row[c:c+8]).MulAdd(load8(x[c:c+8]), a)
		}
	default:
		return dot1AVX2(w.F32[o:o+k], x)
	}
	var d [4]float32
	hsum4(a, z, z, z).Store(&d)
	clearUpper()
	for c := k &^ 7; c < k; c++ {
		d[0] += float32(widen(w, o+c) * x[c])
	}
	return d[0]
}

// widen returns the weight at offset off of w's 16-bit storage as f32.
func widen(w *tensor.Mat, off int) float32 {
	if w.DType == tensor.BF16 {
		return tensor.BF16ToF32(w.U16[off])
	}
	return tensor.F16ToF32(w.U16[off])
}

// gemv4BF16 sets d to the lane sums of four bf16 rows (stride ws) with x,
// reduced by hsum4, over the len(x) &^ 7 columns that fill vectors.
func gemv4BF16(d *[4]float32, w []uint16, ws int, x []float32) {
	k := len(x)
	x = x[:k:k]
	w0, w1, w2, w3 := w[:k:k], w[ws:][:k:k], w[2*ws:][:k:k], w[3*ws:][:k:k]
	a0, a1, a2, a3 := zero8(), zero8(), zero8(), zero8()
	for c := 0; c <= k-8; c += 8 {
		u := load8(x[c : c+8])
		a0 = bf16x8(w0[c:c+8]).MulAdd(u, a0)
		a1 = bf16x8(w1[c:c+8]).MulAdd(u, a1)
		a2 = bf16x8(w2[c:c+8]).MulAdd(u, a2)
		a3 = bf16x8(w3[c:c+8]).MulAdd(u, a3)
	}
	hsum4(a0, a1, a2, a3).Store(d)
	clearUpper()
}

// gemv4F16 is gemv4BF16 for IEEE halves.
func gemv4F16(d *[4]float32, w []uint16, ws int, x []float32) {
	k := len(x)
	x = x[:k:k]
	w0, w1, w2, w3 := w[:k:k], w[ws:][:k:k], w[2*ws:][:k:k], w[3*ws:][:k:k]
	a0, a1, a2, a3 := zero8(), zero8(), zero8(), zero8()
	for c := 0; c <= k-8; c += 8 {
		u := load8(x[c : c+8])
		a0 = f16x8(w0[c:c+8]).MulAdd(u, a0)
		a1 = f16x8(w1[c:c+8]).MulAdd(u, a1)
		a2 = f16x8(w2[c:c+8]).MulAdd(u, a2)
		a3 = f16x8(w3[c:c+8]).MulAdd(u, a3)
	}
	hsum4(a0, a1, a2, a3).Store(d)
	clearUpper()
}

// dot4x2AVX2 is the GEMM micro-kernel: 4 weight rows by 2 tokens in eight
// accumulators, enough independent FMA chains to cover the FMA latency.
func dot4x2AVX2(w []float32, ws int, x0, x1 []float32, d *[8]float32) {
	k := len(x0)
	// Three-index slices pin each length and capacity to k, so the loop
	// below runs without bounds checks.
	x0, x1 = x0[:k:k], x1[:k:k]
	w0, w1, w2, w3 := w[:k:k], w[ws:][:k:k], w[2*ws:][:k:k], w[3*ws:][:k:k]
	a00, a10, a20, a30 := zero8(), zero8(), zero8(), zero8()
	a01, a11, a21, a31 := zero8(), zero8(), zero8(), zero8()
	c := 0
	for ; c <= k-8; c += 8 {
		u, v := load8(x0[c:c+8]), load8(x1[c:c+8])
		r := load8(w0[c : c+8])
		a00 = r.MulAdd(u, a00)
		a01 = r.MulAdd(v, a01)
		r = load8(w1[c : c+8])
		a10 = r.MulAdd(u, a10)
		a11 = r.MulAdd(v, a11)
		r = load8(w2[c : c+8])
		a20 = r.MulAdd(u, a20)
		a21 = r.MulAdd(v, a21)
		r = load8(w3[c : c+8])
		a30 = r.MulAdd(u, a30)
		a31 = r.MulAdd(v, a31)
	}
	hsum4(a00, a10, a20, a30).Store((*[4]float32)(d[:4]))
	hsum4(a01, a11, a21, a31).Store((*[4]float32)(d[4:]))
	clearUpper()
	for ; c < k; c++ {
		u, v := x0[c], x1[c]
		d[0] += float32(w0[c] * u)
		d[1] += float32(w1[c] * u)
		d[2] += float32(w2[c] * u)
		d[3] += float32(w3[c] * u)
		d[4] += float32(w0[c] * v)
		d[5] += float32(w1[c] * v)
		d[6] += float32(w2[c] * v)
		d[7] += float32(w3[c] * v)
	}
}

func dot4x1AVX2(w []float32, ws int, x []float32, d *[4]float32) {
	k := len(x)
	x = x[:k:k]
	w0, w1, w2, w3 := w[:k:k], w[ws:][:k:k], w[2*ws:][:k:k], w[3*ws:][:k:k]
	a0, a1, a2, a3 := zero8(), zero8(), zero8(), zero8()
	c := 0
	for ; c <= k-8; c += 8 {
		u := load8(x[c : c+8])
		a0 = load8(w0[c:c+8]).MulAdd(u, a0)
		a1 = load8(w1[c:c+8]).MulAdd(u, a1)
		a2 = load8(w2[c:c+8]).MulAdd(u, a2)
		a3 = load8(w3[c:c+8]).MulAdd(u, a3)
	}
	hsum4(a0, a1, a2, a3).Store(d)
	clearUpper()
	for ; c < k; c++ {
		d[0] += float32(w0[c] * x[c])
		d[1] += float32(w1[c] * x[c])
		d[2] += float32(w2[c] * x[c])
		d[3] += float32(w3[c] * x[c])
	}
}

// dot1AVX2 is dot4x1AVX2 for one row: the same chain and reduction tree
// (a lane of hsum4 depends only on its own vector).
func dot1AVX2(w, x []float32) float32 {
	k := len(w)
	x = x[:k:k]
	a, z := zero8(), zero8()
	c := 0
	for ; c <= k-8; c += 8 {
		a = load8(w[c:c+8]).MulAdd(load8(x[c:c+8]), a)
	}
	var d [4]float32
	hsum4(a, z, z, z).Store(&d)
	clearUpper()
	for ; c < k; c++ {
		d[0] += float32(w[c] * x[c])
	}
	return d[0]
}

func dot(a, b []float32) float32 {
	if hasAVX2 {
		return dotAVX2(a, b)
	}
	return dotScalar(a, b)
}

func dotAVX2(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	s0, s1, s2, s3 := zero8(), zero8(), zero8(), zero8()
	i := 0
	for ; i+32 <= n; i += 32 {
		s0 = load8(a[i:i+8]).MulAdd(load8(b[i:i+8]), s0)
		s1 = load8(a[i+8:i+16]).MulAdd(load8(b[i+8:i+16]), s1)
		s2 = load8(a[i+16:i+24]).MulAdd(load8(b[i+16:i+24]), s2)
		s3 = load8(a[i+24:i+32]).MulAdd(load8(b[i+24:i+32]), s3)
	}
	for ; i+8 <= n; i += 8 {
		s0 = load8(a[i:i+8]).MulAdd(load8(b[i:i+8]), s0)
	}
	s := hsum(s0.Add(s1).Add(s2.Add(s3)))
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

func axpy(alpha float32, x, y []float32) {
	if !hasAVX2 {
		axpyScalar(alpha, x, y)
		return
	}
	n := len(x)
	y = y[:n]
	av := archsimd.BroadcastFloat32x8(alpha)
	i := 0
	for ; i+8 <= n; i += 8 {
		store8(av.MulAdd(load8(x[i:i+8]), load8(y[i:i+8])), y[i:i+8])
	}
	clearUpper()
	axpyScalar(alpha, x[i:], y[i:])
}

func add(dst, x []float32) {
	if !hasAVX2 {
		addScalar(dst, x)
		return
	}
	n := len(dst)
	x = x[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		store8(load8(dst[i:i+8]).Add(load8(x[i:i+8])), dst[i:i+8])
	}
	clearUpper()
	addScalar(dst[i:], x[i:])
}

func scale(x []float32, s float32) {
	if !hasAVX2 {
		scaleScalar(x, s)
		return
	}
	sv := archsimd.BroadcastFloat32x8(s)
	i := 0
	for ; i+8 <= len(x); i += 8 {
		store8(load8(x[i:i+8]).Mul(sv), x[i:i+8])
	}
	clearUpper()
	scaleScalar(x[i:], s)
}

// butterfly sets lo, hi = lo+hi, lo-hi element-wise: one stage of a fast
// Walsh–Hadamard transform (len(hi) >= len(lo)).
func butterfly(lo, hi []float32) {
	if !hasAVX2 {
		butterflyScalar(lo, hi)
		return
	}
	n := len(lo)
	hi = hi[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		a, b := load8(lo[i:i+8]), load8(hi[i:i+8])
		store8(a.Add(b), lo[i:i+8])
		store8(a.Sub(b), hi[i:i+8])
	}
	clearUpper()
	butterflyScalar(lo[i:], hi[i:])
}

// hadamardStages keeps vectors of up to 128 values in registers for all
// their stages: one load and one store per element instead of one per stage.
func hadamardStages(x []float32) {
	n := len(x)
	if !hasAVX2 || n > 128 {
		hadamardStagesScalar(x)
		return
	}
	var r [16]f32x8
	nv := n / 8
	for i := 0; i < nv; i++ {
		r[i] = load8(x[8*i : 8*i+8])
	}
	for h := 1; h < nv; h <<= 1 {
		for i := 0; i < nv; i += h << 1 {
			for j := i; j < i+h; j++ {
				a, b := r[j], r[j+h]
				r[j], r[j+h] = a.Add(b), a.Sub(b)
			}
		}
	}
	for i := 0; i < nv; i++ {
		store8(r[i], x[8*i:8*i+8])
	}
	clearUpper()
}

// lookup widens eight codes at a time to 32-bit indices and picks their
// levels with two register permutes (low and high half of the table).
func lookup(dst []float32, codes []uint8, t *[16]float32) {
	if !hasAVX2 {
		lookupScalar(dst, codes, t)
		return
	}
	n := len(dst)
	lo := archsimd.LoadFloat32x8((*[8]float32)(t[0:8]))
	hi := archsimd.LoadFloat32x8((*[8]float32)(t[8:16]))
	eight := archsimd.BroadcastUint32x8(8)
	i := 0
	// Sixteen bytes are loaded for eight codes: stop where they run out.
	for ; i+8 <= n && i+16 <= len(codes); i += 8 {
		idx := archsimd.LoadUint8x16((*[16]uint8)(codes[i : i+16])).ExtendLo8ToUint32()
		upper := idx.And(eight).Equal(eight)
		store8(hi.Permute(idx).Merge(lo.Permute(idx), upper), dst[i:i+8])
	}
	clearUpper()
	lookupScalar(dst[i:], codes[i:], t)
}

func mulAdd(dst, x, y, z []float32) {
	if !hasAVX2 {
		mulAddScalar(dst, x, y, z)
		return
	}
	n := len(dst)
	x, y, z = x[:n], y[:n], z[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		store8(load8(x[i:i+8]).MulAdd(load8(y[i:i+8]), load8(z[i:i+8])), dst[i:i+8])
	}
	clearUpper()
	mulAddScalar(dst[i:], x[i:], y[i:], z[i:])
}

func sumSquares(x []float32) float32 { return dot(x, x) }

func mulScaled(out, x, w []float32, s float32) {
	if !hasAVX2 {
		mulScaledScalar(out, x, w, s)
		return
	}
	n := len(out)
	x, w = x[:n], w[:n]
	sv := archsimd.BroadcastFloat32x8(s)
	i := 0
	for ; i+8 <= n; i += 8 {
		store8(load8(x[i:i+8]).Mul(sv).Mul(load8(w[i:i+8])), out[i:i+8])
	}
	clearUpper()
	mulScaledScalar(out[i:], x[i:], w[i:], s)
}

// exp8 is e^x in the Cephes expf scheme: x = n·ln2 + r with |r| <= ln2/2,
// e^r from a degree-7 polynomial, 2^n put into the exponent bits. It is
// within a few ulp of e^x; results below the smallest normal (and NaN inputs)
// give 0, and x above ln(MaxFloat32) saturates near MaxFloat32 instead of
// +Inf, which neither SiLU nor a max-subtracted softmax can tell apart.
func exp8(x f32x8) f32x8 {
	const (
		hi   = 88.3762626647949
		lo   = -87.3365447505531
		ln2h = 0.693359375
		ln2l = -2.12194440e-4
	)
	keep := x.GreaterEqual(archsimd.BroadcastFloat32x8(lo))
	x = x.Max(archsimd.BroadcastFloat32x8(lo)).Min(archsimd.BroadcastFloat32x8(hi))
	n := x.Mul(archsimd.BroadcastFloat32x8(1.44269504088896341)).RoundToEven()
	r := n.MulAdd(archsimd.BroadcastFloat32x8(-ln2h), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x8(-ln2l), r)
	p := archsimd.BroadcastFloat32x8(1.9875691500e-4)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.3981999507e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(8.3334519073e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(4.1665795894e-2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.6666665459e-1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(5.0000001201e-1))
	p = p.MulAdd(r.Mul(r), r).Add(archsimd.BroadcastFloat32x8(1))
	// n+127 stays in [1, 254] after the clamp; n = 128 cannot occur.
	e := n.ConvertToInt32().Add(archsimd.BroadcastInt32x8(127)).ShiftAllLeft(23).AsFloat32x8()
	return p.Mul(e).Masked(keep)
}

func siluMul(gate, up []float32) {
	if !hasAVX2 {
		siluMulScalar(gate, up)
		return
	}
	n := len(gate)
	up = up[:n]
	one := archsimd.BroadcastFloat32x8(1)
	neg := archsimd.BroadcastFloat32x8(-1)
	i := 0
	for ; i+8 <= n; i += 8 {
		g := load8(gate[i : i+8])
		e := exp8(g.Mul(neg))
		store8(g.Div(e.Add(one)).Mul(load8(up[i:i+8])), gate[i:i+8])
	}
	if i < n {
		clearUpper() // before copy's legacy-SSE moves
		// The last 1..7 values through exp8 too, padded with zeros: a
		// value's result must not depend on where it falls in gate, which
		// holds several tokens' rows back to back at prefill.
		var g8, u8 [8]float32
		copy(g8[:], gate[i:])
		copy(u8[:], up[i:])
		g := load8(g8[:])
		e := exp8(g.Mul(neg))
		store8(g.Div(e.Add(one)).Mul(load8(u8[:])), g8[:])
		copy(gate[i:], g8[:])
	}
	clearUpper()
}

// geluTanhMul is GELUTanhMul's AVX2 loop: g/(1 + e^(-2u)) with u =
// √(2/π)·(g + 0.044715·g³) in float32 through exp8, within a few float32
// ulps of the float64 loop (TestGELUTanhMul).
func geluTanhMul(gate, up []float32) {
	if !hasAVX2 {
		geluTanhMulScalar(gate, up)
		return
	}
	n := len(gate)
	up = up[:n]
	one := archsimd.BroadcastFloat32x8(1)
	m2c := archsimd.BroadcastFloat32x8(float32(-2 * sqrt2OverPi))
	cube := archsimd.BroadcastFloat32x8(0.044715)
	// f computes 8 values: -2u = -2√(2/π)·g·(1 + 0.044715·g²).
	f := func(g, u f32x8) f32x8 {
		a := g.Mul(g).MulAdd(cube, one).Mul(g).Mul(m2c)
		return g.Div(exp8(a).Add(one)).Mul(u)
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		store8(f(load8(gate[i:i+8]), load8(up[i:i+8])), gate[i:i+8])
	}
	if i < n {
		clearUpper() // before copy's legacy-SSE moves
		// The last 1..7 values through the same arithmetic, padded with
		// zeros (see siluMul).
		var g8, u8 [8]float32
		copy(g8[:], gate[i:])
		copy(u8[:], up[i:])
		store8(f(load8(g8[:]), load8(u8[:])), g8[:])
		copy(gate[i:], g8[:])
	}
	clearUpper()
}

func softmax(x []float32) {
	if !hasAVX2 {
		softmaxScalar(x)
		return
	}
	n := len(x)
	i := 0
	m := float32(math.Inf(-1))
	if n >= 8 {
		mv := load8(x[0:8])
		for i = 8; i+8 <= n; i += 8 {
			mv = mv.Max(load8(x[i : i+8]))
		}
		var t [8]float32
		mv.Store(&t)
		clearUpper()
		for _, v := range t {
			m = max(m, v)
		}
	}
	for ; i < n; i++ {
		m = max(m, x[i])
	}
	mv := archsimd.BroadcastFloat32x8(m)
	sv := zero8()
	i = 0
	for ; i+8 <= n; i += 8 {
		e := exp8(load8(x[i : i+8]).Sub(mv))
		store8(e, x[i:i+8])
		sv = sv.Add(e)
	}
	if i < n {
		clearUpper() // before copy's legacy-SSE moves
		// The last 1..7 values through exp8 too, padded with -Inf (whose
		// exponentials are 0).
		t := [8]float32{}
		for j := range t {
			t[j] = float32(math.Inf(-1))
		}
		copy(t[:], x[i:])
		e := exp8(load8(t[:]).Sub(mv))
		store8(e, t[:])
		copy(x[i:], t[:])
		sv = sv.Add(e)
	}
	scale(x, 1/hsum(sv))
}

func rope(x, cos, sin []float32) {
	if !hasAVX2 {
		ropeScalar(x, cos, sin)
		return
	}
	h := len(cos)
	x1, x2, sin := x[:h], x[h:2*h], sin[:h]
	i := 0
	for ; i+8 <= h; i += 8 {
		a, b := load8(x1[i:i+8]), load8(x2[i:i+8])
		c, s := load8(cos[i:i+8]), load8(sin[i:i+8])
		store8(a.Mul(c).Sub(b.Mul(s)), x1[i:i+8])
		store8(b.Mul(c).Add(a.Mul(s)), x2[i:i+8])
	}
	clearUpper()
	for ; i < h; i++ {
		a, b := x1[i], x2[i]
		x1[i] = a*cos[i] - b*sin[i]
		x2[i] = b*cos[i] + a*sin[i]
	}
}
