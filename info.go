package kakeya

// ModelInfo describes a loaded model as data: what a program needs of it
// without the model package's types.
type ModelInfo struct {
	// Dir is the local directory the model was loaded from.
	Dir string
	// Type is config.json's model_type, e.g. "qwen2".
	Type string
	// Layers, HiddenSize, Heads, KVHeads and HeadDim are the decoder's
	// shape; HiddenSize is also the length of Embed's vectors.
	Layers, HiddenSize, Heads, KVHeads, HeadDim int
	// VocabSize is the model's vocab_size: the length of a row of logits.
	VocabSize int
	// MaxContext is the most tokens a sequence may hold (Options.MaxContext
	// applied); MaxTokens may be less, where the KV memory holds fewer.
	MaxContext int
	// Weights describes the matrices as they were uploaded: each element
	// type with its bytes, largest first, then the total, e.g. "q4_k 3.38
	// MiB, q6_k 1.46 MiB (4.84 MiB)".
	Weights string
}

// ModelInfo returns what the engine's model is: its directory, family,
// shape, vocabulary, context and weights.
func (e *Engine) ModelInfo() ModelInfo {
	c := e.model.Config()
	return ModelInfo{
		Dir: e.dir, Type: c.ModelType,
		Layers: c.NumLayers, HiddenSize: c.HiddenSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		VocabSize: c.VocabSize, MaxContext: e.model.MaxContext(), Weights: e.model.Weights(),
	}
}

// VocabSize returns the number of tokens the tokenizer knows: the ids
// Decode takes are 0 to VocabSize()-1 (the model's vocab_size,
// ModelInfo().VocabSize, may be larger, its extra rows padding).
func (e *Engine) VocabSize() int { return e.tok.VocabSize() }

// Encode returns the token ids of text as the model's tokenizer reads it,
// with the beginning-of-sequence token the model wants first when
// addSpecial is set (as Generate's plain prompts get it).
func (e *Engine) Encode(text string, addSpecial bool) []int { return e.tok.Encode(text, addSpecial) }

// ToolTemplate returns the text of the model's chat template that renders
// a conversation with tools (GenerateOptions.Tools): the "tool_use"
// template of a named list, else the default one; "" when there is none.
func (e *Engine) ToolTemplate() string { return e.tok.ToolTemplate() }

// SetChatTemplate replaces the model's chat template with source, a
// Jinja template as tokenizer_config.json's chat_template holds it (name
// says where it came from, for errors). Call it before any generation: a
// conversation already being rendered keeps the old one.
func (e *Engine) SetChatTemplate(name, source string) error {
	return e.tok.SetChatTemplate(name, source)
}

// Decode returns the text of ids (each 0 to VocabSize()-1), leaving the
// special tokens out when skipSpecial is set.
func (e *Engine) Decode(ids []int, skipSpecial bool) string { return e.tok.Decode(ids, skipSpecial) }
