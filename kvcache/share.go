package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// sharing is a pooled cache's side of prefix sharing: the tokens it holds,
// the chained hash of each full final block, and the pool's block for each
// block the cache shares (nil for one it owns alone).
type sharing struct {
	key    []byte // policyKey of the cache's configuration
	tokens []int
	hashes [][32]byte
	blocks []*poolBlock
	// regBlocks counts the non-nil blocks, sinkBlocks those of them that
	// hold a sink token: the ledger's estimate of them (see Ledger).
	regBlocks, sinkBlocks int
	// slideHeld is the bytes of those blocks' sliding-layer parts the
	// cache's windows still see.
	slideHeld int64
}

func (s *sharing) reset(p *Pool) {
	for i, b := range s.blocks {
		if b != nil {
			p.unref(b)
		}
		s.blocks[i] = nil
	}
	s.tokens, s.hashes, s.blocks = s.tokens[:0], s.hashes[:0], s.blocks[:0]
	s.regBlocks, s.sinkBlocks, s.slideHeld = 0, 0, 0
}

// final reports whether block b of a layer will never change again: it is
// full and, in a layer the policy names, the cache has passed it through
// encodeOld (encoded, or kept hot for good as a sink block or one whose
// codec the store does not attend over).
func (c *Cache) final(li, b int) bool {
	l := &c.layers[li]
	return l.n >= (b+1)*c.cfg.BlockSize && (li >= len(c.cfg.Policy.Layers) || l.nextEnc > b)
}

// AppendTokens records the token ids at the positions the cache holds
// next, in order; Append stores their keys and values (before or after,
// layer by layer). With a pool, every block whose tokens are known and
// which is final in every layer is registered for prefix sharing: only
// final blocks are shared, so a block is never written once shared, and
// a block shared under a compressing policy holds exactly what the cache
// of a cold sequence holds once it left the hot window. Without a pool
// AppendTokens does nothing.
func (c *Cache) AppendTokens(ids []int) error {
	if c.cfg.Pool == nil {
		return nil
	}
	if len(c.share.tokens)+len(ids) > c.cfg.MaxTokens {
		return fmt.Errorf("%w: %d tokens known, %d more exceed the capacity of %d", ErrFull, len(c.share.tokens), len(ids), c.cfg.MaxTokens)
	}
	c.share.tokens = append(c.share.tokens, ids...)
	return c.registerFinal()
}

// registerFinal registers with the pool the blocks that became final.
func (c *Cache) registerFinal() error {
	p := c.cfg.Pool
	if p == nil {
		return nil
	}
	bs := c.cfg.BlockSize
	for b := len(c.share.hashes); (b+1)*bs <= len(c.share.tokens); b++ {
		for li := range c.layers {
			if !c.final(li, b) {
				return nil
			}
		}
		var prev [32]byte
		if b > 0 {
			prev = c.share.hashes[b-1]
		}
		h := blockHash(prev, c.share.key, b, c.share.tokens[b*bs:(b+1)*bs])
		parts := make([][]compute.Part, len(c.layers))
		for li := range c.layers {
			parts[li] = append([]compute.Part(nil), c.layers[li].blocks[b]...)
		}
		c.share.hashes = append(c.share.hashes, h)
		c.share.blocks = append(c.share.blocks, p.register(c, b, h, parts))
	}
	return nil
}

