//go:build goexperiment.simd && amd64

package cpu

import (
	"encoding/binary"
	"simd/archsimd"
)

// unpackShifts[b][k] is where code k of a group of eight b-bit codes starts
// in the group's little-endian 32-bit word.
var unpackShifts = [5][8]uint32{
	{},
	{0, 1, 2, 3, 4, 5, 6, 7},
	{0, 2, 4, 6, 8, 10, 12, 14},
	{0, 3, 6, 9, 12, 15, 18, 21},
	{0, 4, 8, 12, 16, 20, 24, 28},
}

// unpackLookup decodes eight codes at a time: a group of eight b-bit codes
// is exactly b bytes, so one 32-bit load broadcast to all lanes, a per-lane
// variable shift and a mask give the eight codes as permute indices into
// the table's registers.
func unpackLookup(dst []float32, src []byte, bits int, t *[16]float32) {
	if !hasAVX2 {
		unpackLookupScalar(dst, src, bits, t)
		return
	}
	// The 32-bit load reads up to 4-bits bytes past a group: the vector
	// loop stops where they would run past src.
	g := 0
	if len(src) >= 4 {
		g = min(len(dst)/8, (len(src)-4)/bits+1)
	}
	if bits == 4 {
		unpackLookup4(dst[:8*g], src, t)
	} else {
		unpackLookupNarrow(dst[:8*g], src, bits, t)
	}
	clearUpper()
	unpackLookupScalar(dst[8*g:], src[g*bits:], bits, t)
}

// unpackLookupNarrow decodes len(dst)/8 groups of codes of 1 to 3 bits,
// whose levels fit one register. Two groups come from one 64-bit load.
func unpackLookupNarrow(dst []float32, src []byte, bits int, t *[16]float32) {
	sh := archsimd.LoadUint32x8(&unpackShifts[bits])
	mask := archsimd.BroadcastUint32x8(1<<bits - 1)
	lo := archsimd.LoadFloat32x8((*[8]float32)(t[0:8]))
	i, p := 0, 0
	for ; i+16 <= len(dst) && p+8 <= len(src); i, p = i+16, p+2*bits {
		x := binary.LittleEndian.Uint64(src[p:])
		d := (*[16]float32)(dst[i : i+16])
		a := archsimd.BroadcastUint32x8(uint32(x)).ShiftRight(sh).And(mask)
		b := archsimd.BroadcastUint32x8(uint32(x >> (8 * bits))).ShiftRight(sh).And(mask)
		store8(lo.Permute(a), d[0:8])
		store8(lo.Permute(b), d[8:16])
	}
	for ; i < len(dst); i, p = i+8, p+bits {
		idx := archsimd.BroadcastUint32x8(binary.LittleEndian.Uint32(src[p:])).ShiftRight(sh).And(mask)
		store8(lo.Permute(idx), dst[i:i+8])
	}
}

// unpackLookup4 decodes len(dst)/8 groups of 4-bit codes: each level is
// picked from the low or high half of the table by bit 3 of its code.
func unpackLookup4(dst []float32, src []byte, t *[16]float32) {
	sh := archsimd.LoadUint32x8(&unpackShifts[4])
	mask := archsimd.BroadcastUint32x8(15)
	eight := archsimd.BroadcastUint32x8(8)
	lo := archsimd.LoadFloat32x8((*[8]float32)(t[0:8]))
	hi := archsimd.LoadFloat32x8((*[8]float32)(t[8:16]))
	i, p := 0, 0
	for ; i+16 <= len(dst) && p+8 <= len(src); i, p = i+16, p+8 {
		x := binary.LittleEndian.Uint64(src[p:])
		d := (*[16]float32)(dst[i : i+16])
		a := archsimd.BroadcastUint32x8(uint32(x)).ShiftRight(sh).And(mask)
		b := archsimd.BroadcastUint32x8(uint32(x >> 32)).ShiftRight(sh).And(mask)
		store8(hi.Permute(a).Merge(lo.Permute(a), a.And(eight).Equal(eight)), d[0:8])
		store8(hi.Permute(b).Merge(lo.Permute(b), b.And(eight).Equal(eight)), d[8:16])
	}
	for ; i < len(dst); i, p = i+8, p+4 {
		idx := archsimd.BroadcastUint32x8(binary.LittleEndian.Uint32(src[p:])).ShiftRight(sh).And(mask)
		store8(hi.Permute(idx).Merge(lo.Permute(idx), idx.And(eight).Equal(eight)), dst[i:i+8])
	}
}

