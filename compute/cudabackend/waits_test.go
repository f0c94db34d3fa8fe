package cudabackend

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// waitRun is what stepWaits measured of one backend: the host waits
// (LaunchStats.Waits: copies back, syncs and synchronous copies in behind
// launched work) of a prefill chunk into a new sequence, once the codecs'
// settings are on the device, and of the decode step that filled (and
// encoded) a block, with every logit row.
type waitRun struct {
	prefill, fill LaunchStats
	fills         int // decode steps that encoded a block on the device
	logits        [][]float32
}

// stepWaits prefills prompt tokens into a sequence of cache (a
// report cache name), decodes steps tokens one at a time, then prefills
// the prompt again into a second sequence, on a fake driver running the
// kernels' emulation, and counts the driver calls.
func stepWaits(t *testing.T, dir, cache string, opts Options, prompt, steps, block int) waitRun {
	t.Helper()
	gpu, f := newFakeBackend(t, opts)
	gpu.Launches()
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 128})
	pol, _, err := kvplan.NewPolicy(cacheSpec(cache, block), m.CacheShape(), cacheCalibration(cache, m))
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().VocabSize
	var r waitRun
	forward := func(s *model.Sequence, ids []int) LaunchStats {
		before := gpu.Launches()
		l, err := s.Forward(ids, false)
		if err != nil {
			t.Fatal(err)
		}
		r.logits = append(r.logits, slices.Clone(l))
		return gpu.Launches().Sub(before)
	}
	encoders := func() int {
		return kernelCount(f, "enc_pc") + kernelCount(f, "enc_int8")
	}
	for seq := range 2 {
		s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: block})
		if err != nil {
			t.Fatal(err)
		}
		st := forward(s, testIDs(prompt, vocab))
		if seq == 1 {
			r.prefill = st
			s.Close()
			break
		}
		for i := range steps {
			enc := encoders()
			st := forward(s, []int{(7*i + 3) % vocab})
			if encoders() > enc {
				r.fills++
				r.fill = st
			}
		}
		s.Close()
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// A kakeya-pc prefill chunk and a decode step that fills a block make no
// host wait of their own beyond plain's: the encoders' table of jobs goes
// into the step parameters and the encoders join the launch queue (their
// hot slots given back once the queue goes to the driver), and a block
// table rewritten while the device runs launched work is copied through
// the step parameters by copy_runs, in stream order, rather than by a
// synchronous copy that waits for that work. Counted through the fake
// driver against the path before (Options.NoStepGraph keeps it: the
// table copied in and the encoders launched at once): per layer of a
// prefill chunk, the jobs' copy and the block table's become the step
// parameters' one copy, so a kakeya-pc chunk waits as often as a plain
// one (2 a layer: the cache writes' tables, copied one after the other,
// and the step parameters; and the logits' copy back); a decode step that
// fills and encodes a block makes one host wait, the logits' copy back,
// as a plain step does. The logits are bit for bit the path's before, for
// kakeya-pc, int8 (also encoded on the device) and kakeya-block:b=3
// (encoded on the host: read back, encoded, copied in).
func TestPCStepsHostWaits(t *testing.T) {
	needKernels(t, "attn_prefill_pc_d64", "enc_pc", "copy_runs", "gemm_bf16")
	dir := filepath.Join(t.TempDir(), "m")
	sp := testmodel.Qwen2Tiny
	sp.Heads, sp.KVHeads, sp.HeadDim, sp.Hidden, sp.Layers = 4, 2, 64, 256, 2
	if err := testmodel.Write(dir, sp); err != nil {
		t.Fatal(err)
	}
	const prompt, steps, block = 40, 10, 16 // the decode step at position 47 fills a block past the hot window
	runs := map[string][2]waitRun{}
	for _, cache := range []string{"plain", "kakeya-pc", "int8", "kakeya-block:b=3"} {
		now := stepWaits(t, dir, cache, Options{}, prompt, steps, block)
		before := stepWaits(t, dir, cache, Options{NoStepGraph: true}, prompt, steps, block)
		runs[cache] = [2]waitRun{now, before}
		for i := range now.logits {
			for j := range now.logits[i] {
				if g, w := now.logits[i][j], before.logits[i][j]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("%s: forward call %d logit %d: %v, %v on the path before", cache, i, j, g, w)
				}
			}
		}
		t.Logf("%s: prefill chunk of %d: %d host waits (%d copies in behind launched work), %d before; the decode step that fills a block: %d host waits (%d copies in, %d behind), %d before",
			cache, prompt, now.prefill.Waits(), now.prefill.CopiesInBehind, before.prefill.Waits(),
			now.fill.Waits(), now.fill.CopiesIn, now.fill.CopiesInBehind, before.fill.Waits())
	}
	plain, pc, i8 := runs["plain"][0], runs["kakeya-pc"], runs["int8"]
	if pc[0].prefill.Waits() != plain.prefill.Waits() {
		t.Errorf("a kakeya-pc prefill chunk makes %d host waits, a plain one %d: want no more", pc[0].prefill.Waits(), plain.prefill.Waits())
	}
	// Before, each layer copied the jobs' table and the block table
	// behind launched work; now the two ride in the step parameters'
	// one copy, as plain's block table does.
	if got, want := pc[1].prefill.Waits()-pc[0].prefill.Waits(), int64(sp.Layers); got != want {
		t.Errorf("a kakeya-pc prefill chunk makes %d host waits fewer than before, want %d (one a layer)", got, want)
	}
	for _, c := range []struct {
		name string
		r    waitRun
	}{{"kakeya-pc", pc[0]}, {"int8", i8[0]}} {
		if c.r.fills != 1 {
			t.Fatalf("%s: %d decode steps encoded a block on the device, want 1", c.name, c.r.fills)
		}
		if w := c.r.fill.Waits(); w != 1 || c.r.fill.CopiesOut != 1 {
			t.Errorf("%s: the decode step that fills a block makes %d host waits (%+v), want 1: the logits' copy back", c.name, w, c.r.fill)
		}
	}
	if pc[1].fill.Waits() <= 1 {
		t.Errorf("kakeya-pc: the path before waited %d times in the step that fills a block: the test no longer tells the paths apart", pc[1].fill.Waits())
	}
}

