package model

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// TestCacheCodecs runs decode with every layer's full blocks outside a hot
// window stored through the codec/ codecs: f32 must give bit-identical
// logits, the lossy ones close logits and smaller caches.
func TestCacheCodecs(t *testing.T) {
	dir := tinyModels(t)["qwen2"]
	const bs = 16
	plain := load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: bs})
	ids := testIDs(100, plain.Config().VocabSize)
	want := decode(t, plain, ids)
	for _, tc := range []struct {
		spec string
		tol  float64 // max abs diff over row max abs; 0: bit-identical; <0: report only
	}{
		{"f32", 0},
		{"bf16", 1e-2},
		{"int8", 3e-2},
		{"int4", -1},
		{"kakeya-block", -1},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			c, err := codec.Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			layers := make([]kvcache.LayerCodecs, plain.Config().NumLayers)
			for i := range layers {
				layers[i] = kvcache.LayerCodecs{K: []codec.Codec{c}, V: c}
			}
			m := load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: bs, Cache: kvcache.Policy{Layers: layers, HotWindow: bs}})
			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var worst float64
			for p, id := range ids {
				got, err := s.Forward([]int{id}, false)
				if err != nil {
					t.Fatal(err)
				}
				d := maxAbsDiff(got, want[p]) / maxAbs(want[p])
				if math.IsNaN(d) {
					t.Fatalf("position %d: NaN logits", p)
				}
				worst = max(worst, d)
			}
			st := s.KVStats()
			t.Logf("%s: worst relative logit diff %.3g; KV %d bytes (hot %d, coded %d), %.2fx smaller than bf16",
				c.Name(), worst, st.Bytes(), st.Hot, st.Compressed, st.Ratio())
			if st.Compressed == 0 {
				t.Error("no block was encoded")
			}
			switch {
			case tc.tol == 0 && worst != 0:
				t.Errorf("lossless codec changed the logits by %.3g", worst)
			case tc.tol > 0 && worst > tc.tol:
				t.Errorf("relative logit diff %.3g, want <= %.3g", worst, tc.tol)
			}
		})
	}
}