// unpackAffine4 is UnpackAffine for 4-bit codes in groups of a multiple of
// 16, each level computed in registers as m + float32(c)*s (a multiply,
// then an add, as the scalar expression) instead of looked up in a table
// built per group. It reports false, doing nothing, without AVX2.
func unpackAffine4(dst []float32, src []byte, g int, params []float32) bool {
	if !hasAVX2 {
		return false
	}
	sh := archsimd.LoadUint32x8(&unpackShifts[4])
	mask := archsimd.BroadcastUint32x8(15)
	gb := g / 2
	for k := range len(params) / 2 {
		m := archsimd.BroadcastFloat32x8(params[2*k])
		s := archsimd.BroadcastFloat32x8(params[2*k+1])
		out, in := dst[k*g:(k+1)*g], src[k*gb:(k+1)*gb]
		for i, p := 0, 0; i+16 <= len(out); i, p = i+16, p+8 {
			x := binary.LittleEndian.Uint64(in[p:])
			a := archsimd.BroadcastUint32x8(uint32(x)).ShiftRight(sh).And(mask)
			b := archsimd.BroadcastUint32x8(uint32(x >> 32)).ShiftRight(sh).And(mask)
			d := (*[16]float32)(out[i : i+16])
			store8(a.AsInt32x8().ConvertToFloat32().Mul(s).Add(m), d[0:8])
			store8(b.AsInt32x8().ConvertToFloat32().Mul(s).Add(m), d[8:16])
		}
	}
	clearUpper()
	return true
}

// widenF16 is f16x8 over little-endian bytes, collecting the lanes whose
// exponent is 31 (Inf or NaN) to report them once at the end.
func widenF16(dst []float32, src []byte) bool {
	if !hasAVX2 {
		return widenF16Scalar(dst, src)
	}
	n := len(dst)
	magic := archsimd.BroadcastFloat32x8(0x1p112)
	limit := archsimd.BroadcastInt32x8(0x0f7fffff)
	expMax := archsimd.BroadcastUint32x8(0x7f800000)
	emMask := archsimd.BroadcastUint32x8(0x7fff)
	signMask := archsimd.BroadcastUint32x8(0x8000)
	special := limit.Greater(limit) // none yet
	// The last n%8 values go through the same loop from a zero-padded
	// copy (zeros widen to zeros and are never special): a scalar tail
	// cost as much as the vectors in kakeya-pc's short fields.
	var tailIn [16]uint8
	var tailOut [8]float32
	for i := 0; i < n; i += 8 {
		in, out := src[2*i:], dst[i:]
		if i+8 > n {
			copy(tailIn[:], src[2*i:2*n])
			in, out = tailIn[:], tailOut[:]
		}
		u := archsimd.LoadUint8x16((*[16]uint8)(in[:16])).AsUint16x8().ExtendToUint32()
		em := u.And(emMask).ShiftAllLeft(13)
		f := em.AsFloat32x8().Mul(magic).AsUint32x8()
		sp := em.AsInt32x8().Greater(limit)
		special = special.Or(sp)
		f = f.Or(expMax.Masked(sp))
		store8(f.Or(u.And(signMask).ShiftAllLeft(16)).AsFloat32x8(), out[:8])
		if i+8 > n {
			copy(dst[i:], tailOut[:n-i])
		}
	}
	ok := special.ToBits() == 0
	clearUpper()
	return ok
}

