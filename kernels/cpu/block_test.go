package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// blockShapes cover the SIMD paths (groups of four rows, 16- and 8-column
// steps, 64-column register blocks) and their scalar tails.
var blockShapes = []struct{ n, d int }{
	{0, 64}, {1, 64}, {3, 64}, {4, 64}, {7, 64}, {16, 64}, {5, 128}, {9, 8}, {6, 24}, {5, 80}, {3, 7}, {2, 2},
}

func TestDotBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	for _, s := range blockShapes {
		t.Run(fmt.Sprintf("n%d_d%d", s.n, s.d), func(t *testing.T) {
			q, keys := randVec(rng, s.d), randVec(rng, s.n*s.d)
			out := make([]float32, s.n+1)
			out[s.n] = 42 // past n: must stay untouched
			DotBlock(out, q, keys, s.n, s.d)
			for r := range s.n {
				var want, mag float64
				for c := range s.d {
					p := float64(q[c]) * float64(keys[r*s.d+c])
					want += p
					mag += math.Abs(p)
				}
				if !closeTo(out[r], want, 1e-6*mag+1e-30) {
					t.Errorf("row %d = %v, want %v", r, out[r], want)
				}
			}
			if out[s.n] != 42 {
				t.Errorf("out[%d] overwritten: %v", s.n, out[s.n])
			}
			// A row's value must not depend on its place in the block: the
			// same row alone, or in a shifted block, gives the same bits.
			for r := range s.n {
				var one [1]float32
				DotBlock(one[:], q, keys[r*s.d:(r+1)*s.d], 1, s.d)
				if one[0] != out[r] {
					t.Errorf("row %d alone = %v, in the block %v", r, one[0], out[r])
				}
			}
		})
	}
}

func TestAxpyBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2))
	for _, s := range blockShapes {
		t.Run(fmt.Sprintf("n%d_d%d", s.n, s.d), func(t *testing.T) {
			w, vals, y := randVec(rng, s.n), randVec(rng, s.n*s.d), randVec(rng, s.d)
			got := append([]float32(nil), y...)
			AxpyBlock(got, w, vals, s.n, s.d)
			// The block must equal row-by-row Axpy bit for bit: attention
			// relies on it to give the same result for every block size.
			seq := append([]float32(nil), y...)
			for r := range s.n {
				Axpy(w[r], vals[r*s.d:(r+1)*s.d], seq)
			}
			for j := range s.d {
				want, mag := float64(y[j]), math.Abs(float64(y[j]))
				for r := range s.n {
					p := float64(w[r]) * float64(vals[r*s.d+j])
					want += p
					mag += math.Abs(p)
				}
				if !closeTo(got[j], want, 1e-6*mag+1e-30) {
					t.Errorf("out[%d] = %v, want %v", j, got[j], want)
				}
				if got[j] != seq[j] {
					t.Errorf("out[%d] = %v, successive Axpy gave %v", j, got[j], seq[j])
				}
			}
		})
	}
}

func TestRoPEBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, s := range blockShapes {
		if s.d%2 != 0 {
			continue
		}
		t.Run(fmt.Sprintf("n%d_d%d", s.n, s.d), func(t *testing.T) {
			h := s.d / 2
			src := randVec(rng, s.n*s.d)
			cos, sin := make([]float32, s.n*h), make([]float32, s.n*h)
			for i := range cos {
				a := rng.Float64() * 2 * math.Pi
				cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
			}
			got := make([]float32, s.n*s.d)
			RoPEBlock(got, src, cos, sin, s.n, s.d)
			for r := range s.n {
				want := append([]float32(nil), src[r*s.d:(r+1)*s.d]...)
				RoPE(want, cos[r*h:(r+1)*h], sin[r*h:(r+1)*h])
				for j, v := range want {
					if got[r*s.d+j] != v {
						t.Fatalf("row %d [%d] = %v, RoPE gave %v", r, j, got[r*s.d+j], v)
					}
				}
			}
			// In place is allowed.
			RoPEBlock(src, src, cos, sin, s.n, s.d)
			for i := range got {
				if src[i] != got[i] {
					t.Fatalf("in place [%d] = %v, want %v", i, src[i], got[i])
				}
			}
		})
	}
}

