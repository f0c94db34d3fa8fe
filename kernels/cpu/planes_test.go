package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// planeKernels are UnpackPlanes's implementations this machine runs: the
// exported one (AVX-512 or AVX2 where the CPU has them), the scalar loop,
// and the AVX2 kernel where best is AVX-512.
var planeKernels = []struct {
	name   string
	unpack func(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32)
	mixT   func(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int)
	mix    func(o []float32, m int, p []float32, ldp int, vals []float32, n, d int)
}{
	{"best", UnpackPlanes, MixBlockT, MixBlock},
	{"scalar", unpackPlanesScalar, mixRowsT, mixRows},
}

func init() {
	if hasAVX2C && hasAVX512 {
		planeKernels = append(planeKernels, struct {
			name   string
			unpack func(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32)
			mixT   func(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int)
			mix    func(o []float32, m int, p []float32, ldp int, vals []float32, n, d int)
		}{"avx2", unpackPlanesAVX2, mixTAVX2, mixAVX2})
	}
}

// randLevels returns a level table with distinct random values in every
// slot, so a code read from the wrong bits picks a wrong value.
func randLevels(rng *rand.Rand) *[PlaneLevels]float32 {
	var l [PlaneLevels]float32
	for i := range l {
		l[i] = float32(rng.NormFloat64())
	}
	return &l
}

// TestUnpackPlanes checks every code width alone and widths mixed, for n
// odd and even, short of, at and past the kernels' groups of 8 and 16,
// against the codes read bit by bit: the exact float32 level·scale, and
// nothing written between the rows.
func TestUnpackPlanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	widthSets := [][]uint8{{1}, {2}, {3}, {4}, {5}, {6}, {6, 5, 4, 3, 2, 1, 1, 3, 5}, {1, 6, 2, 5, 3, 4}}
	for _, kn := range planeKernels {
		for _, widths := range widthSets {
			for _, n := range []int{1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 100} {
				t.Run(fmt.Sprintf("%s/w%v/n%d", kn.name, widths, n), func(t *testing.T) {
					levels := randLevels(rng)
					scales := randVec(rng, len(widths))
					size := 0
					for _, w := range widths {
						size += PlaneBytes(n, int(w))
					}
					src := make([]byte, size)
					for i := range src {
						src[i] = byte(rng.Uint32())
					}
					ldd := n + 3
					dst := make([]float32, len(widths)*ldd)
					for i := range dst {
						dst[i] = 42
					}
					kn.unpack(dst, ldd, n, src, widths, scales, levels)
					at := 0 // bit offset of the plane
					for p, w := range widths {
						for i := range ldd {
							got := dst[p*ldd+i]
							if i >= n {
								if got != 42 {
									t.Fatalf("plane %d: dst[%d] past n overwritten: %v", p, i, got)
								}
								continue
							}
							c := 0
							for b := range int(w) {
								bit := at + i*int(w) + b
								c |= int(src[bit/8]>>(bit%8)&1) << b
							}
							if want := levels[int(w)*64+c] * scales[p]; got != want {
								t.Fatalf("plane %d (width %d) code %d: %v, want level %d times scale = %v", p, w, i, got, c, want)
							}
						}
						at += 8 * PlaneBytes(n, int(w))
					}
				})
			}
		}
	}
}

