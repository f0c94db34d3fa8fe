package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// newLedger returns a pool of budget bytes and its ledger for cfg (whose
// Pool it sets).
func newLedger(t testing.TB, cfg Config, budget int64) (*Pool, *Ledger, Config) {
	t.Helper()
	p, err := NewPool(PoolConfig{Store: backend.NewBlockStore(cfg.BlockSize, cfg.HeadDim, cfg.Policy.HotBF16),
		BlockSize: cfg.BlockSize, HeadDim: cfg.HeadDim, HotBF16: cfg.Policy.HotBF16, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool = p
	l, err := NewLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, l, cfg
}

// checkCommitted fails when the pool's bytes break the ledger's rules: the
// committed bytes within the budget, and the bytes the caches reference
// (all but the unreferenced cached blocks) within the committed ones.
func checkCommitted(t testing.TB, p *Pool, when string) {
	t.Helper()
	st := p.Stats()
	committed := st.Reserved + st.Shared
	if committed > st.Budget || st.Used > st.Budget || st.Used-st.CachedBytes > committed || st.Reserved < 0 || st.Shared < 0 {
		t.Errorf("%s: used %d (cached %d), reserved %d + shared %d, budget %d", when, st.Used, st.CachedBytes, st.Reserved, st.Shared, st.Budget)
	}
}

// The ledger's reservations: as many sequences of n tokens as Cost(n)
// divides into the budget are reserved, the next is refused with
// ErrPoolFull, every reserved one then appends its n tokens (in steps of
// the configured chunk) without the pool filling, and a released
// reservation admits the next. Cost follows the hand count of plain
// caches, int8 admits more sequences than bf16 and bf16 more than f32
// under one budget, and a sliding layer's cost stops growing at its window.
func TestLedgerReserve(t *testing.T) {
	const layers, kvh, d, bs, n, maxTok = 4, 2, 32, 8, 120, 256
	int8c, int4c := mustCodec(t, "int8"), mustCodec(t, "int4")
	both := func(k, v codec.Codec) []LayerCodecs {
		// Boundary layers (the first and last) stay hot, as kvplan plans.
		return []LayerCodecs{{}, {K: []codec.Codec{k}, V: v}, {K: []codec.Codec{k}, V: v}}
	}
	all := func(c codec.Codec) []LayerCodecs {
		lc := LayerCodecs{K: []codec.Codec{c}, V: c}
		return []LayerCodecs{lc, lc, lc, lc}
	}
	blocks := int64((n + bs - 1) / bs)
	hand := func(bytes int64) int64 { return layers * kvh * 2 * blocks * bs * d * bytes }
	const budget = 1 << 20
	for _, tc := range []struct {
		name    string
		policy  Policy
		windows []int
		chunk   int
		cost    int64 // Cost(n) by hand where it is simple, 0 otherwise
		admits  int   // sequences of n tokens the budget holds
	}{
		{name: "f32", cost: hand(4), admits: int(budget / hand(4))},
		{name: "bf16", policy: Policy{HotBF16: true}, cost: hand(2), admits: int(budget / hand(2))},
		{name: "int8", policy: Policy{HotBF16: true, HotWindow: 16, Sinks: 4, Layers: both(int8c, int8c)}, chunk: 32},
		{name: "int4 K int8 V", policy: Policy{HotBF16: true, HotWindow: 16, Layers: both(int4c, int8c)}, chunk: 32},
		{name: "sliding", policy: Policy{HotBF16: true}, windows: []int{16, 0, 16, 0}, chunk: 8},
		// Every layer slides and codes (Mistral's cache).
		{name: "sliding int8", policy: Policy{HotBF16: true, HotWindow: 8, Layers: all(int8c)}, windows: []int{24, 24, 24, 24}, chunk: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, l, cfg := newLedger(t, Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: maxTok,
				Policy: tc.policy, Windows: tc.windows, SlideChunk: tc.chunk}, budget)
			if tc.cost != 0 && l.Cost(n) != tc.cost {
				t.Errorf("Cost(%d) = %d, want %d", n, l.Cost(n), tc.cost)
			}
			want := tc.admits
			if want == 0 {
				want = int(budget / l.Cost(n))
			}
			var caches []*Cache
			for {
				c, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				fits := l.Admits(seq(n, len(caches)+100), n)
				err = l.Reserve(c, n)
				if fits != (err == nil) {
					t.Fatalf("sequence %d: Admits = %v, Reserve = %v", len(caches), fits, err)
				}
				if err != nil {
					if !errors.Is(err, ErrPoolFull) {
						t.Fatalf("Reserve past the budget = %v, want ErrPoolFull", err)
					}
					break
				}
				caches = append(caches, c)
			}
			if len(caches) != want {
				t.Errorf("the budget admits %d sequences of %d tokens (Cost %d), want %d", len(caches), n, l.Cost(n), want)
			}
			t.Logf("Cost(%d) = %d, %d sequences", n, l.Cost(n), len(caches))
			step := max(tc.chunk, 1)
			for i, c := range caches {
				toks := seq(n, i+100) // distinct prompts: nothing shared
				for at := 0; at < n; at += step {
					if err := appendTokens(c, toks[at:min(n, at+step)], at); err != nil {
						t.Fatalf("sequence %d at %d tokens: %v", i, at, err)
					}
					checkCommitted(t, p, fmt.Sprintf("sequence %d at %d tokens", i, at))
				}
			}
			// The first one's reservation goes back with Reset and admits
			// a new sequence.
			caches[0].Reset()
			c, _ := New(cfg)
			if err := l.Reserve(c, n); err != nil {
				t.Errorf("Reserve after a Reset: %v", err)
			}
			if got := c.Reserved(); got != l.Cost(n) {
				t.Errorf("Reserved = %d, want Cost %d", got, l.Cost(n))
			}
			l.Release(c)
			for _, c := range caches {
				c.Reset()
			}
			if st := p.Stats(); st.Reserved != 0 || st.Shared != 0 {
				t.Errorf("after every Reset: reserved %d, shared %d", st.Reserved, st.Shared)
			}
		})
	}
	// Under one budget a compressed cache admits more sequences than a
	// bf16 one, which admits more than f32.
	admits := func(pol Policy) int64 {
		_, l, _ := newLedger(t, Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: maxTok, Policy: pol, SlideChunk: 32}, budget)
		return budget / l.Cost(n)
	}
	f32, bf16, i8 := admits(Policy{}), admits(Policy{HotBF16: true}), admits(Policy{HotBF16: true, HotWindow: 16, Layers: both(int8c, int8c)})
	if !(i8 > bf16 && bf16 > f32) {
		t.Errorf("sequences of %d tokens in %d bytes: int8 %d, bf16 %d, f32 %d; want int8 > bf16 > f32", n, budget, i8, bf16, f32)
	}
	// A sliding layer holds its window: the cost of an all-sliding cache
	// stops growing, and where its blocks are encoded it is smaller. By
	// hand: 4 blocks of 8 tokens hold a window of 16 and a chunk of 8;
	// with int8 2 of them (past the hot window) take a 16-byte header and
	// 34 bytes per 32 values, and one layer's block is still hot while
	// its Append encodes it.
	for _, tc := range []struct {
		pol  Policy
		cost int64
	}{
		{Policy{HotBF16: true}, layers * kvh * 2 * 4 * bs * d * 2},
		{Policy{HotBF16: true, HotWindow: 8, Layers: all(int8c)}, layers*kvh*2*(2*bs*d*2+2*(16+bs*d/32*34)) + kvh*2*(bs*d*2-(16+bs*d/32*34))},
	} {
		_, sl, _ := newLedger(t, Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: maxTok, Policy: tc.pol, Windows: []int{16, 16, 16, 16}, SlideChunk: 8}, budget)
		if sl.Cost(maxTok) != tc.cost || sl.Cost(maxTok) != sl.Cost(64) || sl.MaxTokens() != maxTok {
			t.Errorf("all-sliding cache %+v: Cost(%d) = %d, Cost(64) = %d, MaxTokens %d; want both %d and %d", tc.pol, maxTok, sl.Cost(maxTok), sl.Cost(64), sl.MaxTokens(), tc.cost, maxTok)
		}
	}
}

