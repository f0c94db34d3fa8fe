package kvcache

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
)

// Sliding-window layers (Gemma 2 and 3's local layers, Mistral's every
// layer): a query at position q sees keys q-w+1..q, so once a layer holds
// n tokens and is about to take more, no query from position n on sees a
// block that ends before n-w+1. Append releases such blocks first (their
// table entries become nil; attention never reads them, see
// compute.AttentionParams.Window), so a sliding layer holds at most the
// blocks of its window plus one Append's tokens (SlideChunk). Meanwhile
// its blocks are encoded as the policy says, like a full layer's: a
// released part gives back what it holds, hot or encoded (layer.encBytes
// keeps each encoded part's size). Which layers get codecs is the
// policy's choice (kvplan: Gemma's sliding layers stay hot beside its
// full layers, Mistral's, all sliding, go through the codec).
//
// With a pool, a sliding layer's parts of a block the caches share are
// released from the pool's block once every cache that references it has
// slid past it (a cache that leaves counts as past); a block so thinned
// stays registered, and AttachPrefix attaches a run only where every
// sliding layer still holds the blocks the run's next query sees.

// validateWindows checks Config.Windows and SlideChunk.
func (c *Config) validateWindows() error {
	if len(c.Windows) > c.Layers {
		return fmt.Errorf("kvcache: windows for %d layers, the model has %d", len(c.Windows), c.Layers)
	}
	for l, w := range c.Windows {
		if w < 0 {
			return fmt.Errorf("kvcache: layer %d window %d, want >= 0", l, w)
		}
	}
	if c.SlideChunk < 0 {
		return fmt.Errorf("kvcache: SlideChunk = %d, want >= 0", c.SlideChunk)
	}
	return nil
}

// outOfWindow returns how many leading blocks of bs tokens no query at
// position n or later sees through a window of w.
func outOfWindow(n, w, bs int) int {
	if w <= 0 || n+1-w <= 0 {
		return 0
	}
	return (n + 1 - w) / bs
}

// slide releases the blocks of sliding layer li that no query from its
// length on sees.
func (c *Cache) slide(li int) {
	l := &c.layers[li]
	end := min(outOfWindow(l.n, l.window, c.cfg.BlockSize), len(l.blocks))
	for ; l.nextOut < end; l.nextOut++ {
		b := l.nextOut
		shared := b < len(c.share.blocks) && c.share.blocks[b] != nil
		if shared {
			// Shared through the pool: thinned there once every
			// cache referencing it passed it, else kept for the others.
			c.cfg.Pool.passLayer(c, c.share.blocks[b], li)
		}
		for j, pt := range l.blocks[b] {
			if pt == nil {
				continue // released before it was attached
			}
			if !shared {
				c.store.Release(pt)
			}
			c.uncount(l, b, j)
		}
		clear(l.blocks[b])
	}
}

// uncount takes part j of block b (head*2 + 0 K | 1 V), released, out of
// sliding layer l's stats: its encoded bytes where it was counted
// encoded (l.encBytes), else a hot part's.
func (c *Cache) uncount(l *layer, b, j int) {
	var enc int64
	if i := b*2*c.cfg.KVHeads + j; i < len(l.encBytes) {
		enc, l.encBytes[i] = l.encBytes[i], 0
	}
	k, v := &l.st.KHot, &l.st.VHot
	n := c.hotBytes()
	if enc > 0 {
		k, v, n = &l.st.KCompressed, &l.st.VCompressed, enc
		l.st.CompressedBF16 -= c.bf16Part()
	}
	if j%2 == 0 {
		*k -= n
	} else {
		*v -= n
	}
}

// passLayer records that cache c slid past layer li of b, and releases
// that layer's parts when every cache referencing b has.
func (p *Pool) passLayer(c *Cache, b *poolBlock, li int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.slidPast(b, li)
	if b.passed == nil {
		b.passed = make([]int, len(b.parts))
	}
	b.passed[li]++
	p.dropPassed(b, li)
}

// dropPassed releases layer li's parts of referenced block b when every
// reference has slid past them; p.mu is held.
func (p *Pool) dropPassed(b *poolBlock, li int) {
	if b.passed == nil || b.refs == 0 || b.passed[li] < b.refs {
		return
	}
	for i, pt := range b.parts[li] {
		if pt != nil {
			n := p.parts[pt].bytes
			b.bytes -= n
			p.shared -= n
			p.release(pt)
		}
		b.parts[li][i] = nil
	}
}

// unpass takes back the passes cache c, about to leave, made over the
// sliding layers of the blocks it references.
func (c *Cache) unpass() {
	p := c.cfg.Pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for bi, b := range c.share.blocks {
		if b == nil || b.passed == nil {
			continue
		}
		for li := range c.layers {
			if c.layers[li].window > 0 && c.layers[li].nextOut > bi {
				b.passed[li]--
			}
		}
	}
}

// attachable returns how many of the first k blocks a cache may attach:
// the most whose next query (at position k*bs) finds in every sliding
// layer the blocks it sees, blocks a sharer may have released.
func (c *Cache) attachable(blocks []*poolBlock) int {
	bs := c.cfg.BlockSize
	for k := len(blocks); k > 0; k-- {
		ok := true
		for li := range c.layers {
			w := c.layers[li].window
			for b := outOfWindow(k*bs, w, bs); ok && w > 0 && b < k; b++ {
				ok = !hasNil(blocks[b].parts[li])
			}
		}
		if ok {
			return k
		}
	}
	return 0
}

func hasNil(parts []compute.Part) bool {
	for _, pt := range parts {
		if pt == nil {
			return true
		}
	}
	return false
}

// SlidingHeld returns how many blocks of bs tokens a sliding layer of
// window w holds after n tokens appended at most chunk at a time
// (SlidingBlocks), and how many of them have left the hot window of p
// (and hold no sink): those its codecs, where it has them, encoded.
func SlidingHeld(n, w, bs, chunk int, p Policy) (held, old int) {
	held = SlidingBlocks(n, w, bs, chunk)
	first := (n+bs-1)/bs - held // the first block held
	sinkBlocks := (p.Sinks + bs - 1) / bs
	end := sinkBlocks + p.EncodedBlocks(n, bs) // past the last encoded
	return held, max(0, end-max(first, sinkBlocks))
}

// SlidingBlocks returns how many blocks of bs tokens a sliding layer of
// window w holds after n tokens appended at most chunk at a time: those
// from the first that the last Append's first query (at n-chunk or later)
// still sees (after decoding, chunk 1).
func SlidingBlocks(n, w, bs, chunk int) int {
	all := (n + bs - 1) / bs
	return all - min(all, outOfWindow(max(0, n-chunk), w, bs))
}
