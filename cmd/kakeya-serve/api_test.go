package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kakeya-ai/kakeya"
)

// decodeRequest reads every parameter it implements into the request,
// with the API's defaults for those left out or null.
func TestDecodeRequest(t *testing.T) {
	deflt := kakeya.SamplingOptions{Temperature: 1}
	for _, tt := range []struct {
		name string
		chat bool
		body string
		want request
	}{
		{"defaults", false, `{"prompt": "hi"}`, request{prompt: "hi", sampling: deflt}},
		{"nulls are absent", false, `{"prompt": "hi", "max_tokens": null, "temperature": null, "stop": null, "tools": null, "n": null}`,
			request{prompt: "hi", sampling: deflt}},
		{"sampling", false, `{"prompt": "hi", "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "seed": 7}`,
			request{prompt: "hi", sampling: kakeya.SamplingOptions{Temperature: 0.5, TopP: 0.9, TopK: 40, MinP: 0.05, RepetitionPenalty: 1.1, Seed: 7}, seeded: true}},
		{"top_k -1 is all", false, `{"prompt": "hi", "top_k": -1}`, request{prompt: "hi", sampling: deflt}},
		{"neutral values", false, `{"prompt": ["hi"], "n": 1, "best_of": 1, "echo": false, "logprobs": false, "top_logprobs": 0, "presence_penalty": 0, "frequency_penalty": 0, "user": "u1"}`,
			request{prompt: "hi", sampling: deflt, n: 1}},
		{"completions logprobs", false, `{"prompt": "hi", "logprobs": 5}`, request{prompt: "hi", sampling: deflt, logprobs: true, topLogprobs: 5}},
		{"completions logprobs 0: the sampled tokens'", false, `{"prompt": "hi", "logprobs": 0}`, request{prompt: "hi", sampling: deflt, logprobs: true}},
		{"chat logprobs", true, `{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 20}`,
			request{chat: true, sampling: deflt, messages: []kakeya.Message{{Role: "user", Content: "hi"}}, logprobs: true, topLogprobs: 20}},
		{"chat logprobs off", true, `{"messages": [{"role": "user", "content": "hi"}], "logprobs": false, "top_logprobs": 0}`,
			request{chat: true, sampling: deflt, messages: []kakeya.Message{{Role: "user", Content: "hi"}}}},
		{"ignore_eos", false, `{"prompt": "hi", "max_tokens": 3, "ignore_eos": true}`, request{prompt: "hi", sampling: deflt, maxTokens: 3, ignoreEOS: true}},
		{"stop string", false, `{"prompt": "hi", "stop": "\n"}`, request{prompt: "hi", sampling: deflt, stop: []string{"\n"}}},
		{"stop list", false, `{"prompt": "hi", "stop": ["a", "b"]}`, request{prompt: "hi", sampling: deflt, stop: []string{"a", "b"}}},
		{"stream with usage", false, `{"prompt": "hi", "stream": true, "stream_options": {"include_usage": true}}`,
			request{prompt: "hi", sampling: deflt, stream: true, includeUsage: true}},
		{"chat", true, `{"model": "m", "messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}, {"role": "assistant", "content": "Hi", "name": null}], "max_completion_tokens": 9}`,
			request{chat: true, model: "m", sampling: deflt, maxTokens: 9, messages: []kakeya.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello"}, {Role: "assistant", Content: "Hi"}}}},
		{"max_tokens and max_completion_tokens agree", true, `{"messages": [{"role": "user", "content": ""}], "max_tokens": 5, "max_completion_tokens": 5}`,
			request{chat: true, sampling: deflt, maxTokens: 5, messages: []kakeya.Message{{Role: "user"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeRequest([]byte(tt.body), tt.chat, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

// The request decoder never panics, and what it accepts is a request the
// engine can run: options that validate, a prompt or messages, no empty
// stop string. What it rejects is a 400 with a message.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"prompt": "hi"}`,
		`{"model": "ref", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "temperature": 0}`,
		`{"messages": [{"role": "system", "content": [{"type": "text", "text": "x"}]}], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": ["a"], "stop": ["\n", "END"], "top_k": -1, "top_p": 0.5, "min_p": 0.1, "seed": -5, "repetition_penalty": 1.2}`,
		`{"prompt": "hi", "n": 2, "ignore_eos": 1}`,
		`{"prompt": "hi", "max_tokens": 1e30}`,
		`{"prompt": "hi", "temperature": NaN}`,
		`{"prompt": "hi", "tools": [], "response_format": {}}`,
		`{"prompt": "hi", "logprobs": 3, "top_logprobs": 1}`,
		`{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 25}`,
		`{"messages": null}`,
		`{"messages": [{"role": "user", "content": "hi", "name": "a", "tool_calls": []}], "store": false, "tools": [], "tool_choice": "none", "x": 1}`,
		`[]`, `null`, `{`, `"x"`, `{"prompt": {"a": 1}}`,
	} {
		for _, chat := range []bool{false, true} {
			f.Add([]byte(seed), chat, false)
			f.Add([]byte(seed), chat, true)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, chat, strict bool) {
		r, err := decodeRequest(body, chat, &params{strict: strict})
		if err != nil {
			if r != nil || err.status != 400 || err.message == "" {
				t.Fatalf("rejected with request %v, status %d, message %q", r, err.status, err.message)
			}
			if _, jerr := json.Marshal(err); jerr != nil {
				t.Fatalf("the error does not encode: %v", jerr)
			}
			return
		}
		if verr := r.sampling.Validate(); verr != nil {
			t.Fatalf("accepted sampling options that do not validate: %v", verr)
		}
		if r.maxTokens < 0 || chat != r.chat || chat && len(r.messages) == 0 || r.includeUsage && !r.stream ||
			r.topLogprobs < 0 || r.topLogprobs > kakeya.MaxTopLogprobs || r.topLogprobs > 0 && !r.logprobs {
			t.Fatalf("accepted %+v", r)
		}
		for _, s := range r.stop {
			if s == "" {
				t.Fatal("accepted an empty stop string")
			}
		}
		for _, m := range r.messages {
			if m.Role != "system" && m.Role != "user" && m.Role != "assistant" {
				t.Fatalf("accepted role %q", m.Role)
			}
		}
	})
}
