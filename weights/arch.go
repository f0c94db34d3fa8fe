package weights

import (
	"strconv"
)

// A Role is what a tensor does in a decoder's forward pass.
type Role uint8

// The roles of the tensors of a Llama-family decoder. The model's own
// tensors come first, then those of every layer.
const (
	Embed     Role = iota + 1 // token embedding table, [vocab, hidden]
	FinalNorm                 // RMSNorm weight after the last layer
	LMHead                    // output head, absent with tied embeddings

	InputNorm // RMSNorm weight before attention
	Q         // query projection
	K         // key projection
	V         // value projection
	O         // attention output projection
	QBias     // query bias
	KBias     // key bias
	VBias     // value bias
	OBias     // output bias
	QNorm     // RMSNorm weight of each query head (Qwen3)
	KNorm     // RMSNorm weight of each key head (Qwen3)
	PostNorm  // RMSNorm weight before the MLP
	Gate      // MLP gate projection
	Up        // MLP up projection
	Down      // MLP down projection
	GateBias  // MLP gate bias
	UpBias    // MLP up bias
	DownBias  // MLP down bias

	AttnOutNorm // RMSNorm weight of the attention's output (Gemma's post_attention_layernorm)
	FFNOutNorm  // RMSNorm weight of the MLP's output (Gemma's post_feedforward_layernorm)
)

// A Dim is one dimension of a tensor and the config.json fields it comes
// from, for error messages.
type Dim struct {
	N     int
	Field string
}

// A TensorSpec is one tensor a checkpoint of a configuration holds: what
// it does, its safetensors name and the shape config.json implies.
type TensorSpec struct {
	Role  Role
	Layer int // the decoder layer, -1 for the model's own tensors
	Name  string
	// GGUF is the tensor's name in a GGUF file (llama.cpp's), e.g.
	// "blk.3.attn_q.weight".
	GGUF string
	Dims []Dim
	// Why, for a tensor only some configurations have, names the setting
	// that calls for it.
	Why string
}

// Shape returns the tensor's dimensions.
func (t TensorSpec) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[i] = d.N
	}
	return s
}

// layerPrefix starts the name of every per-layer tensor of the supported
// architectures: "model.layers.N." followed by the tensor's own name.
const layerPrefix = "model.layers."

// layerPrefix returns the start of c's layer tensors' names: layerPrefix
// after the checkpoint's TensorPrefix.
func (c *Config) layerPrefix() string { return c.TensorPrefix + layerPrefix }

// dimOf names the sizes a tensor's dimensions are made of.
type dimOf uint8

const (
	hidden dimOf = iota
	inter
	vocab
	headDim
	qDim  // num_attention_heads*head_dim
	kvDim // num_key_value_heads*head_dim
)

func (c *Config) dim(d dimOf) Dim {
	switch d {
	case hidden:
		return Dim{c.HiddenSize, "hidden_size"}
	case inter:
		return Dim{c.IntermediateSize, "intermediate_size"}
	case vocab:
		return Dim{c.VocabSize, "vocab_size"}
	case headDim:
		return Dim{c.HeadDim, "head_dim"}
	case qDim:
		return Dim{c.NumHeads * c.HeadDim, "num_attention_heads*head_dim"}
	}
	return Dim{c.NumKVHeads * c.HeadDim, "num_key_value_heads*head_dim"}
}

// A row of an architecture's table: one tensor, its shape, and when it is
// present (need nil: always).
type row struct {
	role Role
	name string // below "model.layers.N." for a layer's tensor
	gguf string // llama.cpp's name, below "blk.N." for a layer's tensor
	dims []dimOf
	need func(c *Config) (bool, string) // present, and why
}

// modelRows are the tensors outside the layers, the same in every
// supported architecture.
func modelRows() []row {
	return []row{
		{Embed, "model.embed_tokens.weight", "token_embd.weight", []dimOf{vocab, hidden}, nil},
		{FinalNorm, "model.norm.weight", "output_norm.weight", []dimOf{hidden}, nil},
		{LMHead, "lm_head.weight", "output.weight", []dimOf{vocab, hidden}, func(c *Config) (bool, string) {
			return !c.TieWordEmbeddings, "tie_word_embeddings is false"
		}},
	}
}

