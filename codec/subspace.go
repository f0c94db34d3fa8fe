package codec

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// subspaceIters is the number of block power iterations of topEigen. The
// skeleton only has to capture most of the top variance (the residual coder
// absorbs the rest), so a few iterations with oversampling suffice.
const subspaceIters = 8

// topEigen writes the k leading eigenvectors of the symmetric d x d matrix
// c (row-major, both triangles filled) as the rows of vecs (k x d) and their
// eigenvalues, descending, into vals. It runs block power iteration on k+p
// vectors and a Rayleigh–Ritz step: O(d²(k+p)) per iteration instead of the
// O(d³) of a full eigendecomposition. q, z (d*(k+p)), t ((k+p)²), w (k+p)
// and work are caller scratch.
func topEigen(c []float64, d, k int, vecs []float32, vals []float64, sc *kakeyaScratch) {
	m := min(k+4, d)
	sc.qv = growF64(sc.qv, d*m)
	sc.zv = growF64(sc.zv, d*m)
	q, z := sc.qv, sc.zv
	// Deterministic start: a fixed pseudo-random ±1 pattern per column.
	state := uint64(0x9e3779b97f4a7c15)
	for i := range q {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		q[i] = float64(int64(state>>62&1)*2 - 1)
	}
	orthonormalize(q, d, m)
	for it := 0; it < subspaceIters; it++ {
		mulSym(z, c, q, d, m)
		orthonormalize(z, d, m)
		q, z = z, q
	}
	// Rayleigh–Ritz: T = Qᵀ C Q (m x m), eigenvectors rotate Q.
	mulSym(z, c, q, d, m)
	sc.tv = growF64(sc.tv, m*m)
	t := sc.tv
	for a := 0; a < m; a++ {
		for b := a; b < m; b++ {
			var s float64
			for i := 0; i < d; i++ {
				s += q[i*m+a] * z[i*m+b]
			}
			t[a*m+b] = s
		}
	}
	sc.wv = growF64(sc.wv, m)
	if sc.smallWorkM != m {
		var wq [1]float64
		lapack64.Syev(lapack.EVCompute, blas64.Symmetric{N: m, Stride: m, Data: t, Uplo: blas.Upper}, sc.wv, wq[:], -1)
		sc.smallWork = growF64(sc.smallWork, int(wq[0]))
		sc.smallWorkM = m
	}
	lapack64.Syev(lapack.EVCompute, blas64.Symmetric{N: m, Stride: m, Data: t, Uplo: blas.Upper}, sc.wv, sc.smallWork, len(sc.smallWork))
	for j := 0; j < k; j++ {
		col := m - 1 - j // ascending order
		vals[j] = sc.wv[col]
		for i := 0; i < d; i++ {
			var s float64
			for a := 0; a < m; a++ {
				s += q[i*m+a] * t[a*m+col]
			}
			vecs[j*d+i] = float32(s)
		}
	}
}

// mulSym sets z = c q for c d x d and q d x m, both row-major.
func mulSym(z, c, q []float64, d, m int) {
	clear(z[:d*m])
	for i := 0; i < d; i++ {
		zi := z[i*m : (i+1)*m]
		for l, cv := range c[i*d : (i+1)*d] {
			if cv == 0 {
				continue
			}
			ql := q[l*m : (l+1)*m]
			for a := range zi {
				zi[a] += cv * ql[a]
			}
		}
	}
}

// orthonormalize runs modified Gram–Schmidt on the m columns of q (d x m);
// a column that collapses is replaced by a unit coordinate vector.
func orthonormalize(q []float64, d, m int) {
	for a := 0; a < m; a++ {
		for b := 0; b < a; b++ {
			var s float64
			for i := 0; i < d; i++ {
				s += q[i*m+a] * q[i*m+b]
			}
			for i := 0; i < d; i++ {
				q[i*m+a] -= s * q[i*m+b]
			}
		}
		var nn float64
		for i := 0; i < d; i++ {
			nn += q[i*m+a] * q[i*m+a]
		}
		if nn < 1e-300 {
			for i := 0; i < d; i++ {
				q[i*m+a] = 0
			}
			q[(a%d)*m+a] = 1
			continue
		}
		inv := 1 / math.Sqrt(nn)
		for i := 0; i < d; i++ {
			q[i*m+a] *= inv
		}
	}
}
