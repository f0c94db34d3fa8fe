package kakeya

import (
	"fmt"
	"sync"

	"github.com/kakeya-ai/kakeya/grammar"
)

// grammars keeps an engine's structured-output state: its vocabulary's
// trie, built on first use, and the masks of the schemas recently asked
// for, so that requests sending the same schema share computed masks.
type grammars struct {
	once  sync.Once
	vocab *grammar.Vocab
	bytes [][]byte // each token's bytes, what the trie holds

	mu    sync.Mutex
	masks map[string]*grammar.Masks
}

// grammarsKept bounds the schemas whose masks an engine keeps.
const grammarsKept = 8

// CheckJSONSchema reports whether schema is one that GenerateOptions'
// JSONSchema takes: JSON text of the subset package grammar compiles.
// The error names the keyword and its path (a *grammar.SchemaError).
func CheckJSONSchema(schema []byte) error {
	_, err := grammar.CompileSchema(schema)
	return err
}

// constrained reports whether opt asks for structured output.
func (o *GenerateOptions) constrained() bool { return o.JSON || len(o.JSONSchema) > 0 }

// matcher returns the grammar matcher of a generation under opt, nil
// when opt does not constrain it; eos are the tokens that end it.
func (e *Engine) matcher(opt *GenerateOptions, eos map[int]bool) (*grammar.Matcher, error) {
	if !opt.constrained() {
		return nil, nil
	}
	gs := &e.grammars
	gs.once.Do(func() {
		n := max(e.model.Config().VocabSize, e.tok.VocabSize())
		gs.bytes = make([][]byte, n)
		for id := range e.tok.VocabSize() {
			gs.bytes[id] = e.tok.TokenBytes(id)
		}
		gs.vocab = grammar.NewVocab(gs.bytes)
	})
	key := "json_object"
	if len(opt.JSONSchema) > 0 {
		key = string(opt.JSONSchema)
	}
	gs.mu.Lock()
	m, ok := gs.masks[key]
	gs.mu.Unlock()
	if !ok {
		g := grammar.JSONObject()
		if len(opt.JSONSchema) > 0 {
			var err error
			if g, err = grammar.CompileSchema(opt.JSONSchema); err != nil {
				return nil, fmt.Errorf("kakeya: GenerateOptions.JSONSchema: %w", err)
			}
		}
		m = grammar.NewMasks(g, gs.vocab)
		gs.mu.Lock()
		if gs.masks == nil {
			gs.masks = map[string]*grammar.Masks{}
		}
		if len(gs.masks) >= grammarsKept {
			for k := range gs.masks {
				delete(gs.masks, k)
				break
			}
		}
		gs.masks[key] = m
		gs.mu.Unlock()
	}
	ids := make([]int, 0, len(eos))
	for id := range eos {
		ids = append(ids, id)
	}
	return m.NewMatcher(ids, func(id int) []byte { return gs.bytes[id] }), nil
}
