package weights

import (
	"fmt"
	"strconv"
	"strings"
)

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
	for _, w := range c.ModelTensors() {
		if err := checkTensor(s, w); err != nil {
			return fail("%v", err)
		}
	}
	for i := range c.NumLayers { // bounded by the checkpoint: checkLayerCount saw every layer
		for _, w := range c.LayerTensors(i) {
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
	layerPrefix := c.layerPrefix()
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

// checkTensor checks one expected tensor's presence, shape and dtype.
func checkTensor(s *Store, w TensorSpec) error {
	e, ok := s.tensors[w.Name]
	if !ok {
		if w.Why != "" {
			return fmt.Errorf("tensor %s is missing (config.json: %s)", w.Name, w.Why)
		}
		return fmt.Errorf("tensor %s is missing", w.Name)
	}
	same := len(e.info.shape) == len(w.Dims)
	for i := 0; same && i < len(w.Dims); i++ {
		same = e.info.shape[i] == w.Dims[i].N
	}
	if !same {
		parts := make([]string, len(w.Dims))
		for i, d := range w.Dims {
			parts[i] = d.Field + "=" + strconv.Itoa(d.N)
		}
		return fmt.Errorf("tensor %s has shape %v, but config.json implies [%s]", w.Name, e.info.shape, strings.Join(parts, ", "))
	}
	if e.info.dtype == 0 {
		return fmt.Errorf("tensor %s has dtype %s (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)", w.Name, e.info.dtypeName)
	}
	return nil
}
