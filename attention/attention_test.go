package attention

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	kern "github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// backend is what these tests need of a CPU backend: a pool of threads,
// the host store and the attention over it.
type backend struct{ pool *kern.Pool }

// randQKV returns n tokens' queries, keys and values of p's shape, drawn
// from N(0, 1) by r in that order.
func randQKV(r *rand.Rand, n int, p compute.AttentionParams) (q, k, v []float32) {
	q = make([]float32, n*p.Heads*p.HeadDim)
	k = make([]float32, n*p.KVHeads*p.HeadDim)
	v = make([]float32, len(k))
	for _, x := range [][]float32{q, k, v} {
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
	}
	return q, k, v
}

func newBackend(threads int) *backend { return &backend{pool: kern.NewPool(threads)} }

func (b *backend) Close() { b.pool.Close() }

func (b *backend) NewBlockStore(rows, d int, bf16 bool) compute.BlockStore {
	return NewStore(rows, d, bf16)
}

func (b *backend) NewAttention(p compute.AttentionParams) (compute.Attention, error) {
	return New(b.pool, p)
}

// newCache returns a one-layer cache whose blocks live in be's store.
func newCache(be *backend, kvHeads, d, bs, maxCtx int, p kvcache.Policy) (*kvcache.Cache, error) {
	return kvcache.New(kvcache.Config{Layers: 1, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxTokens: maxCtx, Policy: p,
		Store: be.NewBlockStore(bs, d, p.HotBF16)})
}

// newAttention returns be's attention for blocks of bs tokens and maxCtx
// positions.
func newAttention(be *backend, p compute.AttentionParams, bs, maxCtx int) (compute.Attention, error) {
	p.BlockSize, p.MaxContext = bs, maxCtx
	return be.NewAttention(p)
}

// ropeTables returns cos/sin for positions [0, n) with theta 10000.
func ropeTables(n, d int) (cos, sin []float32) {
	half := d / 2
	cos, sin = make([]float32, n*half), make([]float32, n*half)
	for p := 0; p < n; p++ {
		for i := 0; i < half; i++ {
			a := float64(p) / math.Pow(10000, float64(2*i)/float64(d))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// naive is attention in float64 straight from the definition.
func naive(q, k, v []float32, n, start int, p compute.AttentionParams, cos, sin []float32) []float64 {
	d, half := p.HeadDim, p.HeadDim/2
	G := p.Heads / p.KVHeads
	total := start + n
	krot := make([]float64, total*p.KVHeads*d)
	for pos := 0; pos < total; pos++ {
		for g := 0; g < p.KVHeads; g++ {
			x := k[(pos*p.KVHeads+g)*d:]
			o := krot[(pos*p.KVHeads+g)*d:]
			for i := 0; i < half; i++ {
				c, s := float64(cos[pos*half+i]), float64(sin[pos*half+i])
				o[i] = float64(x[i])*c - float64(x[i+half])*s
				o[i+half] = float64(x[i+half])*c + float64(x[i])*s
			}
		}
	}
	out := make([]float64, n*p.Heads*d)
	for qi := 0; qi < n; qi++ {
		qp := start + qi
		lo := 0
		if p.Window > 0 {
			lo = max(0, qp-p.Window+1)
		}
		for h := 0; h < p.Heads; h++ {
			g := h / G
			qv := q[(qi*p.Heads+h)*d:]
			sc := make([]float64, qp+1)
			m := math.Inf(-1)
			for pos := lo; pos <= qp; pos++ {
				var s float64
				for j := 0; j < d; j++ {
					s += float64(qv[j]) * krot[(pos*p.KVHeads+g)*d+j]
				}
				sc[pos] = s / math.Sqrt(float64(d))
				m = max(m, sc[pos])
			}
			var sum float64
			for pos := lo; pos <= qp; pos++ {
				sc[pos] = math.Exp(sc[pos] - m)
				sum += sc[pos]
			}
			for pos := lo; pos <= qp; pos++ {
				for j := 0; j < d; j++ {
					out[(qi*p.Heads+h)*d+j] += sc[pos] / sum * float64(v[(pos*p.KVHeads+g)*d+j])
				}
			}
		}
	}
	return out
}

func TestForward(t *testing.T) {
	be := newBackend(2)
	defer be.Close()
	const total, maxCtx = 41, 64
	raw := []codec.Codec{codec.Identity{}}
	for _, tc := range []struct {
		name     string
		p        compute.AttentionParams
		policy   kvcache.Policy
		prefills []int // tokens per Forward call
	}{
		{"mha prefill", compute.AttentionParams{Heads: 2, KVHeads: 2, HeadDim: 8}, kvcache.Policy{}, []int{total}},
		{"gqa decode", compute.AttentionParams{Heads: 6, KVHeads: 2, HeadDim: 8}, kvcache.Policy{}, nil},
		{"gqa chunks", compute.AttentionParams{Heads: 4, KVHeads: 1, HeadDim: 16}, kvcache.Policy{}, []int{7, 13, 1, 20}},
		{"window", compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 8, Window: 9}, kvcache.Policy{}, []int{30, 11}},
		{"raw codec", compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 8}, kvcache.Policy{HotWindow: 3, Sinks: 1,
			Layers: []kvcache.LayerCodecs{{K: raw, V: codec.Identity{}}}}, []int{25, 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.p.HeadDim
			q, k, v := randQKV(rand.New(rand.NewPCG(7, 9)), total, tc.p)
			cos, sin := ropeTables(maxCtx, d)
			want := naive(q, k, v, total, 0, tc.p, cos, sin)
			steps := tc.prefills
			if steps == nil {
				for range total {
					steps = append(steps, 1)
				}
			}
			var first []float32
			for _, bs := range []int{1, 4, 16, 256} {
				c, err := newCache(be, tc.p.KVHeads, d, bs, maxCtx, tc.policy)
				if err != nil {
					t.Fatal(err)
				}
				a, err := newAttention(be, tc.p, bs, maxCtx)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]float32, len(q))
				pos := 0
				for _, n := range steps {
					kr := tc.p.KVHeads * d
					if err := c.Append(0, compute.Wrap(k[pos*kr:(pos+n)*kr]), compute.Wrap(v[pos*kr:(pos+n)*kr]), n); err != nil {
						t.Fatal(err)
					}
					qr := tc.p.Heads * d
					if err := a.Forward(compute.Wrap(got[pos*qr:(pos+n)*qr]), compute.Wrap(q[pos*qr:(pos+n)*qr]), n, pos, c.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err != nil {
						t.Fatal(err)
					}
					pos += n
				}
				var worst float64
				for i := range got {
					worst = max(worst, math.Abs(float64(got[i])-want[i]))
				}
				if worst > 1e-5 {
					t.Errorf("block size %d: max abs error %g vs float64 reference", bs, worst)
				}
				if first == nil {
					first = got
				} else {
					for i := range got {
						if got[i] != first[i] {
							t.Fatalf("block size %d: out[%d] = %v, block size 1 gave %v", bs, i, got[i], first[i])
						}
					}
				}
			}
		})
	}
}

