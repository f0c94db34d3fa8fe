package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
)

// testMat returns a random rows x cols matrix stored as dt, and the exact
// values it holds as float64 (the reference reads the rounded weights).
func testMat(rng *rand.Rand, dt tensor.DType, rows, cols int) (*Matrix, []float64) {
	m := tensor.Mat{DType: dt, Rows: rows, Cols: cols}
	ref := make([]float64, rows*cols)
	switch dt {
	case tensor.F32:
		m.F32 = make([]float32, rows*cols)
	default:
		m.U16 = make([]uint16, rows*cols)
	}
	for i := range ref {
		v := float32(rng.NormFloat64())
		switch dt {
		case tensor.F32:
			m.F32[i] = v
			ref[i] = float64(v)
		case tensor.BF16:
			m.U16[i] = tensor.F32ToBF16(v)
			ref[i] = float64(tensor.BF16ToF32(m.U16[i]))
		case tensor.F16:
			m.U16[i] = tensor.F32ToF16(v)
			ref[i] = float64(tensor.F16ToF32(m.U16[i]))
		}
	}
	return NewMatrix(m), ref
}

func randVec(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// refMatMul returns the float64 products and, per output, Σ|w·x|: the
// tolerance is relative to it so cancellation does not make it meaningless.
func refMatMul(x []float32, n int, w []float64, rows, cols int) (want, mag []float64) {
	want, mag = make([]float64, n*rows), make([]float64, n*rows)
	for i := range n {
		for r := range rows {
			var sum, m float64
			for c := range cols {
				p := w[r*cols+c] * float64(x[i*cols+c])
				sum += p
				m += math.Abs(p)
			}
			want[i*rows+r], mag[i*rows+r] = sum, m
		}
	}
	return want, mag
}

func checkMatMulResult(t *testing.T, out, x []float32, n int, w []float64, rows, cols int) {
	t.Helper()
	want, mag := refMatMul(x, n, w, rows, cols)
	checkAgainst(t, out, want, mag, rows)
}

func checkAgainst(t *testing.T, out []float32, want, mag []float64, rows int) {
	t.Helper()
	for i, w := range want {
		if tol := 1e-5*mag[i] + 1e-30; math.Abs(float64(out[i])-w) > tol {
			// Errorf, not Fatalf: concurrent tests call this off the test goroutine.
			t.Errorf("out[token %d][row %d] = %v, want %v (tol %.3g)", i/rows, i%rows, out[i], w, tol)
			return
		}
	}
}

// kernelSets returns the kernel sets this machine runs, by name: the best,
// the scalar loops, and between them the best without each family of C
// kernels in turn, so each path is tested wherever the CPU has it.
func kernelSets() map[string]*kernelSet {
	best := bestKernels()
	sets := map[string]*kernelSet{"best": best, "scalar": &scalarKernels}
	if best.avx2c || best.avx512 || best.neon {
		loops := *best
		loops.name, loops.avx2c, loops.avx512, loops.dotBF16, loops.neon = "loops", false, false, false, false
		sets["loops"] = &loops
	}
	if best.avx2c && best.avx512 {
		avx2 := *best
		avx2.name, avx2.avx512, avx2.dotBF16 = "avx2c", false, false
		sets["avx2c"] = &avx2
	}
	if best.dotBF16 {
		f32 := *best
		f32.name, f32.dotBF16 = "avx512", false
		sets["avx512"] = &f32
	}
	return sets
}

func testPools(t *testing.T) map[string]*Pool {
	pools := map[string]*Pool{}
	for name, k := range kernelSets() {
		for _, threads := range []int{1, 2, 3} {
			pools[fmt.Sprintf("%s/%d", name, threads)] = newPool(threads, k, PrecisionF32)
		}
	}
	t.Cleanup(func() {
		for _, p := range pools {
			p.Close()
		}
	})
	return pools
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pools := testPools(t)
	t.Logf("best kernels: %s", pools["best/2"].Kernel())
	shapes := []struct{ rows, cols int }{{1, 1}, {7, 13}, {33, 65}, {64, 172}, {300, 896}, {5, 300}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		for _, sh := range shapes {
			w, ref := testMat(rng, dt, sh.rows, sh.cols)
			for _, n := range []int{1, 2, 3, 5, 17, 64} {
				if testing.Short() && sh.rows*sh.cols*n > 1<<20 {
					continue
				}
				x := randVec(rng, n*sh.cols)
				want, mag := refMatMul(x, n, ref, sh.rows, sh.cols)
				for name, p := range pools {
					t.Run(fmt.Sprintf("%v/%dx%d/n=%d/%s", dt, sh.rows, sh.cols, n, name), func(t *testing.T) {
						out := make([]float32, n*sh.rows+3)
						for i := range out {
							out[i] = float32(math.NaN()) // MatMul must overwrite, not accumulate
						}
						p.MatMul(out, x, n, w)
						checkAgainst(t, out, want, mag, sh.rows)
						for _, v := range out[n*sh.rows:] {
							if v == v {
								t.Fatalf("MatMul wrote past n*rows")
							}
						}
					})
				}
			}
		}
	}
}

// TestMatMulNested runs MatMul from inside a parallel For on the same pool:
// the inner calls must run inline, not deadlock, and still be right.
func TestMatMulNested(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := NewPool(2)
	defer p.Close()
	w, ref := testMat(rng, tensor.BF16, 40, 70)
	const n = 3
	x := randVec(rng, n*70)
	outs := make([][]float32, 4)
	for i := range outs {
		outs[i] = make([]float32, n*40)
	}
	p.For(len(outs), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p.MatMul(outs[i], x, n, w)
			p.MatMul(outs[i][:40], x[:70], 1, w)
		}
	})
	for _, out := range outs {
		checkMatMulResult(t, out, x, n, ref, 40, 70)
	}
}

