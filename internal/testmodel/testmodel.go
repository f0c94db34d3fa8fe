// Package testmodel writes small seeded random checkpoints in Hugging Face
// layout (config.json, generation_config.json, model.safetensors) so the
// loader and the forward pass can be tested on every supported architecture
// without downloading real weights.
package testmodel

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"

	"github.com/kakeya-ai/kakeya/tensor"
)

// RopeScaling is the rope_scaling entry of config.json.
type RopeScaling struct {
	Type                          string  // "llama3" or "linear"
	Factor                        float64 // all types
	LowFreqFactor, HighFreqFactor float64 // llama3
	OriginalMaxPositionEmbeddings int     // llama3
}

// Spec describes a checkpoint to write.
type Spec struct {
	ModelType                                                            string // llama, mistral, qwen2, qwen3, gemma2 or gemma3_text
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab, MaxPos int
	RopeTheta                                                            float64
	RopeScaling                                                          *RopeScaling
	RMSNormEps                                                           float64
	// Tie shares the embedding matrix with the output head.
	Tie bool
	// Bias adds q/k/v projection biases (Qwen2).
	Bias bool
	// MLPBias adds gate, up and down projection biases (Llama's mlp_bias).
	MLPBias bool
	// SlidingWindow is Mistral's window (every layer) or Gemma's (the
	// sliding layers), 0 for none.
	SlidingWindow int
	DType         tensor.DType
	Seed          uint64

	// Gemma's settings, written to config.json where not 0:
	// query_pre_attn_scalar, attn_logit_softcapping,
	// final_logit_softcapping (Gemma 2; 0 writes null), rope_local_base_freq
	// and sliding_window_pattern (Gemma 3).
	QueryPreAttnScalar, AttnSoftcap, FinalSoftcap, RopeLocalTheta float64
	SlidingWindowPattern                                          int
	// Multimodal writes a Gemma 3 text model as a multimodal gemma3
	// checkpoint does: config.json's text_config, tensors under
	// "language_model.".
	Multimodal bool
}

// Gemma2Tiny is a Gemma-2-style model: four layers alternating sliding
// (window 8) and full attention, head_dim 32 (query_pre_attn_scalar 32,
// as llama.cpp assumes), attention and final softcaps small enough to
// bite (5 and 10), tied embeddings, a 512-token vocabulary (room for a
// byte-fallback tokenizer, for llama.cpp), in F32.
var Gemma2Tiny = Spec{
	ModelType: "gemma2", Hidden: 64, Intermediate: 128, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 32,
	Vocab: 512, MaxPos: 1024, RopeTheta: 1e4, RMSNormEps: 1e-6, Tie: true, SlidingWindow: 8,
	QueryPreAttnScalar: 32, AttnSoftcap: 5, FinalSoftcap: 10, DType: tensor.F32, Seed: 36,
}

// Gemma3Tiny is a Gemma-3-style model: six layers, five sliding (window
// 8, RoPE base 1e4) then one full (base 1e6, linear rope_scaling 2), q/k
// norms, one KV head, no softcaps, a 512-token vocabulary, in BF16.
var Gemma3Tiny = Spec{
	ModelType: "gemma3_text", Hidden: 64, Intermediate: 128, Layers: 6, Heads: 4, KVHeads: 1, HeadDim: 32,
	Vocab: 512, MaxPos: 1024, RopeTheta: 1e6, RopeLocalTheta: 1e4, RMSNormEps: 1e-6, Tie: true, SlidingWindow: 8,
	SlidingWindowPattern: 6, QueryPreAttnScalar: 32, RopeScaling: &RopeScaling{Type: "linear", Factor: 2},
	DType: tensor.BF16, Seed: 37,
}

// Gemma2_2B has Gemma 2 2B's exact shape in BF16 (about 5.2 GB on disk):
// 26 layers alternating window 4096 and full, head_dim 256, softcaps 50
// and 30, a 256,000-token vocabulary.
var Gemma2_2B = Spec{
	ModelType: "gemma2", Hidden: 2304, Intermediate: 9216, Layers: 26, Heads: 8, KVHeads: 4, HeadDim: 256,
	Vocab: 256000, MaxPos: 8192, RopeTheta: 1e4, RMSNormEps: 1e-6, Tie: true, SlidingWindow: 4096,
	QueryPreAttnScalar: 256, AttnSoftcap: 50, FinalSoftcap: 30, DType: tensor.BF16, Seed: 38,
}

