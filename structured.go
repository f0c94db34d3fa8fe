package kakeya

import (
	"fmt"
	"strings"
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

// CheckToolParameters reports whether parameters, a tool's JSON Schema,
// is one that GenerateOptions.ToolCall takes: an object's schema of the
// subset package grammar compiles (nil for any object). The error names
// the keyword and its path (a *grammar.SchemaError).
func CheckToolParameters(parameters []byte) error {
	_, err := grammar.CompileArguments(parameters)
	return err
}

// constrained reports whether opt asks for structured output.
func (o *GenerateOptions) constrained() bool {
	return o.JSON || len(o.JSONSchema) > 0 || o.ToolCall != nil
}

// grammarKey returns the key of opt's grammar among an engine's kept
// masks.
func (o *GenerateOptions) grammarKey() string {
	tc := o.ToolCall
	switch {
	case tc != nil:
		var sb strings.Builder
		fmt.Fprintf(&sb, "tools %q %v", tc.ArgumentsKey, tc.ArgumentsOnly)
		for _, t := range tc.Tools {
			fmt.Fprintf(&sb, "\x00%q\x00%s", t.Name, t.Parameters)
		}
		return sb.String()
	case len(o.JSONSchema) > 0:
		return "schema " + string(o.JSONSchema)
	}
	return "json_object"
}

// compileGrammar compiles opt's grammar.
func (o *GenerateOptions) compileGrammar() (*grammar.Grammar, error) {
	tc := o.ToolCall
	switch {
	case tc != nil && tc.ArgumentsOnly:
		g, err := grammar.CompileArguments(tc.Tools[0].Parameters)
		if err != nil {
			return nil, fmt.Errorf("kakeya: GenerateOptions.ToolCall: tool %q: %w", tc.Tools[0].Name, err)
		}
		return g, nil
	case tc != nil:
		tools := make([]grammar.Tool, len(tc.Tools))
		for i, t := range tc.Tools {
			tools[i] = grammar.Tool{Name: t.Name, Parameters: t.Parameters}
		}
		g, err := grammar.CompileToolCall(tc.ArgumentsKey, tools)
		if err != nil {
			return nil, fmt.Errorf("kakeya: GenerateOptions.ToolCall: %w", err)
		}
		return g, nil
	case len(o.JSONSchema) > 0:
		g, err := grammar.CompileSchema(o.JSONSchema)
		if err != nil {
			return nil, fmt.Errorf("kakeya: GenerateOptions.JSONSchema: %w", err)
		}
		return g, nil
	}
	return grammar.JSONObject(), nil
}

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
	key := opt.grammarKey()
	gs.mu.Lock()
	m, ok := gs.masks[key]
	gs.mu.Unlock()
	if !ok {
		g, err := opt.compileGrammar()
		if err != nil {
			return nil, err
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
