package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"

	"github.com/kakeya-ai/kakeya"
)

// The values of tool_choice.
const (
	toolChoiceAuto     = "auto"
	toolChoiceNone     = "none"
	toolChoiceRequired = "required"
	toolChoiceNamed    = "function" // {"type": "function", "function": {"name": ...}}
)

// toolName is what the OpenAI API allows as a function's name.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// decodeTools decodes tools: a list of {"type": "function", "function":
// {"name", "description", "parameters", ...}}. It returns the list as
// sent (nil when empty) and the functions, their names and parameters'
// schemas (nil where absent).
func decodeTools(raw json.RawMessage) (json.RawMessage, []kakeya.ToolSchema, *apiError) {
	var list []struct {
		Type     string          `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, badRequest("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}} objects")
	}
	if len(list) == 0 {
		return nil, nil, nil
	}
	fns := make([]kakeya.ToolSchema, len(list))
	for i, t := range list {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, nil, badRequest(at+".type", "%s.type must be \"function\", got %q", at, t.Type)
		}
		var f struct {
			Name       *string         `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if t.Function == nil || json.Unmarshal(t.Function, &f) != nil || f.Name == nil {
			return nil, nil, badRequest(at+".function", "%s.function must be an object with a name", at)
		}
		if !toolName.MatchString(*f.Name) {
			return nil, nil, badRequest(at+".function.name", "%s.function.name %q must be 1 to 64 letters, digits, _, . or -", at, *f.Name)
		}
		if slices.ContainsFunc(fns[:i], func(t kakeya.ToolSchema) bool { return t.Name == *f.Name }) {
			return nil, nil, badRequest(at+".function.name", "%s.function.name %q names an earlier tool too", at, *f.Name)
		}
		if f.Parameters != nil && !isNull(f.Parameters) && !isObject(f.Parameters) {
			return nil, nil, badRequest(at+".function.parameters", "%s.function.parameters must be a JSON schema object", at)
		}
		fns[i].Name = *f.Name
		if f.Parameters != nil && !isNull(f.Parameters) {
			fns[i].Parameters = f.Parameters
		}
	}
	return raw, fns, nil
}

