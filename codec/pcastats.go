package codec

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// A PCAAccumulator gathers the moments of cached blocks (rows of d values)
// that PCAStats are computed from: the sum of the rows, their scatter, and
// the scatter of the block means, so that the within-block and the
// between-block covariance both follow.
type PCAAccumulator struct {
	d       int
	rows    int64
	blocks  int64
	sum     []float64 // Σ x
	scatter []float64 // Σ x xᵀ, upper triangle
	means   []float64 // Σ_blocks n·x̄ x̄ᵀ, upper triangle
	bsum    []float64 // Σ_blocks x̄
	bmeans  []float64 // Σ_blocks x̄ x̄ᵀ, upper triangle
	mean    []float64 // one block's mean
}

// NewPCAAccumulator returns an empty accumulator for rows of d values.
func NewPCAAccumulator(d int) *PCAAccumulator {
	return &PCAAccumulator{d: d, sum: make([]float64, d), scatter: make([]float64, d*d), means: make([]float64, d*d),
		bsum: make([]float64, d), bmeans: make([]float64, d*d), mean: make([]float64, d)}
}

// AddBlock accumulates one block of n rows (n*d values, all finite).
func (a *PCAAccumulator) AddBlock(x []float32, n int) error {
	d := a.d
	if n <= 0 || len(x) != n*d {
		return fmt.Errorf("codec: pca: block of %d values, want n*d with n > 0 and d = %d", len(x), d)
	}
	for i, v := range x {
		if !finite32(v) {
			return fmt.Errorf("codec: pca: row %d value %d is %v", i/d, i%d, v)
		}
	}
	clear(a.mean)
	for i := 0; i < n; i++ {
		row := x[i*d : (i+1)*d]
		for p, vp := range row {
			fp := float64(vp)
			a.mean[p] += fp
			s := a.scatter[p*d : (p+1)*d]
			for q := p; q < d; q++ {
				s[q] += fp * float64(row[q])
			}
		}
	}
	for p := range a.mean {
		a.sum[p] += a.mean[p]
		a.mean[p] /= float64(n)
		a.bsum[p] += a.mean[p]
	}
	for p, mp := range a.mean {
		for q := p; q < d; q++ {
			a.means[p*d+q] += float64(n) * mp * a.mean[q]
			a.bmeans[p*d+q] += mp * a.mean[q]
		}
	}
	a.rows += int64(n)
	a.blocks++
	return nil
}

// Merge adds the moments of b, of the same dimension, to a.
func (a *PCAAccumulator) Merge(b *PCAAccumulator) error {
	if b.d != a.d {
		return fmt.Errorf("codec: pca: merging rows of %d values into %d", b.d, a.d)
	}
	for _, p := range [][2][]float64{{a.sum, b.sum}, {a.scatter, b.scatter}, {a.means, b.means}, {a.bsum, b.bsum}, {a.bmeans, b.bmeans}} {
		for i, v := range p[1] {
			p[0][i] += v
		}
	}
	a.rows += b.rows
	a.blocks += b.blocks
	return nil
}

// Blocks returns the number of blocks added.
func (a *PCAAccumulator) Blocks() int64 { return a.blocks }

// Stats returns the statistics of the blocks added: the mean row, the
// eigenvectors of the within-block covariance by decreasing eigenvalue,
// those eigenvalues, and each component's variance of the block means.
func (a *PCAAccumulator) Stats() (*PCAStats, error) {
	d := a.d
	if a.blocks == 0 {
		return nil, fmt.Errorf("codec: pca: no blocks added")
	}
	inv, invB := 1/float64(a.rows), 1/float64(a.blocks)
	mu := make([]float64, d)
	bmu := make([]float64, d)
	for p := range mu {
		mu[p] = a.sum[p] * inv
		bmu[p] = a.bsum[p] * invB
	}
	// Within-block covariance W = (Σ x xᵀ - Σ n x̄ x̄ᵀ) / rows, and the
	// block means' covariance around the mean row B = Σ x̄ x̄ᵀ / blocks -
	// 2 sym(x̄_avg μᵀ) + μ μᵀ, both full.
	w := make([]float64, d*d)
	bt := make([]float64, d*d)
	for p := 0; p < d; p++ {
		for q := p; q < d; q++ {
			v := (a.scatter[p*d+q] - a.means[p*d+q]) * inv
			b := a.bmeans[p*d+q]*invB - bmu[p]*mu[q] - mu[p]*bmu[q] + mu[p]*mu[q]
			w[p*d+q], w[q*d+p] = v, v
			bt[p*d+q], bt[q*d+p] = b, b
		}
	}
	vals := make([]float64, d)
	var wq [1]float64
	sym := blas64.Symmetric{N: d, Stride: d, Data: w, Uplo: blas.Upper}
	lapack64.Syev(lapack.EVCompute, sym, vals, wq[:], -1)
	work := make([]float64, int(wq[0]))
	if !lapack64.Syev(lapack.EVCompute, sym, vals, work, len(work)) {
		return nil, fmt.Errorf("codec: pca: eigendecomposition of the %d x %d covariance did not converge", d, d)
	}
	st := &PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for p, v := range mu {
		st.Mean[p] = float32(v)
	}
	for j := 0; j < d; j++ {
		col := d - 1 - j // Syev sorts ascending; column col of w is the vector
		st.Var[j] = float32(max(vals[col], 0))
		u := st.Basis[j*d : (j+1)*d]
		var nn float64
		for p := 0; p < d; p++ {
			nn += w[p*d+col] * w[p*d+col]
		}
		s := 1 / math.Sqrt(nn)
		for p := range u {
			u[p] = float32(w[p*d+col] * s)
		}
		var between float64
		for p := 0; p < d; p++ {
			var r float64
			for q := 0; q < d; q++ {
				r += bt[p*d+q] * float64(u[q])
			}
			between += float64(u[p]) * r
		}
		st.Between[j] = float32(max(between, 0))
	}
	return st, st.Validate()
}
