//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"simd/archsimd"

	"github.com/kakeya-ai/kakeya/compute"
)

// hasAVX2 selects the 256-bit kernels. Where the CPU has AVX-512, bf16
// weights go through avx512_amd64.c's kernels instead: a GEMM with a 12x32
// register tile needs all 32 zmm registers, and AVX512_BF16's VDPBF16PS
// does two products per f32 lane.
var hasAVX2 = archsimd.X86.AVX2() && archsimd.X86.FMA()

var avx2Kernels = kernelSet{
	name:   "avx2",
	gemv:   gemvAVX2,
	cvt:    cvtAVX2,
	dot4x2: dot4x2AVX2,
	dot4x1: dot4x1AVX2,
	dot:    dotAVX2,
}

// Features describes the kernels this build runs, for a tool to print:
// "avx2+fma (GOEXPERIMENT=simd)", with the AVX-512 kernels for bf16 weights
// named where the CPU runs them, or the scalar loops when it lacks AVX2 or
// FMA.
func Features() string {
	switch {
	case hasAVX2 && hasBF16Dot:
		return "avx2+fma, avx512+avx512_bf16 for bf16 weights (GOEXPERIMENT=simd, cgo)"
	case hasAVX2 && hasAVX512:
		return "avx2+fma, avx512 for bf16 weights (GOEXPERIMENT=simd, cgo)"
	}
	if hasAVX2 {
		return "avx2+fma (GOEXPERIMENT=simd)"
	}
	return "scalar (the CPU lacks AVX2/FMA)"
}

// avx512Kernels are the AVX2 loops with bf16 weights on avx512_amd64.c's
// kernels, and avx512bf16Kernels those with VDPBF16PS as well.
var avx512Kernels, avx512bf16Kernels = func() (kernelSet, kernelSet) {
	k := avx2Kernels
	k.name, k.avx512 = "avx512", true
	b := k
	b.name, b.dotBF16 = "avx512bf16", true
	return k, b
}()

func bestKernels() *kernelSet {
	switch {
	case hasAVX2 && hasBF16Dot:
		return &avx512bf16Kernels
	case hasAVX2 && hasAVX512:
		return &avx512Kernels
	case hasAVX2:
		return &avx2Kernels
	}
	return &scalarKernels
}

type f32x8 = archsimd.Float32x8

func load8(s []float32) f32x8 { return archsimd.LoadFloat32x8((*[8]float32)(s)) }

func store8(v f32x8, s []float32) { v.Store((*[8]float32)(s)) }

func zero8() f32x8 { return archsimd.BroadcastFloat32x8(0) }

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

func hsum(a f32x8) float32 {
	var t [8]float32
	a.Store(&t)
	return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]))
}

func cvtRow(dst []float32, w *compute.Mat, off int) {
	if hasAVX2 {
		cvtAVX2(dst, w, off)
		return
	}
	cvtScalar(dst, w, off)
}

func cvtAVX2(dst []float32, w *compute.Mat, off int) {
	n := len(dst)
	switch w.DType {
	case compute.F32:
		copy(dst, w.F32[off:off+n])
		return
	case compute.BF16:
		src := w.U16[off : off+n]
		i := 0
		for ; i+8 <= n; i += 8 {
			store8(bf16x8(src[i:i+8]), dst[i:i+8])
		}
		for ; i < n; i++ {
			dst[i] = compute.BF16ToF32(src[i])
		}
	case compute.F16:
		src := w.U16[off : off+n]
		i := 0
		for ; i+8 <= n; i += 8 {
			store8(f16x8(src[i:i+8]), dst[i:i+8])
		}
		for ; i < n; i++ {
			dst[i] = compute.F16ToF32(src[i])
		}
	}
}