// The stages h = 1, 2, 4 of a Walsh–Hadamard transform mix the lanes of one
// register: lane i becomes x[i^h] + s·x[i] with s = -1 where i&h != 0, one
// permute and one exact FMA (s is ±1) per stage.
var (
	fwhtPerm = [3][8]uint32{
		{1, 0, 3, 2, 5, 4, 7, 6},
		{2, 3, 0, 1, 6, 7, 4, 5},
		{4, 5, 6, 7, 0, 1, 2, 3},
	}
	fwhtSign = [3][8]float32{
		{1, -1, 1, -1, 1, -1, 1, -1},
		{1, 1, -1, -1, 1, 1, -1, -1},
		{1, 1, 1, 1, -1, -1, -1, -1},
	}
)

// stages8 runs the stages h = 1, 2, 4 on one register. x[i^h] + (-x[i]) is
// the scalar x[i^h] - x[i] bit for bit, and addition commutes exactly. The
// permutes and signs are loaded where they are used: cheap L1 loads that
// leave the registers to the row.
func stages8(v f32x8) f32x8 {
	v = v.MulAdd(archsimd.LoadFloat32x8(&fwhtSign[0]), v.Permute(archsimd.LoadUint32x8(&fwhtPerm[0])))
	v = v.MulAdd(archsimd.LoadFloat32x8(&fwhtSign[1]), v.Permute(archsimd.LoadUint32x8(&fwhtPerm[1])))
	return v.MulAdd(archsimd.LoadFloat32x8(&fwhtSign[2]), v.Permute(archsimd.LoadUint32x8(&fwhtPerm[2])))
}

func fwht(x []float32) {
	if !hasAVX2 {
		fwhtScalar(x)
		return
	}
	if len(x) == 64 {
		fwht64((*[64]float32)(x))
		return
	}
	for i := 0; i+8 <= len(x); i += 8 {
		store8(stages8(load8(x[i:i+8])), x[i:i+8])
	}
	if len(x) > 8 {
		hadamardStages(x)
	}
	clearUpper()
}

// fwht64 keeps all 64 values in eight registers through the six stages.
func fwht64(x *[64]float32) {
	v0, v1 := stages8(load8(x[0:8])), stages8(load8(x[8:16]))
	v2, v3 := stages8(load8(x[16:24])), stages8(load8(x[24:32]))
	v4, v5 := stages8(load8(x[32:40])), stages8(load8(x[40:48]))
	v6, v7 := stages8(load8(x[48:56])), stages8(load8(x[56:64]))
	// h = 8
	v0, v1 = v0.Add(v1), v0.Sub(v1)
	v2, v3 = v2.Add(v3), v2.Sub(v3)
	v4, v5 = v4.Add(v5), v4.Sub(v5)
	v6, v7 = v6.Add(v7), v6.Sub(v7)
	// h = 16
	v0, v2 = v0.Add(v2), v0.Sub(v2)
	v1, v3 = v1.Add(v3), v1.Sub(v3)
	v4, v6 = v4.Add(v6), v4.Sub(v6)
	v5, v7 = v5.Add(v7), v5.Sub(v7)
	// h = 32
	v0, v4 = v0.Add(v4), v0.Sub(v4)
	v1, v5 = v1.Add(v5), v1.Sub(v5)
	v2, v6 = v2.Add(v6), v2.Sub(v6)
	v3, v7 = v3.Add(v7), v3.Sub(v7)
	store8(v0, x[0:8])
	store8(v1, x[8:16])
	store8(v2, x[16:24])
	store8(v3, x[24:32])
	store8(v4, x[32:40])
	store8(v5, x[40:48])
	store8(v6, x[48:56])
	store8(v7, x[56:64])
	clearUpper()
}

