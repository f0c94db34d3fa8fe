//go:build openai

package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"

	"github.com/kakeya-ai/kakeya"
)

// closeLogprob reports whether a logprob the server sent matches the
// reference engine's (float32 through JSON and back).
func closeLogprob(got float64, want float32) bool { return math.Abs(got-float64(want)) <= 1e-6 }

// The official client gets chat logprobs, plain and streamed, equal to
// Engine.Generate's for the same request: each token's text, bytes and
// logprob and its top alternatives; the streamed chunks carry the tokens
// of their text.
func TestChatLogprobs(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	c := s.client()
	ctx := context.Background()
	const question, top = "What is the capital of France?", 3
	want := generate(t, ref, question, kakeya.GenerateOptions{Chat: true, MaxTokens: 24, Logprobs: true, TopLogprobs: top})
	if len(want.Logprobs) != want.GeneratedTokens || want.GeneratedTokens < 4 {
		t.Fatalf("the reference gave %d logprobs for %d tokens", len(want.Logprobs), want.GeneratedTokens)
	}
	params := openai.ChatCompletionNewParams{
		Model:       "ref",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		MaxTokens:   openai.Int(24),
		Temperature: openai.Float(0),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(top),
	}
	check := func(t *testing.T, content string, got []openai.ChatCompletionTokenLogprob) {
		t.Helper()
		if len(got) != len(want.Logprobs) {
			t.Fatalf("%d logprobs, want one per generated token, %d", len(got), len(want.Logprobs))
		}
		var text strings.Builder
		for i, g := range got {
			w := want.Logprobs[i]
			text.WriteString(g.Token)
			if g.Token != w.Text || !closeLogprob(g.Logprob, w.Logprob) || string(bytesOf(g.Bytes)) != w.Text {
				t.Errorf("token %d: %q (%g, bytes %v), want %q (%g)", i, g.Token, g.Logprob, g.Bytes, w.Text, w.Logprob)
			}
			if len(g.TopLogprobs) != top {
				t.Fatalf("token %d: %d top logprobs, want %d", i, len(g.TopLogprobs), top)
			}
			for j, a := range g.TopLogprobs {
				wa := w.Top[j]
				if a.Token != wa.Text || !closeLogprob(a.Logprob, wa.Logprob) || string(bytesOf(a.Bytes)) != wa.Text {
					t.Errorf("token %d alternative %d: %q (%g), want %q (%g)", i, j, a.Token, a.Logprob, wa.Text, wa.Logprob)
				}
			}
		}
		if text.String() != content {
			t.Errorf("the tokens spell %q, the content is %q", text.String(), content)
		}
	}
	t.Run("plain", func(t *testing.T) {
		got, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Message.Content != want.Text {
			t.Fatalf("content %q, want %q", got.Choices[0].Message.Content, want.Text)
		}
		check(t, want.Text, got.Choices[0].Logprobs.Content)
	})
	t.Run("streamed", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		var all []openai.ChatCompletionTokenLogprob
		for stream.Next() {
			ch := stream.Current()
			acc.AddChunk(ch)
			if len(ch.Choices) == 0 {
				continue
			}
			// No stop string and whole characters: a chunk's tokens spell
			// its text.
			var text strings.Builder
			for _, lp := range ch.Choices[0].Logprobs.Content {
				text.WriteString(lp.Token)
			}
			if d := ch.Choices[0].Delta.Content; text.String() != d {
				t.Errorf("a chunk with text %q carries tokens spelling %q", d, text.String())
			}
			all = append(all, ch.Choices[0].Logprobs.Content...)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		check(t, want.Text, all)
		if len(acc.Choices) != 1 || len(acc.Choices[0].Logprobs.Content) != len(all) {
			t.Errorf("the client's accumulator holds %d logprobs, want %d", len(acc.Choices[0].Logprobs.Content), len(all))
		}
	})
	t.Run("off", func(t *testing.T) {
		p := params
		p.Logprobs, p.TopLogprobs = openai.Bool(false), openai.Int(0)
		got, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Logprobs.JSON.Content.Valid() || got.Choices[0].Logprobs.Content != nil {
			t.Errorf("logprobs %s without asking", got.Choices[0].Logprobs.RawJSON())
		}
	})
}

