package model

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/leveltest"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	kcpu "github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/tensor"
)

// TestKernelLevels reruns the forward-pass tests at every kernel level
// below the best this CPU runs (scalar, AVX2, AVX-512 without VDPBF16PS),
// each in a child process with $KAKEYA_CPU set, so an AVX-512 machine
// tests the AVX2 and scalar paths as well.
func TestKernelLevels(t *testing.T) {
	leveltest.Rerun(t, "^(TestForwardConsistency|TestPrefillMatchesDecode|TestBackendMatchesReference|TestMatchesFloat64Reference|TestBlockSizesAndThreadsIdentical)$")
}

// TestForwardConsistency checks, at the kernel level in force, on models
// with awkward sizes (rows, columns and head dims beside every panel, tile
// and vector width; odd counts; bias on and off; GQA, MQA and MHA; bf16,
// f16 and f32 weights) and at both matmul precisions, that prefill, token
// by token decode and mixed chunks give the same logits bit for bit, and
// that they match the reference backend's float64 arithmetic: within 1e-4
// of the row's largest logit at f32 precision, within bf16 rounding at
// bf16.
func TestForwardConsistency(t *testing.T) {
	t.Logf("kernels: %s (%s)", kcpu.Level(), kcpu.Features())
	specs := map[string]testmodel.Spec{
		"qwen2-bias-gqa-bf16": {ModelType: "qwen2", Hidden: 264, Intermediate: 520, Layers: 2, Heads: 6, KVHeads: 2, HeadDim: 44,
			Vocab: 259, MaxPos: 128, RopeTheta: 1e6, Bias: true, DType: tensor.BF16, Seed: 11},
		"llama-mqa-f16": {ModelType: "llama", Hidden: 248, Intermediate: 255, Layers: 2, Heads: 4, KVHeads: 1, HeadDim: 62,
			Vocab: 97, MaxPos: 128, RopeTheta: 1e4, Tie: true, DType: tensor.F16, Seed: 12},
		"qwen3-mha-f32": {ModelType: "qwen3", Hidden: 40, Intermediate: 72, Layers: 2, Heads: 5, KVHeads: 5, HeadDim: 24,
			Vocab: 131, MaxPos: 128, RopeTheta: 1e6, DType: tensor.F32, Seed: 13},
	}
	// 37 tokens: micro-tiles of 12 and 6 tokens and ragged ones, attention
	// chunks of 8, KV blocks of 5. The chunks cut across all of them.
	const n = 37
	chunks := [][2]int{{0, 1}, {1, 7}, {7, 19}, {19, 20}, {20, 37}}
	for name, spec := range specs {
		dir := filepath.Join(t.TempDir(), name)
		if err := testmodel.Write(dir, spec); err != nil {
			t.Fatal(err)
		}
		ids := testIDs(n, spec.Vocab)
		ref := load(t, dir, Options{Backend: refbackend.Backend{}, BlockSize: 5})
		want, err := ref.Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			matmul string
			tol    float64 // relative to the row's largest logit
		}{
			{"f32", 1e-4},  // seen: 9.7e-7
			{"bf16", 2e-2}, // seen: 4.9e-3
		} {
			t.Run(name+"/"+tc.matmul, func(t *testing.T) {
				m := load(t, dir, Options{Backend: cpuBackend(t, 2, tc.matmul), BlockSize: 5})
				prefill, err := m.Logits(ids)
				if err != nil {
					t.Fatal(err)
				}
				var worst float64
				for p := range ids {
					d, scale := maxAbsDiff(prefill[p], want[p]), maxAbs(want[p])
					if math.IsNaN(d) || d > tc.tol*scale {
						t.Errorf("position %d: max abs diff %.3g from the reference backend, want <= %.3g", p, d, tc.tol*scale)
					}
					worst = max(worst, d/scale)
				}
				t.Logf("prefill vs reference backend: max abs diff %.3g of the row's largest logit", worst)

				check := func(what string, p int, got []float32) {
					t.Helper()
					if i := firstBitDiff(got, prefill[p]); i >= 0 {
						t.Fatalf("%s, position %d, logit %d: %v, prefill %v", what, p, i, got[i], prefill[p][i])
					}
				}
				for p, row := range decode(t, m, ids) {
					check("decode", p, row)
				}
				s, err := m.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				vocab := m.Config().VocabSize
				for _, c := range chunks {
					rows, err := s.Forward(ids[c[0]:c[1]], true)
					if err != nil {
						t.Fatal(err)
					}
					for p := c[0]; p < c[1]; p++ {
						check(fmt.Sprintf("chunk %v", c), p, rows[(p-c[0])*vocab:(p-c[0]+1)*vocab])
					}
				}
			})
		}
	}
}
