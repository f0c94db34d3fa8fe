package kvplan

import (
	"testing"

	"github.com/kakeya-ai/kakeya/attention"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// TestCacheBytesIsBytesFor: CacheBytes counts exactly what
// kvcache.Config.BytesFor does for the CPU's store, over codecs, hot
// windows, sinks, boundary layers, bf16 or float32 hot parts and token
// counts around the block edges.
func TestCacheBytesIsBytesFor(t *testing.T) {
	const layers, kvHeads, d = 4, 2, 16
	cal := testCalibration(layers, kvHeads, d)
	pcCalibration(cal)
	for _, sp := range []kvconfig.Spec{
		{KV: "kakeya-pc:rate=2.5,block=16", BlockSize: 16, HotWindow: 32, Boundary: "none"},
		{KV: "kakeya-pc:rate=2", BlockSize: 16, HotWindow: 16, Boundary: "0,-1", Sinks: 4},
		{K: "int4", V: "fp8", BlockSize: 32, HotWindow: 8, Precondition: kvconfig.Off},
		{KV: "kakeya-block:b=2", BlockSize: 16, HotWindow: -1, CacheType: "f32", Precondition: kvconfig.Off},
		{},
	} {
		// Full layers; every layer sliding, coded (Mistral); sliding
		// layers beside full ones, hot (Gemma). CacheBytes counts a
		// decoded sequence: BytesFor with appends of one token.
		for _, win := range [][]int{nil, {40, 40, 40, 40}, {40, 0, 40, 0}} {
			m := kvcache.Shape{Layers: layers, KVHeads: kvHeads, HeadDim: d, MaxContext: 1000, Windows: win}
			p, st, err := NewPolicy(sp, m, cal)
			if err != nil {
				t.Fatalf("%+v: %v", sp, err)
			}
			cfg := kvcache.Config{Layers: layers, KVHeads: kvHeads, HeadDim: d, BlockSize: st.BlockSize, MaxTokens: 1000, Policy: p,
				Store: attention.NewStore(st.BlockSize, d, p.HotBF16), Windows: win, SlideChunk: 1}
			for _, n := range []int{0, 1, 15, 16, 17, 33, 64, 100, 999, 1000} {
				want, err := cfg.BytesFor(n)
				if err != nil {
					t.Fatal(err)
				}
				got, err := CacheBytes(p, m, st.BlockSize, n)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%+v, windows %v, %d tokens: %d bytes, BytesFor says %d", sp, win, n, got, want)
				}
			}
		}
	}
	if _, err := CacheBytes(kvcache.Policy{}, kvcache.Shape{}, 16, 10); err == nil {
		t.Error("empty shape accepted")
	}
}

// TestProject: the ratio against bf16 grows toward the codec's own with
// the context, as the hot window's share falls.
func TestProject(t *testing.T) {
	const layers, kvHeads, d = 2, 1, 16
	cal := testCalibration(layers, kvHeads, d)
	pcCalibration(cal)
	m := kvcache.Shape{Layers: layers, KVHeads: kvHeads, HeadDim: d}
	p, _, err := NewPolicy(kvconfig.Spec{KV: "kakeya-pc:rate=2,block=16", BlockSize: 16, HotWindow: 16, Boundary: "none"}, m, cal)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := Project(p, m, 16, []int{16, 256, 4096})
	if err != nil {
		t.Fatal(err)
	}
	// One block of a bf16 part is 16*16*2 = 512 bytes; a kakeya-pc block at
	// 2 bits per value at most 22 + 16*16*2/8 = 86.
	if pr[0].Ratio() != 1 || pr[0].BF16 != 2*2*512 {
		t.Errorf("16 tokens: %+v, want all hot, ratio 1", pr[0])
	}
	for i := 1; i < len(pr); i++ {
		if !(pr[i].Ratio() > pr[i-1].Ratio()) || pr[i].Ratio() > 512.0/70 {
			t.Errorf("ratios %v, %v: want growing, below 512/70", pr[i-1].Ratio(), pr[i].Ratio())
		}
	}
}
