package attention

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// Sequences whose attentions share one Scratch (as the CPU backend's do,
// per worker rather than per sequence) run concurrently and each get what
// an attention with scratch of its own gets, bit for bit; a Scratch of
// another shape is refused. Run with -race.
func TestSharedScratch(t *testing.T) {
	be := newBackend(2)
	defer be.Close()
	const total, maxCtx, bs, seqs = 37, 64, 16, 6
	p := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 8, BlockSize: bs, MaxContext: maxCtx}
	sc := NewScratch(be.pool, p)
	cos, sin := ropeTables(maxCtx, p.HeadDim)
	qr := p.Heads * p.HeadDim
	type input struct {
		c    *kvcache.Cache
		q    []float32
		want []float32
	}
	in := make([]input, seqs)
	for i := range in {
		q, k, v := randQKV(rand.New(rand.NewPCG(uint64(i), 3)), total, p)
		c, err := newCache(be, p.KVHeads, p.HeadDim, bs, maxCtx, kvcache.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Append(0, compute.Wrap(k), compute.Wrap(v), total); err != nil {
			t.Fatal(err)
		}
		own, err := New(be.pool, p)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, total*qr)
		if err := own.Forward(compute.Wrap(want), compute.Wrap(q), total, 0, c.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err != nil {
			t.Fatal(err)
		}
		in[i] = input{c, q, want}
	}
	var wg sync.WaitGroup
	errs := make([]string, seqs)
	for i := range in {
		wg.Go(func() {
			a, err := NewShared(be.pool, p, sc)
			if err != nil {
				errs[i] = err.Error()
				return
			}
			got := make([]float32, total*qr)
			for range 3 {
				if err := a.Forward(compute.Wrap(got), compute.Wrap(in[i].q), total, 0, in[i].c.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err != nil {
					errs[i] = err.Error()
					return
				}
				if !slices.Equal(got, in[i].want) {
					errs[i] = "output differs from the attention with its own scratch"
					return
				}
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("sequence %d: %s", i, e)
		}
	}
	other := p
	other.MaxContext = 128
	if _, err := NewShared(be.pool, other, sc); err == nil {
		t.Error("a Scratch for a context of 64 served an attention of context 128")
	}
}
