//go:build goexperiment.simd && amd64

package cpu

import "simd/archsimd"

func dotBlock(out, q, keys []float32, d int) {
	if !hasAVX2 {
		dotBlockScalar(out, q, keys, d)
		return
	}
	dotBlockAVX2(out, q, keys, d)
}

// dotBlockAVX2 runs four keys at a time so one horizontal reduction serves
// four rows. Every row gets the same two accumulators and the same reduction
// (a lane of hsum4 depends only on its own vector), so a row's result does
// not depend on which group of four it falls in.
func dotBlockAVX2(out, q, keys []float32, d int) {
	q = q[:d]
	d8 := d &^ 7
	n := len(out)
	var t [4]float32
	r := 0
	for ; r+4 <= n; r += 4 {
		k0, k1 := keys[r*d:(r+1)*d], keys[(r+1)*d:(r+2)*d]
		k2, k3 := keys[(r+2)*d:(r+3)*d], keys[(r+3)*d:(r+4)*d]
		a0, a1, a2, a3 := zero8(), zero8(), zero8(), zero8()
		b0, b1, b2, b3 := zero8(), zero8(), zero8(), zero8()
		c := 0
		for ; c+16 <= d8; c += 16 {
			u, v := load8(q[c:c+8]), load8(q[c+8:c+16])
			a0 = load8(k0[c:c+8]).MulAdd(u, a0)
			b0 = load8(k0[c+8:c+16]).MulAdd(v, b0)
			a1 = load8(k1[c:c+8]).MulAdd(u, a1)
			b1 = load8(k1[c+8:c+16]).MulAdd(v, b1)
			a2 = load8(k2[c:c+8]).MulAdd(u, a2)
			b2 = load8(k2[c+8:c+16]).MulAdd(v, b2)
			a3 = load8(k3[c:c+8]).MulAdd(u, a3)
			b3 = load8(k3[c+8:c+16]).MulAdd(v, b3)
		}
		if c < d8 {
			u := load8(q[c : c+8])
			a0 = load8(k0[c:c+8]).MulAdd(u, a0)
			a1 = load8(k1[c:c+8]).MulAdd(u, a1)
			a2 = load8(k2[c:c+8]).MulAdd(u, a2)
			a3 = load8(k3[c:c+8]).MulAdd(u, a3)
		}
		s := hsum4(a0.Add(b0), a1.Add(b1), a2.Add(b2), a3.Add(b3))
		if d8 == d {
			// Stored as it is: a copy through t is a legacy-SSE move,
			// whose transition from the AVX state stalls (on this
			// project's Xeon, a third of the kernel's time).
			s.Store((*[4]float32)(out[r : r+4]))
			continue
		}
		s.Store(&t)
		clearUpper()
		for c := d8; c < d; c++ {
			t[0] += q[c] * k0[c]
			t[1] += q[c] * k1[c]
			t[2] += q[c] * k2[c]
			t[3] += q[c] * k3[c]
		}
		copy(out[r:r+4], t[:])
	}
	z := zero8()
	for ; r < n; r++ {
		k0 := keys[r*d : (r+1)*d]
		a0, b0 := zero8(), zero8()
		c := 0
		for ; c+16 <= d8; c += 16 {
			a0 = load8(k0[c:c+8]).MulAdd(load8(q[c:c+8]), a0)
			b0 = load8(k0[c+8:c+16]).MulAdd(load8(q[c+8:c+16]), b0)
		}
		if c < d8 {
			a0 = load8(k0[c:c+8]).MulAdd(load8(q[c:c+8]), a0)
		}
		hsum4(a0.Add(b0), z, z, z).Store(&t)
		clearUpper()
		for c := d8; c < d; c++ {
			t[0] += q[c] * k0[c]
		}
		out[r] = t[0]
	}
	clearUpper()
}

// axpyBlock keeps 64 output columns in eight registers while it runs down
// the rows, so out is loaded and stored once per block instead of once per
// row. Each column still sums its rows in order with one FMA per row, as
// axpy does.
func axpyBlock(out, w, vals []float32) {
	if !hasAVX2 {
		axpyBlockScalar(out, w, vals)
		return
	}
	d := len(out)
	j := 0
	for ; j+64 <= d; j += 64 {
		o := (*[64]float32)(out[j : j+64])
		a0, a1, a2, a3 := load8(o[0:8]), load8(o[8:16]), load8(o[16:24]), load8(o[24:32])
		a4, a5, a6, a7 := load8(o[32:40]), load8(o[40:48]), load8(o[48:56]), load8(o[56:64])
		for r, x := range w {
			v := (*[64]float32)(vals[r*d+j : r*d+j+64])
			xv := archsimd.BroadcastFloat32x8(x)
			a0 = xv.MulAdd(load8(v[0:8]), a0)
			a1 = xv.MulAdd(load8(v[8:16]), a1)
			a2 = xv.MulAdd(load8(v[16:24]), a2)
			a3 = xv.MulAdd(load8(v[24:32]), a3)
			a4 = xv.MulAdd(load8(v[32:40]), a4)
			a5 = xv.MulAdd(load8(v[40:48]), a5)
			a6 = xv.MulAdd(load8(v[48:56]), a6)
			a7 = xv.MulAdd(load8(v[56:64]), a7)
		}
		store8(a0, o[0:8])
		store8(a1, o[8:16])
		store8(a2, o[16:24])
		store8(a3, o[24:32])
		store8(a4, o[32:40])
		store8(a5, o[40:48])
		store8(a6, o[48:56])
		store8(a7, o[56:64])
	}
	for ; j+8 <= d; j += 8 {
		a := load8(out[j : j+8])
		for r, x := range w {
			a = archsimd.BroadcastFloat32x8(x).MulAdd(load8(vals[r*d+j:r*d+j+8]), a)
		}
		store8(a, out[j:j+8])
	}
	clearUpper()
	if j < d {
		tail := out[j:]
		for r, x := range w {
			axpyScalar(x, vals[r*d+j:(r+1)*d], tail)
		}
	}
}

func ropeCopy(dst, src, cos, sin []float32) {
	if !hasAVX2 {
		ropeCopyScalar(dst, src, cos, sin)
		return
	}
	h := len(cos)
	x1, x2 := src[:h], src[h:2*h]
	y1, y2, sin := dst[:h], dst[h:2*h], sin[:h]
	i := 0
	for ; i+8 <= h; i += 8 {
		a, b := load8(x1[i:i+8]), load8(x2[i:i+8])
		c, s := load8(cos[i:i+8]), load8(sin[i:i+8])
		store8(a.Mul(c).Sub(b.Mul(s)), y1[i:i+8])
		store8(b.Mul(c).Add(a.Mul(s)), y2[i:i+8])
	}
	clearUpper()
	for ; i < h; i++ {
		a, b := x1[i], x2[i]
		y1[i] = a*cos[i] - b*sin[i]
		y2[i] = b*cos[i] + a*sin[i]
	}
}
