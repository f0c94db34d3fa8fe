package model

import (
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// CacheShape returns what kvplan.NewPolicy needs to know of the model: its
// layers, KV heads, head width, context length and, on a backend whose
// attention lets the cache release what slid out of a window
// (compute.SlidingKV), each layer's sliding window.
func (m *Model) CacheShape() kvcache.Shape {
	return kvcache.Shape{Layers: m.cfg.NumLayers, KVHeads: m.cfg.NumKVHeads, HeadDim: m.headDim, MaxContext: m.maxCtx, Windows: m.windows()}
}

// windows returns each layer's sliding window for the KV cache (Gemma's
// sliding layers, Mistral's every layer), on a backend whose attention
// lets the cache release what slid out; nil elsewhere, or when no layer
// slides. What the sliding layers encode meanwhile is the policy's choice
// (kvplan.Build: hot beside full layers, the codec's when all slide).
func (m *Model) windows() []int {
	if _, ok := m.b.(compute.SlidingKV); !ok {
		return nil
	}
	var w []int
	for i := range m.desc.LayerKind {
		if win := m.desc.Layer(i).Window; win > 0 {
			if w == nil {
				w = make([]int, len(m.desc.LayerKind))
			}
			w[i] = win
		}
	}
	return w
}

// PassTokens returns the most tokens one pass of Sequence.Forward appends
// to a sequence's cache: longer inputs are split into passes of it.
func (m *Model) PassTokens() int { return min(prefillChunk, m.maxCtx) }
