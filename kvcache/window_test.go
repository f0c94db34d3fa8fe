package kvcache

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// A sliding layer releases to its store the blocks its window no longer
// sees, before it appends (so no query of the append loses a key), holds
// what SlidingBlocks and BytesFor say, and leaves a full layer alone;
// Reset returns the rest.
func TestSlidingRelease(t *testing.T) {
	st := &budgetStore{BlockStore: backend.NewBlockStore(4, 2, false), left: 1 << 20}
	cfg := Config{Layers: 2, KVHeads: 1, HeadDim: 2, BlockSize: 4, MaxTokens: 64, Store: st, Windows: []int{6, 0}, SlideChunk: 3}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	x := compute.Wrap(make([]float32, 3*2))
	for n := 0; n < 30; n += 3 {
		for li := range 2 {
			if err := c.Append(li, x, x, 3); err != nil {
				t.Fatal(err)
			}
		}
		total := n + 3
		// Before this append (at n) blocks ending before n-6+1 went.
		gone := outOfWindow(n, 6, 4)
		for b := range c.NumBlocks(0) {
			if (c.layers[0].blocks[b][0] == nil) != (b < gone) {
				t.Fatalf("after %d tokens block %d released %t, want %t", total, b, c.layers[0].blocks[b][0] == nil, b < gone)
			}
		}
		s := c.Stats()
		if got, want := s.Layers[0].Bytes(), int64(SlidingBlocks(total, 6, 4, 3)*2*4*2*4); got != want {
			t.Errorf("after %d tokens the sliding layer holds %d bytes, want %d", total, got, want)
		}
		if got, want := s.Layers[1].Bytes(), int64((total+3)/4*2*4*2*4); got != want {
			t.Errorf("after %d tokens the full layer holds %d bytes, want %d", total, got, want)
		}
		if want, err := cfg.BytesFor(total); err != nil || s.Bytes() != want {
			t.Errorf("after %d tokens: %d bytes, BytesFor %d (%v)", total, s.Bytes(), want, err)
		}
	}
	if err := c.Read(make([]float32, 8), 0, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "released") || c.Encoded(0, 0, 0, 1) {
		t.Errorf("reading a released block: %v", err)
	}
	if err := c.Append(0, compute.Wrap(make([]float32, 8)), compute.Wrap(make([]float32, 8)), 4); err == nil || !strings.Contains(err.Error(), "exceeds the configured chunk of 3") {
		t.Errorf("an append past SlideChunk: %v", err)
	}
	c.Reset()
	if st.live != 0 {
		t.Errorf("after Reset %d parts live", st.live)
	}
}

