package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya"
)

// A scriptedServer serves the reference model with its replies scripted:
// each generation records the prompt's text and "generates" the next
// reply, token by token (the tokenizer's pieces, so that streamed text
// splits where a model's would), instead of the model's own tokens. The
// test model cannot be made to write a tool call; everything around the
// reply (rendering, parsing, streaming) is the server's own.
type scriptedServer struct {
	*httptest.Server
	eng *kakeya.Engine

	mu      sync.Mutex
	replies []string // the next replies, in order; "" runs the model
	prompts []string // the prompts' text, special tokens spelled
}

func newScriptedServer(t *testing.T, replies ...string) *scriptedServer {
	t.Helper()
	eng := reference(t)
	s := newServer(serverConfig{name: "ref", maxBody: 1 << 20, log: discardLog()})
	s.setEngine(eng)
	ss := &scriptedServer{eng: eng, replies: replies}
	s.generateIDs = ss.generate
	ss.Server = httptest.NewServer(s.handler())
	t.Cleanup(ss.Close)
	return ss
}

func (ss *scriptedServer) generate(eng *kakeya.Engine, ctx context.Context, ids []int, opt kakeya.GenerateOptions, onText func(string) error) (*kakeya.Result, error) {
	tok := eng
	ss.mu.Lock()
	ss.prompts = append(ss.prompts, tok.Decode(ids, false))
	reply := ""
	if len(ss.replies) > 0 {
		reply, ss.replies = ss.replies[0], ss.replies[1:]
	}
	ss.mu.Unlock()
	if reply == "" {
		return eng.GenerateIDs(ctx, ids, opt, onText)
	}
	toks := tok.Encode(reply, false)
	res := &kakeya.Result{Text: reply, StopReason: kakeya.StopEOS, PromptTokens: len(ids), GeneratedTokens: len(toks)}
	for _, id := range toks {
		if onText != nil {
			if err := onText(tok.Decode([]int{id}, false)); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// prompt returns the i-th prompt the server ran.
func (ss *scriptedServer) prompt(t *testing.T, i int) string {
	t.Helper()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if i >= len(ss.prompts) {
		t.Fatalf("%d prompts ran, want a %dth", len(ss.prompts), i+1)
	}
	return ss.prompts[i]
}

func (ss *scriptedServer) post(t *testing.T, body string) (int, []byte) {
	t.Helper()
	ts := &testServer{url: ss.URL}
	return ts.post(t, "/v1/chat/completions", body)
}

const (
	weatherTool = `{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`
	weatherCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
)

// The reference model's template (ChatML) reads no tools: the tools, the
// assistant's call and the tool's result are rendered in the Hermes
// format Qwen2.5's template writes, inside its turns.
func TestToolsPromptFallback(t *testing.T) {
	ss := newScriptedServer(t, "It is sunny.")
	body := `{"messages": [
		{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}],
		"tools": [` + weatherTool + `], "max_tokens": 8}`
	code, b := ss.post(t, body)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	want := "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		`{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
		"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if got := ss.prompt(t, 0); got != want {
		t.Errorf("prompt\n%q\nwant\n%q", got, want)
	}
	var resp completion
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if m := resp.Choices[0].Message; m.Content == nil || *m.Content != "It is sunny." || m.ToolCalls != nil || *resp.Choices[0].FinishReason != "stop" {
		t.Errorf("reply %s", b)
	}
}

// A reply with calls comes back as tool_calls, whole or streamed, for
// tool_choice auto; with none it is content.
func TestToolCallsReply(t *testing.T) {
	reply := "Checking.\n" + weatherCall + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
	ss := newScriptedServer(t, reply, reply, reply)
	req := func(extra string) string {
		return `{"messages": [{"role": "user", "content": "Weather in Paris and Oslo?"}], "tools": [` + weatherTool + `]` + extra + `}`
	}
	code, b := ss.post(t, req(""))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	var resp completion
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.Message.Content == nil || *c.Message.Content != "Checking." || *c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 2 {
		t.Fatalf("reply %s", b)
	}
	for i, city := range []string{"Paris", "Oslo"} {
		tc := c.Message.ToolCalls[i]
		if !strings.HasPrefix(tc.ID, "call_") || len(tc.ID) != 29 || tc.Type != "function" || tc.Index != nil ||
			tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"`+city+`"}` {
			t.Errorf("call %d: %+v", i, tc)
		}
	}
	if c.Message.ToolCalls[0].ID == c.Message.ToolCalls[1].ID {
		t.Errorf("two calls with one id %q", c.Message.ToolCalls[0].ID)
	}

	// Streamed: content, then per call a delta with index, id, type and
	// name, and one with the arguments; finish_reason tool_calls.
	resp2, err := http.Post(ss.URL+"/v1/chat/completions", "application/json", strings.NewReader(req(`, "stream": true`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var content strings.Builder
	type call struct{ id, name, args string }
	var calls []call
	var finish string
	for _, ev := range readEvents(t, resp2.Body) {
		if ev == "[DONE]" {
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Role      string  `json:"role"`
					Content   *string `json:"content"`
					ToolCalls []struct {
						Index    *int   `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string  `json:"name"`
							Arguments *string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		d := ch.Choices[0].Delta
		if d.Content != nil {
			if strings.Contains(*d.Content, "<") {
				t.Errorf("content delta %q holds tag text", *d.Content)
			}
			content.WriteString(*d.Content)
		}
		for _, tc := range d.ToolCalls {
			switch {
			case tc.Index == nil:
				t.Fatalf("a tool call delta without index: %s", ev)
			case *tc.Index == len(calls):
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					t.Errorf("a call's first delta %s lacks id, type or name", ev)
				}
				calls = append(calls, call{tc.ID, tc.Function.Name, ""})
			case *tc.Index == len(calls)-1 && tc.ID == "" && tc.Function.Name == "" && tc.Function.Arguments != nil:
				calls[*tc.Index].args += *tc.Function.Arguments
			default:
				t.Errorf("unexpected tool call delta %s", ev)
			}
		}
		if fr := ch.Choices[0].FinishReason; fr != nil {
			finish = *fr
		}
	}
	if content.String() != "Checking." || finish != "tool_calls" || len(calls) != 2 ||
		calls[0].name != "get_weather" || calls[0].args != `{"city":"Paris"}` || calls[1].args != `{"city":"Oslo"}` {
		t.Errorf("streamed: content %q, finish %q, calls %+v", content.String(), finish, calls)
	}

	// tool_choice none: the reply is content, as the model wrote it.
	code, b = ss.post(t, req(`, "tool_choice": "none"`))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	resp = completion{}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices[0]; c.Message.Content == nil || *c.Message.Content != reply || c.Message.ToolCalls != nil || *c.FinishReason != "stop" {
		t.Errorf("tool_choice none: %s", b)
	}
}

