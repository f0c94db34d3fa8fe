package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/tensor"
)

// quantWeight returns rows x cols random blocks of f: every byte drawn at
// random (so every bit of the packed codes and scales is exercised) but
// the f16 fields, which are set to scales of 0.001..0.05 so that the
// values stay finite and of a weight's size.
func quantWeight(r *rand.Rand, f *tensor.QuantFormat, rows, cols int) []byte {
	rb, ok := f.DType.RowBytes(cols)
	if !ok {
		panic(fmt.Sprintf("%s: %d columns", f.Name, cols))
	}
	q := make([]byte, rows*rb)
	for i := range q {
		q[i] = byte(r.Uint32())
	}
	for b := 0; b < len(q); b += f.Bytes {
		for _, fl := range f.Fields {
			if fl.Kind == tensor.FieldF16 {
				h := tensor.F32ToF16(0.001 + 0.049*r.Float32())
				q[b+fl.Offset], q[b+fl.Offset+1] = byte(h), byte(h>>8)
			}
		}
	}
	return q
}

// quantRef returns x (n rows of cols) times the dequantized w (rows x
// cols, tensor.DequantizeRow) transposed in float64, and each output's sum
// of |w x|, the scale of its rounding error.
func quantRef(t testing.TB, dt tensor.DType, w []byte, x []float32, n, rows, cols int) (ref, mag []float64) {
	t.Helper()
	rb, _ := dt.RowBytes(cols)
	wf := make([]float32, cols)
	ref, mag = make([]float64, n*rows), make([]float64, n*rows)
	for r := range rows {
		if err := tensor.DequantizeRow(wf, dt, w[r*rb:(r+1)*rb]); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			var s, m float64
			for c, v := range wf {
				p := float64(v) * float64(x[i*cols+c])
				s, m = s+p, m+math.Abs(p)
			}
			ref[i*rows+r], mag[i*rows+r] = s, m
		}
	}
	return ref, mag
}

// Every quantized type's products on the emulated device against float64
// over the dequantized weights: prefill's matmul_q for 70 rows (two tiles
// each way), rows not a multiple of anything (7, 67), and the K types'
// 256-value super-blocks several to a row, within 1e-6 of the sum of
// |w x|; prefill's default path (dequant_q to bf16, then the 16-bit GEMM,
// x and w each rounded to bf16) within 2^-7 of it; and decode's (1, 3, 8
// and 19 rows: three launches, as a batched decode step), which quantizes
// x to 8 bits per group as the CPU does (TestQuantMatVecMatchesCPU checks
// it closely), within 0.02 of it.
func TestQuantMatMulMatchesFloat64(t *testing.T) {
	exact, _ := newFakeBackend(t, Options{MatMul: "f32"})
	bf16, f := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(35, 1))
	for i := range tensor.Formats {
		f := &tensor.Formats[i]
		for _, tc := range []struct{ n, rows, blocks int }{
			{1, 7, 3}, {3, 37, 2}, {8, 9, 6}, {19, 5, 1}, {70, 67, 2},
		} {
			cols := tc.blocks * f.Block
			if tc.n == 8 && f.Block == 32 {
				cols = 45 * 32
			}
			t.Run(fmt.Sprintf("%s/n%d/%dx%d", f.Name, tc.n, tc.rows, cols), func(t *testing.T) {
				q := quantWeight(r, f, tc.rows, cols)
				x := make([]float32, tc.n*cols)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				ref, mag := quantRef(t, f.DType, q, x, tc.n, tc.rows, cols)
				for _, bc := range []struct {
					name string
					gpu  *Backend
					tol  float64
				}{{"f32", exact, 1e-6}, {"bf16", bf16, 1.0 / 128}} {
					if tc.n <= quantSplitRows {
						if bc.name == "bf16" {
							continue // decode is matvec_q8 either way
						}
						bc.tol = 0.02 // 8-bit activations
					}
					got := quantProduct(t, bc.gpu, f.DType, q, x, tc.n, tc.rows, cols)
					for i := range got {
						if d := math.Abs(float64(got[i]) - ref[i]); !(d <= bc.tol*mag[i]+1e-30) {
							t.Fatalf("%s: out[%d] = %g, float64 reference %g (|error| %.3g, sum |w x| %.3g)", bc.name, i, got[i], ref[i], d, mag[i])
						}
					}
				}
			})
		}
	}
	if c := f.kernelCounts(); !strings.Contains(c, "dequant_q_q4_k:") || !strings.Contains(c, "gemm_bf16:") {
		t.Errorf("the default prefill path ran %s, want dequant_q and gemm_bf16", c)
	}
}

