package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// appendTokens appends the keys and values of tokens at positions
// start.. to every layer of c, in one step, and records the tokens. The
// values depend only on (layer, position, token), as a model's would on
// the prefix, so two sequences with one prefix hold the same blocks.
func appendTokens(c *Cache, tokens []int, start int) error {
	cfg := c.Config()
	row := cfg.KVHeads * cfg.HeadDim
	n := len(tokens)
	k, v := make([]float32, n*row), make([]float32, n*row)
	for l := 0; l < cfg.Layers; l++ {
		for i, tok := range tokens {
			r := rand.New(rand.NewPCG(uint64(l)<<32|uint64(start+i), uint64(tok)))
			for j := 0; j < row; j++ {
				k[i*row+j] = float32(r.NormFloat64())
				v[i*row+j] = float32(r.NormFloat64())
			}
		}
		if err := c.Append(l, compute.Wrap(k), compute.Wrap(v), n); err != nil {
			return err
		}
	}
	return c.AppendTokens(tokens)
}

func mustCodec(t testing.TB, name string) codec.Codec {
	t.Helper()
	cd, err := codec.Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	return cd
}

func newPooled(t testing.TB, p *Pool, layers, kvh, d, bs, maxTokens int, policy Policy) *Cache {
	t.Helper()
	c, err := New(Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: maxTokens, Policy: policy, Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func seq(n, seed int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = (i*7 + seed*13) % 101
	}
	return s
}

// A sequence that attaches a cached prefix reads back exactly the keys and
// values, and counts the bytes, of a cold sequence that appended its whole
// prompt, for plain and encoded blocks.
func TestPoolPrefixReuseMatchesCold(t *testing.T) {
	const layers, kvh, d, bs = 2, 2, 32, 4
	int8c := mustCodec(t, "int8")
	kak := mustCodec(t, "kakeya-block")
	for _, tc := range []struct {
		name   string
		policy Policy
		reused int // tokens the second sequence attaches
	}{
		{"f32", Policy{}, 24},
		{"bf16", Policy{HotBF16: true}, 24},
		{"int8 window8", Policy{HotWindow: 8, Layers: []LayerCodecs{{K: []codec.Codec{int8c}, V: int8c}, {K: []codec.Codec{int8c}, V: int8c}}}, 20},
		{"kakeya window4 sinks4 bf16, layer 1 plain", Policy{HotBF16: true, HotWindow: 4, Sinks: 4, Layers: []LayerCodecs{{K: []codec.Codec{kak, int8c}, V: kak}}}, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(PoolConfig{Store: backend.NewBlockStore(bs, d, tc.policy.HotBF16), BlockSize: bs, HeadDim: d, HotBF16: tc.policy.HotBF16, Budget: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			first := seq(30, 1)
			prompt := append(append([]int(nil), first[:26]...), 500, 501)
			a := newPooled(t, p, layers, kvh, d, bs, 64, tc.policy)
			for pos := 0; pos < len(first); pos += 7 { // in chunks
				if err := appendTokens(a, first[pos:min(pos+7, len(first))], pos); err != nil {
					t.Fatal(err)
				}
			}
			b := newPooled(t, p, layers, kvh, d, bs, 64, tc.policy)
			r, err := b.AttachPrefix(prompt)
			if err != nil {
				t.Fatal(err)
			}
			if r != tc.reused || b.Len() != r {
				t.Fatalf("AttachPrefix reused %d tokens (Len %d), want %d", r, b.Len(), tc.reused)
			}
			if err := appendTokens(b, prompt[r:], r); err != nil {
				t.Fatal(err)
			}
			cold, err := New(Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: 64, Policy: tc.policy,
				Store: backend.NewBlockStore(bs, d, tc.policy.HotBF16)})
			if err != nil {
				t.Fatal(err)
			}
			if err := appendTokens(cold, prompt, 0); err != nil {
				t.Fatal(err)
			}
			got, want := make([]float32, bs*d), make([]float32, bs*d)
			for l := 0; l < layers; l++ {
				if b.NumBlocks(l) != cold.NumBlocks(l) {
					t.Fatalf("layer %d: %d blocks, cold %d", l, b.NumBlocks(l), cold.NumBlocks(l))
				}
				for blk := 0; blk < cold.NumBlocks(l); blk++ {
					for h := 0; h < kvh; h++ {
						for kv := 0; kv < 2; kv++ {
							if b.Encoded(l, h, blk, kv) != cold.Encoded(l, h, blk, kv) {
								t.Fatalf("layer %d block %d head %d kv %d: encoded %t, cold %t", l, blk, h, kv, b.Encoded(l, h, blk, kv), cold.Encoded(l, h, blk, kv))
							}
							if err := b.Read(got, l, h, blk, kv); err != nil {
								t.Fatal(err)
							}
							if err := cold.Read(want, l, h, blk, kv); err != nil {
								t.Fatal(err)
							}
							for i := 0; i < bs*d && blk*bs+i/d < len(prompt); i++ {
								if got[i] != want[i] {
									t.Fatalf("layer %d block %d head %d kv %d [%d] = %v, cold %v", l, blk, h, kv, i, got[i], want[i])
								}
							}
						}
					}
				}
			}
			if gs, ws := b.Stats(), cold.Stats(); gs.Bytes() != ws.Bytes() || gs.Compressed != ws.Compressed || gs.CompressedBF16 != ws.CompressedBF16 {
				t.Errorf("stats %+v, cold %+v", gs, ws)
			}
			if len(tc.policy.Layers) > 0 && b.Stats().Compressed == 0 {
				t.Error("no block encoded: the test checks nothing encoded")
			}
			if s := p.Stats(); s.Queries != 1 || s.Hits != 1 || s.HitTokens != int64(tc.reused) || s.QueryTokens != int64(len(prompt)) {
				t.Errorf("prefix stats %d queries (%d tokens) %d hits (%d tokens), want 1 (%d) 1 (%d)", s.Queries, s.QueryTokens, s.Hits, s.HitTokens, len(prompt), tc.reused)
			}
			a.Reset()
			b.Reset()
			before := p.Stats()
			if s := before; s.Referenced != 0 || s.Cached == 0 || s.CachedBytes != s.Used || s.Peak < s.Used {
				t.Errorf("after Reset: %d referenced %d cached blocks of %d bytes, %d used, peak %d; want 0, some, all used, peak >= used",
					s.Referenced, s.Cached, s.CachedBytes, s.Used, s.Peak)
			}
			p.Evict()
			if s := p.Stats(); s.Used != 0 || len(s.ByFormat) != 0 || s.Cached != 0 || s.CachedBytes != 0 || s.Peak != before.Peak {
				t.Errorf("after Evict: %s, cached bytes %d, peak %d; want empty, peak kept", s, s.CachedBytes, s.Peak)
			}
		})
	}
}

// The pool evicts cached blocks least recently used first, and fails an
// allocation it cannot make room for with a PoolFullError.
func TestPoolEvictionAndFull(t *testing.T) {
	const bs, d = 4, 2
	const block = 2 * bs * d * 4 // K and V parts of one layer and head, f32
	p, err := NewPool(PoolConfig{Store: backend.NewBlockStore(bs, d, false), BlockSize: bs, HeadDim: d, Budget: 3 * block})
	if err != nil {
		t.Fatal(err)
	}
	newc := func() *Cache { return newPooled(t, p, 1, 1, d, bs, 64, Policy{}) }
	a, b := seq(5, 1), seq(5, 2)
	for _, s := range [][]int{a, b} {
		c := newc()
		if err := appendTokens(c, s[:bs], 0); err != nil {
			t.Fatal(err)
		}
		c.Reset()
	}
	if s := p.Stats(); s.Cached != 2 || s.Used != 2*block {
		t.Fatalf("%s, want 2 cached blocks of %d bytes", s, block)
	}
	// Two new blocks need one cached block's room: a's, the older, goes.
	c := newc()
	if err := appendTokens(c, seq(8, 3), 0); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Evictions != 1 || s.Used != 3*block {
		t.Fatalf("%s, want 1 eviction and %d bytes", s, 3*block)
	}
	for _, tc := range []struct {
		prompt []int
		want   int
	}{{a, 0}, {b, bs}} {
		x := newc()
		if r, err := x.AttachPrefix(tc.prompt); err != nil || r != tc.want {
			t.Fatalf("AttachPrefix = %d, %v, want %d", r, err, tc.want)
		}
		defer x.Reset()
	}
	// c's two blocks and b's, which x attached: each counted once.
	if s := p.Stats(); s.Referenced != 3 || s.Cached != 0 {
		t.Fatalf("%s, want 3 referenced blocks and none cached", s)
	}
	// Every block is referenced now: the next one cannot fit.
	err = appendTokens(c, seq(4, 4), 8)
	var full *PoolFullError
	if !errors.Is(err, ErrPoolFull) || !errors.As(err, &full) || full.Need != bs*d*4 || full.Free != 0 || full.Budget != 3*block {
		t.Fatalf("append past the budget: %v, want a PoolFullError needing %d bytes of 0 free", err, bs*d*4)
	}
	if !strings.Contains(err.Error(), "need 32 bytes, 0 free") {
		t.Errorf("error %q does not say needed and free bytes", err)
	}
	c.Reset()
}

// Many sequences on one pool, from several goroutines, in a random
// schedule of attaches, appends, resets and evictions: the pool never
// holds more than its budget, and holds nothing once every sequence is
// reset and the cache evicted.
func TestPoolRandomSchedule(t *testing.T) {
	const layers, kvh, d, bs = 2, 2, 8, 4
	int8c := mustCodec(t, "int8")
	policies := map[string]Policy{
		"f32":  {},
		"bf16": {HotBF16: true},
		"int8": {HotWindow: 4, Sinks: 2, Layers: []LayerCodecs{{K: []codec.Codec{int8c}, V: int8c}}},
	}
	seeds := 20
	if testing.Short() {
		seeds = 4
	}
	for name, policy := range policies {
		for seed := 0; seed < seeds; seed++ {
			t.Run(fmt.Sprintf("%s seed %d", name, seed), func(t *testing.T) {
				part := int64(bs * d * 4)
				if policy.HotBF16 {
					part /= 2
				}
				budget := 40 * part
				p, err := NewPool(PoolConfig{Store: backend.NewBlockStore(bs, d, policy.HotBF16), BlockSize: bs, HeadDim: d, HotBF16: policy.HotBF16, Budget: budget})
				if err != nil {
					t.Fatal(err)
				}
				prompts := [][]int{seq(24, 1), seq(24, 2)}
				check := func() error {
					if s := p.Stats(); s.Used > s.Budget || s.Used < 0 {
						return fmt.Errorf("pool holds %d bytes of a budget of %d", s.Used, s.Budget)
					}
					return nil
				}
				var wg sync.WaitGroup
				errs := make(chan error, 3)
				for g := 0; g < 3; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(seed), uint64(g)))
						c, err := New(Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: 48, Policy: policy, Pool: p})
						if err != nil {
							errs <- err
							return
						}
						defer c.Reset()
						var toks []int
						for op := 0; op < 60; op++ {
							switch k := r.IntN(10); {
							case k == 0:
								c.Reset()
								toks = nil
							case k == 1:
								p.Evict()
							case k < 4 && c.Len() == 0:
								pr := prompts[r.IntN(len(prompts))]
								toks = append(append(toks[:0], pr[:r.IntN(len(pr))]...), 900+r.IntN(5))
								n, err := c.AttachPrefix(toks)
								if err != nil {
									errs <- err
									return
								}
								toks = toks[:n]
							default:
								n := 1 + r.IntN(6)
								if c.Len()+n > 48 {
									c.Reset()
									toks = nil
									continue
								}
								next := make([]int, n)
								for i := range next {
									if pr := prompts[g%2]; c.Len()+i < len(pr) {
										next[i] = pr[c.Len()+i]
									} else {
										next[i] = r.IntN(50)
									}
								}
								if err := appendTokens(c, next, c.Len()); err != nil {
									if !errors.Is(err, ErrPoolFull) {
										errs <- err
										return
									}
									c.Reset()
									toks = nil
									continue
								}
								toks = append(toks, next...)
							}
							if err := check(); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				p.Evict()
				if s := p.Stats(); s.Used != 0 || len(s.ByFormat) != 0 || s.Referenced != 0 || s.Cached != 0 {
					t.Fatalf("after every sequence reset and Evict: %s, want empty", s)
				}
			})
		}
	}
}

