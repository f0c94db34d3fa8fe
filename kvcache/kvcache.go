// Package kvcache is the paged key/value cache of one sequence: fixed-size
// token blocks per layer and KV head, keys stored before RoPE so a full block
// can be handed to a codec as it is, and exact byte accounting.
//
// The blocks live in a compute.BlockStore, the memory of the backend whose
// attention reads them; the cache keeps the block tables, the policy and
// the accounting. Blocks start hot (float32, or bf16 when the policy asks).
// Once a full block is older than the policy's hot window (and holds no
// sink token), it is read back, encoded through the layer's codecs on the
// host, and its hot storage returns to the store.
//
// A Pool holds the blocks of many caches under one byte budget and shares
// their full blocks by prefix: a cache made with Config.Pool registers each
// block once it is final under a hash of its tokens (AppendTokens), and a
// new cache starts from the longest cached run of its prompt
// (AttachPrefix). Config.BytesFor says what a number of tokens costs, so
// a scheduler can admit by bytes.
package kvcache

import (
	"errors"
	"fmt"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
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

// EncodedBlocks returns how many blocks of bs tokens a cache of n tokens
// holds encoded under p, where its codecs are attended encoded: the full
// blocks older than the hot window (b*bs+bs <= n-HotWindow) that hold no
// sink (b*bs >= Sinks). Byte accounting (Sizer, and projections without
// a cache) counts by it.
func (p Policy) EncodedBlocks(n, bs int) int {
	if n < p.HotWindow {
		return 0
	}
	first := (p.Sinks + bs - 1) / bs
	return max(0, (n-p.HotWindow)/bs-first)
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

// A HostSide is a layer side of a policy whose full blocks a store that
// encodes parts itself (compute.PartEncoder: a GPU's) leaves to the host:
// the cache reads each such part back, encodes it on the host and copies
// the bytes in, a host wait per block and KV head (see Policy.HostEncoded).
type HostSide struct {
	Layer int
	KV    int    // 0 keys, 1 values
	Codec string // the codec's name (of the layer's first KV head with one, for keys)
}

// HostEncoded returns the layer sides of p, in layer then side order, whose
// blocks store would encode on the host although it encodes parts itself:
// those whose codec store attends encoded (compute.EncodedAttention) and
// cannot encode (compute.PartEncoder's EncodedLen reports false), for any
// of kvHeads KV heads. It returns nil for a store that encodes no part
// itself (the CPU's: encoding on the host is its only way, and costs no
// wait).
func (p *Policy) HostEncoded(kvHeads int, store compute.BlockStore) []HostSide {
	pe, ok := store.(compute.PartEncoder)
	ea, _ := store.(compute.EncodedAttention)
	if !ok || ea == nil {
		return nil
	}
	host := func(cd codec.Codec) bool {
		if cd == nil || !ea.AttendsEncoded(cd) {
			return false
		}
		_, ok := pe.EncodedLen(cd)
		return !ok
	}
	var out []HostSide
	for l := range p.Layers {
		for h := range kvHeads {
			if cd := p.KCodec(l, h); host(cd) {
				out = append(out, HostSide{Layer: l, KV: 0, Codec: cd.Name()})
				break
			}
		}
		if cd := p.VCodec(l); host(cd) {
			out = append(out, HostSide{Layer: l, KV: 1, Codec: cd.Name()})
		}
	}
	return out
}

// A Shape is what a cache policy is made for: a model's layers, KV heads
// and head dimension, and the longest sequence the cache will hold
// (kvplan.NewPolicy takes it; model.Model.CacheShape gives it).
type Shape struct {
	Layers, KVHeads, HeadDim int
	// MaxContext is the longest sequence the cache will hold (0: unknown);
	// no block may be longer.
	MaxContext int
	// Windows holds each layer's sliding window, 0 for a full layer (nil:
	// every layer full): see Config.Windows.
	Windows []int
}

// Config sizes a cache.
type Config struct {
	Layers, KVHeads, HeadDim int
	// BlockSize is the number of tokens per block.
	BlockSize int
	// MaxTokens is the capacity in tokens.
	MaxTokens int
	Policy    Policy
	// Store holds the blocks, in the memory of the backend that attends
	// over them; it stores hot blocks as bf16 exactly when Policy.HotBF16.
	Store compute.BlockStore
	// Pool, when set instead of Store, holds the blocks in memory shared
	// with other sequences, under its byte budget, and lets full blocks be
	// shared by prefix (see AppendTokens and AttachPrefix).
	Pool *Pool
	// Windows holds each layer's sliding window (nil, or 0 for a layer:
	// full attention). A sliding layer keeps only the blocks its window
	// can still see, encoded as Policy says meanwhile (see window.go).
	Windows []int
	// SlideChunk is the most tokens one Append adds to a sliding layer
	// (0: MaxTokens); BytesFor counts a sliding layer's blocks by it.
	SlideChunk int
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
	case c.Store == nil && c.Pool == nil:
		return errors.New("kvcache: no block store")
	case c.Store != nil && c.Pool != nil:
		return errors.New("kvcache: both a block store and a pool; set one")
	case c.Pool != nil && (c.Pool.cfg.BlockSize != c.BlockSize || c.Pool.cfg.HeadDim != c.HeadDim || c.Pool.cfg.HotBF16 != c.Policy.HotBF16):
		pc := &c.Pool.cfg
		return fmt.Errorf("kvcache: pool holds %dx%d parts (bf16 %t), the cache wants %dx%d (bf16 %t)",
			pc.BlockSize, pc.HeadDim, pc.HotBF16, c.BlockSize, c.HeadDim, c.Policy.HotBF16)
	case c.MaxTokens <= 0:
		return fmt.Errorf("kvcache: MaxTokens = %d, want > 0", c.MaxTokens)
	case c.Policy.HotWindow < 0 || c.Policy.Sinks < 0:
		return fmt.Errorf("kvcache: HotWindow %d and Sinks %d must not be negative", c.Policy.HotWindow, c.Policy.Sinks)
	case len(c.Policy.Layers) > c.Layers:
		return fmt.Errorf("kvcache: policy names %d layers, the model has %d", len(c.Policy.Layers), c.Layers)
	}
	if err := c.validateWindows(); err != nil {
		return err
	}
	for l, lc := range c.Policy.Layers {
		if len(lc.K) > 1 && len(lc.K) != c.KVHeads {
			return fmt.Errorf("kvcache: layer %d has %d K codecs, want 1 or %d (one per KV head)", l, len(lc.K), c.KVHeads)
		}
	}
	return nil
}

type layer struct {
	n       int              // tokens stored
	blocks  [][]compute.Part // block table: [block][head*2 + (0 K | 1 V)]
	nextEnc int              // first block not yet considered for encoding
	window  int              // the sliding window, 0 for full attention
	nextOut int              // first block a sliding layer has not released
	// encBytes holds, for a sliding layer, what st counts for each part
	// it encoded or attached encoded ([block*2*KVHeads + head*2 + kv]; 0
	// or past its end: hot), which slide takes back as it releases them.
	encBytes []int64
	st       LayerStats
	view     layerView
}

// layerView is one layer as attention reads it (compute.KVLayer).
type layerView struct{ l *layer }

func (v *layerView) Len() int { return v.l.n }

func (v *layerView) Part(head, block, kv int) compute.Part { return v.l.blocks[block][2*head+kv] }

// Cache holds the keys and values of one sequence for every layer, in the
// memory of its block store. A Cache may be read from many goroutines at
// once (Layer, Read, Len) but is written by one.
type Cache struct {
	cfg    Config
	store  compute.BlockStore // cfg.Store, or the pool's
	layers []layer
	widen  []float32 // a block read back for its codec
	enc    []byte    // a block's encoding before the store takes it
	// The parts of one encodeOld call for the store's EncodeParts.
	batch      []pendingEncode
	batchParts []compute.Part
	batchDecs  []compute.Decoder
	share      sharing
	// res is the cache's reservation in its pool, made by ledger (nil
	// before any); both are guarded by the pool's mutex.
	res    int64
	ledger *Ledger
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Cache{cfg: cfg, store: cfg.Store, layers: make([]layer, cfg.Layers)}
	for i := range c.layers {
		c.layers[i].view.l = &c.layers[i]
		if i < len(cfg.Windows) {
			c.layers[i].window = cfg.Windows[i]
		}
	}
	if cfg.Pool != nil {
		c.store = poolStore{cfg.Pool}
		c.share.key = policyKey(&c.cfg)
	}
	return c, nil
}

// Config returns the cache's configuration.
func (c *Cache) Config() Config { return c.cfg }

// BlockSize returns the number of tokens per block.
func (c *Cache) BlockSize() int { return c.cfg.BlockSize }

// Len returns the number of tokens stored in layer 0, which is the
// sequence's length between forward passes.
func (c *Cache) Len() int { return c.layers[0].n }

// Layer returns one layer's block table as attention reads it.
func (c *Cache) Layer(layer int) compute.KVLayer { return &c.layers[layer].view }

// Reset empties the cache, returning its blocks to the store for reuse
// (with a pool: dropping its references to shared blocks, which stay
// cached, and returning its reservation; see Ledger).
func (c *Cache) Reset() {
	if c.cfg.Pool != nil {
		c.unpass()
	}
	for i := range c.layers {
		l := &c.layers[i]
		for bi, b := range l.blocks {
			shared := bi < len(c.share.blocks) && c.share.blocks[bi] != nil
			for j := range b {
				if !shared && b[j] != nil {
					c.store.Release(b[j])
				}
				b[j] = nil
			}
		}
		l.blocks = l.blocks[:0]
		l.encBytes = l.encBytes[:0]
		l.n, l.nextEnc, l.nextOut = 0, 0, 0
		l.st = LayerStats{}
	}
	c.share.reset(c.cfg.Pool)
	if c.cfg.Pool != nil {
		c.cfg.Pool.mu.Lock()
		c.cfg.Pool.reserved -= c.res
		c.res, c.ledger = 0, nil
		c.cfg.Pool.mu.Unlock()
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

// Append stores n tokens of one layer after those it holds: k and
// v hold n rows of KVHeads*HeadDim values, keys before RoPE. Full blocks that
// leave the hot window are encoded.
func (c *Cache) Append(layerIdx int, k, v compute.Buffer, n int) error {
	if layerIdx < 0 || layerIdx >= len(c.layers) {
		return fmt.Errorf("kvcache: layer %d out of range [0, %d)", layerIdx, len(c.layers))
	}
	kvh, d, bs := c.cfg.KVHeads, c.cfg.HeadDim, c.cfg.BlockSize
	row := kvh * d
	if k.Len < n*row || v.Len < n*row {
		return fmt.Errorf("kvcache: append of %d tokens needs %d values of K and V, got %d and %d", n, n*row, k.Len, v.Len)
	}
	l := &c.layers[layerIdx]
	if l.n+n > c.cfg.MaxTokens {
		return fmt.Errorf("%w: layer %d holds %d tokens, %d more exceed the capacity of %d", ErrFull, layerIdx, l.n, n, c.cfg.MaxTokens)
	}
	if l.window > 0 {
		if ch := c.cfg.SlideChunk; ch > 0 && n > ch {
			return fmt.Errorf("kvcache: append of %d tokens to sliding layer %d exceeds the configured chunk of %d", n, layerIdx, ch)
		}
		// Blocks no query of these tokens (nor a later one) sees go back.
		c.slide(layerIdx)
	}
	store := c.store
	for i := 0; i < n; {
		b, off := l.n/bs, l.n%bs
		if b == len(l.blocks) {
			// Reuse the part slices a Reset left in the block table.
			if b < cap(l.blocks) && l.blocks[:b+1][b] != nil {
				l.blocks = l.blocks[:b+1]
			} else {
				l.blocks = append(l.blocks, make([]compute.Part, 2*kvh))
			}
			for j := range l.blocks[b] {
				p, err := store.NewPart()
				if err != nil {
					// Keep the table whole: the parts made so far go back.
					for _, q := range l.blocks[b][:j] {
						store.Release(q)
					}
					clear(l.blocks[b])
					l.blocks = l.blocks[:b]
					l.st.Tokens = l.n
					return fmt.Errorf("kvcache: layer %d block %d: %w", layerIdx, b, err)
				}
				l.blocks[b][j] = p
			}
			l.st.KHot += int64(kvh) * c.hotBytes()
			l.st.VHot += int64(kvh) * c.hotBytes()
		}
		// The tokens that go into this block, head by head.
		m := min(n-i, bs-off)
		for h := 0; h < kvh; h++ {
			src := i*row + h*d
			store.Write(l.blocks[b][2*h], off, k.Slice(src, src+(m-1)*row+d), row, m)
			store.Write(l.blocks[b][2*h+1], off, v.Slice(src, src+(m-1)*row+d), row, m)
		}
		l.n += m
		i += m
	}
	l.st.Tokens = l.n
	if err := c.encodeOld(layerIdx); err != nil {
		return err
	}
	return c.registerFinal()
}

// encodeOld encodes the full blocks of a layer that left the hot window
// when the store's backend attends over encoded blocks (else they stay
// hot): by the store itself where it encodes the codec's blocks
// (compute.PartEncoder), else each part read back to the host, encoded
// and handed to the store.
func (c *Cache) encodeOld(layerIdx int) error {
	p := &c.cfg.Policy
	l := &c.layers[layerIdx]
	bs := c.cfg.BlockSize
	// A sliding layer's blocks that slid out before they left the hot
	// window are gone, never encoded.
	l.nextEnc = max(l.nextEnc, l.nextOut)
	if layerIdx >= len(p.Layers) {
		return nil
	}
	store := c.store
	ea, _ := store.(compute.EncodedAttention)
	pe, _ := store.(compute.PartEncoder)
	pse, _ := store.(compute.PartsEncoder)
	// The parts the store encodes itself wait in c.batch and go to it in
	// one EncodeParts call when it takes several (one launch on a GPU).
	batch := c.batch[:0]
	defer func() { clear(batch); c.batch = batch[:0] }()
	for ; (l.nextEnc+1)*bs <= l.n-p.HotWindow; l.nextEnc++ {
		b := l.nextEnc
		if b*bs < p.Sinks {
			continue
		}
		for h := 0; h < c.cfg.KVHeads; h++ {
			for kv, cd := range [2]codec.Codec{p.KCodec(layerIdx, h), p.VCodec(layerIdx)} {
				if cd == nil || ea == nil || !ea.AttendsEncoded(cd) {
					continue
				}
				pt := l.blocks[b][2*h+kv]
				if pse != nil && pe != nil {
					if size, ok := pe.EncodedLen(cd); ok {
						batch = append(batch, pendingEncode{pt: pt, cd: cd, size: size, b: b, j: 2*h + kv})
						continue
					}
				}
				size, err := c.encodePart(store, pe, pt, cd)
				if err != nil {
					return fmt.Errorf("kvcache: layer %d block %d head %d %s: %w", layerIdx, b, h, kvName(kv), err)
				}
				c.countEncoded(l, pt, size, b, 2*h+kv)
			}
		}
	}
	if len(batch) == 0 {
		return nil
	}
	ps, decs := c.batchParts[:0], c.batchDecs[:0]
	for _, e := range batch {
		ps, decs = append(ps, e.pt), append(decs, e.cd)
	}
	c.batchParts, c.batchDecs = ps, decs
	defer func() { clear(ps); clear(decs) }()
	if err := pse.EncodeParts(ps, decs); err != nil {
		return fmt.Errorf("kvcache: layer %d: encoding %d blocks' parts: %w", layerIdx, len(ps), err)
	}
	for _, e := range batch {
		c.countEncoded(l, e.pt, e.size, e.b, e.j)
	}
	return nil
}

// pendingEncode is a part encodeOld hands to the store's EncodeParts.
type pendingEncode struct {
	pt   compute.Part
	cd   codec.Codec
	size int // its encoded length
	b, j int // its block, and its index there (head*2 + 0 K | 1 V)
}

// countEncoded moves pt, part j (head*2 + 0 keys | 1 values) of block b
// and now encoded in size bytes, from the layer's hot bytes to its
// compressed ones, unless the store keeps the decoded values in the
// part's hot memory.
func (c *Cache) countEncoded(l *layer, pt compute.Part, size, b, j int) {
	if hd, ok := pt.(compute.HotDecoded); ok && hd.HotDecoded() {
		// The store holds the decoded values in the hot memory the
		// part already had: still hot bytes.
		return
	}
	hot, cb := c.hotBytes(), int64(size)
	l.st.CompressedBF16 += c.bf16Part()
	c.noteEncoded(l, b, j, cb)
	if j%2 == 0 {
		l.st.KHot -= hot
		l.st.KCompressed += cb
	} else {
		l.st.VHot -= hot
		l.st.VCompressed += cb
	}
}

// bf16Part is what one part takes in bf16, the reference of the codec
// ratio.
func (c *Cache) bf16Part() int64 { return int64(c.cfg.BlockSize * c.cfg.HeadDim * 2) }

// noteEncoded records, for a sliding layer, that part j of block b is
// counted at size encoded bytes (see layer.encBytes).
func (c *Cache) noteEncoded(l *layer, b, j int, size int64) {
	if l.window == 0 {
		return
	}
	i := b*2*c.cfg.KVHeads + j
	for len(l.encBytes) <= i {
		l.encBytes = append(l.encBytes, 0)
	}
	l.encBytes[i] = size
}

// encodePart encodes the full part pt by cd: by the store where it
// encodes cd's blocks itself (pe, nil if it encodes none), else read back,
// encoded on the host and handed to the store. It returns the encoded
// length.
func (c *Cache) encodePart(store compute.BlockStore, pe compute.PartEncoder, pt compute.Part, cd codec.Codec) (int, error) {
	if pe != nil {
		if size, ok := pe.EncodedLen(cd); ok {
			return size, pe.EncodePart(pt, cd)
		}
	}
	bs, d := c.cfg.BlockSize, c.cfg.HeadDim
	if len(c.widen) < bs*d {
		c.widen = make([]float32, bs*d)
	}
	x := c.widen[:bs*d]
	if err := store.Read(x, pt); err != nil {
		return 0, err
	}
	enc, err := cd.Encode(c.enc[:0], x, bs, d)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", cd.Name(), err)
	}
	c.enc = enc
	return len(enc), store.SetEncoded(pt, enc, cd)
}

func kvName(kv int) string {
	if kv == 0 {
		return "K"
	}
	return "V"
}

// NumBlocks returns the number of blocks holding tokens of a layer.
func (c *Cache) NumBlocks(layer int) int { return len(c.layers[layer].blocks) }

// Read copies the keys (kv 0, before RoPE) or values (kv 1) of one block
// and KV head to dst as BlockSize rows of HeadDim values (rows past
// those the layer holds are stale), decoding an encoded block.
func (c *Cache) Read(dst []float32, layer, head, block, kv int) error {
	pt := c.layers[layer].blocks[block][2*head+kv]
	if pt == nil {
		return fmt.Errorf("kvcache: layer %d block %d: released, its tokens slid out of the layer's window of %d", layer, block, c.layers[layer].window)
	}
	if err := c.store.Read(dst, pt); err != nil {
		return fmt.Errorf("kvcache: layer %d block %d head %d %s: %w", layer, block, head, kvName(kv), err)
	}
	return nil
}

// Encoded reports whether the K (kv=0) or V (kv=1) part of a block is stored
// encoded (false for a block a sliding layer released).
func (c *Cache) Encoded(layer, head, block, kv int) bool {
	pt := c.layers[layer].blocks[block][2*head+kv]
	return pt != nil && pt.Encoded()
}

// LayerStats is the memory one layer's cache holds in its store, in bytes.
// Hot bytes count whole allocated blocks, including the unfilled tail of
// the last, and the blocks a store keeps hot although their codec applies
// (see compute.EncodedAttention); compressed bytes count the codec bytes
// the store holds. A block a pooled cache shares with others (see Pool) is
// counted by each of them; the pool counts it once.
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
	// BF16 is what a plain bf16 cache of the same tokens would take (with
	// the same sliding windows: a sliding layer counts the tokens of the
	// blocks it still holds).
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
		// A bf16 cache of the same windows: a sliding layer's reference
		// is the tokens of the blocks it still holds.
		held := ls.Tokens - c.layers[i].nextOut*c.cfg.BlockSize
		s.BF16 += int64(held) * int64(2*c.cfg.KVHeads*c.cfg.HeadDim*2)
	}
	return s
}