// Prefix blocks are counted once: a sequence that attaches the blocks a
// running one registered commits its cost less their estimate, the shared
// bytes unchanged; they stay committed while either references them, and
// Admits lets it in under a budget that two unshared sequences exceed.
func TestLedgerPrefixCountedOnce(t *testing.T) {
	const layers, kvh, d, bs, n = 3, 2, 32, 8, 96
	int8c := mustCodec(t, "int8")
	for _, tc := range []struct {
		name   string
		policy Policy
	}{
		{"bf16", Policy{HotBF16: true}},
		{"int8", Policy{HotBF16: true, HotWindow: 16, Sinks: 4, Layers: []LayerCodecs{{}, {K: []codec.Codec{int8c}, V: int8c}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: n, Policy: tc.policy}
			_, pl, _ := newLedger(t, probe, 1<<30)
			cost := pl.Cost(n)
			// Room for one sequence and a half: two unshared do not fit.
			p, l, cfg := newLedger(t, probe, cost+cost/2)
			prompt := seq(80, 3)
			a, _ := New(cfg)
			if err := l.Reserve(a, n); err != nil {
				t.Fatal(err)
			}
			if err := appendTokens(a, prompt, 0); err != nil {
				t.Fatal(err)
			}
			before := p.Stats()
			if before.Shared == 0 {
				t.Fatal("the first sequence registered no block")
			}
			if l.Admits(seq(80, 4), n) {
				t.Error("Admits a second unshared sequence in a budget of one and a half")
			}
			if !l.Admits(prompt, n) {
				t.Fatal("Admits refuses a sequence whose prefix is shared")
			}
			b, _ := New(cfg)
			reused, err := b.AttachPrefix(prompt)
			if err != nil || reused == 0 {
				t.Fatalf("AttachPrefix = %d, %v", reused, err)
			}
			if err := l.Reserve(b, n); err != nil {
				t.Fatalf("Reserve after attaching %d tokens: %v", reused, err)
			}
			after := p.Stats()
			if after.Shared != before.Shared {
				t.Errorf("attaching referenced blocks changed the shared bytes: %d, then %d", before.Shared, after.Shared)
			}
			var est int64
			for blk := range reused / bs {
				est += l.blockEstimate(blk)
			}
			if got := b.Reserved(); got != cost-est {
				t.Errorf("the sharer's reservation = %d, want Cost %d less the attached blocks' %d", got, cost, est)
			}
			if err := appendTokens(b, prompt[reused:], reused); err != nil {
				t.Fatal(err)
			}
			checkCommitted(t, p, "two sharers")
			a.Reset()
			if st := p.Stats(); st.Shared == 0 || st.Reserved != b.Reserved() {
				t.Errorf("after the writer left: shared %d, reserved %d (the sharer's %d)", st.Shared, st.Reserved, b.Reserved())
			}
			checkCommitted(t, p, "the sharer alone")
			b.Reset()
			if st := p.Stats(); st.Shared != 0 || st.Reserved != 0 || st.CachedBytes == 0 {
				t.Errorf("after both left: shared %d, reserved %d, cached %d", st.Shared, st.Reserved, st.CachedBytes)
			}
		})
	}
}

