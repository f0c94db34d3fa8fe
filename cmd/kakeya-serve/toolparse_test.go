package main

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// The tool-call formats as the models' cards publish them: Qwen2.5 and
// Qwen3 (Hermes' <tool_call> tags) and Llama 3.1-3.3 (JSON, with
// "parameters"). Whole and fed piece by piece (every split into pieces
// of one, two and three bytes), the parser gives the same content and
// calls; malformed calls stay content; text before a call is content.
func TestParseToolCalls(t *testing.T) {
	weather := parsedCall{"get_weather", `{"city":"Paris","unit":"celsius"}`}
	tm := parsedCall{"get_time", `{"tz":"Europe/Paris"}`}
	for _, tt := range []struct {
		name    string
		format  toolFormat
		text    string
		content string
		calls   []parsedCall
	}{
		{"qwen one call", hermesFormat, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>", "", []parsedCall{weather}},
		{"qwen two calls", hermesFormat, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>", "", []parsedCall{weather, tm}},
		{"text before a call", hermesFormat, "Let me check.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>\n", "Let me check.", []parsedCall{tm}},
		{"arguments as a string", hermesFormat, `<tool_call>{"name": "get_time", "arguments": "{\"tz\": \"Europe/Paris\"}"}</tool_call>`, "", []parsedCall{tm}},
		{"no arguments", hermesFormat, `<tool_call>{"name": "now"}</tool_call>`, "", []parsedCall{{"now", "{}"}}},
		{"unclosed call at the end", hermesFormat, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n", "", []parsedCall{tm}},
		{"malformed JSON", hermesFormat, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", nil},
		{"malformed then good", hermesFormat, "<tool_call>{\"name\": 3}</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>", []parsedCall{tm}},
		{"arguments not an object", hermesFormat, `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`, `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`, nil},
		{"trailing JSON", hermesFormat, `<tool_call>{"name": "f"} {}</tool_call>`, `<tool_call>{"name": "f"} {}</tool_call>`, nil},
		{"unclosed malformed", hermesFormat, "<tool_call>{\"name\": \"f\", ", "<tool_call>{\"name\": \"f\", ", nil},
		{"plain text", hermesFormat, "Paris is the capital.  \n", "Paris is the capital.  \n", nil},
		{"a tag's start only", hermesFormat, "a <tool_ and <tool_call", "a <tool_ and <tool_call", nil},
		{"white space only", hermesFormat, "\n\n", "\n\n", nil},
		{"llama call", llamaFormat, `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}`, "", []parsedCall{weather}},
		{"llama python_tag", llamaFormat, `<|python_tag|>{"name": "get_time", "parameters": {"tz": "Europe/Paris"}}`, "", []parsedCall{tm}},
		{"llama two calls", llamaFormat, ` {"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}; {"name": "get_time", "parameters": {"tz": "Europe/Paris"}}`, "", []parsedCall{weather, tm}},
		{"llama text", llamaFormat, "It is sunny. {\"name\": \"x\"}", "It is sunny. {\"name\": \"x\"}", nil},
		{"llama malformed", llamaFormat, `{"name": "get_time", "parameters": {"tz": }`, `{"name": "get_time", "parameters": {"tz": }`, nil},
		{"llama JSON not a call", llamaFormat, `{"city": "Paris"}`, `{"city": "Paris"}`, nil},
		{"llama call then text", llamaFormat, `{"name": "f", "parameters": {}} and more`, `{"name": "f", "parameters": {}} and more`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			content, calls := parseToolCalls(tt.format, tt.text)
			if content != tt.content || !reflect.DeepEqual(calls, tt.calls) {
				t.Errorf("whole: content %q, calls %q; want %q, %q", content, calls, tt.content, tt.calls)
			}
			for size := 1; size <= 3; size++ {
				p := &toolParser{format: tt.format}
				var got strings.Builder
				var all []parsedCall
				for i := 0; i < len(tt.text); i += size {
					c, calls := p.feed(tt.text[i:min(len(tt.text), i+size)])
					got.WriteString(c)
					all = append(all, calls...)
					// What went out never ends in part of a tag.
					if tt.format == hermesFormat && partialSuffix(c, toolCallOpen) > 0 && len(tt.calls) > 0 {
						t.Errorf("pieces of %d: content %q ends in part of a tag", size, c)
					}
				}
				c, calls := p.finish()
				got.WriteString(c)
				all = append(all, calls...)
				if got.String() != tt.content || !reflect.DeepEqual(all, tt.calls) {
					t.Errorf("pieces of %d: content %q, calls %q; want %q, %q", size, got.String(), all, tt.content, tt.calls)
				}
			}
		})
	}
}

// Streamed content never holds a piece of a <tool_call> tag, even when
// the tag arrives a character at a time, and text around a tag's look-
// alike goes out once it is known not to be one.
func TestToolParserHoldsTags(t *testing.T) {
	p := &toolParser{format: hermesFormat}
	text := "Sure. <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
	var out []string
	for _, r := range text {
		c, _ := p.feed(string(r))
		if c != "" {
			out = append(out, c)
		}
	}
	joined := strings.Join(out, "")
	if joined != "Sure." {
		t.Errorf("content %q, want the text before the call", joined)
	}
	for _, c := range out {
		if strings.Contains(c, "<") || !utf8.ValidString(c) {
			t.Errorf("content piece %q holds part of a tag", c)
		}
	}
}