// llamaLayer is the decoder layer every supported architecture shares:
// pre-norm attention and a SwiGLU MLP, without biases.
func llamaLayer() []row {
	return []row{
		{InputNorm, "input_layernorm.weight", "attn_norm.weight", []dimOf{hidden}, nil},
		{Q, "self_attn.q_proj.weight", "attn_q.weight", []dimOf{qDim, hidden}, nil},
		{K, "self_attn.k_proj.weight", "attn_k.weight", []dimOf{kvDim, hidden}, nil},
		{V, "self_attn.v_proj.weight", "attn_v.weight", []dimOf{kvDim, hidden}, nil},
		{O, "self_attn.o_proj.weight", "attn_output.weight", []dimOf{hidden, qDim}, nil},
		{PostNorm, "post_attention_layernorm.weight", "ffn_norm.weight", []dimOf{hidden}, nil},
		{Gate, "mlp.gate_proj.weight", "ffn_gate.weight", []dimOf{inter, hidden}, nil},
		{Up, "mlp.up_proj.weight", "ffn_up.weight", []dimOf{inter, hidden}, nil},
		{Down, "mlp.down_proj.weight", "ffn_down.weight", []dimOf{hidden, inter}, nil},
	}
}

// qkvBias are the q, k and v biases: Qwen2 always has them, Llama,
// Mistral and Qwen3 with attention_bias.
func qkvBias(why func(c *Config) string) []row {
	need := func(c *Config) (bool, string) { return c.AttentionBias, why(c) }
	return []row{
		{QBias, "self_attn.q_proj.bias", "attn_q.bias", []dimOf{qDim}, need},
		{KBias, "self_attn.k_proj.bias", "attn_k.bias", []dimOf{kvDim}, need},
		{VBias, "self_attn.v_proj.bias", "attn_v.bias", []dimOf{kvDim}, need},
	}
}

// optionalBiases are the output and MLP biases Llama's attention_bias and
// mlp_bias turn on.
func optionalBiases() []row {
	mlp := func(c *Config) (bool, string) { return c.MLPBias, "mlp_bias is true" }
	return []row{
		{OBias, "self_attn.o_proj.bias", "attn_output.bias", []dimOf{hidden}, func(c *Config) (bool, string) { return c.OutputBias, "attention_bias is true" }},
		{GateBias, "mlp.gate_proj.bias", "ffn_gate.bias", []dimOf{inter}, mlp},
		{UpBias, "mlp.up_proj.bias", "ffn_up.bias", []dimOf{inter}, mlp},
		{DownBias, "mlp.down_proj.bias", "ffn_down.bias", []dimOf{hidden}, mlp},
	}
}

// gemmaLayer is Gemma 2 and Gemma 3's decoder layer: "sandwich" norms
// before and after both attention and the MLP, a gated MLP, no biases,
// and (Gemma 3) RMSNorm of each query and key head. Gemma's
// post_attention_layernorm normalises the attention's output, and its
// pre_feedforward_layernorm is the MLP's input norm, the role a Llama
// layer's post_attention_layernorm has.
func gemmaLayer(modelType string) []row {
	t := []row{
		{InputNorm, "input_layernorm.weight", "attn_norm.weight", []dimOf{hidden}, nil},
		{Q, "self_attn.q_proj.weight", "attn_q.weight", []dimOf{qDim, hidden}, nil},
		{K, "self_attn.k_proj.weight", "attn_k.weight", []dimOf{kvDim, hidden}, nil},
		{V, "self_attn.v_proj.weight", "attn_v.weight", []dimOf{kvDim, hidden}, nil},
		{O, "self_attn.o_proj.weight", "attn_output.weight", []dimOf{hidden, qDim}, nil},
		{AttnOutNorm, "post_attention_layernorm.weight", "post_attention_norm.weight", []dimOf{hidden}, nil},
		{PostNorm, "pre_feedforward_layernorm.weight", "ffn_norm.weight", []dimOf{hidden}, nil},
		{Gate, "mlp.gate_proj.weight", "ffn_gate.weight", []dimOf{inter, hidden}, nil},
		{Up, "mlp.up_proj.weight", "ffn_up.weight", []dimOf{inter, hidden}, nil},
		{Down, "mlp.down_proj.weight", "ffn_down.weight", []dimOf{hidden, inter}, nil},
		{FFNOutNorm, "post_feedforward_layernorm.weight", "post_ffw_norm.weight", []dimOf{hidden}, nil},
	}
	if modelType != "gemma2" {
		t = append(t, row{QNorm, "self_attn.q_norm.weight", "attn_q_norm.weight", []dimOf{headDim}, nil},
			row{KNorm, "self_attn.k_norm.weight", "attn_k_norm.weight", []dimOf{headDim}, nil})
	}
	return t
}

