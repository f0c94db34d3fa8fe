package cpu

import (
	"fmt"
	"unsafe"
)

// PCRun describes a run of consecutive blocks of one KV head stored by
// codec.KakeyaPC, for PCScoreRun and PCAddRun: N rows of D values per
// block, C coded components and M stored means. Block j's fields are its M
// means then its C scales at Fields[j*(M+C):], its latents (C x N, scale
// times level, one component per row) either its code planes, PlaneBytes
// of them at Planes[j*PlaneBytes:] (widths Widths, levels Levels as
// UnpackPlanes reads them), or, with Planes nil, Lat[j*C*N:]. Mu, MeanRows
// (M x D) and Coded (C x D) are the codec's mean and basis rows.
type PCRun struct {
	N, D, C, M int
	Planes     []byte
	PlaneBytes int
	Widths     []uint8
	Levels     *[PlaneLevels]float32
	Lat        []float32
	Fields     []float32
	Mu         []float32
	MeanRows   []float32
	Coded      []float32
	// Prefetch holds (address, length) pairs of the blocks the caller
	// reads next (PrefetchPairs): the kernels ask for their cache lines as
	// they go, a share with each block, so that those blocks' misses
	// overlap this run's arithmetic. They are hints: no byte is read
	// through them, and a prefetch of any address is harmless.
	Prefetch []uintptr
}

