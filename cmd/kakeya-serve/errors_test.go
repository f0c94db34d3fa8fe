package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/scheduler"
)

// Each bad request gets its status and an OpenAI-shaped error naming what
// is wrong; none reaches the model or crashes the server.
func TestBadRequests(t *testing.T) {
	s := startServer(t, "--max-body", "64K")
	long := strings.Repeat("Once upon a time there was a girl. ", 300) // ~2700 tokens
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		typ, param, code, msg    string
	}{
		{"malformed JSON", "POST", "/v1/chat/completions", `{"messages": [`, 400, "invalid_request_error", "", "", "not valid JSON"},
		{"not an object", "POST", "/v1/completions", `[1, 2]`, 400, "invalid_request_error", "", "", "must be a JSON object"},
		{"null body", "POST", "/v1/completions", `null`, 400, "invalid_request_error", "", "", "must be a JSON object"},
		{"wrong type", "POST", "/v1/completions", `{"prompt": "hi", "max_tokens": "ten"}`, 400, "invalid_request_error", "max_tokens", "", "max_tokens must be an integer, got a JSON string"},
		{"wrong type temperature", "POST", "/v1/completions", `{"prompt": "hi", "temperature": true}`, 400, "invalid_request_error", "temperature", "", "temperature must be a number"},
		{"unknown model", "POST", "/v1/chat/completions", `{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}`, 404, "invalid_request_error", "model", "model_not_found", `the model "gpt-4o" does not exist`},
		{"empty messages", "POST", "/v1/chat/completions", `{"messages": []}`, 400, "invalid_request_error", "messages", "", "at least one message"},
		{"no messages", "POST", "/v1/chat/completions", `{"model": "ref"}`, 400, "invalid_request_error", "messages", "", "at least one message"},
		{"no prompt", "POST", "/v1/completions", `{"model": "ref"}`, 400, "invalid_request_error", "prompt", "", "prompt is required"},
		{"bad role", "POST", "/v1/chat/completions", `{"messages": [{"role": "function", "content": "x"}]}`, 400, "invalid_request_error", "messages[0].role", "", `role "function" is not supported`},
		{"no content", "POST", "/v1/chat/completions", `{"messages": [{"role": "user"}]}`, 400, "invalid_request_error", "messages[0].content", "", "has no content"},
		{"image part", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, 400, "invalid_request_error", "messages[0].content", "", "only text parts"},
		{"max_tokens 0", "POST", "/v1/completions", `{"prompt": "hi", "max_tokens": 0}`, 400, "invalid_request_error", "max_tokens", "", "at least 1"},
		{"max_tokens negative", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -3}`, 400, "invalid_request_error", "max_tokens", "", "at least 1, got -3"},
		{"max_tokens beyond the context", "POST", "/v1/completions", `{"prompt": "hi", "max_tokens": 5000}`, 400, "invalid_request_error", "max_tokens", "context_length_exceeded", "max_tokens is 5000, but the prompt is 2 tokens and this server holds 2048 tokens per request: at most 2046"},
		{"prompt beyond the context", "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %q}`, long), 400, "invalid_request_error", "prompt", "context_length_exceeded", "this server holds 2048 tokens per request"},
		{"messages beyond the context", "POST", "/v1/chat/completions", fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}]}`, long), 400, "invalid_request_error", "messages", "context_length_exceeded", "shorten the prompt"},
		{"empty prompt", "POST", "/v1/completions", `{"prompt": ""}`, 400, "invalid_request_error", "prompt", "", "the prompt is empty"},
		{"tool without a name", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}`, 400, "invalid_request_error", "tools[0].function", "", `tools[0].function must be an object with a name`},
		{"tool_choice without tools", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}`, 400, "invalid_request_error", "tool_choice", "", `tool_choice "required" needs tools`},
		{"tool_choice names no tool", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}`, 400, "invalid_request_error", "tool_choice", "", `the function "g", which is not among the tools (f)`},
		{"bad tool_choice", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "any"}`, 400, "invalid_request_error", "tool_choice", "", `tool_choice must be "auto", "none", "required"`},
		{"tool call without a function", "POST", "/v1/chat/completions", `{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "x"}]}]}`, 400, "invalid_request_error", "messages[0].tool_calls[0].function", "", `must be an object with a name`},
		{"tool_calls on a user message", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}`, 400, "invalid_request_error", "messages[0].tool_calls", "", `only an assistant message has tool_calls`},
		{"tools in completions", "POST", "/v1/completions", `{"prompt": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]}`, 400, "invalid_request_error", "tools", "", `parameter "tools" is not supported by this server; it is a /v1/chat/completions field`},
		{"response_format schema keyword", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}}}}`, 400, "invalid_request_error", "response_format.json_schema.schema", "", `json schema at #/properties/a: keyword "pattern": not supported`},
		{"chat_template_kwargs in completions", "POST", "/v1/completions", `{"prompt": "hi", "chat_template_kwargs": {"enable_thinking": false}}`, 400, "invalid_request_error", "chat_template_kwargs", "", "/v1/chat/completions field"},
		{"chat_template_kwargs not an object", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]}`, 400, "invalid_request_error", "chat_template_kwargs", "", "chat_template_kwargs must be"},
		{"echo in chat", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "echo": true}`, 400, "invalid_request_error", "echo", "", `"echo" is not supported by this server; it is a /v1/completions field`},
		{"chat logprobs not a boolean", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "logprobs": 2}`, 400, "invalid_request_error", "logprobs", "", "logprobs must be a boolean, got a JSON number"},
		{"top_logprobs over 20", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21}`, 400, "invalid_request_error", "top_logprobs", "", "top_logprobs must be in [0, 20], got 21"},
		{"top_logprobs negative", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": -1}`, 400, "invalid_request_error", "top_logprobs", "", "top_logprobs must be in [0, 20], got -1"},
		{"top_logprobs without logprobs", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}`, 400, "invalid_request_error", "top_logprobs", "", "top_logprobs needs logprobs: true"},
		{"completions logprobs over 5", "POST", "/v1/completions", `{"prompt": "hi", "logprobs": 6}`, 400, "invalid_request_error", "logprobs", "", "logprobs must be in [0, 5], got 6"},
		{"completions logprobs negative", "POST", "/v1/completions", `{"prompt": "hi", "logprobs": -1}`, 400, "invalid_request_error", "logprobs", "", "logprobs must be in [0, 5], got -1"},
		{"completions logprobs true", "POST", "/v1/completions", `{"prompt": "hi", "logprobs": true}`, 400, "invalid_request_error", "logprobs", "", "logprobs must be an integer, got a JSON bool"},
		{"completions top_logprobs", "POST", "/v1/completions", `{"prompt": "hi", "logprobs": 2, "top_logprobs": 2}`, 400, "invalid_request_error", "top_logprobs", "", "takes logprobs: N"},
		{"n 17", "POST", "/v1/completions", `{"prompt": "hi", "n": 17}`, 400, "invalid_request_error", "n", "", "n must be in [1, 16], got 17"},
		{"best_of above n", "POST", "/v1/completions", `{"prompt": "hi", "n": 2, "best_of": 3}`, 400, "invalid_request_error", "best_of", "", "best_of = 3 is not supported"},
		{"frequency_penalty", "POST", "/v1/completions", `{"prompt": "hi", "frequency_penalty": 0.5}`, 400, "invalid_request_error", "frequency_penalty", "", "use repetition_penalty"},
		{"temperature out of range", "POST", "/v1/completions", `{"prompt": "hi", "temperature": 3}`, 400, "invalid_request_error", "temperature", "", "temperature must be in [0, 2], got 3"},
		{"top_p 0", "POST", "/v1/completions", `{"prompt": "hi", "top_p": 0}`, 400, "invalid_request_error", "top_p", "", "top_p must be in (0, 1]"},
		{"empty stop", "POST", "/v1/completions", `{"prompt": "hi", "stop": ["x", ""]}`, 400, "invalid_request_error", "stop", "", "stop[1] is empty"},
		{"stream_options without stream", "POST", "/v1/completions", `{"prompt": "hi", "stream_options": {"include_usage": true}}`, 400, "invalid_request_error", "stream_options", "", "only allowed with stream"},
		{"token-id prompt", "POST", "/v1/completions", `{"prompt": [1, 2, 3]}`, 400, "invalid_request_error", "prompt", "", "token-id prompts are not supported"},
		{"batch prompt", "POST", "/v1/completions", `{"prompt": ["a", "b"]}`, 400, "invalid_request_error", "prompt", "", "holds 2 prompts"},
		{"messages to completions", "POST", "/v1/completions", `{"messages": []}`, 400, "invalid_request_error", "messages", "", "takes a prompt"},
		{"body over the limit", "POST", "/v1/completions", fmt.Sprintf(`{"prompt": %q}`, strings.Repeat("a", 70<<10)), 413, "invalid_request_error", "", "request_too_large", "over the limit of 65536 bytes"},
		{"wrong method", "GET", "/v1/chat/completions", "", 405, "invalid_request_error", "", "", "takes POST, not GET"},
		{"no such route", "POST", "/v1/audio/speech", `{}`, 404, "invalid_request_error", "", "not_found", "no route POST /v1/audio/speech"},
		{"detokenize a bad id", "POST", "/detokenize", `{"tokens": [1, 99999]}`, 400, "invalid_request_error", "tokens", "", "tokens[1] = 99999 is not a token id (0 to 4095)"},
		{"tokenize an unknown field", "POST", "/tokenize", `{"text": "hi"}`, 400, "invalid_request_error", "", "", `unknown field "text"`},
		{"tokenize nothing", "POST", "/tokenize", `{}`, 400, "invalid_request_error", "prompt", "", "prompt or messages is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.do(t, tt.method, tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, body)
			}
			msg, typ, param, ecode := checkError(t, body)
			if typ != tt.typ || !strings.Contains(msg, tt.msg) {
				t.Errorf("type %q message %q, want %q and a message containing %q", typ, msg, tt.typ, tt.msg)
			}
			if (param == nil) != (tt.param == "") || param != nil && *param != tt.param {
				t.Errorf("param %v, want %q", deref(param), tt.param)
			}
			if (ecode == nil) != (tt.code == "") || ecode != nil && *ecode != tt.code {
				t.Errorf("code %v, want %q", deref(ecode), tt.code)
			}
		})
	}
	// Not one of them ran on the model, and the server still serves.
	if n := s.metric(t, "kakeya_steps_total"); n != 0 {
		t.Errorf("%g forward steps ran for bad requests", n)
	}
	if code, body := s.post(t, "/v1/completions", `{"prompt": "hi", "max_tokens": 2, "temperature": 0}`); code != 200 {
		t.Errorf("after the bad requests: status %d: %s", code, body)
	}
}

func deref(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

// With --api-key, the API wants it as a Bearer token (401 otherwise);
// /health and /metrics stay open to probes and scrapers.
func TestAPIKey(t *testing.T) {
	s := startServer(t, "--api-key", "sekrit")
	req := `{"prompt": "hi", "max_tokens": 2}`
	for _, tt := range []struct {
		name   string
		header []string
		status int
	}{
		{"no key", nil, 401},
		{"wrong key", []string{"Authorization", "Bearer nope"}, 401},
		{"not bearer", []string{"Authorization", "Basic sekrit"}, 401},
		{"right key", []string{"Authorization", "Bearer sekrit"}, 200},
		{"lowercase scheme", []string{"Authorization", "bearer sekrit"}, 200}, // the scheme is case-insensitive
		{"uppercase scheme", []string{"Authorization", "BEARER sekrit"}, 200},
		{"key as the scheme", []string{"Authorization", "sekrit"}, 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.post(t, "/v1/completions", req, tt.header...)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, body)
			}
			if code == 401 {
				if _, typ, _, ecode := checkError(t, body); typ != "invalid_request_error" || deref(ecode) != "invalid_api_key" {
					t.Errorf("type %q code %s", typ, deref(ecode))
				}
			}
		})
	}
	for _, path := range []string{"/v1/models", "/tokenize"} {
		if code, _ := s.do(t, http.MethodGet, path, ""); code != 401 {
			t.Errorf("%s without the key: %d, want 401", path, code)
		}
	}
	for _, path := range []string{"/health", "/metrics"} {
		if code, _ := s.do(t, http.MethodGet, path, ""); code != 200 {
			t.Errorf("%s without the key: %d, want 200", path, code)
		}
	}

	// $KAKEYA_API_KEY is the default, which -h does not print.
	t.Setenv("KAKEYA_API_KEY", "from-env")
	s = startServer(t)
	if code, _ := s.post(t, "/v1/completions", req); code != 401 {
		t.Errorf("$KAKEYA_API_KEY set, no key sent: %d, want 401", code)
	}
	if code, body := s.post(t, "/v1/completions", req, "Authorization", "Bearer from-env"); code != 200 {
		t.Errorf("$KAKEYA_API_KEY sent: %d: %s", code, body)
	}
	var help strings.Builder
	if err := run(context.Background(), []string{"-h"}, &help, io.Discard); !errors.Is(err, flag.ErrHelp) || strings.Contains(help.String(), "from-env") {
		t.Errorf("-h: %v, printing the key from the environment:\n%s", err, help.String())
	}
}

// longRequest is a streamed completion of 2000 tokens whatever the model
// samples (ignore_eos): about a second on one thread.
const longRequest = `{"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": true, "temperature": 0, "stream": true}`

// startStream posts a streamed request and returns the response once its
// first event arrived, with a cancel that disconnects.
func startStream(t *testing.T, s *testServer, body string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, len(buf)); err != nil {
		t.Fatal(err)
	}
	return resp, cancel
}

// A client that disconnects mid-stream cancels its request: at once, the
// pool references no block and nothing is reserved, as /metrics shows,
// and the request is logged with 499 having generated far fewer tokens
// than it would have.
func TestDisconnect(t *testing.T) {
	s := startServer(t)
	_, disconnect := startStream(t, s, longRequest)
	// The stats are published after each step, the first token
	// possibly before.
	s.waitMetric(t, `vllm:num_requests_running{model_name="ref"}`, 1, 5*time.Second)
	if r := s.metric(t, "kakeya_kv_cache_reserved_bytes"); r == 0 {
		t.Fatal("no KV bytes reserved while the request runs")
	}
	disconnect()
	start := time.Now()
	s.waitMetric(t, `kakeya_kv_cache_blocks{state="referenced"}`, 0, 2*time.Second)
	s.waitMetric(t, "kakeya_kv_cache_reserved_bytes", 0, 2*time.Second)
	s.waitMetric(t, `vllm:num_requests_running{model_name="ref"}`, 0, time.Second)
	s.waitMetric(t, `vllm:kv_cache_usage_perc{model_name="ref"}`, 0, time.Second)
	s.waitMetric(t, `kakeya_requests_total{code="499",endpoint="/v1/completions"}`, 1, 2*time.Second)
	t.Logf("blocks freed %v after the disconnect", time.Since(start))
	if n := s.metric(t, "kakeya_generation_tokens_total"); n >= 2000 {
		t.Errorf("%g tokens generated: the request ran to its end", n)
	}
	if !strings.Contains(s.logs.String(), `"status":499`) {
		t.Errorf("no log line with status 499:\n%s", s.logs)
	}
}

// With one request running and one waiting, the next gets 429 at once.
func TestQueueFull(t *testing.T) {
	// The request that runs must still run when the third arrives: a
	// fast machine may finish its 2,000 tokens first (the waiting one
	// then runs and the queue has room), so an attempt whose running
	// request ended before the third's answer is tried again, on a new
	// server; a 200 while it still ran fails.
	for attempt := 1; ; attempt++ {
		code, body, ambiguous := queueFullAttempt(t)
		if code == http.StatusTooManyRequests {
			if _, typ, _, ecode := checkError(t, body); typ != "rate_limit_error" || deref(ecode) != "queue_full" {
				t.Errorf("type %q code %s, want rate_limit_error queue_full", typ, deref(ecode))
			}
			return
		}
		if !ambiguous {
			t.Fatalf("status %d while a request ran and one waited, want 429: %s", code, body)
		}
		if attempt == 4 {
			t.Fatalf("in %d attempts the running request ended before the third was answered (status %d): the test cannot fill the queue on this machine", attempt, code)
		}
		t.Logf("attempt %d: the running request ended before the third was answered (status %d); again", attempt, code)
	}
}

// queueFullAttempt starts a server taking one running and one waiting
// request, fills both, posts a third and returns its answer, ambiguous
// when the running request's stream had ended by then.
func queueFullAttempt(t *testing.T) (code int, body []byte, ambiguous bool) {
	t.Helper()
	s := startServer(t, "--max-running", "1", "--max-waiting", "1")
	resp, _ := startStream(t, s, longRequest) // runs
	var ended atomic.Int64                    // when its stream ended, unix nanoseconds
	go func() {
		io.Copy(io.Discard, resp.Body)
		ended.Store(time.Now().UnixNano())
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // waits
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions", strings.NewReader(longRequest))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	s.waitMetric(t, `vllm:num_requests_waiting{model_name="ref"}`, 1, 5*time.Second)
	// The scheduler counts a request it has just taken from its intake
	// as waiting only once it publishes its stats, after the step that
	// follows: wait three steps, so that the waiting one is counted.
	steps := s.metric(t, "kakeya_steps_total")
	s.waitMetricAtLeast(t, "kakeya_steps_total", steps+3, 5*time.Second)
	code, body = s.post(t, "/v1/completions", `{"prompt": "hi", "max_tokens": 2}`)
	answered := time.Now().UnixNano()
	if code != http.StatusTooManyRequests {
		// Let the reader see an end that came first.
		time.Sleep(50 * time.Millisecond)
	}
	e := ended.Load()
	return code, body, e != 0 && e <= answered+int64(50*time.Millisecond)
}

// A request past --request-timeout ends with 504, its blocks freed.
func TestRequestTimeout(t *testing.T) {
	s := startServer(t, "--request-timeout", "50ms")
	code, body := s.post(t, "/v1/completions", strings.Replace(longRequest, `"stream": true`, `"stream": false`, 1))
	if code != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504: %s", code, body)
	}
	if _, typ, _, ecode := checkError(t, body); typ != "server_error" || deref(ecode) != "timeout" {
		t.Errorf("type %q code %s", typ, deref(ecode))
	}
	s.waitMetric(t, `kakeya_kv_cache_blocks{state="referenced"}`, 0, time.Second)
	// Streamed, the time limit ends the stream with an error event.
	resp, err := http.Post(s.url+"/v1/completions", "application/json", strings.NewReader(longRequest))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readEvents(t, resp.Body)
	if len(events) < 2 || events[len(events)-1] != "[DONE]" || !strings.Contains(events[len(events)-2], `"code":"timeout"`) {
		t.Errorf("the stream ended with %q", events[max(0, len(events)-2):])
	}
}

// /health is 503 while the model loads and while the server drains, 200
// in between; the API answers 503 meanwhile.
func TestHealth(t *testing.T) {
	s := newServer(serverConfig{name: "ref", maxBody: 1 << 20, log: discardLog()})
	hs := httptest.NewServer(s.handler())
	defer hs.Close()
	get := func(path string) int {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if h, m := get("/health"), get("/v1/models"); h != 503 || m != 503 {
		t.Errorf("loading: /health %d, /v1/models %d, want 503", h, m)
	}
	s.setEngine(reference(t))
	if h, m := get("/health"), get("/v1/models"); h != 200 || m != 200 {
		t.Errorf("ready: /health %d, /v1/models %d, want 200", h, m)
	}
	s.draining.Store(true)
	if h, m := get("/health"), get("/v1/models"); h != 503 || m != 503 {
		t.Errorf("draining: /health %d, /v1/models %d, want 503", h, m)
	}
}

// /tokenize gives the ids the model is fed (a prompt with the model's
// special tokens, messages through the chat template) and /detokenize
// the text back.
// chat_template_kwargs reach the chat template as variables: this
// model's template reads none, so the prompt is the same.
func TestChatTemplateKwargs(t *testing.T) {
	s := startServer(t)
	var usage [2]int
	for i, body := range []string{
		`{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1}`,
		`{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1, "chat_template_kwargs": {"enable_thinking": false, "date_string": "01 Jan 2025"}}`,
	} {
		code, resp := s.post(t, "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("%s: status %d: %s", body, code, resp)
		}
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(resp, &r); err != nil {
			t.Fatal(err)
		}
		usage[i] = r.Usage.PromptTokens
	}
	if usage[0] != usage[1] || usage[0] == 0 {
		t.Errorf("prompt tokens %d with chat_template_kwargs, %d without", usage[1], usage[0])
	}
}

func TestTokenize(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	var tok struct {
		Count  int   `json:"count"`
		Tokens []int `json:"tokens"`
	}
	code, body := s.post(t, "/tokenize", `{"prompt": "Hello world"}`)
	if err := json.Unmarshal(body, &tok); code != 200 || err != nil {
		t.Fatalf("status %d (%v): %s", code, err, body)
	}
	want := ref.Encode("Hello world", true)
	if fmt.Sprint(tok.Tokens) != fmt.Sprint(want) || tok.Count != len(want) || !strings.Contains(string(body), `"max_model_len":2048`) {
		t.Errorf("tokenize: %s, want ids %v", body, want)
	}
	code, body = s.post(t, "/tokenize", `{"messages": [{"role": "user", "content": "Hello"}]}`)
	want, _ = ref.PromptIDs("Hello", kakeya.GenerateOptions{Chat: true})
	if err := json.Unmarshal(body, &tok); code != 200 || err != nil || fmt.Sprint(tok.Tokens) != fmt.Sprint(want) {
		t.Errorf("tokenize messages: %d %s, want ids %v", code, body, want)
	}
	ids, _ := json.Marshal(want)
	code, body = s.post(t, "/detokenize", fmt.Sprintf(`{"tokens": %s}`, ids))
	var detok struct{ Prompt string }
	if err := json.Unmarshal(body, &detok); code != 200 || err != nil || detok.Prompt != ref.Decode(want, false) || !strings.Contains(detok.Prompt, "Hello") {
		t.Errorf("detokenize: %d %s", code, body)
	}
}

// generateError gives each failure of Generate its status, including
// those a test cannot easily provoke.
func TestGenerateError(t *testing.T) {
	for _, tt := range []struct {
		err    error
		ran    bool
		status int
		code   string
	}{
		{fmt.Errorf("kakeya: %w: 1024 requests wait", scheduler.ErrQueueFull), false, 429, "queue_full"},
		{fmt.Errorf("kakeya: %w", kakeya.ErrClosed), true, 503, "unavailable"},
		{context.Canceled, true, 503, "unavailable"}, // the drain cancelled it
		{context.DeadlineExceeded, true, 504, "timeout"},
		{fmt.Errorf("kakeya: %w", &model.ContextError{Tokens: 3000, Context: 2048}), false, 400, "context_length_exceeded"},
		{errors.New("scheduler: a prompt of 900 tokens and one generated token need 9000 bytes of KV cache; the KV memory is 100 bytes"), false, 400, "context_length_exceeded"},
		{errors.New("kakeya: empty prompt"), false, 400, ""},
		{errors.New("kakeya: non-finite logits"), true, 500, ""},
	} {
		e := generateError(tt.err, tt.ran)
		if e.status != tt.status || e.code != tt.code {
			t.Errorf("%v: status %d code %q, want %d %q", tt.err, e.status, e.code, tt.status, tt.code)
		}
	}
}
