package model

import (
	"math"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
)

// mistralWindow is MistralTiny (every layer sliding) with a window of 32
// tokens: two 16-token blocks, one of them past the one-block hot window,
// so a decoding cache holds blocks encoded and hot, and releases both.
var mistralWindow = func() testmodel.Spec {
	s := testmodel.MistralTiny
	s.SlidingWindow = 32
	return s
}()

const mistralBlock = 16

// mistralCaches are the caches the Mistral tests run: plain (f32), and
// every layer through int8 or kakeya-pc (on synthetic principal
// components), 16-token blocks, a hot window of one block.
var mistralCaches = []string{"plain", "int8", "kakeya-pc:rate=3"}

// mistralPolicy returns the policy of a mistralCaches name for m, as
// kvplan builds it from the model's shape (its windows included).
func mistralPolicy(t testing.TB, m *Model, name string) kvcache.Policy {
	t.Helper()
	if name == "plain" {
		return kvcache.Policy{}
	}
	sh := m.CacheShape()
	var cal *codec.Calibration
	if codec.IsPrincipal(name) {
		cal = synthCalibration(sh.Layers, sh.KVHeads, sh.HeadDim)
	}
	p, st, err := kvplan.NewPolicy(kvconfig.Spec{KV: name, BlockSize: mistralBlock, HotWindow: mistralBlock, Boundary: "none",
		CacheType: "f32", Precondition: kvconfig.Off}, sh, cal)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sliding) != 0 || len(p.Layers) != sh.Layers {
		t.Fatalf("%s: the policy keeps sliding layers %v hot, codes %d layers of %d; every layer slides, so every layer codes", name, st.Sliding, len(p.Layers), sh.Layers)
	}
	return p
}

// synthCalibration returns principal components along the axes, their
// variances falling 64-fold over d, for kakeya-pc's allocation.
func synthCalibration(layers, kvHeads, d int) *codec.Calibration {
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for j := range d {
		st.Basis[j*d+j] = 1
		sd := math.Pow(2, -6*float64(j)/float64(d))
		st.Var[j] = float32(sd * sd)
		st.Between[j] = st.Var[j] / 10
	}
	cal := &codec.Calibration{Layers: layers, KVHeads: kvHeads, HeadDim: d, Model: "synthetic"}
	for range layers * kvHeads {
		cal.KPCA = append(cal.KPCA, st)
	}
	for range layers {
		cal.VPCA = append(cal.VPCA, st)
	}
	return cal
}