// TestMixBlockT checks MixBlockT against MixBlock on the transposed
// weights, bit for bit, on every tile shape, from o's rows and from a base
// row.
func TestMixBlockT(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	for _, kn := range planeKernels {
		for _, s := range tileShapes {
			t.Run(fmt.Sprintf("%s/m%d_n%d_d%d", kn.name, s.m, s.n, s.d), func(t *testing.T) {
				ldp := s.m + 3
				p, vals, o := randVec(rng, max(s.n, 1)*ldp), randVec(rng, s.n*s.d), randVec(rng, s.m*s.d+1)
				base := randVec(rng, s.d)
				pT := make([]float32, s.m*max(s.n, 1)) // MixBlock's weights: row i, value row k
				for i := range s.m {
					for k := range s.n {
						pT[i*s.n+k] = p[k*ldp+i]
					}
				}
				for _, withBase := range []bool{false, true} {
					want := slices.Clone(o)
					var b []float32
					if withBase {
						b = base
						for i := range s.m {
							copy(want[i*s.d:(i+1)*s.d], base)
						}
					}
					kn.mix(want, s.m, pT, max(s.n, 1), vals, s.n, s.d)
					got := slices.Clone(o)
					kn.mixT(got, s.m, b, p, ldp, vals, s.n, s.d)
					if !slices.Equal(got, want) {
						for i := range got {
							if got[i] != want[i] {
								t.Fatalf("base %v: o[%d] = %v, MixBlock on the transposed weights %v", withBase, i, got[i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

func TestPlanesPanics(t *testing.T) {
	f := make([]float32, 64)
	b := make([]byte, 64)
	var l [PlaneLevels]float32
	for name, fn := range map[string]func(){
		"UnpackPlanes width 0":  func() { UnpackPlanes(f, 8, 8, b, []uint8{0}, f, &l) },
		"UnpackPlanes width 7":  func() { UnpackPlanes(f, 8, 8, b, []uint8{7}, f, &l) },
		"UnpackPlanes short":    func() { UnpackPlanes(f, 8, 8, b[:5], []uint8{6}, f, &l) },
		"UnpackPlanes stride":   func() { UnpackPlanes(f, 7, 8, b, []uint8{1}, f, &l) },
		"UnpackPlanes dst":      func() { UnpackPlanes(f, 40, 40, b, []uint8{1, 1}, f, &l) },
		"UnpackPlanes scales":   func() { UnpackPlanes(f, 8, 8, b, []uint8{1, 1}, f[:1], &l) },
		"MixBlockT weights":     func() { MixBlockT(f, 2, nil, f, 2, f, 40, 1) },
		"MixBlockT base":        func() { MixBlockT(f, 1, f[:3], f, 1, f, 1, 4) },
		"MixBlockT stride":      func() { MixBlockT(f, 4, nil, f, 3, f, 2, 4) },
		"MixBlockT destination": func() { MixBlockT(f[:7], 2, nil, f, 2, f, 2, 4) },
	} {
		wantPanic(t, name, fn)
	}
}

func TestPlanesAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	const n, d = 64, 64
	widths := []uint8{6, 5, 4, 4, 3, 3, 2, 1}
	src := make([]byte, 64*28/8)
	lat, scales, levels := make([]float32, len(widths)*n), randVec(rng, len(widths)), randLevels(rng)
	basis, out, base := randVec(rng, len(widths)*d), make([]float32, n*d), randVec(rng, d)
	if a := testing.AllocsPerRun(10, func() {
		UnpackPlanes(lat, n, n, src, widths, scales, levels)
		MixBlockT(out, n, base, lat, n, basis, len(widths), d)
	}); a != 0 {
		t.Errorf("%v allocations per run, want 0", a)
	}
}

// TestMixBlockTRoPE checks MixBlockTRoPE against MixBlockT then RoPEBlock,
// bit for bit, at the head sizes the fused kernel takes (32, 64, 128) and
// others, with every tile of rows whole and cut short.
func TestMixBlockTRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1))
	for _, d := range []int{32, 64, 128, 2, 48, 96} {
		for _, m := range []int{1, 2, 3, 5, 6, 7, 13, 64} {
			for _, n := range []int{1, 9, 40} {
				ldp := m + 1
				p, vals, base := randVec(rng, n*ldp), randVec(rng, n*d), randVec(rng, d)
				cos, sin := randVec(rng, m*d/2), randVec(rng, m*d/2)
				for _, b := range [][]float32{nil, base} {
					o := randVec(rng, m*d+1)
					want := slices.Clone(o)
					MixBlockT(want, m, b, p, ldp, vals, n, d)
					RoPEBlock(want, want, cos, sin, m, d)
					got := slices.Clone(o)
					MixBlockTRoPE(got, m, b, p, ldp, vals, n, d, cos, sin)
					if !slices.Equal(got, want) {
						t.Errorf("d=%d m=%d n=%d base %v: differs from MixBlockT then RoPEBlock", d, m, n, b != nil)
					}
				}
			}
		}
	}
	wantPanic(t, "MixBlockTRoPE odd d", func() {
		f := make([]float32, 64)
		MixBlockTRoPE(f, 1, nil, f, 1, f, 1, 3, f, f)
	})
	wantPanic(t, "MixBlockTRoPE short cos", func() {
		f := make([]float32, 64)
		MixBlockTRoPE(f, 2, nil, f, 2, f, 1, 32, f[:31], f)
	})
}

func TestTranspose(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 2))
	for _, s := range []struct{ rows, cols int }{{1, 1}, {8, 8}, {48, 64}, {41, 33}, {7, 9}, {16, 3}, {0, 5}} {
		lds, ldd := s.cols+2, s.rows+3
		src := randVec(rng, max(s.rows*lds, 1))
		dst := make([]float32, max(s.cols*ldd, 1))
		for i := range dst {
			dst[i] = 42
		}
		Transpose(dst, ldd, src, lds, s.rows, s.cols)
		for i := range s.cols {
			for c := range ldd {
				got := dst[i*ldd+c]
				switch {
				case c >= s.rows && got != 42:
					t.Fatalf("%dx%d: dst[%d][%d] past the rows overwritten", s.rows, s.cols, i, c)
				case c < s.rows && got != src[c*lds+i]:
					t.Fatalf("%dx%d: dst[%d][%d] = %v, want src[%d][%d] = %v", s.rows, s.cols, i, c, got, c, i, src[c*lds+i])
				}
			}
		}
	}
	wantPanic(t, "Transpose short dst", func() { Transpose(make([]float32, 10), 4, make([]float32, 64), 8, 4, 8) })
	wantPanic(t, "Transpose stride", func() { Transpose(make([]float32, 64), 3, make([]float32, 64), 8, 4, 8) })
}
