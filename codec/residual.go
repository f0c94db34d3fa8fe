package codec

import (
	"math"
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
	if err := checkKakeyaInput(name, x, n, d); err != nil {
		return dst, err
	}
	x = x[:n*d]
	p := NextPow2(d)
	sc := k.scratch()
	defer k.pool.Put(sc)
	r := k.skeleton(sc, x, n, d)
	if r > 0 {
		// quantCoef rounds sc.coef in place to the decoded values; the
		// bytes it appends are not needed here.
		k.quantCoef(nil, sc, n, r)
		subtractSkeleton(sc, n, d, r)
	}
	for i := 0; i < n; i++ {
		nrm, cand := k.residualRow(sc, i, d, p)
		if nrm == 0 {
			continue
		}
		v := sc.v[:p]
		for _, j := range cand {
			v[j] = float32(math.NaN()) // marks an exact coordinate
		}
		for _, u := range v {
			if u == u {
				dst = append(dst, u)
			}
		}
	}
	return dst, nil
}