// Gemma3_1B has Gemma 3 1B's exact shape in BF16 (about 2 GB on disk): 26
// layers, five of window 512 to one full, one KV head of 256, a
// 262,144-token vocabulary, a 32k context.
var Gemma3_1B = Spec{
	ModelType: "gemma3_text", Hidden: 1152, Intermediate: 6912, Layers: 26, Heads: 4, KVHeads: 1, HeadDim: 256,
	Vocab: 262144, MaxPos: 32768, RopeTheta: 1e6, RopeLocalTheta: 1e4, RMSNormEps: 1e-6, Tie: true, SlidingWindow: 512,
	SlidingWindowPattern: 6, QueryPreAttnScalar: 256, DType: tensor.BF16, Seed: 39,
}

// gemma reports whether s is of the Gemma family.
func (s *Spec) gemma() bool { return s.ModelType == "gemma2" || s.ModelType == "gemma3_text" }

// Qwen2Tiny is a Qwen2-style model: q/k/v biases, 7:1 grouped-query
// attention, head_dim 16, rope_theta 1e6 and an untied output head, in BF16.
var Qwen2Tiny = Spec{
	ModelType: "qwen2", Hidden: 224, Intermediate: 320, Layers: 2, Heads: 14, KVHeads: 2, HeadDim: 16,
	Vocab: 256, MaxPos: 512, RopeTheta: 1e6, RMSNormEps: 1e-6, Bias: true, DType: tensor.BF16, Seed: 1,
}

// Llama3Tiny is a Llama-3-style model with Llama-3 rope_scaling (factor 8,
// low 1, high 4, original 8192). With rope_theta 5e5 and head_dim 16 its
// eight wavelengths span 6.3 to 6.3e5 positions, so some frequencies are
// kept (< 2048), one is smoothed and the rest divided by the factor (> 8192).
// Stored in F16 with tied embeddings.
var Llama3Tiny = Spec{
	ModelType: "llama", Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
	Vocab: 256, MaxPos: 1024, RopeTheta: 5e5, RMSNormEps: 1e-5, Tie: true, DType: tensor.F16, Seed: 2,
	RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
}

// Qwen3Tiny is a Qwen3-style model: per-head RMSNorm on q and k, and a
// head_dim (32) that is not hidden/heads, in F32.
var Qwen3Tiny = Spec{
	ModelType: "qwen3", Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32,
	Vocab: 256, MaxPos: 512, RopeTheta: 1e6, RMSNormEps: 1e-6, Tie: true, DType: tensor.F32, Seed: 3,
}

// LlamaTiny is a Llama-2-style model: Llama3Tiny's shape without
// rope_scaling, with an untied output head, in BF16.
var LlamaTiny = Spec{
	ModelType: "llama", Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
	Vocab: 256, MaxPos: 1024, RopeTheta: 5e5, RMSNormEps: 1e-5, DType: tensor.BF16, Seed: 5,
}

// MistralTiny is a Mistral-style model: Llama3Tiny's shape with a sliding
// window of 7 tokens, rope_theta 1e4, no rope_scaling and an untied head,
// in F32.
var MistralTiny = Spec{
	ModelType: "mistral", Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
	Vocab: 256, MaxPos: 1024, RopeTheta: 1e4, RMSNormEps: 1e-5, SlidingWindow: 7, DType: tensor.F32, Seed: 2,
}

// LongTiny is a tiny Llama with a 32k context and the vocabulary of
// stories260K's tokenizer (512), in F32: long prompts make it slow enough to
// catch a command in prefill or decode.
var LongTiny = Spec{
	ModelType: "llama", Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
	Vocab: 512, MaxPos: 32768, RopeTheta: 1e4, DType: tensor.F32, Seed: 21,
}

// Qwen25_05B has Qwen2.5-0.5B's exact shape in BF16 (about 1 GB on disk),
// for benchmarks.
var Qwen25_05B = Spec{
	ModelType: "qwen2", Hidden: 896, Intermediate: 4864, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64,
	Vocab: 151936, MaxPos: 32768, RopeTheta: 1e6, RMSNormEps: 1e-6, Tie: true, Bias: true, DType: tensor.BF16, Seed: 4,
}

