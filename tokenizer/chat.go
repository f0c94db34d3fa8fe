package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// ChatFormat is a chat prompt format recognised from tokenizer_config.json's
// chat_template. Templates are not executed; the format is reproduced in Go.
type ChatFormat int

// Chat formats.
const (
	ChatNone   ChatFormat = iota // no or unrecognised template
	ChatML                       // <|im_start|>role\n...<|im_end|> (Qwen2/2.5/3, SmolLM2)
	ChatLlama3                   // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
	ChatLlama2                   // <s>[INST] ... [/INST] (Llama-2, Mistral)
)

func (f ChatFormat) String() string {
	switch f {
	case ChatML:
		return "chatml"
	case ChatLlama3:
		return "llama3"
	case ChatLlama2:
		return "llama2"
	}
	return "none"
}

// Message is one chat turn; Role is "system", "user" or "assistant".
type Message struct {
	Role, Content string
}

type chatInfo struct {
	format   ChatFormat
	template string

	defaultSystem string // ChatML: system prompt the template inserts when none is given
	think         bool   // ChatML: Qwen3 <think> handling of assistant turns
	llamaDate     string // Llama-3.1+: "Today Date" of the system header; "" for Llama-3.0
	mistral       bool   // [INST] template without <<SYS>>: Mistral layout
}

var (
	// The system block a Qwen2/2.5 template emits when messages[0] is not system.
	chatMLDefaultSystem = regexp.MustCompile(`'<\|im_start\|>system\\n([^'{}]*?)<\|im_end\|>\\n'`)
	llamaDateDefault    = regexp.MustCompile(`date_string = "([^"]+)"`)
)

func (t *Tokenizer) buildChat(raw json.RawMessage, cfgPath string) error {
	if isNull(raw) {
		return nil
	}
	var tmpl string
	if json.Unmarshal(raw, &tmpl) != nil {
		var named []struct{ Name, Template string }
		if err := json.Unmarshal(raw, &named); err != nil {
			return fmt.Errorf("tokenizer: %s: chat_template is neither a string nor a list of named templates", cfgPath)
		}
		for _, n := range named {
			if n.Name == "default" {
				tmpl = n.Template
			}
		}
	}
	c := chatInfo{template: tmpl}
	switch {
	case strings.Contains(tmpl, "<|im_start|>"):
		c.format = ChatML
		if m := chatMLDefaultSystem.FindStringSubmatch(tmpl); m != nil {
			c.defaultSystem = m[1]
		}
		c.think = strings.Contains(tmpl, "</think>") && strings.Contains(tmpl, "reasoning_content")
	case strings.Contains(tmpl, "<|start_header_id|>"):
		c.format = ChatLlama3
		if strings.Contains(tmpl, "Cutting Knowledge Date") {
			c.llamaDate = "26 Jul 2024"
			if m := llamaDateDefault.FindStringSubmatch(tmpl); m != nil {
				c.llamaDate = m[1]
			}
		}
	case strings.Contains(tmpl, "[INST]"):
		c.format = ChatLlama2
		c.mistral = !strings.Contains(tmpl, "<<SYS>>")
	}
	t.chat = c
	return nil
}

// ChatTemplate returns the chat format detected in tokenizer_config.json.
func (t *Tokenizer) ChatTemplate() ChatFormat { return t.chat.format }

// ChatStopIDs returns the end-of-turn ids of the chat format (such as
// <|im_end|> or <|eot_id|>) together with the configured EOS ids.
func (t *Tokenizer) ChatStopIDs() []int {
	var names []string
	switch t.chat.format {
	case ChatML:
		names = []string{"<|im_end|>", "<|endoftext|>"}
	case ChatLlama3:
		names = []string{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}
	}
	ids := append([]int(nil), t.eos...)
	for _, n := range names {
		if id, ok := t.vocab[n]; ok && !containsInt(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ApplyChat renders msgs as the model's chat template does, ending with the
// assistant header when addGenerationPrompt is set. Supported: ChatML (with
// Qwen2.5's default system prompt and Qwen3's <think> layout of assistant
// turns, no tools), Llama-3 (3.1+ system header with the template's fallback
// date, no tools) and Llama-2/Mistral [INST].
func (t *Tokenizer) ApplyChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return "", fmt.Errorf("tokenizer: chat message %d: unsupported role %q", i, m.Role)
		}
	}
	switch t.chat.format {
	case ChatML:
		return t.chatML(msgs, addGenerationPrompt), nil
	case ChatLlama3:
		return t.chatLlama3(msgs, addGenerationPrompt), nil
	case ChatLlama2:
		return t.chatLlama2(msgs)
	}
	return "", fmt.Errorf("tokenizer: %s: no recognised chat_template in tokenizer_config.json", t.path)
}

