package arch

import "github.com/kakeya-ai/kakeya/weights"

// llama describes the Llama family (Llama 2/3, Mistral, SmolLM2, Qwen2,
// Qwen3): pre-norm layers, RMSNorm x̂·w, SwiGLU, one attention for every
// layer (Mistral's sliding window on all of them), queries scaled by
// 1/√head_dim, no softcaps. Biases and Qwen3's q/k norms are the
// checkpoint's tensors (weights' table), which the forward pass applies
// where they are.
func llama(c *weights.Config) *Description {
	return &Description{
		Family:    "llama",
		Act:       SiLU,
		Kinds:     []Attention{{Window: c.SlidingWindow, RopeTheta: c.RopeTheta, RopeScaling: c.RopeScaling}},
		LayerKind: uniform(c.NumLayers),
	}
}
