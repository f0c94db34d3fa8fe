package cudabackend

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// A batched forward step on the GPU computes for each sequence what the
// sequence computes alone, attention running once per layer over every
// sequence of a step (compute.BatchAttention): four sequences with a cache type each (hot
// bf16, int8, kakeya, and bf16 blocks over float32 hot rows, which
// enc_bf16 encodes), prompts of different lengths joining at different
// steps, so steps mix prefill chunks with decode tokens and a step's rows
// cross maxMatVecRows, then greedy decoding (the decode fusions run over
// the sequences' rows at once). Logits agree within 1e-5 of each row's
// largest, and greedy tokens are identical.
func TestBatchMatchesSequences(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of several forward passes")
	}
	needKernels(t, "matvec_bf16", "matmul_bf16", "attn_split", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	// Prefill's products in float32: with bf16 activations (the default)
	// a row's rounding depends on whether its step's product has more
	// than maxMatVecRows rows, so a sequence batched with others could
	// differ from its solo run by bf16 rounding (docs/cuda.md).
	gpu, f := newFakeBackend(t, Options{MatMul: "f32"})
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
	vocab := m.Config().VocabSize
	const decodeSteps = 8
	checkBatchMatchesSolo(t, m, f, decodeSteps, []*batchRun{
		{spec: kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "bf16"}, prompt: testIDs(10, vocab), join: 0},
		{spec: kvconfig.Spec{KV: "int8", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "bf16"}, prompt: testIDs(3, vocab-1), join: 0},
		{spec: kvconfig.Spec{KV: "kakeya-block:b=3", BlockSize: 4, HotWindow: 4, Boundary: "none", CacheType: "bf16"}, prompt: testIDs(6, vocab-2), join: 1},
		// float32 hot rows, every side kept bf16 (a plan's "none"):
		// its blocks encoded by enc_bf16 in the batched steps. (An int8
		// cache over float32 rows differs from its solo run by int8
		// codes a last-bit difference flips, batched products summing
		// in another order: 8e-4 of the largest logit here, with or
		// without a bf16 boundary layer.)
		{spec: kvconfig.Spec{Layers: "none/none|none/none", BlockSize: 4, HotWindow: 4, CacheType: "f32"}, prompt: testIDs(5, vocab-3), join: 0},
	})
	if kernelCount(f, "enc_bf16") == 0 {
		t.Error("no enc_bf16 launch: the float32 cache's bf16 blocks were not encoded on the device")
	}
	// The decode steps of several sequences ran the fused attention
	// input, each row at its own position.
	if len(gpu.heldPos) == 0 && gpu.posDev == 0 {
		t.Error("no step ran norm_qkv over rows of several sequences")
	}
}

// A batchRun is one sequence of checkBatchMatchesSolo: its cache, its
// prompt and the step it joins the batch at; the rest is filled in.
type batchRun struct {
	spec   kvconfig.Spec
	prompt []int
	join   int
	opts   model.SequenceOptions
	seq    *model.Sequence
	next   int
	logits [][]float32
	tokens []int
}

// checkBatchMatchesSolo runs runs through m's batched steps, each joining
// at its step and decoding decodeSteps greedy tokens, checks that every
// step of several sequences attended in one attn_batch launch per layer,
// then runs each alone: its logits within 1e-5 of the largest of its
// batched ones at every step, and the same greedy tokens.
func checkBatchMatchesSolo(t *testing.T, m *model.Model, f *fakeDriver, decodeSteps int, runs []*batchRun) {
	t.Helper()
	for _, r := range runs {
		p, _, err := kvplan.NewPolicy(r.spec, m.CacheShape(), nil)
		if err != nil {
			t.Fatal(err)
		}
		r.opts = model.SequenceOptions{Cache: p, BlockSize: r.spec.BlockSize}
		if r.seq, err = m.NewSequenceOpts(r.opts); err != nil {
			t.Fatal(err)
		}
		defer r.seq.Close()
	}
	bt, err := m.NewBatch(32)
	if err != nil {
		t.Fatal(err)
	}
	multi := 0 // steps of several sequences
	for st := 0; ; st++ {
		var items []model.BatchItem
		var owners []*batchRun
		for _, r := range runs {
			switch {
			case st < r.join || len(r.tokens) == decodeSteps:
			case r.seq.Len() == 0:
				items = append(items, model.BatchItem{Seq: r.seq, IDs: r.prompt})
				owners = append(owners, r)
			default:
				items = append(items, model.BatchItem{Seq: r.seq, IDs: []int{r.next}})
				owners = append(owners, r)
				r.tokens = append(r.tokens, r.next)
			}
		}
		if len(items) == 0 {
			break
		}
		if len(items) > 1 {
			multi++
		}
		if err := bt.Forward(items); err != nil {
			t.Fatalf("step %d: %v", st, err)
		}
		for i, it := range items {
			r := owners[i]
			r.logits = append(r.logits, slices.Clone(it.Logits))
			r.next = pick.ArgMax(it.Logits)
		}
	}
	// A step of several sequences attends over all of them in one launch
	// per layer: as many attn_batch launches as such steps' layers.
	if got, want := kernelCount(f, "attn_batch"), multi*m.Config().NumLayers; got != want {
		t.Errorf("%d steps of several sequences launched %s; want %d attn_batch", multi, f.kernelCounts(), want)
	}
	for i, r := range runs {
		s, err := m.NewSequenceOpts(r.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var tokens []int
		worst := 0.0
		in := r.prompt
		for st := range r.logits {
			l, err := s.Forward(in, false)
			if err != nil {
				t.Fatal(err)
			}
			d := maxAbsDiff(l, r.logits[st]) / maxAbs(l)
			if !(d <= 1e-5) {
				t.Errorf("sequence %d (%s): step %d: logits differ by %.3g of the largest from its solo run, want <= 1e-5", i, r.spec.KV+r.spec.Layers, st, d)
			}
			worst = max(worst, d)
			if st < decodeSteps {
				next := pick.ArgMax(l)
				tokens = append(tokens, next)
				in = []int{next}
			}
		}
		if !slices.Equal(tokens, r.tokens) {
			t.Errorf("sequence %d (%s): greedy tokens %v batched, %v alone", i, r.spec.KV+r.spec.Layers, r.tokens, tokens)
		}
		t.Logf("sequence %d (%s): worst relative logit difference batched vs alone %.3g", i, r.spec.KV+r.spec.Layers, worst)
	}
}

// kernelCount returns how many times f ran kernel.
func kernelCount(f *fakeDriver, kernel string) int {
	n := 0
	for _, k := range f.launched {
		if k == kernel {
			n++
		}
	}
	return n
}

// withoutKernel returns the kernels of ks but those named kernel.
func withoutKernel(ks []string, kernel string) []string {
	var out []string
	for _, k := range ks {
		if k != kernel {
			out = append(out, k)
		}
	}
	return out
}
