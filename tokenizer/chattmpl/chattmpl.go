// Package chattmpl renders a model's chat template: the Jinja template of
// tokenizer_config.json's chat_template (or a GGUF's
// tokenizer.chat_template), run as Hugging Face transformers'
// apply_chat_template runs it, so that a conversation becomes the text the
// model was trained on, byte for byte.
//
// The Jinja engine is github.com/ardanlabs/jinja (pinned in go.mod). This
// package sets up the environment transformers gives a template: the
// variables messages, tools (none when there are no tools, as transformers
// passes it), documents (none), add_generation_prompt, the special tokens
// (bos_token, eos_token, ...) and the caller's extra variables
// (enable_thinking, date_string, ...); the globals raise_exception and
// strftime_now (on a clock the caller may fix); and tojson as Python's
// json.dumps with transformers' defaults (non-ASCII kept, keys in their
// order, indent, separators, sort_keys and ensure_ascii honoured).
// Whitespace follows trim_blocks and lstrip_blocks, loop controls
// (break, continue) and namespace() are the engine's. See docs/chat.md for
// what is supported and what is not.
package chattmpl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// Template is a parsed chat template, safe for concurrent use.
type Template struct {
	name string
	tmpl *jinja.Template
}

// Parse parses a chat template. name says where the template came from
// (a file and field) and prefixes the errors of Parse and Render.
func Parse(name, source string) (*Template, error) {
	// Jinja's lexer (newline_sequence "\n", keep_trailing_newline off):
	// line ends become "\n" and one final line end is dropped.
	source = strings.ReplaceAll(strings.ReplaceAll(source, "\r\n", "\n"), "\r", "\n")
	source = strings.TrimSuffix(source, "\n")
	source, err := rewriteToJSON(source)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	t, err := compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	return &Template{name: name, tmpl: t}, nil
}

// compile runs the engine's parser, turning a panic in it into an error:
// a template is input, and bad input must not crash the caller.
func compile(source string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("the Jinja parser failed: %v", r)
		}
	}()
	return jinja.Compile(source)
}

// Name returns the name given to Parse.
func (t *Template) Name() string { return t.name }

// Input holds the variables a template renders with: those of
// transformers' apply_chat_template.
type Input struct {
	// Messages is the conversation: a JSON array of message objects with
	// a role and a content (a string, or a list of parts such as
	// {"type": "text", "text": ...}) and whatever else the template reads
	// (tool_calls, tool_call_id, name, reasoning_content). Object keys
	// keep their order, as Python's dicts do, which tojson shows.
	Messages json.RawMessage
	// Tools is a JSON array of tool definitions ({"type": "function",
	// "function": {...}}), or nil for none: the variable tools is then
	// none, defined, as transformers passes it.
	Tools json.RawMessage
	// AddGenerationPrompt asks the template to end with the opening of an
	// assistant turn.
	AddGenerationPrompt bool
	// Special maps the special-token variables (bos_token, eos_token,
	// unk_token, pad_token) to their text; a token not set is left out,
	// and so undefined in the template, as in transformers.
	Special map[string]string
	// Vars are further variables, as apply_chat_template's extra keyword
	// arguments (enable_thinking, date_string, tools_in_user_message,
	// builtin_tools, ...): each a JSON value. They may not replace
	// messages, tools, documents or add_generation_prompt.
	Vars map[string]json.RawMessage
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
}

// reserved are the variables Input sets itself.
var reserved = []string{"messages", "tools", "documents", "add_generation_prompt"}

// Error is an error the template raised itself, through
// raise_exception: the conversation does not fit the model's format (a
// system message where the model has none, roles that do not alternate).
type Error struct {
	Template string // the template's name
	Message  string // raise_exception's message
}

func (e *Error) Error() string {
	return fmt.Sprintf("chat template %s: %s", e.Template, e.Message)
}

// Render renders the template for in.
func (t *Template) Render(in Input) (string, error) {
	data, err := t.variables(in)
	if err != nil {
		return "", err
	}
	var raised *Error
	data["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception called"
		if len(args) > 0 {
			msg = args[0].String()
			if args[0].IsString() {
				msg = args[0].AsString()
			}
		}
		raised = &Error{Template: t.name, Message: msg}
		return jinja.Undefined(), raised
	})
	out, err := t.execute(data)
	switch {
	case raised != nil:
		return "", raised
	case err != nil:
		return "", fmt.Errorf("chat template %s: %w", t.name, err)
	}
	return out, nil
}

// execute renders, turning a panic in the engine into an error.
func (t *Template) execute(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("the Jinja engine failed: %v", r)
		}
	}()
	return t.tmpl.RenderValues(data)
}

// variables builds the template's variables from in.
func (t *Template) variables(in Input) (map[string]jinja.Value, error) {
	data := make(map[string]jinja.Value, len(in.Special)+len(in.Vars)+8)
	for k, v := range in.Special {
		data[k] = jinja.NewString(v)
	}
	for k, raw := range in.Vars {
		for _, r := range reserved {
			if k == r {
				return nil, fmt.Errorf("chat template %s: variable %q is set from the request itself, not as an extra variable", t.name, k)
			}
		}
		v, err := FromJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("chat template %s: variable %q: %w", t.name, k, err)
		}
		data[k] = v
	}
	msgs, err := FromJSON(in.Messages)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: messages: %w", t.name, err)
	}
	if !msgs.IsList() {
		return nil, fmt.Errorf("chat template %s: messages must be a JSON array", t.name)
	}
	data["messages"] = msgs
	data["tools"] = jinja.None()
	if in.Tools != nil {
		tools, err := FromJSON(in.Tools)
		if err != nil {
			return nil, fmt.Errorf("chat template %s: tools: %w", t.name, err)
		}
		if !tools.IsList() && !tools.IsNone() {
			return nil, fmt.Errorf("chat template %s: tools must be a JSON array", t.name)
		}
		data["tools"] = tools
	}
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	now := in.Now
	if now == nil {
		now = time.Now
	}
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		s, err := strftime(now(), args[0].AsString())
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	})
	// Parse made every tojson filter a call of this function.
	data[toJSONFunc] = jinja.NewCallable("tojson", filterToJSON)
	return data, nil
}

// FromJSON decodes a JSON document into a template value, keeping the
// order of object keys; integers stay integers.
func FromJSON(raw json.RawMessage) (jinja.Value, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := decodeValue(d, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := d.Token(); err == nil {
		return jinja.Undefined(), errors.New("malformed JSON: more than one value")
	}
	return v, nil
}

// maxDepth bounds the nesting of decoded JSON, as encoding/json does.
const maxDepth = 10000

func decodeValue(d *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d", maxDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("malformed JSON: %w", err)
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			out := jinja.NewDict()
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return jinja.Undefined(), fmt.Errorf("malformed JSON: %w", err)
				}
				val, err := decodeValue(d, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				out.AsDict().Set(k.(string), val)
			}
			if _, err := d.Token(); err != nil {
				return jinja.Undefined(), fmt.Errorf("malformed JSON: %w", err)
			}
			return out, nil
		case '[':
			items := []jinja.Value{}
			for d.More() {
				val, err := decodeValue(d, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, val)
			}
			if _, err := d.Token(); err != nil {
				return jinja.Undefined(), fmt.Errorf("malformed JSON: %w", err)
			}
			return jinja.NewList(items), nil
		}
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(v), nil
	case string:
		return jinja.NewString(v), nil
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := v.Float64()
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("number %s: %w", v, err)
		}
		return jinja.NewFloat(f), nil
	}
	return jinja.Undefined(), fmt.Errorf("malformed JSON: unexpected %v", tok)
}
