package tensor

import (
	"encoding/binary"
	"math"
)

// The quantizers of the K types and Q5_0, as llama.cpp's
// quantize_row_q4_K_ref, q5_K_ref, q6_K_ref and q5_0_ref compute them
// (what llama-quantize writes without an importance matrix): the K types
// search, per sub-block, for the scale (and min) of least weighted squared
// error, then quantize those scales to 6 or 8 bits under one f16 scale per
// block. Every step is float32, each product and sum rounded as C without
// contraction rounds it, so that the blocks are llama-quantize's byte for
// byte.

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is
// below it is all zeros.
const groupMaxEps = 1e-15

// ggmlNearest is ggml's nearest_int: float32 rounded half to even by
// adding 1.5*2^23, exact for |f| < 2^22 (which the callers keep to).
func ggmlNearest(f float32) int {
	v := math.Float32bits(f + 12582912)
	return int(v&0x007fffff) - 0x00400000
}

// qkx2 is ggml's make_qkx2_quants: codes L in [0, nmax] and a scale and min
// (returned negated, as the_min) for the n values of x under weights w,
// searching nstep+1 scales around nmax/(max-min).
func qkx2(nmax int, x, w []float32, L, aux []uint8, rmin, rdelta float32, nstep int) (scale, negMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		lo = min(lo, x[i])
		hi = max(hi, x[i])
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L[:n])
		return 0, -lo
	}
	fmax := float32(nmax)
	iscale := fmax / (hi - lo)
	scale = 1 / iscale
	var best float32
	for i := range n {
		l := ggmlNearest(float32(iscale * float32(x[i]-lo)))
		L[i] = uint8(max(0, min(nmax, l)))
		diff := float32(float32(scale*float32(L[i]))+lo) - x[i]
		best += float32(w[i] * float32(diff*diff))
	}
	for is := 0; is <= nstep; is++ {
		iscale = float32(float32(rmin+float32(rdelta*float32(is)))+fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := max(0, min(nmax, ggmlNearest(float32(iscale*float32(x[i]-lo)))))
			aux[i] = uint8(l)
			fl := float32(l)
			wl := float32(w[i] * fl)
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * x[i])
		}
		d := float32(sumW*sumL2) - float32(sumL*sumL)
		if d > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / d
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / d
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i := range n {
				diff := float32(float32(thisScale*float32(aux[i]))+thisMin) - x[i]
				cur += float32(w[i] * float32(diff*diff))
			}
			if cur < best {
				copy(L[:n], aux[:n])
				best, scale, lo = cur, thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

// qxQuants is ggml's make_qx_quants with rmse_type 1 and no importance
// weights (weights x²): signed codes in [-nmax, nmax-1], stored offset by
// nmax in L, and their scale, searching 18 scales around -nmax/max.
func qxQuants(nmax int, x []float32, L []int8) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	fmax := float32(nmax)
	sums := func(iscale float32, store bool) (sumLX, sumL2 float32) {
		for i, v := range x {
			l := max(-nmax, min(nmax-1, ggmlNearest(float32(iscale*v))))
			if store {
				L[i] = int8(l + nmax)
			}
			w := float32(v * v)
			fl := float32(l)
			sumLX += float32(float32(w*v) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		return sumLX, sumL2
	}
	sumLX, sumL2 := sums(-fmax/mx, true)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := float32(scale * sumLX)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale := -(fmax + float32(0.1*float32(is))) / mx
		sumLX, sumL2 = sums(iscale, false)
		if sumL2 > 0 && float32(sumLX*sumLX) > float32(best*sumL2) {
			sums(iscale, true)
			scale = sumLX / sumL2
			best = float32(scale * sumLX)
		}
	}
	return scale
}

// quantizeK45 quantizes one Q4_K (five false) or Q5_K block of 256 values.
func quantizeK45(f *QuantFormat, b []byte, x []float32, five bool) {
	nmax, rmin, nstep := 15, float32(-1), 20
	if five {
		nmax, rmin, nstep = 31, -0.5, 15
	}
	var L [256]uint8
	var aux [32]uint8
	var w [32]float32
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		sub := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range sub {
			sumX2 += float32(v * v)
		}
		av := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range sub {
			w[l] = av + float32(math.Abs(float64(v)))
		}
		scales[j], mins[j] = qkx2(nmax, sub, w[:], L[32*j:32*j+32], aux[:], rmin, 0.1, nstep)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := b[f.Field("scales").Offset:][:12]
	for j := range 8 {
		ls := min(63, uint8(ggmlNearest(float32(invScale*scales[j]))))
		lm := min(63, uint8(ggmlNearest(float32(invMin*mins[j]))))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xF | (lm&0xF)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	dh, mh := F32ToF16(maxScale/63), F32ToF16(maxMin/63)
	binary.LittleEndian.PutUint16(b[f.Field("d").Offset:], dh)
	binary.LittleEndian.PutUint16(b[f.Field("dmin").Offset:], mh)
	for j := range 8 {
		s, m := scaleMin(j, sc)
		d := float32(F16ToF32(dh) * float32(s))
		if d == 0 {
			continue
		}
		dm := float32(F16ToF32(mh) * float32(m))
		for i := range 32 {
			L[32*j+i] = uint8(max(0, min(nmax, ggmlNearest((x[32*j+i]+dm)/d))))
		}
	}
	qs := b[f.Field("qs").Offset:][:128]
	if !five {
		for j := 0; j < 256; j += 64 {
			for l := range 32 {
				qs[j/2+l] = L[j+l] | L[j+l+32]<<4
			}
		}
		return
	}
	qh := b[f.Field("qh").Offset:][:32]
	clear(qh)
	m1, m2 := uint8(1), uint8(2)
	for n := 0; n < 256; n += 64 {
		for j := range 32 {
			l1, l2 := L[n+j], L[n+j+32]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			qs[n/2+j] = l1 | l2<<4
		}
		m1, m2 = m1<<2, m2<<2
	}
}

// quantizeQ6K quantizes one Q6_K block of 256 values.
func quantizeQ6K(f *QuantFormat, b []byte, x []float32) {
	var L [256]int8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := range 16 {
		s := qxQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		scales[ib] = s
		if a := float32(math.Abs(float64(s))); a > maxAbs {
			maxAbs, maxScale = a, s
		}
	}
	clear(b[:f.Bytes])
	if maxAbs < groupMaxEps {
		return
	}
	iscale := -128 / maxScale
	dh := F32ToF16(1 / iscale)
	binary.LittleEndian.PutUint16(b[f.Field("d").Offset:], dh)
	sc := b[f.Field("scales").Offset:][:16]
	for ib := range 16 {
		sc[ib] = byte(int8(min(127, ggmlNearest(float32(iscale*scales[ib])))))
	}
	for j := range 16 {
		d := float32(F16ToF32(dh) * float32(int8(sc[j])))
		if d == 0 {
			continue
		}
		for i := range 16 {
			l := max(-32, min(31, ggmlNearest(x[16*j+i]/d)))
			L[16*j+i] = int8(l + 32)
		}
	}
	ql := b[f.Field("ql").Offset:][:128]
	qh := b[f.Field("qh").Offset:][:64]
	for j := 0; j < 256; j += 128 {
		for l := range 32 {
			q1, q2 := uint8(L[j+l])&0xF, uint8(L[j+l+32])&0xF
			q3, q4 := uint8(L[j+l+64])&0xF, uint8(L[j+l+96])&0xF
			ql[j/2+l] = q1 | q3<<4
			ql[j/2+l+32] = q2 | q4<<4
			qh[j/4+l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
		}
	}
}

// quantizeQ5_0 quantizes one Q5_0 block of 32 values, as
// quantize_row_q5_0_ref: scale max/-16 (max the value of largest
// magnitude), codes x/scale + 16.5 truncated, at most 31.
func quantizeQ5_0(f *QuantFormat, b []byte, x []float32) {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(b[f.Field("d").Offset:], F32ToF16(d))
	var qh uint32
	qs := b[f.Field("qs").Offset:][:16]
	for j := range 16 {
		x0 := min(31, uint8(int8(float32(x[j]*id)+16.5)))
		x1 := min(31, uint8(int8(float32(x[j+16]*id)+16.5)))
		qs[j] = x0&0xF | (x1&0xF)<<4
		qh |= uint32(x0>>4&1)<<j | uint32(x1>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(b[f.Field("qh").Offset:], qh)
}
