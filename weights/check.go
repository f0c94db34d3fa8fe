package weights

import (
	"fmt"
	"strconv"
	"strings"
)

// layerPrefix starts the name of every per-layer tensor of the supported
// architectures: "model.layers.N." followed by the tensor's own name.
const layerPrefix = "model.layers."

// dim is one expected tensor dimension and the config.json fields it comes
// from, for error messages.
type dim struct {
	n     int
	field string
}

// wantTensor is a tensor the configuration calls for; why, when set, says
// which setting requires it.
type wantTensor struct {
	name string
	dims []dim
	why  string
}

// CheckTensors checks the configuration against the tensors of an opened
// checkpoint. It reads only the safetensors headers and allocates nothing in
// proportion to the configuration's sizes, so a loader should call it right
// after Open and before it allocates per-layer or per-token structures: a
// config.json that does not describe the checkpoint (a wrong file, or absurd
// sizes) then fails with an error instead of exhausting memory.
//
// It checks, in this order, that the configuration is valid (see Validate);
// that the checkpoint holds exactly num_hidden_layers layers, numbered 0 to
// num_hidden_layers-1 (tensors named "model.layers.N.*"); that
// model.embed_tokens.weight is [vocab_size, hidden_size], as is
// lm_head.weight unless tie_word_embeddings is set, and model.norm.weight is
// [hidden_size]; and that every layer has the norm, attention and MLP
// tensors of a Llama-style decoder, with the biases (AttentionBias,
// OutputBias, MLPBias) and q/k norms (QKNorm) the configuration calls for,
// in the shapes that hidden_size, intermediate_size, num_attention_heads,
// num_key_value_heads and head_dim imply. Every one of those tensors must be
// F32, F16 or BF16. Other tensors (rotary buffers, say) are allowed.
//
// Errors name the checkpoint, the config.json fields with their values, and
// the tensor that disagrees with them.
func (c *Config) CheckTensors(s *Store) error {
	if s == nil {
		return fmt.Errorf("weights: CheckTensors: no store")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("weights: %s: "+format, append([]any{s.where}, args...)...)
	}
	if err := c.Validate(); err != nil {
		return fail("config.json: %v", err)
	}
	if err := c.checkLayerCount(s); err != nil {
		return fail("%v", err)
	}
	h := dim{c.HiddenSize, "hidden_size"}
	vocab := dim{c.VocabSize, "vocab_size"}
	want := []wantTensor{
		{name: "model.embed_tokens.weight", dims: []dim{vocab, h}},
		{name: "model.norm.weight", dims: []dim{h}},
	}
	if !c.TieWordEmbeddings {
		want = append(want, wantTensor{name: "lm_head.weight", dims: []dim{vocab, h}, why: "tie_word_embeddings is false"})
	}
	for _, w := range want {
		if err := checkTensor(s, w); err != nil {
			return fail("%v", err)
		}
	}
	for i := range c.NumLayers { // bounded by the checkpoint: checkLayerCount saw every layer
		for _, w := range c.layerTensors(i) {
			if err := checkTensor(s, w); err != nil {
				return fail("%v", err)
			}
		}
	}
	return nil
}

// checkLayerCount checks that the layers in the store are exactly 0 to
// NumLayers-1. The work is proportional to the number of tensors.
func (c *Config) checkLayerCount(s *Store) error {
	seen := make(map[int]bool)
	top, topName := -1, ""
	for name := range s.tensors {
		rest, ok := strings.CutPrefix(name, layerPrefix)
		if !ok {
			continue
		}
		num, _, ok := strings.Cut(rest, ".")
		if !ok || num == "" || strings.Trim(num, "0123456789") != "" {
			continue // not a layer tensor of any architecture we know
		}
		i, err := strconv.Atoi(num)
		if err != nil || len(num) > 9 { // too large for any real model
			return fmt.Errorf("config.json num_hidden_layers=%d, but the checkpoint has tensor %s", c.NumLayers, name)
		}
		seen[i] = true
		if i > top || (i == top && name < topName) {
			top, topName = i, name
		}
	}
	switch {
	case len(seen) == 0:
		return fmt.Errorf("config.json num_hidden_layers=%d, but the checkpoint has no %s* tensors", c.NumLayers, layerPrefix)
	case top >= c.NumLayers:
		return fmt.Errorf("config.json num_hidden_layers=%d, but the checkpoint has tensor %s (layer %d)", c.NumLayers, topName, top)
	case len(seen) <= top: // a gap; top < NumLayers, which Validate bounds
		for i := range top {
			if !seen[i] {
				return fmt.Errorf("config.json num_hidden_layers=%d, but the checkpoint has no tensors for layer %d (%s%d.*)",
					c.NumLayers, i, layerPrefix, i)
			}
		}
	case len(seen) < c.NumLayers:
		return fmt.Errorf("config.json num_hidden_layers=%d, but the checkpoint has tensors for only %d layers (%s0 to %s%d)",
			c.NumLayers, len(seen), layerPrefix, layerPrefix, top)
	}
	return nil // len(seen) == NumLayers and all are below it: exactly 0..NumLayers-1
}

