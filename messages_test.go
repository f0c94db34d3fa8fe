package kakeya

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// GenerateOptions.Messages renders the whole conversation through the chat
// template: a system and a user turn give the ids of System and a prompt,
// more turns the template's rendering of all of them, and the options that
// would be ignored beside it are errors.
func TestGenerateMessages(t *testing.T) {
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	e, err := Load(context.Background(), dir, Options{Threads: 2, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	pair := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello"}}
	want, err := e.PromptIDs("Hello", GenerateOptions{Chat: true, System: "Be brief."})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.PromptIDs("", GenerateOptions{Chat: true, Messages: pair})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("system+user Messages: ids %v, want those of System and the prompt %v", got, want)
	}

	turns := append(slices.Clone(pair), Message{Role: "assistant", Content: "Hi."}, Message{Role: "user", Content: "More"})
	var tturns []tokenizer.Message
	for _, m := range turns {
		tturns = append(tturns, tokenizer.Message{Role: m.Role, Content: m.Content})
	}
	text, err := e.tok.ApplyChat(tturns, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err = e.PromptIDs("", GenerateOptions{Chat: true, Messages: turns})
	if err != nil {
		t.Fatal(err)
	}
	if want := e.tok.Encode(text, false); !slices.Equal(got, want) {
		t.Errorf("four turns: ids %v, want the template's %v", got, want)
	}
	if !strings.Contains(text, "<|im_start|>assistant\nHi.<|im_end|>") {
		t.Errorf("the rendering lacks the assistant turn:\n%s", text)
	}

	// Roles are the template's to judge: this ChatML template renders any
	// role as a turn, as transformers would.
	text, err = e.tok.ApplyChat([]tokenizer.Message{{Role: "tool", Content: "x"}}, false)
	if err != nil || !strings.HasSuffix(text, "<|im_start|>tool\nx<|im_end|>\n") {
		t.Errorf("a tool turn: %q, %v; want the template's ChatML turn", text, err)
	}

	// Greedy generation from Messages is that from System and a prompt.
	a, err := e.Generate(context.Background(), "Hello", GenerateOptions{Chat: true, System: "Be brief.", MaxTokens: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Generate(context.Background(), "", GenerateOptions{Chat: true, Messages: pair, MaxTokens: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Text != b.Text || a.PromptTokens != b.PromptTokens || a.GeneratedTokens != b.GeneratedTokens {
		t.Errorf("Messages: %q (%d+%d tokens), want %q (%d+%d)", b.Text, b.PromptTokens, b.GeneratedTokens, a.Text, a.PromptTokens, a.GeneratedTokens)
	}

	for _, tt := range []struct {
		name, prompt string
		opt          GenerateOptions
		want         string
	}{
		{"without chat", "", GenerateOptions{Messages: pair}, "GenerateOptions.Messages needs Chat"},
		{"with system", "", GenerateOptions{Chat: true, System: "x", Messages: pair}, "Messages and System exclude each other"},
		{"with a prompt", "Hello", GenerateOptions{Chat: true, Messages: pair}, "a prompt and GenerateOptions.Messages exclude each other"},
		{"kwargs without chat", "Hello", GenerateOptions{ChatTemplateKwargs: map[string]any{"enable_thinking": false}}, "ChatTemplateKwargs needs Chat"},
		{"kwargs not JSON", "Hello", GenerateOptions{Chat: true, ChatTemplateKwargs: map[string]any{"f": func() {}}}, `chat template variable "f"`},
		{"reserved kwarg", "Hello", GenerateOptions{Chat: true, ChatTemplateKwargs: map[string]any{"messages": 1}}, `variable "messages" is set from the request`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Generate(context.Background(), tt.prompt, tt.opt, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// IgnoreEOS runs to MaxTokens where the same greedy generation stops at
// EOS, with the same text up to there.
func TestGenerateIgnoreEOS(t *testing.T) {
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	e, err := Load(context.Background(), dir, Options{Threads: 2, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	stops, err := e.Generate(context.Background(), "Hello", GenerateOptions{MaxTokens: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stops.StopReason != StopEOS || stops.GeneratedTokens >= 40 {
		t.Fatalf("greedy from %q: %d tokens, stop %q; the test wants a prompt that ends at EOS", "Hello", stops.GeneratedTokens, stops.StopReason)
	}
	runs, err := e.Generate(context.Background(), "Hello", GenerateOptions{MaxTokens: 40, IgnoreEOS: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if runs.StopReason != StopLength || runs.GeneratedTokens != 40 || !strings.HasPrefix(runs.Text, stops.Text) {
		t.Errorf("IgnoreEOS: %d tokens, stop %q, text %q; want 40, %q, and a text starting %q", runs.GeneratedTokens, runs.StopReason, runs.Text, StopLength, stops.Text)
	}
}