// BytesFor says what a cache holds after appending n tokens, for several
// policies, with and without a pool.
func TestBytesFor(t *testing.T) {
	const layers, kvh, d, bs = 3, 2, 16, 4
	int8c := mustCodec(t, "int8")
	int4c := mustCodec(t, "int4")
	for _, tc := range []struct {
		name   string
		policy Policy
	}{
		{"f32", Policy{}},
		{"bf16", Policy{HotBF16: true}},
		{"int8 window6 sinks3", Policy{HotWindow: 6, Sinks: 3, Layers: []LayerCodecs{{}, {K: []codec.Codec{int8c}, V: int8c}}}},
		{"bf16 int4 K int8 V", Policy{HotBF16: true, HotWindow: 4, Layers: []LayerCodecs{{K: []codec.Codec{int4c}, V: int8c}, {K: []codec.Codec{int4c, nil}, V: int8c}}}},
		{"raw", Policy{Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}}, V: rawCodec{}}}}},
	} {
		for _, pooled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s pooled %t", tc.name, pooled), func(t *testing.T) {
				cfg := Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: 64, Policy: tc.policy}
				var p *Pool
				if pooled {
					var err error
					p, err = NewPool(PoolConfig{Store: backend.NewBlockStore(bs, d, tc.policy.HotBF16), BlockSize: bs, HeadDim: d, HotBF16: tc.policy.HotBF16, Budget: 1 << 20})
					if err != nil {
						t.Fatal(err)
					}
					cfg.Pool = p
				} else {
					cfg.Store = backend.NewBlockStore(bs, d, tc.policy.HotBF16)
				}
				c, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				toks := seq(41, 5)
				done := 0
				for _, n := range []int{0, 1, 5, 17, 30, 41} {
					if err := appendTokens(c, toks[done:n], done); err != nil {
						t.Fatal(err)
					}
					done = n
					est, err := cfg.BytesFor(n)
					if err != nil {
						t.Fatal(err)
					}
					if got := c.Stats().Bytes(); est != got {
						t.Errorf("%d tokens: BytesFor = %d, the cache holds %d", n, est, got)
					}
					if p != nil {
						if used := p.Stats().Used; used != est {
							t.Errorf("%d tokens: BytesFor = %d, the pool holds %d", n, est, used)
						}
					}
				}
			})
		}
	}
}

// Sizer.Variable tells the codecs whose blocks vary in size with the data
// (kakeya's outlier lists) from the fixed-size ones.
func TestSizerVariable(t *testing.T) {
	const d, bs = 64, 64
	for _, tc := range []struct {
		codec string
		want  bool
	}{{"int8", false}, {"int4", false}, {"kakeya-block", true}} {
		cd := mustCodec(t, tc.codec)
		cfg := Config{Layers: 1, KVHeads: 1, HeadDim: d, BlockSize: bs, MaxTokens: 256,
			Policy: Policy{HotBF16: true, Layers: []LayerCodecs{{K: []codec.Codec{cd}, V: cd}}}, Store: backend.NewBlockStore(bs, d, true)}
		z, err := cfg.Sizer()
		if err != nil {
			t.Fatal(err)
		}
		if z.Variable() != tc.want {
			t.Errorf("%s: Variable() = %v, want %v", tc.codec, z.Variable(), tc.want)
		}
	}
}
