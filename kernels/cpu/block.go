package cpu

import "fmt"

// Block kernels: attention works on a block of cached keys or values at a
// time, so one call covers a whole block instead of one call per row.

// DotBlock sets out[r] = q·keys[r*d:(r+1)*d] for the n rows of keys. Each
// row's sum is computed the same way wherever the row sits in the block, so
// results do not depend on how rows are grouped into blocks. It panics if
// the lengths do not match n and d.
func DotBlock(out, q, keys []float32, n, d int) {
	if n < 0 || d < 0 || len(q) != d || len(keys) < n*d || len(out) < n {
		panic(fmt.Sprintf("cpu: DotBlock: n=%d d=%d with out %d, q %d, keys %d elements", n, d, len(out), len(q), len(keys)))
	}
	dotBlock(out[:n], q, keys[:n*d], d)
}

// AxpyBlock adds Σ_r w[r]·vals[r*d:(r+1)*d] to out (len d), summing over r
// in order, so the result equals n successive Axpy calls. It panics if the
// lengths do not match n and d.
func AxpyBlock(out, w, vals []float32, n, d int) {
	if n < 0 || d < 0 || len(out) != d || len(w) < n || len(vals) < n*d {
		panic(fmt.Sprintf("cpu: AxpyBlock: n=%d d=%d with out %d, w %d, vals %d elements", n, d, len(out), len(w), len(vals)))
	}
	axpyBlock(out, w[:n], vals[:n*d])
}

// ScoreBlock sets s[i*lds+k] = factor·(q[i*d:(i+1)*d]·keys[k*d:(k+1)*d]) for
// the m query rows of q and the n key rows of keys: attention's scores of
// several heads and tokens against a cache block at once, so each key row
// loaded serves several queries. Each score is computed the same way
// wherever its query and key sit, so results do not depend on how rows are
// grouped into blocks or calls. It panics if the lengths do not match.
func ScoreBlock(s []float32, lds int, q []float32, m int, keys []float32, n, d int, factor float32) {
	if m < 0 || n < 0 || d <= 0 || lds < n || len(q) < m*d || len(keys) < n*d || (m > 0 && len(s) < (m-1)*lds+n) {
		panic(fmt.Sprintf("cpu: ScoreBlock: m=%d n=%d d=%d lds=%d with s %d, q %d, keys %d elements", m, n, d, lds, len(s), len(q), len(keys)))
	}
	if m == 0 || n == 0 {
		return
	}
	switch {
	case hasAVX512:
		scoresAVX512(s, lds, q, m, keys, n, d, factor)
	case hasAVX2C:
		scoresAVX2(s, lds, q, m, keys, n, d, factor)
	default:
		scoreRows(s, lds, q, m, keys, n, d, factor)
	}
}

// scoreRows is ScoreBlock without AVX-512: one DotBlock kernel per query
// row.
func scoreRows(s []float32, lds int, q []float32, m int, keys []float32, n, d int, factor float32) {
	for i := range m {
		row := s[i*lds : i*lds+n]
		dotBlock(row, q[i*d:(i+1)*d], keys[:n*d], d)
		scale(row, factor)
	}
}

// MixBlock adds Σ_k p[i*ldp+k]·vals[k*d:(k+1)*d] to o[i*d:(i+1)*d] for the m
// output rows of o and the n value rows of vals, summing over k in order:
// each output row gets what AxpyBlock would add, with each value row loaded
// once for several outputs. It panics if the lengths do not match.
func MixBlock(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	if m < 0 || n < 0 || d <= 0 || ldp < n || len(o) < m*d || len(vals) < n*d || (m > 0 && len(p) < (m-1)*ldp+n) {
		panic(fmt.Sprintf("cpu: MixBlock: m=%d n=%d d=%d ldp=%d with o %d, p %d, vals %d elements", m, n, d, ldp, len(o), len(p), len(vals)))
	}
	if m == 0 || n == 0 {
		return
	}
	switch {
	case hasAVX512:
		mixAVX512(o, m, p, ldp, vals, n, d)
	case hasAVX2C:
		mixAVX2(o, m, p, ldp, vals, n, d)
	default:
		mixRows(o, m, p, ldp, vals, n, d)
	}
}

// mixRows is MixBlock without AVX-512: one AxpyBlock kernel per output row.
func mixRows(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	for i := range m {
		axpyBlock(o[i*d:(i+1)*d], p[i*ldp:i*ldp+n], vals[:n*d])
	}
}

// RoPEBlock sets each of the n rows of dst (d values) to the matching row of
// src rotated by RoPE at consecutive positions: row r uses cos and sin
// [r*d/2, (r+1)*d/2). It is RoPE applied to a copy, row by row; dst must not
// overlap src unless they are the same slice. It panics if d is odd or the
// lengths do not match.
func RoPEBlock(dst, src, cos, sin []float32, n, d int) {
	h := d / 2
	if n < 0 || d < 0 || d%2 != 0 || len(dst) < n*d || len(src) < n*d || len(cos) < n*h || len(sin) < n*h {
		panic(fmt.Sprintf("cpu: RoPEBlock: n=%d d=%d with dst %d, src %d, cos %d, sin %d elements", n, d, len(dst), len(src), len(cos), len(sin)))
	}
	for r := range n {
		ropeCopy(dst[r*d:(r+1)*d], src[r*d:(r+1)*d], cos[r*h:(r+1)*h], sin[r*h:(r+1)*h])
	}
}

func dotBlockScalar(out, q, keys []float32, d int) {
	for r := range out {
		out[r] = dotScalar(q, keys[r*d:(r+1)*d])
	}
}

func axpyBlockScalar(out, w, vals []float32) {
	d := len(out)
	for r, a := range w {
		v := vals[r*d : (r+1)*d]
		for j := range out {
			out[j] += a * v[j]
		}
	}
}

func ropeCopyScalar(dst, src, cos, sin []float32) {
	h := len(cos)
	x1, x2 := src[:h], src[h:2*h]
	y1, y2, sin := dst[:h], dst[h:2*h], sin[:h]
	for i, c := range cos {
		a, b := x1[i], x2[i]
		y1[i] = a*c - b*sin[i]
		y2[i] = b*c + a*sin[i]
	}
}
