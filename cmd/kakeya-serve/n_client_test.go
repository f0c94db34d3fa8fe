//go:build openai

package main

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/kakeya-ai/kakeya"
)

// n and echo through the official client: chat with n = 2 (whole, and
// streamed through its accumulator), each choice the reference engine's
// sample with seed+i; a text completion with echo and logprobs.
func TestOpenAIClientNEcho(t *testing.T) {
	ss := newScriptedServer(t)
	ref := reference(t)
	c := openai.NewClient(option.WithBaseURL(ss.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	const seed, n = 11, 2
	const question = "Name a colour."
	want := make([]*kakeya.Result, n)
	for i := range want {
		want[i] = generate(t, ref, question, kakeya.GenerateOptions{Chat: true, MaxTokens: 8, Sampling: kakeya.SamplingOptions{Temperature: 1, Seed: seed + uint64(i)}})
	}
	params := openai.ChatCompletionNewParams{
		Model:     "ref",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		N:         openai.Int(n),
		Seed:      openai.Int(seed),
		MaxTokens: openai.Int(8),
	}
	got, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Choices) != n || got.Usage.PromptTokens != int64(want[0].PromptTokens) || got.Usage.CompletionTokens != int64(want[0].GeneratedTokens+want[1].GeneratedTokens) {
		t.Fatalf("%d choices, usage %+v", len(got.Choices), got.Usage)
	}
	for i, ch := range got.Choices {
		if ch.Index != int64(i) || ch.Message.Content != want[i].Text {
			t.Errorf("choice %d: index %d %q, want %q", i, ch.Index, ch.Message.Content, want[i].Text)
		}
	}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != n {
		t.Fatalf("streamed: %d choices", len(acc.Choices))
	}
	for i, ch := range acc.Choices {
		if ch.Message.Content != want[i].Text {
			t.Errorf("streamed choice %d: %q, want %q", i, ch.Message.Content, want[i].Text)
		}
	}

	const prompt = "The sky is"
	ids, _ := ref.PromptIDs(prompt, kakeya.GenerateOptions{})
	plp, err := ref.PromptLogprobs(ctx, ids, 1)
	if err != nil {
		t.Fatal(err)
	}
	greedy := generate(t, ref, prompt, kakeya.GenerateOptions{MaxTokens: 3, Sampling: kakeya.SamplingOptions{Temperature: 0}})
	comp, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:       openai.CompletionNewParamsModel("ref"),
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		Echo:        openai.Bool(true),
		Logprobs:    openai.Int(1),
		MaxTokens:   openai.Int(3),
		Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := comp.Choices[0]
	if ch.Text != prompt+greedy.Text || !strings.HasPrefix(ch.Text, prompt) {
		t.Errorf("echo: %q, want %q", ch.Text, prompt+greedy.Text)
	}
	lp := ch.Logprobs
	if len(lp.Tokens) != len(ids)+greedy.GeneratedTokens || lp.JSON.TokenLogprobs.Raw() == "" || !strings.HasPrefix(lp.JSON.TokenLogprobs.Raw(), "[null,") {
		t.Fatalf("echo logprobs: %d tokens, token_logprobs %s", len(lp.Tokens), lp.JSON.TokenLogprobs.Raw())
	}
	for i := 1; i < len(ids); i++ {
		if lp.Tokens[i] != plp[i].Text || math.Abs(lp.TokenLogprobs[i]-float64(plp[i].Logprob)) > 1e-4 {
			t.Errorf("prompt token %d: %q %g, want %q %g", i, lp.Tokens[i], lp.TokenLogprobs[i], plp[i].Text, plp[i].Logprob)
		}
	}
}
