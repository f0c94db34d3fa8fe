package weights

import (
	"slices"
	"strings"
	"testing"
)

// TestGemmaConfig checks Gemma 2 and Gemma 3 config.json files against
// the settings transformers' Gemma2Config and Gemma3TextConfig give them.
func TestGemmaConfig(t *testing.T) {
	const sizes = `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4, "vocab_size": 256`
	S, F := SlidingAttention, FullAttention
	for _, tc := range []struct {
		name, json string
		check      func(c *Config) bool
		want       string
	}{
		{"gemma2 defaults", `{"model_type": "gemma2", ` + sizes + `}`, func(c *Config) bool {
			return c.HeadDim == 256 && c.NumKVHeads == 4 && c.SlidingWindow == 4096 && c.QueryPreAttnScalar == 256 &&
				c.AttnLogitSoftcap == 50 && c.FinalLogitSoftcap == 30 && c.RopeTheta == 1e4 && c.RopeLocalTheta == 0 &&
				c.TieWordEmbeddings && c.HiddenAct == "gelu_pytorch_tanh" && c.BOSTokenID == 2 &&
				slices.Equal(c.LayerTypes, []string{S, F, S, F, S, F}) && c.TensorPrefix == ""
		}, "Gemma2Config's defaults, every other layer sliding from the first"},
		{"gemma2 softcaps null", `{"model_type": "gemma2", "attn_logit_softcapping": null, "final_logit_softcapping": null, ` + sizes + `}`,
			func(c *Config) bool { return c.AttnLogitSoftcap == 0 && c.FinalLogitSoftcap == 0 }, "no softcaps"},
		{"gemma3_text defaults", `{"model_type": "gemma3_text", "sliding_window": 512, ` + sizes + `}`, func(c *Config) bool {
			return c.RopeTheta == 1e6 && c.RopeLocalTheta == 1e4 && c.AttnLogitSoftcap == 0 && c.FinalLogitSoftcap == 0 &&
				c.SlidingWindow == 512 && slices.Equal(c.LayerTypes, []string{S, S, S, S, S, F})
		}, "Gemma3TextConfig's defaults, five sliding layers to one full"},
		{"gemma3_text pattern", `{"model_type": "gemma3_text", "sliding_window_pattern": 3, "rope_local_base_freq": 5000, ` + sizes + `}`,
			func(c *Config) bool {
				return c.RopeLocalTheta == 5000 && slices.Equal(c.LayerTypes, []string{S, S, F, S, S, F})
			}, "sliding_window_pattern 3"},
		{"gemma3_text layer_types", `{"model_type": "gemma3_text", "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention"], ` + sizes + `}`,
			func(c *Config) bool { return slices.Equal(c.LayerTypes, []string{F, S, F, S, F, S}) }, "layer_types as given"},
		{"gemma3 multimodal", `{"model_type": "gemma3", "eos_token_id": [1, 106], "text_config": {"model_type": "gemma3_text", "rope_scaling": {"rope_type": "linear", "factor": 8.0}, ` + sizes + `}, "vision_config": {"hidden_size": 1152}}`,
			func(c *Config) bool {
				return c.TensorPrefix == "language_model." && c.ModelType == "gemma3" && slices.Equal(c.EOSTokenIDs, []int{1, 106}) &&
					c.RopeScaling != nil && c.RopeScaling.Factor == 8 && c.HiddenSize == 64 && c.NumLayers == 6
			}, "text_config's language model under language_model."},
		{"gemma3 text_config defaults", `{"model_type": "gemma3", "text_config": {"hidden_size": 2560, "num_hidden_layers": 34}}`,
			func(c *Config) bool {
				return c.HiddenSize == 2560 && c.NumLayers == 34 && c.IntermediateSize == 9216 && c.NumHeads == 8 && c.VocabSize == 262208
			}, "Gemma3TextConfig's sizes where text_config leaves them out"},
	} {
		c, err := ParseConfig([]byte(tc.json), "config.json")
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%s: want %s, got %+v", tc.name, tc.want, c)
		}
	}
}

// TestGemmaConfigErrors checks that Gemma settings the engine cannot run
// are refused with errors naming the field.
func TestGemmaConfigErrors(t *testing.T) {
	const sizes = `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256`
	for _, tc := range []struct{ name, json, want string }{
		{"no text_config", `{"model_type": "gemma3"}`, "model_type gemma3 without a text_config"},
		{"bad text_config", `{"model_type": "gemma3", "text_config": 3}`, "text_config"},
		{"null window", `{"model_type": "gemma2", "sliding_window": null, ` + sizes + `}`, "sliding_window is null"},
		{"zero window", `{"model_type": "gemma2", "sliding_window": 0, ` + sizes + `}`, "sliding_window=0 must be positive"},
		{"activation", `{"model_type": "gemma2", "hidden_activation": "relu", ` + sizes + `}`, `hidden_activation="relu" is not supported`},
		{"layer_types length", `{"model_type": "gemma3_text", "layer_types": ["full_attention"], ` + sizes + `}`, "layer_types has 1 entries, num_hidden_layers=2"},
		{"layer_types value", `{"model_type": "gemma3_text", "layer_types": ["full_attention", "chunked"], ` + sizes + `}`, `layer_types[1]="chunked"`},
		{"pattern", `{"model_type": "gemma3_text", "sliding_window_pattern": 0, ` + sizes + `}`, "sliding_window_pattern=0 must be positive"},
		{"query scalar", `{"model_type": "gemma2", "query_pre_attn_scalar": 0, ` + sizes + `}`, "query_pre_attn_scalar=0 must be positive"},
		{"softcap", `{"model_type": "gemma2", "attn_logit_softcapping": -1, ` + sizes + `}`, "attn_logit_softcapping=-1 must be positive"},
		{"softcap type", `{"model_type": "gemma2", "final_logit_softcapping": "x", ` + sizes + `}`, `final_logit_softcapping "x" is not a number`},
	} {
		_, err := ParseConfig([]byte(tc.json), "some/config.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "some/config.json") {
			t.Errorf("%s: error %v, want it to contain %q and the file name", tc.name, err, tc.want)
		}
	}
}