// Windows that cannot be are refused.
func TestWindowsValidate(t *testing.T) {
	st := backend.NewBlockStore(4, 2, false)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Windows: []int{1, 2, 3}}, "windows for 3 layers, the model has 2"},
		{Config{Windows: []int{0, -1}}, "layer 1 window -1"},
		{Config{SlideChunk: -1}, "SlideChunk = -1"},
	} {
		cfg := tc.cfg
		cfg.Layers, cfg.KVHeads, cfg.HeadDim, cfg.BlockSize, cfg.MaxTokens, cfg.Store = 2, 1, 2, 4, 16, st
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// A sliding layer whose blocks are encoded (Mistral's, every layer
// sliding) releases them as they slide out, hot or encoded: its stats
// give back each part's real bytes (the pool's count of the same parts,
// byte for byte, for a variable-size codec too), decoding holds the
// blocks BytesFor says (exactly, for fixed-size codecs), the ledger's
// rules hold at every step, a second cache that shares the prompt keeps
// its blocks until it passes them too, and every byte goes back.
func TestSlidingEncodedRelease(t *testing.T) {
	const layers, kvh, d, bs, prompt, n = 2, 2, 32, 4, 14, 60
	for _, tc := range []struct {
		name    string
		w       int
		encoded bool // whether the decoding cache holds encoded blocks
	}{
		{"", 12, false},
		{"int8", 12, true},
		{"kakeya-block", 12, true},
		// Layer 0's window shorter than the hot window: its blocks slide
		// out before they are encoded (registered once final, already
		// passed there).
		{"int8", 3, true},
	} {
		name, w := tc.name, tc.w
		t.Run(fmt.Sprintf("codec=%s,window=%d", name, w), func(t *testing.T) {
			pol := Policy{HotBF16: true}
			if name != "" {
				cd := mustCodec(t, name)
				lc := LayerCodecs{K: []codec.Codec{cd}, V: cd}
				pol = Policy{HotBF16: true, HotWindow: 4, Layers: []LayerCodecs{lc, lc}}
			}
			cfg := Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: 64, Policy: pol, Windows: []int{w, 12}, SlideChunk: prompt}
			p, l, cfg := newLedger(t, cfg, 1<<20)
			decoded := cfg // what BytesFor counts after decoding
			decoded.SlideChunk = 1
			z, err := decoded.Sizer()
			if err != nil {
				t.Fatal(err)
			}
			fixed := name != "kakeya-block" // its blocks' size varies
			toks := seq(n, 7)
			a, _ := New(cfg)
			b, _ := New(cfg)
			for _, c := range []*Cache{a, b} {
				if err := l.Reserve(c, prompt+1); err != nil {
					t.Fatal(err)
				}
			}
			if err := appendTokens(a, toks[:prompt], 0); err != nil {
				t.Fatal(err)
			}
			reused, err := b.AttachPrefix(toks[:prompt])
			if want := cfg.attachBlocks(toks[:prompt]) * bs; err != nil || reused != want || reused == 0 {
				t.Fatalf("AttachPrefix = %d, %v; want %d tokens", reused, err, want)
			}
			if err := appendTokens(b, toks[reused:prompt], reused); err != nil {
				t.Fatal(err)
			}
			// a decodes past its window; b stays at the prompt.
			encoded := false
			for at := prompt; at < n; at++ {
				if err := l.Reserve(a, at+1); err != nil {
					t.Fatalf("Reserve for %d tokens: %v", at+1, err)
				}
				if err := appendTokens(a, toks[at:at+1], at); err != nil {
					t.Fatal(err)
				}
				if fixed {
					// (kakeya's outlier lists outgrow its probe blocks
					// on blocks this small, past the ledger's margin.)
					checkCommitted(t, p, fmt.Sprintf("at %d tokens", at+1))
				}
				sa, sb := a.Stats(), b.Stats()
				// What the pool holds is the two caches' parts, those
				// they share (the prompt's first blocks) counted once.
				var shared int64
				for blk := range reused / bs {
					for li := range layers {
						for j := range 2 * kvh {
							if pt := a.layers[li].blocks[blk][j]; pt != nil && pt == b.layers[li].blocks[blk][j] {
								shared += p.info(pt).bytes
							}
						}
					}
				}
				if st := p.Stats(); st.Used-st.CachedBytes != sa.Bytes()+sb.Bytes()-shared {
					t.Fatalf("at %d tokens the pool holds %d bytes (%d cached), the caches %d + %d less %d shared", at+1, st.Used, st.CachedBytes, sa.Bytes(), sb.Bytes(), shared)
				}
				encoded = encoded || sa.Compressed > 0
				if at+1 >= prompt+w {
					if got := z.Bytes(at + 1); fixed && sa.Bytes() != got {
						t.Errorf("at %d tokens a holds %d bytes, BytesFor after decoding %d", at+1, sa.Bytes(), got)
					}
				}
			}
			if encoded != tc.encoded {
				t.Errorf("encoded blocks: %t", encoded)
			}
			// a's windows passed the shared blocks, b's did not (but
			// for those its prompt's window left): b still reads them,
			// and the pool keeps their parts.
			buf := make([]float32, bs*d)
			for blk := range reused / bs {
				if err := b.Read(buf, 0, 0, blk, 0); (err == nil) != (blk >= outOfWindow(reused, w, bs)) {
					t.Errorf("b reads its block %d: %v", blk, err)
				}
				if a.layers[0].blocks[blk][0] != nil {
					t.Errorf("a still holds block %d", blk)
				}
			}
			if err := l.Reserve(b, n); err != nil {
				t.Fatal(err)
			}
			for at := prompt; at < n; at++ {
				if err := appendTokens(b, toks[at:at+1], at); err != nil {
					t.Fatal(err)
				}
			}
			if fixed {
				checkCommitted(t, p, "b past its window")
			}
			// Both passed them: thinned, every part's bytes back, though
			// the blocks stay registered.
			for blk := range reused / bs {
				pb := b.share.blocks[blk]
				if pb == nil || p.blocks[pb.hash] != pb || pb.bytes != 0 {
					t.Fatalf("shared block %d after both passed it: %+v", blk, pb)
				}
				for li := range layers {
					if !hasNil(pb.parts[li]) {
						t.Errorf("shared block %d keeps layer %d's parts", blk, li)
					}
				}
			}
			if st := p.Stats(); st.Used != a.Stats().Bytes()+b.Stats().Bytes() {
				t.Errorf("after both passed the shared blocks the pool holds %d bytes, the caches %d and %d", st.Used, a.Stats().Bytes(), b.Stats().Bytes())
			}
			for _, c := range []*Cache{a, b} {
				c.Reset()
				for _, pb := range p.blocks {
					for li, n := range pb.passed {
						if n < 0 || n > pb.refs {
							t.Fatalf("a block referenced %d times counts %d passes of layer %d", pb.refs, n, li)
						}
					}
				}
			}
			p.Evict()
			if st := p.Stats(); st.Used != 0 || st.Reserved != 0 || st.Shared != 0 {
				t.Errorf("after Reset and Evict: %s, reserved %d, shared %d", st, st.Reserved, st.Shared)
			}
			if sa := a.Stats(); sa.Bytes() != 0 || sa.CompressedBF16 != 0 {
				t.Errorf("a after Reset: %+v", sa)
			}
		})
	}
}
