package main

import (
	"strings"
	"testing"
)

// TestResponseFormat: response_format's and guided_json's forms, and the
// 400s of bad ones, each naming its field.
func TestResponseFormat(t *testing.T) {
	chat := func(extra string) string {
		return `{"messages": [{"role": "user", "content": "hi"}]` + extra + `}`
	}
	tests := []struct {
		name, body string
		object     bool
		schema     string
		param, msg string // of the 400
	}{
		{"text", chat(`, "response_format": {"type": "text"}`), false, "", "", ""},
		{"json_object", chat(`, "response_format": {"type": "json_object"}`), true, "", "", ""},
		{"json_schema", chat(`, "response_format": {"type": "json_schema", "json_schema": {"name": "w", "description": "d", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}`), false, `{"type": "object", "properties": {"a": {"type": "integer"}}}`, "", ""},
		{"json_schema without schema", chat(`, "response_format": {"type": "json_schema", "json_schema": {"name": "w"}}`), false, `true`, "", ""},
		{"guided_json", chat(`, "guided_json": {"type": "boolean"}`), false, `{"type": "boolean"}`, "", ""},
		{"guided_json text", chat(`, "guided_json": "{\"enum\": [1]}"`), false, `{"enum": [1]}`, "", ""},
		{"no type", chat(`, "response_format": {}`), false, "", "response_format.type", "needs a type"},
		{"unknown type", chat(`, "response_format": {"type": "yaml"}`), false, "", "response_format.type", `"yaml" is not one of`},
		{"unknown key", chat(`, "response_format": {"type": "json_object", "schema": {}}`), false, "", "response_format.schema", "not supported"},
		{"no json_schema", chat(`, "response_format": {"type": "json_schema"}`), false, "", "response_format.json_schema", "needs json_schema"},
		{"unknown json_schema key", chat(`, "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "format": 1}}`), false, "", "response_format.json_schema.format", "not supported"},
		{"strict not a boolean", chat(`, "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}`), false, "", "response_format.json_schema.strict", "must be a boolean"},
		{"refused keyword", chat(`, "response_format": {"type": "json_schema", "json_schema": {"schema": {"items": {"type": "string", "format": "date", "maxLength": 3}}}}`), false, "", "response_format.json_schema.schema", `json schema at #/items: keyword "maxLength": not supported`},
		{"bad ref", chat(`, "guided_json": {"$ref": "#/$defs/x"}`), false, "", "guided_json", `"#/$defs/x" does not resolve`},
		{"schema not JSON", chat(`, "guided_json": "{"`), false, "", "guided_json", "json schema"},
	}
	for _, tt := range tests {
		r, err := decodeRequest([]byte(tt.body), true, &params{strict: true})
		if tt.param != "" {
			if err == nil || err.status != 400 || err.param != tt.param || !strings.Contains(err.message, tt.msg) {
				t.Errorf("%s: got %+v, want a 400 on %s saying %q", tt.name, err, tt.param, tt.msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c := r.constraint; c.jsonObject != tt.object || string(c.schema) != tt.schema {
			t.Errorf("%s: constraint %v %s, want %v %s", tt.name, c.jsonObject, c.schema, tt.object, tt.schema)
		}
	}
}
