package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tensor"
)

// rounded returns x as the 16-bit GEMM multiplies it by a weight of dt:
// rounded to bf16, or for f16 each row scaled by the power of two
// to_f16_rows picks, rounded to f16 and scaled back (exact for rows within
// f16's range).
func rounded(dt tensor.DType, x []float32, n, cols int) []float32 {
	out := make([]float32, len(x))
	for i := range n {
		row := x[i*cols : (i+1)*cols]
		var m float32
		for _, v := range row {
			m = max(m, float32(math.Abs(float64(v))))
		}
		k := 0
		if m >= 32768 && !math.IsInf(float64(m), 0) {
			_, e := math.Frexp(float64(m)) // m = f 2^e, f in [0.5, 1): binary exponent e-1
			k = e - 1 - 14
		}
		for c, v := range row {
			if dt == tensor.BF16 {
				out[i*cols+c] = tensor.BF16ToF32(tensor.F32ToBF16(v))
				continue
			}
			s := float32(math.Ldexp(1, k))
			out[i*cols+c] = tensor.F16ToF32(tensor.F32ToF16(v/s)) * s
		}
	}
	return out
}

// magnitude returns, for each output, the sum of |x_k w_k| over its
// products: the scale of its float32 rounding error.
func magnitude(m tensor.Mat, x []float32, n int) []float64 {
	out := make([]float64, n*m.Rows)
	for i := range n {
		for r := range m.Rows {
			var s float64
			for c := range m.Cols {
				var w float64
				if m.DType == tensor.BF16 {
					w = float64(tensor.BF16ToF32(m.U16[r*m.Cols+c]))
				} else {
					w = float64(tensor.F16ToF32(m.U16[r*m.Cols+c]))
				}
				s += math.Abs(float64(x[i*m.Cols+c]) * w)
			}
			out[i*m.Rows+r] = s
		}
	}
	return out
}

// checkScaled fails where got and want differ by more than tol times the
// output's magnitude (or for a NaN).
func checkScaled(t *testing.T, what string, got, want []float32, mag []float64, tol float64) {
	t.Helper()
	bad := 0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !(d <= tol*mag[i]+1e-30) {
			if bad++; bad <= 3 {
				t.Errorf("%s: out[%d] = %v, want %v (difference %.3g, magnitude %.3g)", what, i, got[i], want[i], d, mag[i])
			}
		}
	}
}

// The mma kernel (bf16 and f16 weights, no cuBLAS) computes the product
// of the rounded activations and the weight as float64 does
// (compute/reference, on the activations rounded as the kernel rounds
// them) within float32 summation error, at awkward sizes: 9 to 256 rows,
// weight rows no multiple of the 64-row tile, columns a multiple of 8 but
// not 16 (8-value loads) and no multiple of 8 (one value a load). For
// bf16 it equals the CPU backend's default precision (--matmul bf16)
// within the same bound.
func TestGEMM16MatchesReference(t *testing.T) {
	needKernels(t, "to_bf16", "to_f16_rows", "gemm_bf16", "gemm_f16")
	gpu, f := newFakeBackend(t, Options{NoCUBLAS: true})
	ref := reference.Backend{}
	cpu, err := cpubackend.NewMatMul(1, "bf16")
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	r := rand.New(rand.NewPCG(34, 1))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, shape := range [][2]int{{37, 40}, {70, 52}, {8, 16}} {
			m := randMat(r, dt, shape[0], shape[1])
			for _, n := range []int{9, 17, 64, 100, 256} {
				if n == 256 && shape[0] != 70 {
					continue // one shape at the most rows keeps the test fast
				}
				x := randFloats(r, n*m.Cols)
				before := slices.Clone(f.launched)
				got := matMulOn(t, gpu, m, x, n)
				if k := "gemm_" + dtypeSuffix(dt); !slices.Contains(f.launched[len(before):], k) {
					t.Fatalf("%v n=%d: %s not launched (%v)", dt, n, k, f.launched[len(before):])
				}
				want := matMulOn(t, ref, m, rounded(dt, x, n, m.Cols), n)
				mag := magnitude(m, x, n)
				what := fmt.Sprintf("%v %dx%dx%d", dt, n, m.Rows, m.Cols)
				checkScaled(t, what+" vs reference", got, want, mag, 1e-5)
				if dt == tensor.BF16 {
					checkScaled(t, what+" vs CPU bf16", got, matMulOn(t, cpu, m, x, n), mag, 1e-5)
				}
			}
		}
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
}