// AttachPrefix makes an empty pooled cache start with the longest run of
// cached blocks that hold the prefix of tokens (the sequence's prompt), in
// this configuration: it adds a reference to each, sets the cache's length
// to the tokens they hold and returns it. The caller appends the rest of
// the prompt (tokens[reused:]) as usual; the cache never writes an
// attached block.
//
// Only full blocks are shared, and only those a cold sequence would hold
// in the same form after appending the whole prompt in one step: at most
// len(tokens)-1 tokens are reused (one is left to run for the logits), and
// under a policy that names layers only blocks that have left the hot
// window of the whole prompt (a shared block there is encoded, where a
// cold sequence might still hold it hot).
func (c *Cache) AttachPrefix(tokens []int) (reused int, err error) {
	p := c.cfg.Pool
	switch {
	case p == nil:
		return 0, errors.New("kvcache: AttachPrefix needs a cache with a pool")
	case c.Len() != 0 || len(c.share.tokens) != 0:
		return 0, fmt.Errorf("kvcache: AttachPrefix on a cache holding %d tokens, want an empty one", c.Len())
	}
	bs := c.cfg.BlockSize
	nb := c.cfg.attachBlocks(tokens)

	var hashes [][32]byte
	var blocks []*poolBlock
	var prev [32]byte
	p.mu.Lock()
	p.queries++
	p.queryTokens += int64(len(tokens))
	for b := 0; b < nb; b++ {
		h := blockHash(prev, c.share.key, b, tokens[b*bs:(b+1)*bs])
		pb := p.acquire(h)
		if pb == nil {
			break
		}
		hashes, blocks, prev = append(hashes, h), append(blocks, pb), h
	}
	p.mu.Unlock()
	// A sharer may have released blocks its sliding layers no longer saw:
	// attach no further than the next query finds what it sees.
	k := c.attachable(blocks)
	for _, pb := range blocks[k:] {
		p.unref(pb)
	}
	hashes, blocks = hashes[:k], blocks[:k]
	p.mu.Lock()
	if len(blocks) > 0 {
		p.hits++
		p.hitTokens += int64(len(blocks) * bs)
	}
	for b, pb := range blocks {
		c.registered(b, pb)
	}
	p.mu.Unlock()

	n := len(blocks) * bs
	for li := range c.layers {
		l := &c.layers[li]
		for b, pb := range blocks {
			if b < cap(l.blocks) && l.blocks[:b+1][b] != nil {
				l.blocks = l.blocks[:b+1]
			} else {
				l.blocks = append(l.blocks, make([]compute.Part, 2*c.cfg.KVHeads))
			}
			copy(l.blocks[b], pb.parts[li])
			for j, pt := range pb.parts[li] {
				if pt != nil {
					c.countAttached(l, pt, b, j)
				}
			}
		}
		l.n, l.nextEnc, l.nextOut, l.st.Tokens = n, len(blocks), 0, n
	}
	c.share.tokens = append(c.share.tokens, tokens[:n]...)
	c.share.hashes = append(c.share.hashes, hashes...)
	c.share.blocks = append(c.share.blocks, blocks...)
	return n, nil
}

// attachBlocks returns how many leading blocks of tokens AttachPrefix
// looks up: at most len(tokens)-1 tokens (one is left to run for the
// logits) and, under a policy that names layers, only blocks that left the
// hot window of the whole prompt.
func (c *Config) attachBlocks(tokens []int) int {
	lim := min(len(tokens)-1, c.MaxTokens)
	if len(c.Policy.Layers) > 0 {
		lim = min(lim, len(tokens)-c.Policy.HotWindow)
	}
	return max(lim, 0) / c.BlockSize
}

// countAttached adds the bytes of an attached part, part j of block b
// (head*2 + 0 K | 1 V), to a layer's stats, as encodeOld counts them.
func (c *Cache) countAttached(l *layer, pt compute.Part, b, j int) {
	st := &l.st
	hot, comp := c.hotBytes(), int64(0)
	hd, ok := pt.(compute.HotDecoded)
	if pt.Encoded() && !(ok && hd.HotDecoded()) {
		hot, comp = 0, c.cfg.Pool.info(pt).bytes
		st.CompressedBF16 += c.bf16Part()
		c.noteEncoded(l, b, j, comp)
	}
	if j%2 == 0 {
		st.KHot += hot
		st.KCompressed += comp
	} else {
		st.VHot += hot
		st.VCompressed += comp
	}
}