// decodeToolChoice decodes tool_choice: "auto", "none", "required" or
// {"type": "function", "function": {"name": ...}}; named is the name of
// the last.
func decodeToolChoice(raw json.RawMessage) (choice, named string, err *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case toolChoiceAuto, toolChoiceNone, toolChoiceRequired:
			return s, "", nil
		}
		return "", "", badRequest("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %q", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" || obj.Function.Name == "" {
		return "", "", badRequest("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return toolChoiceNamed, obj.Function.Name, nil
}

// checkToolChoice checks tool_choice against the tools. Required or
// named, the call's arguments are generated under the grammar of the
// tool's parameters, which must compile: a schema it refuses is a 400
// naming the tool and the keyword.
func (r *request) checkToolChoice() *apiError {
	forced := r.toolChoice == toolChoiceRequired || r.toolChoice == toolChoiceNamed
	switch {
	case r.tools != nil && !r.chat:
		return unsupported("tools", "; it is a /v1/chat/completions field")
	case forced && r.tools == nil:
		return badRequest("tool_choice", "tool_choice %q needs tools", r.toolChoice)
	case r.toolChoice == toolChoiceNamed && r.namedTool() < 0:
		names := make([]string, len(r.toolFns))
		for i, t := range r.toolFns {
			names[i] = t.Name
		}
		return badRequest("tool_choice", "tool_choice names the function %q, which is not among the tools (%s)", r.toolNamed, strings.Join(names, ", "))
	case forced && (r.constraint.jsonObject || r.constraint.schema != nil):
		return badRequest("response_format", "response_format (or guided_json) and tool_choice %q both constrain the reply, which tool_choice makes a tool call: send one", r.toolChoice)
	}
	if !forced {
		return nil
	}
	for i, t := range r.toolFns {
		if r.toolChoice == toolChoiceNamed && t.Name != r.toolNamed {
			continue
		}
		if err := kakeya.CheckToolParameters(t.Parameters); err != nil {
			at := fmt.Sprintf("tools[%d].function.parameters", i)
			return badRequest(at, "%s (function %q): %v; tool_choice %q generates the arguments under this schema, which must keep to the subset docs/cli.md lists", at, t.Name, err, r.toolChoice)
		}
	}
	return nil
}

// namedTool returns the index of the tool tool_choice names, -1 if none.
func (r *request) namedTool() int {
	return slices.IndexFunc(r.toolFns, func(t kakeya.ToolSchema) bool { return t.Name == r.toolNamed })
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// decodeToolCalls decodes an assistant message's tool_calls: a list of
// {"id", "type": "function", "function": {"name", "arguments"}}, the
// arguments a string of JSON (an object is taken too).
func decodeToolCalls(raw json.RawMessage, at string) ([]kakeya.ToolCall, *apiError) {
	var list []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(at, "%s must be a list of {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}} objects", at)
	}
	calls := make([]kakeya.ToolCall, len(list))
	for i, c := range list {
		ci := fmt.Sprintf("%s[%d]", at, i)
		if c.Type != "" && c.Type != "function" {
			return nil, badRequest(ci+".type", "%s.type must be \"function\", got %q", ci, c.Type)
		}
		if c.Function == nil || c.Function.Name == "" {
			return nil, badRequest(ci+".function", "%s.function must be an object with a name", ci)
		}
		args := "{}"
		if a := c.Function.Arguments; a != nil && !isNull(a) {
			var s string
			switch {
			case json.Unmarshal(a, &s) == nil:
				args = s
			case isObject(a):
				args = string(a)
			default:
				return nil, badRequest(ci+".function.arguments", "%s.function.arguments must be a string of JSON", ci)
			}
		}
		calls[i] = kakeya.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args}
	}
	return calls, nil
}

// A toolPlan is how a chat request with tools runs: the format the model
// writes calls in, whether its reply is parsed for them, the text that
// starts the reply for it and the text that ends a reply whose call the
// grammar closed (tool_choice required or named).
type toolPlan struct {
	format toolFormat
	parse  bool   // tool_choice is not none: calls are read from the reply
	prefix string // the start of a call, fed after the prompt ("" for none)
	suffix string // the end of the call after the generated JSON
}

// text returns the whole text of a reply that generated text and ended
// for finish: a call the grammar closed (finish "stop") gets its end.
func (p *toolPlan) text(text, finish string) string {
	if finish == "stop" {
		return p.prefix + text + p.suffix
	}
	return p.prefix + text
}

// toolFormatOf tells a chat template's tool format from its text: Llama
// 3.x's where it has <|python_tag|> or Llama 3's headers, else Hermes'
// (Qwen's, and the fallback's).
func toolFormatOf(template string) toolFormat {
	if strings.Contains(template, pythonTag) || strings.Contains(template, "<|start_header_id|>") && !strings.Contains(template, toolCallOpen) {
		return llamaFormat
	}
	return hermesFormat
}

