package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/kakeya-ai/kakeya"
)

// An apiError is an error the way the OpenAI API reports one: an HTTP
// status and a JSON body {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status  int
	message string
	typ     string // "invalid_request_error", "authentication_error", ...
	param   string // the request field at fault, "" for none
	code    string // a machine-readable reason, "" for none
}

func (e *apiError) Error() string { return e.message }

// MarshalJSON writes the error body; an empty param or code is null, as
// the OpenAI API sends it.
func (e *apiError) MarshalJSON() ([]byte, error) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: e.message, Type: e.typ}
	if e.param != "" {
		b.Param = &e.param
	}
	if e.code != "" {
		b.Code = &e.code
	}
	return json.Marshal(struct {
		Error body `json:"error"`
	}{b})
}

// badRequest returns a 400 about field param.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...), typ: "invalid_request_error", param: param}
}

// A request is a decoded, checked /v1/chat/completions or /v1/completions
// body.
type request struct {
	chat     bool
	model    string           // "" means the served model
	prompt   string           // /v1/completions
	messages []kakeya.Message // /v1/chat/completions
	// chatKwargs are chat_template_kwargs (as vLLM's): extra variables
	// of the model's chat template, such as enable_thinking.
	chatKwargs map[string]any

	maxTokens    int  // 0: until EOS or the context is full
	ignoreEOS    bool // vLLM's ignore_eos: generate to maxTokens
	priority     int  // vLLM's priority: lower first, under --scheduling priority
	sampling     kakeya.SamplingOptions
	seeded       bool // sampling.Seed was given
	stop         []string
	stream       bool
	includeUsage bool
	// logprobs asks for each generated token's logprob and the
	// topLogprobs most likely alternatives: chat's logprobs and
	// top_logprobs, completions' logprobs (a count).
	logprobs    bool
	topLogprobs int
	// constraint is response_format's (or guided_json's) structured
	// output.
	constraint constraint

	// n is the choices asked for, 1 to maxN (0 as 1): each its own
	// sample.
	n int
	// echo (completions) puts the prompt before each choice's text, and
	// its tokens' logprobs before the generated ones'; with max_tokens 0
	// (scoreOnly) nothing is generated.
	echo, scoreOnly bool

	// tools are the tools the model may call, as sent (nil for none),
	// with their functions' names and parameters; toolChoice is "auto"
	// (or ""), "none", "required" or "function", naming toolNamed.
	tools      json.RawMessage
	toolFns    []kakeya.ToolSchema
	toolChoice string
	toolNamed  string
}

// maxLogprobs bounds completions' logprobs, as the OpenAI API does; chat's
// top_logprobs goes to kakeya.MaxTopLogprobs.
const maxLogprobs = 5

// maxStops bounds the stop strings of a request (the OpenAI API allows 4).
const maxStops = 16