func TestMatMulBadShapesPanic(t *testing.T) {
	w := NewMatrix(tensor.Mat{DType: tensor.BF16, Rows: 4, Cols: 3, U16: make([]uint16, 12)})
	p := NewPool(2)
	defer p.Close()
	for _, tt := range []struct {
		name, kernel string
		call         func()
	}{
		{"short x", "MatMul", func() { p.MatMul(make([]float32, 8), make([]float32, 5), 2, w) }},
		{"short out", "MatMul", func() { p.MatMul(make([]float32, 7), make([]float32, 6), 2, w) }},
		{"negative n", "MatMul", func() { p.MatMul(make([]float32, 8), make([]float32, 6), -1, w) }},
		{"storage", "NewMatrix", func() { NewMatrix(tensor.Mat{DType: tensor.BF16, Rows: 4, Cols: 3, U16: make([]uint16, 11)}) }},
		{"dtype", "NewMatrix", func() { NewMatrix(tensor.Mat{Rows: 4, Cols: 3}) }},
		{"f32 storage", "NewMatrix", func() { NewMatrix(tensor.Mat{DType: tensor.F32, Rows: 4, Cols: 3, U16: make([]uint16, 12)}) }},
		{"shape", "NewMatrix", func() { NewMatrix(tensor.Mat{DType: tensor.F32, Rows: 0, Cols: 3}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("no panic")
				}
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "cpu: "+tt.kernel+":") {
					t.Fatalf("panic %v does not name %s", r, tt.kernel)
				}
			}()
			tt.call()
		})
	}
}

func TestMatMulAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := NewPool(2)
	defer p.Close()
	w, _ := testMat(rng, tensor.BF16, 256, 200)
	for _, n := range []int{1, 64} {
		x := randVec(rng, n*200)
		out := make([]float32, n*256)
		if a := testing.AllocsPerRun(20, func() { p.MatMul(out, x, n, w) }); a != 0 {
			t.Errorf("MatMul n=%d: %v allocations per call, want 0", n, a)
		}
	}
}

func TestRowF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		w, ref := testMat(rng, dt, 5, 37)
		dst := make([]float32, 37)
		for r := range 5 {
			RowF32(dst, w.Mat(), r)
			for c, v := range dst {
				if float64(v) != ref[r*37+c] {
					t.Fatalf("%v row %d col %d = %v, want %v", dt, r, c, v, ref[r*37+c])
				}
			}
		}
	}
	// Special values go through the vector conversion too.
	specials := []uint16{0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x3c00, 0xc000, 0x3555, 0x8001, 0x7e00, 0x7c01, 0xfe00}
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		w := tensor.Mat{DType: dt, Rows: 1, Cols: len(specials), U16: specials}
		dst := make([]float32, len(specials))
		RowF32(dst, w, 0)
		for i, h := range specials {
			want := tensor.F16ToF32(h)
			if dt == tensor.BF16 {
				want = tensor.BF16ToF32(h)
			}
			if math.Float32bits(dst[i]) != math.Float32bits(want) && !(want != want && dst[i] != dst[i]) {
				t.Errorf("%v %#04x -> %v (%#08x), want %v", dt, h, dst[i], math.Float32bits(dst[i]), want)
			}
		}
	}
}

