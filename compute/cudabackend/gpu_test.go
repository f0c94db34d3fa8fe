//go:build gpu

package cudabackend

// The checks of a real GPU, run by make gpu-check (go test -tags gpu -v
// ./compute/cuda/): the CUDA forward pass against the CPU backend on every
// tiny architecture and stories260K, then decode and prefill throughput of a
// Qwen2.5-0.5B-shaped checkpoint next to the memory-bandwidth bound. On a
// machine without a GPU they fail at once, saying why.

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// newGPU opens device 0 or fails the test with the reason.
func newGPU(t testing.TB) *Backend { return openGPU(t, Options{}) }

// openGPU opens a device with opts, closed with the test, or fails the
// test with the reason.
func openGPU(t testing.TB, opts Options) *Backend {
	t.Helper()
	b, err := New(opts)
	if err != nil {
		t.Fatalf("make gpu-check needs an NVIDIA GPU and its driver: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("device: %s", b.Device())
	return b
}

// maxRelDiff returns the largest |got-want| over the largest |want|.
func maxRelDiff(got, want []float32) float64 {
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	return maxAbsDiff(got, want) / max(scale, 1e-30)
}

// The real CUDA forward pass gives the CPU backend's logits within 1e-2
// relative on every architecture, prefill and decode, through float32,
// bf16, int8 and preconditioned int8 (keys) cache blocks.
func TestGPUParity(t *testing.T) {
	newGPU(t) // fails at once without a device
	dirs := tinyArchitectures(t)
	const tokens, pre = 40, 24
	// Default options (bf16 prefill on cuBLAS or the mma kernel, graphs,
	// the decode fusions), the float32 prefill, and the separate kernels
	// alone (the mma kernel for every bf16 product).
	for _, opts := range []Options{{}, {MatMul: "f32"}, {NoCUBLAS: true, NoGraphs: true, NoFusion: true}} {
		gpu := openGPU(t, opts)
		t.Logf("%+v: prefill products by %s", opts, gpu.GEMM())
		for name, dir := range dirs {
			t.Run(fmt.Sprintf("%s/graphs=%v/matmul=%s", name, !opts.NoGraphs, opts.MatMul), func(t *testing.T) {
				cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 0), MaxContext: 64})
				gpuM := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
				ids := testIDs(tokens, cpuM.Config().VocabSize)
				cal := randCalibration(t, cpuM, 13)
				for _, sp := range []struct {
					name string
					spec kvconfig.Spec
				}{
					{"f32", kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "f32"}},
					{"bf16", kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "bf16"}},
					{"int8", kvconfig.Spec{KV: "int8", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "bf16"}},
					{"pre+int8", kvconfig.Spec{KV: "int8", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "bf16", Precondition: kvconfig.On, Codebooks: kvconfig.Off}},
				} {
					c := cal
					if sp.spec.Precondition != kvconfig.On {
						c = nil
					}
					want, _ := runCal(t, cpuM, sp.spec, c, ids, pre)
					got, _ := runCal(t, gpuM, sp.spec, c, ids, pre)
					var worst float64
					for p := range want {
						d := maxRelDiff(got[p], want[p])
						if math.IsNaN(d) || d > 1e-2 {
							t.Fatalf("%s cache, position %d: max relative logit difference %.3g, CUDA vs CPU", sp.name, p, d)
						}
						worst = max(worst, d)
					}
					t.Logf("%s cache: max relative logit difference %.3g", sp.name, worst)
				}
				if err := gpu.Err(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestGPUThroughput prints decode and prefill tokens/s of a seeded random
// checkpoint with Qwen2.5-0.5B's exact shape at contexts 512, 2048 and
// 8192, plain bf16 against int8 and kakeya caches, next to the bound
// memory bandwidth puts on decode: the bytes a token reads (every weight
// matrix once, plus the cache as the device holds it) over the device's
// peak bandwidth.
func TestGPUThroughput(t *testing.T) {
	gpu := newGPU(t)
	dir, err := os.MkdirTemp("", "kakeya-gpu-check-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	spec := testmodel.Qwen25_05B
	if err := testmodel.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	const decodeSteps = 64
	contexts := []int{512, 2048, 8192}
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: contexts[len(contexts)-1] + decodeSteps})
	weightBytes := qwenWeightBytes(spec)
	var table strings.Builder
	fmt.Fprintf(&table, "%s; prefill products: %s\nQwen2.5-0.5B shape (bf16 weights, %.0f MB read per token)\n", gpu.Device(), gpu.GEMM(), float64(weightBytes)/1e6)
	fmt.Fprintf(&table, "%-10s %6s %12s %12s %12s %10s %10s\n", "cache", "ctx", "prefill t/s", "decode t/s", "bound t/s", "% bound", "KV MB")
	for _, cache := range []string{"plain", "int8", "kakeya-block:b=3", "kakeya-pc"} {
		sp := kvconfig.Spec{KV: "none", BlockSize: 64, CacheType: "bf16"}
		if cache != "plain" {
			sp = kvconfig.Spec{KV: cache, BlockSize: 64, HotWindow: 64, Boundary: "none", CacheType: "bf16"}
		}
		p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), cacheCalibration(cache, m))
		if err != nil {
			t.Fatal(err)
		}
		for _, ctx := range contexts {
			s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: sp.BlockSize})
			if err != nil {
				t.Fatal(err)
			}
			prompt := testIDs(ctx, spec.Vocab)
			start := time.Now()
			if _, err := s.Forward(prompt, false); err != nil {
				t.Fatal(err)
			}
			prefill := float64(ctx) / time.Since(start).Seconds()
			// One step outside the timer: graphs are captured on the
			// second sight of a launch run.
			if _, err := s.Forward([]int{7}, false); err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			for i := range decodeSteps - 1 {
				if _, err := s.Forward([]int{(i*31 + 7) % 1000}, false); err != nil {
					t.Fatal(err)
				}
			}
			decode := float64(decodeSteps-1) / time.Since(start).Seconds()
			// The bytes attention reads: int8, kakeya and kakeya-pc
			// blocks stay encoded on the device.
			kv := s.KVStats().Bytes()
			bound := gpu.Bandwidth() / float64(weightBytes+kv)
			fmt.Fprintf(&table, "%-9s %6d %12.0f %12.1f %12.1f %9.0f%% %10.1f\n", cache, ctx, prefill, decode, bound, 100*decode/bound, float64(kv)/1e6)
			s.Close()
		}
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
	captures, replays, direct, off := gpu.GraphStats()
	used, peak := gpu.MemoryStats()
	fmt.Fprintf(&table, "graphs: %d captured, %d replays, %d kernels launched directly (off: %v); device memory %.0f MB, peak %.0f MB\n",
		captures, replays, direct, off, float64(used)/1e6, float64(peak)/1e6)
	fmt.Fprint(os.Stdout, "\n"+table.String())
}

// qwenWeightBytes returns the bytes of the weight matrices a decode step
// reads once each: the layers' projections and the (tied) output head.
func qwenWeightBytes(s testmodel.Spec) int64 {
	h, q, kv, inter := int64(s.Hidden), int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim), int64(s.Intermediate)
	perLayer := h*q + 2*h*kv + q*h + 3*h*inter
	return int64(s.DType.Size()) * (int64(s.Layers)*perLayer + int64(s.Vocab)*h)
}