// decodeRequest parses a completions (chat false) or chat completions
// body. A field it does not implement is met by p (see params): with
// strict params (or p nil) it is a 400 naming it unless it holds its
// neutral value (null, false, 0, n=1); otherwise an unknown field is
// accepted and p lists it, while one that would change the output is
// still refused.
func decodeRequest(body []byte, chat bool, p *params) (*request, *apiError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, badJSON(err)
	}
	if fields == nil {
		return nil, badRequest("", "the request body must be a JSON object")
	}
	r := &request{chat: chat, sampling: kakeya.SamplingOptions{Temperature: 1}}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad field named is always the same one
	var maxTokens, maxCompletion *int
	var bestOf *int64
	for _, k := range keys {
		raw := fields[k]
		if isNull(raw) {
			continue
		}
		var err *apiError
		switch k {
		case "model":
			err = decodeField(raw, k, &r.model)
		case "messages":
			if !chat {
				return nil, unsupported(k, "; /v1/completions takes a prompt (/v1/chat/completions takes messages)")
			}
			r.messages, err = decodeMessages(raw, p)
		case "prompt":
			if chat {
				return nil, unsupported(k, "; /v1/chat/completions takes messages (/v1/completions takes a prompt)")
			}
			r.prompt, err = decodePrompt(raw)
		case "max_tokens":
			err = decodeField(raw, k, &maxTokens)
		case "max_completion_tokens":
			if !chat {
				return nil, unsupported(k, "; /v1/completions takes max_tokens")
			}
			err = decodeField(raw, k, &maxCompletion)
		case "temperature":
			err = decodeFloat(raw, k, 0, 2, &r.sampling.Temperature)
		case "top_p":
			err = decodeFloat(raw, k, 0, 1, &r.sampling.TopP)
			if err == nil && r.sampling.TopP == 0 {
				err = badRequest(k, "top_p must be in (0, 1], got 0")
			}
		case "min_p":
			err = decodeFloat(raw, k, 0, 1, &r.sampling.MinP)
		case "repetition_penalty":
			err = decodeFloat(raw, k, 0, 100, &r.sampling.RepetitionPenalty)
			if err == nil && r.sampling.RepetitionPenalty == 0 {
				err = badRequest(k, "repetition_penalty must be > 0 (1 is off), got 0")
			}
		case "top_k":
			var k64 int64
			if err = decodeField(raw, k, &k64); err == nil {
				switch {
				case k64 == -1 || k64 == 0: // vLLM's and llama.cpp's "all"
				case k64 < -1 || k64 > math.MaxInt32:
					err = badRequest(k, "top_k must be -1 or 0 (all tokens) or a positive count, got %d", k64)
				default:
					r.sampling.TopK = int(k64)
				}
			}
		case "seed":
			var s int64
			if err = decodeField(raw, k, &s); err == nil {
				r.sampling.Seed, r.seeded = uint64(s), true
			}
		case "stop":
			r.stop, err = decodeStop(raw)
		case "stream":
			err = decodeField(raw, k, &r.stream)
		case "ignore_eos":
			err = decodeField(raw, k, &r.ignoreEOS)
		case "priority":
			err = decodeField(raw, k, &r.priority)
		case "stream_options":
			var so map[string]json.RawMessage
			if err = decodeField(raw, k, &so); err == nil {
				for name, v := range so {
					if name != "include_usage" {
						return nil, unsupported(k+"."+name, "")
					}
					if !isNull(v) {
						err = decodeField(v, k+".include_usage", &r.includeUsage)
					}
				}
			}
		case "n":
			var n int64
			if err = decodeField(raw, k, &n); err == nil && (n < 1 || n > maxN) {
				err = badRequest(k, "n must be in [1, %d], got %d", maxN, n)
			}
			r.n = int(n)
		case "best_of":
			var n int64
			if err = decodeField(raw, k, &n); err == nil {
				bestOf = &n
			}
		case "presence_penalty", "frequency_penalty":
			var f float64
			if err = decodeField(raw, k, &f); err == nil && f != 0 {
				err = unsupported(k, " (use repetition_penalty)")
			}
		case "logprobs":
			if chat {
				err = decodeField(raw, k, &r.logprobs)
				break
			}
			// A count in completions, 0 asking for the sampled tokens'
			// logprobs alone; false, as some clients send, is off.
			if bytes.Equal(raw, []byte("false")) {
				break
			}
			var n int64
			if err = decodeField(raw, k, &n); err == nil {
				if n < 0 || n > maxLogprobs {
					err = badRequest(k, "logprobs must be in [0, %d], got %d", maxLogprobs, n)
				}
				r.logprobs, r.topLogprobs = true, int(n)
			}
		case "top_logprobs":
			if !chat {
				if !bytes.Equal(raw, []byte("0")) {
					err = unsupported(k, "; /v1/completions takes logprobs: N")
				}
				break
			}
			var n int64
			if err = decodeField(raw, k, &n); err == nil {
				if n < 0 || n > kakeya.MaxTopLogprobs {
					err = badRequest(k, "top_logprobs must be in [0, %d], got %d", kakeya.MaxTopLogprobs, n)
				}
				r.topLogprobs = int(n)
			}
		case "echo":
			if bytes.Equal(raw, []byte("0")) {
				break
			}
			if err = decodeField(raw, k, &r.echo); err == nil && r.echo && chat {
				err = unsupported(k, "; it is a /v1/completions field")
			}
		case "chat_template_kwargs":
			if !chat {
				return nil, unsupported(k, "; it is a /v1/chat/completions field")
			}
			var kw map[string]json.RawMessage
			if err = decodeField(raw, k, &kw); err == nil && len(kw) > 0 {
				r.chatKwargs = make(map[string]any, len(kw))
				for name, v := range kw {
					r.chatKwargs[name] = v
				}
			}
		case "response_format":
			r.constraint, err = decodeResponseFormat(raw)
		case "guided_json":
			r.constraint, err = decodeGuidedJSON(raw)
		case "tools":
			if !chat {
				return nil, unsupported(k, "; it is a /v1/chat/completions field")
			}
			r.tools, r.toolFns, err = decodeTools(raw)
		case "tool_choice":
			if !chat {
				return nil, unsupported(k, "; it is a /v1/chat/completions field")
			}
			r.toolChoice, r.toolNamed, err = decodeToolChoice(raw)
		case "user":
			// An end-user id for the caller's own accounting: it changes
			// nothing in the output.
			var u string
			err = decodeField(raw, k, &u)
		default:
			// tools, tool_choice, logit_bias, suffix,
			// functions, ... and fields no API has.
			err = p.field(k, raw, "")
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case maxTokens != nil && maxCompletion != nil && *maxTokens != *maxCompletion:
		return nil, badRequest("max_completion_tokens", "max_tokens (%d) and max_completion_tokens (%d) disagree: send one", *maxTokens, *maxCompletion)
	case maxCompletion != nil:
		maxTokens = maxCompletion
	}
	if maxTokens != nil && *maxTokens == 0 && r.echo {
		r.scoreOnly, maxTokens = true, nil // the prompt scored, as vLLM's echo with max_tokens 0
	}
	if maxTokens != nil {
		if *maxTokens <= 0 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *maxTokens)
		}
		r.maxTokens = *maxTokens
	}
	if chat && len(r.messages) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	if !chat && fields["prompt"] == nil {
		return nil, badRequest("prompt", "prompt is required")
	}
	if bestOf != nil && *bestOf != int64(max(r.n, 1)) {
		return nil, badRequest("best_of", "best_of = %d is not supported: this server returns each of the n = %d samples it draws (best_of may only equal n)", *bestOf, max(r.n, 1))
	}
	if err := r.checkToolChoice(); err != nil {
		return nil, err
	}
	if r.topLogprobs > 0 && !r.logprobs {
		return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
	}
	if r.includeUsage && !r.stream {
		return nil, badRequest("stream_options", "stream_options is only allowed with stream: true")
	}
	if err := r.sampling.Validate(); err != nil {
		return nil, badRequest("", "%v", err)
	}
	return r, nil
}

