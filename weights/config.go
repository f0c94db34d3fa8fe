package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strings"

	"github.com/kakeya-ai/kakeya/internal/boundedfile"
)

// Config is the part of a Hugging Face config.json the engine needs, with
// the defaults of the transformers config class for its model_type applied.
//
// Bias flags follow the checkpoints rather than the JSON: AttentionBias means
// q_proj, k_proj and v_proj carry a bias (always so for qwen2, which has no
// such field); OutputBias means o_proj does too (llama and qwen3 with
// attention_bias=true; never qwen2 or mistral).
type Config struct {
	ModelType     string
	Architectures []string

	HiddenSize            int
	IntermediateSize      int
	NumLayers             int // num_hidden_layers
	NumHeads              int // num_attention_heads
	NumKVHeads            int // num_key_value_heads
	HeadDim               int
	VocabSize             int
	MaxPositionEmbeddings int

	RMSNormEps  float64
	RopeTheta   float64
	RopeScaling *RopeScaling // nil: plain RoPE

	TieWordEmbeddings bool
	AttentionBias     bool // bias on q, k, v projections
	OutputBias        bool // bias on o_proj
	MLPBias           bool // bias on gate, up, down projections
	QKNorm            bool // per-head RMSNorm on q and k before RoPE (qwen3)
	HiddenAct         string

	SlidingWindow int // 0: full attention

	// Gemma's settings (zero for the Llama family). LayerTypes says, per
	// layer, "sliding_attention" (SlidingWindow applies) or
	// "full_attention"; nil: every layer as SlidingWindow says.
	LayerTypes         []string
	QueryPreAttnScalar float64 // queries scaled by its -1/2 power; 0: head_dim's
	AttnLogitSoftcap   float64 // attention scores softcapped; 0: none
	FinalLogitSoftcap  float64 // logits softcapped; 0: none
	RopeLocalTheta     float64 // RoPE base of sliding layers (Gemma 3); 0: RopeTheta
	// TensorPrefix starts every tensor name of the checkpoint:
	// "language_model." for a multimodal Gemma 3 (model_type gemma3),
	// whose language model is its text_config.
	TensorPrefix string

	BOSTokenID  int   // -1 when the config names none
	EOSTokenIDs []int // empty when the config names none
	PadTokenID  int   // -1 when the config names none
	TorchDType  string

	// Generation holds the token ids of generation_config.json beside
	// config.json, checked against VocabSize when LoadConfig read it; nil
	// when there is no such file (and always after ParseConfig alone).
	Generation *GenerationConfig
}

// RopeScaling describes a rescaled RoPE frequency schedule: "linear" divides
// positions by Factor; "llama3" uses all four fields as in Llama 3.1.
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// SupportedModelTypes lists the config.json model_type values this package
// accepts.
func SupportedModelTypes() []string {
	return []string{"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gemma3"}
}

// IsGemma reports whether model_type is of the Gemma 2 / Gemma 3 family.
func IsGemma(modelType string) bool {
	return modelType == "gemma2" || modelType == "gemma3_text" || modelType == "gemma3"
}

