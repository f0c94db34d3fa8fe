package weights

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// Real config.json files as published on the Hugging Face Hub.
const (
	qwen25_05B = `{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 151936
}`
	llama32_1B = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`
	llama32_1B_Instruct_EOS = `"eos_token_id": [128001, 128008, 128009]`
	mistral7Bv01            = `{
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}`
	qwen3_06B = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`
	smolLM2_135M = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "eos_token_id": 0,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.041666666666666664,
  "intermediate_size": 1536,
  "is_llama_config": true,
  "max_position_embeddings": 8192,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_interleaved": false,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 49152
}`
)

func TestParseConfigRealModels(t *testing.T) {
	cases := []struct {
		name string
		json string
		want Config
	}{
		{"Qwen2.5-0.5B", qwen25_05B, Config{
			ModelType: "qwen2", Architectures: []string{"Qwen2ForCausalLM"},
			HiddenSize: 896, IntermediateSize: 4864, NumLayers: 24, NumHeads: 14, NumKVHeads: 2, HeadDim: 64,
			VocabSize: 151936, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6,
			TieWordEmbeddings: true, AttentionBias: true, HiddenAct: "silu",
			BOSTokenID: 151643, EOSTokenIDs: []int{151643}, PadTokenID: -1, TorchDType: "bfloat16",
		}},
		{"Llama-3.2-1B", llama32_1B, Config{
			ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
			HiddenSize: 2048, IntermediateSize: 8192, NumLayers: 16, NumHeads: 32, NumKVHeads: 8, HeadDim: 64,
			VocabSize: 128256, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling:       &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			TieWordEmbeddings: true, HiddenAct: "silu",
			BOSTokenID: 128000, EOSTokenIDs: []int{128001}, PadTokenID: -1, TorchDType: "bfloat16",
		}},
		{"Llama-3.2-1B-Instruct eos list", strings.Replace(llama32_1B, `"eos_token_id": 128001`, llama32_1B_Instruct_EOS, 1), Config{
			ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
			HiddenSize: 2048, IntermediateSize: 8192, NumLayers: 16, NumHeads: 32, NumKVHeads: 8, HeadDim: 64,
			VocabSize: 128256, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling:       &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			TieWordEmbeddings: true, HiddenAct: "silu",
			BOSTokenID: 128000, EOSTokenIDs: []int{128001, 128008, 128009}, PadTokenID: -1, TorchDType: "bfloat16",
		}},
		{"Mistral-7B-v0.1", mistral7Bv01, Config{
			ModelType: "mistral", Architectures: []string{"MistralForCausalLM"},
			HiddenSize: 4096, IntermediateSize: 14336, NumLayers: 32, NumHeads: 32, NumKVHeads: 8, HeadDim: 128,
			VocabSize: 32000, MaxPositionEmbeddings: 32768, RMSNormEps: 1e-5, RopeTheta: 10000,
			HiddenAct: "silu", SlidingWindow: 4096,
			BOSTokenID: 1, EOSTokenIDs: []int{2}, PadTokenID: -1, TorchDType: "bfloat16",
		}},
		{"Qwen3-0.6B", qwen3_06B, Config{
			ModelType: "qwen3", Architectures: []string{"Qwen3ForCausalLM"},
			HiddenSize: 1024, IntermediateSize: 3072, NumLayers: 28, NumHeads: 16, NumKVHeads: 8, HeadDim: 128,
			VocabSize: 151936, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, RopeTheta: 1e6,
			TieWordEmbeddings: true, QKNorm: true, HiddenAct: "silu",
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}, PadTokenID: -1, TorchDType: "bfloat16",
		}},
		{"SmolLM2-135M", smolLM2_135M, Config{
			ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
			HiddenSize: 576, IntermediateSize: 1536, NumLayers: 30, NumHeads: 9, NumKVHeads: 3, HeadDim: 64,
			VocabSize: 49152, MaxPositionEmbeddings: 8192, RMSNormEps: 1e-5, RopeTheta: 100000,
			TieWordEmbeddings: true, HiddenAct: "silu",
			BOSTokenID: 0, EOSTokenIDs: []int{0}, PadTokenID: -1, TorchDType: "bfloat16",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(c.json), c.name+"/config.json")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, c.want) {
				t.Errorf("got  %+v\nwant %+v", *got, c.want)
			}
		})
	}
}

func TestLoadConfigStories260K(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	got, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
		HiddenSize: 64, IntermediateSize: 172, NumLayers: 5, NumHeads: 8, NumKVHeads: 4, HeadDim: 8,
		VocabSize: 512, MaxPositionEmbeddings: 512, RMSNormEps: 1e-5, RopeTheta: 10000,
		TieWordEmbeddings: true, HiddenAct: "silu",
		BOSTokenID: 1, EOSTokenIDs: []int{2}, PadTokenID: -1, TorchDType: "float32",
		Generation: &GenerationConfig{BOSTokenID: 1, EOSTokenIDs: []int{2}, PadTokenID: -1},
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got  %+v\nwant %+v", *got, want)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	base := `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 100`
	cases := []struct {
		name  string
		json  string
		check func(t *testing.T, c *Config)
	}{
		{"llama minimal", `{"model_type": "llama", ` + base + `}`, func(t *testing.T, c *Config) {
			if c.NumKVHeads != 8 || c.HeadDim != 8 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 ||
				c.TieWordEmbeddings || c.AttentionBias || c.OutputBias || c.MLPBias || c.QKNorm ||
				c.MaxPositionEmbeddings != 2048 || c.BOSTokenID != 1 || !reflect.DeepEqual(c.EOSTokenIDs, []int{2}) ||
				c.RopeScaling != nil || c.SlidingWindow != 0 || c.HiddenAct != "silu" {
				t.Errorf("defaults: %+v", *c)
			}
		}},
		{"llama biases", `{"model_type": "llama", "attention_bias": true, "mlp_bias": true, ` + base + `}`, func(t *testing.T, c *Config) {
			if !c.AttentionBias || !c.OutputBias || !c.MLPBias {
				t.Errorf("biases: %+v", *c)
			}
		}},
		{"qwen2 minimal", `{"model_type": "qwen2", "num_key_value_heads": 2, ` + base + `}`, func(t *testing.T, c *Config) {
			if !c.AttentionBias || c.OutputBias || c.BOSTokenID != -1 || c.EOSTokenIDs != nil || c.MaxPositionEmbeddings != 32768 {
				t.Errorf("qwen2 defaults: %+v", *c)
			}
		}},
		{"qwen3 head_dim default 128", `{"model_type": "qwen3", "num_key_value_heads": 4, ` + base + `}`, func(t *testing.T, c *Config) {
			if c.HeadDim != 128 || !c.QKNorm || c.AttentionBias {
				t.Errorf("qwen3 defaults: %+v", *c)
			}
		}},
		{"qwen3 attention_bias covers o_proj", `{"model_type": "qwen3", "num_key_value_heads": 4, "attention_bias": true, ` + base + `}`, func(t *testing.T, c *Config) {
			if !c.AttentionBias || !c.OutputBias {
				t.Errorf("qwen3 bias: %+v", *c)
			}
		}},
		{"mistral kv heads default 8, window 4096", `{"model_type": "mistral", ` + base + `}`, func(t *testing.T, c *Config) {
			if c.NumKVHeads != 8 || c.SlidingWindow != 4096 || c.MaxPositionEmbeddings != 131072 {
				t.Errorf("mistral defaults: %+v", *c)
			}
		}},
		{"mistral null window", `{"model_type": "mistral", "sliding_window": null, ` + base + `}`, func(t *testing.T, c *Config) {
			if c.SlidingWindow != 0 {
				t.Errorf("SlidingWindow = %d, want 0", c.SlidingWindow)
			}
		}},
		{"null bos and eos", `{"model_type": "llama", "bos_token_id": null, "eos_token_id": null, ` + base + `}`, func(t *testing.T, c *Config) {
			if c.BOSTokenID != -1 || c.EOSTokenIDs != nil {
				t.Errorf("bos %d eos %v", c.BOSTokenID, c.EOSTokenIDs)
			}
		}},
		{"linear scaling, old type key", `{"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}, ` + base + `}`, func(t *testing.T, c *Config) {
			if !reflect.DeepEqual(c.RopeScaling, &RopeScaling{Type: "linear", Factor: 2}) {
				t.Errorf("RopeScaling = %+v", c.RopeScaling)
			}
		}},
		{"default rope_type is none", `{"model_type": "llama", "rope_scaling": {"rope_type": "default"}, ` + base + `}`, func(t *testing.T, c *Config) {
			if c.RopeScaling != nil {
				t.Errorf("RopeScaling = %+v", c.RopeScaling)
			}
		}},
		{"transformers 5 rope_parameters and dtype", `{"model_type": "llama", "dtype": "bfloat16", "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 250000.0}, ` + base + `}`, func(t *testing.T, c *Config) {
			if c.RopeTheta != 250000 || !reflect.DeepEqual(c.RopeScaling, &RopeScaling{Type: "linear", Factor: 4}) || c.TorchDType != "bfloat16" {
				t.Errorf("theta %v scaling %+v dtype %q", c.RopeTheta, c.RopeScaling, c.TorchDType)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(c.json), "config.json")
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, got)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 100`
	cases := []struct {
		name, json, want string
	}{
		{"invalid json", `{"model_type": "llama",`, "invalid JSON"},
		{"no model_type", `{` + base + `}`, `missing field "model_type"`},
		{"unsupported model_type", `{"model_type": "gpt2", ` + base + `}`, `unsupported model_type "gpt2" (supported: llama, mistral, qwen2, qwen3, gemma2, gemma3_text, gemma3)`},
		{"missing hidden_size", `{"model_type": "llama", "num_attention_heads": 8, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 100}`, `missing field "hidden_size"`},
		{"heads do not divide hidden", `{"model_type": "llama", "num_attention_heads": 7, ` + base + `}`, "hidden_size=64 is not a multiple of num_attention_heads=7"},
		{"kv heads do not divide heads", `{"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 3, ` + base + `}`, "num_attention_heads=8 is not a multiple of num_key_value_heads=3"},
		{"zero layers", `{"model_type": "llama", "num_attention_heads": 8, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 0, "vocab_size": 100}`, "num_hidden_layers=0 must be positive"},
		{"zero heads", `{"model_type": "llama", "num_attention_heads": 0, ` + base + `}`, "not a multiple of num_attention_heads=0"},
		{"negative vocab", `{"model_type": "llama", "num_attention_heads": 8, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": -5}`, "vocab_size=-5 must be positive"},
		{"odd head_dim", `{"model_type": "llama", "num_attention_heads": 8, "head_dim": 7, ` + base + `}`, "head_dim=7 must be even"},
		{"bad eps", `{"model_type": "llama", "num_attention_heads": 8, "rms_norm_eps": 0, ` + base + `}`, "rms_norm_eps=0 must be positive"},
		{"bad theta", `{"model_type": "llama", "num_attention_heads": 8, "rope_theta": -1, ` + base + `}`, "rope_theta=-1 must be positive"},
		{"gelu", `{"model_type": "llama", "num_attention_heads": 8, "hidden_act": "gelu", ` + base + `}`, `hidden_act="gelu" is not supported`},
		{"dynamic rope", `{"model_type": "llama", "num_attention_heads": 8, "rope_scaling": {"type": "dynamic", "factor": 2.0}, ` + base + `}`, `unsupported rope_scaling type "dynamic" (supported: linear, llama3)`},
		{"yarn rope", `{"model_type": "qwen2", "num_attention_heads": 8, "num_key_value_heads": 2, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, ` + base + `}`, `unsupported rope_scaling type "yarn"`},
		{"rope without type", `{"model_type": "llama", "num_attention_heads": 8, "rope_scaling": {"factor": 2.0}, ` + base + `}`, "names no rope_type"},
		{"llama3 without factors", `{"model_type": "llama", "num_attention_heads": 8, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, ` + base + `}`, `needs "low_freq_factor"`},
		{"llama3 low >= high", `{"model_type": "llama", "num_attention_heads": 8, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 8192}, ` + base + `}`, "need 0 < low < high"},
		{"linear zero factor", `{"model_type": "llama", "num_attention_heads": 8, "rope_scaling": {"type": "linear", "factor": 0}, ` + base + `}`, "rope_scaling.factor=0 must be positive"},
		{"eos string", `{"model_type": "llama", "num_attention_heads": 8, "eos_token_id": "2", ` + base + `}`, `eos_token_id "2": want an integer or a list of integers`},
		{"negative eos", `{"model_type": "llama", "num_attention_heads": 8, "eos_token_id": [2, -1], ` + base + `}`, "eos_token_id[1]=-1 must not be negative (vocab_size=100: token ids run 0..99)"},
		{"bos list", `{"model_type": "llama", "num_attention_heads": 8, "bos_token_id": [1], ` + base + `}`, "bos_token_id [1] is not an integer"},
		{"qwen2 sliding", `{"model_type": "qwen2", "num_attention_heads": 8, "num_key_value_heads": 2, "use_sliding_window": true, ` + base + `}`, `use_sliding_window=true is not supported for model_type "qwen2"`},
		{"sliding string", `{"model_type": "mistral", "num_attention_heads": 8, "sliding_window": "4096", ` + base + `}`, `sliding_window "4096" is not an integer`},
		{"negative window", `{"model_type": "mistral", "num_attention_heads": 8, "sliding_window": -1, ` + base + `}`, "sliding_window=-1 must not be negative"},
		{"wrong type", `{"model_type": "llama", "num_attention_heads": "8", ` + base + `}`, "invalid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.json), "some/dir/config.json")
			if err == nil {
				t.Fatalf("ParseConfig succeeded, want error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "some/dir/config.json") {
				t.Errorf("error = %q, want it to contain %q and the file name", err, c.want)
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadConfig(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config.json")) {
		t.Errorf("error = %v, want it to name the missing file", err)
	}
}

func TestParseConfigSizeBounds(t *testing.T) {
	// An explicit head_dim keeps hidden_size and the head counts independent.
	base := map[string]any{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
		"num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 8, "vocab_size": 100}
	cases := []struct {
		name string
		set  map[string]any
		want string // "" for success
	}{
		{"layers at bound", map[string]any{"num_hidden_layers": 1024}, ""},
		{"layers absurd", map[string]any{"num_hidden_layers": 1000000000}, "num_hidden_layers=1000000000 is implausibly large (at most 1024 supported)"},
		{"layers beyond int", map[string]any{"num_hidden_layers": 1e20}, "invalid JSON"},
		{"hidden at bound", map[string]any{"hidden_size": 65536}, ""},
		{"hidden over", map[string]any{"hidden_size": 65537}, "hidden_size=65537 is implausibly large (at most 65536 supported)"},
		{"intermediate at bound", map[string]any{"intermediate_size": 262144}, ""},
		{"intermediate over", map[string]any{"intermediate_size": 262145}, "intermediate_size=262145 is implausibly large"},
		{"heads at bound", map[string]any{"num_attention_heads": 1024, "num_key_value_heads": 1024}, ""},
		{"heads over", map[string]any{"num_attention_heads": 2048}, "num_attention_heads=2048 is implausibly large"},
		{"kv heads over", map[string]any{"num_key_value_heads": 1 << 30}, "num_key_value_heads=1073741824 is implausibly large"},
		{"head_dim at bound", map[string]any{"head_dim": 1024}, ""},
		{"head_dim over", map[string]any{"head_dim": 1026}, "head_dim=1026 is implausibly large"},
		{"derived head_dim over", map[string]any{"head_dim": nil, "hidden_size": 16384, "num_attention_heads": 8}, "head_dim=2048 is implausibly large"},
		{"vocab at bound", map[string]any{"vocab_size": 1 << 22}, ""},
		{"vocab over", map[string]any{"vocab_size": 1<<22 + 1}, "vocab_size=4194305 is implausibly large"},
		{"positions at bound", map[string]any{"max_position_embeddings": 1 << 24}, ""},
		{"positions over", map[string]any{"max_position_embeddings": 1 << 40}, "max_position_embeddings=1099511627776 is implausibly large"},
		{"llama3 original positions over", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0,
			"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 1 << 25}},
			"rope_scaling.original_max_position_embeddings=33554432 must be positive and at most 16777216"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := maps.Clone(base)
			for k, v := range c.set {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ParseConfig(b, "big/config.json")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("ParseConfig: %v", err)
			case c.want == "":
				if err := cfg.Validate(); err != nil {
					t.Errorf("Validate after ParseConfig: %v", err)
				}
			case err == nil:
				t.Fatalf("ParseConfig succeeded, want error containing %q", c.want)
			case !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "big/config.json"):
				t.Errorf("error = %q, want it to contain %q and the file name", err, c.want)
			}
		})
	}
}

// FuzzParseConfig feeds ParseConfig arbitrary config.json content, starting
// from the real and variant configs in testdata/fuzz/FuzzParseConfig. It must
// never panic, and must either fail with an error naming the file or return a
// configuration that passes Validate, whose sizes are therefore bounded and
// whose token ids are rows of vocab_size, and that CheckTensors safely
// rejects for an empty checkpoint.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(tinyConfig))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "fuzz/config.json")
		if err != nil {
			if c != nil {
				t.Errorf("ParseConfig returned a config with error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "weights: fuzz/config.json: ") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config that fails Validate: %v", err)
		}
		if c.NumLayers > maxLayers || c.HiddenSize > maxHiddenSize || c.VocabSize > maxVocabSize ||
			c.NumHeads*c.HeadDim > maxHeads*maxHeadDim || c.MaxPositionEmbeddings > maxPositions {
			t.Fatalf("sizes beyond the bounds passed: %+v", *c)
		}
		// Token ids index the embedding: none may fall outside it.
		for _, id := range append([]int{c.BOSTokenID, c.PadTokenID}, c.EOSTokenIDs...) {
			if id < -1 || id >= c.VocabSize {
				t.Fatalf("token id %d outside vocab_size %d passed: %+v", id, c.VocabSize, *c)
			}
		}
		for _, id := range c.EOSTokenIDs {
			if id < 0 {
				t.Fatalf("eos_token_id %d passed", id)
			}
		}
		empty := &Store{where: "empty", tensors: map[string]entry{}}
		if err := c.CheckTensors(empty); err == nil {
			t.Fatal("CheckTensors accepted an empty checkpoint")
		}
	})
}

// Every token id of config.json and generation_config.json must be a row of
// config.json's vocab_size; errors name the file, the field, the value and
// the vocabulary size.
func TestTokenIDsInVocabulary(t *testing.T) {
	const base = `"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 512`
	cases := []struct {
		name, config, generation string
		want                     string // "" for success
	}{
		{"ids in range", `"bos_token_id": 1, "eos_token_id": [2, 511], "pad_token_id": 0`, `{"bos_token_id": 1, "eos_token_id": [2, 511], "pad_token_id": 0}`, ""},
		{"null and -1 ids are none", `"bos_token_id": null, "eos_token_id": null, "pad_token_id": -1`, `{"bos_token_id": -1, "pad_token_id": null, "temperature": 0.7}`, ""},
		{"no generation_config.json", `"eos_token_id": 2`, "", ""},
		{"eos out of range", `"eos_token_id": 99999`, "",
			"config.json: eos_token_id=99999 is outside the vocabulary (vocab_size=512: token ids run 0..511)"},
		{"eos list element out of range", `"eos_token_id": [2, 512]`, "",
			"config.json: eos_token_id[1]=512 is outside the vocabulary (vocab_size=512: token ids run 0..511)"},
		{"bos out of range", `"bos_token_id": 512`, "",
			"config.json: bos_token_id=512 is outside the vocabulary (vocab_size=512: token ids run 0..511)"},
		{"bos below -1", `"bos_token_id": -2`, "",
			"config.json: bos_token_id=-2 must not be negative (vocab_size=512: token ids run 0..511; null for none)"},
		{"pad out of range", `"pad_token_id": 32000`, "",
			"config.json: pad_token_id=32000 is outside the vocabulary (vocab_size=512: token ids run 0..511)"},
		{"pad not an integer", `"pad_token_id": "0"`, "", `config.json: pad_token_id "0" is not an integer`},
		{"eos list with null", `"eos_token_id": [2, null]`, "", "config.json: eos_token_id [2, null]: element 1 is null"},
		{"generation eos out of range", `"eos_token_id": 2`, `{"eos_token_id": [2, 99999]}`,
			"generation_config.json: eos_token_id[1]=99999 is outside the vocabulary (config.json has vocab_size=512: token ids run 0..511)"},
		{"generation bos out of range", `"eos_token_id": 2`, `{"bos_token_id": 600}`,
			"generation_config.json: bos_token_id=600 is outside the vocabulary (config.json has vocab_size=512: token ids run 0..511)"},
		{"generation pad negative", `"eos_token_id": 2`, `{"pad_token_id": -7}`,
			"generation_config.json: pad_token_id=-7 must not be negative (config.json has vocab_size=512: token ids run 0..511; null for none)"},
		{"generation eos not integers", `"eos_token_id": 2`, `{"eos_token_id": ["</s>"]}`,
			`generation_config.json: eos_token_id ["</s>"]: want an integer or a list of integers`},
		{"generation invalid JSON", `"eos_token_id": 2`, `{"eos_token_id": `, "generation_config.json: invalid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "config.json"), `{`+base+`, `+c.config+`}`)
			if c.generation != "" {
				writeFile(t, filepath.Join(dir, "generation_config.json"), c.generation)
			}
			cfg, err := LoadConfig(dir)
			if c.want == "" {
				if err != nil {
					t.Fatalf("LoadConfig: %v", err)
				}
				if err := cfg.Validate(); err != nil {
					t.Errorf("Validate after LoadConfig: %v", err)
				}
				if (cfg.Generation != nil) != (c.generation != "") {
					t.Errorf("Generation = %+v with generation_config.json %q", cfg.Generation, c.generation)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadConfig succeeded, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "weights: "+dir+string(filepath.Separator)) {
				t.Errorf("error = %q, want it to contain %q after the file's path", err, c.want)
			}
		})
	}
}

// The shared checkpoints, real configurations whose generation_config.json
// lists more stop ids than config.json, load with their ids.
func TestLoadConfigSharedGeneration(t *testing.T) {
	for _, c := range []struct {
		model string
		want  GenerationConfig
	}{
		{"stories260K", GenerationConfig{BOSTokenID: 1, EOSTokenIDs: []int{2}, PadTokenID: -1}},
		{"ref-qwen2-6m", GenerationConfig{BOSTokenID: 4093, EOSTokenIDs: []int{4093, 4095}, PadTokenID: -1}},
	} {
		cfg, err := LoadConfig(shareddata.File(t, "models", c.model))
		if err != nil {
			t.Fatalf("%s: %v", c.model, err)
		}
		if cfg.Generation == nil || !reflect.DeepEqual(*cfg.Generation, c.want) {
			t.Errorf("%s: Generation = %+v, want %+v", c.model, cfg.Generation, c.want)
		}
	}
}

// FuzzParseGenerationConfig feeds ParseGenerationConfig arbitrary
// generation_config.json content and vocabulary sizes. It must never panic,
// must fail with an error naming the file, or return ids that are rows of
// the vocabulary (or -1, none, for bos and pad) and pass Validate.
func FuzzParseGenerationConfig(f *testing.F) {
	for _, s := range []string{
		`{"bos_token_id": 1, "eos_token_id": 2, "max_length": 512}`,
		`{"bos_token_id": 4093, "eos_token_id": [4093, 4095], "do_sample": true, "temperature": 0.7, "top_p": 0.9}`,
		`{"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "pad_token_id": null}`,
		`{"eos_token_id": [2, null]}`, `{"pad_token_id": -1}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s), 4096)
	}
	f.Fuzz(func(t *testing.T, data []byte, vocab int) {
		g, err := ParseGenerationConfig(data, "fuzz/generation_config.json", vocab)
		if err != nil {
			if g != nil {
				t.Errorf("returned %+v with error %v", g, err)
			}
			if !strings.HasPrefix(err.Error(), "weights: fuzz/generation_config.json: ") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if err := g.Validate(vocab); err != nil {
			t.Fatalf("accepted a generation config that fails Validate: %v", err)
		}
		for _, id := range append([]int{g.BOSTokenID, g.PadTokenID}, g.EOSTokenIDs...) {
			if id < -1 || id >= vocab {
				t.Fatalf("id %d outside a vocabulary of %d accepted: %+v", id, vocab, *g)
			}
		}
		for _, id := range g.EOSTokenIDs {
			if id < 0 {
				t.Fatalf("eos id %d accepted: %+v", id, *g)
			}
		}
	})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