// isNull reports whether raw is JSON null, which stands for an absent
// field.
func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// decodeField decodes raw into v, naming field and the type it wants on
// a mismatch.
func decodeField(raw json.RawMessage, field string, v any) *apiError {
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest(field, "%s must be %s, got a JSON %s", field, typeName(te.Type.String()), te.Value)
		}
		return badRequest(field, "%s: %v", field, err)
	}
	return nil
}

// typeName names a Go type in the API's terms.
func typeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	case strings.Contains(goType, "string"):
		return "a string"
	}
	return "an object"
}

// decodeFloat decodes a number in [lo, hi] into *f.
func decodeFloat(raw json.RawMessage, field string, lo, hi float64, f *float32) *apiError {
	var v float64
	if err := decodeField(raw, field, &v); err != nil {
		return err
	}
	if !(v >= lo && v <= hi) {
		return badRequest(field, "%s must be in [%g, %g], got %g", field, lo, hi, v)
	}
	*f = float32(v)
	return nil
}

// badJSON is the 400 of a body that is not JSON.
func badJSON(err error) *apiError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return badRequest("", "the request body must be a JSON object, got a JSON %s", te.Value)
	}
	return badRequest("", "the request body is not valid JSON: %v", err)
}

// unsupported is the 400 of a parameter this server does not implement.
func unsupported(field, hint string) *apiError {
	return badRequest(field, "parameter %q is not supported by this server%s", field, hint)
}