// BytesFor returns the bytes a cache of this configuration holds after
// appending n tokens, what its Stats would report: per layer, KV head and
// K/V part, the blocks that left the hot window (holding no sink) in the
// codec's bytes where the store attends over it, the others hot, whole
// blocks; a sliding layer only the blocks its window still holds after
// appends of SlideChunk tokens (SlidingHeld). A scheduler admits by it (see Sizer for the same answer in
// constant time). A codec's block size is measured by encoding probe
// blocks, exact for the fixed-size codecs (all of this project's but the
// outlier lists of kakeya, whose size varies with the data; see
// Sizer.Variable); a codec whose blocks the store keeps hot-decoded (see
// compute.HotDecoded: the CUDA store, for codecs its kernels cannot read)
// counts hot, as the cache and the pool count such a block.
func (c Config) BytesFor(n int) (int64, error) {
	z, err := c.Sizer()
	if err != nil {
		return 0, err
	}
	if n < 0 || n > c.MaxTokens {
		return 0, fmt.Errorf("kvcache: BytesFor(%d) outside [0, %d]", n, c.MaxTokens)
	}
	return z.Bytes(n), nil
}

// A Sizer answers BytesFor for one configuration in constant time, once
// the codecs' block sizes are measured: a scheduler asks it at every step.
type Sizer struct {
	bs, hotWindow, sinks, max int
	// hot and old are the bytes of one block position across every
	// layer, KV head and K/V part: while the block is in the hot window,
	// and once it left it.
	hot, old int64
	// layerExcess is the most one full layer's block position takes hot
	// beyond its bytes once encoded (see Ledger.Cost).
	layerExcess int64
	variable    bool // some codec's blocks vary in size with the data
	// slides are the sliding layers' bytes of one block position (every
	// KV head, K and V) by window, hot and once it left the hot window;
	// chunk the most tokens an Append adds (see SlidingBlocks).
	slides map[int]blockBytes
	chunk  int
}

// blockBytes are what one block position of some layers takes while in
// the hot window and once it left it.
type blockBytes struct{ hot, old int64 }

// Sizer measures what one block of this configuration takes, hot and
// once it left the hot window, for Sizer.Bytes.
func (c Config) Sizer() (Sizer, error) {
	if err := c.validate(); err != nil {
		return Sizer{}, err
	}
	var store compute.BlockStore = c.Store
	if c.Pool != nil {
		store = poolStore{c.Pool}
	}
	ea, _ := store.(compute.EncodedAttention)
	bs, d := c.BlockSize, c.HeadDim
	hot := int64(bs * d * 4)
	if c.Policy.HotBF16 {
		hot /= 2
	}
	sizes := map[codec.Codec]int64{}
	variable := false
	size := func(cd codec.Codec) (int64, error) {
		if s, ok := sizes[cd]; ok {
			return s, nil
		}
		s, v, err := EncodedBlockBytes(cd, bs, d)
		if err != nil {
			return 0, err
		}
		hd, err := c.hotDecoded(cd)
		if err != nil {
			return 0, err
		}
		if hd {
			s, v = hot, false
		}
		variable = variable || v
		sizes[cd] = s
		return s, nil
	}
	z := Sizer{bs: bs, hotWindow: c.Policy.HotWindow, sinks: c.Policy.Sinks, max: c.MaxTokens, chunk: c.SlideChunk}
	if z.chunk == 0 {
		z.chunk = c.MaxTokens
	}
	for li := 0; li < c.Layers; li++ {
		// A full layer's block positions add to z.hot and z.old, a
		// sliding layer's to its window's: they hold fewer of them.
		lb := blockBytes{}
		var excess int64
		for h := 0; h < c.KVHeads; h++ {
			for _, cd := range [2]codec.Codec{c.Policy.KCodec(li, h), c.Policy.VCodec(li)} {
				lb.hot += hot
				if li >= len(c.Policy.Layers) || cd == nil || ea == nil || !ea.AttendsEncoded(cd) {
					lb.old += hot
					continue
				}
				s, err := size(cd)
				if err != nil {
					return Sizer{}, err
				}
				lb.old += s
				excess += max(0, hot-s)
			}
		}
		z.layerExcess = max(z.layerExcess, excess)
		if li < len(c.Windows) && c.Windows[li] > 0 {
			if z.slides == nil {
				z.slides = map[int]blockBytes{}
			}
			w := z.slides[c.Windows[li]]
			z.slides[c.Windows[li]] = blockBytes{w.hot + lb.hot, w.old + lb.old}
			continue
		}
		z.hot += lb.hot
		z.old += lb.old
	}
	z.variable = variable
	return z, nil
}