// A named tool_choice starts the reply with the call's opening, up to its
// arguments, after the prompt (so the model writes only the arguments,
// under their schema's grammar), and the server closes the call where
// the arguments' JSON closes; required starts it at the call's JSON. The
// reference model runs here, unscripted, for 4 tokens: an unfinished call
// comes back as content, the forced start with it.
func TestToolChoiceForcesCallStart(t *testing.T) {
	ss := newScriptedServer(t, "", "", `{"city": "Paris"}`, `{"city": "Oslo"}`)
	req := func(choice string) string {
		return `{"messages": [{"role": "user", "content": "Weather?"}], "tools": [` + weatherTool + `], "tool_choice": ` + choice + `, "max_tokens": 4, "temperature": 0}`
	}
	named := `{"type": "function", "function": {"name": "get_weather"}}`
	code, b := ss.post(t, req(named))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	if p := ss.prompt(t, 0); !strings.HasSuffix(p, "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ") {
		t.Errorf("named: the prompt ends %q", p[max(0, len(p)-80):])
	}
	var resp completion
	json.Unmarshal(b, &resp)
	if c := resp.Choices[0]; c.Message.Content == nil || !strings.HasPrefix(*c.Message.Content, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ") {
		t.Errorf("named: an unparsed reply should be content with the forced start: %s", b)
	}
	if code, b = ss.post(t, req(`"required"`)); code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	if p := ss.prompt(t, 1); !strings.HasSuffix(p, "<|im_start|>assistant\n<tool_call>\n") {
		t.Errorf("required: the prompt ends %q", p[max(0, len(p)-80):])
	}
	// Scripted: the model writes the arguments, the call parses.
	if code, b = ss.post(t, req(named)); code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	resp = completion{}
	json.Unmarshal(b, &resp)
	if c := resp.Choices[0]; c.Message.Content != nil || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || *c.FinishReason != "tool_calls" {
		t.Errorf("named, scripted arguments: %s", b)
	}
	// Streamed: the forced start never goes out as content; the call does.
	r, err := http.Post(ss.URL+"/v1/chat/completions", "application/json", strings.NewReader(strings.TrimSuffix(req(named), "}")+`, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	events := strings.Join(readEvents(t, r.Body), "\n")
	if strings.Contains(events, "tool_call>") || !strings.Contains(events, `"name":"get_weather"`) || !strings.Contains(events, `"arguments":"{\"city\":\"Oslo\"}"`) || !strings.Contains(events, `"finish_reason":"tool_calls"`) {
		t.Errorf("named, streamed:\n%s", events)
	}
}

// goldenCase returns a case of chattmpl's golden renderings (Jinja2 in
// transformers' environment) and its template's text.
func goldenCase(t *testing.T, name string) (c struct {
	Template string          `json:"template"`
	Messages json.RawMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
	Want     string          `json:"want"`
	Name     string          `json:"name"`
	Kwargs   map[string]any  `json:"kwargs"`
	Gen      bool            `json:"add_generation_prompt"`
}, template string) {
	t.Helper()
	dir := filepath.Join("..", "..", "tokenizer", "chattmpl", "testdata")
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []json.RawMessage `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, raw := range doc.Cases {
		if json.Unmarshal(raw, &c) == nil && c.Name == name {
			tb, err := os.ReadFile(filepath.Join(dir, "templates", c.Template))
			if err != nil {
				t.Fatal(err)
			}
			return c, string(tb)
		}
	}
	t.Fatalf("no golden case %q", name)
	return c, ""
}

// With a template that reads tools (Qwen2.5's, Llama 3.1's), the
// request's tools, calls and results go to it as transformers passes
// them: the prompt is Jinja2's rendering of the same conversation (the
// golden one, plus the assistant turn's opening). Llama's reply format,
// JSON with "parameters", is read back as calls.
func TestToolsNativeTemplate(t *testing.T) {
	for _, tt := range []struct {
		golden, open, reply string
	}{
		{"qwen2.5/tool-call-and-result", "<|im_start|>assistant\n", weatherCall},
		{"llama3.1/tool-call-and-result", "<|start_header_id|>assistant<|end_header_id|>\n\n", `{"name": "get_weather", "parameters": {"city": "Paris"}}`},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			c, tmpl := goldenCase(t, tt.golden)
			ss := newScriptedServer(t, tt.reply)
			if err := ss.eng.SetChatTemplate(c.Template, tmpl); err != nil {
				t.Fatal(err)
			}
			// The golden messages in the API's shape: arguments a string.
			var msgs []map[string]any
			json.Unmarshal(c.Messages, &msgs)
			for _, m := range msgs {
				calls, _ := m["tool_calls"].([]any)
				for _, call := range calls {
					f := call.(map[string]any)["function"].(map[string]any)
					args, _ := json.Marshal(f["arguments"])
					f["arguments"] = string(args)
				}
			}
			kwargs := map[string]any{"date_string": "26 Jul 2024"}
			for k, v := range c.Kwargs {
				kwargs[k] = v
			}
			body, _ := json.Marshal(map[string]any{"messages": msgs, "tools": c.Tools, "max_tokens": 16, "chat_template_kwargs": kwargs})
			code, b := ss.post(t, string(body))
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, b)
			}
			// The reference tokenizer has no bos_token, which Llama's
			// template writes first.
			want := strings.TrimPrefix(c.Want, "<|begin_of_text|>")
			if !c.Gen {
				want += tt.open
			}
			if got := ss.prompt(t, 0); got != want {
				t.Errorf("prompt\n%q\nwant\n%q", got, want)
			}
			var resp completion
			json.Unmarshal(b, &resp)
			if m := resp.Choices[0].Message; len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || m.Content != nil {
				t.Errorf("reply %s", b)
			}
		})
	}
}

