package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// Fields this server does not implement: unknown and neutral ones are
// accepted and listed as ignored, unless params are strict, when they are
// the 400 they always were; fields that change the output are refused
// either way unless they hold their neutral value.
func TestUnknownFields(t *testing.T) {
	const chatHead = `{"messages": [{"role": "user", "content": "hi"%s}]%s}`
	chat := func(msgExtra, extra string) string { return fmt.Sprintf(chatHead, msgExtra, extra) }
	for _, tt := range []struct {
		name      string
		body      string
		ignored   []string // lenient: the fields ignored, in order (nil: refused)
		param     string   // the field a refusal names (either mode)
		strictOK  bool     // strict params accept it too
		lenientOK bool
	}{
		{"store false", chat("", `, "store": false`), []string{"store"}, "store", false, true},
		{"store true", chat("", `, "store": true`), []string{"store"}, "store", false, true},
		{"parallel_tool_calls", chat("", `, "parallel_tool_calls": false`), []string{"parallel_tool_calls"}, "parallel_tool_calls", false, true},
		{"metadata and service_tier", chat("", `, "metadata": {"a": "b"}, "service_tier": "auto"`), []string{"metadata", "service_tier"}, "metadata", false, true},
		{"a typo", chat("", `, "temprature": 0`), []string{"temprature"}, "temprature", false, true},
		{"message name", chat(`, "name": "alice"`, ""), []string{"messages[].name"}, "messages[0].name", false, true},
		{"message name null", chat(`, "name": null`, ""), nil, "", true, true},
		{"empty tool_calls", chat(`, "tool_calls": []`, ""), nil, "", true, true},
		{"tools empty", chat("", `, "tools": []`), nil, "", true, true},
		{"tool_choice none", chat("", `, "tool_choice": "none"`), nil, "", true, true},
		{"response_format text", chat("", `, "response_format": {"type": "text"}`), nil, "", true, true},
		{"functions", chat("", `, "functions": [{"name": "f"}]`), nil, "functions", false, false},
		{"response_format json", chat("", `, "response_format": {"type": "json_object"}`), nil, "", true, true},
		{"logit_bias", chat("", `, "logit_bias": {"1": 5}`), nil, "logit_bias", false, false},
		{"guided_json", chat("", `, "guided_json": {}`), nil, "", true, true},
		{"best_of 2 is refused", chat("", `, "best_of": 2`), nil, "best_of", false, false},
		{"user", chat("", `, "user": "u"`), nil, "", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				p := &params{strict: strict}
				r, err := decodeRequest([]byte(tt.body), true, p)
				ok := tt.lenientOK
				if strict {
					ok = tt.strictOK
				}
				if !ok {
					if err == nil || err.status != 400 || err.param != tt.param || !strings.Contains(err.message, "not supported") {
						t.Errorf("strict %t: got %v %+v, want the 400 of %s", strict, r, err, tt.param)
					}
					continue
				}
				if err != nil {
					t.Errorf("strict %t: %v", strict, err)
					continue
				}
				want := tt.ignored
				if strict {
					want = nil
				}
				if !reflect.DeepEqual(p.ignored, want) {
					t.Errorf("strict %t: ignored %q, want %q", strict, p.ignored, want)
				}
				if len(r.messages) != 1 || r.messages[0].Content != "hi" {
					t.Errorf("messages %+v", r.messages)
				}
			}
		})
	}
}

// Each ignored field is logged once, however many requests send it, and
// the names remembered are bounded.
func TestFieldLogOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	var l fieldLog
	for range 3 {
		l.note(log, "/v1/chat/completions", []string{"store", "messages[].name"})
	}
	l.note(log, "/v1/completions", []string{"store", "metadata"})
	if n := strings.Count(buf.String(), "\n"); n != 3 {
		t.Errorf("%d lines, want 3 (store, messages[].name, metadata):\n%s", n, &buf)
	}
	for _, f := range []string{`"field":"store"`, `"field":"messages[].name"`, `"field":"metadata"`} {
		if strings.Count(buf.String(), f) != 1 {
			t.Errorf("%s not logged once:\n%s", f, &buf)
		}
	}
	buf.Reset()
	for i := range 2 * maxLoggedFields {
		l.note(log, "/v1/completions", []string{fmt.Sprint("f", i)})
	}
	if n := strings.Count(buf.String(), "\n"); n != maxLoggedFields-3+1 {
		t.Errorf("%d lines for %d new names, want %d and one saying no more are logged", n, 2*maxLoggedFields, maxLoggedFields-3+1)
	}
	if len(l.seen) != maxLoggedFields {
		t.Errorf("%d names remembered, want the limit %d", len(l.seen), maxLoggedFields)
	}
}