// hotDecoded reports whether the cache's store keeps a block of cd
// hot-decoded (compute.HotDecoded): it encodes a probe block as the cache
// would (by the store where it encodes cd's blocks itself, else on the
// host and handed to SetEncoded) and asks the part. The probe part is the
// store's own, outside the pool's accounting (under its lock).
func (c Config) hotDecoded(cd codec.Codec) (bool, error) {
	st := c.Store
	if c.Pool != nil {
		c.Pool.mu.Lock()
		defer c.Pool.mu.Unlock()
		st = c.Pool.cfg.Store
	}
	if pe, ok := st.(compute.PartEncoder); ok {
		if _, ok := pe.EncodedLen(cd); ok {
			return false, nil // the store encodes it into its own bytes
		}
	}
	pt, err := st.NewPart()
	if err != nil {
		return false, fmt.Errorf("kvcache: probe part for %s: %w", cd.Name(), err)
	}
	defer st.Release(pt)
	if _, ok := pt.(compute.HotDecoded); !ok {
		return false, nil
	}
	x := make([]float32, c.BlockSize*c.HeadDim)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	enc, err := cd.Encode(nil, x, c.BlockSize, c.HeadDim)
	if err != nil {
		return false, fmt.Errorf("kvcache: probe block for %s: %w", cd.Name(), err)
	}
	if err := st.SetEncoded(pt, enc, cd); err != nil {
		return false, fmt.Errorf("kvcache: probe block for %s: %w", cd.Name(), err)
	}
	return pt.(compute.HotDecoded).HotDecoded(), nil
}

// EncodedBlockBytes returns the bytes cd takes for a block of bs rows of
// d values, as the cache's accounting counts them: the larger of two probe
// blocks, Gaussian rows and the same with every seventh value an outlier.
// variable reports that the two differ: the codec's blocks vary in size
// with the data (kakeya's outlier lists, entropy-coded streams).
func EncodedBlockBytes(cd codec.Codec, bs, d int) (size int64, variable bool, err error) {
	r := rand.New(rand.NewPCG(uint64(bs), uint64(d)))
	probes := [2][]float32{make([]float32, bs*d), make([]float32, bs*d)}
	for i := range probes[0] {
		probes[0][i] = float32(r.NormFloat64())
		probes[1][i] = probes[0][i]
		if i%7 == 0 {
			probes[1][i] *= 20
		}
	}
	var n [2]int64
	for i, x := range probes {
		enc, err := cd.Encode(nil, x, bs, d)
		if err != nil {
			return 0, false, fmt.Errorf("kvcache: probe block for %s: %w", cd.Name(), err)
		}
		n[i] = int64(len(enc))
	}
	return max(n[0], n[1]), n[0] != n[1], nil
}

// encodedBlocks returns how many blocks Bytes(n) counts as left the hot
// window.
func (z Sizer) encodedBlocks(n int) int {
	return Policy{HotWindow: z.hotWindow, Sinks: z.sinks}.EncodedBlocks(n, z.bs)
}

// Bytes returns what the cache holds after appending n tokens (0 ≤ n ≤
// the configuration's MaxTokens), as Config.BytesFor does.
func (z Sizer) Bytes(n int) int64 {
	blocks := (n + z.bs - 1) / z.bs
	old := z.encodedBlocks(n)
	b := int64(blocks-old)*z.hot + int64(old)*z.old
	for w, lb := range z.slides {
		held, enc := SlidingHeld(n, w, z.bs, z.chunk, Policy{HotWindow: z.hotWindow, Sinks: z.sinks})
		b += int64(held-enc)*lb.hot + int64(enc)*lb.old
	}
	return b
}

// Variable reports whether some codec's encoded blocks vary in size with
// the data (kakeya's outlier lists): Bytes then counts the larger of two
// probe blocks, one of them with outliers, and real blocks may still
// exceed it by a few bytes.
func (z Sizer) Variable() bool { return z.variable }

// MaxTokens returns the configuration's capacity in tokens.
func (z Sizer) MaxTokens() int { return z.max }