// Qwen25_15B has Qwen2.5-1.5B's exact shape in BF16 (about 3.1 GB on
// disk): head_dim 128, 6:1 grouped-query attention, tied embeddings.
var Qwen25_15B = Spec{
	ModelType: "qwen2", Hidden: 1536, Intermediate: 8960, Layers: 28, Heads: 12, KVHeads: 2, HeadDim: 128,
	Vocab: 151936, MaxPos: 32768, RopeTheta: 1e6, RMSNormEps: 1e-6, Tie: true, Bias: true, DType: tensor.BF16, Seed: 5,
}

// Qwen25_7B has Qwen2.5-7B's exact shape in BF16 (about 15.2 GB on disk):
// head_dim 128, 7:1 grouped-query attention, an untied output head.
var Qwen25_7B = Spec{
	ModelType: "qwen2", Hidden: 3584, Intermediate: 18944, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128,
	Vocab: 152064, MaxPos: 32768, RopeTheta: 1e6, RMSNormEps: 1e-6, Bias: true, DType: tensor.BF16, Seed: 6,
}

// Presets names the specs above, for tools that write one
// (internal/cmd/kakeya-testmodel) and reports that name their shape.
var Presets = map[string]Spec{
	"qwen2.5-0.5b": Qwen25_05B,
	"qwen2.5-1.5b": Qwen25_15B,
	"qwen2.5-7b":   Qwen25_7B,
	"qwen2-tiny":   Qwen2Tiny,
	"llama3-tiny":  Llama3Tiny,
	"qwen3-tiny":   Qwen3Tiny,
	"long-tiny":    LongTiny,
	"gemma2-tiny":  Gemma2Tiny,
	"gemma3-tiny":  Gemma3Tiny,
	"gemma2-2b":    Gemma2_2B,
	"gemma3-1b":    Gemma3_1B,
}

// Bytes returns the size of the checkpoint's tensors in bytes (the
// safetensors file less its header).
func (s Spec) Bytes() int64 {
	var n int64
	for _, t := range s.tensors() {
		m := int64(1)
		for _, d := range t.shape {
			m *= int64(d)
		}
		n += m
	}
	return n * int64(s.DType.Size())
}

// tensorSpec is one tensor to write: its values are uniform with the given mean
// and standard deviation, drawn from a generator seeded by name.
type tensorSpec struct {
	name      string
	shape     []int
	mean, std float64
}

func (s *Spec) validate() error {
	switch s.ModelType {
	case "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text":
	default:
		return fmt.Errorf("testmodel: model_type %q, want llama, mistral, qwen2, qwen3, gemma2 or gemma3_text", s.ModelType)
	}
	if s.Multimodal && s.ModelType != "gemma3_text" {
		return fmt.Errorf("testmodel: a multimodal checkpoint of model_type %q, want gemma3_text", s.ModelType)
	}
	if s.Hidden <= 0 || s.Intermediate <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.Vocab <= 0 || s.MaxPos <= 0 {
		return fmt.Errorf("testmodel: every size must be positive: %+v", *s)
	}
	if s.DType.Size() == 0 {
		return fmt.Errorf("testmodel: dtype %v", s.DType)
	}
	return nil
}

