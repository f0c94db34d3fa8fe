package model

import (
	"math"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// TestCacheCodecs runs decode with every layer's full blocks outside a hot
// window stored through the codec/ codecs: f32 must give bit-identical
// logits, the lossy ones close logits and smaller caches.
func TestCacheCodecs(t *testing.T) {
	dir := tinyModels(t)["qwen2"]
	const bs = 16
	plain := load(t, dir, Options{Threads: 2, BlockSize: bs})
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
		{"kakeya", -1},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			sp, err := codec.ParseSpec(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			c, err := codec.New(sp)
			if err != nil {
				t.Fatal(err)
			}
			layers := make([]kvcache.LayerCodecs, plain.Config().NumLayers)
			for i := range layers {
				layers[i] = kvcache.LayerCodecs{K: []codec.Codec{c}, V: c}
			}
			m := load(t, dir, Options{Threads: 2, BlockSize: bs, Cache: kvcache.Policy{Layers: layers, HotWindow: bs}})
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
