package cpu

import "fmt"

// Kernels for blocks stored in a basis with codes per component (codec
// KakeyaPC): each component's codes unpacked to their scaled levels in one
// plane of latents, and the latents mixed back into rows.

// PlaneMaxBits is the widest code UnpackPlanes reads.
const PlaneMaxBits = 6

// PlaneLevels is the length of UnpackPlanes' table of levels: 64 slots for
// each code width 0..PlaneMaxBits, the 2^b levels of width b at b*64.
const PlaneLevels = (PlaneMaxBits + 1) * 64

// PlaneBytes returns the length of a plane of n codes of b bits:
// ceil(n*b/8).
func PlaneBytes(n, b int) int { return (n*b + 7) / 8 }

// UnpackPlanes decodes len(widths) planes of n codes laid end to end in
// src: plane t holds n codes of widths[t] bits (1..PlaneMaxBits), code i at
// bit i*widths[t] of the plane, least significant bit first, and takes
// PlaneBytes(n, widths[t]) bytes. Row t of dst (n values at t*ldd) gets
// levels[w*64+c]·scales[t] for each code c of width w, the product rounded
// once to float32, so every kernel level gives the same bits. It panics if
// a width is outside 1..PlaneMaxBits or the lengths do not match.
func UnpackPlanes(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32) {
	c, need := len(widths), 0
	for _, w := range widths {
		if w < 1 || w > PlaneMaxBits {
			panic(fmt.Sprintf("cpu: UnpackPlanes: code width %d not in 1..%d", w, PlaneMaxBits))
		}
		need += PlaneBytes(n, int(w))
	}
	if n < 0 || ldd < n || len(scales) < c || len(src) < need || c > 0 && len(dst) < (c-1)*ldd+n {
		panic(fmt.Sprintf("cpu: UnpackPlanes: %d planes of %d codes (stride %d) into %d values from %d bytes (need %d), %d scales",
			c, n, ldd, len(dst), len(src), need, len(scales)))
	}
	if c == 0 || n == 0 {
		return
	}
	switch {
	case hasAVX512:
		unpackPlanesAVX512(dst, ldd, n, src[:need], widths, scales, levels)
	case hasAVX2C:
		unpackPlanesAVX2(dst, ldd, n, src[:need], widths, scales, levels)
	default:
		unpackPlanesScalar(dst, ldd, n, src, widths, scales, levels)
	}
}

func unpackPlanesScalar(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32) {
	var lv [64]float32
	for t, w := range widths {
		plane := src[:PlaneBytes(n, int(w))]
		src = src[len(plane):]
		for j, v := range levels[int(w)*64 : int(w)*64+1<<w] {
			lv[j] = v * scales[t]
		}
		mask := uint16(1)<<w - 1
		out := dst[t*ldd : t*ldd+n]
		pos := 0
		for i := range out {
			u := uint16(plane[pos>>3])
			if pos>>3+1 < len(plane) {
				u |= uint16(plane[pos>>3+1]) << 8
			}
			out[i] = lv[u>>(pos&7)&mask]
			pos += int(w)
		}
	}
}

// MixBlockT is MixBlock with the weights transposed: it sets o[i*d:(i+1)*d]
// to base (o's own row i when base is nil) plus Σ_k p[k*ldp+i]·vals[k*d:(k+1)*d]
// for the m output rows of o and the n value rows of vals, summing over k
// in order. Each output row gets exactly what MixBlock adds with the
// weights p[k*ldp+i] in row i, on every kernel level: the latents of a
// block stored one component per row (n x d rows = latentsᵀ · basis) mix
// without a transpose. It panics if the lengths do not match.
func MixBlockT(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	checkMixT("MixBlockT", o, m, base, p, ldp, vals, n, d)
	mixT(o, m, base, p, ldp, vals, n, d)
}