// Over-commit at the cache level: sequences of random lengths and shared
// prefixes come and go, each reserving before it grows and giving way
// (Reset, a preemption) when the ledger refuses; no Append ever finds
// the pool full, and the ledger's rules hold after every step.
func TestLedgerNoOvercommit(t *testing.T) {
	const layers, kvh, d, bs, maxTok, chunk = 3, 2, 16, 4, 128, 16
	int8c := mustCodec(t, "int8")
	for _, pol := range []Policy{
		{HotBF16: true},
		{HotWindow: 8, Sinks: 2, Layers: []LayerCodecs{{}, {K: []codec.Codec{int8c}, V: int8c}}},
		// The sliding layer codes too.
		{HotWindow: 8, Sinks: 2, Layers: []LayerCodecs{{}, {K: []codec.Codec{int8c}, V: int8c}, {K: []codec.Codec{int8c}, V: int8c}}},
	} {
		probe := Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: maxTok, Policy: pol, SlideChunk: chunk, Windows: []int{0, 0, 12}}
		_, pl, _ := newLedger(t, probe, 1<<30)
		p, l, cfg := newLedger(t, probe, 3*pl.Cost(maxTok))
		r := rand.New(rand.NewPCG(5, 6))
		base := seq(maxTok, 9)
		type live struct {
			c      *Cache
			toks   []int
			target int
		}
		var run []*live
		preempted := 0
		for range 400 {
			if len(run) < 6 && r.IntN(2) == 0 {
				toks := seq(1+r.IntN(maxTok-1), r.IntN(1000))
				if r.IntN(2) == 0 {
					k := r.IntN(len(toks))
					toks = append(append([]int(nil), base[:k]...), toks[k:]...)
				}
				c, _ := New(cfg)
				if l.Admits(toks, min(len(toks), 24)) {
					if _, err := c.AttachPrefix(toks); err != nil {
						t.Fatal(err)
					}
					if l.Reserve(c, min(len(toks), 24)) == nil {
						run = append(run, &live{c: c, toks: toks, target: len(toks)})
					} else {
						c.Reset()
					}
				}
			}
			for i := 0; i < len(run); i++ {
				s := run[i]
				at := s.c.Len()
				m := min(chunk, s.target-at)
				if m == 0 {
					s.c.Reset()
					run = append(run[:i], run[i+1:]...)
					i--
					continue
				}
				for l.Reserve(s.c, at+m) != nil {
					v := run[len(run)-1] // the newest gives way
					v.c.Reset()
					run = run[:len(run)-1]
					preempted++
					if v == s {
						break
					}
				}
				if i >= len(run) || run[i] != s {
					break
				}
				if err := appendTokens(s.c, s.toks[at:at+m], at); err != nil {
					t.Fatalf("append of %d tokens at %d within the reservation: %v", m, at, err)
				}
				checkCommitted(t, p, fmt.Sprintf("after %d tokens", at+m))
			}
		}
		for _, s := range run {
			s.c.Reset()
		}
		st := p.Stats()
		if st.Reserved != 0 || st.Shared != 0 || st.Hits == 0 || preempted == 0 {
			t.Errorf("policy %+v: reserved %d, shared %d, prefix hits %d, preemptions %d at the end", pol, st.Reserved, st.Shared, st.Hits, preempted)
		}
	}
}

