package codec

import (
	"fmt"
	"math"
	"slices"
)

// ScaledResiduals appends to dst the residual coordinates Encode would
// quantize for the block x (n rows of dimension d): after the mean, the PCA
// skeleton (with its coefficients rounded as the decoder sees them), the
// randomized Walsh–Hadamard rotation and the per-row scaling to unit
// variance. Coordinates Encode would store exactly as outliers, and rows
// whose residual is zero, are left out, so at most n·NextPow2(d) values are
// appended. Training a Codebook on these values (TrainLloydMax) fits it to
// the data the codec actually quantizes.
func (k *Kakeya) ScaledResiduals(dst []float32, x []float32, n, d int) ([]float32, error) {
	const name = "kakeya: residuals"
	if err := checkShape(name, n, d, len(x), "input"); err != nil {
		return dst, err
	}
	x = x[:n*d]
	am, ok := absMaxFinite(x)
	if !ok {
		return dst, nonFiniteErr(name, x, d)
	}
	if 2*am*float32(math.Sqrt(float64(d))) > maxF16 {
		return dst, fmt.Errorf("codec: %s: |value| %v too large for fp16 norms and coefficients", name, am)
	}
	p := NextPow2(d)
	sc := k.scratch()
	defer k.pool.Put(sc)
	r := k.skeleton(sc, x, n, d)
	if r > 0 {
		// quantCoef rounds sc.coef in place to the decoded values; the
		// bytes it appends are not needed here.
		k.quantCoef(nil, sc, n, r)
		for i := 0; i < n; i++ {
			row := sc.xc[i*d : (i+1)*d]
			for c := 0; c < r; c++ {
				cf := sc.coef[i*r+c]
				for a, bv := range sc.basis[c*d : (c+1)*d] {
					row[a] -= cf * bv
				}
			}
		}
	}
	sc.v = growF32(sc.v, p)
	sc.cand = growI32(sc.cand, p)[:0]
	thr := k.opt.OutlierThreshold
	useOut := thr > 0 && k.opt.MaxOutliers > 0
	sqrtP := float32(math.Sqrt(float64(p)))
	for i := 0; i < n; i++ {
		v := sc.v
		copy(v, sc.xc[i*d:(i+1)*d])
		clear(v[d:])
		for j := range v {
			v[j] *= k.signs[j]
		}
		fwht(v)
		var ss float64
		for _, t := range v {
			ss += float64(t) * float64(t)
		}
		nrm := roundF16(float32(math.Sqrt(ss)))
		if nrm == 0 {
			continue
		}
		scale := sqrtP / nrm
		cand := sc.cand[:0]
		for j, t := range v {
			u := t * scale
			v[j] = u
			if useOut && (u > thr || u < -thr) {
				cand = append(cand, int32(j))
			}
		}
		if len(cand) > k.opt.MaxOutliers {
			// The same choice as Encode: the largest magnitudes win.
			slices.SortFunc(cand, func(a, b int32) int {
				return cmpDesc(abs32(v[a]), abs32(v[b]))
			})
			cand = cand[:k.opt.MaxOutliers]
		}
		for _, j := range cand {
			v[j] = float32(math.NaN()) // marks an exact coordinate
		}
		for _, u := range v {
			if u == u {
				dst = append(dst, u)
			}
		}
		sc.cand = cand
	}
	return dst, nil
}
