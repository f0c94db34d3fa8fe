package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
)

var opLengths = []int{0, 1, 7, 8, 9, 16, 31, 33, 64, 896, 1001}

func closeTo(got float32, want, tol float64) bool {
	return math.Abs(float64(got)-want) <= tol
}

func TestDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range opLengths {
		a, b := randVec(rng, n), randVec(rng, n)
		var want, mag float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		for name, f := range map[string]func(a, b []float32) float32{"Dot": Dot, "scalar": dotScalar} {
			if got := f(a, b); !closeTo(got, want, 1e-6*mag+1e-30) {
				t.Errorf("%s n=%d = %v, want %v", name, n, got, want)
			}
		}
	}
}

func TestVectorOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, n := range opLengths {
		x, y := randVec(rng, n), randVec(rng, n)
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			got := append([]float32(nil), y...)
			Axpy(0.75, x, got)
			for i := range got {
				if want := float64(y[i]) + 0.75*float64(x[i]); !closeTo(got[i], want, 1e-6*(1+math.Abs(want))) {
					t.Fatalf("Axpy[%d] = %v, want %v", i, got[i], want)
				}
			}
			got = append(got[:0], y...)
			Add(got, x)
			for i := range got {
				if got[i] != y[i]+x[i] {
					t.Fatalf("Add[%d] = %v, want %v", i, got[i], y[i]+x[i])
				}
			}
			lo, hi := append([]float32(nil), x...), append([]float32(nil), y...)
			butterfly(lo, hi) // the stage kernel behind HadamardStages, at every length
			for i := range lo {
				if lo[i] != x[i]+y[i] || hi[i] != x[i]-y[i] {
					t.Fatalf("butterfly[%d] = %v, %v, want %v, %v", i, lo[i], hi[i], x[i]+y[i], x[i]-y[i])
				}
			}
			z := make([]float32, n)
			MulAdd(z, x, y, lo)
			for i := range z {
				if want := float64(x[i])*float64(y[i]) + float64(lo[i]); !closeTo(z[i], want, 1e-6*(1+math.Abs(want))) {
					t.Fatalf("MulAdd[%d] = %v, want %v", i, z[i], want)
				}
			}
			got = append(got[:0], x...)
			Scale(got, -3)
			for i := range got {
				if got[i] != x[i]*-3 {
					t.Fatalf("Scale[%d] = %v, want %v", i, got[i], x[i]*-3)
				}
			}
		})
	}
}

func TestRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range opLengths[1:] {
		x, w := randVec(rng, n), randVec(rng, n)
		for i := range x {
			x[i] *= 40 // activations well away from 1 exercise the scale
		}
		const eps = 1e-6
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(n)+eps)
		out := make([]float32, n)
		RMSNorm(out, x, w, eps)
		for i := range out {
			want := float64(x[i]) * inv * float64(w[i])
			if !closeTo(out[i], want, 2e-6*(math.Abs(want)+1e-3)) {
				t.Fatalf("n=%d RMSNorm[%d] = %v, want %v", n, i, out[i], want)
			}
		}
		RMSNorm(x, x, w, eps) // in place
		for i := range x {
			if x[i] != out[i] {
				t.Fatalf("n=%d in-place RMSNorm[%d] = %v, want %v", n, i, x[i], out[i])
			}
		}
	}
}

func TestSiLUMul(t *testing.T) {
	silu := func(x float64) float64 { return x / (1 + math.Exp(-x)) }
	testGatedMul(t, rand.New(rand.NewPCG(4, 4)), 8, 1e-6, silu, map[string]func(g, u []float32){"SiLUMul": SiLUMul, "scalar": siluMulScalar})
}

// TestSiLUMulPositionIndependent checks that a value's SiLUMul does not
// depend on where it sits in the slice: at prefill the slice holds several
// tokens' rows back to back, at decode one row, and the two must agree bit
// for bit, vector lanes and the tail alike.
func TestSiLUMulPositionIndependent(t *testing.T) {
	testGatedPositions(t, rand.New(rand.NewPCG(4, 5)), 8, "SiLUMul", SiLUMul)
}

