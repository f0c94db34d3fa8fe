package attention

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// BenchmarkDecode times one query token over a full cache with
// Qwen2.5-0.5B's head geometry (14 query heads, 2 KV heads, head_dim 64).
func BenchmarkDecode(b *testing.B) {
	for _, ctx := range []int{512, 4096} {
		b.Run(fmt.Sprintf("ctx%d", ctx), func(b *testing.B) {
			benchDecode(b, ctx, 16, kvcache.Policy{})
		})
	}
}

// BenchmarkDecodeCompressed times one query token over a 2048-token cache
// in 64-token blocks, all but the newest block encoded, with Qwen2.5-0.5B's
// head geometry: the per-layer cost of decoding compressed blocks inside
// attention, beside the plain float cache.
func BenchmarkDecodeCompressed(b *testing.B) {
	const ctx, bs = 2048, 64
	for _, spec := range []string{"plain", "int8", "int4", "kakeya"} {
		b.Run(spec, func(b *testing.B) {
			var policy kvcache.Policy
			if spec != "plain" {
				cd, err := codec.Parse(spec)
				if err != nil {
					b.Fatal(err)
				}
				policy = kvcache.Policy{HotWindow: bs, Layers: []kvcache.LayerCodecs{{K: []codec.Codec{cd}, V: cd}}}
			}
			benchDecode(b, ctx, bs, policy)
		})
	}
}

// benchDecode times one query token at position ctx-1 over a cache of ctx
// random tokens in blocks of bs under policy, with Qwen2.5-0.5B's head
// geometry.
func benchDecode(b *testing.B, ctx, bs int, policy kvcache.Policy) {
	p := compute.AttentionParams{Heads: 14, KVHeads: 2, HeadDim: 64}
	be := newBackend(0)
	defer be.Close()
	c, err := newCache(be, 2, 64, bs, ctx, policy)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	kv := make([]float32, ctx*2*64)
	for i := range kv {
		kv[i] = float32(r.NormFloat64())
	}
	if err := c.Append(0, compute.Wrap(kv), compute.Wrap(kv), ctx); err != nil {
		b.Fatal(err)
	}
	cos, sin := ropeTables(ctx, 64)
	a, err := newAttention(be, p, bs, ctx)
	if err != nil {
		b.Fatal(err)
	}
	q, out := compute.Wrap(kv[:14*64]), compute.Wrap(make([]float32, 14*64))
	cb, sb := compute.Wrap(cos), compute.Wrap(sin)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.Forward(out, q, 1, ctx-1, c.Layer(0), cb, sb); err != nil {
			b.Fatal(err)
		}
	}
}