// TestMatMulConcurrent calls MatMul on one pool from several goroutines:
// whichever finds the pool busy runs inline, and every result is right.
func TestMatMulConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := NewPool(2)
	defer p.Close()
	w, ref := testMat(rng, tensor.BF16, 520, 530) // above minParallelWork
	const n = 2
	x := randVec(rng, n*530)
	want, mag := refMatMul(x, n, ref, 520, 530)
	want1, mag1 := refMatMul(x, 1, ref, 520, 530)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			out := make([]float32, n*520)
			for range 5 {
				p.MatMul(out, x, n, w)
				checkAgainst(t, out, want, mag, 520)
				p.MatMul(out[:520], x[:530], 1, w)
				checkAgainst(t, out[:520], want1, mag1, 520)
			}
		})
	}
	wg.Wait()
}

// TestMatMulBF16 checks MatMul with activations rounded to bf16 against
// the float64 products of the rounded activations, on every kernel set this
// machine runs (the VDPBF16PS kernels where the CPU has them), and that
// PrecisionF32 stays the default.
func TestMatMulBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	if p := NewPool(1); p.Precision() != PrecisionF32 {
		t.Errorf("NewPool's precision is %v, want f32", p.Precision())
	}
	pools := map[string]*Pool{}
	for name, k := range kernelSets() {
		for _, threads := range []int{1, 2} {
			pools[fmt.Sprintf("%s/%d", name, threads)] = newPool(threads, k, PrecisionBF16)
		}
	}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, sh := range []struct{ rows, cols int }{{1, 1}, {7, 13}, {33, 65}, {300, 896}, {45, 31}} {
		w, ref := testMat(rng, tensor.BF16, sh.rows, sh.cols)
		for _, n := range []int{1, 2, 13, 40} {
			x := randVec(rng, n*sh.cols)
			xr := make([]float32, len(x))
			for i, v := range x {
				xr[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
			}
			want, mag := refMatMul(xr, n, ref, sh.rows, sh.cols)
			for name, p := range pools {
				t.Run(fmt.Sprintf("%dx%d/n=%d/%s", sh.rows, sh.cols, n, name), func(t *testing.T) {
					out := make([]float32, n*sh.rows)
					p.MatMul(out, x, n, w)
					checkAgainst(t, out, want, mag, sh.rows)
				})
			}
		}
	}
	// F32 weights are not rounded: the precision is about bf16 weights.
	w, ref := testMat(rng, tensor.F32, 20, 30)
	x := randVec(rng, 3*30)
	out := make([]float32, 3*20)
	pools["best/2"].MatMul(out, x, 3, w)
	checkMatMulResult(t, out, x, 3, ref, 20, 30)
}

// TestMatMulThreadsBitIdentical checks that the number of threads does not
// change a single bit of MatMul's results, for either precision.
func TestMatMulThreadsBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	w, _ := testMat(rng, tensor.BF16, 333, 515)
	for _, prec := range []Precision{PrecisionF32, PrecisionBF16} {
		for _, n := range []int{1, 2, 29} {
			x := randVec(rng, n*515)
			var first []float32
			for _, threads := range []int{1, 2, 3, 8} {
				p := newPool(threads, bestKernels(), prec)
				out := make([]float32, n*333)
				p.MatMul(out, x, n, w)
				p.Close()
				if first == nil {
					first = out
					continue
				}
				for i := range out {
					if math.Float32bits(out[i]) != math.Float32bits(first[i]) {
						t.Fatalf("%v n=%d: %d threads give out[%d] = %v, 1 thread %v", prec, n, threads, i, out[i], first[i])
					}
				}
			}
		}
	}
}

func TestParsePrecision(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Precision
	}{{"f32", PrecisionF32}, {"bf16", PrecisionBF16}} {
		if got, err := ParsePrecision(tt.in); err != nil || got != tt.want {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if tt.want.String() != tt.in {
			t.Errorf("%v.String() = %q", tt.want, tt.want.String())
		}
	}
	for _, in := range []string{"fp16", ""} {
		if _, err := ParsePrecision(in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParsePrecision(%q): err = %v, want one naming the value", in, err)
		}
	}
}

