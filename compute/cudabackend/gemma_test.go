package cudabackend

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// The CUDA backend runs Gemma's operations and its sliding layers.
var (
	_ compute.ArchOps   = (*Backend)(nil)
	_ compute.SlidingKV = (*Backend)(nil)
)

// gemmaDirs writes the tiny Gemma 2 and Gemma 3 presets (window 8:
// Gemma 2's softcaps, Gemma 3's q/k norms and two RoPE bases).
func gemmaDirs(t testing.TB) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for name, spec := range map[string]testmodel.Spec{"gemma2": testmodel.Gemma2Tiny, "gemma3": testmodel.Gemma3Tiny} {
		dirs[name] = filepath.Join(t.TempDir(), name)
		if err := testmodel.Write(dirs[name], spec); err != nil {
			t.Fatal(err)
		}
	}
	return dirs
}

// Gemma 2 and Gemma 3 on the CUDA backend — host logic on a fake driver,
// kernels emulated — give the float64 reference backend's logits (which
// model's TestGemmaMatchesFloat64 holds to an independent transcription
// of transformers' Gemma) within TestForwardMatchesCPU's tolerance: a
// prefill of 10 tokens (past maxMatVecRows: the separate kernels), then
// decode steps through the fused kernels and captured graphs to position
// 27, more than three windows of 8, so the sliding layers read only the
// blocks they still hold and release the rest (as many bytes held as on
// the reference). Greedy decoding from a prompt gives the CPU backend's
// tokens.
func TestGemmaForwardMatchesReference(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of several forward passes")
	}
	needKernels(t, "matvec_f32", "norm_qkv_f32", "norm_swiglu_f32", "gelu_tanh_mul", "scalar_mul", "softcap", "attn_split")
	const tokens, pre = 28, 10
	for name, dir := range gemmaDirs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gpu, f := newFakeBackend(t, Options{MatMul: "f32"})
			gpuM := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
			refM := loadModel(t, dir, model.Options{Backend: refbackend.Backend{}, MaxContext: 64})
			if w := gpuM.CacheShape().Windows; w == nil {
				t.Fatal("the CUDA backend's cache has no sliding layers")
			}
			ids := testIDs(tokens, gpuM.Config().VocabSize)
			for _, spec := range []kvconfig.Spec{
				{KV: "none", BlockSize: 4, CacheType: "f32"},
				{KV: "none", BlockSize: 4, CacheType: "bf16"},
				// The full layers' old blocks encoded (int8, read by the
				// kernel), the sliding layers' kept hot.
				{KV: "int8", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "f32"},
			} {
				want, stW := run(t, refM, spec, ids, pre)
				got, stG := run(t, gpuM, spec, ids, pre)
				var worst float64
				for p := range want {
					d, tol := maxAbsDiff(got[p], want[p]), 1e-3*max(1, maxAbs(want[p]))
					if spec.KV != "none" && d > tol {
						// As in TestForwardMatchesCPU: an int8 code one
						// step apart moves the logits smoothly.
						kl, err := eval.KL(want[p], got[p])
						if err != nil {
							t.Fatal(err)
						}
						if d < 100*tol && kl < 1e-5 && pick.ArgMax(got[p]) == pick.ArgMax(want[p]) {
							continue
						}
					}
					if math.IsNaN(d) || d > tol {
						t.Fatalf("%s cache, position %d: max abs logit difference %.3g, CUDA vs reference (tolerance %.3g)", spec.CacheType+"/"+spec.KV, p, d, tol)
					}
					worst = max(worst, d/tol)
				}
				if stG.Hot != stW.Hot || stG.Compressed != stW.Compressed {
					t.Errorf("%s cache: CUDA holds %d hot + %d encoded bytes, the reference %d + %d", spec.CacheType+"/"+spec.KV, stG.Hot, stG.Compressed, stW.Hot, stW.Compressed)
				}
				t.Logf("%s/%s cache: worst difference %.2g of the tolerance", spec.CacheType, spec.KV, worst)
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
			captures, replays, _, off := gpu.GraphStats()
			if captures == 0 || replays <= captures || off != nil {
				t.Errorf("graphs: %d captured, %d replays, off %v; decode steps should replay", captures, replays, off)
			}
			dt := map[string]string{"gemma2": "f32", "gemma3": "bf16"}[name] // the presets' weights
			for _, k := range []string{"norm_qkv_" + dt, "norm_swiglu_" + dt, "scalar_mul", "rmsnorm_add"} {
				if kernelCount(f, k) == 0 {
					t.Errorf("no %s launched: %s", k, f.kernelCounts())
				}
			}
			if name == "gemma2" && kernelCount(f, "softcap") == 0 {
				t.Errorf("no softcap launched for Gemma 2's final logits: %s", f.kernelCounts())
			}

			// Greedy decoding: the CPU backend's tokens.
			cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 64})
			g, c := greedyTokens(t, gpuM, ids[:6], 20), greedyTokens(t, cpuM, ids[:6], 20)
			if !slices.Equal(g, c) {
				t.Errorf("greedy tokens: CUDA %v, CPU %v", g, c)
			}
			t.Logf("kernels: %s", f.kernelCounts())
		})
	}
}