// PrefetchPairs appends to dst the address and length of each block of
// src (those of any length): PCRun.Prefetch's pairs.
func PrefetchPairs(dst []uintptr, src [][]byte) []uintptr {
	for _, b := range src {
		if len(b) > 0 {
			dst = append(dst, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		}
	}
	return dst
}

// PCRunAccLen returns the floats of PCAddRun's acc for m weight rows.
func PCRunAccLen(m, c int) int { return m * c * 16 }

// PCRunWorkLen returns the floats of PCScoreRun's and PCAddRun's work: a
// block's constant row, its rows rebuilt, its latents (or code bytes) and
// its components' scaled level tables.
func PCRunWorkLen(n, d, c int) int { return d + n*d + c*n + PlaneLevels/(PlaneMaxBits+1)*c }

// PCRunSupported reports whether PCScoreRun and PCAddRun run a kernel for
// blocks of n rows of d values with c coded components on this CPU at the
// kernel level $KAKEYA_CPU allows: AVX-512 for d of 32, 64 or 128, AVX2
// for d a multiple of 16, n at most 64 and c at least 1. Elsewhere the
// caller decodes block by block.
func PCRunSupported(n, d, c int) bool {
	if n < 1 || n > 64 || c < 1 {
		return false
	}
	switch {
	case hasAVX512:
		return d == 32 || d == 64 || d == 128
	case hasAVX2C:
		return d%16 == 0 && d > 0
	}
	return false
}

// check panics unless r describes nb blocks whose rows [r0, r1) (r0 in
// the first block, r1 in the last) the kernels may take.
func (r *PCRun) check(name string, nb, r0, r1 int) {
	n, d, c, mc := r.N, r.D, r.C, r.M
	ok := nb > 0 && PCRunSupported(n, d, c) && len(r.Prefetch)%2 == 0 && mc >= 0 && len(r.Widths) == c && r.Levels != nil &&
		len(r.Fields) >= nb*(mc+c) && len(r.Mu) >= d && len(r.MeanRows) >= mc*d && len(r.Coded) >= c*d &&
		r0 >= 0 && r0 < n && r1 > 0 && r1 <= n && (nb > 1 || r0 < r1)
	if ok && r.Planes != nil {
		need := 0
		for _, w := range r.Widths {
			if w < 1 || w > PlaneMaxBits {
				ok = false
			}
			need += PlaneBytes(n, int(w))
		}
		ok = ok && need == r.PlaneBytes && len(r.Planes) >= nb*need
	} else if ok {
		ok = len(r.Lat) >= nb*c*n
	}
	if !ok {
		panic(fmt.Sprintf("cpu: %s: %d blocks of %dx%d, %d coded and %d means, rows [%d, %d), with %d planes bytes (%d each), %d latents, %d fields, %d widths",
			name, nb, n, d, c, mc, r0, r1, len(r.Planes), r.PlaneBytes, len(r.Lat), len(r.Fields), len(r.Widths)))
	}
}

// PCScoreRun sets s[i*lds + j*N + k] to scale times the product of query
// row i (of the m rows of q) with row k of block j's keys rotated by RoPE
// at their positions (cos and sin from row 0 of block 0 on, D/2 values a
// row), for the nb blocks of r and rows k in [r0, N) of the first, [0, r1)
// of the last and every row between: codec.KakeyaPC's DecodeRotated and
// ScoreBlock of each block, bit for bit, in one call. It reports false,
// doing nothing, where PCRunSupported does, and panics if the lengths do
// not match. work holds PCRunWorkLen floats.
func PCScoreRun(r *PCRun, nb int, s []float32, lds int, q []float32, m int, scale float32, cos, sin []float32, r0, r1 int, work []float32) bool {
	if !PCRunSupported(r.N, r.D, r.C) {
		return false
	}
	r.check("PCScoreRun", nb, r0, r1)
	n, d := r.N, r.D
	if m < 1 || lds < nb*n || len(q) < m*d || len(s) < (m-1)*lds+(nb-1)*n+r1 || len(cos) < nb*n*d/2 || len(sin) < nb*n*d/2 ||
		len(work) < PCRunWorkLen(n, d, r.C) {
		panic(fmt.Sprintf("cpu: PCScoreRun: %d query rows of %d, scores %d (stride %d), RoPE %d and %d, work %d for %d blocks of %d",
			m, d, len(s), lds, len(cos), len(sin), len(work), nb, n))
	}
	pcScoreRun(r, nb, s, lds, q, m, scale, cos, sin, r0, r1, work)
	return true
}

// PCAddRun adds to acc, macc and wsum the sums PCAddRunEnd turns into
// rows: for each of the m weight rows of w (row i's weight of block j's row
// k at w[i*ldw + j*N + k], rows outside [r0, N) of the first block and
// [0, r1) of the last weighing nothing), the weighted sums of the blocks'
// latents (acc, PCRunAccLen(m, C) floats), of their means weighted by each
// block's sum of weights (macc, m x M) and the sums of weights (wsum, m).
// Runs may follow one another into the same sums; they start at zero. It
// reports false, doing nothing, where PCRunSupported does, and panics if
// the lengths do not match. work holds PCRunWorkLen floats.
func PCAddRun(r *PCRun, nb int, w []float32, ldw, m, r0, r1 int, acc, macc, wsum, work []float32) bool {
	if !PCRunSupported(r.N, r.D, r.C) {
		return false
	}
	r.check("PCAddRun", nb, r0, r1)
	n, c := r.N, r.C
	if m < 1 || ldw < nb*n || len(w) < (m-1)*ldw+(nb-1)*n+r1 || len(acc) < PCRunAccLen(m, c) || len(macc) < m*r.M || len(wsum) < m ||
		len(work) < PCRunWorkLen(n, r.D, c) {
		panic(fmt.Sprintf("cpu: PCAddRun: %d weight rows, weights %d (stride %d), acc %d, macc %d, wsum %d, work %d for %d blocks of %d",
			m, len(w), ldw, len(acc), len(macc), len(wsum), len(work), nb, n))
	}
	pcAddRun(r, nb, w, ldw, m, r0, r1, acc, macc, wsum, work)
	return true
}

// PCAddRunEnd adds to each of the m rows of o (D values) the rows PCAddRun's
// sums stand for: each component's sum times its basis row, each mean's
// sum times its row, and the sum of weights times Mu. It reports false,
// doing nothing, where PCRunSupported does.
func PCAddRunEnd(r *PCRun, o []float32, m int, acc, macc, wsum []float32) bool {
	if !PCRunSupported(r.N, r.D, r.C) {
		return false
	}
	d, c, mc := r.D, r.C, r.M
	if m < 1 || len(o) < m*d || len(acc) < PCRunAccLen(m, c) || len(macc) < m*mc || len(wsum) < m || len(r.Mu) < d ||
		len(r.MeanRows) < mc*d || len(r.Coded) < c*d {
		panic(fmt.Sprintf("cpu: PCAddRunEnd: %d rows of %d into %d, acc %d, macc %d, wsum %d", m, d, len(o), len(acc), len(macc), len(wsum)))
	}
	pcAddRunEnd(r, o, m, acc, macc, wsum)
	return true
}
