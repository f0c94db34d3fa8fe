package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// n = 3 choices: choice i is the sample the reference engine draws with
// seed+i; usage and the metrics count the prompt once; choices 1 and 2
// found the prompt's full blocks in the pool's prefix cache (choice 0's),
// so only its last, partly filled block ran again for each.
func TestN(t *testing.T) {
	ss := newScriptedServer(t)
	prompt := "Once upon a time, in a town by the sea, " + strings.Repeat("a fisher mended her nets and sang. ", 8) + "n-test"
	const seed, n, maxTokens = 41, 3, 12
	ref := reference(t)
	want := make([]*kakeya.Result, n)
	for i := range want {
		want[i] = generate(t, ref, prompt, kakeya.GenerateOptions{MaxTokens: maxTokens, Sampling: kakeya.SamplingOptions{Temperature: 1, Seed: seed + uint64(i)}})
	}
	before := ss.eng.Stats().Pool
	ts := &testServer{url: ss.URL}
	const promptMetric, vllmPrompt, vllmGen = "kakeya_prompt_tokens_total", `vllm:prompt_tokens_total{model_name="ref"}`, `vllm:generation_tokens_total{model_name="ref"}`
	p0, v0, g0 := ts.metric(t, promptMetric), ts.metric(t, vllmPrompt), ts.metric(t, vllmGen)
	code, b := ts.post(t, "/v1/completions", fmt.Sprintf(`{"prompt": %q, "n": %d, "seed": %d, "max_tokens": %d}`, prompt, n, seed, maxTokens))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	after := ss.eng.Stats().Pool
	var resp completion
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != n {
		t.Fatalf("%d choices, want %d: %s", len(resp.Choices), n, b)
	}
	completionTokens := 0
	for i, c := range resp.Choices {
		if c.Index != i || c.Text == nil || *c.Text != want[i].Text || *c.FinishReason != finishReason(want[i].StopReason) {
			t.Errorf("choice %d: index %d, text %q, finish %s; want the seed+%d sample %q", i, c.Index, deref(c.Text), deref(c.FinishReason), i, want[i].Text)
		}
		completionTokens += want[i].GeneratedTokens
	}
	if u := resp.Usage; u.PromptTokens != want[0].PromptTokens || u.CompletionTokens != completionTokens || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v, want the prompt's %d tokens once and %d generated", u, want[0].PromptTokens, completionTokens)
	}
	// The metrics count the prompt once too, the generated tokens of
	// every choice.
	p, v, g := ts.metric(t, promptMetric)-p0, ts.metric(t, vllmPrompt)-v0, ts.metric(t, vllmGen)-g0
	if p != float64(want[0].PromptTokens) || v != p || g != float64(completionTokens) {
		t.Errorf("metrics: %v prompt tokens (vLLM's %v), %v generated; want %d once and %d", p, v, g, want[0].PromptTokens, completionTokens)
	}
	bs := kvconfig.DefaultBlock
	full := (want[0].PromptTokens - 1) / bs * bs
	if full < 4*bs {
		t.Fatalf("the prompt is %d tokens: make it longer than a few blocks", want[0].PromptTokens)
	}
	if q, h, ht := after.Queries-before.Queries, after.Hits-before.Hits, after.HitTokens-before.HitTokens; q != n || h != n-1 || ht != int64((n-1)*full) {
		t.Errorf("prefix cache: %d queries, %d hits, %d tokens reused; want %d, %d and %d (the prompt's %d full blocks, for each choice after the first)", q, h, ht, n, n-1, (n-1)*full, full/bs)
	}
}

// Streamed, each choice's chunks carry its index; each choice ends with a
// finish_reason chunk of its own; the usage chunk counts the prompt once.
func TestNStreamed(t *testing.T) {
	ss := newScriptedServer(t)
	ref := reference(t)
	const seed, n, maxTokens = 5, 2, 10
	want := make([]*kakeya.Result, n)
	for i := range want {
		want[i] = generate(t, ref, "Tell me a story.", kakeya.GenerateOptions{Chat: true, MaxTokens: maxTokens, Sampling: kakeya.SamplingOptions{Temperature: 1, Seed: seed + uint64(i)}})
	}
	resp, err := http.Post(ss.URL+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(
		`{"messages": [{"role": "user", "content": "Tell me a story."}], "n": %d, "seed": %d, "max_tokens": %d, "stream": true, "stream_options": {"include_usage": true}}`, n, seed, maxTokens)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text := make([]strings.Builder, n)
	finish := make([]int, n)
	roles := make([]int, n)
	var u *usage
	for _, ev := range readEvents(t, resp.Body) {
		if ev == "[DONE]" {
			break
		}
		var c completion
		var raw struct {
			Choices []struct {
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		json.Unmarshal([]byte(ev), &raw)
		if c.Usage != nil {
			u = c.Usage
			continue
		}
		if len(c.Choices) != 1 || c.Choices[0].Index < 0 || c.Choices[0].Index >= n {
			t.Fatalf("chunk %s", ev)
		}
		i := c.Choices[0].Index
		if finish[i] > 0 {
			t.Errorf("choice %d: a chunk after its finish_reason: %s", i, ev)
		}
		text[i].WriteString(raw.Choices[0].Delta.Content)
		if raw.Choices[0].Delta.Role != "" {
			roles[i]++
		}
		if c.Choices[0].FinishReason != nil {
			finish[i]++
		}
	}
	total := 0
	for i := range n {
		if text[i].String() != want[i].Text || finish[i] != 1 || roles[i] != 1 {
			t.Errorf("choice %d: %q, %d finish chunks, %d role deltas; want %q, 1, 1", i, text[i].String(), finish[i], roles[i], want[i].Text)
		}
		total += want[i].GeneratedTokens
	}
	if u == nil || u.PromptTokens != want[0].PromptTokens || u.CompletionTokens != total {
		t.Errorf("usage %+v, want %d prompt and %d completion tokens", u, want[0].PromptTokens, total)
	}
}
