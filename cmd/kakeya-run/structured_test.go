package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// --json-schema and --json constrain the output: the greedy answer under
// a schema is an object with its required fields; bad schema files fail
// before the model loads, naming the file and the keyword.
func TestRunJSONSchema(t *testing.T) {
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	tmp := t.TempDir()
	schema := filepath.Join(tmp, "person.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--json-schema", schema, "--temperature", "0"},
		{"--json", "--seed", "3"},
	} {
		var out bytes.Buffer
		all := append([]string{"--model", dir, "--chat", "--prompt", "A person as JSON", "--max-tokens", "100", "--quiet"}, args...)
		if err := run(context.Background(), all, nil, &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("%v: output %q: %v", args, out.String(), err)
		}
		if args[0] == "--json-schema" && (v["name"] == nil || v["age"] == nil) {
			t.Fatalf("%v: output %q lacks a required field", args, out.String())
		}
	}
	bad := filepath.Join(tmp, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"type":"array","uniqueItems":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--json-schema", bad}, `--json-schema ` + bad + `: json schema at #: keyword "uniqueItems": not supported`},
		{[]string{"--json-schema", filepath.Join(tmp, "none.json")}, "--json-schema: open"},
		{[]string{"--json-schema", schema, "--json"}, "--json and --json-schema exclude each other"},
	} {
		err := run(context.Background(), append([]string{"--model", filepath.Join(tmp, "no-model"), "--prompt", "x"}, tt.args...), nil, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}