// /tokenize renders tools and tool messages as a chat request does.
func TestTokenizeTools(t *testing.T) {
	ss := newScriptedServer(t, "ok")
	msgs := `[{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]`
	if code, b := ss.post(t, `{"messages": `+msgs+`, "tools": [`+weatherTool+`], "max_tokens": 1}`); code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	ts := &testServer{url: ss.URL}
	code, b := ts.post(t, "/tokenize", `{"messages": `+msgs+`, "tools": [`+weatherTool+`]}`)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	var tk struct{ Tokens []int }
	json.Unmarshal(b, &tk)
	if got, want := ss.eng.Decode(tk.Tokens, false), ss.prompt(t, 0); got != want {
		t.Errorf("/tokenize renders\n%q\nthe chat request\n%q", got, want)
	}
}

// planTools under tool_choice required and named, in both formats: the
// grammar asked for (the call, or the named tool's arguments alone after
// the call's start in the prompt), and the end the server writes after a
// call the grammar closed, which parses as the call.
func TestPlanToolsGrammar(t *testing.T) {
	fns := []kakeya.ToolSchema{{Name: "get_weather", Parameters: []byte(`{"type":"object"}`)}, {Name: "add"}}
	llama := "{{ '<|python_tag|>' }}{% if tools %}{{ tools }}{% endif %}"
	tests := []struct {
		template, choice, named string
		prefix, suffix, key     string
		only                    bool
		reply                   string // what the model writes under the grammar
	}{
		{"", toolChoiceRequired, "", "<tool_call>\n", "\n</tool_call>", "arguments", false, `{"name": "add", "arguments": {"a": 1}}`},
		{"", toolChoiceNamed, "add", "<tool_call>\n{\"name\": \"add\", \"arguments\": ", "}\n</tool_call>", "", true, `{"a": 1}`},
		{llama, toolChoiceRequired, "", "", "", "parameters", false, `{"name": "add", "parameters": {"a": 1}}`},
		{llama, toolChoiceNamed, "add", "{\"name\": \"add\", \"parameters\": ", "}", "", true, `{"a": 1}`},
	}
	for _, tt := range tests {
		req := &request{chat: true, tools: json.RawMessage(`[]`), toolFns: fns, toolChoice: tt.choice, toolNamed: tt.named,
			messages: []kakeya.Message{{Role: "user", Content: "hi"}}}
		var opt kakeya.GenerateOptions
		p := planTools(tt.template, req, &opt)
		tc := opt.ToolCall
		if p.prefix != tt.prefix || p.suffix != tt.suffix || tc == nil || tc.ArgumentsKey != tt.key || tc.ArgumentsOnly != tt.only {
			t.Errorf("%q %s: prefix %q, suffix %q, grammar %+v", tt.template, tt.choice, p.prefix, p.suffix, tc)
			continue
		}
		if tt.only && (len(tc.Tools) != 1 || tc.Tools[0].Name != tt.named) || !tt.only && len(tc.Tools) != len(fns) {
			t.Errorf("%q %s: tools %+v", tt.template, tt.choice, tc.Tools)
		}
		content, calls, finish := p.reply(tt.reply, "stop")
		if content != nil || len(calls) != 1 || calls[0].Function.Name != "add" || calls[0].Function.Arguments != `{"a":1}` || finish != "tool_calls" {
			t.Errorf("%q %s: reply %v %+v %q", tt.template, tt.choice, content, calls, finish)
		}
	}
}
