package model

import (
	"testing"

	"github.com/kakeya-ai/kakeya/internal/ggufdata"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// The shared models converted to GGUF by llama.cpp's gguf-py (st2gguf.py)
// give the logits of their safetensors directories: bit for bit where the
// GGUF keeps the stored type (stories260K F32, whose q/k rows the
// converter permuted and the loader puts back; ref-qwen2-6m BF16), within
// bf16 rounding where BF16 weights became F16. Both also against the
// golden logits of the independent implementations.
func TestGGUFLogits(t *testing.T) {
	for _, tc := range []struct {
		model, outtype, golden string
		tol                    float64 // against the safetensors logits
	}{
		{"stories260K", "native", "stories260K_runc_logits.txt", 0},
		{"ref-qwen2-6m", "native", "ref-qwen2-6m_logits.txt", 0},
		{"ref-qwen2-6m", "f16", "ref-qwen2-6m_logits.txt", 1e-4},
	} {
		t.Run(tc.model+"-"+tc.outtype, func(t *testing.T) {
			ids, want := reference(t, tc.golden)
			file := ggufdata.Convert(t, tc.model, tc.outtype)
			g := load(t, file, Options{Backend: cpuBackend(t, 2, "f32")})
			h := load(t, shareddata.File(t, "models", tc.model), Options{Backend: cpuBackend(t, 2, "f32")})
			if gc, hc := *g.Config(), *h.Config(); gc.NumLayers != hc.NumLayers || gc.HeadDim != hc.HeadDim ||
				gc.NumKVHeads != hc.NumKVHeads || gc.RopeTheta != hc.RopeTheta || float32(gc.RMSNormEps) != float32(hc.RMSNormEps) ||
				gc.TieWordEmbeddings != hc.TieWordEmbeddings || gc.MaxPositionEmbeddings != hc.MaxPositionEmbeddings {
				t.Errorf("GGUF config %+v\nsafetensors config %+v", gc, hc)
			}
			got, err := g.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := h.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			var worst, golden float64
			for p := range ids {
				worst = max(worst, maxAbsDiff(got[p], ref[p]))
				golden = max(golden, maxAbsDiff(got[p], want[p]))
			}
			t.Logf("max abs difference: %.3g vs safetensors, %.3g vs golden", worst, golden)
			if worst > tc.tol {
				t.Errorf("max abs difference vs the safetensors model %.3g, want <= %g", worst, tc.tol)
			}
			if golden > 1e-3 {
				t.Errorf("max abs difference vs the golden logits %.3g, want <= 1e-3", golden)
			}
		})
	}
}