// fwhtAxpyRows is FWHTAxpyRows, then RoPE when cos is not nil. Rows of 64
// run through avx512_amd64.c's kk_fwht_rows64 where the CPU has AVX-512:
// fwhtAxpy64's arithmetic, four registers a row instead of eight.
func fwhtAxpyRows(out, v, signs, z, w, rows []float32, n, d, p, r int, cos, sin []float32) {
	if !hasAVX2 || p != 64 || d != 64 {
		fwhtAxpyRowsParts(out, v, signs, z, w, rows, n, d, p, r, cos, sin)
		return
	}
	if hasAVX512 {
		fwhtRows64AVX512(out, v, signs, z, w, rows, n, r, cos, sin)
		return
	}
	s, zz := (*[64]float32)(signs), (*[64]float32)(z)
	for i := range n {
		var c, sn *[32]float32
		if cos != nil {
			c, sn = (*[32]float32)(cos[i*32:]), (*[32]float32)(sin[i*32:])
		}
		fwhtAxpy64((*[64]float32)(out[i*64:]), (*[64]float32)(v[i*64:]), s, zz, w[i*r:(i+1)*r], rows, c, sn)
	}
}

func fwhtAxpy(out, v, signs, z, w, rows []float32) {
	if !hasAVX2 || len(v) != 64 || len(out) != 64 {
		fwhtAxpyParts(out, v, signs, z, w, rows)
		return
	}
	fwhtAxpy64((*[64]float32)(out), (*[64]float32)(v), (*[64]float32)(signs), (*[64]float32)(z), w, rows, nil, nil)
}

// fwhtAxpy64 is fwht64, mulAdd and axpyBlock on one row of 64 in registers,
// then, when cos is not nil, ropeCopy's rotation of the row.
func fwhtAxpy64(out, v, signs, z *[64]float32, w, rows []float32, cos, sin *[32]float32) {
	v0, v1 := stages8(load8(v[0:8])), stages8(load8(v[8:16]))
	v2, v3 := stages8(load8(v[16:24])), stages8(load8(v[24:32]))
	v4, v5 := stages8(load8(v[32:40])), stages8(load8(v[40:48]))
	v6, v7 := stages8(load8(v[48:56])), stages8(load8(v[56:64]))
	v0, v1 = v0.Add(v1), v0.Sub(v1)
	v2, v3 = v2.Add(v3), v2.Sub(v3)
	v4, v5 = v4.Add(v5), v4.Sub(v5)
	v6, v7 = v6.Add(v7), v6.Sub(v7)
	v0, v2 = v0.Add(v2), v0.Sub(v2)
	v1, v3 = v1.Add(v3), v1.Sub(v3)
	v4, v6 = v4.Add(v6), v4.Sub(v6)
	v5, v7 = v5.Add(v7), v5.Sub(v7)
	v0, v4 = v0.Add(v4), v0.Sub(v4)
	v1, v5 = v1.Add(v5), v1.Sub(v5)
	v2, v6 = v2.Add(v6), v2.Sub(v6)
	v3, v7 = v3.Add(v7), v3.Sub(v7)
	v0 = v0.MulAdd(load8(signs[0:8]), load8(z[0:8]))
	v1 = v1.MulAdd(load8(signs[8:16]), load8(z[8:16]))
	v2 = v2.MulAdd(load8(signs[16:24]), load8(z[16:24]))
	v3 = v3.MulAdd(load8(signs[24:32]), load8(z[24:32]))
	v4 = v4.MulAdd(load8(signs[32:40]), load8(z[32:40]))
	v5 = v5.MulAdd(load8(signs[40:48]), load8(z[40:48]))
	v6 = v6.MulAdd(load8(signs[48:56]), load8(z[48:56]))
	v7 = v7.MulAdd(load8(signs[56:64]), load8(z[56:64]))
	rows = rows[:len(w)*64]
	for c, a := range w {
		r := (*[64]float32)(rows[c*64 : c*64+64])
		av := archsimd.BroadcastFloat32x8(a)
		v0 = av.MulAdd(load8(r[0:8]), v0)
		v1 = av.MulAdd(load8(r[8:16]), v1)
		v2 = av.MulAdd(load8(r[16:24]), v2)
		v3 = av.MulAdd(load8(r[24:32]), v3)
		v4 = av.MulAdd(load8(r[32:40]), v4)
		v5 = av.MulAdd(load8(r[40:48]), v5)
		v6 = av.MulAdd(load8(r[48:56]), v6)
		v7 = av.MulAdd(load8(r[56:64]), v7)
	}
	if cos != nil {
		// ropeCopy's arithmetic: values i and i+32 rotate together.
		c, s := load8(cos[0:8]), load8(sin[0:8])
		v0, v4 = v0.Mul(c).Sub(v4.Mul(s)), v4.Mul(c).Add(v0.Mul(s))
		c, s = load8(cos[8:16]), load8(sin[8:16])
		v1, v5 = v1.Mul(c).Sub(v5.Mul(s)), v5.Mul(c).Add(v1.Mul(s))
		c, s = load8(cos[16:24]), load8(sin[16:24])
		v2, v6 = v2.Mul(c).Sub(v6.Mul(s)), v6.Mul(c).Add(v2.Mul(s))
		c, s = load8(cos[24:32]), load8(sin[24:32])
		v3, v7 = v3.Mul(c).Sub(v7.Mul(s)), v7.Mul(c).Add(v3.Mul(s))
	}
	store8(v0, out[0:8])
	store8(v1, out[8:16])
	store8(v2, out[16:24])
	store8(v3, out[24:32])
	store8(v4, out[32:40])
	store8(v5, out[40:48])
	store8(v6, out[48:56])
	store8(v7, out[56:64])
	clearUpper()
}