func (s *Spec) tensors() []tensorSpec {
	if s.gemma() {
		return s.gemmaTensors()
	}
	h, q, kv := s.Hidden, s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	lin := func(name string, out, in int) tensorSpec {
		return tensorSpec{name: name, shape: []int{out, in}, std: 1 / math.Sqrt(float64(in))}
	}
	norm := func(name string, n int) tensorSpec {
		return tensorSpec{name: name, shape: []int{n}, mean: 1, std: 0.1 / math.Sqrt(3)}
	}
	ts := []tensorSpec{{name: "model.embed_tokens.weight", shape: []int{s.Vocab, h}, std: 1}}
	for i := 0; i < s.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts, norm(p+"input_layernorm.weight", h),
			lin(p+"self_attn.q_proj.weight", q, h),
			lin(p+"self_attn.k_proj.weight", kv, h),
			lin(p+"self_attn.v_proj.weight", kv, h))
		if s.Bias {
			ts = append(ts,
				tensorSpec{name: p + "self_attn.q_proj.bias", shape: []int{q}, std: 0.1},
				tensorSpec{name: p + "self_attn.k_proj.bias", shape: []int{kv}, std: 0.1},
				tensorSpec{name: p + "self_attn.v_proj.bias", shape: []int{kv}, std: 0.1})
		}
		if s.ModelType == "qwen3" {
			ts = append(ts, norm(p+"self_attn.q_norm.weight", s.HeadDim), norm(p+"self_attn.k_norm.weight", s.HeadDim))
		}
		ts = append(ts, lin(p+"self_attn.o_proj.weight", h, q),
			norm(p+"post_attention_layernorm.weight", h),
			lin(p+"mlp.gate_proj.weight", s.Intermediate, h),
			lin(p+"mlp.up_proj.weight", s.Intermediate, h),
			lin(p+"mlp.down_proj.weight", h, s.Intermediate))
		if s.MLPBias {
			ts = append(ts,
				tensorSpec{name: p + "mlp.gate_proj.bias", shape: []int{s.Intermediate}, std: 0.1},
				tensorSpec{name: p + "mlp.up_proj.bias", shape: []int{s.Intermediate}, std: 0.1},
				tensorSpec{name: p + "mlp.down_proj.bias", shape: []int{h}, std: 0.1})
		}
	}
	ts = append(ts, norm("model.norm.weight", h))
	if !s.Tie {
		ts = append(ts, lin("lm_head.weight", s.Vocab, h))
	}
	return ts
}

// gemmaTensors are a Gemma layer's: sandwich norms (weights w of x̂·(1 +
// w), about 0), q/k norms for Gemma 3, no biases; the embeddings are tied.
func (s *Spec) gemmaTensors() []tensorSpec {
	h, q, kv := s.Hidden, s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	pre := ""
	if s.Multimodal {
		pre = "language_model."
	}
	lin := func(name string, out, in int) tensorSpec {
		return tensorSpec{name: pre + name, shape: []int{out, in}, std: 1 / math.Sqrt(float64(in))}
	}
	norm := func(name string, n int) tensorSpec {
		return tensorSpec{name: pre + name, shape: []int{n}, std: 0.3}
	}
	ts := []tensorSpec{{name: pre + "model.embed_tokens.weight", shape: []int{s.Vocab, h}, std: 1}}
	for i := 0; i < s.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts, norm(p+"input_layernorm.weight", h),
			lin(p+"self_attn.q_proj.weight", q, h),
			lin(p+"self_attn.k_proj.weight", kv, h),
			lin(p+"self_attn.v_proj.weight", kv, h),
			lin(p+"self_attn.o_proj.weight", h, q))
		if s.ModelType == "gemma3_text" {
			ts = append(ts, norm(p+"self_attn.q_norm.weight", s.HeadDim), norm(p+"self_attn.k_norm.weight", s.HeadDim))
		}
		ts = append(ts, norm(p+"post_attention_layernorm.weight", h),
			norm(p+"pre_feedforward_layernorm.weight", h),
			lin(p+"mlp.gate_proj.weight", s.Intermediate, h),
			lin(p+"mlp.up_proj.weight", s.Intermediate, h),
			lin(p+"mlp.down_proj.weight", h, s.Intermediate),
			norm(p+"post_feedforward_layernorm.weight", h))
	}
	ts = append(ts, norm("model.norm.weight", h))
	if s.Multimodal {
		// A vision tower's tensor, which the text model leaves alone.
		ts = append(ts, tensorSpec{name: "vision_tower.vision_model.post_layernorm.weight", shape: []int{8}, std: 0.1})
	}
	return ts
}

// Write creates dir if needed and writes the checkpoint described by spec.
func Write(dir string, spec Spec) error {
	if err := spec.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), spec.config()); err != nil {
		return err
	}
	gen := map[string]any{"bos_token_id": 1, "eos_token_id": 2}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), gen); err != nil {
		return err
	}
	return writeSafetensors(filepath.Join(dir, "model.safetensors"), &spec)
}