func TestForwardErrors(t *testing.T) {
	be := newBackend(1)
	defer be.Close()
	if _, err := newAttention(be, compute.AttentionParams{Heads: 6, KVHeads: 4, HeadDim: 8}, 16, 32); err == nil {
		t.Error("6 heads over 4 KV heads: no error")
	}
	a, err := newAttention(be, compute.AttentionParams{Heads: 2, KVHeads: 1, HeadDim: 4}, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCache(be, 1, 4, 4, 8, kvcache.Policy{})
	cos, sin := ropeTables(8, 4)
	buf := make([]float32, 2*8)
	if err := a.Forward(compute.Wrap(buf), compute.Wrap(buf), 2, 0, c.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err == nil {
		t.Error("queries beyond the cached keys: no error")
	}
}

// decodeOnly hides a codec's RowCombiner, forcing the decode-then-sum path.
type decodeOnly struct{ codec.Codec }

// At decode, values in blocks whose codec is a RowCombiner are summed by
// the codec; the result must match decoding the blocks and summing.
func TestForwardRowCombiner(t *testing.T) {
	be := newBackend(2)
	defer be.Close()
	kk, err := codec.NewKakeya(codec.DefaultKakeyaOptions())
	if err != nil {
		t.Fatal(err)
	}
	const total, maxCtx, bs = 150, 160, 16
	for _, p := range []compute.AttentionParams{
		{Heads: 6, KVHeads: 2, HeadDim: 32},
		{Heads: 4, KVHeads: 2, HeadDim: 24, Window: 37}, // windows start inside encoded blocks
	} {
		d := p.HeadDim
		q, k, v := randQKV(rand.New(rand.NewPCG(3, 4)), total, p)
		cos, sin := ropeTables(maxCtx, d)
		run := func(vc codec.Codec) []float32 {
			c, err := newCache(be, p.KVHeads, d, bs, maxCtx, kvcache.Policy{HotWindow: bs, Layers: []kvcache.LayerCodecs{{V: vc}}})
			if err != nil {
				t.Fatal(err)
			}
			a, err := newAttention(be, p, bs, maxCtx)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]float32, len(q))
			kr, qr := p.KVHeads*d, p.Heads*d
			for pos := 0; pos < total; pos++ {
				if err := c.Append(0, compute.Wrap(k[pos*kr:(pos+1)*kr]), compute.Wrap(v[pos*kr:(pos+1)*kr]), 1); err != nil {
					t.Fatal(err)
				}
				if err := a.Forward(compute.Wrap(out[pos*qr:(pos+1)*qr]), compute.Wrap(q[pos*qr:(pos+1)*qr]), 1, pos, c.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err != nil {
					t.Fatal(err)
				}
			}
			return out
		}
		got, want := run(kk), run(decodeOnly{kk})
		var worst float64
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
		}
		if worst > 1e-5 {
			t.Errorf("%+v: combined values differ from decoded ones by %g", p, worst)
		}
		if worst == 0 {
			t.Errorf("%+v: bit-identical to the decode path: was the combiner used?", p)
		}
	}
}
