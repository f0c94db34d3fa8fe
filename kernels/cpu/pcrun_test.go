package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// pcRunCase is a run of blocks of random codes for PCScoreRun and
// PCAddRun: nb blocks of n rows of d values, c coded components and mc
// means, read from code planes or, with lat, from latents (format 9).
type pcRunCase struct {
	nb, n, d, c, mc int
	lat             bool
}

// newPCRun returns a PCRun of the case's shape with random fields, basis
// rows and codes of widths 1 to 6 (every width where c allows).
func newPCRun(rng *rand.Rand, tc pcRunCase) *PCRun {
	r := &PCRun{N: tc.n, D: tc.d, C: tc.c, M: tc.mc, Levels: randLevels(rng)}
	r.Widths = make([]uint8, tc.c)
	for t := range r.Widths {
		r.Widths[t] = uint8(1 + (t*5+rng.IntN(2))%PlaneMaxBits)
		r.PlaneBytes += PlaneBytes(tc.n, int(r.Widths[t]))
	}
	r.Fields = randVec(rng, tc.nb*(tc.mc+tc.c))
	r.Mu, r.MeanRows, r.Coded = randVec(rng, tc.d), randVec(rng, tc.mc*tc.d), randVec(rng, tc.c*tc.d)
	if tc.lat {
		r.Lat = randVec(rng, tc.nb*tc.c*tc.n)
		return r
	}
	r.Planes = make([]byte, tc.nb*r.PlaneBytes)
	for i := range r.Planes {
		r.Planes[i] = byte(rng.Uint32())
	}
	return r
}

// latents returns block j's latents, c rows of n, as the kernels read them.
func (r *PCRun) latents(j int) []float32 {
	if r.Planes == nil {
		return r.Lat[j*r.C*r.N : (j+1)*r.C*r.N]
	}
	l := make([]float32, r.C*r.N)
	f := r.Fields[j*(r.M+r.C):]
	UnpackPlanes(l, r.N, r.N, r.Planes[j*r.PlaneBytes:(j+1)*r.PlaneBytes], r.Widths, f[r.M:r.M+r.C], r.Levels)
	return l
}

// pcRunCases are the shapes the kernels of this CPU's level run: d of 32,
// 64 and 128 (the unrolled scores), 16, 48 and 96 at AVX2 (other tiles),
// n short of and at 64, a single component and more than 16, no means.
func pcRunCases() []pcRunCase {
	var out []pcRunCase
	for _, d := range []int{16, 32, 48, 64, 96, 128} {
		for _, s := range []struct{ nb, n, c, mc int }{{3, 64, 16, 48}, {2, 13, 1, 0}, {4, 64, 40, 7}, {1, 7, 5, 3}, {17, 64, 3, 2}} {
			for _, lat := range []bool{false, true} {
				if PCRunSupported(s.n, d, s.c) {
					out = append(out, pcRunCase{s.nb, s.n, d, s.c, s.mc, lat})
				}
			}
		}
	}
	return out
}

// prefetchBlocks returns PCRun.Prefetch's pairs for nb blocks of 0 to 2,000
// bytes at odd offsets (empty ones are left out), as a run's next blocks.
func prefetchBlocks(rng *rand.Rand, nb int) []uintptr {
	src := make([][]byte, nb)
	for j := range src {
		b := make([]byte, 2048)
		off := rng.IntN(48)
		src[j] = b[off : off+rng.IntN(2001)]
	}
	return PrefetchPairs(nil, src)
}

// TestPrefetchPairs: each non-empty block's address and length, in order;
// a run whose pairs are cut (an odd count) is a panic, not a kernel call.
func TestPrefetchPairs(t *testing.T) {
	// On the heap (bytes.Repeat's): a slice on the test's stack moves
	// when the stack grows inside PrefetchPairs, which depends on the
	// goroutine's starting stack size, which the runtime adapts to the
	// stacks of the tests before.
	a, b := bytes.Repeat([]byte{1}, 100), bytes.Repeat([]byte{1}, 7)
	got := PrefetchPairs([]uintptr{1, 2}, [][]byte{a[3:50], nil, b, a[:0]})
	want := []uintptr{1, 2, uintptr(unsafe.Pointer(&a[3])), 47, uintptr(unsafe.Pointer(&b[0])), 7}
	if !slices.Equal(got, want) {
		t.Fatalf("PrefetchPairs = %v, want %v", got, want)
	}
	cases := pcRunCases()
	if len(cases) == 0 {
		t.Skip("no PCScoreRun kernel at this level")
	}
	tc := cases[0]
	r := newPCRun(rand.New(rand.NewPCG(1, 2)), tc)
	r.Prefetch = got[:3]
	defer func() {
		if recover() == nil {
			t.Fatal("PCScoreRun took an odd count of prefetch pairs")
		}
	}()
	PCScoreRun(r, tc.nb, make([]float32, tc.nb*tc.n), tc.nb*tc.n, make([]float32, tc.d), 1, 1, make([]float32, tc.nb*tc.n*tc.d/2),
		make([]float32, tc.nb*tc.n*tc.d/2), 0, tc.n, make([]float32, PCRunWorkLen(tc.n, tc.d, tc.c)))
}