// A codec whose blocks the store keeps hot-decoded (the CUDA store's, for
// codecs its kernels cannot read) counts hot in BytesFor, and so in the
// ledger's Cost, as the cache counts such a block: admission does not
// promise the codec's bytes where the store holds hot ones.
func TestSizerHotDecoded(t *testing.T) {
	const bs, d, n = 4, 8, 30
	for _, tc := range []struct {
		name  string
		store compute.BlockStore
	}{
		{"cpu", backend.NewBlockStore(bs, d, true)},
		{"hot decoded", &decodedStore{BlockStore: backend.NewBlockStore(bs, d, true), n: bs, d: d}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Layers: 1, KVHeads: 1, HeadDim: d, BlockSize: bs, MaxTokens: 32,
				Policy: Policy{HotBF16: true, HotWindow: 4, Layers: []LayerCodecs{{K: []codec.Codec{mustCodec(t, "int8")}, V: mustCodec(t, "int8")}}},
				Store:  tc.store}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := appendTokens(c, seq(n, 1), 0); err != nil {
				t.Fatal(err)
			}
			est, err := cfg.BytesFor(n)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Stats().Bytes(); est != got {
				t.Errorf("BytesFor(%d) = %d, the cache holds %d", n, est, got)
			}
		})
	}
}
