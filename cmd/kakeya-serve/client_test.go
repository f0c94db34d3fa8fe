//go:build openai

// The tests through the official OpenAI Go client (github.com/openai/openai-go,
// about 160k lines to compile) build with -tags openai, which make test
// gives its one SIMD vet and test run, so that a cold build compiles that
// client once.

package main

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/kakeya-ai/kakeya"
)

// client returns the official OpenAI client for s, without retries (a
// retried request would hide a failure).
func (s *testServer) client(opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(s.url + "/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0)}, opts...)...)
}

// The official client gets, from chat and text completions, plain and
// streamed, the greedy text kakeya-run prints for the same prompt and
// settings (Engine.Generate, which it calls), with its token counts and
// finish reason.
func TestOpenAIClient(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	c := s.client()
	ctx := context.Background()

	const question = "What is the capital of France?"
	chatWant := generate(t, ref, question, kakeya.GenerateOptions{Chat: true, MaxTokens: 24})
	if chatWant.Text == "" {
		t.Fatal("the reference chat answer is empty: pick another prompt")
	}
	chatParams := openai.ChatCompletionNewParams{
		Model:       "ref",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		MaxTokens:   openai.Int(24),
		Temperature: openai.Float(0),
	}
	t.Run("chat", func(t *testing.T) {
		got, err := c.Chat.Completions.New(ctx, chatParams)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Choices) != 1 || got.Choices[0].Message.Content != chatWant.Text || got.Choices[0].Message.Role != "assistant" {
			t.Fatalf("choices %+v, want one with %q", got.Choices, chatWant.Text)
		}
		if fr := got.Choices[0].FinishReason; fr != finishReason(chatWant.StopReason) {
			t.Errorf("finish_reason %q, want %q (%s)", fr, finishReason(chatWant.StopReason), chatWant.StopReason)
		}
		if u := got.Usage; u.PromptTokens != int64(chatWant.PromptTokens) || u.CompletionTokens != int64(chatWant.GeneratedTokens) || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage %+v, want %d prompt and %d completion tokens", u, chatWant.PromptTokens, chatWant.GeneratedTokens)
		}
		if got.Object != "chat.completion" || got.Model != "ref" || !strings.HasPrefix(got.ID, "chatcmpl-") {
			t.Errorf("object %q, model %q, id %q", got.Object, got.Model, got.ID)
		}
	})
	t.Run("chat streamed", func(t *testing.T) {
		p := chatParams
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			acc.AddChunk(ch)
			chunks++
			if len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != chatWant.Text || chunks < 3 {
			t.Fatalf("streamed %q in %d chunks, want %q in several", text.String(), chunks, chatWant.Text)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != chatWant.Text || acc.Choices[0].FinishReason != finishReason(chatWant.StopReason) {
			t.Errorf("accumulated %+v", acc.Choices)
		}
		if u := acc.Usage; u.PromptTokens != int64(chatWant.PromptTokens) || u.CompletionTokens != int64(chatWant.GeneratedTokens) {
			t.Errorf("streamed usage %+v, want %d prompt and %d completion tokens", u, chatWant.PromptTokens, chatWant.GeneratedTokens)
		}
	})

	const story = "Once upon a time"
	textWant := generate(t, ref, story, kakeya.GenerateOptions{MaxTokens: 20})
	textParams := openai.CompletionNewParams{
		Model:       "ref",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(story)},
		MaxTokens:   openai.Int(20),
		Temperature: openai.Float(0),
	}
	t.Run("completions", func(t *testing.T) {
		got, err := c.Completions.New(ctx, textParams)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Choices) != 1 || got.Choices[0].Text != textWant.Text || string(got.Choices[0].FinishReason) != "length" {
			t.Fatalf("choices %+v, want %q and length", got.Choices, textWant.Text)
		}
		if got.Usage.PromptTokens != int64(textWant.PromptTokens) || got.Usage.CompletionTokens != 20 {
			t.Errorf("usage %+v", got.Usage)
		}
	})
	t.Run("completions streamed", func(t *testing.T) {
		p := textParams
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Completions.NewStreaming(ctx, p)
		var text strings.Builder
		finish, completion := "", int64(0)
		for stream.Next() {
			ch := stream.Current()
			for _, c := range ch.Choices {
				text.WriteString(c.Text)
				if c.FinishReason != "" {
					finish = string(c.FinishReason)
				}
			}
			if ch.Usage.TotalTokens > 0 {
				completion = ch.Usage.CompletionTokens
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != textWant.Text || finish != "length" || completion != 20 {
			t.Fatalf("streamed %q, finish %q, %d completion tokens; want %q, length, 20", text.String(), finish, completion, textWant.Text)
		}
	})
	t.Run("stop", func(t *testing.T) {
		// The reference text up to its third word, stopped before the
		// fourth.
		words := strings.SplitAfter(textWant.Text, " ")
		if len(words) < 5 {
			t.Fatalf("reference text %q has too few words", textWant.Text)
		}
		stop := strings.TrimSpace(words[3])
		want := textWant.Text[:strings.Index(textWant.Text, stop)]
		p := textParams
		p.Stop = openai.CompletionNewParamsStopUnion{OfStringArray: []string{"never there", stop}}
		got, err := c.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Text != want || got.Choices[0].FinishReason != "stop" {
			t.Fatalf("with stop %q: %q (%s), want %q (stop)", stop, got.Choices[0].Text, got.Choices[0].FinishReason, want)
		}
	})
	t.Run("multi-turn chat", func(t *testing.T) {
		msgs := []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage("Hello"),
			openai.AssistantMessage("Hi."),
			openai.UserMessage(question),
		}
		p := chatParams
		p.Messages = msgs
		got, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Generate(ctx, "", kakeya.GenerateOptions{Chat: true, MaxTokens: 24, Messages: toMessages(
			"system", "You are terse.", "user", "Hello", "assistant", "Hi.", "user", question)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Message.Content != want.Text || got.Usage.PromptTokens != int64(want.PromptTokens) {
			t.Fatalf("%q (%d prompt tokens), want %q (%d)", got.Choices[0].Message.Content, got.Usage.PromptTokens, want.Text, want.PromptTokens)
		}
	})
	t.Run("models", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != "ref" || page.Data[0].OwnedBy != "kakeya" {
			t.Fatalf("models %+v, want the one served, ref", page.Data)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		p := chatParams
		p.Model = "gpt-4o"
		_, err := c.Chat.Completions.New(ctx, p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Param != "model" {
			t.Fatalf("error %v, want a 404 model_not_found", err)
		}
	})
}

// toMessages pairs up role, content, role, content, ...
func toMessages(rc ...string) []kakeya.Message {
	var msgs []kakeya.Message
	for i := 0; i+1 < len(rc); i += 2 {
		msgs = append(msgs, kakeya.Message{Role: rc[i], Content: rc[i+1]})
	}
	return msgs
}

// 32 clients at once, half of them streaming, each get exactly the greedy
// text their prompt gets alone: batching changes nothing in the output.
func TestConcurrentClients(t *testing.T) {
	ref := reference(t)
	const n, maxTokens = 32, 16
	ps := prompts(n)
	want := make([]string, n)
	for i, p := range ps {
		want[i] = generate(t, ref, p, kakeya.GenerateOptions{Chat: true, MaxTokens: maxTokens}).Text
	}
	if slices.Equal(want[:n/2], want[n/2:]) {
		t.Fatal("the prompts' solo outputs are alike: the test would not tell the requests apart")
	}
	s := startServer(t)
	c := s.client()
	ctx := context.Background()
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p := openai.ChatCompletionNewParams{
				Model:       "ref",
				Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(ps[i])},
				MaxTokens:   openai.Int(maxTokens),
				Temperature: openai.Float(0),
			}
			if i%2 == 0 {
				res, err := c.Chat.Completions.New(ctx, p)
				if err == nil {
					got[i] = res.Choices[0].Message.Content
				}
				errs[i] = err
				return
			}
			stream := c.Chat.Completions.NewStreaming(ctx, p)
			var sb strings.Builder
			for stream.Next() {
				if ch := stream.Current(); len(ch.Choices) > 0 {
					sb.WriteString(ch.Choices[0].Delta.Content)
				}
			}
			got[i], errs[i] = sb.String(), stream.Err()
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("client %d: %v", i, errs[i])
		} else if got[i] != want[i] {
			t.Errorf("client %d (%q): %q, want its solo output %q", i, ps[i], got[i], want[i])
		}
	}
	if peak := s.metric(t, "kakeya_steps_total"); peak >= n*maxTokens {
		t.Errorf("%g steps for %d requests of %d tokens: the requests were not batched", peak, n, maxTokens)
	}
}

// With --api-key the official client sends the key it is given as a
// Bearer token.
func TestOpenAIClientAPIKey(t *testing.T) {
	s := startServer(t, "--api-key", "sekrit")
	wrong, right := s.client(), s.client(option.WithAPIKey("sekrit"))
	if _, err := wrong.Models.List(context.Background()); err == nil {
		t.Error("the client with a wrong key listed the models")
	}
	if _, err := right.Models.List(context.Background()); err != nil {
		t.Errorf("the client with the key: %v", err)
	}
}