// unpackLookupRows scales the table's registers per row and decodes the
// row's codes sixteen at a time, from one 64-bit load per pair of groups.
// The rows at the end of src, where that load would run past it, take
// unpackLookup's careful loop.
func unpackLookupRows(dst []float32, stride, cols int, src []byte, bits int, t *[16]float32, scales []float32) {
	if !hasAVX2 || cols%16 != 0 {
		unpackLookupRowsScalar(dst, stride, cols, src, bits, t, scales)
		return
	}
	rowBytes := cols * bits / 8
	fast := len(scales)
	for fast > 0 && fast*rowBytes+8-2*bits > len(src) {
		fast--
	}
	sh := archsimd.LoadUint32x8(&unpackShifts[bits])
	mask := archsimd.BroadcastUint32x8(1<<bits - 1)
	tlo := archsimd.LoadFloat32x8((*[8]float32)(t[0:8]))
	thi := archsimd.LoadFloat32x8((*[8]float32)(t[8:16]))
	if bits == 4 {
		eight := archsimd.BroadcastUint32x8(8)
		for i, s := range scales[:fast] {
			sv := archsimd.BroadcastFloat32x8(s)
			lo, hi := tlo.Mul(sv), thi.Mul(sv)
			d := dst[i*stride : i*stride+cols]
			for j, p := 0, i*rowBytes; j < len(d); j, p = j+16, p+8 {
				x := binary.LittleEndian.Uint64(src[p:])
				o := (*[16]float32)(d[j : j+16])
				a := archsimd.BroadcastUint32x8(uint32(x)).ShiftRight(sh).And(mask)
				b := archsimd.BroadcastUint32x8(uint32(x >> 32)).ShiftRight(sh).And(mask)
				store8(hi.Permute(a).Merge(lo.Permute(a), a.And(eight).Equal(eight)), o[0:8])
				store8(hi.Permute(b).Merge(lo.Permute(b), b.And(eight).Equal(eight)), o[8:16])
			}
		}
	} else {
		for i, s := range scales[:fast] {
			lo := tlo.Mul(archsimd.BroadcastFloat32x8(s))
			d := dst[i*stride : i*stride+cols]
			for j, p := 0, i*rowBytes; j < len(d); j, p = j+16, p+2*bits {
				x := binary.LittleEndian.Uint64(src[p:])
				o := (*[16]float32)(d[j : j+16])
				a := archsimd.BroadcastUint32x8(uint32(x)).ShiftRight(sh).And(mask)
				b := archsimd.BroadcastUint32x8(uint32(x >> (8 * bits))).ShiftRight(sh).And(mask)
				store8(lo.Permute(a), o[0:8])
				store8(lo.Permute(b), o[8:16])
			}
		}
	}
	clearUpper()
	for i := fast; i < len(scales); i++ {
		var ts [16]float32
		for c, l := range t {
			ts[c] = l * scales[i]
		}
		unpackLookup(dst[i*stride:i*stride+cols], src[i*rowBytes:(i+1)*rowBytes], bits, &ts)
	}
}