// /health's body says why the server is not ready: loading, calibrating
// (with how far) or draining; HEAD gets the status alone.
func TestHealthReasons(t *testing.T) {
	s := newServer(serverConfig{name: "ref", maxBody: 1 << 20, log: discardLog()})
	hs := httptest.NewServer(s.handler())
	defer hs.Close()
	get := func(method string) (int, healthBody, int) {
		req, _ := http.NewRequest(method, hs.URL+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		var b healthBody
		if method == http.MethodGet {
			if err := json.Unmarshal(buf.Bytes(), &b); err != nil {
				t.Fatalf("/health body %q: %v", &buf, err)
			}
		}
		return resp.StatusCode, b, buf.Len()
	}
	check := func(phase string, wantCode int, wantStatus, wantReason string) healthBody {
		t.Helper()
		code, b, _ := get(http.MethodGet)
		if code != wantCode || b.Status != wantStatus || !strings.Contains(b.Reason, wantReason) {
			t.Errorf("%s: %d %+v, want %d %q with a reason containing %q", phase, code, b, wantCode, wantStatus, wantReason)
		}
		if hc, _, n := get(http.MethodHead); hc != wantCode || n != 0 {
			t.Errorf("%s: HEAD %d with %d body bytes, want %d and none", phase, hc, n, wantCode)
		}
		return b
	}
	check("loading", 503, "loading", "loading")
	s.calibrationProgress(1024, 4096)
	b := check("calibrating", 503, "calibrating", "1024 of 4096 tokens")
	if b.Progress == nil || *b.Progress != 0.25 || b.Tokens != 1024 || b.TotalTokens != 4096 {
		t.Errorf("calibrating: progress %v, tokens %d of %d, want 0.25, 1024 of 4096", b.Progress, b.Tokens, b.TotalTokens)
	}
	s.calibrationProgress(4096, 4096)
	check("calibrated, still loading", 503, "loading", "loading")
	s.setEngine(reference(t))
	if b := check("ready", 200, "ok", ""); b.Reason != "" || b.Progress != nil {
		t.Errorf("ready: %+v", b)
	}
	s.draining.Store(true)
	check("draining", 503, "draining", "shutting down")
}

// Requests with neutral and unknown fields run, each field is logged
// once, and --strict-params refuses them; the vLLM-named metrics count
// what ran, with model_name, beside kakeya's, and HEAD /metrics answers.
func TestCompatServer(t *testing.T) {
	s := startServer(t)
	body := `{"model": "ref", "messages": [{"role": "user", "content": "hi", "name": "alice"}], "max_tokens": 3, "temperature": 0, "store": false, "parallel_tool_calls": false, "x_unknown": {"a": 1}}`
	for range 2 {
		if code, b := s.post(t, "/v1/chat/completions", body); code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
	}
	for _, f := range []string{"store", "parallel_tool_calls", "x_unknown", "messages[].name"} {
		if n := strings.Count(s.logs.String(), `"field":"`+f+`"`); n != 1 {
			t.Errorf("field %s logged %d times over two requests, want once", f, n)
		}
	}
	for _, tt := range []struct {
		vllm, kakeya string
	}{
		{`vllm:prompt_tokens_total{model_name="ref"}`, "kakeya_prompt_tokens_total"},
		{`vllm:generation_tokens_total{model_name="ref"}`, "kakeya_generation_tokens_total"},
		{`vllm:time_to_first_token_seconds_count{model_name="ref"}`, "kakeya_time_to_first_token_seconds_count"},
		{`vllm:e2e_request_latency_seconds_count{model_name="ref"}`, "kakeya_time_to_first_token_seconds_count"},
		{`vllm:num_preemptions_total{model_name="ref"}`, "kakeya_preemptions_total"},
	} {
		if v, k := s.metric(t, tt.vllm), s.metric(t, tt.kakeya); v != k || tt.kakeya != "kakeya_preemptions_total" && v == 0 {
			t.Errorf("%s = %g, want %s's %g (> 0)", tt.vllm, v, tt.kakeya, k)
		}
	}
	// Two requests of 3 tokens: 2 intervals each, in both names.
	for _, m := range []string{`vllm:inter_token_latency_seconds_count{model_name="ref"}`, `vllm:time_per_output_token_seconds_count{model_name="ref"}`} {
		if v := s.metric(t, m); v != 4 {
			t.Errorf("%s = %g, want 4", m, v)
		}
	}
	// The same prompt twice: the second looked its tokens up and found
	// whole blocks (vLLM counts both in tokens).
	q, h := s.metric(t, `vllm:prefix_cache_queries_total{model_name="ref"}`), s.metric(t, `vllm:prefix_cache_hits_total{model_name="ref"}`)
	if p := s.metric(t, "kakeya_prompt_tokens_total"); q != p || h != s.metric(t, "kakeya_prefix_cache_hit_tokens_total") {
		t.Errorf("prefix cache: %g queried and %g hit tokens, want the %g prompt tokens and kakeya's hit tokens", q, h, p)
	}
	if s.metric(t, `vllm:num_requests_running{model_name="ref"}`) != 0 {
		t.Error("vllm:num_requests_running is not 0 after the requests")
	}
	if code, b := s.do(t, http.MethodHead, "/metrics", ""); code != 200 || len(b) != 0 {
		t.Errorf("HEAD /metrics: %d with %d body bytes", code, len(b))
	}

	strict := startServer(t, "--strict-params")
	code, b := strict.post(t, "/v1/chat/completions", body)
	if code != 400 || !strings.Contains(string(b), "is not supported") {
		t.Errorf("--strict-params: %d %s, want a 400", code, b)
	}
}
