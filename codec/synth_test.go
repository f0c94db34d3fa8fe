package codec

import (
	"math"
	"math/rand/v2"
)

// kind selects the statistics of a synthetic block.
type kind int

const (
	gaussian  kind = iota // i.i.d. N(0, 1)
	studentT              // i.i.d. Student-t, df = 3
	keyLike               // channel offsets, outlier channels, low rank + t noise
	valueLike             // weaker structure, lighter tails
)

func (k kind) String() string {
	return [...]string{"gauss", "t3", "K-like", "V-like"}[k]
}

func studentTSample(r *rand.Rand, df float64) float64 {
	// t = z / sqrt(chi2/df), chi2 as a sum of df squared normals (df integer).
	var c float64
	for i := 0; i < int(df); i++ {
		g := r.NormFloat64()
		c += g * g
	}
	return r.NormFloat64() / math.Sqrt(c/df)
}

// synth returns an n x d block. The head (mean, outlier channels, low-rank
// directions) is fixed by headSeed; tokens by seed, so blocks of one head
// share structure as real K/V blocks of one head do.
func synth(k kind, n, d int, headSeed, seed uint64) []float32 {
	x := make([]float32, n*d)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	switch k {
	case gaussian:
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	case studentT:
		for i := range x {
			x[i] = float32(studentTSample(r, 3))
		}
		return x
	}
	h := rand.New(rand.NewPCG(headSeed, 0x4ead))
	mean := make([]float64, d)
	chScale := make([]float64, d)
	meanAmp, rank, noise, df, nOut := 1.0, 6, 0.5, 3.0, 3
	if k == valueLike {
		meanAmp, rank, noise, df, nOut = 0.2, 4, 0.7, 5, 1
	}
	for j := range mean {
		mean[j] = meanAmp * h.NormFloat64()
		chScale[j] = 1
	}
	for t := 0; t < nOut; t++ { // a few massive channels, as in real keys
		j := h.IntN(d)
		mean[j] = (6 + 6*h.Float64()) * meanAmp * sign(h)
		chScale[j] = 3
	}
	dirs := make([]float64, rank*d)
	amp := make([]float64, rank)
	for c := 0; c < rank; c++ {
		amp[c] = 3 / float64(c+1)
		var nn float64
		for j := 0; j < d; j++ {
			dirs[c*d+j] = h.NormFloat64()
			nn += dirs[c*d+j] * dirs[c*d+j]
		}
		for j := 0; j < d; j++ {
			dirs[c*d+j] *= math.Sqrt(float64(d) / nn) // unit-RMS per channel
		}
	}
	z := make([]float64, rank)
	for i := 0; i < n; i++ {
		for c := range z {
			z[c] = 0.7*z[c] + 0.71*r.NormFloat64() // tokens drift smoothly
		}
		for j := 0; j < d; j++ {
			v := mean[j]
			for c := range z {
				v += amp[c] * z[c] * dirs[c*d+j] / math.Sqrt(float64(rank))
			}
			v += noise * studentTSample(r, df)
			x[i*d+j] = float32(v * chScale[j])
		}
	}
	return x
}

func sign(r *rand.Rand) float64 {
	if r.IntN(2) == 0 {
		return -1
	}
	return 1
}

// relErr returns sum (x - y)^2 / sum (x - colmean(x))^2: the error relative
// to the block's centred energy, so a codec gets no credit for a large mean.
func relErr(x, y []float32, n, d int) float64 {
	mean := make([]float64, d)
	for i := 0; i < n; i++ {
		for j := 0; j < d; j++ {
			mean[j] += float64(x[i*d+j]) / float64(n)
		}
	}
	var num, den float64
	for i := 0; i < n; i++ {
		for j := 0; j < d; j++ {
			e := float64(x[i*d+j]) - float64(y[i*d+j])
			c := float64(x[i*d+j]) - mean[j]
			num += e * e
			den += c * c
		}
	}
	return num / den
}
