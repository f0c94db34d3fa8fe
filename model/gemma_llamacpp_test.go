package model

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/llamaparity"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/pick"
)

// TestGemmaLlamaCppParity checks the seeded Gemma 2 and Gemma 3
// checkpoints against llama.cpp on the same weights, converted by its own
// convert_hf_to_gguf.py: every logit of 40 prompt positions (sliding
// window 8, so most attend past it) within 1e-3 of the row's largest, and
// 64 greedy tokens equal, with every decode step's logits within the same
// bound. Both run F32 weights; Kakeya with f32 matmuls.
// Skipped, saying what is missing, without llama.cpp (see llamaparity).
func TestGemmaLlamaCppParity(t *testing.T) {
	bin := llamaparity.Need(t)
	text := shareddata.File(t, "data", "tinystories", "val.txt")
	for name, spec := range map[string]testmodel.Spec{"gemma2": testmodel.Gemma2Tiny, "gemma3": testmodel.Gemma3Tiny} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			if err := testmodel.Write(dir, spec); err != nil {
				t.Fatal(err)
			}
			gguf := llamaparity.Convert(t, dir, text)
			ids := testIDs(40, spec.Vocab)
			const steps = 64
			want, wantToks, wantSteps := llamaparity.Run(t, bin, gguf, ids, steps)

			m := load(t, dir, Options{Backend: cpuBackend(t, 2, "f32")})
			got, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for p := range ids {
				worst = max(worst, closeRow(t, fmt.Sprintf("position %d", p), got[p], want[p]))
			}
			t.Logf("max abs diff from llama.cpp over %d positions: %.3g of the row's largest logit", len(ids), worst)

			// The GGUF itself through Kakeya's loader: the same model.
			g := load(t, gguf, Options{Backend: cpuBackend(t, 2, "f32")})
			viaGGUF, err := g.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			var ggufDiff float64
			for p := range ids {
				for i := range got[p] {
					ggufDiff = max(ggufDiff, math.Abs(float64(viaGGUF[p][i]-got[p][i])))
				}
			}
			if ggufDiff > 1e-4 {
				t.Errorf("the GGUF loaded by Kakeya differs from the checkpoint by %.3g", ggufDiff)
			}
			t.Logf("GGUF through Kakeya's loader: max abs diff %.3g from the safetensors checkpoint", ggufDiff)

			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			logits, err := s.Forward(ids, false)
			if err != nil {
				t.Fatal(err)
			}
			var worstStep float64
			distinct := map[int]bool{}
			for i := range steps {
				tok := pick.ArgMax(logits)
				if tok != wantToks[i] {
					t.Fatalf("greedy step %d: token %d, llama.cpp %d (tokens so far equal)", i, tok, wantToks[i])
				}
				distinct[tok] = true
				if logits, err = s.Forward([]int{tok}, false); err != nil {
					t.Fatal(err)
				}
				worstStep = max(worstStep, closeRow(t, fmt.Sprintf("decode step %d (position %d)", i, len(ids)+i), logits, wantSteps[i]))
			}
			t.Logf("64 greedy tokens equal (%d distinct: a random model repeats itself); decode steps' logits within %.3g of the row's largest", len(distinct), worstStep)
		})
	}
}

// closeRow reports where got differs from llama.cpp's want by more than
// 1e-3 of want's largest magnitude, and returns the difference relative
// to it.
func closeRow(t *testing.T, what string, got, want []float32) float64 {
	t.Helper()
	var diff, scale float64
	for i := range want {
		diff = max(diff, math.Abs(float64(got[i]-want[i])))
		scale = max(scale, math.Abs(float64(want[i])))
	}
	if diff > 1e-3*scale {
		t.Errorf("%s: max abs diff %.3g from llama.cpp (row max %.3g)", what, diff, scale)
	}
	return diff / scale
}
