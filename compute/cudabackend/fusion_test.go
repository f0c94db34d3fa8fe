package cudabackend

import (
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// decodeKernels returns the kernels one decode step runs (launched
// directly or inside replayed graphs, as Backend.Launches counts them) for
// a model of spec's layer structure after a prompt of prompt tokens in a
// bf16 cache of blocks of block tokens, on a fake driver that runs no
// kernel, and the kernels of the steps by name.
func decodeKernels(t *testing.T, spec testmodel.Spec, opts Options, prompt, block int) (float64, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := testmodel.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	f := newFakeOrSkip(t)
	f.noop, f.names = true, true
	gpu := newBackend(f, opts)
	t.Cleanup(func() { gpu.Close() })
	gpu.Launches()
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: spec.MaxPos})
	p, _, err := kvplan.NewPolicy(kvconfig.Spec{KV: "none", BlockSize: block, CacheType: "bf16"}, m.CacheShape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: block})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Forward(testIDs(prompt, spec.Vocab), false); err != nil {
		t.Fatal(err)
	}
	const steps = 4
	before := gpu.Launches()
	f.launched = f.launched[:0]
	for i := range steps {
		if _, err := s.Forward([]int{i + 3}, false); err != nil {
			t.Fatal(err)
		}
	}
	n := gpu.Launches().Sub(before)
	return float64(n.Kernels+n.GraphKernels) / steps, f.kernelCounts()
}

// TestDecodeKernels reports the kernels of a decode step.
func TestDecodeKernels(t *testing.T) {
	spec := testmodel.Qwen25_05B
	spec.Intermediate, spec.Vocab = 64, 256
	for _, prompt := range []int{20, 400} {
		k, names := decodeKernels(t, spec, Options{}, prompt, 64)
		t.Logf("qwen2.5-0.5B shape, context %d: %.1f kernels per decode step: %s", prompt, k, names)
		k, names = decodeKernels(t, testmodel.Qwen2Tiny, Options{}, prompt, 16)
		t.Logf("qwen2-tiny, context %d: %.1f kernels per decode step: %s", prompt, k, names)
	}
}