// A quantized embedding table's rows come out as tensor.DequantizeRow
// widens them.
func TestQuantEmbed(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(35, 2))
	for i := range tensor.Formats {
		f := &tensor.Formats[i]
		rows, cols := 5, 2*f.Block
		q := quantWeight(r, f, rows, cols)
		w, err := gpu.Upload(tensor.Mat{DType: f.DType, Rows: rows, Cols: cols, Q: q})
		if err != nil {
			t.Fatal(err)
		}
		ids := []int{4, 0, 4, 2}
		out := gpu.Alloc(len(ids) * cols)
		gpu.Embed(out, w, ids)
		got := make([]float32, len(ids)*cols)
		gpu.Read(got, out)
		rb, _ := f.DType.RowBytes(cols)
		want := make([]float32, cols)
		for j, id := range ids {
			if err := tensor.DequantizeRow(want, f.DType, q[id*rb:(id+1)*rb]); err != nil {
				t.Fatal(err)
			}
			for c, v := range want {
				// Within one rounding: the device may fuse Q4_K's d*q - m.
				if g := got[j*cols+c]; math.Abs(float64(g-v)) > 1e-6*math.Abs(float64(v))+1e-9 {
					t.Fatalf("%s: row %d (id %d) value %d = %g, want %g", f.Name, j, id, c, g, v)
				}
			}
		}
	}
}

// Upload takes quantized weights only in whole blocks, and says so.
func TestUploadQuantizedChecks(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	for _, tc := range []struct {
		m    tensor.Mat
		want string
	}{
		{tensor.Mat{DType: tensor.Q4_K, Rows: 2, Cols: 100, Q: make([]byte, 1000)}, "not whole blocks of 256"},
		{tensor.Mat{DType: tensor.Q8_0, Rows: 2, Cols: 64, Q: make([]byte, 100)}, "holds 100 bytes, want 136"},
	} {
		if _, err := gpu.Upload(tc.m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %dx%d: Upload error %v, want one saying %q", tc.m.DType, tc.m.Rows, tc.m.Cols, err, tc.want)
		}
	}
}

