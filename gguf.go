package kakeya

import (
	"fmt"
	"path/filepath"

	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"
)

// LoadTokenizer loads the tokenizer of a model: the tokenizer.json (and
// tokenizer_config.json) of a model directory, or the tokenizer.ggml.*
// keys and tokenizer.chat_template of a GGUF file (weights.IsGGUF).
func LoadTokenizer(dirOrFile string) (*tokenizer.Tokenizer, error) {
	if !weights.IsGGUF(dirOrFile) {
		return tokenizer.Load(filepath.Join(dirOrFile, "tokenizer.json"))
	}
	g, err := weights.OpenGGUF(dirOrFile)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	v, err := ggufVocab(g)
	if err != nil {
		return nil, err
	}
	return tokenizer.FromVocab(g.Path, v)
}

// ggufVocab reads the tokenizer keys of a GGUF file; a key of the wrong
// type is an error naming it.
func ggufVocab(g *weights.GGUF) (*tokenizer.Vocab, error) {
	v := &tokenizer.Vocab{BOS: -1, EOS: -1, Unk: -1, AddSpacePrefix: true}
	var err error
	str := func(key string, dst *string, need bool) {
		var ok bool
		if err == nil {
			if *dst, ok, err = g.String(key); err == nil && need && !ok {
				err = fmt.Errorf("kakeya: %s: metadata key %q is missing", g.Path, key)
			}
		}
	}
	str("tokenizer.ggml.model", &v.Model, true)
	str("tokenizer.ggml.pre", &v.Pre, false)
	str("tokenizer.chat_template", &v.ChatTemplate, false)
	if err != nil {
		return nil, err
	}
	if v.Pre == "" {
		v.Pre = "default"
	}
	if v.Tokens, _, err = g.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, err
	}
	if v.Types, _, err = g.Int32s("tokenizer.ggml.token_type"); err != nil {
		return nil, err
	}
	if v.Scores, _, err = g.Float32s("tokenizer.ggml.scores"); err != nil {
		return nil, err
	}
	if v.Merges, _, err = g.Strings("tokenizer.ggml.merges"); err != nil {
		return nil, err
	}
	for _, id := range []struct {
		key string
		dst *int
	}{{"bos_token_id", &v.BOS}, {"eos_token_id", &v.EOS}, {"unknown_token_id", &v.Unk}} {
		n, ok, err := g.Int("tokenizer.ggml." + id.key)
		if err != nil {
			return nil, err
		}
		// An id outside the vocabulary is ignored, as llama.cpp does.
		if ok && n >= 0 && n < int64(len(v.Tokens)) {
			*id.dst = int(n)
		}
	}
	// llama.cpp's defaults: a SentencePiece vocabulary adds BOS, a
	// byte-level BPE one does not, unless the file says.
	v.AddBOS = v.Model == "llama"
	for _, b := range []struct {
		key string
		dst *bool
	}{{"add_bos_token", &v.AddBOS}, {"add_eos_token", &v.AddEOS}, {"add_space_prefix", &v.AddSpacePrefix}} {
		x, ok, err := g.Bool("tokenizer.ggml." + b.key)
		if err != nil {
			return nil, err
		}
		if ok {
			*b.dst = x
		}
	}
	return v, nil
}