// The decode-once model: pc_unpack where the _pc kernel's row tiles would
// decode the call's kakeya_pc blocks twice as often or more.
func TestPCUnpackPays(t *testing.T) {
	for _, c := range []struct {
		name                               string
		pcBlock                            []bool
		first, n, start, group, window, bs int
		want                               bool
	}{
		{"no kakeya-pc block", []bool{false, false}, 0, 128, 0, 7, 0, 64, false},
		{"one row tile", []bool{true, true, false}, 0, 9, 128, 7, 0, 64, false},  // 63 rows: one tile
		{"two row tiles", []bool{true, true, false}, 0, 10, 128, 7, 0, 64, true}, // 70 rows
		{"7B prefill 512", []bool{true, true, true, true, true, true, true, false}, 0, 512, 0, 7, 0, 64, true},
		{"causal: later blocks unseen", []bool{false, false, true}, 0, 20, 100, 4, 0, 64, false}, // block 2 starts at 128
		{"decode rows", []bool{true}, 0, 2, 64, 7, 0, 64, false},
		{"window past the blocks", []bool{true, false, false}, 0, 64, 128, 4, 16, 64, false},
		{"window over them", []bool{false, true, false}, 1, 64, 128, 4, 100, 64, true},
	} {
		if got := pcUnpackPays(c.pcBlock, c.first, c.n, c.start, c.group, c.window, c.bs); got != c.want {
			t.Errorf("%s: pc_unpack pays %v, want %v", c.name, got, c.want)
		}
	}
}
