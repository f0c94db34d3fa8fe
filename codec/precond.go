package codec

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// Cholesky returns the row-major lower-triangular L (d x d) with
// Σ + ridge·(tr Σ/d)·I = L Lᵀ for the symmetric d x d matrix cov. The ridge,
// relative to the mean eigenvalue, keeps L well conditioned when the query
// covariance is nearly singular.
func Cholesky(cov []float64, d int, ridge float64) ([]float32, error) {
	if d <= 0 || len(cov) != d*d {
		return nil, fmt.Errorf("codec: cholesky: covariance has %d values, want d*d = %d", len(cov), d*d)
	}
	if !(ridge >= 0) || math.IsInf(ridge, 0) {
		return nil, fmt.Errorf("codec: cholesky: ridge %v must be finite and >= 0", ridge)
	}
	tr := 0.0
	for i := 0; i < d; i++ {
		tr += cov[i*d+i]
	}
	add := ridge * tr / float64(d)
	s := mat.NewSymDense(d, nil)
	for i := 0; i < d; i++ {
		for j := i; j < d; j++ {
			a, b := cov[i*d+j], cov[j*d+i]
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return nil, fmt.Errorf("codec: cholesky: covariance[%d][%d] is %v", i, j, a)
			}
			if math.Abs(a-b) > 1e-6*(math.Abs(a)+math.Abs(b))+1e-12 {
				return nil, fmt.Errorf("codec: cholesky: covariance not symmetric at [%d][%d]: %v vs %v", i, j, a, b)
			}
			v := (a + b) / 2
			if i == j {
				v += add
			}
			s.SetSym(i, j, v)
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(s) {
		return nil, fmt.Errorf("codec: cholesky: covariance (+ ridge %g) is not positive definite", ridge)
	}
	var l mat.TriDense
	ch.LTo(&l)
	out := make([]float32, d*d)
	for i := 0; i < d; i++ {
		for j := 0; j <= i; j++ {
			out[i*d+j] = float32(l.At(i, j))
		}
	}
	return out, nil
}

// Preconditioned codes keys in the query-whitened space: with the query
// second moment Σ = L Lᵀ it encodes y = k·L (row vector), so the inner
// codec's squared error ||Δy||² equals Δkᵀ Σ Δk = E_q[(q·Δk)²], the error
// attention sees. Decode inverts with L⁻¹. It costs what Inner costs.
type Preconditioned struct {
	Inner Codec
	L     []float32 // d x d row-major, lower triangular
	Linv  []float32 // its inverse, lower triangular
	d     int
	pool  scratchPool
}

// NewPreconditioned wraps inner with the lower-triangular factor L (d x d).
func NewPreconditioned(inner Codec, L []float32, d int) (*Preconditioned, error) {
	if inner == nil {
		return nil, fmt.Errorf("codec: preconditioned: inner codec is nil")
	}
	if d <= 0 || len(L) != d*d {
		return nil, fmt.Errorf("codec: preconditioned: L has %d values, want d*d = %d", len(L), d*d)
	}
	t := mat.NewTriDense(d, mat.Lower, nil)
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			v := L[i*d+j]
			if j > i && v != 0 {
				return nil, fmt.Errorf("codec: preconditioned: L[%d][%d] = %v above the diagonal", i, j, v)
			}
			if !finite32(v) {
				return nil, fmt.Errorf("codec: preconditioned: L[%d][%d] is %v", i, j, v)
			}
			if j <= i {
				t.SetTri(i, j, float64(v))
			}
		}
		if L[i*d+i] <= 0 {
			return nil, fmt.Errorf("codec: preconditioned: L[%d][%d] = %v, want > 0", i, i, L[i*d+i])
		}
	}
	var inv mat.TriDense
	if err := inv.InverseTri(t); err != nil {
		return nil, fmt.Errorf("codec: preconditioned: inverting L: %w", err)
	}
	p := &Preconditioned{Inner: inner, L: append([]float32(nil), L...), Linv: make([]float32, d*d), d: d}
	for i := 0; i < d; i++ {
		for j := 0; j <= i; j++ {
			p.Linv[i*d+j] = float32(inv.At(i, j))
		}
	}
	return p, nil
}

// Name is "pre+" followed by the inner codec's name.
func (p *Preconditioned) Name() string { return "pre+" + p.Inner.Name() }

// Encode whitens x and encodes it with the inner codec.
func (p *Preconditioned) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	name := p.Name()
	if d != p.d {
		return dst, fmt.Errorf("codec: %s: d=%d, preconditioner built for %d", name, d, p.d)
	}
	if err := checkShape(name, n, d, len(x), "input"); err != nil {
		return dst, err
	}
	sc := p.pool.get()
	defer p.pool.put(sc)
	sc.f = growF32(sc.f, n*d)
	clear(sc.f[:n*d])
	cpu.MixBlock(sc.f, n, x, d, p.L, d, d)
	return p.Inner.Encode(dst, sc.f, n, d)
}

// Decode decodes with the inner codec and undoes the whitening.
func (p *Preconditioned) Decode(dst []float32, src []byte, n, d int) error {
	name := p.Name()
	if d != p.d {
		return fmt.Errorf("codec: %s: d=%d, preconditioner built for %d", name, d, p.d)
	}
	if err := checkShape(name, n, d, len(dst), "destination"); err != nil {
		return err
	}
	sc := p.pool.get()
	defer p.pool.put(sc)
	sc.f = growF32(sc.f, n*d)
	if err := p.Inner.Decode(sc.f, src, n, d); err != nil {
		return err
	}
	// Every row at once, in MixBlock's tiles: a per-row triangular
	// product was most of a preconditioned cache's decode time.
	clear(dst[:n*d])
	cpu.MixBlock(dst, n, sc.f, d, p.Linv, d, d)
	return nil
}

// Unwrap returns the inner codec, whose format the blocks have.
func (p *Preconditioned) Unwrap() Codec { return p.Inner }

// Factor returns L, by which Encode whitens the rows (y = x·L, summed
// over x's values in order, one fused multiply-add a term on the SIMD
// paths); the caller must not modify it.
func (p *Preconditioned) Factor() []float32 { return p.L }

// InverseFactor returns Linv, by which Decode multiplies the inner codec's
// rows; the caller must not modify it.
func (p *Preconditioned) InverseFactor() []float32 { return p.Linv }
