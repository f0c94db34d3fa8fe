package weights

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// checkBase is a tiny valid config: hidden 8, 2 heads of 4 with 1 KV head,
// 2 layers, vocabulary 32.
var checkBase = map[string]any{
	"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
	"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32, "tie_word_embeddings": true,
}

// checkConfig parses checkBase with the given fields replaced.
func checkConfig(t *testing.T, set map[string]any) *Config {
	t.Helper()
	m := maps.Clone(checkBase)
	maps.Copy(m, set)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b, "config.json")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// shapesFor lists the tensors a checkpoint matching c holds.
func shapesFor(c *Config) map[string][]int {
	s := map[string][]int{
		"model.embed_tokens.weight": {c.VocabSize, c.HiddenSize},
		"model.norm.weight":         {c.HiddenSize},
	}
	if !c.TieWordEmbeddings {
		s["lm_head.weight"] = []int{c.VocabSize, c.HiddenSize}
	}
	for i := range c.NumLayers {
		for _, w := range c.LayerTensors(i) {
			s[w.Name] = w.Shape()
		}
	}
	return s
}

// headerStore builds a Store of header entries only: CheckTensors never
// reads tensor data.
func headerStore(shapes map[string][]int, dtypes map[string]string) *Store {
	s := &Store{where: "ckpt", tensors: make(map[string]entry, len(shapes))}
	for name, shape := range shapes {
		dt := "F32"
		if d, ok := dtypes[name]; ok {
			dt = d
		}
		s.tensors[name] = entry{info: tensorInfo{dtypeName: dt, dtype: supportedDType(dt), shape: shape}}
	}
	return s
}

func TestCheckTensors(t *testing.T) {
	cases := []struct {
		name   string
		config map[string]any         // replaces fields of checkBase
		tweak  func(*Config)          // changes the parsed config (for values ParseConfig rejects)
		edit   func(map[string][]int) // changes the checkpoint built for the config
		dtypes map[string]string
		want   string // "" for success
	}{
		{name: "llama tied", config: nil},
		{name: "llama untied with all biases", config: map[string]any{"tie_word_embeddings": false, "attention_bias": true, "mlp_bias": true}},
		{name: "qwen2 biases", config: map[string]any{"model_type": "qwen2"}},
		{name: "qwen3 q/k norms, head_dim 16", config: map[string]any{"model_type": "qwen3", "head_dim": 16}},
		{name: "extra tensors are fine", edit: func(s map[string][]int) {
			s["model.layers.0.self_attn.rotary_emb.inv_freq"] = []int{2}
			s["model.layers.rotary.x"] = []int{1}
		}},
		{name: "absurd layer count", tweak: func(c *Config) { c.NumLayers = 1_000_000_000 },
			want: "config.json: num_hidden_layers=1000000000 is implausibly large"},
		{name: "invalid config", tweak: func(c *Config) { c.NumKVHeads = 0 },
			want: "config.json: num_key_value_heads=0 must be positive"},
		{name: "more layers claimed than present", config: map[string]any{"num_hidden_layers": 3},
			edit: func(s map[string][]int) {
				for name := range s {
					if strings.HasPrefix(name, "model.layers.2.") {
						delete(s, name)
					}
				}
			},
			want: "config.json num_hidden_layers=3, but the checkpoint has tensors for only 2 layers (model.layers.0 to model.layers.1)"},
		{name: "fewer layers claimed than present", config: map[string]any{"num_hidden_layers": 1},
			edit: func(s map[string][]int) { s["model.layers.1.input_layernorm.weight"] = []int{8} },
			want: "config.json num_hidden_layers=1, but the checkpoint has tensor model.layers.1.input_layernorm.weight (layer 1)"},
		{name: "gap in layers", config: map[string]any{"num_hidden_layers": 3},
			edit: func(s map[string][]int) {
				for name := range s {
					if strings.HasPrefix(name, "model.layers.1.") {
						delete(s, name)
					}
				}
			},
			want: "config.json num_hidden_layers=3, but the checkpoint has no tensors for layer 1 (model.layers.1.*)"},
		{name: "huge layer number", edit: func(s map[string][]int) { s["model.layers.99999999999999999999.x"] = []int{1} },
			want: "num_hidden_layers=2, but the checkpoint has tensor model.layers.99999999999999999999.x"},
		{name: "no layers", edit: func(s map[string][]int) {
			for name := range s {
				if strings.HasPrefix(name, "model.layers.") {
					delete(s, name)
				}
			}
		}, want: "config.json num_hidden_layers=2, but the checkpoint has no model.layers.* tensors"},
		{name: "vocab_size mismatch", config: map[string]any{"vocab_size": 64},
			edit: func(s map[string][]int) { s["model.embed_tokens.weight"] = []int{32, 8} },
			want: "tensor model.embed_tokens.weight has shape [32 8], but config.json implies [vocab_size=64, hidden_size=8]"},
		{name: "1-D embedding", edit: func(s map[string][]int) { s["model.embed_tokens.weight"] = []int{256} },
			want: "tensor model.embed_tokens.weight has shape [256], but config.json implies [vocab_size=32, hidden_size=8]"},
		{name: "missing embedding", edit: func(s map[string][]int) { delete(s, "model.embed_tokens.weight") },
			want: "tensor model.embed_tokens.weight is missing"},
		{name: "missing lm_head", config: map[string]any{"tie_word_embeddings": false},
			edit: func(s map[string][]int) { delete(s, "lm_head.weight") },
			want: "tensor lm_head.weight is missing (config.json: tie_word_embeddings is false)"},
		{name: "intermediate_size mismatch", config: map[string]any{"intermediate_size": 24},
			edit: func(s map[string][]int) { s["model.layers.1.mlp.down_proj.weight"] = []int{8, 16} },
			want: "tensor model.layers.1.mlp.down_proj.weight has shape [8 16], but config.json implies [hidden_size=8, intermediate_size=24]"},
		{name: "kv heads mismatch", edit: func(s map[string][]int) { s["model.layers.0.self_attn.k_proj.weight"] = []int{8, 8} },
			want: "tensor model.layers.0.self_attn.k_proj.weight has shape [8 8], but config.json implies [num_key_value_heads*head_dim=4, hidden_size=8]"},
		{name: "missing qwen2 bias", config: map[string]any{"model_type": "qwen2"},
			edit: func(s map[string][]int) { delete(s, "model.layers.1.self_attn.v_proj.bias") },
			want: "tensor model.layers.1.self_attn.v_proj.bias is missing (config.json: model_type qwen2 has q, k and v biases)"},
		{name: "missing qwen3 q_norm", config: map[string]any{"model_type": "qwen3", "head_dim": 16},
			edit: func(s map[string][]int) { delete(s, "model.layers.0.self_attn.q_norm.weight") },
			want: "tensor model.layers.0.self_attn.q_norm.weight is missing (config.json: model_type qwen3 normalizes q and k)"},
		{name: "wrong head_dim for q_norm", config: map[string]any{"model_type": "qwen3", "head_dim": 16},
			edit: func(s map[string][]int) { s["model.layers.0.self_attn.k_norm.weight"] = []int{128} },
			want: "tensor model.layers.0.self_attn.k_norm.weight has shape [128], but config.json implies [head_dim=16]"},
		{name: "unsupported dtype", dtypes: map[string]string{"model.norm.weight": "I64"},
			want: "tensor model.norm.weight has dtype I64 (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := checkConfig(t, c.config)
			shapes := shapesFor(cfg)
			if c.tweak != nil {
				c.tweak(cfg)
			}
			if c.edit != nil {
				c.edit(shapes)
			}
			err := cfg.CheckTensors(headerStore(shapes, c.dtypes))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("CheckTensors: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("CheckTensors succeeded, want error containing %q", c.want)
			case !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "weights: ckpt: "):
				t.Errorf("error = %q, want it to start with %q and contain %q", err, "weights: ckpt: ", c.want)
			}
		})
	}
}

