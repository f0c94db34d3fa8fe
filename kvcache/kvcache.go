// Package kvcache is the paged key/value cache of one sequence: fixed-size
// token blocks per layer and KV head, keys stored before RoPE so a full block
// can be handed to a codec as it is, and exact byte accounting.
//
// Blocks start hot (float32, or bf16 when the policy asks). Once a full
// block is older than the policy's hot window (and holds no sink token), it
// is encoded through the layer's codecs and its hot storage returns to the
// cache's free list.
package kvcache

import (
	"errors"
	"fmt"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// Policy says how a cache compresses its blocks.
type Policy struct {
	// Layers holds the codecs of each layer; a layer beyond its length, or a
	// nil codec, keeps its blocks uncompressed.
	Layers []LayerCodecs
	// HotWindow is how many of the newest tokens always stay uncompressed.
	HotWindow int
	// Sinks is how many of the first tokens stay uncompressed (attention
	// sinks); a block holding any of them is never encoded.
	Sinks int
	// HotBF16 stores uncompressed blocks as bf16 (rounded to nearest even)
	// instead of float32: half the memory, the values a bf16 cache holds.
	HotBF16 bool
}

// LayerCodecs are the codecs of one layer. K may hold one codec per KV head
// (so each head can carry its own calibration) or a single codec for all.
type LayerCodecs struct {
	K []codec.Codec
	V codec.Codec
}

// KCodec returns the key codec of (layer, head), nil for none.
func (p *Policy) KCodec(layer, head int) codec.Codec {
	if layer >= len(p.Layers) {
		return nil
	}
	ks := p.Layers[layer].K
	switch {
	case len(ks) == 1:
		return ks[0]
	case head < len(ks):
		return ks[head]
	}
	return nil
}

// VCodec returns the value codec of layer, nil for none.
func (p *Policy) VCodec(layer int) codec.Codec {
	if layer >= len(p.Layers) {
		return nil
	}
	return p.Layers[layer].V
}

// Config sizes a cache.
type Config struct {
	Layers, KVHeads, HeadDim int
	// BlockSize is the number of tokens per block.
	BlockSize int
	// MaxTokens is the capacity in tokens.
	MaxTokens int
	Policy    Policy
}

func (c *Config) validate() error {
	switch {
	case c.Layers <= 0:
		return fmt.Errorf("kvcache: Layers = %d, want > 0", c.Layers)
	case c.KVHeads <= 0:
		return fmt.Errorf("kvcache: KVHeads = %d, want > 0", c.KVHeads)
	case c.HeadDim <= 0:
		return fmt.Errorf("kvcache: HeadDim = %d, want > 0", c.HeadDim)
	case c.BlockSize <= 0:
		return fmt.Errorf("kvcache: BlockSize = %d, want > 0", c.BlockSize)
	case c.MaxTokens <= 0:
		return fmt.Errorf("kvcache: MaxTokens = %d, want > 0", c.MaxTokens)
	case c.Policy.HotWindow < 0 || c.Policy.Sinks < 0:
		return fmt.Errorf("kvcache: HotWindow %d and Sinks %d must not be negative", c.Policy.HotWindow, c.Policy.Sinks)
	case len(c.Policy.Layers) > c.Layers:
		return fmt.Errorf("kvcache: policy names %d layers, the model has %d", len(c.Policy.Layers), c.Layers)
	}
	for l, lc := range c.Policy.Layers {
		if len(lc.K) > 1 && len(lc.K) != c.KVHeads {
			return fmt.Errorf("kvcache: layer %d has %d K codecs, want 1 or %d (one per KV head)", l, len(lc.K), c.KVHeads)
		}
	}
	return nil
}

// part is the storage of one (block, head, K|V): hot values (float32 or
// bf16, by the policy) or encoded bytes.
type part struct {
	hot   []float32 // BlockSize*HeadDim, nil once encoded or when bf16
	hot16 []uint16  // BlockSize*HeadDim bf16 values, nil once encoded or when float32
	enc   []byte
}

func (p *part) isHot() bool { return p.hot != nil || p.hot16 != nil }

type layer struct {
	n       int      // tokens stored
	blocks  [][]part // block table: [block][head*2 + (0 K | 1 V)]
	nextEnc int      // first block not yet considered for encoding
	st      LayerStats
}

// Cache holds the keys and values of one sequence for every layer. A Cache
// may be read from many goroutines at once (K, V, Len) but is written by one.
type Cache struct {
	cfg    Config
	layers []layer
	free   [][]float32 // float32 block buffers ready for reuse
	free16 [][]uint16  // bf16 block buffers ready for reuse
	widen  []float32   // a bf16 block widened for its codec
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Cache{cfg: cfg, layers: make([]layer, cfg.Layers)}, nil
}

// Config returns the cache's configuration.
func (c *Cache) Config() Config { return c.cfg }

// BlockSize returns the number of tokens per block.
func (c *Cache) BlockSize() int { return c.cfg.BlockSize }

// Len returns the number of tokens stored in layer 0, which is the
// sequence's length between forward passes.
func (c *Cache) Len() int { return c.layers[0].n }

// LayerLen returns the number of tokens stored in one layer.
func (c *Cache) LayerLen(layer int) int { return c.layers[layer].n }

// Reset empties the cache, keeping its float buffers for reuse.
func (c *Cache) Reset() {
	for i := range c.layers {
		l := &c.layers[i]
		for _, b := range l.blocks {
			for j := range b {
				c.release(&b[j])
				// Keep the encoded buffer's memory for the next use.
				b[j] = part{enc: b[j].enc[:0]}
			}
		}
		l.blocks = l.blocks[:0]
		l.n, l.nextEnc = 0, 0
		l.st = LayerStats{}
	}
}

// hold gives pt fresh hot storage of the policy's type.
func (c *Cache) hold(pt *part) {
	if c.cfg.Policy.HotBF16 {
		if n := len(c.free16); n > 0 {
			pt.hot16 = c.free16[n-1]
			c.free16 = c.free16[:n-1]
		} else {
			pt.hot16 = make([]uint16, c.cfg.BlockSize*c.cfg.HeadDim)
		}
		return
	}
	if n := len(c.free); n > 0 {
		pt.hot = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		pt.hot = make([]float32, c.cfg.BlockSize*c.cfg.HeadDim)
	}
}

// release returns pt's hot storage to the free lists.
func (c *Cache) release(pt *part) {
	if pt.hot != nil {
		c.free = append(c.free, pt.hot)
		pt.hot = nil
	}
	if pt.hot16 != nil {
		c.free16 = append(c.free16, pt.hot16)
		pt.hot16 = nil
	}
}

// hotBytes is the size of one hot part.
func (c *Cache) hotBytes() int64 {
	n := int64(c.cfg.BlockSize * c.cfg.HeadDim)
	if c.cfg.Policy.HotBF16 {
		return 2 * n
	}
	return 4 * n
}

// ErrFull is returned by Append when the cache has no room left.
var ErrFull = errors.New("kvcache: cache full")

// Append stores n tokens of one layer at positions LayerLen(layer)...: k and
// v hold n rows of KVHeads*HeadDim values, keys before RoPE. Full blocks that
// leave the hot window are encoded.
func (c *Cache) Append(layerIdx int, k, v []float32, n int) error {
	if layerIdx < 0 || layerIdx >= len(c.layers) {
		return fmt.Errorf("kvcache: layer %d out of range [0, %d)", layerIdx, len(c.layers))
	}
	kvh, d, bs := c.cfg.KVHeads, c.cfg.HeadDim, c.cfg.BlockSize
	row := kvh * d
	if len(k) < n*row || len(v) < n*row {
		return fmt.Errorf("kvcache: append of %d tokens needs %d values of K and V, got %d and %d", n, n*row, len(k), len(v))
	}
	l := &c.layers[layerIdx]
	if l.n+n > c.cfg.MaxTokens {
		return fmt.Errorf("%w: layer %d holds %d tokens, %d more exceed the capacity of %d", ErrFull, layerIdx, l.n, n, c.cfg.MaxTokens)
	}
	for i := 0; i < n; i++ {
		b, off := l.n/bs, (l.n%bs)*d
		if b == len(l.blocks) {
			// Reuse the part slices a Reset left in the block table.
			if b < cap(l.blocks) && l.blocks[:b+1][b] != nil {
				l.blocks = l.blocks[:b+1]
			} else {
				l.blocks = append(l.blocks, make([]part, 2*kvh))
			}
			for j := range l.blocks[b] {
				c.hold(&l.blocks[b][j])
			}
			l.st.KHot += int64(kvh) * c.hotBytes()
			l.st.VHot += int64(kvh) * c.hotBytes()
		}
		parts := l.blocks[b]
		for h := 0; h < kvh; h++ {
			kr, vr := k[i*row+h*d:i*row+(h+1)*d], v[i*row+h*d:i*row+(h+1)*d]
			if kp, vp := &parts[2*h], &parts[2*h+1]; kp.hot16 != nil {
				toBF16(kp.hot16[off:off+d], kr)
				toBF16(vp.hot16[off:off+d], vr)
			} else {
				copy(kp.hot[off:off+d], kr)
				copy(vp.hot[off:off+d], vr)
			}
		}
		l.n++
	}
	l.st.Tokens = l.n
	return c.encodeOld(layerIdx)
}

// encodeOld encodes the full blocks of a layer that left the hot window.
func (c *Cache) encodeOld(layerIdx int) error {
	p := &c.cfg.Policy
	if layerIdx >= len(p.Layers) {
		return nil
	}
	l := &c.layers[layerIdx]
	bs, d := c.cfg.BlockSize, c.cfg.HeadDim
	for ; (l.nextEnc+1)*bs <= l.n-p.HotWindow; l.nextEnc++ {
		b := l.nextEnc
		if b*bs < p.Sinks {
			continue
		}
		for h := 0; h < c.cfg.KVHeads; h++ {
			for kv, cd := range [2]codec.Codec{p.KCodec(layerIdx, h), p.VCodec(layerIdx)} {
				if cd == nil {
					continue
				}
				pt := &l.blocks[b][2*h+kv]
				x := pt.hot
				if pt.hot16 != nil {
					if len(c.widen) < bs*d {
						c.widen = make([]float32, bs*d)
					}
					x = c.widen[:bs*d]
					fromBF16(x, pt.hot16)
				}
				enc, err := cd.Encode(pt.enc[:0], x, bs, d)
				if err != nil {
					return fmt.Errorf("kvcache: layer %d block %d head %d %s: %s: %w", layerIdx, b, h, kvName(kv), cd.Name(), err)
				}
				pt.enc = enc
				c.release(pt)
				hot, cb := c.hotBytes(), int64(len(enc))
				l.st.CompressedBF16 += int64(bs * d * 2)
				if kv == 0 {
					l.st.KHot -= hot
					l.st.KCompressed += cb
				} else {
					l.st.VHot -= hot
					l.st.VCompressed += cb
				}
			}
		}
	}
	return nil
}

func kvName(kv int) string {
	if kv == 0 {
		return "K"
	}
	return "V"
}

// NumBlocks returns the number of blocks holding tokens of a layer.
func (c *Cache) NumBlocks(layer int) int { return len(c.layers[layer].blocks) }

// K returns the pre-RoPE keys of one block and KV head as BlockSize rows of
// HeadDim values (rows past LayerLen are stale). A float32 hot block is
// returned as is; a bf16 or encoded one is widened or decoded into scratch
// (BlockSize*HeadDim values).
func (c *Cache) K(layer, head, block int, scratch []float32) ([]float32, error) {
	return c.get(layer, head, block, 0, scratch)
}

// V is K for the values.
func (c *Cache) V(layer, head, block int, scratch []float32) ([]float32, error) {
	return c.get(layer, head, block, 1, scratch)
}

// VEncoded returns the encoded bytes of the V part of a block and the codec
// that wrote them, or ok = false while the part is hot. The bytes belong to
// the cache: read them, do not keep or change them.
func (c *Cache) VEncoded(layer, head, block int) (enc []byte, cd codec.Codec, ok bool) {
	pt := &c.layers[layer].blocks[block][2*head+1]
	if pt.isHot() {
		return nil, nil, false
	}
	return pt.enc, c.cfg.Policy.VCodec(layer), true
}

// Encoded reports whether the K (kv=0) or V (kv=1) part of a block is stored
// encoded.
func (c *Cache) Encoded(layer, head, block, kv int) bool {
	return !c.layers[layer].blocks[block][2*head+kv].isHot()
}

func (c *Cache) get(layerIdx, head, block, kv int, scratch []float32) ([]float32, error) {
	pt := &c.layers[layerIdx].blocks[block][2*head+kv]
	if pt.hot != nil {
		return pt.hot, nil
	}
	n := c.cfg.BlockSize * c.cfg.HeadDim
	if len(scratch) < n {
		return nil, fmt.Errorf("kvcache: decode scratch of %d values, want %d", len(scratch), n)
	}
	if pt.hot16 != nil {
		fromBF16(scratch[:n], pt.hot16)
		return scratch[:n], nil
	}
	var cd codec.Codec
	if kv == 0 {
		cd = c.cfg.Policy.KCodec(layerIdx, head)
	} else {
		cd = c.cfg.Policy.VCodec(layerIdx)
	}
	if err := cd.Decode(scratch[:n], pt.enc, c.cfg.BlockSize, c.cfg.HeadDim); err != nil {
		return nil, fmt.Errorf("kvcache: layer %d block %d head %d %s: %s: %w", layerIdx, block, head, kvName(kv), cd.Name(), err)
	}
	return scratch[:n], nil
}

// LayerStats is the memory one layer's cache holds, in bytes. Hot bytes
// count whole allocated blocks, including the unfilled tail of the last.
type LayerStats struct {
	Tokens            int
	KHot, KCompressed int64
	VHot, VCompressed int64
	// CompressedBF16 is what the encoded parts (K and V) would take in
	// bf16, the reference for the codec's own ratio.
	CompressedBF16 int64
}

// Bytes returns the layer's total bytes in use.
func (s LayerStats) Bytes() int64 { return s.KHot + s.KCompressed + s.VHot + s.VCompressed }

// Stats is the memory a cache holds.
type Stats struct {
	Tokens int
	Layers []LayerStats
	// Hot and Compressed total the layers.
	Hot, Compressed int64
	// BF16 is what a plain bf16 cache of the same tokens would take.
	BF16 int64
	// CompressedBF16 is what the encoded blocks would take in bf16.
	CompressedBF16 int64
}

// Bytes returns the total bytes in use.
func (s Stats) Bytes() int64 { return s.Hot + s.Compressed }

// Ratio returns BF16 / Bytes: how many times smaller than a bf16 cache the
// cache is (0 when empty).
func (s Stats) Ratio() float64 {
	if s.Bytes() == 0 {
		return 0
	}
	return float64(s.BF16) / float64(s.Bytes())
}

// CodecRatio returns CompressedBF16 / Compressed: how many times smaller
// than bf16 the encoded blocks alone are, leaving out the hot window,
// sinks, boundary layers and partly filled blocks that Ratio counts (0
// when nothing is encoded).
func (s Stats) CodecRatio() float64 {
	if s.Compressed == 0 {
		return 0
	}
	return float64(s.CompressedBF16) / float64(s.Compressed)
}

// Stats returns the cache's byte accounting.
func (c *Cache) Stats() Stats {
	s := Stats{Tokens: c.Len(), Layers: make([]LayerStats, len(c.layers))}
	for i := range c.layers {
		ls := c.layers[i].st
		s.Layers[i] = ls
		s.Hot += ls.KHot + ls.VHot
		s.Compressed += ls.KCompressed + ls.VCompressed
		s.CompressedBF16 += ls.CompressedBF16
		s.BF16 += int64(ls.Tokens) * int64(2*c.cfg.KVHeads*c.cfg.HeadDim*2)
	}
	return s
}

func toBF16(dst []uint16, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = compute.F32ToBF16(v)
	}
}

// fromBF16 widens x into dst through the weights' conversion kernel.
func fromBF16(dst []float32, x []uint16) {
	cpu.RowF32(dst, compute.Mat{DType: compute.BF16, Rows: 1, Cols: len(x), U16: x}, 0)
}