func (t *Tokenizer) chatML(msgs []Message, gen bool) string {
	var b strings.Builder
	turn := func(role, content string) {
		b.WriteString("<|im_start|>" + role + "\n" + content + "<|im_end|>\n")
	}
	if !t.chat.think {
		// Qwen2/2.5 layout: every message as a turn, the default system
		// prompt first when the conversation has none.
		if t.chat.defaultSystem != "" && (len(msgs) == 0 || msgs[0].Role != "system") {
			turn("system", t.chat.defaultSystem)
		}
		for _, m := range msgs {
			turn(m.Role, m.Content)
		}
		if gen {
			b.WriteString("<|im_start|>assistant\n")
		}
		return b.String()
	}
	// Qwen3 layout: assistant turns after the last user query keep their
	// reasoning in a <think> block, earlier ones lose it.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i, m := range msgs {
		switch {
		case m.Role == "user" || m.Role == "system":
			turn(m.Role, m.Content)
		case m.Role == "assistant":
			content, reasoning := m.Content, ""
			if k := strings.LastIndex(m.Content, "</think>"); k >= 0 {
				content = strings.TrimLeft(m.Content[k+len("</think>"):], "\n")
				before := strings.TrimRight(m.Content[:strings.Index(m.Content, "</think>")], "\n")
				if j := strings.LastIndex(before, "<think>"); j >= 0 {
					before = before[j+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
			}
			b.WriteString("<|im_start|>assistant\n")
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				b.WriteString("<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString(content)
			}
			b.WriteString("<|im_end|>\n")
		}
	}
	if gen {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// jinjaTrim is Jinja's trim filter (Python str.strip()).
func jinjaTrim(s string) string { return strings.TrimSpace(s) }

func (t *Tokenizer) specialText(id int, ok bool) string {
	if !ok {
		return ""
	}
	return t.Token(id)
}

func (t *Tokenizer) chatLlama3(msgs []Message, gen bool) string {
	var b strings.Builder
	header := func(role string) {
		b.WriteString("<|start_header_id|>" + role + "<|end_header_id|>\n\n")
	}
	bos := t.specialText(t.BOS())
	if t.chat.llamaDate != "" {
		system := ""
		if len(msgs) > 0 && msgs[0].Role == "system" {
			system, msgs = jinjaTrim(msgs[0].Content), msgs[1:]
		}
		b.WriteString(bos)
		header("system")
		b.WriteString("Cutting Knowledge Date: December 2023\nToday Date: " + t.chat.llamaDate + "\n\n" + system + "<|eot_id|>")
	} else if len(msgs) > 0 {
		b.WriteString(bos)
	}
	for _, m := range msgs {
		header(m.Role)
		b.WriteString(jinjaTrim(m.Content) + "<|eot_id|>")
	}
	if gen {
		header("assistant")
	}
	return b.String()
}

func (t *Tokenizer) chatLlama2(msgs []Message) (string, error) {
	bos := t.specialText(t.BOS())
	eos := ""
	if len(t.eos) > 0 {
		eos = t.Token(t.eos[0])
	}
	system := ""
	hasSystem := len(msgs) > 0 && msgs[0].Role == "system"
	if hasSystem {
		if t.chat.mistral {
			return "", fmt.Errorf("tokenizer: %s: the Mistral [INST] template has no system role", t.path)
		}
		system, msgs = msgs[0].Content, msgs[1:]
	}
	var b strings.Builder
	if t.chat.mistral {
		b.WriteString(bos)
	}
	for i, m := range msgs {
		if (m.Role == "user") != (i%2 == 0) {
			return "", fmt.Errorf("tokenizer: chat roles must alternate user/assistant, message %d is %q", i, m.Role)
		}
		content := m.Content
		if i == 0 && hasSystem {
			content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
		}
		switch {
		case t.chat.mistral && m.Role == "user":
			b.WriteString("[INST] " + content + " [/INST]")
		case t.chat.mistral:
			b.WriteString(content + eos)
		case m.Role == "user":
			b.WriteString(bos + "[INST] " + strings.TrimSpace(content) + " [/INST]")
		default:
			b.WriteString(" " + strings.TrimSpace(content) + " " + eos)
		}
	}
	return b.String(), nil
}