func TestBlockScalarMatchesSIMD(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, d = 13, 64
	q, keys, w := randVec(rng, d), randVec(rng, n*d), randVec(rng, n)
	a, b := make([]float32, n), make([]float32, n)
	DotBlock(a, q, keys, n, d)
	dotBlockScalar(b, q, keys, d)
	for r := range a {
		if math.Abs(float64(a[r]-b[r])) > 1e-5*(1+math.Abs(float64(b[r]))) {
			t.Errorf("DotBlock row %d = %v, scalar %v", r, a[r], b[r])
		}
	}
	x, y := make([]float32, d), make([]float32, d)
	AxpyBlock(x, w, keys, n, d)
	axpyBlockScalar(y, w, keys)
	for j := range x {
		if math.Abs(float64(x[j]-y[j])) > 1e-5*(1+math.Abs(float64(y[j]))) {
			t.Errorf("AxpyBlock [%d] = %v, scalar %v", j, x[j], y[j])
		}
	}
}

func TestBlockLengthPanics(t *testing.T) {
	f := make([]float32, 64)
	for name, fn := range map[string]func(){
		"DotBlock q":     func() { DotBlock(f, f[:7], f, 2, 8) },
		"DotBlock keys":  func() { DotBlock(f, f[:8], f[:15], 2, 8) },
		"DotBlock out":   func() { DotBlock(f[:1], f[:8], f, 2, 8) },
		"AxpyBlock out":  func() { AxpyBlock(f[:7], f, f, 2, 8) },
		"AxpyBlock vals": func() { AxpyBlock(f[:8], f, f[:15], 2, 8) },
		"AxpyBlock w":    func() { AxpyBlock(f[:8], f[:1], f, 2, 8) },
		"RoPEBlock odd":  func() { RoPEBlock(f, f, f, f, 2, 7) },
		"RoPEBlock cos":  func() { RoPEBlock(f, f, f[:7], f, 2, 8) },
	} {
		wantPanic(t, name, fn)
	}
}

func TestBlockAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	const n, d = 16, 64
	q, keys, out, w := randVec(rng, d), randVec(rng, n*d), make([]float32, n), randVec(rng, n)
	cs := randVec(rng, n*d/2)
	dst := make([]float32, n*d)
	if a := testing.AllocsPerRun(10, func() {
		DotBlock(out, q, keys, n, d)
		AxpyBlock(q, w, keys, n, d)
		RoPEBlock(dst, keys, cs, cs, n, d)
	}); a != 0 {
		t.Errorf("%v allocations per run, want 0", a)
	}
}

// tileShapes cover ScoreBlock's and MixBlock's tiles (4 queries × 4 keys,
// 6 outputs × 64 values) whole and cut short on every side.
var tileShapes = []struct{ m, n, d int }{
	{1, 1, 2}, {1, 16, 64}, {7, 16, 64}, {56, 64, 64}, {13, 17, 80}, {5, 3, 128}, {6, 33, 130}, {9, 5, 8}, {4, 4, 7},
	{3, 9, 40}, {7, 5, 24}, {8, 3, 112}, {7, 64, 72}, {10, 9, 48}, {11, 40, 64}, {64, 40, 64}, {3, 0, 64}, {0, 5, 64},
}

// tileKernels are the block kernels' implementations this machine runs:
// the exported ones (AVX-512 where the CPU has it) and the per-row
// fallbacks.
var tileKernels = []struct {
	name  string
	score func(s []float32, lds int, q []float32, m int, keys []float32, n, d int, factor float32)
	mix   func(o []float32, m int, p []float32, ldp int, vals []float32, n, d int)
}{
	{"best", ScoreBlock, MixBlock},
	{"rows", scoreRows, mixRows},
}

