package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
)

// params is how a request's fields that this server does not implement
// are met. Strict (--strict-params) answers each with a 400 unless it
// holds its neutral value (null, false, 0, n=1). Otherwise, as vLLM, a
// field no API of ours knows (store, parallel_tool_calls, metadata, a
// typo) and a message's name are accepted and ignored, and the request
// says which in ignored; a field that would change the output (refused)
// is still a 400 unless neutral, for a request is never run with its
// output silently different from what was asked.
type params struct {
	strict  bool
	ignored []string // the fields accepted and ignored, in the order met
}

// field meets field k with value raw, which decodeRequest does not
// implement: nil when it is accepted (and ignored), else the 400.
func (p *params) field(k string, raw json.RawMessage, hint string) *apiError {
	neutral, known := refused[k]
	switch {
	case p == nil || p.strict:
		return unsupported(k, hint)
	case known && !neutral(raw):
		return unsupported(k, hint)
	}
	p.ignored = append(p.ignored, k)
	return nil
}

// messageField meets a message's field k (at is "messages[i]"): name
// (outside a tool message) and unknown fields are accepted as field does.
func (p *params) messageField(at, k string, raw json.RawMessage) *apiError {
	if p == nil || p.strict {
		return unsupported(at+"."+k, "")
	}
	p.ignored = append(p.ignored, "messages[]."+k)
	return nil
}

// refused are the fields that change the output and are not implemented,
// each with the test of its neutral value: any other value is a 400 in
// either mode.
var refused = map[string]func(json.RawMessage) bool{
	"functions":          emptyList,
	"function_call":      oneOf(`"none"`, `"auto"`),
	"logit_bias":         oneOf(`{}`),
	"suffix":             oneOf(`""`),
	"modalities":         oneOf(`["text"]`),
	"audio":              never,
	"prediction":         never,
	"guided_regex":       never,
	"guided_choice":      never,
	"guided_grammar":     never,
	"structured_outputs": never,
	"min_tokens":         oneOf(`0`),
	"bad_words":          emptyList,
	"allowed_token_ids":  never,
	"prompt_logprobs":    never,
	"logits_processors":  emptyList,
}

// emptyList reports whether raw is [] (or a list of nothing but space).
func emptyList(raw json.RawMessage) bool { return oneOf(`[]`)(raw) }

// never is the neutral test of a field that has no neutral value but null.
func never(json.RawMessage) bool { return false }

// oneOf returns a test of whether raw is one of the compact JSON values.
func oneOf(values ...string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			return false
		}
		for _, v := range values {
			if b.String() == v {
				return true
			}
		}
		return false
	}
}

// maxLoggedFields bounds the field names a server remembers having
// logged: requests name what fields they like, and neither the log nor
// the memory may grow with them.
const maxLoggedFields = 256

// A fieldLog logs each ignored field's name once (not once per request).
type fieldLog struct {
	mu   sync.Mutex
	seen map[string]bool
	full bool
}

// note logs the fields of ignored that it has not logged before.
func (l *fieldLog) note(log *slog.Logger, endpoint string, ignored []string) {
	if len(ignored) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = make(map[string]bool)
	}
	for _, f := range ignored {
		if l.seen[f] || l.full {
			continue
		}
		if len(l.seen) == maxLoggedFields {
			l.full = true
			log.Warn("ignoring request fields: more field names than are logged; no more are", "limit", maxLoggedFields)
			continue
		}
		l.seen[f] = true
		log.Warn("ignoring a request field this server does not implement (logged once per field; --strict-params refuses it)", "field", f, "endpoint", endpoint)
	}
}
