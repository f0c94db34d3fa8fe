// Package arch describes each decoder family the model package runs, one
// file per family (llama.go: Llama 2/3, Mistral, SmolLM2, Qwen2, Qwen3;
// gemma.go: Gemma 2 and Gemma 3), as a Description the generic forward
// pass (model/forward.go) reads top to bottom: how the embedding is
// scaled, how norms weigh and where they sit, the gated activation, each
// layer's attention (window, query scale, score softcap, RoPE), and the
// final logits' softcap. Which tensors a checkpoint holds is the weights
// package's table (weights/arch.go); how config.json's fields default is
// weights' Config.
//
// Adding a family: a file here with its Description, its row in
// families, its tensors in weights' table, and tests (see
// docs/architecture.md).
package arch

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/weights"
)

// Activation is a gated feed-forward's activation: down(act(gate(x)) *
// up(x)).
type Activation uint8

const (
	// SiLU is x·sigmoid(x): SwiGLU, the Llama family's.
	SiLU Activation = iota
	// GELUTanh is GELU's tanh approximation, 0.5·x·(1 + tanh(√(2/π)·(x +
	// 0.044715·x³))) (PyTorch's gelu approximate="tanh"): Gemma's GeGLU.
	GELUTanh
)

func (a Activation) String() string {
	if a == GELUTanh {
		return "gelu-tanh"
	}
	return "silu"
}

// Attention is the attention of one kind of layer.
type Attention struct {
	// Window limits each query to the Window newest keys up to its own
	// position (a sliding layer); 0 attends to every earlier key.
	Window int
	// Scale multiplies the scores q·k; 0 means 1/√head_dim.
	Scale float64
	// Softcap bounds the scores (after Scale) to (-Softcap, Softcap) by
	// Softcap·tanh(s/Softcap) before the softmax; 0: none.
	Softcap float64
	// RopeTheta and RopeScaling are the RoPE base and rescaling of the
	// layer's queries and keys.
	RopeTheta   float64
	RopeScaling *weights.RopeScaling
}

// Description is what the forward pass needs to know of a family beyond
// the tensors it loads.
type Description struct {
	// Family names the family in errors and logs ("llama", "gemma2",
	// "gemma3").
	Family string
	// EmbedScale multiplies the token embeddings (Gemma: √hidden_size,
	// rounded to float32); 0: none.
	EmbedScale float32
	// NormOffset is added to every RMSNorm weight as it loads: 1 for
	// Gemma's x̂·(1 + w), 0 for the Llama family's x̂·w.
	NormOffset float32
	// Sandwich says each layer also normalises the attention's output and
	// the MLP's output before adding them to the residual stream (Gemma's
	// post_attention_layernorm and post_feedforward_layernorm).
	Sandwich bool
	// Act is the feed-forward's gated activation.
	Act Activation
	// Kinds are the distinct attentions of the layers, LayerKind[i] the
	// index in Kinds of layer i's. Layers of one kind share a sequence's
	// attention and RoPE tables; the KV cache keeps a sliding kind's
	// blocks only while its window sees them.
	Kinds     []Attention
	LayerKind []int
	// FinalSoftcap bounds the logits to (-FinalSoftcap, FinalSoftcap) by
	// FinalSoftcap·tanh(z/FinalSoftcap); 0: none.
	FinalSoftcap float32
}

// Layer returns layer i's attention.
func (d *Description) Layer(i int) Attention { return d.Kinds[d.LayerKind[i]] }

// Plain reports whether d is the Llama family's arithmetic, every step of
// which a compute.Backend runs: no embedding scale, plain RMSNorm weights
// and positions, SiLU, default query scale, no softcap, one RoPE.
func (d *Description) Plain() bool {
	if d.EmbedScale != 0 || d.NormOffset != 0 || d.Sandwich || d.Act != SiLU || d.FinalSoftcap != 0 || len(d.Kinds) != 1 {
		return false
	}
	k := d.Kinds[0]
	return k.Scale == 0 && k.Softcap == 0
}

// Needs lists what d asks of a backend beyond the Llama family's
// operations (see compute.ArchOps), for an error naming them; empty when
// d is Plain.
func (d *Description) Needs() []string {
	var n []string
	if d.EmbedScale != 0 {
		n = append(n, "embedding scale")
	}
	if d.Act == GELUTanh {
		n = append(n, "GELU-tanh gating")
	}
	scale, soft, rope := false, false, len(d.Kinds) > 1
	for _, k := range d.Kinds {
		scale = scale || k.Scale != 0
		soft = soft || k.Softcap != 0
	}
	if scale {
		n = append(n, "attention query scale")
	}
	if soft {
		n = append(n, "attention logit softcap")
	}
	if rope {
		n = append(n, "per-layer attention (sliding and full layers, RoPE bases)")
	}
	if d.FinalSoftcap != 0 {
		n = append(n, "final logit softcap")
	}
	return n
}

// families maps config.json's model_type to its family's description.
var families = map[string]func(*weights.Config) *Description{
	"llama":       llama,
	"mistral":     llama,
	"qwen2":       llama,
	"qwen3":       llama,
	"gemma2":      gemma2,
	"gemma3_text": gemma3,
	"gemma3":      gemma3,
}

// Describe returns the description of cfg's family, with cfg's settings
// (windows, scales, RoPE bases) filled in. cfg has been validated.
func Describe(cfg *weights.Config) (*Description, error) {
	f, ok := families[cfg.ModelType]
	if !ok {
		return nil, fmt.Errorf("arch: no architecture for model_type %q", cfg.ModelType)
	}
	d := f(cfg)
	if len(d.LayerKind) != cfg.NumLayers {
		return nil, fmt.Errorf("arch: %s describes %d layers, config.json has num_hidden_layers=%d", d.Family, len(d.LayerKind), cfg.NumLayers)
	}
	return d, nil
}

// uniform returns LayerKind for n layers all of kind 0.
func uniform(n int) []int { return make([]int, n) }
