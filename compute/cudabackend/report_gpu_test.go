//go:build gpu

package cudabackend

// The GPU report's tests, which the bundle's run.sh (make gpu-bundle)
// runs one at a time with -test.run, each printing its rows as it
// measures them (see report_test.go). Without a GPU each fails at once,
// TestReportDevice with a line "NODEVICE|why" that run.sh reads to
// report the GPU rows as not run. TestReportCPUGolden needs no GPU.
//
// The environment: KAKEYA_SHARED (the data set: the bundle's data/),
// KAKEYA_REPORT_JSON and KAKEYA_REPORT_BUDGET (report_test.go), and for
// the checkpoint measurements KAKEYA_REPORT_MODEL, a checkpoint written
// by kakeya-testmodel, and KAKEYA_REPORT_SHAPE, its preset's name;
// KAKEYA_REPORT_SHAPES lists the presets TestReportKernels measures.

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tensor"
)

// reportContexts are the contexts of the attention and throughput rows.
var reportContexts = []int{512, 2048, 8192}

// reportCaches returns the caches of the throughput rows:
// KAKEYA_REPORT_CACHES (names separated by spaces or commas), by default
// plain, int8, kakeya-pc and kakeya-block:b=3: the host-encoded cache
// last, since a cell is skipped when the slowest cell so far says it would
// not finish in time (kakeya-block's prefill runs at about 0.035x plain's
// on the 7B shape), so that it costs kakeya-pc's rows nothing.
func reportCaches() []string {
	if s := strings.FieldsFunc(os.Getenv("KAKEYA_REPORT_CACHES"), func(r rune) bool { return r == ' ' || r == ',' }); len(s) > 0 {
		return s
	}
	return []string{"plain", "int8", "kakeya-pc", "kakeya-block:b=3"}
}

// noDevice says why err means the machine has no GPU to report on ("no
// CUDA driver", "no CUDA device"), or "" when it is another failure.
func noDevice(err error) string {
	switch {
	case strings.Contains(err.Error(), "dlopen(") || strings.Contains(err.Error(), "cannot open shared object file") ||
		strings.Contains(err.Error(), "needs cgo"):
		return "no CUDA driver"
	case errors.Is(err, ErrNoDevice):
		return "no CUDA device"
	}
	return ""
}

// The device, its driver and memory; without one, the line run.sh reads.
func TestReportDevice(t *testing.T) {
	r := newReporter(t, os.Stdout)
	b, err := New(Options{})
	if err != nil {
		if why := noDevice(err); why != "" {
			fmt.Printf("NODEVICE|%s: %v\n", why, err)
			t.Fatalf("%s: %v", why, err)
		}
		r.row("device", "cuda", statusFail, err.Error(), nil)
		return
	}
	deviceRow(r, b)
	if err := b.Close(); err != nil {
		r.row("device", "close", statusFail, err.Error(), nil)
	}
}

// The CPU backend's logits against the golden files: the reference the
// GPU rows are read against, on the machine that runs them.
func TestReportCPUGolden(t *testing.T) {
	r := newReporter(t, os.Stdout)
	goldenRows(r, "cpu-golden", goldenShared(t, goldenCases), goldenCases, []goldenRun{
		{name: "cpu", opts: model.Options{Backend: cpuF32(t, 0)}, decTol: 1e-3, preTol: 1e-3},
	})
}

// The CUDA backend's logits against the golden files, with prefill's
// products in float32 (exact-gemm: Options.MatMul f32 and cuBLAS in
// float32, as exact as the CPU, less a bf16 cache rounding flip) and by
// default, which rounds prefill's activations to bf16 for the tensor cores
// (bf16 weights) or to TF32's 10 mantissa bits (f32 weights).
func TestReportGolden(t *testing.T) {
	r := newReporter(t, os.Stdout)
	shared := goldenShared(t, goldenCases)
	exact, tf32 := openGPU(t, Options{ExactGEMM: true, MatMul: "f32"}), openGPU(t, Options{})
	goldenRows(r, "golden", shared, goldenCases, []goldenRun{
		{name: "cuda exact-gemm", opts: model.Options{Backend: exact}, decTol: 1e-3, preTol: 1e-3, rel: true},
		{name: "cuda", opts: model.Options{Backend: tf32}, decTol: 1e-3, preTol: 1e-2, rel: true},
	})
}