func init() {
	if hasAVX2C && hasAVX512 {
		// The AVX2 kernels too, which best does not reach here.
		tileKernels = append(tileKernels, struct {
			name  string
			score func(s []float32, lds int, q []float32, m int, keys []float32, n, d int, factor float32)
			mix   func(o []float32, m int, p []float32, ldp int, vals []float32, n, d int)
		}{"avx2", scoresAVX2, mixAVX2})
	}
}

func TestScoreBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, kn := range tileKernels {
		for _, s := range tileShapes {
			t.Run(fmt.Sprintf("%s/m%d_n%d_d%d", kn.name, s.m, s.n, s.d), func(t *testing.T) {
				const factor = 0.125
				lds := s.n + 3
				q, keys := randVec(rng, s.m*s.d), randVec(rng, s.n*s.d)
				out := make([]float32, s.m*lds)
				for i := range out {
					out[i] = 42 // past n in each row: must stay untouched
				}
				kn.score(out, lds, q, s.m, keys, s.n, s.d, factor)
				for i := range s.m {
					for k := range lds {
						got := out[i*lds+k]
						if k >= s.n {
							if got != 42 {
								t.Fatalf("s[%d][%d] overwritten: %v", i, k, got)
							}
							continue
						}
						var want, mag float64
						for c := range s.d {
							p := float64(q[i*s.d+c]) * float64(keys[k*s.d+c])
							want += p
							mag += math.Abs(p)
						}
						if !closeTo(got, factor*want, 1e-6*factor*mag+1e-30) {
							t.Errorf("s[%d][%d] = %v, want %v", i, k, got, factor*want)
						}
						// A score must not depend on where its query and
						// key sit: the pair alone gives the same bits.
						var one [1]float32
						kn.score(one[:], 1, q[i*s.d:(i+1)*s.d], 1, keys[k*s.d:(k+1)*s.d], 1, s.d, factor)
						if one[0] != got {
							t.Errorf("s[%d][%d] = %v, alone %v", i, k, got, one[0])
						}
					}
				}
			})
		}
	}
}

func TestMixBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 6))
	for _, kn := range tileKernels {
		for _, s := range tileShapes {
			t.Run(fmt.Sprintf("%s/m%d_n%d_d%d", kn.name, s.m, s.n, s.d), func(t *testing.T) {
				ldp := s.n + 2
				p, vals, o := randVec(rng, s.m*ldp), randVec(rng, s.n*s.d), randVec(rng, s.m*s.d+1)
				got := append([]float32(nil), o...)
				kn.mix(got, s.m, p, ldp, vals, s.n, s.d)
				if got[s.m*s.d] != o[s.m*s.d] {
					t.Errorf("o[%d] past m rows overwritten", s.m*s.d)
				}
				for i := range s.m {
					// Each output row, alone and with its value rows split
					// in two calls, must give the same bits: attention's
					// results do not depend on block size or on the rows
					// beside.
					one := append([]float32(nil), o[i*s.d:(i+1)*s.d]...)
					h := s.n / 2
					kn.mix(one, 1, p[i*ldp:], ldp, vals, h, s.d)
					kn.mix(one, 1, p[i*ldp+h:], ldp, vals[h*s.d:], s.n-h, s.d)
					for j := range s.d {
						want, mag := float64(o[i*s.d+j]), math.Abs(float64(o[i*s.d+j]))
						for k := range s.n {
							x := float64(p[i*ldp+k]) * float64(vals[k*s.d+j])
							want += x
							mag += math.Abs(x)
						}
						g := got[i*s.d+j]
						if !closeTo(g, want, 1e-6*mag+1e-30) {
							t.Errorf("o[%d][%d] = %v, want %v", i, j, g, want)
						}
						if one[j] != g {
							t.Errorf("o[%d][%d] = %v, the row alone in two calls %v", i, j, g, one[j])
						}
					}
				}
			})
		}
	}
}
