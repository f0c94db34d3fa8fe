package model

import (
	"github.com/kakeya-ai/kakeya/kvcache"
)

// CacheShape returns what kvplan.NewPolicy needs to know of the model: its
// layers, KV heads, head width and context length.
func (m *Model) CacheShape() kvcache.Shape {
	return kvcache.Shape{Layers: m.cfg.NumLayers, KVHeads: m.cfg.NumKVHeads, HeadDim: m.headDim, MaxContext: m.maxCtx}
}