// gemvAVX2 streams the weight rows in memory order, one row at a time, so
// the whole block is one sequential stream for the hardware prefetcher
// (interleaving rows would make many short streams it keeps having to pick
// up anew). Four rows' lane sums are reduced together.
func gemvAVX2(out, x []float32, w *compute.Mat, lo, hi int, s []float32) {
	cols := w.Cols
	x = x[:cols]
	n16 := cols &^ 15
	xp := s[:n16]
	switch w.DType {
	case compute.BF16:
		deinterleave16(s[:cols], x)
	default:
		copy(xp, x)
	}
	r := lo
	for ; r+4 <= hi; r += 4 {
		var d [4]float32
		hsum4(gemvRow(w, r, xp), gemvRow(w, r+1, xp), gemvRow(w, r+2, xp), gemvRow(w, r+3, xp)).Store(&d)
		for j := range d {
			d[j] += gemvTail(w, r+j, x, n16)
		}
		copy(out[r:r+4], d[:])
	}
	for ; r < hi; r++ {
		out[r] = hsum(gemvRow(w, r, xp)) + gemvTail(w, r, x, n16)
	}
}

// deinterleave16 copies x into xp with each 16-element block reordered as
// its 8 even then its 8 odd elements, the order in which gemvRowBF16 widens a
// 32-byte load of weights. Elements past the last full block are not copied.
func deinterleave16(xp, x []float32) {
	for c := 0; c+16 <= len(x); c += 16 {
		b, o := (*[16]float32)(x[c:]), (*[16]float32)(xp[c:])
		for j := range 8 {
			o[j], o[8+j] = b[2*j], b[2*j+1]
		}
	}
}

// gemvRow returns the lane sums of row r's first len(xp) columns with xp.
func gemvRow(w *compute.Mat, r int, xp []float32) f32x8 {
	off := r * w.Cols
	switch w.DType {
	case compute.BF16:
		return gemvRowBF16(w.U16[off:off+len(xp)], xp)
	case compute.F16:
		return gemvRowF16(w.U16[off:off+len(xp)], xp)
	}
	return gemvRowF32(w.F32[off:off+len(xp)], xp)
}

// gemvTail returns row r's dot product with x over columns [c0, w.Cols).
func gemvTail(w *compute.Mat, r int, x []float32, c0 int) float32 {
	var s float32
	off := r * w.Cols
	for c := c0; c < w.Cols; c++ {
		switch w.DType {
		case compute.BF16:
			s += compute.BF16ToF32(w.U16[off+c]) * x[c]
		case compute.F16:
			s += compute.F16ToF32(w.U16[off+c]) * x[c]
		default:
			s += w.F32[off+c] * x[c]
		}
	}
	return s
}

// gemvRowBF16 returns lane sums of w·xp over len(xp) columns, a multiple of
// 16, with xp reordered by deinterleave16. It loads 16 bfloat16 weights as 8
// uint32 lanes: a lane's low half is an even column and its high half the
// next odd one, so one shift and one mask widen all 16 to f32.
func gemvRowBF16(w []uint16, xp []float32) f32x8 {
	w = w[:len(xp)]
	a0, a1, b0, b1 := zero8(), zero8(), zero8(), zero8()
	hi := archsimd.BroadcastUint32x8(0xffff0000)
	c := 0
	for ; c+32 <= len(xp); c += 32 {
		x := (*[32]float32)(xp[c:])
		u := archsimd.LoadUint16x16((*[16]uint16)(w[c : c+16])).AsUint32x8()
		v := archsimd.LoadUint16x16((*[16]uint16)(w[c+16 : c+32])).AsUint32x8()
		a0 = u.ShiftAllLeft(16).AsFloat32x8().MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[0:8])), a0)
		b0 = u.And(hi).AsFloat32x8().MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[8:16])), b0)
		a1 = v.ShiftAllLeft(16).AsFloat32x8().MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[16:24])), a1)
		b1 = v.And(hi).AsFloat32x8().MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[24:32])), b1)
	}
	if c < len(xp) {
		u := archsimd.LoadUint16x16((*[16]uint16)(w[c : c+16])).AsUint32x8()
		a0 = u.ShiftAllLeft(16).AsFloat32x8().MulAdd(load8(xp[c:c+8]), a0)
		b0 = u.And(hi).AsFloat32x8().MulAdd(load8(xp[c+8:c+16]), b0)
	}
	return a0.Add(b0).Add(a1.Add(b1))
}