// Activations beyond f16's range (up to 1e30) multiply an f16 weight
// without overflow: to_f16_rows scales such rows by a power of two into
// range and the GEMM (the mma kernel, or cuBLAS followed by scale_rows)
// scales their results back; rows within range are rounded unscaled.
// Results are finite and within f16's rounding (2^-11 of the magnitude)
// of the exact float32 product.
func TestGEMM16F16Range(t *testing.T) {
	needKernels(t, "to_f16_rows", "scale_rows", "gemm_f16")
	r := rand.New(rand.NewPCG(34, 2))
	const n, rows, cols = 12, 20, 24
	m := randMat(r, tensor.F16, rows, cols)
	x := randFloats(r, n*cols)
	for i, s := range []float32{1, 1e5, 3e4, 65504, 1e30, 1, 7e8, 1, 1, 1, 1, 2e5} {
		for c := range cols {
			x[i*cols+c] *= s
		}
	}
	exact := matMulOn(t, reference.Backend{}, m, x, n)
	mag := magnitude(m, x, n)
	for _, cublas := range []bool{false, true} {
		f := newFakeOrSkip(t)
		f.cublas = cublas
		gpu := newBackend(f, Options{})
		if cublas {
			gpu.g16.trials = []gemmTrial{{key: gemmKey{16, rows, cols, tensor.F16}, best: gemmCUBLAS}}
		}
		got := matMulOn(t, gpu, m, x, n)
		for i, v := range got {
			if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
				t.Fatalf("cuBLAS %v: out[%d] = %v", cublas, i, v)
			}
		}
		checkScaled(t, "f16 rows out of range", got, exact, mag, 1.0/1024)
		checkScaled(t, "f16 as rounded", got, matMulOn(t, reference.Backend{}, m, rounded(tensor.F16, x, n, cols), n), mag, 1e-5)
		if cublas && (len(f.gemmExs) != 1 || !slices.Contains(f.launched, "scale_rows")) {
			t.Errorf("cuBLAS: gemmEx calls %v, kernels %v", f.gemmExs, f.launched)
		}
		if err := gpu.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The tuner times the mma kernel and cuBLAS once per row bucket and
// weight shape (on the fake driver's simulated clock), keeps the faster
// (the best of tuneReps timed runs each, the mma kernel only when it takes
// at most mmaMargin of cuBLAS's time) and reuses the choice for every
// product of the bucket; above 256 rows
// cuBLAS runs untimed, and without cuBLAS the mma kernel runs at every
// size. Each path's product matches the reference; Describe and
// GEMMTrials name the choices.
func TestGEMMTuner(t *testing.T) {
	needKernels(t, "to_bf16", "gemm_bf16")
	r := rand.New(rand.NewPCG(34, 3))
	const rows, cols = 40, 32
	m := randMat(r, tensor.BF16, rows, cols)
	f := newFakeOrSkip(t)
	f.cublas = true
	f.cost = map[string]time.Duration{"gemm_bf16": 5 * time.Microsecond, "gemmEx": 9 * time.Microsecond}
	gpu := newBackend(f, Options{})
	defer gpu.Close()
	gpu.g16.clock = func() time.Duration { return f.elapsed }
	if g := gpu.GEMM(); g != "cuBLAS (bf16, TF32 for f32 weights), and the mma kernel where faster (9-256 rows)" {
		t.Errorf("GEMM() = %q", g)
	}
	step := func(n int, wantKernels, wantEx int) {
		t.Helper()
		k0, e0 := count(f.launched, "gemm_bf16"), len(f.gemmExs)
		x := randFloats(r, n*cols)
		got := matMulOn(t, gpu, m, x, n)
		checkScaled(t, "tuned", got, matMulOn(t, reference.Backend{}, m, rounded(tensor.BF16, x, n, cols), n), magnitude(m, x, n), 1e-5)
		if k, e := count(f.launched, "gemm_bf16")-k0, len(f.gemmExs)-e0; k != wantKernels || e != wantEx {
			t.Errorf("n=%d: %d mma launches and %d cuBLAS calls, want %d and %d", n, k, e, wantKernels, wantEx)
		}
	}
	const runs = 1 + tuneReps // a warm-up and the timed runs, each path
	step(20, runs, runs)      // bucket 32 tuned: mma faster, by more than the margin
	step(30, 1, 0)            // bucket 32: mma
	f.cost["gemmEx"] = time.Microsecond
	step(40, runs, runs) // bucket 64 tuned: cuBLAS faster
	step(64, 0, 1)       // bucket 64: cuBLAS
	step(300, 0, 1)      // above 256: cuBLAS, untimed
	step(20, 1, 0)       // bucket 32 still mma
	f.cost["gemmEx"] = 6 * time.Microsecond
	step(100, runs, runs) // bucket 128 tuned: mma faster, but within the margin: cuBLAS
	step(128, 0, 1)
	want := []string{"32 x 40 x 32 bf16: mma 5µs, cuBLAS 9µs -> mma", "64 x 40 x 32 bf16: mma 5µs, cuBLAS 1µs -> cuBLAS",
		"128 x 40 x 32 bf16: mma 5µs, cuBLAS 6µs -> cuBLAS"}
	if got := gpu.GEMMTrials(); !slices.Equal(got, want) {
		t.Errorf("GEMMTrials() = %q, want %q", got, want)
	}
	if d := gpu.Describe(); !strings.HasSuffix(d, "; tuned 3 shapes: mma 1, cuBLAS 2") {
		t.Errorf("Describe() = %q", d)
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}

	// Without cuBLAS every size runs the mma kernel, untimed.
	g2, f2 := newFakeBackend(t, Options{NoCUBLAS: true})
	x := randFloats(r, 300*cols)
	matMulOn(t, g2, m, x, 300)
	if count(f2.launched, "gemm_bf16") != 1 || len(g2.GEMMTrials()) != 0 {
		t.Errorf("no cuBLAS, 300 rows: kernels %v, trials %v", f2.launched, g2.GEMMTrials())
	}
	if g := g2.GEMM(); !strings.HasPrefix(g, "mma kernel (bf16/f16 tensor cores), f32 weights matmul kernel (cuda: cuBLAS off") {
		t.Errorf("GEMM() = %q", g)
	}
}

func count(ss []string, s string) int {
	n := 0
	for _, v := range ss {
		if v == s {
			n++
		}
	}
	return n
}

// Options.MatMul "f32" keeps the float32 path (the matmul kernel, or
// cuBLAS on widened rows) for bf16 weights, and New refuses other values
// before it looks for a driver.
func TestMatMulPrecisionOption(t *testing.T) {
	needKernels(t, "matmul_bf16")
	gpu, f := newFakeBackend(t, Options{MatMul: "f32", NoCUBLAS: true})
	r := rand.New(rand.NewPCG(34, 4))
	m := randMat(r, tensor.BF16, 24, 40)
	x := randFloats(r, 11*40)
	got := matMulOn(t, gpu, m, x, 11)
	if !slices.Contains(f.launched, "matmul_bf16") || slices.Contains(f.launched, "gemm_bf16") {
		t.Errorf("MatMul f32 launched %v", f.launched)
	}
	checkScaled(t, "f32 path", got, matMulOn(t, reference.Backend{}, m, x, 11), magnitude(m, x, 11), 1e-5)
	if g := gpu.GEMM(); !strings.HasPrefix(g, "matmul kernel (") {
		t.Errorf("GEMM() = %q", g)
	}
	if _, err := New(Options{MatMul: "fp16"}); err == nil || !strings.Contains(err.Error(), `matmul precision "fp16": want bf16`) {
		t.Errorf("New with MatMul fp16: %v", err)
	}
}

// With its default bf16 prefill, the forward pass computes the CPU
// backend's default (--matmul bf16) function: prefill logits of every
// tiny architecture within 1e-3 of the largest of the CPU's. (Decode's
// few rows keep float32 activations on the GPU, so only prefill is
// compared.)
func TestForwardBF16MatchesCPU(t *testing.T) {
	needKernels(t, "to_bf16", "gemm_bf16", "gemm_f16", "attn_split")
	cpu, err := cpubackend.NewMatMul(1, "bf16")
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	for name, dir := range tinyArchitectures(t) {
		t.Run(name, func(t *testing.T) {
			gpu, f := newFakeBackend(t, Options{})
			cpuM := loadModel(t, dir, model.Options{Backend: cpu, MaxContext: 64})
			gpuM := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
			ids := testIDs(24, cpuM.Config().VocabSize)
			want, err := cpuM.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gpuM.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for p := range want {
				d, tol := maxAbsDiff(got[p], want[p]), 1e-3*max(1, maxAbs(want[p]))
				if math.IsNaN(d) || d > tol {
					t.Fatalf("position %d: max abs logit difference %.3g (tolerance %.3g), CUDA vs CPU bf16", p, d, tol)
				}
				worst = max(worst, d/tol)
			}
			gemms := count(f.launched, "gemm_bf16") + count(f.launched, "gemm_f16")
			t.Logf("worst difference %.2g of the tolerance; %d mma launches", worst, gemms)
		})
	}
}
