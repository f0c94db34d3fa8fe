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
	syncs         int64
	logits        [][]float32
}

// copyMode is how a stepWaits backend copies in: staged (the default:
// asynchronously from page-locked staging memory), synchronously (the
// fake offers no staging memory), or staged through a staging area small
// enough to fill (stage bytes).
type copyMode struct {
	name  string
	sync  bool
	stage int
}

// stepWaits prefills prompt tokens into a sequence of cache (a
// report cache name), decodes steps tokens one at a time, then prefills
// the prompt again into a second sequence, on a fake driver running the
// kernels' emulation, and counts the driver calls.
func stepWaits(t *testing.T, dir, cache string, opts Options, mode copyMode, prompt, steps, block int) waitRun {
	t.Helper()
	gpu, f := newFakeBackend(t, opts)
	f.noStage = mode.sync
	gpu.stage.size = mode.stage
	start := gpu.Launches()
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
		return kernelCount(f, "enc_pc") + kernelCount(f, "enc_int8") + kernelCount(f, "enc_pcec")
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
	r.syncs = gpu.Launches().Sub(start).Syncs
	return r
}

// A prefill chunk and a decode step that fills a block make no host wait
// but the logits' copy back, for kakeya-pc (fixed rate, format 8, and
// entropy-coded, format 9, each encoded on the device), int8 and plain
// caches alike:
// copies in go asynchronously from page-locked staging memory
// (copyInNoWait: the step parameters, block and write tables, the codecs'
// settings), reused only after a host wait; the encoders' table of jobs
// goes into the step parameters and the encoders join the launch queue
// (their hot slots given back once the queue goes to the driver). Where
// the driver has no page-locked memory (the fake told so), copies are
// synchronous, and a block table rewritten while the device runs launched
// work goes through the step parameters (copy_runs) instead: a
// kakeya-pc chunk then waits as often as a plain one (2 a layer: the
// cache writes' tables, copied one after the other, and the step
// parameters; and the logits), a layer fewer than the path before
// (Options.NoStepGraph keeps it: the jobs' table and the block table
// copied in behind the encoders), and the decode step that fills a block
// once. A staging area too small for a chunk makes the backend wait
// (sync) to reuse it. The logits are bit for bit the same every way, for
// kakeya-pc, int8 (also encoded on the device) and kakeya-block:b=3
// (encoded on the host: read back, encoded, copied in); the fake makes
// an asynchronous copy only at the next stream operation, so a staging
// area reused too early would land as overwritten.
func TestPCStepsHostWaits(t *testing.T) {
	needKernels(t, "attn_prefill_d64", "enc_pc", "enc_pcec", "copy_runs", "pc_unpack", "gemm_bf16")
	dir := filepath.Join(t.TempDir(), "m")
	sp := testmodel.Qwen2Tiny
	sp.Heads, sp.KVHeads, sp.HeadDim, sp.Hidden, sp.Layers = 4, 2, 64, 256, 2
	if err := testmodel.Write(dir, sp); err != nil {
		t.Fatal(err)
	}
	const prompt, steps, block = 40, 10, 16 // the decode step at position 47 fills a block past the hot window
	async, syncCopies, small := copyMode{name: "async"}, copyMode{name: "sync", sync: true}, copyMode{name: "small stage", stage: 1536}
	type result struct{ async, small, staged, before waitRun }
	runs := map[string]result{}
	for _, cache := range []string{"plain", "kakeya-pc", "kakeya-pc:ec=true", "int8", "kakeya-block:b=3"} {
		r := result{
			async:  stepWaits(t, dir, cache, Options{}, async, prompt, steps, block),
			small:  stepWaits(t, dir, cache, Options{}, small, prompt, steps, block),
			staged: stepWaits(t, dir, cache, Options{}, syncCopies, prompt, steps, block),
			before: stepWaits(t, dir, cache, Options{NoStepGraph: true}, syncCopies, prompt, steps, block),
		}
		runs[cache] = r
		for k, o := range []waitRun{r.small, r.staged, r.before} {
			for i := range r.async.logits {
				for j := range r.async.logits[i] {
					if g, w := r.async.logits[i][j], o.logits[i][j]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("%s: forward call %d logit %d: %v, %v copied %s", cache, i, j, g, w, []string{"through a small stage", "synchronously", "synchronously, the path before"}[k])
					}
				}
			}
		}
		t.Logf("%s: host waits of a prefill chunk of %d: %d (%d copies in, %d asynchronous), %d copying synchronously (%d behind launched work), %d the path before; of the decode step that fills a block: %d, %d, %d",
			cache, prompt, r.async.prefill.Waits(), r.async.prefill.CopiesIn, r.async.prefill.CopiesInAsync,
			r.staged.prefill.Waits(), r.staged.prefill.CopiesInBehind, r.before.prefill.Waits(),
			r.async.fill.Waits(), r.staged.fill.Waits(), r.before.fill.Waits())
		if cache == "kakeya-block:b=3" {
			continue // its read-backs wait, and free the staging area
		}
		if r.small.syncs == 0 {
			t.Errorf("%s: a staging area of 1.5 KiB never filled", cache)
		}
		if w := r.async.prefill.Waits(); w != 1 || r.async.prefill.CopiesOut != 1 {
			t.Errorf("%s: a prefill chunk makes %d host waits (%+v), want 1: the logits' copy back", cache, w, r.async.prefill)
		}
	}
	plain, pc, ec, i8 := runs["plain"], runs["kakeya-pc"], runs["kakeya-pc:ec=true"], runs["int8"]
	for _, c := range []struct {
		name string
		r    result
	}{{"kakeya-pc", pc}, {"kakeya-pc:ec=true", ec}} {
		if c.r.staged.prefill.Waits() != plain.staged.prefill.Waits() {
			t.Errorf("copying synchronously, a %s prefill chunk makes %d host waits, a plain one %d: want no more", c.name, c.r.staged.prefill.Waits(), plain.staged.prefill.Waits())
		}
		if got, want := c.r.before.prefill.Waits()-c.r.staged.prefill.Waits(), int64(sp.Layers); got != want {
			t.Errorf("copying synchronously, a %s prefill chunk makes %d host waits fewer than before, want %d (one a layer)", c.name, got, want)
		}
	}
	// Format 9 (entropy-coded) is encoded on the device as format 8 is
	// (enc_pcec): the same waits every way.
	for k, pair := range [][2]waitRun{{ec.async, pc.async}, {ec.staged, pc.staged}, {ec.before, pc.before}} {
		if g, w := pair[0].prefill.Waits(), pair[1].prefill.Waits(); g != w {
			t.Errorf("%s: a format-9 prefill chunk makes %d host waits, a format-8 one %d", []string{"staged", "synchronous copies", "the path before"}[k], g, w)
		}
		if g, w := pair[0].fill.Waits(), pair[1].fill.Waits(); g != w {
			t.Errorf("%s: a format-9 decode step that fills a block makes %d host waits, a format-8 one %d", []string{"staged", "synchronous copies", "the path before"}[k], g, w)
		}
	}
	if n := ec.async.prefill.CopiesOut + ec.async.fill.CopiesOut; n != 2 {
		t.Errorf("format 9: %d copies back in the prefill chunk and the step that fills a block, want 2 (the logits'): no block read back", n)
	}
	for _, c := range []struct {
		name string
		r    result
	}{{"kakeya-pc", pc}, {"kakeya-pc:ec=true", ec}, {"int8", i8}} {
		if c.r.async.fills != 1 {
			t.Fatalf("%s: %d decode steps encoded a block on the device, want 1", c.name, c.r.async.fills)
		}
		for _, r := range []waitRun{c.r.async, c.r.staged} {
			if w := r.fill.Waits(); w != 1 || r.fill.CopiesOut != 1 {
				t.Errorf("%s: the decode step that fills a block makes %d host waits (%+v), want 1: the logits' copy back", c.name, w, r.fill)
			}
		}
		if c.r.before.fill.Waits() <= 1 {
			t.Errorf("%s: the path before waited %d times in the step that fills a block: the test no longer tells the paths apart", c.name, c.r.before.fill.Waits())
		}
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

// batchWaits runs, on a fake driver running the kernels' emulation, 16
// sequences in a cache of cache (a report cache name) with blocks of bs
// tokens: a batched prefill of their prompts (sequence 0's 2bs-2 tokens,
// the others' bs+1), then steps batched decode steps of all 16, in the
// second of which sequence 0 fills its second block and its first leaves
// the hot window (encoded in that step), then one batched step that mixes
// a prefill chunk of a 17th sequence (chunk tokens) with the 16 decode
// rows. Greedy items have their tokens picked on the device (as the
// scheduler asks at temperature 0), else every item's logits come back.
// It returns the driver calls of each decode step, of the mixed
// step, and the encoder launches in each step.
func batchWaits(t *testing.T, dir, cache string, greedy bool, bs, steps, chunk int) (decode []LaunchStats, mixed LaunchStats, encodes []int) {
	t.Helper()
	const seqs = 16
	gpu, f := newFakeBackend(t, Options{})
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 128})
	pol, _, err := kvplan.NewPolicy(cacheSpec(cache, bs), m.CacheShape(), cacheCalibration(cache, m))
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().VocabSize
	bt, err := m.NewBatch(seqs*2*bs + chunk)
	if err != nil {
		t.Fatal(err)
	}
	newSeq := func() *model.Sequence {
		s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: bs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	items := make([]model.BatchItem, seqs)
	for i := range items {
		n := bs + 1
		if i == 0 {
			n = 2*bs - 2
		}
		items[i] = model.BatchItem{Seq: newSeq(), IDs: testIDs(n, vocab-i), Greedy: greedy}
	}
	if err := bt.Forward(items); err != nil {
		t.Fatal(err)
	}
	encoders := func() int {
		return kernelCount(f, "enc_pc") + kernelCount(f, "enc_int8") + kernelCount(f, "enc_int4") + kernelCount(f, "enc_pcec")
	}
	for st := range steps {
		for i := range items {
			items[i].IDs = []int{(7*st + 3*i + 1) % vocab}
		}
		before, e0 := gpu.Launches(), encoders()
		if err := bt.Forward(items); err != nil {
			t.Fatal(err)
		}
		decode = append(decode, gpu.Launches().Sub(before))
		encodes = append(encodes, encoders()-e0)
	}
	for i := range items {
		items[i].IDs = []int{(5*i + 2) % vocab}
	}
	items = append(items, model.BatchItem{Seq: newSeq(), IDs: testIDs(chunk, vocab-99), Greedy: greedy})
	before := gpu.Launches()
	if err := bt.Forward(items); err != nil {
		t.Fatal(err)
	}
	mixed = gpu.Launches().Sub(before)
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
	return decode, mixed, encodes
}