// layerTensors lists the tensors layer i must have.
func (c *Config) layerTensors(i int) []wantTensor {
	h := dim{c.HiddenSize, "hidden_size"}
	ff := dim{c.IntermediateSize, "intermediate_size"}
	hd := dim{c.HeadDim, "head_dim"}
	q := dim{c.NumHeads * c.HeadDim, "num_attention_heads*head_dim"}
	kv := dim{c.NumKVHeads * c.HeadDim, "num_key_value_heads*head_dim"}
	p := layerPrefix + strconv.Itoa(i) + "."
	w := []wantTensor{
		{name: p + "input_layernorm.weight", dims: []dim{h}},
		{name: p + "post_attention_layernorm.weight", dims: []dim{h}},
		{name: p + "self_attn.q_proj.weight", dims: []dim{q, h}},
		{name: p + "self_attn.k_proj.weight", dims: []dim{kv, h}},
		{name: p + "self_attn.v_proj.weight", dims: []dim{kv, h}},
		{name: p + "self_attn.o_proj.weight", dims: []dim{h, q}},
		{name: p + "mlp.gate_proj.weight", dims: []dim{ff, h}},
		{name: p + "mlp.up_proj.weight", dims: []dim{ff, h}},
		{name: p + "mlp.down_proj.weight", dims: []dim{h, ff}},
	}
	if c.AttentionBias {
		why := "attention_bias is true"
		if c.ModelType == "qwen2" {
			why = "model_type qwen2 has q, k and v biases"
		}
		w = append(w,
			wantTensor{name: p + "self_attn.q_proj.bias", dims: []dim{q}, why: why},
			wantTensor{name: p + "self_attn.k_proj.bias", dims: []dim{kv}, why: why},
			wantTensor{name: p + "self_attn.v_proj.bias", dims: []dim{kv}, why: why})
	}
	if c.OutputBias {
		w = append(w, wantTensor{name: p + "self_attn.o_proj.bias", dims: []dim{h}, why: "attention_bias is true"})
	}
	if c.MLPBias {
		why := "mlp_bias is true"
		w = append(w,
			wantTensor{name: p + "mlp.gate_proj.bias", dims: []dim{ff}, why: why},
			wantTensor{name: p + "mlp.up_proj.bias", dims: []dim{ff}, why: why},
			wantTensor{name: p + "mlp.down_proj.bias", dims: []dim{h}, why: why})
	}
	if c.QKNorm {
		why := "model_type " + c.ModelType + " normalizes q and k"
		w = append(w,
			wantTensor{name: p + "self_attn.q_norm.weight", dims: []dim{hd}, why: why},
			wantTensor{name: p + "self_attn.k_norm.weight", dims: []dim{hd}, why: why})
	}
	return w
}

// checkTensor checks one expected tensor's presence, shape and dtype.
func checkTensor(s *Store, w wantTensor) error {
	e, ok := s.tensors[w.name]
	if !ok {
		if w.why != "" {
			return fmt.Errorf("tensor %s is missing (config.json: %s)", w.name, w.why)
		}
		return fmt.Errorf("tensor %s is missing", w.name)
	}
	same := len(e.info.shape) == len(w.dims)
	for i := 0; same && i < len(w.dims); i++ {
		same = e.info.shape[i] == w.dims[i].n
	}
	if !same {
		parts := make([]string, len(w.dims))
		for i, d := range w.dims {
			parts[i] = d.field + "=" + strconv.Itoa(d.n)
		}
		return fmt.Errorf("tensor %s has shape %v, but config.json implies [%s]", w.name, e.info.shape, strings.Join(parts, ", "))
	}
	if e.info.dtype == 0 {
		return fmt.Errorf("tensor %s has dtype %s (supported: F32, F16, BF16)", w.name, e.info.dtypeName)
	}
	return nil
}