// bytesOf converts the API's byte list back to bytes.
func bytesOf(b []int64) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

// Completions logprobs: N gives each token's text, logprob and offset and
// a map of the N most likely tokens plus the sampled one; streamed with a
// stop string, the text sent so far is always covered by the tokens sent
// so far, and every generated token is reported once.
func TestCompletionLogprobs(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	c := s.client()
	ctx := context.Background()
	const story, top = "Once upon a time", 2
	want := generate(t, ref, story, kakeya.GenerateOptions{MaxTokens: 20, Logprobs: true, TopLogprobs: top})
	params := openai.CompletionNewParams{
		Model:       "ref",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(story)},
		MaxTokens:   openai.Int(20),
		Temperature: openai.Float(0),
		Logprobs:    openai.Int(top),
	}
	t.Run("plain", func(t *testing.T) {
		got, err := c.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		lp := got.Choices[0].Logprobs
		n := len(want.Logprobs)
		if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
			t.Fatalf("logprobs of %d/%d/%d/%d tokens, want %d", len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset), n)
		}
		offset := 0
		for i, w := range want.Logprobs {
			if lp.Tokens[i] != w.Text || !closeLogprob(lp.TokenLogprobs[i], w.Logprob) || lp.TextOffset[i] != int64(offset) {
				t.Errorf("token %d: %q %g at %d, want %q %g at %d", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i], w.Text, w.Logprob, offset)
			}
			offset += utf8.RuneCountInString(w.Text)
			m := lp.TopLogprobs[i]
			if v, ok := m[w.Text]; !ok || !closeLogprob(v, w.Logprob) || len(m) > top+1 || len(m) < top {
				t.Errorf("token %d: top logprobs %v, want the %d best and %q", i, m, top, w.Text)
			}
			for _, a := range w.Top {
				if v, ok := m[a.Text]; !ok || !closeLogprob(v, a.Logprob) {
					t.Errorf("token %d: top logprobs %v lack %q (%g)", i, m, a.Text, a.Logprob)
				}
			}
		}
	})
	t.Run("streamed with a stop", func(t *testing.T) {
		// Stop at the third word: its first token's text is held back
		// as a possible stop string, then dropped.
		words := strings.SplitAfter(want.Text, " ")
		if len(words) < 5 {
			t.Fatalf("reference text %q has too few words", want.Text)
		}
		stop := strings.TrimSpace(words[3])
		p := params
		p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Completions.NewStreaming(ctx, p)
		var text, toks strings.Builder
		var offsets []int64
		var tokens []string
		completion, finish := int64(0), ""
		for stream.Next() {
			ch := stream.Current()
			if ch.Usage.TotalTokens > 0 {
				completion = ch.Usage.CompletionTokens
			}
			for _, c := range ch.Choices {
				text.WriteString(c.Text)
				tokens = append(tokens, c.Logprobs.Tokens...)
				offsets = append(offsets, c.Logprobs.TextOffset...)
				for _, tk := range c.Logprobs.Tokens {
					toks.WriteString(tk)
				}
				if !strings.HasPrefix(toks.String(), text.String()) {
					t.Errorf("after a chunk: text %q, but the tokens sent so far spell %q", text.String(), toks.String())
				}
				if c.FinishReason != "" {
					finish = string(c.FinishReason)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		wantText := want.Text[:strings.Index(want.Text, stop)]
		if text.String() != wantText || finish != "stop" {
			t.Fatalf("streamed %q (%s), want %q (stop)", text.String(), finish, wantText)
		}
		if int64(len(tokens)) != completion || !strings.HasPrefix(toks.String(), wantText+stop) {
			t.Errorf("%d tokens spelling %q for %d completion tokens: want every token, the stop string's included", len(tokens), toks.String(), completion)
		}
		offset := 0
		for i, tk := range tokens {
			if offsets[i] != int64(offset) || tk != want.Logprobs[i].Text {
				t.Errorf("token %d: %q at %d, want %q at %d", i, tk, offsets[i], want.Logprobs[i].Text, offset)
			}
			offset += utf8.RuneCountInString(tk)
		}
	})
}
