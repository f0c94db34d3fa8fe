package cudabackend

import (
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// ref-qwen2-6m with an entropy-coded kakeya-pc cache (kakeya-pc:ec=true,
// and under KAKEYA_LONG kvtc; a synthetic calibration's basis per layer and KV head) on the
// emulated CUDA backend gives the CPU backend's logits over a prefill and
// decode steps, and the same greedy tokens, while every full block stays
// in its entropy-coded bytes on the device (attention decodes them: the
// cache holds the CPU's hot and encoded bytes, nothing decoded beside
// them) and attn_split_pc reads them.
func TestPCECForwardMatchesCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of several forward passes")
	}
	needKernels(t, "attn_split_pc", "attn_combine", "matvec_f32")
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	const tokens, pre, gen = 40, 30, 8
	caches := []string{"kakeya-pc:ec=true"}
	if os.Getenv("KAKEYA_LONG") != "" {
		caches = append(caches, "kvtc") // TestKakeyaPCAttentionMatchesCPU reads kvtc's blocks
	}
	for _, kv := range caches {
		t.Run(kv, func(t *testing.T) {
			spec := kvconfig.Spec{KV: kv, BlockSize: 16, HotWindow: 4, Boundary: "none", CacheType: "bf16"}
			gpu, f := newFakeBackend(t, Options{MatMul: "f32"})
			cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 128})
			gpuM := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 128})
			cal := synthPCACalibration(cpuM, 29)
			ids := testIDs(tokens, cpuM.Config().VocabSize)
			want, stW := runCal(t, cpuM, spec, cal, ids, pre)
			got, stG := runCal(t, gpuM, spec, cal, ids, pre)
			worst, flips := 0.0, 0
			for p := range want {
				d, tol := maxAbsDiff(got[p], want[p]), 1e-3*max(1, maxAbs(want[p]))
				kl, err := eval.KL(want[p], got[p])
				if err != nil {
					t.Fatal(err)
				}
				if d > tol && d < 100*tol && kl < 1e-5 && pick.ArgMax(got[p]) == pick.ArgMax(want[p]) {
					flips++ // a value one code apart, as TestForwardMatchesCPU allows
					continue
				}
				if math.IsNaN(d) || d > tol {
					t.Fatalf("position %d: max abs logit difference %.3g (tolerance %.3g), CUDA vs CPU", p, d, tol)
				}
				worst = max(worst, d/tol)
			}
			if flips > len(want)/4 {
				t.Errorf("%d of %d positions differ by more than the tolerance", flips, len(want))
			}
			if stW.Compressed == 0 || stG.Compressed != stW.Compressed || stG.Hot != stW.Hot {
				t.Errorf("CUDA holds %d hot + %d encoded bytes, the CPU %d + %d", stG.Hot, stG.Compressed, stW.Hot, stW.Compressed)
			}
			if !slices.Contains(f.launched, "attn_split_pc") {
				t.Errorf("launched %s, want attn_split_pc", f.kernelCounts())
			}
			t.Logf("worst logit difference %.2g of the tolerance (%d positions past it by a rounding flip); %d encoded bytes (%.2fx below bf16)",
				worst, flips, stG.Compressed, float64(stG.CompressedBF16)/float64(stG.Compressed))

			wantTok := greedyCal(t, cpuM, spec, cal, ids[:pre], gen)
			gotTok := greedyCal(t, gpuM, spec, cal, ids[:pre], gen)
			if !slices.Equal(gotTok, wantTok) {
				t.Errorf("greedy tokens on CUDA %v, the CPU's %v", gotTok, wantTok)
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// greedyCal prefills prompt into a new sequence of m with cache settings
// spec and calibration cal, then picks n tokens greedily, one a step.
func greedyCal(t *testing.T, m *model.Model, spec kvconfig.Spec, cal *codec.Calibration, prompt []int, n int) []int {
	t.Helper()
	p, _, err := kvplan.NewPolicy(spec, m.CacheShape(), cal)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: spec.BlockSize})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Forward(prompt, false)
	var out []int
	for range n {
		if err != nil {
			t.Fatal(fmt.Errorf("token %d: %w", len(out), err))
		}
		out = append(out, pick.ArgMax(l))
		l, err = s.Forward(out[len(out)-1:], false)
	}
	return out
}