var iota16 = [16]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// affineTable sets t[q] = m + q·s, a multiply and an add per lane.
func affineTable(t *[16]float32, m, s float32) {
	if !hasAVX2 {
		affineTableScalar(t, m, s)
		return
	}
	mv, sv := archsimd.BroadcastFloat32x8(m), archsimd.BroadcastFloat32x8(s)
	archsimd.LoadFloat32x8((*[8]float32)(iota16[0:8])).Mul(sv).Add(mv).Store((*[8]float32)(t[0:8]))
	archsimd.LoadFloat32x8((*[8]float32)(iota16[8:16])).Mul(sv).Add(mv).Store((*[8]float32)(t[8:16]))
	clearUpper()
}

// quantError runs QuantError's terms eight at a time, in its lanes: the
// same operations, each rounded, as quantTerm.
func quantError(g []float32, m, s, inv, top, best float32) float32 {
	if !hasAVX2 {
		return quantErrorScalar(g, m, s, inv, top, best)
	}
	mv, sv, iv := archsimd.BroadcastFloat32x8(m), archsimd.BroadcastFloat32x8(s), archsimd.BroadcastFloat32x8(inv)
	zero, tv, c := zero8(), archsimd.BroadcastFloat32x8(top), archsimd.BroadcastFloat32x8(0x1.8p23)
	acc := zero
	i := 0
	for ; i+8 <= len(g); i += 8 {
		v := load8(g[i:])
		q := v.Sub(mv).Mul(iv).Max(zero).Min(tv).Add(c).Sub(c)
		d := v.Sub(mv.Add(q.Mul(sv)))
		acc = acc.Add(v.Mul(v).Mul(d).Mul(d))
		if i&24 == 8 && hsum(acc) >= best {
			return hsum(acc)
		}
	}
	var l [8]float32
	acc.Store(&l)
	clearUpper()
	for ; i < len(g); i++ {
		l[i&7] += quantTerm(g[i], m, s, inv, top)
	}
	return laneSum(&l)
}

// dequantInt8 sign-extends sixteen codes at a time to int32 lanes, converts
// them and scales them.
func dequantInt8(dst []float32, src []byte, g int, scales []float32) {
	if !hasAVX2 || g%16 != 0 {
		dequantInt8Scalar(dst, src, g, scales)
		return
	}
	for k, s := range scales {
		sv := archsimd.BroadcastFloat32x8(s)
		for j := k * g; j < (k+1)*g; j += 16 {
			x := archsimd.LoadUint8x16((*[16]uint8)(src[j : j+16])).AsInt8x16().ExtendToInt16()
			store8(x.GetLo().ExtendToInt32().ConvertToFloat32().Mul(sv), dst[j:j+8])
			store8(x.GetHi().ExtendToInt32().ConvertToFloat32().Mul(sv), dst[j+8:j+16])
		}
	}
	clearUpper()
}
