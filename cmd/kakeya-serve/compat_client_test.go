//go:build openai

package main

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/kakeya-ai/kakeya"
)

// The official client's store, parallel_tool_calls, metadata and a user
// message's name are accepted and change nothing: the greedy answer is
// the reference's for the same question.
func TestOpenAIClientNeutralFields(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	const question = "What is the capital of France?"
	want := generate(t, ref, question, kakeya.GenerateOptions{Chat: true, MaxTokens: 12})
	c := s.client()
	got, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "ref",
		Messages: []openai.ChatCompletionMessageParamUnion{{OfUser: &openai.ChatCompletionUserMessageParam{
			Content: openai.ChatCompletionUserMessageParamContentUnion{OfString: openai.String(question)},
			Name:    openai.String("alice"),
		}}},
		MaxTokens:         openai.Int(12),
		Temperature:       openai.Float(0),
		Store:             openai.Bool(false),
		ParallelToolCalls: openai.Bool(false),
		Metadata:          map[string]string{"app": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Choices) != 1 || got.Choices[0].Message.Content != want.Text {
		t.Fatalf("choices %+v, want one with %q", got.Choices, want.Text)
	}
	if got.Usage.PromptTokens != int64(want.PromptTokens) {
		t.Errorf("usage %+v, want %d prompt tokens", got.Usage, want.PromptTokens)
	}
}

// The official client's embeddings, floats, are the reference engine's
// vectors (last-token pooling, unit length), with the tokens counted.
func TestOpenAIClientEmbeddings(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	texts := []string{"The capital of France is Paris.", "Once upon a time"}
	want, tokens, err := ref.Embed(context.Background(), texts, kakeya.EmbedOptions{Normalize: true})
	if err != nil {
		t.Fatal(err)
	}
	c := s.client()
	got, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "ref",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != len(texts) || got.Usage.PromptTokens != int64(tokens[0]+tokens[1]) || got.Model != "ref" {
		t.Fatalf("%d vectors, usage %+v, model %q", len(got.Data), got.Usage, got.Model)
	}
	for i, d := range got.Data {
		if d.Index != int64(i) || len(d.Embedding) != len(want[i]) {
			t.Fatalf("data[%d]: index %d, %d values, want %d", i, d.Index, len(d.Embedding), len(want[i]))
		}
		for j, v := range d.Embedding {
			if float32(v) != want[i][j] {
				t.Fatalf("data[%d][%d] = %g, Engine.Embed %g", i, j, v, want[i][j])
			}
		}
	}
}
