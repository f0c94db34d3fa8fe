package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/kakeya-ai/kakeya/tokenizer/chattmpl"
)

// Message is one chat turn: a role ("system", "user", "assistant",
// "tool", or whatever else the model's template accepts) and its text.
// An assistant turn may carry the tool calls it made, and a tool turn the
// id of the call it answers, as the OpenAI API and transformers' chat
// templates have them.
type Message struct {
	Role, Content string
	// ToolCalls are the calls an assistant turn made (none elsewhere).
	ToolCalls []ToolCall
	// ToolCallID, of a tool turn, is the id of the call it answers.
	ToolCallID string
	// Name is the message's name field: the function's name in a tool
	// turn, which some templates read; "" for none.
	Name string
}

// A ToolCall is a function call an assistant turn made.
type ToolCall struct {
	ID   string // the call's id, "" for none
	Name string // the function's name
	// Arguments is the call's arguments, a JSON object as the OpenAI
	// API sends it (a string holding JSON). Chat templates get it
	// decoded (as vLLM passes it), for they write it with tojson; text
	// that is not a JSON object goes to them as the string.
	Arguments string
}

// chatInfo holds the model's chat templates: tokenizer_config.json's
// chat_template, a string or a list of named templates ("default",
// "tool_use", ...), or a template set with SetChatTemplate.
type chatInfo struct {
	template string             // the default template's source, "" for none
	tmpl     *chattmpl.Template // the default template, parsed
	toolUse  *chattmpl.Template // the "tool_use" template of a named list
	toolSrc  string             // its source
	err      error              // why a template did not parse, reported when chat is used
	special  map[string]string  // bos_token, eos_token, unk_token, pad_token: the ones set
}

// buildChat reads tokenizer_config.json's chat_template. A template that
// does not parse leaves the tokenizer usable for plain text: the error
// comes back from ApplyChat and RenderChat.
func (t *Tokenizer) buildChat(raw json.RawMessage, cfgPath string, special map[string]string) error {
	t.chat = chatInfo{special: special}
	if isNull(raw) {
		return nil
	}
	var source string
	if json.Unmarshal(raw, &source) == nil {
		t.chat.template = source
		t.chat.tmpl, t.chat.err = chattmpl.Parse(cfgPath+" chat_template", source)
		return nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return fmt.Errorf("tokenizer: %s: chat_template is neither a string nor a list of {\"name\", \"template\"} objects", cfgPath)
	}
	for i, n := range named {
		var err error
		switch n.Name {
		case "default":
			t.chat.template = n.Template
			t.chat.tmpl, err = chattmpl.Parse(fmt.Sprintf("%s chat_template[%d] (%q)", cfgPath, i, n.Name), n.Template)
		case "tool_use":
			t.chat.toolSrc = n.Template
			t.chat.toolUse, err = chattmpl.Parse(fmt.Sprintf("%s chat_template[%d] (%q)", cfgPath, i, n.Name), n.Template)
		}
		if err != nil && t.chat.err == nil {
			t.chat.err = err
		}
	}
	if t.chat.tmpl == nil && t.chat.toolUse == nil && t.chat.err == nil {
		t.chat.err = fmt.Errorf("%s: chat_template lists no template named \"default\" or \"tool_use\"", cfgPath)
	}
	return nil
}

// SetChatTemplate replaces the chat template with source (such as a GGUF's
// tokenizer.chat_template); name says where it came from, for errors. An
// empty source removes the template.
func (t *Tokenizer) SetChatTemplate(name, source string) error {
	t.chat = chatInfo{special: t.chat.special}
	if source == "" {
		return nil
	}
	tmpl, err := chattmpl.Parse(name, source)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	t.chat.template, t.chat.tmpl = source, tmpl
	return nil
}

// ChatTemplate returns the text of the model's default chat template
// (tokenizer_config.json's chat_template, a GGUF's tokenizer.chat_template,
// or what SetChatTemplate set), "" when it has none.
func (t *Tokenizer) ChatTemplate() string { return t.chat.template }

// ToolTemplate returns the text of the chat template that renders a
// conversation with tools: the "tool_use" template of a named list, else
// the default one; "" when there is none.
func (t *Tokenizer) ToolTemplate() string {
	if t.chat.toolUse != nil {
		return t.chat.toolSrc
	}
	return t.chat.template
}

// HasChatTemplate reports whether the model has a chat template (which may
// still fail to parse: ApplyChat says why).
func (t *Tokenizer) HasChatTemplate() bool {
	return t.chat.tmpl != nil || t.chat.toolUse != nil || t.chat.err != nil
}

// endOfTurn are the tokens that end a turn in the chat formats of the
// families this engine runs (ChatML, Llama 3, Gemma, Phi, Mistral),
// besides the configured EOS.
var endOfTurn = []string{"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>"}

