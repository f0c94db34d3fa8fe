package kvplan

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// CacheBytes returns the bytes a cache of tokens tokens holds for a model
// of shape m under policy p with blocks of bs tokens, in a store that keeps
// every codec's blocks encoded (the CPU store): kvcache.Config.BytesFor's
// accounting, which TestCacheBytesIsBytesFor checks it against. Blocks in
// the hot window, holding a sink, partial, or of a layer side without a
// codec cost a hot part (bs*d bf16 values with p.HotBF16, else float32);
// the others their codec's encoded length as the cache's own accounting
// measures it (kvcache.EncodedBlockBytes: the larger of two probe blocks;
// exact for every codec but kakeya, whose outlier lists vary a few bytes
// with the data, and the entropy-coded kakeya-pc:ec and kvtc, whose code
// streams vary with the data). It
// projects long contexts without running the model: the count is
// arithmetic over the block table. A sliding layer (m.Windows) counts the
// blocks its window still sees after decoding to tokens, those past the
// hot window at its codecs' sizes as a full layer's.
func CacheBytes(p kvcache.Policy, m kvcache.Shape, bs, tokens int) (int64, error) {
	switch {
	case m.Layers <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0:
		return 0, fmt.Errorf("kvplan: cache bytes: shape %d layers x %d kv heads x head_dim %d", m.Layers, m.KVHeads, m.HeadDim)
	case bs <= 0 || tokens < 0:
		return 0, fmt.Errorf("kvplan: cache bytes: %d tokens in blocks of %d", tokens, bs)
	case len(p.Layers) > m.Layers:
		return 0, fmt.Errorf("kvplan: cache bytes: policy names %d layers, the model has %d", len(p.Layers), m.Layers)
	}
	d := m.HeadDim
	hot := int64(bs * d * 4)
	if p.HotBF16 {
		hot /= 2
	}
	sizes := map[codec.Codec]int64{}
	size := func(c codec.Codec) (int64, error) {
		if s, ok := sizes[c]; ok {
			return s, nil
		}
		s, _, err := kvcache.EncodedBlockBytes(c, bs, d)
		if err != nil {
			return 0, fmt.Errorf("kvplan: cache bytes: %w", err)
		}
		sizes[c] = s
		return s, nil
	}
	blocks := (tokens + bs - 1) / bs
	old := p.EncodedBlocks(tokens, bs)
	var total int64
	for l := 0; l < m.Layers; l++ {
		blocks, old := blocks, old
		if l < len(m.Windows) && m.Windows[l] > 0 {
			// A sliding layer: the blocks its window still sees after
			// decoding to tokens (kvcache.Config.Windows).
			blocks, old = kvcache.SlidingHeld(tokens, m.Windows[l], bs, 1, p)
		}
		for h := 0; h < m.KVHeads; h++ {
			for _, c := range [2]codec.Codec{p.KCodec(l, h), p.VCodec(l)} {
				if c == nil || l >= len(p.Layers) {
					total += int64(blocks) * hot
					continue
				}
				s, err := size(c)
				if err != nil {
					return 0, err
				}
				total += int64(old)*s + int64(blocks-old)*hot
			}
		}
	}
	return total, nil
}

// A Projection is a cache's size at some number of tokens beside a bf16
// cache's (every block a hot bf16 part) of the same tokens and blocks.
type Projection struct {
	Tokens      int
	Bytes, BF16 int64
}

// Ratio returns how many times smaller than the bf16 cache the cache is.
func (p Projection) Ratio() float64 { return float64(p.BF16) / float64(p.Bytes) }

// Project returns the cache's Projection at each of tokens under policy p
// (CacheBytes), the bf16 reference being the same blocks uncompressed.
func Project(p kvcache.Policy, m kvcache.Shape, bs int, tokens []int) ([]Projection, error) {
	ref := kvcache.Policy{HotBF16: true}
	out := make([]Projection, len(tokens))
	for i, n := range tokens {
		b, err := CacheBytes(p, m, bs, n)
		if err != nil {
			return nil, err
		}
		r, err := CacheBytes(ref, m, bs, n)
		if err != nil {
			return nil, err
		}
		out[i] = Projection{Tokens: n, Bytes: b, BF16: r}
	}
	return out, nil
}

// ProjectSpec builds the policy of s for a model of shape m (its layers,
// KV heads, head_dim and sliding windows) and the calibration cal
// (NewPolicy, the context the longest of tokens) and projects it at each
// of tokens (Project).
func ProjectSpec(s kvconfig.Spec, m kvcache.Shape, cal *codec.Calibration, tokens []int) ([]Projection, error) {
	for _, n := range tokens {
		m.MaxContext = max(m.MaxContext, n)
	}
	p, st, err := NewPolicy(s, m, cal)
	if err != nil {
		return nil, err
	}
	return Project(p, m, st.BlockSize, tokens)
}