// TestCacheCodecsStories260K runs the serving path of the real stories260K
// model (a 100-token prefill, then 40 decode steps) with every codec: f32
// must reproduce the plain cache's logits bit for bit, and the cache's bytes
// must match each codec's documented encoded length times the blocks the
// policy encodes. How far the lossy codecs move the logits is logged.
func TestCacheCodecsStories260K(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. It was very shiny. Lily wanted to show the ball to her mom, so she ran home as fast as she could. Her mom smiled and said, \"What a nice ball!\" Lily was very happy and played with the ball all day.", true)
	const prefill, steps, bs, hot = 100, 40, 16, 16
	if len(ids) < prefill+steps {
		t.Fatalf("text gives %d tokens, want %d", len(ids), prefill+steps)
	}
	ids = ids[:prefill+steps]
	run := func(m *Model) ([][]float32, kvcache.Stats) {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := s.Forward(ids[:prefill], false)
		if err != nil {
			t.Fatal(err)
		}
		rows := [][]float32{append([]float32(nil), l...)}
		for _, id := range ids[prefill : prefill+steps-1] {
			if l, err = s.Forward([]int{id}, false); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, append([]float32(nil), l...))
		}
		return rows, s.KVStats()
	}
	want, _ := run(load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: bs}))

	cfg := load(t, dir, Options{Backend: cpuBackend(t, 2, "")}).Config()
	n, d, kvh, layers := bs, cfg.HeadDim, cfg.NumKVHeads, cfg.NumLayers
	if d == 0 {
		d = cfg.HiddenSize / cfg.NumHeads
	}
	tokens := prefill + steps - 1
	encoded := (tokens - hot) / bs      // full blocks older than the hot window, per layer
	allocated := (tokens + bs - 1) / bs // blocks holding tokens, per layer
	parts := int64(layers * kvh * 2)    // (K|V) x KV heads x layers per block index
	hotBytes := int64(allocated-encoded) * parts * int64(n*d*4)
	for _, tc := range []struct {
		spec  string
		block int64 // documented encoded length of one n x d block; 0: data-dependent
		tol   float64
	}{
		{"f32", int64(16 + 4*n*d), 0},
		{"bf16", int64(16 + 2*n*d), 2e-2},
		{"int8", int64(16 + 2*n*((d+31)/32) + n*d), 5e-2},
		{"int4", int64(16 + 2 + 2*n*((d+31)/32) + (n*d+1)/2), -1},
		{"int4:params=f16", int64(16 + 4*n*((d+31)/32) + (n*d+1)/2), -1},
		{"int4-k", int64(16 + 2 + 2*d*((n+31)/32) + (n*d+1)/2), -1},
		{"int4-rot", int64(16 + 2 + 2*n*((codec.NextPow2(d)+31)/32) + (n*codec.NextPow2(d)+1)/2), -1},
		{"kakeya-block:b=2", 0, -1},
		{"kakeya-block:b=3", 0, -1},
		{"kakeya-block:b=4", 0, -1},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			// The float32 hot blocks and the lack of boundary layers keep
			// the byte counts above exact.
			spec := kvconfig.Spec{KV: tc.spec, BlockSize: bs, HotWindow: hot, Boundary: "none", CacheType: "f32"}
			p, _, err := kvplan.NewPolicy(spec, kvcache.Shape{Layers: layers, KVHeads: kvh, HeadDim: d}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, st := run(load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: bs, Cache: p}))
			var worst float64
			for i := range want {
				worst = max(worst, maxAbsDiff(got[i], want[i])/maxAbs(want[i]))
			}
			if math.IsNaN(worst) {
				t.Fatal("NaN logits")
			}
			t.Logf("%-10s worst relative logit change %.3g; KV %d bytes (hot %d, encoded %d), codec ratio %.2fx",
				tc.spec, worst, st.Bytes(), st.Hot, st.Compressed, st.CodecRatio())
			if st.Hot != hotBytes {
				t.Errorf("hot bytes %d, want %d (%d of %d blocks hot)", st.Hot, hotBytes, allocated-encoded, allocated)
			}
			if want := int64(encoded) * parts * int64(n*d*2); st.CompressedBF16 != want {
				t.Errorf("encoded blocks' bf16 size %d, want %d", st.CompressedBF16, want)
			}
			if tc.block != 0 {
				if want := int64(encoded) * parts * tc.block; st.Compressed != want {
					t.Errorf("encoded bytes %d, want %d blocks x %d", st.Compressed, int64(encoded)*parts, tc.block)
				}
			} else if st.Compressed <= 0 || st.Compressed >= st.CompressedBF16 {
				t.Errorf("encoded bytes %d, want in (0, %d)", st.Compressed, st.CompressedBF16)
			}
			switch {
			case tc.tol == 0 && worst != 0:
				t.Errorf("lossless codec changed the logits by %.3g", worst)
			case tc.tol > 0 && worst > tc.tol:
				t.Errorf("relative logit change %.3g, want <= %.3g", worst, tc.tol)
			}
		})
	}
}

// A bf16 cache holds half the bytes of a float32 one and moves the logits
// only by bf16 rounding, with or without a codec behind its hot window.
func TestHotBF16(t *testing.T) {
	dir := tinyModels(t)["qwen2"]
	m := load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: 16})
	ids := testIDs(70, m.Config().VocabSize)
	run := func(spec kvconfig.Spec) ([][]float32, kvcache.Stats) {
		p, _, err := kvplan.NewPolicy(spec, m.CacheShape(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return decodeWith(t, m, SequenceOptions{Cache: p}, ids)
	}
	want, st32 := run(kvconfig.Spec{CacheType: "f32"})
	for _, spec := range []kvconfig.Spec{{CacheType: "bf16"}, {KV: "int8", BlockSize: 16, HotWindow: 16, Boundary: "none"}} {
		got, st := run(spec)
		var worst float64
		for i := range want {
			worst = max(worst, maxAbsDiff(got[i], want[i])/maxAbs(want[i]))
		}
		if worst == 0 || worst > 2e-2 {
			t.Errorf("%+v: relative logit change %.3g, want a bf16-sized one", spec, worst)
		}
		if !spec.Compressed() && st.Bytes()*2 != st32.Bytes() {
			t.Errorf("bf16 cache %d bytes, float32 cache %d: want half", st.Bytes(), st32.Bytes())
		}
		if spec.Compressed() && st.Hot*2 > st32.Bytes() {
			t.Errorf("%+v: hot bytes %d", spec, st.Hot)
		}
	}
}