// ChatStopIDs returns the ids that end generation in chat mode: the
// configured EOS ids, then, when the model has a chat template, the
// end-of-turn tokens its vocabulary holds as special tokens.
func (t *Tokenizer) ChatStopIDs() []int {
	ids := slices.Clone(t.eos)
	if !t.HasChatTemplate() {
		return ids
	}
	for _, n := range endOfTurn {
		if id, ok := t.vocab[n]; ok && t.IsSpecial(id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// ApplyChat renders msgs with the model's chat template, ending with the
// opening of an assistant turn when addGenerationPrompt is set: the text
// transformers' apply_chat_template gives, special tokens spelled out.
func (t *Tokenizer) ApplyChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.ApplyChatKwargs(msgs, addGenerationPrompt, nil)
}

// ApplyChatKwargs is ApplyChat with extra template variables, as
// apply_chat_template's keyword arguments (such as enable_thinking: false
// for Qwen3, or date_string for Llama 3.x): each is passed through JSON.
func (t *Tokenizer) ApplyChatKwargs(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	in, err := ChatInput(msgs, addGenerationPrompt, kwargs)
	if err != nil {
		return "", err
	}
	return t.RenderChat(in)
}

// ChatInput builds the template input of a conversation of plain
// messages, with extra template variables (nil for none), for RenderChat
// and RenderChatSegments.
func ChatInput(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) (chattmpl.Input, error) {
	in := chattmpl.Input{AddGenerationPrompt: addGenerationPrompt}
	if len(kwargs) > 0 {
		in.Vars = make(map[string]json.RawMessage, len(kwargs))
		for k, v := range kwargs {
			raw, err := json.Marshal(v)
			if err != nil {
				return in, fmt.Errorf("tokenizer: chat template variable %q: %w", k, err)
			}
			in.Vars[k] = raw
		}
	}
	type function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type toolCall struct {
		ID       string   `json:"id,omitempty"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	type message struct {
		Role       string     `json:"role"`
		Content    string     `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
		Name       string     `json:"name,omitempty"`
	}
	conv := make([]message, len(msgs))
	for i, m := range msgs {
		conv[i] = message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, c := range m.ToolCalls {
			args := json.RawMessage(c.Arguments)
			if !isJSONObject(args) {
				args, _ = json.Marshal(c.Arguments) // a string is always marshalled
			}
			conv[i].ToolCalls = append(conv[i].ToolCalls, toolCall{c.ID, "function", function{c.Name, args}})
		}
	}
	raw, err := json.Marshal(conv)
	if err != nil {
		return in, fmt.Errorf("tokenizer: %w", err)
	}
	in.Messages = raw
	return in, nil
}

// isJSONObject reports whether raw is one JSON object.
func isJSONObject(raw json.RawMessage) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal(raw, &obj) == nil && obj != nil
}

// RenderChat renders a conversation given as chattmpl.Input (messages with
// tool calls or content parts, tools, extra variables such as
// enable_thinking) with the model's chat template; with tools, a named
// "tool_use" template is preferred, as transformers does. The special
// tokens come from tokenizer_config.json unless in.Special is set.
func (t *Tokenizer) RenderChat(in chattmpl.Input) (string, error) {
	tmpl, in, err := t.chatTemplate(in)
	if err != nil {
		return "", err
	}
	out, err := tmpl.Render(in)
	if err != nil {
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	return out, nil
}

// RenderChatSegments renders as RenderChat does, split into the template's
// markup and the messages' text (see chattmpl.Template.RenderSegments):
// the input of a tokenization that parses special tokens in the markup
// only. exact is false when the split could not be made, and the one
// segment is then all markup.
func (t *Tokenizer) RenderChatSegments(in chattmpl.Input) (segs []chattmpl.Segment, exact bool, err error) {
	tmpl, in, err := t.chatTemplate(in)
	if err != nil {
		return nil, false, err
	}
	segs, exact, err = tmpl.RenderSegments(in)
	if err != nil {
		return nil, false, fmt.Errorf("tokenizer: %w", err)
	}
	return segs, exact, nil
}

// chatTemplate picks the template for in and fills in its special tokens.
func (t *Tokenizer) chatTemplate(in chattmpl.Input) (*chattmpl.Template, chattmpl.Input, error) {
	tmpl := t.chat.tmpl
	if in.Tools != nil && t.chat.toolUse != nil {
		tmpl = t.chat.toolUse
	}
	switch {
	case tmpl == nil && t.chat.err != nil:
		return nil, in, fmt.Errorf("tokenizer: %w", t.chat.err)
	case tmpl == nil && t.chat.toolUse != nil:
		return nil, in, fmt.Errorf("tokenizer: %s: chat_template has a \"tool_use\" template but no \"default\" one, and the conversation has no tools", t.path)
	case tmpl == nil:
		return nil, in, fmt.Errorf("tokenizer: %s: the model has no chat template (no chat_template in tokenizer_config.json): give a plain prompt", t.path)
	}
	if in.Special == nil {
		in.Special = t.chat.special
	}
	return tmpl, in, nil
}
