package kakeya

import (
	"errors"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/model"
)

// newGeneration settles the token budget and its StopReason from MaxTokens
// and the room the prompt leaves, and refuses, before the model runs, a
// prompt that leaves none.
func TestNewGeneration(t *testing.T) {
	const maxContext = 24
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1, MaxContext: maxContext})
	ids, err := e.PromptIDs("abc", GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	room := maxContext - len(ids)
	// The byte tokenizer gives a token per byte, after BOS where it adds one.
	extra := len(ids) - len("abc")
	oneLeft := strings.Repeat("a", maxContext-1-extra)
	for _, tc := range []struct {
		prompt    string
		maxTokens int
		maxNew    int
		limit     string
	}{
		{"abc", 0, room, StopContext},
		{"abc", 5, 5, StopLength},
		{"abc", room, room, StopLength},
		{"abc", room + 1, room, StopContext},
		{oneLeft, 0, 1, StopContext},
		{oneLeft, 1, 1, StopLength},
	} {
		g, err := e.newGeneration(tc.prompt, GenerateOptions{MaxTokens: tc.maxTokens, Stop: []string{"x"}}, nil)
		if err != nil {
			t.Fatalf("%q, MaxTokens %d: %v", tc.prompt, tc.maxTokens, err)
		}
		if g.maxNew != tc.maxNew || g.limit != tc.limit || len(g.filter.stops) != 1 || len(g.eos) == 0 {
			t.Errorf("%q, MaxTokens %d: %d tokens, limit %q, stops %q, %d EOS ids; want %d, %q, [x], some",
				tc.prompt, tc.maxTokens, g.maxNew, g.limit, g.filter.stops, len(g.eos), tc.maxNew, tc.limit)
		}
	}

	var ce *model.ContextError
	full := strings.Repeat("a", maxContext-extra)
	if _, err := e.newGeneration(full, GenerateOptions{}, nil); !errors.As(err, &ce) || ce.Tokens != maxContext || ce.Context != maxContext || !ce.Generate {
		t.Errorf("a prompt filling the context: err = %v, want a ContextError for %d tokens", err, maxContext)
	}
	if _, err := e.newGeneration("abc", GenerateOptions{MaxTokens: -1}, nil); err == nil || !strings.Contains(err.Error(), "max tokens -1 must be >= 0") {
		t.Errorf("MaxTokens -1: err = %v, want it named", err)
	}
}
