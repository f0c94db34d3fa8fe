package tokenizer

import (
	"encoding/json"
	"testing"
	"time"
)

// Messages with tool calls and tool results, given as Message values (the
// arguments a JSON string, as the OpenAI API sends them), render as the
// golden renderings of the same conversation in transformers' shape (the
// arguments an object) do, through each published template that reads
// them: Qwen2.5, Qwen3, Llama 3.1 and 3.2, Hermes 3.
func TestChatInputToolCalls(t *testing.T) {
	cases := map[string]goldenChat{}
	for _, c := range loadGoldenChat(t) {
		cases[c.Name] = c
	}
	type toolCall struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	type message struct {
		Role       string     `json:"role"`
		Content    string     `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls"`
		ToolCallID string     `json:"tool_call_id"`
		Name       string     `json:"name"`
	}
	for _, name := range []string{"qwen2.5/tool-call-and-result", "qwen3/tool-call-and-result", "llama3.1/tool-call-and-result", "llama3.2/tool-call-and-result", "hermes3-tool_use/tool-call-and-result"} {
		c, ok := cases[name]
		if !ok {
			t.Fatalf("no golden case %q", name)
		}
		var golden []message
		if err := json.Unmarshal(c.Messages, &golden); err != nil {
			t.Fatal(err)
		}
		msgs := make([]Message, len(golden))
		calls := 0
		for i, g := range golden {
			msgs[i] = Message{Role: g.Role, Content: g.Content, ToolCallID: g.ToolCallID, Name: g.Name}
			for _, tc := range g.ToolCalls {
				msgs[i].ToolCalls = append(msgs[i].ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)})
				calls++
			}
		}
		if calls == 0 {
			t.Fatalf("%s: the golden conversation has no tool call", name)
		}
		in, err := ChatInput(msgs, c.Gen, c.Kwargs)
		if err != nil {
			t.Fatal(err)
		}
		in.Tools = c.Tools
		tmpl := readChatTemplate(t, c.Template)
		if name == "hermes3-tool_use/tool-call-and-result" {
			tmpl = "" // the tool_use template of a list, below
		}
		var tk *Tokenizer
		if tmpl != "" {
			tk = chatTokenizer(t, c.Special, tmpl)
		} else {
			tk = chatTokenizer(t, c.Special, []map[string]string{{"name": "tool_use", "template": readChatTemplate(t, c.Template)}})
		}
		now, err := time.Parse("2006-01-02T15:04:05", c.Now)
		if err != nil {
			t.Fatal(err)
		}
		in.Now = func() time.Time { return now }
		got, err := tk.RenderChat(in)
		if err != nil || got != *c.Want {
			t.Errorf("%s:\n got %q, %v\nwant %q", name, got, err, *c.Want)
		}
	}
}