// checkMixT panics, naming the caller, when MixBlockT's lengths do not
// match.
func checkMixT(name string, o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	if m < 0 || n < 0 || d <= 0 || ldp < m || len(o) < m*d || len(vals) < n*d || base != nil && len(base) < d ||
		n > 0 && m > 0 && len(p) < (n-1)*ldp+m {
		panic(fmt.Sprintf("cpu: %s: m=%d n=%d d=%d ldp=%d with o %d, base %d, p %d, vals %d elements", name, m, n, d, ldp, len(o), len(base), len(p), len(vals)))
	}
}

func mixT(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	switch {
	case hasAVX512:
		mixTAVX512(o, m, base, p, ldp, vals, n, d)
	case hasAVX2C:
		mixTAVX2(o, m, base, p, ldp, vals, n, d)
	default:
		mixRowsT(o, m, base, p, ldp, vals, n, d)
	}
}

// MixBlockTRoPE is MixBlockT followed by RoPEBlock(o, o, cos, sin, m, d),
// bit for bit: a block's keys decoded straight into their rotated rows, in
// registers where the kernels allow (AVX-512, d = 32, 64 or 128), else in
// the same C call (AVX2, d a multiple of 16). It panics if d is odd or the
// lengths do not match.
func MixBlockTRoPE(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int, cos, sin []float32) {
	h := d / 2
	if d%2 != 0 || len(cos) < m*h || len(sin) < m*h {
		panic(fmt.Sprintf("cpu: MixBlockTRoPE: m=%d d=%d with cos %d, sin %d elements", m, d, len(cos), len(sin)))
	}
	checkMixT("MixBlockTRoPE", o, m, base, p, ldp, vals, n, d)
	switch {
	case m == 0 || n == 0:
	case hasAVX512 && (d == 32 || d == 64 || d == 128):
		mixTRoPEAVX512(o, m, base, p, ldp, vals, n, d, cos, sin)
		return
	case hasAVX2C && !hasAVX512 && d%16 == 0:
		mixTRoPEAVX2(o, m, base, p, ldp, vals, n, d, cos, sin)
		return
	}
	mixT(o, m, base, p, ldp, vals, n, d)
	for r := range m {
		ropeCopy(o[r*d:(r+1)*d], o[r*d:(r+1)*d], cos[r*h:(r+1)*h], sin[r*h:(r+1)*h])
	}
}

// mixRowsT is MixBlockT without the C kernels: mixRows's AxpyBlock kernel
// per output row, its weights gathered 64 at a time (a chunk's sums carry
// over exactly, so the chunks change nothing).
func mixRowsT(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	var w [64]float32
	for i := range m {
		out := o[i*d : (i+1)*d]
		if base != nil {
			copy(out, base[:d])
		}
		for k0 := 0; k0 < n; k0 += len(w) {
			k1 := min(n, k0+len(w))
			for k := k0; k < k1; k++ {
				w[k-k0] = p[k*ldp+i]
			}
			axpyBlock(out, w[:k1-k0], vals[k0*d:k1*d])
		}
	}
}

// Transpose sets dst[i*ldd+t] = src[t*lds+i] for the rows t < rows and
// columns i < cols of src: a block's latents, one component per row,
// turned one block row per row. dst and src must not overlap. It panics
// if the lengths do not match.
func Transpose(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	if rows < 0 || cols < 0 || ldd < rows || lds < cols || rows > 0 && cols > 0 &&
		(len(dst) < (cols-1)*ldd+rows || len(src) < (rows-1)*lds+cols) {
		panic(fmt.Sprintf("cpu: Transpose: %d x %d (strides %d, %d) from %d into %d elements", rows, cols, lds, ldd, len(src), len(dst)))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if hasAVX2C {
		transposeAVX2(dst, ldd, src, lds, rows, cols)
		return
	}
	for t := range rows {
		for i, v := range src[t*lds : t*lds+cols] {
			dst[i*ldd+t] = v
		}
	}
}
