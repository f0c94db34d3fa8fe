package model

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// keepAllBackend hides a backend's compute.SlidingKV (keeping its
// ArchOps): the model then gives the cache no windows, so it keeps every
// block.
type keepAllBackend struct {
	compute.Backend
	compute.ArchOps
}

func gemmaDir(t *testing.T, spec testmodel.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), spec.ModelType)
	if err := testmodel.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGemmaSlidingKV checks that Gemma's sliding layers release the
// blocks their window no longer sees, as they decode, with logits bit for
// bit those of a cache that keeps every block, and that each layer holds
// what the projection (kvcache.SlidingBlocks) and the cache's BytesFor
// say.
func TestGemmaSlidingKV(t *testing.T) {
	const bs, n = 4, 40
	dir := gemmaDir(t, testmodel.Gemma3Tiny) // window 8; layers 0-4 slide, 5 is full
	b := cpuBackend(t, 2, "f32")
	slide := load(t, dir, Options{Backend: b, BlockSize: bs})
	keep := load(t, dir, Options{Backend: keepAllBackend{b, b.(compute.ArchOps)}, BlockSize: bs})
	if w := keep.CacheShape().Windows; w != nil {
		t.Fatalf("a backend without SlidingKV: windows %v", w)
	}
	ids := testIDs(n, testmodel.Gemma3Tiny.Vocab)
	got, want := decode(t, slide, ids), decode(t, keep, ids)
	for p := range got {
		for i := range got[p] {
			if got[p][i] != want[p][i] {
				t.Fatalf("position %d logit %d: %v with windows, %v keeping every block", p, i, got[p][i], want[p][i])
			}
		}
	}

	s, err := slide.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range ids {
		if _, err := s.Forward([]int{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	st := s.KVStats()
	c := slide.Config()
	part := int64(bs * slide.headDim * 4) // hot f32 parts
	shape := slide.CacheShape()
	for li, ls := range st.Layers {
		blocks := (n + bs - 1) / bs
		if w := shape.Windows[li]; w > 0 {
			blocks = kvcache.SlidingBlocks(n, w, bs, 1)
		}
		if wantB := int64(2*c.NumKVHeads*blocks) * part; ls.Bytes() != wantB {
			t.Errorf("layer %d holds %d bytes, want %d (%d blocks)", li, ls.Bytes(), wantB, blocks)
		}
	}
	cfg := kvcache.Config{Layers: c.NumLayers, KVHeads: c.NumKVHeads, HeadDim: slide.headDim, BlockSize: bs,
		MaxTokens: slide.MaxContext(), Store: b.NewBlockStore(bs, slide.headDim, false), Windows: shape.Windows, SlideChunk: 1}
	if want, err := cfg.BytesFor(n); err != nil || st.Bytes() != want {
		t.Errorf("cache holds %d bytes, BytesFor with chunk 1 says %d (%v)", st.Bytes(), want, err)
	}
	if full := int64(c.NumLayers*((n+bs-1)/bs)*2*c.NumKVHeads) * part; st.Bytes()*2 > full {
		t.Errorf("cache of %d tokens holds %d bytes, keeping every block %d: the windows saved too little", n, st.Bytes(), full)
	}
}

// TestGemmaSlidingPrefix checks prefix sharing with sliding layers: a
// writer that decoded past its window released its old sliding blocks
// from the pool, and a sequence attaching its prefix reuses only as far
// as its next query finds the blocks it sees, with a cold prefill's
// logits bit for bit; the pool is empty once both close.
func TestGemmaSlidingPrefix(t *testing.T) {
	const bs = 4
	dir := gemmaDir(t, testmodel.Gemma3Tiny)
	b := cpuBackend(t, 2, "f32")
	m := load(t, dir, Options{Backend: b, BlockSize: bs})
	pool, err := kvcache.NewPool(kvcache.PoolConfig{Store: b.NewBlockStore(bs, m.headDim, false), BlockSize: bs, HeadDim: m.headDim, Budget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	first := testIDs(30, testmodel.Gemma3Tiny.Vocab)
	w, err := m.NewSequenceOpts(SequenceOptions{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Forward(first[:20], false); err != nil {
		t.Fatal(err)
	}
	for _, id := range first[20:] {
		if _, err := w.Forward([]int{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prompt []int
		reused int
	}{
		// Blocks 0-4 lost their sliding parts as the writer reached 29;
		// a run of 7 blocks needs blocks 5 and 6 (positions 21.. of a
		// window of 8 from position 28): reused.
		{append(append([]int(nil), first[:28]...), 3, 5, 7), 28},
		// A run of 5 blocks would need blocks 3 and 4: thinned, as every
		// shorter run's.
		{append(append([]int(nil), first[:20]...), 9, 9), 0},
	} {
		s, err := m.NewSequenceOpts(SequenceOptions{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.AttachPrefix(tc.prompt)
		if err != nil {
			t.Fatal(err)
		}
		if r != tc.reused {
			t.Fatalf("prompt of %d: reused %d tokens, want %d", len(tc.prompt), r, tc.reused)
		}
		got, err := s.Forward(tc.prompt[r:], false)
		if err != nil {
			t.Fatal(err)
		}
		cold, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		want, err := cold.Forward(tc.prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("prompt of %d: logit %d = %v after reusing %d tokens, %v cold", len(tc.prompt), i, got[i], r, want[i])
			}
		}
		cold.Close()
		s.Close()
	}
	w.Close()
	pool.Evict()
	if st := pool.Stats(); st.Used != 0 || st.Referenced != 0 {
		t.Errorf("after Close and Evict: %s, want empty", st)
	}
}

// A batch item longer than a windowed sequence's step is refused before
// the step runs, naming the option, and leaves the sequence usable.
func TestGemmaBatchChunk(t *testing.T) {
	m := load(t, gemmaDir(t, testmodel.Gemma3Tiny), Options{Backend: cpuBackend(t, 1, "f32"), BlockSize: 4})
	s, err := m.NewSequenceOpts(SequenceOptions{StepTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bt, err := m.NewBatch(64)
	if err != nil {
		t.Fatal(err)
	}
	err = bt.Forward([]BatchItem{{Seq: s, IDs: testIDs(9, testmodel.Gemma3Tiny.Vocab)}})
	if err == nil || !strings.Contains(err.Error(), "9 tokens in one step, more than the 8") {
		t.Fatalf("a 9-token item for StepTokens 8: %v", err)
	}
	// Forward splits into passes of StepTokens.
	if _, err := s.Forward(testIDs(20, testmodel.Gemma3Tiny.Vocab), false); err != nil {
		t.Fatal(err)
	}
}

// A Gemma decode step allocates nothing either (within a block: a new
// block's table entry is the cache's one allocation, as for any model).
func TestGemmaDecodeAllocatesNothing(t *testing.T) {
	for _, spec := range []testmodel.Spec{testmodel.Gemma2Tiny, testmodel.Gemma3Tiny} {
		m := load(t, gemmaDir(t, spec), Options{Backend: cpuBackend(t, 2, ""), BlockSize: 256})
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Forward(testIDs(20, spec.Vocab), false); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := s.Forward([]int{5}, false); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: decode step allocates %v times, want 0", spec.ModelType, allocs)
		}
		s.Close()
	}
}

// KVBlock of a block a sliding layer released is an error naming it;
// with SequenceOptions.KeepAll (calibration's) every block stays.
func TestGemmaKVBlockKeepAll(t *testing.T) {
	m := load(t, gemmaDir(t, testmodel.Gemma3Tiny), Options{Backend: cpuBackend(t, 1, "f32"), BlockSize: 4})
	for _, keep := range []bool{false, true} {
		s, err := m.NewSequenceOpts(SequenceOptions{KeepAll: keep})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range testIDs(24, testmodel.Gemma3Tiny.Vocab) {
			if _, err := s.Forward([]int{id}, false); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err = s.KVBlock(0, 0, 0) // layer 0 slides (window 8)
		if keep != (err == nil) || (err != nil && !strings.Contains(err.Error(), "slid out of the layer's window of 8")) {
			t.Errorf("KeepAll %t: KVBlock of layer 0 block 0: %v", keep, err)
		}
		if _, _, err := s.KVBlock(5, 0, 0); err != nil { // layer 5 is full
			t.Errorf("KeepAll %t: KVBlock of the full layer: %v", keep, err)
		}
		s.Close()
	}
}