// gemvRowF16 is gemvRowBF16 for IEEE halves, with xp in column order.
func gemvRowF16(w []uint16, xp []float32) f32x8 {
	w = w[:len(xp)]
	a0, a1 := zero8(), zero8()
	for c := 0; c < len(xp); c += 16 {
		x := (*[16]float32)(xp[c:])
		a0 = f16x8(w[c:c+8]).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[0:8])), a0)
		a1 = f16x8(w[c+8:c+16]).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[8:16])), a1)
	}
	return a0.Add(a1)
}

// gemvRowF32 is gemvRowBF16 for f32 weights, with xp in column order.
func gemvRowF32(w []float32, xp []float32) f32x8 {
	w = w[:len(xp)]
	a0, a1 := zero8(), zero8()
	for c := 0; c < len(xp); c += 16 {
		x, v := (*[16]float32)(xp[c:]), (*[16]float32)(w[c:])
		a0 = archsimd.LoadFloat32x8((*[8]float32)(v[0:8])).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[0:8])), a0)
		a1 = archsimd.LoadFloat32x8((*[8]float32)(v[8:16])).MulAdd(archsimd.LoadFloat32x8((*[8]float32)(x[8:16])), a1)
	}
	return a0.Add(a1)
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
	for ; c < k; c++ {
		u, v := x0[c], x1[c]
		d[0] += w0[c] * u
		d[1] += w1[c] * u
		d[2] += w2[c] * u
		d[3] += w3[c] * u
		d[4] += w0[c] * v
		d[5] += w1[c] * v
		d[6] += w2[c] * v
		d[7] += w3[c] * v
	}
}

func dot4x1AVX2(w []float32, ws int, x []float32, d *[4]float32) {
	k := len(x)
	x = x[:k:k]
	w0, w1, w2, w3 := w[:k:k], w[ws:][:k:k], w[2*ws:][:k:k], w[3*ws:][:k:k]
	a0, a1, a2, a3 := zero8(), zero8(), zero8(), zero8()
	b0, b1, b2, b3 := zero8(), zero8(), zero8(), zero8()
	c := 0
	for ; c <= k-16; c += 16 {
		u, v := load8(x[c:c+8]), load8(x[c+8:c+16])
		a0 = load8(w0[c:c+8]).MulAdd(u, a0)
		a1 = load8(w1[c:c+8]).MulAdd(u, a1)
		a2 = load8(w2[c:c+8]).MulAdd(u, a2)
		a3 = load8(w3[c:c+8]).MulAdd(u, a3)
		b0 = load8(w0[c+8:c+16]).MulAdd(v, b0)
		b1 = load8(w1[c+8:c+16]).MulAdd(v, b1)
		b2 = load8(w2[c+8:c+16]).MulAdd(v, b2)
		b3 = load8(w3[c+8:c+16]).MulAdd(v, b3)
	}
	if c+8 <= k {
		u := load8(x[c : c+8])
		a0 = load8(w0[c:c+8]).MulAdd(u, a0)
		a1 = load8(w1[c:c+8]).MulAdd(u, a1)
		a2 = load8(w2[c:c+8]).MulAdd(u, a2)
		a3 = load8(w3[c:c+8]).MulAdd(u, a3)
		c += 8
	}
	hsum4(a0.Add(b0), a1.Add(b1), a2.Add(b2), a3.Add(b3)).Store(d)
	for ; c < k; c++ {
		d[0] += w0[c] * x[c]
		d[1] += w1[c] * x[c]
		d[2] += w2[c] * x[c]
		d[3] += w3[c] * x[c]
	}
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
	siluMulScalar(gate[i:], up[i:])
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
	for ; i < h; i++ {
		a, b := x1[i], x2[i]
		x1[i] = a*cos[i] - b*sin[i]
		x2[i] = b*cos[i] + a*sin[i]
	}
}