// A batched decode step of 16 sequences makes one host wait, the logits'
// copy back, for plain, int8 and kakeya-pc (rate 2.5, the preset's value codec)
// caches alike, also the step in which one of the sequences fills a block
// and the device encodes the block that leaves the hot window (enc_int8,
// enc_pc in the step's stream: nothing read back), whether the step is
// launched kernel by kernel, captured or replayed as a graph (the steady
// steps replay one); and so does
// a batched step that mixes a prefill chunk of a new sequence with the 16
// decode rows; with every logit row copied back, or with the greedy tokens
// picked on the device (the serving scheduler's steps at temperature 0).
func TestBatchStepHostWaits(t *testing.T) {
	needKernels(t, "attn_batch", "attn_batch_pc", "kv_write_runs", "enc_pc", "enc_int8")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	const bs, steps, chunk = 16, 6, 20
	for _, c := range []struct {
		cache  string
		greedy bool
	}{{"plain", false}, {"int8", false}, {"kakeya-pc:rate=2.5", false}, {"plain", true}, {"kakeya-pc:rate=2.5", true}} {
		cache := c.cache
		if c.greedy {
			cache += ", tokens picked on the device"
		}
		decode, mixed, encodes := batchWaits(t, dir, c.cache, c.greedy, bs, steps, chunk)
		for i, st := range decode {
			t.Logf("%s: batched decode step %d of 16 sequences: %d host waits, %d blocks' parts encoded on the device; %+v", cache, i, st.Waits(), encodes[i], st)
			if st.Waits() != 1 || st.CopiesOut != 1 {
				t.Errorf("%s: batched decode step %d of 16 sequences (%d parts encoded): %d host waits (%+v), want 1: the logits' copy back", cache, i, encodes[i], st.Waits(), st)
			}
		}
		// Steps 2 and 3 see and capture the new shape class sequence 0's
		// third block makes; steps 4 and 5 replay it: one graph launch.
		for i := steps - 2; i < steps; i++ {
			if st := decode[i]; st.Kernels != 0 || st.Graphs != 1 || st.Captures != 0 {
				t.Errorf("%s: batched decode step %d of 16 sequences: %+v, want one graph replayed", cache, i, st)
			}
		}
		t.Logf("%s: a batched step of a %d-token prefill chunk and 16 decode rows: %d host waits; %+v", cache, chunk, mixed.Waits(), mixed)
		if mixed.Waits() != 1 || mixed.CopiesOut != 1 {
			t.Errorf("%s: a batched step mixing a %d-token prefill chunk with 16 decode rows: %d host waits (%+v), want 1", cache, chunk, mixed.Waits(), mixed)
		}
		// Sequence 0 fills its second block in step 1: its first block
		// (keys and values of 2 KV heads, 2 layers) is encoded then, and
		// in no other decode step.
		want := make([]int, steps)
		if c.cache != "plain" {
			want[1] = 1
		}
		got := make([]int, len(encodes))
		for i, e := range encodes {
			got[i] = min(e, 1)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: encoder launches per decode step %v, want some in step 1 alone", cache, encodes)
		}
	}
}