// rawConfig mirrors config.json; pointers tell a missing key from a zero.
type rawConfig struct {
	ModelType             *string         `json:"model_type"`
	Architectures         []string        `json:"architectures"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumLayers             *int            `json:"num_hidden_layers"`
	NumHeads              *int            `json:"num_attention_heads"`
	NumKVHeads            *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             *int            `json:"vocab_size"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"` // transformers >= 5
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	HiddenAct             *string         `json:"hidden_act"`
	SlidingWindow         json.RawMessage `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	PadTokenID            json.RawMessage `json:"pad_token_id"`
	TorchDType            *string         `json:"torch_dtype"`
	DType                 *string         `json:"dtype"` // transformers >= 5 name for torch_dtype

	// Gemma 2 and Gemma 3.
	HiddenActivation     *string         `json:"hidden_activation"`
	LayerTypes           []string        `json:"layer_types"`
	SlidingWindowPattern *int            `json:"sliding_window_pattern"`
	QueryPreAttnScalar   *float64        `json:"query_pre_attn_scalar"`
	AttnLogitSoftcap     json.RawMessage `json:"attn_logit_softcapping"`
	FinalLogitSoftcap    json.RawMessage `json:"final_logit_softcapping"`
	RopeLocalBaseFreq    *float64        `json:"rope_local_base_freq"`
	TextConfig           json.RawMessage `json:"text_config"` // gemma3: the language model's config
}

// LoadConfig reads and validates dir/config.json and, when present,
// dir/generation_config.json, whose token ids must fall inside config.json's
// vocab_size (see ParseGenerationConfig).
//
// dir may instead name a GGUF file (IsGGUF), whose metadata describes the
// model (see GGUF.Config).
func LoadConfig(dir string) (*Config, error) {
	if IsGGUF(dir) {
		g, err := OpenGGUF(dir)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		return g.Config()
	}
	path := filepath.Join(dir, "config.json")
	data, err := boundedfile.Read(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	c, err := ParseConfig(data, path)
	if err != nil {
		return nil, err
	}
	path = filepath.Join(dir, "generation_config.json")
	data, err = boundedfile.Read(path, MaxConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("weights: %w", err)
	}
	if c.Generation, err = ParseGenerationConfig(data, path, c.VocabSize); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseConfig parses and validates config.json content; name (usually the
// file path) prefixes every error.
func ParseConfig(data []byte, name string) (*Config, error) {
	c, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", name, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("weights: %s: %w", name, err)
	}
	return c, nil
}

// parseConfig decodes config.json and fills in what it leaves out with the
// defaults of the transformers config class for its model_type (those of
// LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config in transformers
// 4.5x); ParseConfig then validates the result.
func parseConfig(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if r.ModelType == nil {
		return nil, errors.New("missing field \"model_type\"")
	}
	c := &Config{ModelType: *r.ModelType, Architectures: r.Architectures}
	if !isSupported(c.ModelType) {
		return nil, fmt.Errorf("unsupported model_type %q (supported: %s)", c.ModelType, strings.Join(SupportedModelTypes(), ", "))
	}
	if c.ModelType == "gemma3" {
		if err := gemma3TextConfig(&r); err != nil {
			return nil, err
		}
		c.TensorPrefix = "language_model."
	}
	if err := c.setShape(&r); err != nil {
		return nil, err
	}
	c.setLayerDefaults(&r)
	c.setBiases(&r)
	var err error
	if c.SlidingWindow, err = slidingWindow(c.ModelType, r); err != nil {
		return nil, err
	}
	if err := c.setRope(&r); err != nil {
		return nil, err
	}
	if err := c.setTokenIDs(&r); err != nil {
		return nil, err
	}
	if IsGemma(c.ModelType) {
		if err := c.setGemma(&r); err != nil {
			return nil, err
		}
	}
	switch {
	case r.TorchDType != nil:
		c.TorchDType = *r.TorchDType
	case r.DType != nil:
		c.TorchDType = *r.DType
	}
	return c, nil
}

// setShape sets the model's dimensions: those config.json must name, then
// the KV heads and head size, which default per model_type.
func (c *Config) setShape(r *rawConfig) error {
	for _, f := range []struct {
		key string
		src *int
		dst *int
	}{
		{"hidden_size", r.HiddenSize, &c.HiddenSize},
		{"intermediate_size", r.IntermediateSize, &c.IntermediateSize},
		{"num_hidden_layers", r.NumLayers, &c.NumLayers},
		{"num_attention_heads", r.NumHeads, &c.NumHeads},
		{"vocab_size", r.VocabSize, &c.VocabSize},
	} {
		// transformers would fill in a 7B-sized default; a config without
		// its dimensions is far more likely a wrong file, so refuse.
		if f.src == nil {
			return fmt.Errorf("missing field %q", f.key)
		}
		*f.dst = *f.src
	}

	c.NumKVHeads = c.NumHeads // LlamaConfig: None -> num_attention_heads
	switch c.ModelType {
	case "mistral":
		c.NumKVHeads = 8
	case "qwen2", "qwen3":
		c.NumKVHeads = 32
	case "gemma2", "gemma3_text", "gemma3":
		c.NumKVHeads = 4
	}
	if r.NumKVHeads != nil {
		c.NumKVHeads = *r.NumKVHeads
	}

	switch {
	case r.HeadDim != nil:
		c.HeadDim = *r.HeadDim
	case c.ModelType == "qwen3":
		c.HeadDim = 128
	case IsGemma(c.ModelType):
		c.HeadDim = 256
	default:
		if c.NumHeads <= 0 || c.HiddenSize%c.NumHeads != 0 {
			return fmt.Errorf("hidden_size=%d is not a multiple of num_attention_heads=%d and head_dim is not given",
				c.HiddenSize, c.NumHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	return nil
}

// setLayerDefaults sets the context length, RMSNorm epsilon, activation
// and embedding tying, from r or the model_type's defaults.
func (c *Config) setLayerDefaults(r *rawConfig) {
	c.MaxPositionEmbeddings = map[string]int{"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768, "qwen3": 32768,
		"gemma2": 8192, "gemma3_text": 131072, "gemma3": 131072}[c.ModelType]
	if r.MaxPositionEmbeddings != nil {
		c.MaxPositionEmbeddings = *r.MaxPositionEmbeddings
	}
	c.RMSNormEps = 1e-6
	if r.RMSNormEps != nil {
		c.RMSNormEps = *r.RMSNormEps
	}
	c.HiddenAct = "silu"
	if r.HiddenAct != nil {
		c.HiddenAct = *r.HiddenAct
	}
	// The Llama-family classes default tie_word_embeddings to false,
	// unlike PretrainedConfig (true); Gemma's tie them.
	c.TieWordEmbeddings = IsGemma(c.ModelType)
	if r.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *r.TieWordEmbeddings
	}
}

// setBiases sets which projections carry a bias, and qwen3's QK norm, the
// way each model_type's attention and MLP modules build them.
func (c *Config) setBiases(r *rawConfig) {
	switch c.ModelType {
	case "llama":
		c.AttentionBias = r.AttentionBias != nil && *r.AttentionBias
		c.OutputBias = c.AttentionBias
		c.MLPBias = r.MLPBias != nil && *r.MLPBias
	case "qwen2":
		c.AttentionBias = true // Qwen2Attention hard-codes bias on q, k, v
	case "qwen3":
		c.AttentionBias = r.AttentionBias != nil && *r.AttentionBias
		c.OutputBias = c.AttentionBias
		c.QKNorm = true
	}
}

// setRope sets RoPE's base and scaling from rope_theta and rope_scaling,
// or from rope_parameters (transformers >= 5) where those are absent.
func (c *Config) setRope(r *rawConfig) error {
	c.RopeTheta = 10000
	if c.ModelType == "gemma3_text" || c.ModelType == "gemma3" {
		c.RopeTheta = 1e6 // Gemma3TextConfig
	}
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	scaling := r.RopeScaling
	if len(r.RopeParameters) > 0 && !isNull(r.RopeParameters) {
		var p struct {
			RopeTheta *float64 `json:"rope_theta"`
		}
		if err := json.Unmarshal(r.RopeParameters, &p); err != nil {
			return fmt.Errorf("rope_parameters: %v", err)
		}
		if p.RopeTheta != nil && r.RopeTheta == nil {
			c.RopeTheta = *p.RopeTheta
		}
		if len(scaling) == 0 || isNull(scaling) {
			scaling = r.RopeParameters
		}
	}
	var err error
	c.RopeScaling, err = parseRopeScaling(scaling)
	return err
}

// setTokenIDs sets the BOS, EOS and padding ids. LlamaConfig and
// MistralConfig default to BOS 1 / EOS 2; the Qwen classes name none.
func (c *Config) setTokenIDs(r *rawConfig) error {
	c.BOSTokenID, c.PadTokenID = -1, -1
	switch {
	case c.ModelType == "llama" || c.ModelType == "mistral":
		c.BOSTokenID, c.EOSTokenIDs = 1, []int{2}
	case IsGemma(c.ModelType):
		c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID = 2, []int{1}, 0
	}
	var err error
	if r.BOSTokenID != nil {
		if c.BOSTokenID, err = parseID("bos_token_id", r.BOSTokenID); err != nil {
			return err
		}
	}
	if r.EOSTokenID != nil {
		if c.EOSTokenIDs, err = parseIDs(r.EOSTokenID); err != nil {
			return fmt.Errorf("eos_token_id %s: %v", r.EOSTokenID, err)
		}
	}
	if r.PadTokenID != nil {
		if c.PadTokenID, err = parseID("pad_token_id", r.PadTokenID); err != nil {
			return err
		}
	}
	return nil
}

func isSupported(modelType string) bool {
	for _, s := range SupportedModelTypes() {
		if s == modelType {
			return true
		}
	}
	return false
}

func isNull(m json.RawMessage) bool { return strings.TrimSpace(string(m)) == "null" }

func slidingWindow(modelType string, r rawConfig) (int, error) {
	var w *int
	if len(r.SlidingWindow) > 0 && !isNull(r.SlidingWindow) {
		w = new(int)
		if err := json.Unmarshal(r.SlidingWindow, w); err != nil {
			return 0, fmt.Errorf("sliding_window %s is not an integer", r.SlidingWindow)
		}
	}
	switch modelType {
	case "mistral":
		if len(r.SlidingWindow) == 0 {
			return 4096, nil // MistralConfig default
		}
		if w == nil {
			return 0, nil
		}
		return *w, nil
	case "gemma2", "gemma3_text", "gemma3":
		if len(r.SlidingWindow) == 0 {
			return 4096, nil // Gemma2Config and Gemma3TextConfig default
		}
		if w == nil {
			return 0, errors.New("sliding_window is null: Gemma's local layers need a window")
		}
		return *w, nil
	case "qwen2", "qwen3":
		// Qwen configs carry a sliding_window that only applies, to some
		// layers, with use_sliding_window=true; no released checkpoint of
		// these families sets it.
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
			return 0, fmt.Errorf("use_sliding_window=true is not supported for model_type %q", modelType)
		}
	}
	return 0, nil
}

// parseID reads a token id field: an integer, or null (-1, none).
func parseID(key string, m json.RawMessage) (int, error) {
	if isNull(m) {
		return -1, nil
	}
	var id int
	if err := json.Unmarshal(m, &id); err != nil {
		return 0, fmt.Errorf("%s %s is not an integer", key, m)
	}
	return id, nil
}

// parseIDs accepts an integer, a list of integers or null.
func parseIDs(m json.RawMessage) ([]int, error) {
	if isNull(m) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(m, &one); err == nil {
		return []int{one}, nil
	}
	// Pointers, since encoding/json leaves an int at 0 for a null element.
	var many []*int
	if err := json.Unmarshal(m, &many); err != nil {
		return nil, errors.New("want an integer or a list of integers")
	}
	ids := make([]int, len(many))
	for i, p := range many {
		if p == nil {
			return nil, fmt.Errorf("element %d is null; want an integer or a list of integers", i)
		}
		ids[i] = *p
	}
	return ids, nil
}

// checkTokenID checks one token id of a configuration file against the
// model's vocabulary: 0 <= id < vocab, or -1 (none) where orNone allows
// it. field names it in errors as it is written in the file; vocabFrom,
// when not empty, names the file vocab comes from.
func checkTokenID(field string, id, vocab int, orNone bool, vocabFrom string) error {
	if orNone && id == -1 || id >= 0 && id < vocab {
		return nil
	}
	v := fmt.Sprintf("vocab_size=%d", vocab)
	if vocabFrom != "" {
		v = fmt.Sprintf("%s has vocab_size=%d", vocabFrom, vocab)
	}
	if id < 0 {
		none := ""
		if orNone {
			none = "; null for none"
		}
		return fmt.Errorf("%s=%d must not be negative (%s: token ids run 0..%d%s)", field, id, v, vocab-1, none)
	}
	return fmt.Errorf("%s=%d is outside the vocabulary (%s: token ids run 0..%d)", field, id, v, vocab-1)
}

// checkTokenIDs checks a list of token ids as checkTokenID does, naming an
// element field[i] when the list has several.
func checkTokenIDs(field string, ids []int, vocab int, vocabFrom string) error {
	for i, id := range ids {
		f := field
		if len(ids) > 1 {
			f = fmt.Sprintf("%s[%d]", field, i)
		}
		if err := checkTokenID(f, id, vocab, false, vocabFrom); err != nil {
			return err
		}
	}
	return nil
}

func parseRopeScaling(m json.RawMessage) (*RopeScaling, error) {
	if len(m) == 0 || isNull(m) {
		return nil, nil
	}
	var r struct {
		RopeType  *string  `json:"rope_type"`
		Type      *string  `json:"type"`
		Factor    *float64 `json:"factor"`
		Low       *float64 `json:"low_freq_factor"`
		High      *float64 `json:"high_freq_factor"`
		OrigMaxPE *int     `json:"original_max_position_embeddings"`
	}
	if err := json.Unmarshal(m, &r); err != nil {
		return nil, fmt.Errorf("rope_scaling %s: %v", m, err)
	}
	var typ string
	switch {
	case r.RopeType != nil:
		typ = *r.RopeType
	case r.Type != nil:
		typ = *r.Type
	default:
		return nil, fmt.Errorf("rope_scaling %s names no rope_type", m)
	}
	need := func(key string, v *float64) (float64, error) {
		if v == nil {
			return 0, fmt.Errorf("rope_scaling type %q needs %q", typ, key)
		}
		return *v, nil
	}
	s := &RopeScaling{Type: typ}
	var err error
	switch typ {
	case "default":
		return nil, nil
	case "linear":
		if s.Factor, err = need("factor", r.Factor); err != nil {
			return nil, err
		}
	case "llama3":
		if s.Factor, err = need("factor", r.Factor); err != nil {
			return nil, err
		}
		if s.LowFreqFactor, err = need("low_freq_factor", r.Low); err != nil {
			return nil, err
		}
		if s.HighFreqFactor, err = need("high_freq_factor", r.High); err != nil {
			return nil, err
		}
		if r.OrigMaxPE == nil {
			return nil, fmt.Errorf("rope_scaling type %q needs %q", typ, "original_max_position_embeddings")
		}
		s.OriginalMaxPositionEmbeddings = *r.OrigMaxPE
	default:
		return nil, fmt.Errorf("unsupported rope_scaling type %q (supported: linear, llama3)", typ)
	}
	return s, nil
}

// Upper bounds on the config.json sizes, each several times the largest
// released model of the supported families (Llama 3.1 405B: 126 layers,
// hidden 16384, intermediate 53248, 128 heads; vocabularies up to 256k;
// contexts up to 10M). They keep a corrupt or hostile config.json from
// making a loader allocate per-layer or per-position structures without
// bound before any tensor is read.
const (
	maxHiddenSize       = 1 << 16 // 65536
	maxIntermediateSize = 1 << 18 // 262144
	maxLayers           = 1 << 10 // 1024
	maxHeads            = 1 << 10 // 1024
	maxHeadDim          = 1 << 10 // 1024
	maxVocabSize        = 1 << 22 // 4194304
	maxPositions        = 1 << 24 // 16777216
)

// Validate checks that the configuration describes a model the engine can
// build: every size positive and within a sane upper bound (1024 layers,
// heads and head_dim, hidden_size 65536, intermediate_size 262144,
// vocab_size 4194304, max_position_embeddings 16777216), heads that group
// evenly, supported activation and RoPE settings, and token ids
// (bos_token_id, every eos_token_id, pad_token_id) that are rows of
// vocab_size; with Generation set, its ids too. Errors name the
// config.json field and its value.
//
// Validate only looks at the configuration; CheckTensors checks it against
// a checkpoint.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("no configuration")
	}
	if !isSupported(c.ModelType) {
		return fmt.Errorf("unsupported model_type %q (supported: %s)", c.ModelType, strings.Join(SupportedModelTypes(), ", "))
	}
	for _, f := range []struct {
		key string
		v   int
		max int
	}{
		{"hidden_size", c.HiddenSize, maxHiddenSize},
		{"intermediate_size", c.IntermediateSize, maxIntermediateSize},
		{"num_hidden_layers", c.NumLayers, maxLayers},
		{"num_attention_heads", c.NumHeads, maxHeads},
		{"num_key_value_heads", c.NumKVHeads, maxHeads},
		{"head_dim", c.HeadDim, maxHeadDim},
		{"vocab_size", c.VocabSize, maxVocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings, maxPositions},
	} {
		if f.v <= 0 {
			return fmt.Errorf("%s=%d must be positive", f.key, f.v)
		}
		if f.v > f.max {
			return fmt.Errorf("%s=%d is implausibly large (at most %d supported)", f.key, f.v, f.max)
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads=%d is not a multiple of num_key_value_heads=%d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim=%d must be even for rotary embeddings", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return fmt.Errorf("rms_norm_eps=%v must be positive and finite", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("rope_theta=%v must be positive and finite", c.RopeTheta)
	}
	if IsGemma(c.ModelType) {
		if err := c.validateGemma(); err != nil {
			return err
		}
	} else if c.HiddenAct != "silu" && c.HiddenAct != "swish" {
		return fmt.Errorf("hidden_act=%q is not supported (supported: silu)", c.HiddenAct)
	}
	if c.SlidingWindow < 0 {
		return fmt.Errorf("sliding_window=%d must not be negative", c.SlidingWindow)
	}
	// Token ids index the embedding and the logits: each must name a row
	// of vocab_size (transformers builds its embedding with
	// padding_idx=pad_token_id, which torch also requires to be in range).
	if err := checkTokenID("bos_token_id", c.BOSTokenID, c.VocabSize, true, ""); err != nil {
		return err
	}
	if err := checkTokenIDs("eos_token_id", c.EOSTokenIDs, c.VocabSize, ""); err != nil {
		return err
	}
	if err := checkTokenID("pad_token_id", c.PadTokenID, c.VocabSize, true, ""); err != nil {
		return err
	}
	if c.Generation != nil {
		if err := c.Generation.Validate(c.VocabSize); err != nil {
			return fmt.Errorf("generation_config.json: %w", err)
		}
	}
	if s := c.RopeScaling; s != nil {
		switch s.Type {
		case "linear":
			if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
				return fmt.Errorf("rope_scaling.factor=%v must be positive", s.Factor)
			}
		case "llama3":
			if !(s.Factor >= 1) || math.IsInf(s.Factor, 0) {
				return fmt.Errorf("rope_scaling.factor=%v must be at least 1", s.Factor)
			}
			if !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0) {
				return fmt.Errorf("rope_scaling low_freq_factor=%v, high_freq_factor=%v: need 0 < low < high",
					s.LowFreqFactor, s.HighFreqFactor)
			}
			if s.OriginalMaxPositionEmbeddings <= 0 || s.OriginalMaxPositionEmbeddings > maxPositions {
				return fmt.Errorf("rope_scaling.original_max_position_embeddings=%d must be positive and at most %d",
					s.OriginalMaxPositionEmbeddings, maxPositions)
			}
		default:
			return fmt.Errorf("unsupported rope_scaling type %q (supported: linear, llama3)", s.Type)
		}
	}
	return nil
}