// TestMistralSlidingKV checks that Mistral's layers, all sliding, release
// the blocks their window no longer sees, hot or encoded, as they decode
// past the window: logits bit for bit those of a cache that keeps every
// block (the window masks them there), each layer holding exactly the
// blocks the window sees (the newest hot, the one before it encoded),
// what BytesFor says, and a pool getting back every byte.
func TestMistralSlidingKV(t *testing.T) {
	const bs, n = mistralBlock, 100
	dir := gemmaDir(t, mistralWindow)
	b := cpuBackend(t, 2, "f32")
	m := load(t, dir, Options{Backend: b, BlockSize: bs})
	if w := m.CacheShape().Windows; len(w) != mistralWindow.Layers || w[0] != 32 || w[1] != 32 {
		t.Fatalf("windows %v, want 32 on every layer", w)
	}
	ids := testIDs(n, mistralWindow.Vocab)
	c := m.Config()
	hot := int64(bs * m.headDim * 4)
	for _, name := range mistralCaches {
		t.Run(name, func(t *testing.T) {
			pol := mistralPolicy(t, m, name)
			got, st := decodeWith(t, m, SequenceOptions{Cache: pol, BlockSize: bs}, ids)
			want, all := decodeWith(t, m, SequenceOptions{Cache: pol, BlockSize: bs, KeepAll: true}, ids)
			for p := range want {
				if d := maxAbsDiff(got[p], want[p]); d != 0 {
					t.Fatalf("position %d: logits differ by %g from a cache keeping every block, want bit-identical", p, d)
				}
			}
			// 100 tokens: blocks 0-6. The last step (from position 99,
			// window 32) released blocks 0-3; of blocks 4-6, the full
			// ones before the hot window (100-16 = 84) are encoded:
			// block 4. 5 and 6 are hot.
			for li, ls := range st.Layers {
				want := int64(2*c.NumKVHeads) * 2 * hot
				for h := range c.NumKVHeads {
					for _, cd := range []codec.Codec{pol.KCodec(li, h), pol.VCodec(li)} {
						size := hot
						if cd != nil {
							s, _, err := kvcache.EncodedBlockBytes(cd, bs, m.headDim)
							if err != nil || s >= hot {
								t.Fatalf("%s: %d bytes a block (%v)", cd.Name(), s, err)
							}
							size = s
						}
						want += size
					}
				}
				if ls.Bytes() != want {
					t.Errorf("layer %d holds %d bytes, want %d (block 4 encoded, 5 and 6 hot)", li, ls.Bytes(), want)
				}
				// Keeping every block: blocks 0-4 encoded, 5 and 6 hot.
				if keep := all.Layers[li].Bytes(); keep != 5*want-8*int64(2*c.NumKVHeads)*hot {
					t.Errorf("layer %d keeping every block holds %d bytes, want %d", li, keep, 5*want-8*int64(2*c.NumKVHeads)*hot)
				}
			}
			if (st.Compressed > 0) != (name != "plain") {
				t.Errorf("compressed bytes %d", st.Compressed)
			}
			cfg, err := m.CacheConfig(SequenceOptions{Cache: pol, BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store, cfg.SlideChunk = b.NewBlockStore(bs, m.headDim, false), 1
			if want, err := cfg.BytesFor(n); err != nil || st.Bytes() != want {
				t.Errorf("cache holds %d bytes, BytesFor after decoding says %d (%v)", st.Bytes(), want, err)
			}

			// In a pool: the same bytes, all back once it closes.
			pool, err := kvcache.NewPool(kvcache.PoolConfig{Store: b.NewBlockStore(bs, m.headDim, false), BlockSize: bs, HeadDim: m.headDim, Budget: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			pooled, pst := decodeWith(t, m, SequenceOptions{Cache: pol, BlockSize: bs, Pool: pool}, ids)
			if d := maxAbsDiff(pooled[n-1], want[n-1]); d != 0 || pst.Bytes() != st.Bytes() {
				t.Errorf("pooled: last logits differ by %g, %d bytes held, want %d", d, pst.Bytes(), st.Bytes())
			}
			pool.Evict()
			if ps := pool.Stats(); ps.Used != 0 || ps.Referenced != 0 {
				t.Errorf("after Close and Evict: %s, want empty", ps)
			}
		})
	}
}

// TestMistralAdmission checks that the pool's ledger counts a Mistral
// sequence by its window: its cost stops growing once the window is
// full, and a budget of that cost admits a sequence of the whole context,
// which a cache keeping every block does not fit.
func TestMistralAdmission(t *testing.T) {
	const ctx = 512
	m := load(t, gemmaDir(t, mistralWindow), Options{Backend: cpuBackend(t, 1, "f32"), BlockSize: mistralBlock, MaxContext: ctx})
	for _, name := range mistralCaches {
		t.Run(name, func(t *testing.T) {
			pol := mistralPolicy(t, m, name)
			ledger := func(keep bool, budget int64) *kvcache.Ledger {
				pool, err := kvcache.NewPool(kvcache.PoolConfig{Store: m.b.NewBlockStore(mistralBlock, m.headDim, false), BlockSize: mistralBlock, HeadDim: m.headDim, Budget: budget})
				if err != nil {
					t.Fatal(err)
				}
				cfg, err := m.CacheConfig(SequenceOptions{Cache: pol, Pool: pool, KeepAll: keep, StepTokens: 16})
				if err != nil {
					t.Fatal(err)
				}
				l, err := kvcache.NewLedger(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			cost := ledger(false, 1<<30).Cost(ctx)
			slide, keep := ledger(false, cost), ledger(true, cost)
			if slide.Cost(ctx) != slide.Cost(64) {
				t.Errorf("Cost(%d) = %d, Cost(64) = %d: want equal, the window full by 64", ctx, slide.Cost(ctx), slide.Cost(64))
			}
			prompt := testIDs(ctx-16, mistralWindow.Vocab)
			if slide.MaxTokens() != ctx || !slide.Admits(prompt, ctx) || keep.Admits(prompt, ctx) || keep.MaxTokens() >= ctx/2 {
				t.Errorf("a budget of %d bytes: %d tokens by window (admits %d: %t), %d keeping every block (%t)",
					cost, slide.MaxTokens(), ctx, slide.Admits(prompt, ctx), keep.MaxTokens(), keep.Admits(prompt, ctx))
			}
		})
	}
}

// TestMistralSlidingPrefix checks prefix sharing when every layer slides
// and codes: a sequence attaching a writer's prompt blocks reads them,
// also after the writer decoded past them, with logits bit for bit those
// of the same two sequences keeping every block (and, plain, a cold
// prefill's); the pool counts the shared blocks once, keeps them for the
// sharer, thins them once it has passed them too (the pool then holds
// only what the two caches hold on their own) and gets every byte back.
func TestMistralSlidingPrefix(t *testing.T) {
	const bs = mistralBlock
	b := cpuBackend(t, 2, "f32")
	m := load(t, gemmaDir(t, mistralWindow), Options{Backend: b, BlockSize: bs})
	vocab := mistralWindow.Vocab
	prompt, writes, decodes := testIDs(60, vocab), testIDs(60, vocab-1)[:50], testIDs(60, vocab-2)[:40]
	for _, name := range mistralCaches {
		t.Run(name, func(t *testing.T) {
			pol := mistralPolicy(t, m, name)
			// run has a writer prefill 50 tokens of the prompt, a sharer
			// attach the prompt's prefix and prefill the rest, the writer
			// decode 50 tokens and the sharer 40, and returns the
			// sharer's logits at each step; check is called at the
			// stages with the pool and the two sequences.
			run := func(keep bool, check func(stage string, pool *kvcache.Pool, w, s *Sequence)) [][]float32 {
				pool, err := kvcache.NewPool(kvcache.PoolConfig{Store: b.NewBlockStore(bs, m.headDim, false), BlockSize: bs, HeadDim: m.headDim, Budget: 64 << 20})
				if err != nil {
					t.Fatal(err)
				}
				o := SequenceOptions{Cache: pol, BlockSize: bs, Pool: pool, KeepAll: keep}
				w, err := m.NewSequenceOpts(o)
				if err != nil {
					t.Fatal(err)
				}
				s, err := m.NewSequenceOpts(o)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Forward(prompt[:50], false); err != nil {
					t.Fatal(err)
				}
				r, err := s.AttachPrefix(prompt)
				if err != nil {
					t.Fatal(err)
				}
				// 60 tokens, one left to run (and under a codec the hot
				// window's): blocks 0-2 plain, 0-1 under a codec.
				if want := map[bool]int{true: 48, false: 32}[name == "plain"]; r != want {
					t.Fatalf("KeepAll %t: reused %d tokens, want %d", keep, r, want)
				}
				var out [][]float32
				forward := func(ids []int) {
					l, err := s.Forward(ids, false)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, append([]float32(nil), l...))
				}
				forward(prompt[r:])
				check("shared", pool, w, s)
				for _, id := range writes {
					if _, err := w.Forward([]int{id}, false); err != nil {
						t.Fatal(err)
					}
				}
				// The writer passed the shared blocks; the sharer's
				// windows still see blocks 1 and 2 for 8 steps.
				for _, id := range decodes[:8] {
					forward([]int{id})
				}
				check("the writer passed", pool, w, s)
				for _, id := range decodes[8:] {
					forward([]int{id})
				}
				check("both passed", pool, w, s)
				w.Close()
				s.Close()
				pool.Evict()
				if ps := pool.Stats(); ps.Used != 0 || ps.Referenced != 0 {
					t.Errorf("KeepAll %t: after Close and Evict: %s, want empty", keep, ps)
				}
				return out
			}
			got := run(false, func(stage string, pool *kvcache.Pool, w, s *Sequence) {
				held := w.KVStats().Bytes() + s.KVStats().Bytes()
				ps := pool.Stats()
				if ref := ps.Used - ps.CachedBytes; (ref < held) != (stage == "shared") {
					// Shared, both count the blocks; once the writer
					// passed them only the sharer, and the pool keeps
					// them for it; once both passed, they are thinned.
					t.Errorf("%s: the pool holds %d referenced bytes, the caches %d", stage, ref, held)
				}
			})
			want := run(true, func(string, *kvcache.Pool, *Sequence, *Sequence) {})
			for i := range want {
				if d := maxAbsDiff(got[i], want[i]); d != 0 {
					t.Fatalf("sharer's step %d: logits differ by %g from the sequences keeping every block", i, d)
				}
			}
			if name == "plain" {
				cold, err := m.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				defer cold.Close()
				l, err := cold.Forward(prompt, false)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(got[0], l); d != 0 {
					t.Errorf("the sharer's prompt logits differ by %g from a cold prefill's", d)
				}
			}
		})
	}
}

// A Mistral decode step allocates nothing (within a block), with its
// blocks encoded and released.
func TestMistralDecodeAllocatesNothing(t *testing.T) {
	m := load(t, gemmaDir(t, mistralWindow), Options{Backend: cpuBackend(t, 2, ""), BlockSize: mistralBlock})
	for _, name := range mistralCaches {
		s, err := m.NewSequenceOpts(SequenceOptions{Cache: mistralPolicy(t, m, name), BlockSize: mistralBlock})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Forward(testIDs(80, mistralWindow.Vocab), false); err != nil {
			t.Fatal(err)
		}
		// Within block 5 (tokens 80-95): nothing new to encode or release.
		allocs := testing.AllocsPerRun(10, func() {
			if _, err := s.Forward([]int{5}, false); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: decode step allocates %v times, want 0", name, allocs)
		}
		s.Close()
	}
}
