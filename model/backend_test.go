package model

import (
	"math"
	"path/filepath"
	"testing"

	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
)

// The forward pass names no device: run on the reference backend (plain
// loops, float64 sums) it must give the CPU backend's logits within 1e-4,
// prefill and token by token, uncompressed and through encoded blocks, on
// every architecture and on stories260K.
func TestBackendMatchesReference(t *testing.T) {
	dirs := map[string]string{"stories260K": shareddata.File(t, "models", "stories260K")}
	for name, spec := range map[string]testmodel.Spec{
		"llama":          testmodel.LlamaTiny,
		"llama3-scaling": testmodel.Llama3Tiny,
		"mistral-window": testmodel.MistralTiny,
		"qwen2":          testmodel.Qwen2Tiny,
		"qwen3":          testmodel.Qwen3Tiny,
	} {
		dirs[name] = filepath.Join(t.TempDir(), name)
		if err := testmodel.Write(dirs[name], spec); err != nil {
			t.Fatal(err)
		}
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			cpuM := load(t, dir, Options{Backend: cpuBackend(t, 2, "f32"), BlockSize: 4})
			refM := load(t, dir, Options{Backend: refbackend.Backend{}, BlockSize: 4})
			ids := testIDs(21, cpuM.Config().VocabSize)
			var worst float64
			check := func(what string, got, want [][]float32) {
				t.Helper()
				for p := range want {
					d := maxAbsDiff(got[p], want[p])
					if math.IsNaN(d) || d > 1e-4 {
						t.Fatalf("%s, position %d: max abs logit difference %.3g between the CPU and reference backends", what, p, d)
					}
					worst = max(worst, d)
				}
			}
			got, err := cpuM.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			want, err := refM.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			check("prefill", got, want)
			check("decode", decode(t, cpuM, ids), decode(t, refM, ids))

			// Encoded blocks: the same codec on both backends, every layer.
			spec := kvconfig.Spec{KV: "int8", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "f32"}
			cpuP, _, err := kvplan.NewPolicy(spec, cpuM.CacheShape(), nil)
			if err != nil {
				t.Fatal(err)
			}
			refP, _, err := kvplan.NewPolicy(spec, refM.CacheShape(), nil)
			if err != nil {
				t.Fatal(err)
			}
			gotC, stC := decodeWith(t, cpuM, SequenceOptions{Cache: cpuP}, ids)
			wantC, stR := decodeWith(t, refM, SequenceOptions{Cache: refP}, ids)
			check("int8 cache", gotC, wantC)
			if stC.Compressed == 0 || stC.Compressed != stR.Compressed {
				t.Errorf("encoded bytes: CPU %d, reference %d", stC.Compressed, stR.Compressed)
			}
			t.Logf("max abs logit difference, CPU vs reference backend: %.3g", worst)
		})
	}
}