// TestPCScoreRun checks PCScoreRun bit for bit against its blocks decoded
// one by one (UnpackPlanes, the constant row by MixBlock, MixBlockTRoPE,
// ScoreBlock), for every shape of pcRunCases and runs that start and end
// inside a block, with nothing written outside the run's rows.
func TestPCScoreRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 8))
	cases := pcRunCases()
	if len(cases) == 0 {
		t.Skip("no PCScoreRun kernel at this level")
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("nb%d/n%d/d%d/c%d/m%d/lat%v", tc.nb, tc.n, tc.d, tc.c, tc.mc, tc.lat), func(t *testing.T) {
			const m = 3
			r := newPCRun(rng, tc)
			n, d, h := tc.n, tc.d, tc.d/2
			r0, r1 := min(2, n-1), max(1, n-3)
			if tc.nb == 1 && r0 >= r1 {
				r0, r1 = 0, n
			}
			lds := tc.nb*n + 5
			q := randVec(rng, m*d)
			cos, sin := randVec(rng, tc.nb*n*h), randVec(rng, tc.nb*n*h)
			got, want := make([]float32, m*lds), make([]float32, m*lds)
			for i := range got {
				got[i], want[i] = 42, 42
			}
			r.Prefetch = prefetchBlocks(rng, tc.nb) // hints only: the same bits
			PCScoreRun(r, tc.nb, got, lds, q, m, 0.125, cos, sin, r0, r1, make([]float32, PCRunWorkLen(n, d, tc.c)))
			base, rot := make([]float32, d), make([]float32, n*d)
			for j := range tc.nb {
				f := r.Fields[j*(tc.mc+tc.c):]
				copy(base, r.Mu)
				if tc.mc > 0 {
					MixBlock(base, 1, f[:tc.mc], tc.mc, r.MeanRows, tc.mc, d)
				}
				MixBlockTRoPE(rot, n, base, r.latents(j), n, r.Coded, tc.c, d, cos[j*n*h:(j+1)*n*h], sin[j*n*h:(j+1)*n*h])
				lo, hi := 0, n
				if j == 0 {
					lo = r0
				}
				if j == tc.nb-1 {
					hi = r1
				}
				ScoreBlock(want[j*n+lo:], lds, q, m, rot[lo*d:hi*d], hi-lo, d, 0.125)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("score %d (query %d, row %d): %v, want %v", i, i/lds, i%lds, got[i], want[i])
				}
			}
		})
	}
}

// TestPCAddRun checks PCAddRun and PCAddRunEnd against a float64 sum of
// the run's rows decoded, for every shape of pcRunCases, two runs summed
// into the same sums.
func TestPCAddRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 9))
	cases := pcRunCases()
	if len(cases) == 0 {
		t.Skip("no PCAddRun kernel at this level")
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("nb%d/n%d/d%d/c%d/m%d/lat%v", tc.nb, tc.n, tc.d, tc.c, tc.mc, tc.lat), func(t *testing.T) {
			const m = 2
			n, d, c, mc := tc.n, tc.d, tc.c, tc.mc
			r := newPCRun(rng, tc)
			r0, r1 := min(2, n-1), max(1, n-3)
			if tc.nb == 1 && r0 >= r1 {
				r0, r1 = 0, n
			}
			ldw := tc.nb*n + 3
			w := make([]float32, m*ldw)
			for i := range w {
				w[i] = rng.Float32()
			}
			o := randVec(rng, m*d)
			want := make([]float64, m*d)
			for i := range want {
				want[i] = float64(o[i])
			}
			var bound float64
			for j := range tc.nb {
				lat := r.latents(j)
				f := r.Fields[j*(mc+c):]
				lo, hi := 0, n
				if j == 0 {
					lo = r0
				}
				if j == tc.nb-1 {
					hi = r1
				}
				for k := lo; k < hi; k++ {
					for x := range d {
						v := float64(r.Mu[x])
						for t := range mc {
							v += float64(f[t]) * float64(r.MeanRows[t*d+x])
						}
						for t := range c {
							v += float64(lat[t*n+k]) * float64(r.Coded[t*d+x])
						}
						for i := range m {
							p := float64(w[i*ldw+j*n+k])
							want[i*d+x] += p * v
							bound += math.Abs(p * v)
						}
					}
				}
			}
			acc, macc, wsum := make([]float32, PCRunAccLen(m, c)), make([]float32, m*mc), make([]float32, m)
			work := make([]float32, PCRunWorkLen(n, d, c))
			r.Prefetch = prefetchBlocks(rng, tc.nb+2)
			// The run in two parts, the second from block 1 on where there is one.
			split := min(1, tc.nb-1)
			if split > 0 {
				PCAddRun(r, split, w, ldw, m, r0, n, acc, macc, wsum, work)
				sub := *r
				if sub.Planes != nil {
					sub.Planes = sub.Planes[split*r.PlaneBytes:]
				} else {
					sub.Lat = sub.Lat[split*c*n:]
				}
				sub.Fields = sub.Fields[split*(mc+c):]
				PCAddRun(&sub, tc.nb-split, w[split*n:], ldw, m, 0, r1, acc, macc, wsum, work)
			} else {
				PCAddRun(r, tc.nb, w, ldw, m, r0, r1, acc, macc, wsum, work)
			}
			PCAddRunEnd(r, o, m, acc, macc, wsum)
			tol := 1e-6*bound/float64(m*d) + 1e-5
			for i := range o {
				if e := math.Abs(float64(o[i]) - want[i]); e > tol {
					t.Fatalf("output %d: %v, want %v (error %.3g > %.3g)", i, o[i], want[i], e, tol)
				}
			}
		})
	}
}