// TestMatMulBatchInvariant checks that a token's outputs do not depend on
// the call: multiplied alone (a decode step's GEMV), in the whole batch, or
// in a chunk of it, every output is the same to the bit, on every kernel
// set this machine runs, at both precisions, for each weight dtype, with
// row and column counts on either side of every panel, tile and vector
// width and token counts on either side of the micro-tiles'.
func TestMatMulBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	rowCounts := []int{1, 7, 15, 17, 31, 33, 65}
	colCounts := []int{1, 2, 7, 9, 17, 255, 257, 513}
	const n = 27 // tiles of 12 and 6 tokens and a ragged one
	chunks := [][2]int{{0, 1}, {1, 7}, {7, 13}, {13, 25}, {25, 26}, {26, 27}}
	for name, k := range kernelSets() {
		for _, prec := range []Precision{PrecisionF32, PrecisionBF16} {
			p := newPool(2, k, prec)
			defer p.Close()
			for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
				t.Run(fmt.Sprintf("%s/%v/%v", name, prec, dt), func(t *testing.T) {
					for _, rows := range rowCounts {
						for _, cols := range colCounts {
							w, _ := testMat(rng, dt, rows, cols)
							x := randVec(rng, n*cols)
							all := make([]float32, n*rows)
							p.MatMul(all, x, n, w)
							part := make([]float32, n*rows)
							for _, c := range chunks {
								p.MatMul(part[c[0]*rows:c[1]*rows], x[c[0]*cols:c[1]*cols], c[1]-c[0], w)
							}
							one := make([]float32, rows)
							for i := range n {
								p.MatMul(one, x[i*cols:(i+1)*cols], 1, w)
								for r := range rows {
									a, b, c := all[i*rows+r], part[i*rows+r], one[r]
									if math.Float32bits(a) != math.Float32bits(c) || math.Float32bits(b) != math.Float32bits(c) {
										t.Fatalf("%dx%d: token %d row %d: %v in the batch of %d, %v in its chunk, %v alone",
											rows, cols, i, r, a, n, b, c)
									}
								}
							}
						}
					}
				})
			}
		}
	}
}

// The AVX2 rounding of activations to bf16 gives tensor.F32ToBF16's bits:
// random values at every scale, ties to even both ways, the largest finite
// values (which round to infinity), subnormals, signed zeros, infinities
// and NaNs with payloads, at every length up to two vectors past a tail.
func TestRoundBF16MatchesGo(t *testing.T) {
	if !hasAVX2C {
		t.Skip("no C kernels on this CPU or build (or KAKEYA_CPU caps them)")
	}
	rng := rand.New(rand.NewPCG(3, 16))
	var x []float32
	for _, u := range []uint32{
		0x3f808000, 0x3f818000, 0xbf808000, 0xbf818000, // ties: down to even, up to even
		0x3f807fff, 0x3f808001, 0x7f7fffff, 0xff7fffff, 0x7f7f8000,
		0x00000001, 0x00008000, 0x00018000, 0x807fffff, 0, 0x80000000,
		0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xff812345, 0x7fbfffff,
	} {
		x = append(x, math.Float32frombits(u))
	}
	for range 300 {
		x = append(x, math.Float32frombits(rng.Uint32()))
	}
	for n := 0; n <= len(x); n += 1 + n/16 {
		got := make([]float32, n)
		roundBF16(x[:n], got)
		for i, v := range x[:n] {
			if w := tensor.BF16ToF32(tensor.F32ToBF16(v)); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Fatalf("n=%d: %#08x rounds to %#08x, want %#08x", n, math.Float32bits(v), math.Float32bits(got[i]), math.Float32bits(w))
			}
		}
	}
	// In place.
	y := append([]float32(nil), x...)
	roundBF16(y, y)
	for i, v := range x {
		if w := tensor.BF16ToF32(tensor.F32ToBF16(v)); math.Float32bits(y[i]) != math.Float32bits(w) {
			t.Fatalf("in place: %#08x rounds to %#08x, want %#08x", math.Float32bits(v), math.Float32bits(y[i]), math.Float32bits(w))
		}
	}
}
