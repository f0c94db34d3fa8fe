package kvcache

import (
	"strings"
	"testing"

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