// planTools sets opt up for the request's tools and tool messages and
// returns the plan of the reply, nil when the request has no tools.
// tool_choice required or named generates the call under a grammar
// (opt.ToolCall): named, the prompt holds the call up to its arguments,
// which the tool's schema constrains; required, the call's JSON is
// generated whole, its name one of the tools' and its arguments by that
// tool's schema. Either ends where the call's JSON closes. The
// tools go to the model's chat template; a template that reads neither
// tools nor tool calls (no "tool" in its text) gets the conversation
// rewritten in the Hermes format Qwen2.5's template writes (tools in the
// system message, calls in <tool_call> tags, results in
// <tool_response> tags in a user turn), which any model can be prompted
// with.
func planTools(src string, req *request, opt *kakeya.GenerateOptions) *toolPlan {
	native := strings.Contains(src, "tool")
	hasToolMsgs := slices.ContainsFunc(req.messages, func(m kakeya.Message) bool { return m.Role == "tool" || len(m.ToolCalls) > 0 })
	switch {
	case native:
		opt.Tools = req.tools
	case req.tools != nil || hasToolMsgs:
		opt.Messages = hermesMessages(req.messages, req.tools)
	}
	if req.tools == nil {
		return nil
	}
	p := &toolPlan{format: hermesFormat, parse: req.toolChoice != toolChoiceNone}
	if native {
		p.format = toolFormatOf(src)
	}
	argsKey := "arguments"
	if p.format == llamaFormat {
		argsKey = "parameters"
	}
	switch req.toolChoice {
	case toolChoiceNamed:
		p.prefix = "{\"name\": " + jsonString(req.toolNamed) + ", \"" + argsKey + "\": "
		p.suffix = "}"
		opt.ToolCall = &kakeya.ToolCallGrammar{Tools: []kakeya.ToolSchema{req.toolFns[req.namedTool()]}, ArgumentsOnly: true}
	case toolChoiceRequired:
		opt.ToolCall = &kakeya.ToolCallGrammar{Tools: req.toolFns, ArgumentsKey: argsKey}
	}
	if opt.ToolCall != nil && p.format == hermesFormat {
		p.prefix = toolCallOpen + "\n" + p.prefix
		p.suffix += "\n" + toolCallClose
	}
	return p
}

// jsonString returns s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// hermesMessages rewrites a conversation in the Hermes tool format, as
// Qwen2.5's chat template writes it, for a template that knows no tools:
// the tools' block ends the system message (one is added first if there
// is none), an assistant's calls become <tool_call> text after its
// content, and each run of tool results one user message of
// <tool_response> blocks.
func hermesMessages(msgs []kakeya.Message, tools json.RawMessage) []kakeya.Message {
	out := make([]kakeya.Message, 0, len(msgs)+1)
	if tools != nil {
		block := hermesToolsBlock(tools)
		if len(msgs) > 0 && msgs[0].Role == "system" {
			out = append(out, kakeya.Message{Role: "system", Content: msgs[0].Content + "\n\n" + block})
			msgs = msgs[1:]
		} else {
			out = append(out, kakeya.Message{Role: "system", Content: block})
		}
	}
	for _, m := range msgs {
		switch {
		case m.Role == "tool":
			resp := "<tool_response>\n" + m.Content + "\n</tool_response>"
			if n := len(out); n > 0 && out[n-1].Role == "user" && strings.HasSuffix(out[n-1].Content, "</tool_response>") {
				out[n-1].Content += "\n" + resp
				continue
			}
			out = append(out, kakeya.Message{Role: "user", Content: resp})
		case len(m.ToolCalls) > 0:
			var sb strings.Builder
			sb.WriteString(m.Content)
			for _, c := range m.ToolCalls {
				if sb.Len() > 0 {
					sb.WriteByte('\n')
				}
				args := c.Arguments
				if isObject(json.RawMessage(args)) {
					args = pyJSON(json.RawMessage(args))
				} else {
					args = jsonString(args)
				}
				sb.WriteString(toolCallOpen + "\n{\"name\": " + jsonString(c.Name) + ", \"arguments\": " + args + "}\n" + toolCallClose)
			}
			out = append(out, kakeya.Message{Role: "assistant", Content: sb.String()})
		default:
			out = append(out, kakeya.Message{Role: m.Role, Content: m.Content})
		}
	}
	return out
}

// hermesToolsBlock is the tools' part of Qwen2.5's system message.
func hermesToolsBlock(tools json.RawMessage) string {
	var list []json.RawMessage
	json.Unmarshal(tools, &list) // decodeTools checked it
	var sb strings.Builder
	sb.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for _, t := range list {
		sb.WriteString("\n" + pyJSON(t))
	}
	sb.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	return sb.String()
}

