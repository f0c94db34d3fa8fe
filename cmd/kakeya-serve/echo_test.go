package main

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya"
)

// echo puts the prompt before the completion; with logprobs its tokens
// come first, the first with a null logprob and top_logprobs, the others
// with the reference engine's PromptLogprobs; max_tokens 0 scores the
// prompt alone; streamed, the prompt is the first chunk.
func TestEcho(t *testing.T) {
	ss := newScriptedServer(t)
	ts := &testServer{url: ss.URL}
	ref := reference(t)
	const prompt = "The capital of France is"
	want := generate(t, ref, prompt, kakeya.GenerateOptions{MaxTokens: 4, Sampling: kakeya.SamplingOptions{Temperature: 0}, Logprobs: true, TopLogprobs: 2})
	ids, err := ref.PromptIDs(prompt, kakeya.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	promptLP, err := ref.PromptLogprobs(context.Background(), ids, 2)
	if err != nil {
		t.Fatal(err)
	}
	type lpJSON struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []*float64           `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	var resp struct {
		Choices []struct {
			Text         string  `json:"text"`
			Logprobs     *lpJSON `json:"logprobs"`
			FinishReason string  `json:"finish_reason"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	check := func(name, body, wantText string, toks []kakeya.TokenInfo, wantCompletion int) {
		t.Helper()
		code, b := ts.post(t, "/v1/completions", body)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, code, b)
		}
		resp.Choices = nil
		if err := json.Unmarshal(b, &resp); err != nil || len(resp.Choices) != 1 {
			t.Fatalf("%s: %s: %v", name, b, err)
		}
		c := resp.Choices[0]
		if c.Text != wantText || resp.Usage.PromptTokens != len(ids) || resp.Usage.CompletionTokens != wantCompletion {
			t.Errorf("%s: text %q, usage %+v; want %q, %d prompt and %d completion tokens", name, c.Text, resp.Usage, wantText, len(ids), wantCompletion)
		}
		if toks == nil {
			if c.Logprobs != nil {
				t.Errorf("%s: logprobs without asking", name)
			}
			return
		}
		lp := c.Logprobs
		if lp == nil || len(lp.Tokens) != len(toks) || len(lp.TokenLogprobs) != len(toks) || len(lp.TopLogprobs) != len(toks) || len(lp.TextOffset) != len(toks) {
			t.Fatalf("%s: logprobs %s, want %d tokens", name, b, len(toks))
		}
		if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil || lp.TextOffset[0] != 0 {
			t.Errorf("%s: the prompt's first token: logprob %v, top %v, offset %d; want null, null, 0", name, lp.TokenLogprobs[0], lp.TopLogprobs[0], lp.TextOffset[0])
		}
		for i := 1; i < len(toks); i++ {
			if lp.Tokens[i] != toks[i].Text || lp.TokenLogprobs[i] == nil || math.Abs(*lp.TokenLogprobs[i]-float64(toks[i].Logprob)) > 1e-4 || lp.TextOffset[i] < lp.TextOffset[i-1] {
				t.Errorf("%s: token %d: %q %v at %d, want %q %g", name, i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i], toks[i].Text, toks[i].Logprob)
			}
		}
	}
	check("echo", `{"prompt": "The capital of France is", "echo": true, "max_tokens": 4, "temperature": 0}`, prompt+want.Text, nil, want.GeneratedTokens)
	check("echo logprobs", `{"prompt": "The capital of France is", "echo": true, "max_tokens": 4, "temperature": 0, "logprobs": 2}`,
		prompt+want.Text, append(append([]kakeya.TokenInfo(nil), promptLP...), want.Logprobs...), want.GeneratedTokens)
	check("max_tokens 0", `{"prompt": "The capital of France is", "echo": true, "max_tokens": 0, "logprobs": 1}`, prompt, promptLP, 0)
	if resp.Choices[0].FinishReason != "length" {
		t.Errorf("max_tokens 0: finish_reason %q, want length", resp.Choices[0].FinishReason)
	}

	// Streamed: the prompt first, then the completion.
	r, err := http.Post(ss.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "The capital of France is", "echo": true, "max_tokens": 4, "temperature": 0, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var texts []string
	for _, ev := range readEvents(t, r.Body) {
		var c completion
		if ev == "[DONE]" || json.Unmarshal([]byte(ev), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		texts = append(texts, deref(c.Choices[0].Text))
	}
	if len(texts) == 0 || texts[0] != prompt || strings.Join(texts, "") != prompt+want.Text {
		t.Errorf("streamed %q, want %q first and %q in all", texts, prompt, prompt+want.Text)
	}

	// Chat has no echo; max_tokens 0 without echo is still refused.
	if code, b := ss.post(t, `{"messages": [{"role": "user", "content": "hi"}], "echo": true}`); code != http.StatusBadRequest || !strings.Contains(string(b), "echo") {
		t.Errorf("chat echo: %d %s", code, b)
	}
	if code, _ := ts.post(t, "/v1/completions", `{"prompt": "hi", "max_tokens": 0}`); code != http.StatusBadRequest {
		t.Errorf("max_tokens 0 without echo: %d", code)
	}
}