func (s *Spec) config() map[string]any {
	if s.gemma() {
		return s.gemmaConfig()
	}
	arch := map[string]string{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[s.ModelType]
	dt := map[tensor.DType]string{tensor.F32: "float32", tensor.F16: "float16", tensor.BF16: "bfloat16"}[s.DType]
	eps := s.RMSNormEps
	if eps == 0 {
		eps = 1e-6
	}
	c := map[string]any{
		"architectures":           []string{arch},
		"model_type":              s.ModelType,
		"hidden_size":             s.Hidden,
		"intermediate_size":       s.Intermediate,
		"num_hidden_layers":       s.Layers,
		"num_attention_heads":     s.Heads,
		"num_key_value_heads":     s.KVHeads,
		"head_dim":                s.HeadDim,
		"vocab_size":              s.Vocab,
		"max_position_embeddings": s.MaxPos,
		"rms_norm_eps":            eps,
		"rope_theta":              s.RopeTheta,
		"hidden_act":              "silu",
		"tie_word_embeddings":     s.Tie,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"torch_dtype":             dt,
	}
	if s.ModelType == "llama" {
		c["attention_bias"] = s.Bias
		c["mlp_bias"] = s.MLPBias
	}
	if s.ModelType == "qwen3" {
		c["attention_bias"] = false
	}
	if s.SlidingWindow > 0 {
		c["sliding_window"] = s.SlidingWindow
	} else if s.ModelType == "mistral" {
		c["sliding_window"] = nil
	}
	if rs := s.RopeScaling; rs != nil {
		m := map[string]any{"rope_type": rs.Type, "factor": rs.Factor}
		if rs.Type == "llama3" {
			m["low_freq_factor"] = rs.LowFreqFactor
			m["high_freq_factor"] = rs.HighFreqFactor
			m["original_max_position_embeddings"] = rs.OriginalMaxPositionEmbeddings
		}
		c["rope_scaling"] = m
	}
	return c
}

// gemmaConfig is a Gemma 2 or Gemma 3 config.json, as transformers
// writes them (a multimodal Gemma 3's with the text model's settings in
// text_config).
func (s *Spec) gemmaConfig() map[string]any {
	dt := map[tensor.DType]string{tensor.F32: "float32", tensor.F16: "float16", tensor.BF16: "bfloat16"}[s.DType]
	eps := s.RMSNormEps
	if eps == 0 {
		eps = 1e-6
	}
	c := map[string]any{
		"architectures":           []string{map[string]string{"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}[s.ModelType]},
		"model_type":              s.ModelType,
		"hidden_size":             s.Hidden,
		"intermediate_size":       s.Intermediate,
		"num_hidden_layers":       s.Layers,
		"num_attention_heads":     s.Heads,
		"num_key_value_heads":     s.KVHeads,
		"head_dim":                s.HeadDim,
		"vocab_size":              s.Vocab,
		"max_position_embeddings": s.MaxPos,
		"rms_norm_eps":            eps,
		"rope_theta":              s.RopeTheta,
		"hidden_activation":       "gelu_pytorch_tanh",
		"hidden_act":              "gelu_pytorch_tanh",
		"tie_word_embeddings":     true,
		"attention_bias":          false,
		"sliding_window":          s.SlidingWindow,
		"query_pre_attn_scalar":   s.QueryPreAttnScalar,
		"bos_token_id":            2,
		"eos_token_id":            1,
		"pad_token_id":            0,
		"torch_dtype":             dt,
	}
	softcap := func(v float64) any {
		if v == 0 {
			return nil
		}
		return v
	}
	c["attn_logit_softcapping"] = softcap(s.AttnSoftcap)
	c["final_logit_softcapping"] = softcap(s.FinalSoftcap)
	if s.ModelType == "gemma3_text" {
		c["rope_local_base_freq"] = s.RopeLocalTheta
		c["sliding_window_pattern"] = s.SlidingWindowPattern
	}
	if rs := s.RopeScaling; rs != nil {
		c["rope_scaling"] = map[string]any{"rope_type": rs.Type, "factor": rs.Factor}
	}
	if !s.Multimodal {
		return c
	}
	c["model_type"] = "gemma3_text"
	return map[string]any{
		"architectures": []string{"Gemma3ForConditionalGeneration"},
		"model_type":    "gemma3",
		"text_config":   c,
		"eos_token_id":  []int{1, 106 % s.Vocab},
		"torch_dtype":   dt,
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("testmodel: %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	return nil
}

// writeSafetensors streams the tensors to path, generating values as it goes
// so a checkpoint of any size needs no more memory than a few chunks of
// values per core.
func writeSafetensors(path string, s *Spec) (err error) {
	ts := s.tensors()
	name := map[tensor.DType]string{tensor.F32: "F32", tensor.F16: "F16", tensor.BF16: "BF16"}[s.DType]
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt", "generator": "kakeya testmodel"}}
	var off int64
	for _, t := range ts {
		n := int64(1)
		for _, d := range t.shape {
			n *= int64(d)
		}
		end := off + n*int64(s.DType.Size())
		hdr[t.name] = map[string]any{"dtype": name, "shape": t.shape, "data_offsets": []int64{off, end}}
		off = end
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("testmodel: %s: %w", path, err)
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("testmodel: %w", cerr)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var lenb [8]byte
	binary.LittleEndian.PutUint64(lenb[:], uint64(len(hb)))
	w.Write(lenb[:])
	w.Write(hb)
	// The values are generated in chunks on every core and written in
	// order: SplitMix64's state after k draws is its seed plus k times
	// its increment, so a chunk starts its generator where the sequential
	// one would be, and the file is the same whatever the core count (on
	// 16 cores a 7B shape's 15 GB goes at the disk's speed, not a core's
	// 300 MB/s).
	type chunk struct {
		t          *tensorSpec
		seed       uint64
		start, end int // values [start, end) of the tensor; start is even
		out        chan []byte
	}
	workers := runtime.GOMAXPROCS(0)
	jobs, order := make(chan *chunk, workers), make(chan *chunk, 2*workers)
	var failed atomic.Bool
	go func() {
		defer close(order)
		defer close(jobs)
		for i := range ts {
			n := 1
			for _, d := range ts[i].shape {
				n *= d
			}
			hs := fnv.New64a()
			hs.Write([]byte(ts[i].name))
			for start := 0; start < n; start += chunkValues {
				if failed.Load() {
					return
				}
				c := &chunk{t: &ts[i], seed: s.Seed ^ hs.Sum64(), start: start, end: min(n, start+chunkValues), out: make(chan []byte, 1)}
				order <- c
				jobs <- c
			}
		}
	}()
	for range workers {
		go func() {
			for c := range jobs {
				c.out <- s.values(c.t, c.seed, c.start, c.end)
			}
		}()
	}
	for c := range order {
		b := <-c.out
		if _, err := w.Write(b); err != nil {
			failed.Store(true) // the error stays in w; drain the rest
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("testmodel: %s: %w", path, err)
	}
	return nil
}

// chunkValues is the values one worker generates at a time (even).
const chunkValues = 1 << 19

// values returns the values [start, end) of tensor t, whose generator is
// seeded with seed, encoded in s's dtype. start is even: each draw makes
// two values.
func (s *Spec) values(t *tensorSpec, seed uint64, start, end int) []byte {
	buf := make([]byte, 0, (end-start)*s.DType.Size())
	rng := splitmix{s: seed + uint64(start/2)*splitmixGamma}
	// Uniform on [mean - a, mean + a] has standard deviation a/sqrt(3).
	a, m := float32(t.std*math.Sqrt(3)), float32(t.mean)
	for i := start; i < end; i += 2 {
		u := rng.next()
		for j := 0; j < 2 && i+j < end; j++ {
			// 24 random bits to a float in [-1, 1).
			x := float32(int32(uint32(u>>(32*j))>>8)-(1<<23)) * (1.0 / (1 << 23))
			v := m + a*x
			switch s.DType {
			case tensor.F32:
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			case tensor.F16:
				buf = binary.LittleEndian.AppendUint16(buf, tensor.F32ToF16(v))
			default:
				buf = binary.LittleEndian.AppendUint16(buf, tensor.F32ToBF16(v))
			}
		}
	}
	return buf
}

// splitmixGamma is SplitMix64's increment.
const splitmixGamma = 0x9e3779b97f4a7c15

// splitmix is SplitMix64: fast, seedable and good enough for weights.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += splitmixGamma
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
