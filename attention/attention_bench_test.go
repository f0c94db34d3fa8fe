package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/cputime"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// BenchmarkDecode times one query token over a full cache with
// Qwen2.5-0.5B's head geometry (14 query heads, 2 KV heads, head_dim 64).
func BenchmarkDecode(b *testing.B) {
	for _, ctx := range []int{512, 4096} {
		b.Run(fmt.Sprintf("ctx%d", ctx), func(b *testing.B) {
			benchDecode(b, qwen05Heads, ctx, 16, kvcache.Policy{})
		})
	}
}

// BenchmarkDecodeCompressed times one query token over a 2048-token cache
// in 64-token blocks, all but the newest block encoded, with Qwen2.5-0.5B's
// head geometry: the per-layer cost of decoding compressed blocks inside
// attention, beside the plain float cache. kakeya-pc codes in a synthetic
// calibration (benchPCStats) at its default 2.5 bits per value, fixed-width
// (format 8) and entropy coded (format 9: kakeya-pc:ec=true, kvtc), and
// with its keys capped at 16 coded components (coded=16). The g2 runs
// are the same with ref-qwen2-6m's heads (4 query heads on 2 KV heads):
// a group of 2 shares each reconstructed key row instead of 7.
func BenchmarkDecodeCompressed(b *testing.B) {
	const ctx, bs = 2048, 64
	for _, spec := range []string{"plain", "int8", "int4", "kakeya-block", "kakeya-pc", "kakeya-pc:rate=2", "kakeya-pc:ec=true,layout=1", "kakeya-pc:ec=true", "kvtc:rate=2.5,layout=1", "kvtc:rate=2.5",
		"kakeya-pc:coded=16", "g2/plain", "g2/kakeya-pc", "g2/kakeya-pc:ec=true", "g2/kakeya-pc:coded=16"} {
		b.Run(spec, func(b *testing.B) {
			p := qwen05Heads
			if s, ok := strings.CutPrefix(spec, "g2/"); ok {
				spec, p = s, refQwen2Heads
			}
			var policy kvcache.Policy
			if spec != "plain" {
				cd, err := codec.Parse(spec)
				if err != nil {
					b.Fatal(err)
				}
				if pc, ok := cd.(*codec.KakeyaPC); ok {
					if cd, err = codec.NewKakeyaPC(pc.Options(), benchPCStats(64), nil); err != nil {
						b.Fatal(err)
					}
				}
				policy = kvcache.Policy{HotWindow: bs, Layers: []kvcache.LayerCodecs{{K: []codec.Codec{cd}, V: cd}}}
			}
			benchDecode(b, p, ctx, bs, policy)
		})
	}
}

// BenchmarkDecodeInterleaved is BenchmarkDecodeCompressed's plain,
// kakeya-pc, kakeya-pc:ec=true and kvtc:rate=2.5 caches timed query by
// query in turn, in one process, so that a loaded machine's drift falls
// on all alike: each reports the median and the least wall time of its
// queries (b.N each), and the ratio of the medians to kakeya-pc's
// (format 8). The least time is the one the other load disturbed least.
// kakeya-pc:coded=16 caps the keys at 16 coded components. Under q05
// with Qwen2.5-0.5B's heads, under g2 ref-qwen2-6m's.
func BenchmarkDecodeInterleaved(b *testing.B) {
	for _, g := range []struct {
		name string
		p    compute.AttentionParams
	}{{"q05", qwen05Heads}, {"g2", refQwen2Heads}} {
		b.Run(g.name, func(b *testing.B) { benchInterleaved(b, g.p) })
	}
}

