package cudabackend

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// stepRun decodes steps tokens after a prompt of prompt tokens on a fake
// driver that runs the kernels' emulation, in a cache of sp, and returns
// the logits of every decode step and the driver calls each made.
func stepRun(t *testing.T, dir string, opts Options, sp kvconfig.Spec, prompt, steps int) ([][]float32, []LaunchStats, *Backend) {
	t.Helper()
	return stepRunCal(t, dir, opts, sp, nil, prompt, steps)
}

// stepRunCal is stepRun with the calibration cal makes for the loaded
// model (nil, or cal nil, for none).
func stepRunCal(t *testing.T, dir string, opts Options, sp kvconfig.Spec, cal func(*model.Model) *codec.Calibration, prompt, steps int) ([][]float32, []LaunchStats, *Backend) {
	t.Helper()
	return stepRunPolicy(t, dir, opts, sp.BlockSize, func(m *model.Model) kvcache.Policy {
		var c *codec.Calibration
		if cal != nil {
			c = cal(m)
		}
		p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), c)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, prompt, steps)
}

// stepRunPolicy is stepRun in a cache of the policy pol makes for the
// loaded model, in blocks of bs tokens.
func stepRunPolicy(t *testing.T, dir string, opts Options, bs int, pol func(*model.Model) kvcache.Policy, prompt, steps int) ([][]float32, []LaunchStats, *Backend) {
	t.Helper()
	gpu, _ := newFakeBackend(t, opts)
	gpu.Launches()
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 256})
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol(m), BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vocab := m.Config().VocabSize
	if _, err := s.Forward(testIDs(prompt, vocab), false); err != nil {
		t.Fatal(err)
	}
	var logits [][]float32
	var calls []LaunchStats
	for i := range steps {
		before := gpu.Launches()
		l, err := s.Forward([]int{(7*i + 3) % vocab}, false)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, gpu.Launches().Sub(before))
		logits = append(logits, append([]float32(nil), l...))
	}
	return logits, calls, gpu
}

// A batch-1 decode step is one replayed graph: its position-dependent
// kernels read their position, cache row and table from the step
// parameters, copied in once per step. Steady steps make four driver
// calls (the token id and the step parameters in, the graph, the logits
// out); a new context shape class (a power of two of KV blocks) is
// captured once, so captures stay few as the context grows. The logits
// are bit for bit those of launching every kernel directly and of passing
// the positions as arguments (Options.NoStepGraph).
func TestStepGraph(t *testing.T) {
	needKernels(t, "norm_qkv_bf16", "attn_split", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	const prompt, steps, bs = 1, 15, 2 // positions 1..15: shape classes of 1, 2, 4 and 8 blocks
	for _, sp := range []kvconfig.Spec{
		{KV: "none", BlockSize: bs, CacheType: "bf16"},
		{KV: "int8", BlockSize: bs, HotWindow: bs, Boundary: "none", CacheType: "bf16"},
	} {
		t.Run(sp.CacheType+"/"+sp.KV, func(t *testing.T) {
			got, calls, gpu := stepRun(t, dir, Options{}, sp, prompt, steps)
			direct, _, _ := stepRun(t, dir, Options{NoGraphs: true}, sp, prompt, steps)
			args, argCalls, _ := stepRun(t, dir, Options{NoStepGraph: true}, sp, prompt, steps)
			for i := range got {
				for j := range got[i] {
					g := math.Float32bits(got[i][j])
					if g != math.Float32bits(direct[i][j]) || g != math.Float32bits(args[i][j]) {
						t.Fatalf("step %d logit %d: %v graphed, %v launched directly, %v with arguments", i, j, got[i][j], direct[i][j], args[i][j])
					}
				}
			}
			// Steady: one graph launch, the logits out, the token and the
			// step parameters in (and, where a block starts, its tables).
			// Every step is, but the first two of each shape class (seen,
			// then captured) and, with an encoding cache, the steps that
			// read a full block back to encode it.
			classes, steady := map[int]int{}, 0
			var total, argTotal int64
			for i, c := range calls {
				total += c.Calls() + c.CopiesIn + c.CopiesOut + c.Syncs
				argTotal += argCalls[i].Calls() + argCalls[i].CopiesIn + argCalls[i].CopiesOut + argCalls[i].Syncs
				class := nextPow2(ceilDiv(prompt+i+1, bs))
				classes[class]++
				ok := c.Kernels == 0 && c.Graphs == 1 && c.CopiesOut == 1 && c.CopiesIn >= 2
				if ok {
					steady++
				}
				if !ok && classes[class] > 2 && sp.KV == "none" {
					t.Errorf("decode step %d (position %d, shape class %d blocks): %+v, want one graph launch", i, prompt+i, class, c)
				}
				if classes[class] > 2 && c.CopiesIn == 2 && c.Calls()+c.CopiesIn+c.CopiesOut+c.Syncs != 4 {
					t.Errorf("decode step %d: %+v, want 4 driver calls", i, c)
				}
			}
			captures, replays, _, off := gpu.GraphStats()
			t.Logf("%d of %d steps one graph launch; %.2f driver calls per step (%.2f with positions as arguments); %d shape classes, %d captures, %d replays",
				steady, steps, float64(total)/steps, float64(argTotal)/steps, len(classes), captures, replays)
			if off != nil {
				t.Fatal(off)
			}
			if captures > 2*len(classes) {
				t.Errorf("%d graph captures over %d decode steps in %d shape classes, want at most %d", captures, steps, len(classes), 2*len(classes))
			}
		})
	}
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