// Greedy generation on the GPU against the CPU, token for token.
func TestReportGreedy(t *testing.T) {
	r := newReporter(t, os.Stdout)
	// Prefill in float32 (Options.MatMul f32), as the CPU it is compared
	// with: bf16 activations could flip a token of small margin.
	greedyRows(r, "greedy", goldenShared(t, goldenCases), goldenCases, openGPU(t, Options{MatMul: "f32"}), 128)
}

// Sampled tokens drawn on the GPU (draw_rows) at Qwen2.5's vocabulary of
// 151,936 tokens, 1 and 64 rows, with top-p, top-k and top-p, and min-p:
// the time per draw and per row, and the tokens against the host
// Sampler's from the same uniforms.
func TestReportDraw(t *testing.T) {
	r := newReporter(t, os.Stdout)
	drawRows(r, "draw", openGPU(t, Options{}), testmodel.Presets["qwen2.5-0.5b"].Vocab, []int{1, 64}, 100*time.Millisecond)
}

// Gemma 2 and Gemma 3 (tiny presets) on the GPU: logits against the
// float64 reference past the sliding window, with prefill's products in
// float32 (exact-gemm), and greedy tokens against the CPU's.
func TestReportGemma(t *testing.T) {
	r := newReporter(t, os.Stdout)
	gemmaRows(r, "gemma", openGPU(t, Options{ExactGEMM: true, MatMul: "f32"}), 40)
}

