package cudabackend

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// greedyRun decodes steps tokens greedily after prompt in a cache of sp
// and returns the tokens and every decode step's logits.
func greedyRun(t *testing.T, m *model.Model, sp kvconfig.Spec, prompt []int, steps int) ([]int, [][]float32) {
	t.Helper()
	p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: sp.BlockSize})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	var logits [][]float32
	for range steps {
		tok := pick.ArgMax(l)
		toks = append(toks, tok)
		if l, err = s.Forward([]int{tok}, false); err != nil {
			t.Fatal(err)
		}
		logits = append(logits, append([]float32(nil), l...))
	}
	return toks, logits
}

// A per-layer plan of the codecs the allocator picks among (int4, int2,
// int8 and kakeya-block:b=3 layers; int4 and int8 encoded on the device,
// kakeya-block on the host) decodes on emulated CUDA as on the CPU:
// greedy tokens equal, logits within 1e-3 of their scale, and the
// cache's bytes the same.
func TestAllocatorPlanMatchesCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of a forward pass per token")
	}
	needKernels(t, "enc_int4", "enc_int8", "attn_split", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	gpu, _ := newFakeBackend(t, Options{MatMul: "f32"})
	cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 64})
	gpuM := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
	prompt := testIDs(6, cpuM.Config().VocabSize)
	for _, layers := range []string{
		"int4-k/int4|kakeya-block:b=3/kakeya-block:b=3",
		"int2-k/int4|int8/int2",
	} {
		sp := kvconfig.Spec{Layers: layers, BlockSize: 4, HotWindow: 4, CacheType: "bf16"}
		const steps = 10 // positions 6..15: blocks fill every fourth step
		want, wl := greedyRun(t, cpuM, sp, prompt, steps)
		got, gl := greedyRun(t, gpuM, sp, prompt, steps)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: greedy token %d is %d on CUDA, %d on the CPU (CUDA %v, CPU %v)", layers, i, got[i], want[i], got, want)
			}
		}
		var worst float64
		for i := range wl {
			d, tol := maxAbsDiff(gl[i], wl[i]), 1e-3*max(1, maxAbs(wl[i]))
			kl, err := eval.KL(wl[i], gl[i])
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(d) || d > tol {
				t.Errorf("%s: decode step %d: max abs logit difference %.3g (tolerance %.3g, KL %.3g), CUDA vs CPU", layers, i, d, tol, kl)
			}
			worst = max(worst, d/tol)
		}
		t.Logf("%s: %d greedy tokens equal; worst logit difference %.2g of the tolerance", layers, steps, worst)
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
}

// A decode step in a cache whose every layer encodes on the device (int4
// per channel and per token, int2, int8: codecs the allocator picks among)
// makes one host wait, the logits' copy back, also in the steps that fill
// a block and encode it: the encoders run in the step's stream, nothing
// is read back. A kakeya-block layer, encoded on the host, still reads
// each filled part back (the test logs it).
func TestPlanDecodeOneHostWait(t *testing.T) {
	needKernels(t, "enc_int4", "enc_int8", "norm_qkv_bf16", "attn_split", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	const prompt, steps, bs = 3, 9, 4 // positions 3..11: blocks fill at 7 and 11
	for _, c := range []struct {
		layers string
		device bool // every layer encodes on the device
	}{
		{"int4-k/int4|int8/int2", true},
		{"int2-k/int2|int4/int4-k", true},
		{"int4-k/int4|kakeya-block:b=3/kakeya-block:b=3", false},
	} {
		sp := kvconfig.Spec{Layers: c.layers, BlockSize: bs, HotWindow: bs, CacheType: "bf16"}
		_, calls, gpu := stepRun(t, dir, Options{}, sp, prompt, steps)
		fills, most := 0, int64(0)
		for i, st := range calls {
			pos := prompt + i
			fill := (pos+1)%bs == 0 && pos+1 > bs // the step completes a block past the hot window
			waits := st.CopiesOut + st.Syncs
			most = max(most, waits)
			if fill {
				fills++
			}
			if c.device && waits != 1 {
				t.Errorf("%s: decode step %d (position %d, fills a block %v): %d host waits (%d copies back, %d syncs), want 1", c.layers, i, pos, fill, waits, st.CopiesOut, st.Syncs)
			}
		}
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
		f := gpu.drv.(*launchCounter).driver.(*fakeDriver)
		enc4, enc8 := kernelCount(f, "enc_int4"), kernelCount(f, "enc_int8")
		t.Logf("%s: %d decode steps, %d filling a block; at most %d host waits a step; %d enc_int4 and %d enc_int8 launches", c.layers, steps, fills, most, enc4, enc8)
		if enc4 == 0 {
			t.Errorf("%s: no enc_int4 launch: the int4 layers' blocks were not encoded on the device", c.layers)
		}
		if !c.device && most <= 1 {
			t.Errorf("%s: kakeya-block layers encode on the host, yet no step waited more than once", c.layers)
		}
	}
}