// GELUTanhMul (Gemma's GeGLU) against the float64 formula, at every
// length and with saturated inputs, and a value's result wherever it sits.
func TestGELUTanhMul(t *testing.T) {
	gelu := func(x float64) float64 {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	rng := rand.New(rand.NewPCG(4, 6))
	testGatedMul(t, rng, 4, 2e-6, gelu, map[string]func(g, u []float32){"GELUTanhMul": GELUTanhMul, "scalar": geluTanhMulScalar})
	testGatedPositions(t, rng, 1, "GELUTanhMul", GELUTanhMul)
}

// testGatedMul checks gated activations fs (gate[i] = act(gate[i])·up[i])
// against act in float64 within tol relative, at every opLengths length,
// gates N(0, spread²) with saturated ones (±100, ±1000) where n > 8.
func testGatedMul(t *testing.T, rng *rand.Rand, spread float32, tol float64, act func(float64) float64, fs map[string]func(g, u []float32)) {
	t.Helper()
	for _, n := range opLengths {
		gate, up := randVec(rng, n), randVec(rng, n)
		for i := range gate {
			gate[i] *= spread
		}
		if n > 8 {
			// Saturated inputs: act(g) -> g for large g, -> 0 for very negative g.
			gate[0], gate[1], gate[2], gate[3] = 100, -100, 1000, -1000
		}
		orig := append([]float32(nil), gate...)
		for name, f := range fs {
			g := append([]float32(nil), orig...)
			f(g, up)
			for i := range g {
				want := act(float64(orig[i])) * float64(up[i])
				if !closeTo(g[i], want, tol*(math.Abs(want)+1e-6)) {
					t.Fatalf("%s n=%d [%d] of %v times %v = %v, want %v", name, n, i, orig[i], up[i], g[i], want)
				}
			}
		}
	}
}

// testGatedPositions checks that f gives a value the same bits at every
// place in the slice (gates N(0, spread²)).
func testGatedPositions(t *testing.T, rng *rand.Rand, spread float32, name string, f func(g, u []float32)) {
	t.Helper()
	gate, up := randVec(rng, 64), randVec(rng, 64)
	for i := range gate {
		gate[i] *= spread
	}
	whole := append([]float32(nil), gate...)
	f(whole, up)
	for lo := range 9 {
		for _, hi := range []int{lo + 1, lo + 7, lo + 9, 64} {
			g := append([]float32(nil), gate[lo:hi]...)
			f(g, up[lo:hi])
			for i, v := range g {
				if math.Float32bits(v) != math.Float32bits(whole[lo+i]) {
					t.Fatalf("%s of [%d:%d], value %d: %v, %v within the whole slice", name, lo, hi, lo+i, v, whole[lo+i])
				}
			}
		}
	}
}

func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	ninf := float32(math.Inf(-1))
	cases := map[string][]float32{
		"one":   {3},
		"large": {1000, 999, 998, -1000, 1000, 500, 0, 1, 2, 3, 4},
		"neg":   {-1000, -1001, -999.5, -2000, -1000, -1000, -1000, -1000, -1000},
		"-inf":  {ninf, 0, ninf, 1, 2, 3, 4, 5, 6, 7, ninf, ninf},
		"tiny":  {0, -87, -88, -90, -103, -200, 0, 0, 0},
	}
	for _, n := range opLengths[1:] {
		x := randVec(rng, n)
		for i := range x {
			x[i] *= 30
		}
		cases[fmt.Sprint("rand", n)] = x
	}
	for name, x := range cases {
		m := math.Inf(-1)
		for _, v := range x {
			m = math.Max(m, float64(v))
		}
		want := make([]float64, len(x))
		var sum float64
		for i, v := range x {
			want[i] = math.Exp(float64(v) - m)
			sum += want[i]
		}
		for fname, f := range map[string]func([]float32){"Softmax": Softmax, "scalar": softmaxScalar} {
			got := append([]float32(nil), x...)
			f(got)
			var total float64
			for i := range got {
				total += float64(got[i])
				// x[i]-max is rounded to f32 before exp: allow its ulp.
				w := want[i] / sum
				tol := 1e-37
				if w > 0 {
					tol += w * (2e-6 + 1.2e-7*math.Abs(float64(x[i])-m))
				}
				if !closeTo(got[i], w, tol) {
					t.Fatalf("%s %s [%d] = %v, want %v", fname, name, i, got[i], w)
				}
			}
			if math.Abs(total-1) > 1e-5 {
				t.Fatalf("%s %s sums to %v", fname, name, total)
			}
		}
	}
}

func TestRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, h := range []int{1, 4, 8, 32, 64, 67} {
		x := randVec(rng, 2*h)
		cos, sin := make([]float32, h), make([]float32, h)
		for i := range cos {
			th := rng.Float64() * 2 * math.Pi
			cos[i], sin[i] = float32(math.Cos(th)), float32(math.Sin(th))
		}
		for name, f := range map[string]func(x, c, s []float32){"RoPE": RoPE, "scalar": ropeScalar} {
			got := append([]float32(nil), x...)
			f(got, cos, sin)
			for i := range h {
				a, b, c, s := float64(x[i]), float64(x[h+i]), float64(cos[i]), float64(sin[i])
				w1, w2 := a*c-b*s, b*c+a*s
				if !closeTo(got[i], w1, 1e-6*(math.Abs(a)+math.Abs(b))) || !closeTo(got[h+i], w2, 1e-6*(math.Abs(a)+math.Abs(b))) {
					t.Fatalf("%s h=%d [%d] = (%v, %v), want (%v, %v)", name, h, i, got[i], got[h+i], w1, w2)
				}
			}
		}
	}
}

func TestOpsLengthPanics(t *testing.T) {
	a, b := make([]float32, 3), make([]float32, 4)
	tests := map[string]func(){
		"Dot":     func() { Dot(a, b) },
		"Axpy":    func() { Axpy(1, a, b) },
		"Add":     func() { Add(a, b) },
		"MulAdd":  func() { MulAdd(a, a, a, b) },
		"RMSNorm": func() { RMSNorm(a, a, b, 1e-6) },
		"SiLUMul": func() { SiLUMul(a, b) },
		"RoPE":    func() { RoPE(b, a, a) },
		"RowF32":  func() { RowF32(a, testMatNoData(), 5) },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) { wantPanic(t, name, f) })
	}
}

func testMatNoData() tensor.Mat {
	return tensor.Mat{DType: tensor.BF16, Rows: 2, Cols: 3, U16: make([]uint16, 6)}
}

func TestHadamardStages(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{8, 16, 32, 64, 128, 256} {
		x := randVec(rng, n)
		want := append([]float32(nil), x...)
		// The stages from 8 up, straight from the definition.
		for h := 8; h < n; h <<= 1 {
			for i := 0; i < n; i += 2 * h {
				for j := i; j < i+h; j++ {
					want[j], want[j+h] = want[j]+want[j+h], want[j]-want[j+h]
				}
			}
		}
		HadamardStages(x)
		for i := range x {
			if x[i] != want[i] {
				t.Fatalf("n=%d: [%d] = %v, want %v", n, i, x[i], want[i])
			}
		}
	}
	for _, n := range []int{0, 4, 24} {
		wantPanic(t, fmt.Sprintf("length %d", n), func() { HadamardStages(make([]float32, n)) })
	}
}

func TestLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	var table [16]float32
	for i := range table {
		table[i] = float32(rng.NormFloat64())
	}
	for n := 0; n <= 70; n++ {
		for _, extra := range []int{0, 3, 16} {
			codes := make([]uint8, n+extra)
			for i := range codes {
				codes[i] = uint8(rng.IntN(256))
			}
			dst := make([]float32, n+1)
			dst[n] = 42 // must stay: only len(dst[:n]) values are written
			Lookup(dst[:n], codes, &table)
			for i := 0; i < n; i++ {
				if want := table[codes[i]&15]; dst[i] != want {
					t.Fatalf("n=%d extra=%d: [%d] = %v, want %v (code %d)", n, extra, i, dst[i], want, codes[i])
				}
			}
			if dst[n] != 42 {
				t.Fatalf("n=%d extra=%d: wrote past dst", n, extra)
			}
		}
	}
	wantPanic(t, "short codes", func() { Lookup(make([]float32, 3), make([]uint8, 2), &table) })
}

// wantPanic reports an error naming what unless f panics: the kernels
// panic on lengths that do not match.
func wantPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}
