package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Gemma 2 and Gemma 3's part of config.json: the text model of a
// multimodal Gemma 3, the pattern of sliding and full layers, the query
// scale, the softcaps and the local layers' RoPE base, with the defaults
// of transformers' Gemma2Config and Gemma3TextConfig.

// Layer types of LayerTypes, as transformers names them.
const (
	SlidingAttention = "sliding_attention"
	FullAttention    = "full_attention"
)

// gemma3TextConfig replaces r, a multimodal Gemma 3 config.json
// (model_type gemma3), by its text_config, keeping the top level's token
// ids and dtype where text_config has none.
func gemma3TextConfig(r *rawConfig) error {
	if len(r.TextConfig) == 0 || isNull(r.TextConfig) {
		return errors.New("model_type gemma3 without a text_config: the language model's settings are missing")
	}
	var t rawConfig
	if err := json.Unmarshal(r.TextConfig, &t); err != nil {
		return fmt.Errorf("text_config: %v", err)
	}
	if t.BOSTokenID == nil {
		t.BOSTokenID = r.BOSTokenID
	}
	if t.EOSTokenID == nil {
		t.EOSTokenID = r.EOSTokenID
	}
	if t.PadTokenID == nil {
		t.PadTokenID = r.PadTokenID
	}
	if t.TorchDType == nil && t.DType == nil {
		t.TorchDType, t.DType = r.TorchDType, r.DType
	}
	if t.TieWordEmbeddings == nil {
		t.TieWordEmbeddings = r.TieWordEmbeddings
	}
	// transformers' Gemma3TextConfig defaults: a text_config may leave out
	// every size (the 4B's does), so these are its class's.
	def := func(p **int, v int) {
		if *p == nil {
			*p = &v
		}
	}
	def(&t.HiddenSize, 2304)
	def(&t.IntermediateSize, 9216)
	def(&t.NumLayers, 26)
	def(&t.NumHeads, 8)
	def(&t.VocabSize, 262208)
	mt := "gemma3"
	t.ModelType, t.Architectures = &mt, r.Architectures
	*r = t
	return nil
}

// setGemma sets the Gemma settings from r and the model_type's defaults.
func (c *Config) setGemma(r *rawConfig) error {
	c.HiddenAct = "gelu_pytorch_tanh"
	if r.HiddenActivation != nil {
		c.HiddenAct = *r.HiddenActivation
	}
	c.QueryPreAttnScalar = 256
	if r.QueryPreAttnScalar != nil {
		c.QueryPreAttnScalar = *r.QueryPreAttnScalar
	}
	gemma2 := c.ModelType == "gemma2"
	var err error
	if c.AttnLogitSoftcap, err = softcap("attn_logit_softcapping", r.AttnLogitSoftcap, gemma2, 50); err != nil {
		return err
	}
	if c.FinalLogitSoftcap, err = softcap("final_logit_softcapping", r.FinalLogitSoftcap, gemma2, 30); err != nil {
		return err
	}
	if !gemma2 {
		c.RopeLocalTheta = 10000
		if r.RopeLocalBaseFreq != nil {
			c.RopeLocalTheta = *r.RopeLocalBaseFreq
		}
	}
	// Which layers slide: layer_types where given, else the pattern of
	// the model_type (Gemma 2: every other layer from the first; Gemma 3:
	// five sliding layers, then a full one).
	if r.LayerTypes != nil {
		c.LayerTypes = r.LayerTypes
		return nil
	}
	pattern := 2
	if !gemma2 {
		pattern = 6
		if r.SlidingWindowPattern != nil {
			pattern = *r.SlidingWindowPattern
		}
	}
	if pattern <= 0 || pattern > maxLayers {
		return fmt.Errorf("sliding_window_pattern=%d must be positive", pattern)
	}
	if c.NumLayers <= 0 || c.NumLayers > maxLayers {
		return nil // Validate names num_hidden_layers
	}
	c.LayerTypes = make([]string, c.NumLayers)
	for i := range c.LayerTypes {
		c.LayerTypes[i] = SlidingAttention
		if (i+1)%pattern == 0 {
			c.LayerTypes[i] = FullAttention
		}
	}
	return nil
}

// softcap reads a softcap field: a positive number, null (none), or
// absent (def where the class has one).
func softcap(key string, m json.RawMessage, hasDefault bool, def float64) (float64, error) {
	switch {
	case len(m) == 0 && hasDefault:
		return def, nil
	case len(m) == 0 || isNull(m):
		return 0, nil
	}
	var v float64
	if err := json.Unmarshal(m, &v); err != nil {
		return 0, fmt.Errorf("%s %s is not a number", key, m)
	}
	return v, nil
}

// validateGemma checks the Gemma settings.
func (c *Config) validateGemma() error {
	if c.HiddenAct != "gelu_pytorch_tanh" && c.HiddenAct != "gelu_tanh" {
		return fmt.Errorf("hidden_activation=%q is not supported for model_type %s (supported: gelu_pytorch_tanh)", c.HiddenAct, c.ModelType)
	}
	if len(c.LayerTypes) != c.NumLayers {
		return fmt.Errorf("layer_types has %d entries, num_hidden_layers=%d", len(c.LayerTypes), c.NumLayers)
	}
	for i, t := range c.LayerTypes {
		if t != SlidingAttention && t != FullAttention {
			return fmt.Errorf("layer_types[%d]=%q (want %q or %q)", i, t, SlidingAttention, FullAttention)
		}
	}
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"query_pre_attn_scalar", c.QueryPreAttnScalar},
		{"attn_logit_softcapping", c.AttnLogitSoftcap},
		{"final_logit_softcapping", c.FinalLogitSoftcap},
		{"rope_local_base_freq", c.RopeLocalTheta},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) || (f.key == "query_pre_attn_scalar" && f.v == 0) {
			return fmt.Errorf("%s=%v must be positive and finite", f.key, f.v)
		}
	}
	if c.SlidingWindow <= 0 {
		return fmt.Errorf("sliding_window=%d must be positive for model_type %s", c.SlidingWindow, c.ModelType)
	}
	return nil
}

// Sliding reports whether layer i attends over a sliding window of
// SlidingWindow keys (every layer of a model with a window and no
// LayerTypes, as Mistral).
func (c *Config) Sliding(i int) bool {
	if c.SlidingWindow <= 0 {
		return false
	}
	if c.LayerTypes == nil {
		return true
	}
	return c.LayerTypes[i] == SlidingAttention
}