// greedyTokens decodes steps tokens greedily after prompt.
func greedyTokens(t testing.TB, m *model.Model, prompt []int, steps int) []int {
	t.Helper()
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, out := prompt, []int(nil)
	for range steps {
		l, err := s.Forward(in, false)
		if err != nil {
			t.Fatal(err)
		}
		next := pick.ArgMax(l)
		out = append(out, next)
		in = []int{next}
	}
	return out
}

// A batched Gemma step (every sequence's attention in one attn_batch per
// layer, each layer kind with its window, scale and softcap) computes for
// each sequence what it computes alone, as TestBatchMatchesSequences
// checks for Qwen2: three sequences joining at different steps, decoding
// 16 tokens each past prompts of 10, 3 and 6 (26 tokens at most: past
// three windows of 8), so their sliding layers release blocks between
// batched steps; decode steps replay graphs.
func TestGemmaBatchMatchesSequences(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of several forward passes")
	}
	needKernels(t, "matvec_f32", "attn_batch", "attn_combine")
	for name, dir := range gemmaDirs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gpu, f := newFakeBackend(t, Options{MatMul: "f32"})
			m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
			vocab := m.Config().VocabSize
			// 12 decode steps: every sequence ends past the window of 8.
			checkBatchMatchesSolo(t, m, f, 12, []*batchRun{
				{spec: kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "bf16"}, prompt: testIDs(10, vocab), join: 0},
				{spec: kvconfig.Spec{KV: "int8", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "bf16"}, prompt: testIDs(3, vocab-1), join: 0},
				{spec: kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "f32"}, prompt: testIDs(6, vocab-2), join: 3},
			})
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
			if captures, replays, _, _ := gpu.GraphStats(); replays <= captures {
				t.Errorf("graphs: %d captured, %d replays; batched decode steps should replay", captures, replays)
			}
		})
	}
}

// Prefix sharing with sliding layers on the CUDA store (model's
// TestGemmaSlidingPrefix on the CPU): a writer that decoded past its
// window released its old sliding blocks from the pool, a sequence
// attaching its prefix reuses only as far as its next query finds the
// blocks it sees (the same runs as on the CPU), with a cold prefill's
// logits, and the pool is empty once all close.
func TestGemmaSlidingPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of several forward passes")
	}
	needKernels(t, "matvec_bf16", "attn_split")
	const bs = 4
	dir := gemmaDirs(t)["gemma3"]
	gpu, _ := newFakeBackend(t, Options{MatMul: "f32"})
	m := loadModel(t, dir, model.Options{Backend: gpu, BlockSize: bs, MaxContext: 64})
	hd := testmodel.Gemma3Tiny.HeadDim
	pool, err := kvcache.NewPool(kvcache.PoolConfig{Store: gpu.NewBlockStore(bs, hd, false), BlockSize: bs, HeadDim: hd, Budget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	first := testIDs(30, testmodel.Gemma3Tiny.Vocab)
	w, err := m.NewSequenceOpts(model.SequenceOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Forward(first[:20], false); err != nil {
		t.Fatal(err)
	}
	for _, id := range first[20:] {
		if _, err := w.Forward([]int{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prompt []int
		reused int
	}{
		{append(slices.Clone(first[:28]), 3, 5, 7), 28},
		{append(slices.Clone(first[:20]), 9, 9), 0},
	} {
		s, err := m.NewSequenceOpts(model.SequenceOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.AttachPrefix(tc.prompt)
		if err != nil {
			t.Fatal(err)
		}
		if r != tc.reused {
			t.Fatalf("prompt of %d: reused %d tokens, want %d", len(tc.prompt), r, tc.reused)
		}
		got, err := s.Forward(tc.prompt[r:], false)
		if err != nil {
			t.Fatal(err)
		}
		cold, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		want, err := cold.Forward(tc.prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		// The reused run's last tokens go through the fused decode
		// kernels, the cold prefill's through the separate ones: equal
		// up to float32 rounding.
		if d := maxAbsDiff(got, want) / maxAbs(want); !(d <= 1e-5) {
			t.Errorf("prompt of %d: logits after reusing %d tokens differ from a cold prefill's by %.3g of the largest", len(tc.prompt), r, d)
		}
		cold.Close()
		s.Close()
	}
	w.Close()
	pool.Evict()
	if st := pool.Stats(); st.Used != 0 || st.Referenced != 0 {
		t.Errorf("after Close and Evict: %s, want empty", st)
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
}
