package arch

import (
	"math"

	"github.com/kakeya-ai/kakeya/weights"
)

// Gemma 2 and Gemma 3 (transformers' modeling_gemma2.py and
// modeling_gemma3.py, text models):
//
//   - embeddings times √hidden_size;
//   - RMSNorm x̂·(1 + w), its weights stored as w;
//   - "sandwich" layers: x += norm(attn(norm(x))); x += norm(mlp(norm(x)));
//   - GeGLU: down(gelu_tanh(gate(x)) · up(x));
//   - sliding layers (window sliding_window) beside full ones, by
//     layer_types (Gemma 2: every other layer from the first; Gemma 3:
//     five sliding, then one full);
//   - scores scaled by query_pre_attn_scalar^-1/2, not head_dim's;
//   - Gemma 2: attention scores softcapped at attn_logit_softcapping (50)
//     and logits at final_logit_softcapping (30);
//   - Gemma 3: RMSNorm of each query and key head before RoPE (its
//     checkpoint's q_norm and k_norm), and RoPE base rope_local_base_freq
//     (1e4) on sliding layers, rope_theta (1e6, with rope_scaling) on full
//     ones.

// gemma2 describes Gemma 2.
func gemma2(c *weights.Config) *Description {
	d := gemma(c)
	d.Family = "gemma2"
	return d
}

// gemma3 describes Gemma 3's text model.
func gemma3(c *weights.Config) *Description {
	d := gemma(c)
	d.Family = "gemma3"
	return d
}

// gemma is what both share: a sliding kind (0) and a full kind (1), of
// the RoPE each has in c.
func gemma(c *weights.Config) *Description {
	scale := 1 / math.Sqrt(c.QueryPreAttnScalar)
	local := c.RopeLocalTheta
	if local == 0 {
		local = c.RopeTheta
	}
	var localScaling *weights.RopeScaling // sliding layers: plain RoPE in Gemma 3
	if c.ModelType == "gemma2" {
		localScaling = c.RopeScaling
	}
	d := &Description{
		EmbedScale: float32(math.Sqrt(float64(c.HiddenSize))),
		NormOffset: 1,
		Sandwich:   true,
		Act:        GELUTanh,
		Kinds: []Attention{
			{Window: c.SlidingWindow, Scale: scale, Softcap: c.AttnLogitSoftcap, RopeTheta: local, RopeScaling: localScaling},
			{Scale: scale, Softcap: c.AttnLogitSoftcap, RopeTheta: c.RopeTheta, RopeScaling: c.RopeScaling},
		},
		LayerKind:    make([]int, c.NumLayers),
		FinalSoftcap: float32(c.FinalLogitSoftcap),
	}
	for i := range d.LayerKind {
		if !c.Sliding(i) {
			d.LayerKind[i] = 1
		}
	}
	return d
}