// ref-qwen2-6m quantized on load (Options.Weights) runs on the emulated
// CUDA backend as on the float64 reference backend over the same
// dequantized weights, and as on the CPU backend, whose quantized kernels
// also round the activations to 8 bits per block (ggml's q8 activations),
// with the same greedy tokens: a prefill of 34 tokens (past
// quantSplitRows: matmul_q) and 5 greedy decode steps (quant_x and
// matvec_q8: 8-bit activations, as the CPU's), every matrix and the tied
// embedding table quantized (the model's rows, 256 and 768 values, are
// whole K blocks). With MatMul "f32" (prefill's attention in float32
// too; the decode kernels are the same either way) the prefill's logits
// stay within 1e-5 of the largest of the float64 reference's (measured up
// to 1e-6) and the decode steps' within 0.03 (8-bit activations), and all
// within 0.03 of the CPU's (measured up to 0.018: its 8-bit activations
// in prefill too); q4_k also with the
// default bf16 prefill (dequant_q and the 16-bit GEMMs), within 0.05 of
// the CPU's (measured 0.017) with the same greedy tokens. q8_0 and q4_k
// run here (4-9 s of emulation each); make test-long (KAKEYA_LONG=1) runs
// every type, whose kernels TestQuantMatMulMatchesFloat64 checks here.
func TestQuantizedModelMatchesCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates the kernels of whole forward passes")
	}
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	const pre, steps = quantSplitRows + 2, 5
	spec := kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "f32"}
	types := []string{"q8_0", "q4_k"}
	if os.Getenv("KAKEYA_LONG") == "1" {
		types = append(types, "q4_0", "q5_0", "q5_k", "q6_k")
	}
	for _, wt := range types {
		t.Run(wt, func(t *testing.T) {
			t.Parallel()
			gpu, f := newFakeBackend(t, Options{MatMul: "f32"})
			gpuM := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64, Weights: wt})
			refM := loadModel(t, dir, model.Options{Backend: reference.Backend{}, MaxContext: 64, Weights: wt})
			cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 64, Weights: wt})
			if w := gpuM.Weights(); !strings.Contains(w, wt) {
				t.Fatalf("weights %q, want %s", w, wt)
			}
			// The GPU's logits over a prompt and its greedy continuation.
			ids := testIDs(pre, gpuM.Config().VocabSize)
			s, err := gpuM.NewSequenceOpts(model.SequenceOptions{BlockSize: spec.BlockSize})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l, err := s.Forward(ids, true)
			if err != nil {
				t.Fatal(err)
			}
			vocab := len(l) / pre
			var got [][]float32
			for i := range pre {
				got = append(got, l[i*vocab:(i+1)*vocab])
			}
			for range steps {
				ids = append(ids, pick.ArgMax(got[len(got)-1]))
				l, err := s.Forward(ids[len(ids)-1:], false)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, append([]float32(nil), l...))
			}
			want, _ := run(t, refM, spec, ids, pre)
			cpu, _ := run(t, cpuM, spec, ids, pre)
			var worstRef, worstCPU float64
			for p := range got {
				scale := max(1, maxAbs(want[p]))
				dRef, dCPU := maxAbsDiff(got[p], want[p])/scale, maxAbsDiff(got[p], cpu[p])/scale
				worstRef, worstCPU = max(worstRef, dRef), max(worstCPU, dCPU)
				refTol := 1e-5 // prefill: matmul_q in float32
				if p >= pre {
					refTol = 0.03 // decode: matvec_q8's 8-bit activations, as the CPU's
				}
				if !(dRef <= refTol) || !(dCPU <= 0.03) {
					t.Errorf("position %d: max abs logit difference %.3g of the largest against the float64 reference, %.3g against the CPU", p, dRef, dCPU)
				}
				if p >= pre-1 && p < len(ids)-1 {
					if c := pick.ArgMax(cpu[p]); c != ids[p+1] {
						t.Errorf("position %d: greedy token %d on CUDA, %d on the CPU", p, ids[p+1], c)
					}
				}
			}
			t.Logf("%s: worst logit difference over the largest: %.2g against float64, %.2g against the CPU; greedy tokens %v; kernels: %s",
				wt, worstRef, worstCPU, ids[pre:], f.kernelCounts())
			if wt != "q4_k" {
				return
			}
			// The default prefill path (dequant_q to bf16, the 16-bit
			// GEMMs and bf16 prefill attention) against the CPU.
			g16, f16 := newFakeBackend(t, Options{})
			g16M := loadModel(t, dir, model.Options{Backend: g16, MaxContext: 64, Weights: wt})
			got16, _ := run(t, g16M, spec, ids, pre)
			var worst16 float64
			for p := range got16 {
				d := maxAbsDiff(got16[p], cpu[p]) / max(1, maxAbs(cpu[p]))
				worst16 = max(worst16, d)
				if !(d <= 0.05) || p >= pre-1 && p < len(ids)-1 && pick.ArgMax(got16[p]) != ids[p+1] {
					t.Errorf("bf16 prefill: position %d: max abs logit difference %.3g of the largest against the CPU, greedy token %d (want %d)", p, d, pick.ArgMax(got16[p]), ids[p+1])
				}
			}
			t.Logf("bf16 prefill: worst logit difference over the largest against the CPU %.2g; kernels: %s", worst16, f16.kernelCounts())
		})
	}
}