// decodeMessages decodes chat messages: role system, developer (a
// system message), user, assistant (with the tool_calls it made) or tool
// (a call's result, with its tool_call_id), and content a string or a
// list of text parts; p meets their other fields (name, ...).
func decodeMessages(raw json.RawMessage, p *params) ([]kakeya.Message, *apiError) {
	var list []map[string]json.RawMessage
	if err := decodeField(raw, "messages", &list); err != nil {
		return nil, badRequest("messages", "messages must be a list of objects with a role and a content")
	}
	msgs := make([]kakeya.Message, 0, len(list))
	for i, m := range list {
		at := fmt.Sprintf("messages[%d]", i)
		var role string
		var content *string
		var msg kakeya.Message
		var name json.RawMessage
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := m[k]
			switch k {
			case "role":
				if err := decodeField(v, at+".role", &role); err != nil {
					return nil, err
				}
			case "content":
				c, err := decodeContent(v, at+".content")
				if err != nil {
					return nil, err
				}
				content = c
			case "tool_calls":
				if isNull(v) {
					break
				}
				calls, err := decodeToolCalls(v, at+".tool_calls")
				if err != nil {
					return nil, err
				}
				msg.ToolCalls = calls
			case "tool_call_id":
				if !isNull(v) {
					if err := decodeField(v, at+".tool_call_id", &msg.ToolCallID); err != nil {
						return nil, err
					}
				}
			case "name":
				name = v
			default:
				if !isNull(v) {
					if err := p.messageField(at, k, v); err != nil {
						return nil, err
					}
				}
			}
		}
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system" // the OpenAI API's newer name for it
		case "":
			return nil, badRequest(at+".role", "%s has no role", at)
		default:
			return nil, badRequest(at+".role", "%s: role %q is not supported (system, developer, user, assistant or tool)", at, role)
		}
		switch {
		case len(msg.ToolCalls) > 0 && role != "assistant":
			return nil, badRequest(at+".tool_calls", "%s: only an assistant message has tool_calls", at)
		case msg.ToolCallID != "" && role != "tool":
			return nil, badRequest(at+".tool_call_id", "%s: only a tool message has a tool_call_id", at)
		case content == nil && len(msg.ToolCalls) > 0:
			content = new(string) // calls alone
		case content == nil:
			return nil, badRequest(at+".content", "%s has no content", at)
		}
		if name != nil && !isNull(name) {
			if role == "tool" {
				// The function's name, which some templates read.
				if err := decodeField(name, at+".name", &msg.Name); err != nil {
					return nil, err
				}
			} else if err := p.messageField(at, "name", name); err != nil {
				return nil, err
			}
		}
		msg.Role, msg.Content = role, *content
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// decodeContent decodes a message's content: a string, or a list of
// {"type": "text", "text": ...} parts, joined.
func decodeContent(raw json.RawMessage, field string) (*string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return &s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest(field, "%s must be a string or a list of text parts", field)
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return nil, badRequest(field, "%s[%d]: only text parts are supported, got type %q", field, i, p.Type)
		}
		sb.WriteString(*p.Text)
	}
	s = sb.String()
	return &s, nil
}

// stringOrList decodes a field that is a string or a list of strings:
// the string as a list of one (single set), or the list; ok is false for
// anything else.
func stringOrList(raw json.RawMessage) (list []string, single, ok bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, true, true
	}
	if json.Unmarshal(raw, &list) != nil {
		return nil, false, false
	}
	return list, false, true
}

// decodePrompt decodes a completions prompt: a string, or a list of one
// string. Batches and token-id prompts are not served.
func decodePrompt(raw json.RawMessage) (string, *apiError) {
	list, single, ok := stringOrList(raw)
	switch {
	case !ok:
		return "", badRequest("prompt", "prompt must be a string (token-id prompts are not supported)")
	case !single && len(list) != 1:
		return "", badRequest("prompt", "prompt holds %d prompts: this server takes one per request", len(list))
	}
	return list[0], nil
}

// decodeStop decodes stop: a string or a list of strings, none empty.
func decodeStop(raw json.RawMessage) ([]string, *apiError) {
	list, single, ok := stringOrList(raw)
	switch {
	case !ok:
		return nil, badRequest("stop", "stop must be a string or a list of strings")
	case single && list[0] == "":
		return nil, badRequest("stop", "stop must not be empty")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "stop holds %d strings, at most %d", len(list), maxStops)
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("stop", "stop[%d] is empty", i)
		}
	}
	return list, nil
}