// Each kernel at the layer shapes of every preset in
// KAKEYA_REPORT_SHAPES (default Qwen2.5 0.5B, 1.5B and 7B) against its
// reference, with its time and bandwidth.
func TestReportKernels(t *testing.T) {
	r := newReporter(t, os.Stdout)
	b := openGPU(t, Options{NoGraphs: true})
	shapes := "qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b"
	if s := os.Getenv("KAKEYA_REPORT_SHAPES"); s != "" {
		shapes = s
	}
	for _, name := range strings.Split(shapes, ",") {
		spec, ok := testmodel.Presets[name]
		if !ok {
			t.Fatalf("KAKEYA_REPORT_SHAPES: no preset %q", name)
		}
		(&kernelBench{r: r, b: b, shape: name, spec: spec, prefill: 512, contexts: reportContexts, block: 64, timing: 50 * time.Millisecond}).run()
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// The 16-bit GEMMs at the layer shapes of Qwen2.5 0.5B and 7B
// (KAKEYA_REPORT_GEMM_SHAPES), 16 to 2048 rows: the mma kernel and cuBLAS
// GemmEx each timed alone, beside the performance model's prediction.
func TestReportGEMM(t *testing.T) {
	r := newReporter(t, os.Stdout)
	b := openGPU(t, Options{NoGraphs: true})
	shapes := "qwen2.5-0.5b,qwen2.5-7b"
	if s := os.Getenv("KAKEYA_REPORT_GEMM_SHAPES"); s != "" {
		shapes = s
	}
	for _, name := range strings.Split(shapes, ",") {
		spec, ok := testmodel.Presets[name]
		if !ok {
			t.Fatalf("KAKEYA_REPORT_GEMM_SHAPES: no preset %q", name)
		}
		(&kernelBench{r: r, b: b, shape: name, spec: spec, timing: 30 * time.Millisecond}).gemmRows([]int{16, 64, 256, 512, 2048})
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// reportModel returns the checkpoint KAKEYA_REPORT_MODEL names and its
// preset, KAKEYA_REPORT_SHAPE.
func reportModel(t *testing.T) (dir, shape string, spec testmodel.Spec) {
	dir, shape = os.Getenv("KAKEYA_REPORT_MODEL"), os.Getenv("KAKEYA_REPORT_SHAPE")
	spec, ok := testmodel.Presets[shape]
	if dir == "" || !ok {
		t.Fatalf("KAKEYA_REPORT_MODEL=%q KAKEYA_REPORT_SHAPE=%q: want a checkpoint written by kakeya-testmodel and its shape", dir, shape)
	}
	return dir, shape, spec
}

// Prefill and decode tokens/s of the checkpoint with plain, int8, kakeya
// and kakeya-pc (a synthetic calibration) caches at each context, next to
// the bandwidth bound, with the driver calls of a decode step.
func TestReportThroughput(t *testing.T) {
	r := newReporter(t, os.Stdout)
	dir, shape, spec := reportModel(t)
	(&throughput{r: r, step: "throughput", b: newGPU(t), shape: shape, spec: spec, dir: dir,
		caches: reportCaches(), contexts: reportContexts, steps: 64, block: 64}).run()
}

// Quantized weights (Options.Weights q8_0, q4_k): ref-qwen2-6m on the GPU
// against the float64 reference backend over the same dequantized
// weights.
func TestReportQuant(t *testing.T) {
	r := newReporter(t, os.Stdout)
	quantRows(r, "quant", goldenShared(t, goldenCases), openGPU(t, Options{MatMul: "f32"}), []string{"q8_0", "q4_k"}, 64)
}

// Decode's quantized products (quant_x and matvec_q8) at the feed-forward
// shapes of Qwen2.5 0.5B and 7B, Q4_K, Q6_K and Q8_0 (the Q4_K_M mix and
// Q8_0), one and 8 rows, with their bandwidth beside the device's.
func TestReportQuantKernels(t *testing.T) {
	r := newReporter(t, os.Stdout)
	b := openGPU(t, Options{NoGraphs: true})
	for _, name := range []string{"qwen2.5-0.5b", "qwen2.5-7b"} {
		(&kernelBench{r: r, b: b, shape: name, spec: testmodel.Presets[name], timing: 50 * time.Millisecond}).quantMatVec(
			[]tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q8_0}, []int{1, 8})
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// Prefill and decode tokens/s of the checkpoint quantized on load to q4_k
// and q8_0 (KAKEYA_REPORT_WEIGHTS), plain cache, context 512, next to the
// bandwidth bound of the bytes it holds.
func TestReportQuantThroughput(t *testing.T) {
	r := newReporter(t, os.Stdout)
	dir, shape, spec := reportModel(t)
	ws := []string{"q4_k", "q8_0"}
	if s := os.Getenv("KAKEYA_REPORT_WEIGHTS"); s != "" {
		ws = strings.Split(s, ",")
	}
	for _, w := range ws {
		(&throughput{r: r, step: "quant-throughput", b: newGPU(t), shape: shape, spec: spec, dir: dir,
			caches: []string{"plain"}, contexts: []int{512}, steps: 32, block: 64, weights: w}).run()
	}
}

// The kernels launched per decode step, with CUDA graphs and without.
func TestReportLaunches(t *testing.T) {
	r := newReporter(t, os.Stdout)
	dir, shape, spec := reportModel(t)
	launchRows(r, "launches", func(o Options) *Backend { return openGPU(t, o) }, shape, spec, dir, 512, 32, 64)
}

// Where a prefill's and a decode step's time goes, kernel by kernel (each
// launch alone and waited for; CUDA graphs off, so that a decode step's
// kernels are timed one by one): plain at 512 and 2048 tokens, int8 and
// kakeya-pc at 512, and batched decode steps of 16 and 64 sequences.
func TestReportProfile(t *testing.T) {
	r := newReporter(t, os.Stdout)
	dir, shape, _ := reportModel(t)
	profileRows(r, "profile", shape, openGPU(t, Options{NoGraphs: true}), dir, []string{"plain", "int8", "kakeya-pc"}, []int{512, 2048}, []int{16, 64}, 64)
}