func benchInterleaved(b *testing.B, p compute.AttentionParams) {
	const ctx, bs = 2048, 64
	specs := []string{"plain", "kakeya-pc", "kakeya-pc:ec=true", "kvtc:rate=2.5", "kakeya-pc:coded=16"}
	be := newBackend(0)
	defer be.Close()
	r := rand.New(rand.NewPCG(1, 1))
	kv := make([]float32, ctx*2*64)
	for i := range kv {
		kv[i] = float32(r.NormFloat64())
	}
	cos, sin := ropeTables(ctx, 64)
	cb, sb := compute.Wrap(cos), compute.Wrap(sin)
	q, out := compute.Wrap(kv[:p.Heads*64]), compute.Wrap(make([]float32, p.Heads*64))
	var (
		layers []compute.KVLayer
		atts   []compute.Attention
	)
	for _, spec := range specs {
		var policy kvcache.Policy
		if spec != "plain" {
			cd, err := codec.Parse(spec)
			if err != nil {
				b.Fatal(err)
			}
			if cd, err = codec.NewKakeyaPC(cd.(*codec.KakeyaPC).Options(), benchPCStats(64), nil); err != nil {
				b.Fatal(err)
			}
			policy = kvcache.Policy{HotWindow: bs, Layers: []kvcache.LayerCodecs{{K: []codec.Codec{cd}, V: cd}}}
		}
		c, err := newCache(be, 2, 64, bs, ctx, policy)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Append(0, compute.Wrap(kv), compute.Wrap(kv), ctx); err != nil {
			b.Fatal(err)
		}
		a, err := newAttention(be, p, bs, ctx)
		if err != nil {
			b.Fatal(err)
		}
		layers, atts = append(layers, c.Layer(0)), append(atts, a)
	}
	times := make([][]float64, len(specs))
	b.ResetTimer()
	for range b.N {
		for i, a := range atts {
			t0 := time.Now()
			if err := a.Forward(out, q, 1, ctx-1, layers[i], cb, sb); err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], float64(time.Since(t0).Microseconds()))
		}
	}
	b.StopTimer()
	med := make([]float64, len(specs))
	for i, spec := range specs {
		slices.Sort(times[i])
		med[i] = times[i][len(times[i])/2]
		b.ReportMetric(med[i], spec+"-us")
		b.ReportMetric(times[i][0], spec+"-min-us")
	}
	for i := 2; i < len(specs); i++ {
		b.ReportMetric(med[i]/med[1], specs[i]+"/kakeya-pc")
	}
	b.ReportMetric(med[1]/med[0], "kakeya-pc/plain")
	b.ReportMetric(med[len(specs)-1]/med[0], "kakeya-pc:coded=16/plain")
}

// qwen05Heads and refQwen2Heads are the attention geometries of
// Qwen2.5-0.5B and of ref-qwen2-6m.
var (
	qwen05Heads   = compute.AttentionParams{Heads: 14, KVHeads: 2, HeadDim: 64}
	refQwen2Heads = compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 64}
)

// benchDecode times one query token at position ctx-1 over a cache of ctx
// random tokens in blocks of bs under policy, with the head geometry p
// (2 KV heads of 64 values).
func benchDecode(b *testing.B, p compute.AttentionParams, ctx, bs int, policy kvcache.Policy) {
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
	q, out := compute.Wrap(kv[:p.Heads*64]), compute.Wrap(make([]float32, p.Heads*64))
	cb, sb := compute.Wrap(cos), compute.Wrap(sin)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Seconds()
	for i := 0; i < b.N; i++ {
		if err := a.Forward(out, q, 1, ctx-1, c.Layer(0), cb, sb); err != nil {
			b.Fatal(err)
		}
	}
	// The process's CPU time per query (every thread's), which a loaded
	// machine's other work does not add to as it does to the wall time.
	if cpu := cputime.Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu/float64(b.N)*1e3, "cpu-ms/op")
	}
}

// benchPCStats returns statistics for kakeya-pc of dimension d: a random
// orthonormal basis whose variances fall geometrically from 16 to 16/2^12,
// the spectrum of real keys in miniature, so the allocation codes a
// realistic number of components at realistic widths. The data the
// benchmark encodes need not follow it: decoding costs the same.
func benchPCStats(d int) *codec.PCAStats {
	r := rand.New(rand.NewPCG(7, uint64(d)))
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for i := range st.Basis {
		st.Basis[i] = float32(r.NormFloat64())
	}
	for a := 0; a < d; a++ { // Gram–Schmidt, in float64
		ra := st.Basis[a*d : (a+1)*d]
		for c := 0; c < a; c++ {
			rc := st.Basis[c*d : (c+1)*d]
			var dot float64
			for i := range ra {
				dot += float64(ra[i]) * float64(rc[i])
			}
			for i := range ra {
				ra[i] -= float32(dot) * rc[i]
			}
		}
		var nn float64
		for _, v := range ra {
			nn += float64(v) * float64(v)
		}
		for i := range ra {
			ra[i] = float32(float64(ra[i]) / math.Sqrt(nn))
		}
	}
	for j := range st.Var {
		st.Var[j] = float32(16 * math.Pow(2, -12*float64(j)/float64(d)))
		st.Between[j] = st.Var[j] / 4
	}
	return st
}