// pyJSON writes raw as Python's json.dumps does (and chat templates'
// tojson): ", " and ": " between items, keys in their order.
func pyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	var out strings.Builder
	inString, escaped := false, false
	for _, c := range b.Bytes() {
		out.WriteByte(c)
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ',' || c == ':'):
			out.WriteByte(' ')
		}
	}
	return out.String()
}

// toolCallJSON is a tool call in a response: whole in a message, or a
// streamed delta (with index; the first of a call carries id, type and
// name, the next its arguments).
type toolCallJSON struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function toolFunctionJSON `json:"function"`
}

type toolFunctionJSON struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// newCallID returns a tool call's id, as the OpenAI API's: "call_" and 24
// random characters.
func newCallID() string {
	return fmt.Sprintf("call_%016x%08x", rand.Uint64(), rand.Uint32())
}

// reply reads the calls out of a whole reply: the message's content (nil
// when there is none beside calls), its calls and the finish reason.
func (p *toolPlan) reply(text, finish string) (*string, []toolCallJSON, string) {
	if p == nil || !p.parse {
		return &text, nil, finish
	}
	content, calls := parseToolCalls(p.format, p.text(text, finish))
	if len(calls) == 0 {
		return &content, nil, finish
	}
	out := make([]toolCallJSON, len(calls))
	for i, c := range calls {
		out[i] = toolCallJSON{ID: newCallID(), Type: "function", Function: toolFunctionJSON{c.name, c.args}}
	}
	if finish == "stop" {
		finish = "tool_calls"
	}
	if content == "" {
		return nil, out, finish
	}
	return &content, out, finish
}

// A toolStream streams a reply whose calls are parsed: content goes out
// as it is known not to be a call, each call as two deltas once it is
// whole (id, type and name, then the arguments), as the OpenAI API
// streams them.
type toolStream struct {
	sse    *sseWriter
	p      toolParser
	suffix string // toolPlan's
	calls  int
}

// newToolStream returns the stream of plan's reply on sse.
func newToolStream(sse *sseWriter, plan *toolPlan) *toolStream {
	ts := &toolStream{sse: sse, p: toolParser{format: plan.format}, suffix: plan.suffix}
	ts.p.feed(plan.prefix) // the start of a call: nothing goes out
	return ts
}

// text is Generate's onText.
func (ts *toolStream) text(t string) error {
	content, calls := ts.p.feed(t)
	return ts.send(content, calls)
}

// send sends content, then calls.
func (ts *toolStream) send(content string, calls []parsedCall) error {
	if content != "" {
		if err := ts.sse.text(content); err != nil {
			return err
		}
	}
	for _, c := range calls {
		i := ts.calls
		ts.calls++
		first := ts.sse.resp.chunk("", "", !ts.sse.started, ts.sse.pending)
		ts.sse.pending = ts.sse.pending[:0]
		first.Choices[0].Delta.Content = nil
		first.Choices[0].Delta.ToolCalls = []toolCallJSON{{Index: &i, ID: newCallID(), Type: "function", Function: toolFunctionJSON{Name: c.name}}}
		if err := ts.sse.event(first); err != nil {
			return err
		}
		args := ts.sse.resp.chunk("", "", false, nil)
		args.Choices[0].Delta.Content = nil
		args.Choices[0].Delta.ToolCalls = []toolCallJSON{{Index: &i, Function: toolFunctionJSON{Arguments: c.args}}}
		if err := ts.sse.event(args); err != nil {
			return err
		}
	}
	return nil
}

// finish sends what the parser held and returns the finish reason:
// "tool_calls" for a reply that stopped after calls.
func (ts *toolStream) finish(finish string) (string, error) {
	if finish == "stop" && ts.suffix != "" {
		if err := ts.text(ts.suffix); err != nil { // the call the grammar closed
			return finish, err
		}
	}
	if err := ts.send(ts.p.finish()); err != nil {
		return finish, err
	}
	if ts.calls > 0 && finish == "stop" {
		finish = "tool_calls"
	}
	return finish, nil
}