// layerTable returns the tensor table of one decoder layer of a
// model_type: the one place that says which tensors each architecture's
// layers hold, read by CheckTensors and by the model's loader.
func layerTable(modelType string) []row {
	attentionBias := func(*Config) string { return "attention_bias is true" }
	if IsGemma(modelType) {
		return gemmaLayer(modelType)
	}
	t := llamaLayer()
	switch modelType {
	case "qwen2":
		// Qwen2 and Qwen2.5: biases on q, k and v (config.go sets
		// AttentionBias for them), none elsewhere.
		t = append(t, qkvBias(func(*Config) string { return "model_type qwen2 has q, k and v biases" })...)
	case "qwen3":
		// Qwen3: RMSNorm of each query and key head before RoPE; biases
		// only with attention_bias.
		qk := func(c *Config) (bool, string) { return c.QKNorm, "model_type " + c.ModelType + " normalizes q and k" }
		t = append(t, row{QNorm, "self_attn.q_norm.weight", "attn_q_norm.weight", []dimOf{headDim}, qk}, row{KNorm, "self_attn.k_norm.weight", "attn_k_norm.weight", []dimOf{headDim}, qk})
		t = append(t, qkvBias(attentionBias)...)
		t = append(t, optionalBiases()...)
	default:
		// Llama 2/3, Mistral, SmolLM2: biases as attention_bias and
		// mlp_bias say.
		t = append(t, qkvBias(attentionBias)...)
		t = append(t, optionalBiases()...)
	}
	return t
}

// spec makes the TensorSpec of a row that c needs; ok is false when c
// does not have it.
func (c *Config) spec(r row, layer int, name, gguf string) (t TensorSpec, ok bool) {
	t = TensorSpec{Role: r.role, Layer: layer, Name: name, GGUF: gguf}
	if r.need != nil {
		if ok, t.Why = r.need(c); !ok {
			return t, false
		}
	}
	for _, d := range r.dims {
		t.Dims = append(t.Dims, c.dim(d))
	}
	return t, true
}

// ModelTensors returns the tensors outside the layers that the checkpoint
// of c holds: the embedding table, the final norm and, unless the
// embeddings are tied, the output head.
func (c *Config) ModelTensors() []TensorSpec {
	var ts []TensorSpec
	for _, r := range modelRows() {
		if t, ok := c.spec(r, -1, c.TensorPrefix+r.name, r.gguf); ok {
			ts = append(ts, t)
		}
	}
	return ts
}

// LayerTensors returns the tensors layer i of a checkpoint of c holds, as
// c's model_type and settings (biases, q/k norms) call for them.
func (c *Config) LayerTensors(i int) []TensorSpec {
	p := c.layerPrefix() + strconv.Itoa(i) + "."
	g := "blk." + strconv.Itoa(i) + "."
	var ts []TensorSpec
	for _, r := range layerTable(c.ModelType) {
		if t, ok := c.spec(r, i, p+r.name, g+r.gguf); ok {
			ts = append(ts, t)
		}
	}
	return ts
}