func TestCheckTensorsNil(t *testing.T) {
	cfg := checkConfig(t, nil)
	if err := cfg.CheckTensors(nil); err == nil || !strings.Contains(err.Error(), "no store") {
		t.Errorf("CheckTensors(nil) = %v, want an error", err)
	}
	var none *Config
	if err := none.CheckTensors(headerStore(shapesFor(cfg), nil)); err == nil || !strings.Contains(err.Error(), "no configuration") {
		t.Errorf("nil config: %v, want an error", err)
	}
}

func TestCheckTensorsOnFiles(t *testing.T) {
	t.Run("written checkpoint", func(t *testing.T) {
		cfg := checkConfig(t, map[string]any{"model_type": "qwen2", "tie_word_embeddings": false})
		var ts []Tensor
		for name, shape := range shapesFor(cfg) {
			n := 1
			for _, d := range shape {
				n *= d
			}
			ts = append(ts, BF16Tensor(name, shape, make([]float32, n)))
		}
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		st, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := cfg.CheckTensors(st); err != nil {
			t.Fatal(err)
		}
		cfg.NumLayers = 3
		if err := cfg.CheckTensors(st); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "model.safetensors")+": config.json num_hidden_layers=3") {
			t.Errorf("error = %v, want the file and num_hidden_layers=3 named", err)
		}
	})
	t.Run("stories260K", func(t *testing.T) {
		dir := shareddata.File(t, "models", "stories260K")
		cfg, err := LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := cfg.CheckTensors(st); err != nil {
			t.Fatal(err)
		}
		cfg.IntermediateSize = 171
		if err := cfg.CheckTensors(st); err == nil || !strings.Contains(err.Error(), "has shape [172 64], but config.json implies [intermediate_size=171, hidden_size=64]") {
			t.Errorf("error = %v, want the gate_proj shape mismatch", err)
		}
	})
}
