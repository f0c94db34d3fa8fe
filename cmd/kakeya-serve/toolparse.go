package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
)

// A toolFormat is how a model family writes its tool calls as text.
type toolFormat int

const (
	// hermesFormat is Qwen2.5's, Qwen3's and Hermes': each call a JSON
	// object {"name": ..., "arguments": {...}} between <tool_call> and
	// </tool_call>, text allowed before the calls.
	hermesFormat toolFormat = iota
	// llamaFormat is Llama 3.1's, 3.2's and 3.3's JSON-based calls: the
	// whole reply one JSON object {"name": ..., "parameters": {...}}
	// (after <|python_tag|> where the model writes one), or several
	// separated by ";".
	llamaFormat
)

// The Hermes format's tags.
const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// pythonTag starts a Llama 3.x tool call where the model writes it (a
// special token, which the decoded text usually leaves out).
const pythonTag = "<|python_tag|>"

// A parsedCall is a tool call read from the model's text.
type parsedCall struct {
	name string
	args string // the arguments, a JSON object as compact text
}

// parseCall reads one call's JSON: an object with a string name and
// arguments (or parameters, Llama's name) that are an object or a string
// holding one; ok is false for anything else.
func parseCall(text string) (c parsedCall, ok bool) {
	var obj struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	d := json.NewDecoder(strings.NewReader(text))
	if d.Decode(&obj) != nil || strings.TrimSpace(text[d.InputOffset():]) != "" || obj.Name == nil || *obj.Name == "" {
		return c, false
	}
	args := obj.Arguments
	if args == nil {
		args = obj.Parameters
	}
	if args == nil || isNull(args) {
		return parsedCall{name: *obj.Name, args: "{}"}, true
	}
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s) // arguments given as a string of JSON
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil || m == nil {
		return c, false
	}
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		return c, false
	}
	return parsedCall{name: *obj.Name, args: b.String()}, true
}

// A toolParser reads tool calls out of a model's text as it comes, piece
// by piece: feed takes each piece and finish the end; both return the
// content (text that is not a call) that can go out now and the calls
// completed. It never lets out text that may be the start of a call (part
// of a <tool_call> tag): that is held until it is known. A call whose JSON
// does not parse stays content, tags and all.
//
// Content's trailing white space is held until text follows it, and
// dropped at the end if there were calls: the new lines around and
// between calls are not the reply's content.
type toolParser struct {
	format toolFormat
	buf    strings.Builder
	inCall bool // Hermes: inside <tool_call>; Llama: the reply is a call
	plain  bool // Llama: the reply is not a call, all content
	space  strings.Builder
	calls  int // the calls returned so far
}

// feed takes a piece of text.
func (p *toolParser) feed(text string) (content string, calls []parsedCall) {
	if p.format == llamaFormat {
		return p.feedLlama(text)
	}
	var out strings.Builder
	p.buf.WriteString(text)
	for {
		s := p.buf.String()
		if p.inCall {
			i := strings.Index(s, toolCallClose)
			if i < 0 {
				break
			}
			calls = p.closeCall(s[:i], &out, calls, true)
			p.reset(s[i+len(toolCallClose):])
			continue
		}
		i := strings.Index(s, toolCallOpen)
		if i >= 0 {
			p.content(&out, s[:i])
			p.inCall = true
			p.reset(s[i+len(toolCallOpen):])
			continue
		}
		keep := partialSuffix(s, toolCallOpen)
		p.content(&out, s[:len(s)-keep])
		p.reset(s[len(s)-keep:])
		break
	}
	return out.String(), calls
}

// finish ends the text: what was held goes out, as content or as the
// last call (an unclosed <tool_call> whose JSON is whole is a call, as
// vLLM's Hermes parser reads one).
func (p *toolParser) finish() (content string, calls []parsedCall) {
	var out strings.Builder
	s := p.buf.String()
	p.buf.Reset()
	switch {
	case p.format == llamaFormat && p.inCall:
		calls = p.finishLlama(s, &out)
	case p.format == llamaFormat:
		p.content(&out, s)
	case p.inCall:
		calls = p.closeCall(s, &out, nil, false)
	default:
		p.content(&out, s)
	}
	if p.calls == 0 {
		out.WriteString(p.space.String())
	}
	p.space.Reset()
	return out.String(), calls
}

// closeCall parses a Hermes call's inner text, returning it with calls or
// writing it to out as content when it does not parse.
func (p *toolParser) closeCall(inner string, out *strings.Builder, calls []parsedCall, closed bool) []parsedCall {
	p.inCall = false
	if c, ok := parseCall(inner); ok {
		p.calls++
		p.space.Reset()
		return append(calls, c)
	}
	text := toolCallOpen + inner
	if closed {
		text += toolCallClose
	}
	p.content(out, text)
	return calls
}

// content writes text to out, holding back its trailing white space
// until more text follows.
func (p *toolParser) content(out *strings.Builder, text string) {
	core := strings.TrimRightFunc(text, unicode.IsSpace)
	if core != "" {
		out.WriteString(p.space.String())
		p.space.Reset()
		out.WriteString(core)
	}
	p.space.WriteString(text[len(core):])
}

// reset makes s the held text.
func (p *toolParser) reset(s string) {
	p.buf.Reset()
	p.buf.WriteString(s)
}

// feedLlama decides, at the reply's first text, whether it is a call (a
// JSON object, or <|python_tag|>): a call is held to the end, anything
// else is content.
func (p *toolParser) feedLlama(text string) (string, []parsedCall) {
	if p.plain {
		return text, nil
	}
	p.buf.WriteString(text)
	if p.inCall {
		return "", nil
	}
	s := strings.TrimLeftFunc(p.buf.String(), unicode.IsSpace)
	switch {
	case s == "" || strings.HasPrefix(pythonTag, s):
		return "", nil // not known yet
	case s[0] == '{' || strings.HasPrefix(s, pythonTag):
		p.inCall = true
		return "", nil
	}
	p.plain = true
	out := p.buf.String()
	p.buf.Reset()
	return out, nil
}

// finishLlama parses a Llama reply that looked like calls: one JSON
// object, or several separated by ";"; all of it is content when any
// does not parse.
func (p *toolParser) finishLlama(s string, out *strings.Builder) []parsedCall {
	body := strings.TrimSpace(s)
	body = strings.TrimSpace(strings.TrimPrefix(body, pythonTag))
	var calls []parsedCall
	for body != "" {
		d := json.NewDecoder(strings.NewReader(body))
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			out.WriteString(s)
			return nil
		}
		c, ok := parseCall(string(raw))
		if !ok {
			out.WriteString(s)
			return nil
		}
		calls = append(calls, c)
		rest := strings.TrimLeftFunc(body[d.InputOffset():], unicode.IsSpace)
		if rest != "" && rest[0] != ';' {
			out.WriteString(s)
			return nil
		}
		body = strings.TrimLeftFunc(strings.TrimPrefix(rest, ";"), unicode.IsSpace)
	}
	p.calls += len(calls)
	return calls
}

// partialSuffix returns the length of the longest suffix of s that is a
// proper prefix of tag: text that may be the start of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

// parseToolCalls reads a whole reply: its content and calls.
func parseToolCalls(format toolFormat, text string) (string, []parsedCall) {
	p := &toolParser{format: format}
	c1, calls := p.feed(text)
	c2, more := p.finish()
	return c1 + c2, append(calls, more...)
}
