package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// testTools are tools whose parameters use the subset's keywords, $ref
// to their own $defs included.
var testTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)},
	{Name: "add", Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"$ref":"#/$defs/n"}},"required":["a","b"],"$defs":{"n":{"type":["number","null"]}}}`)},
	{Name: "ping", Parameters: nil},
	{Name: "tag", Parameters: []byte(`{"type":"object","properties":{"tags":{"type":"array","items":{"$ref":"#/$defs/t"},"minItems":1}},"required":["tags"],"$defs":{"t":{"type":"string"}}}`)},
}

// TestToolCall generates calls under CompileToolCall's grammar (random
// tokens among those each mask allows) and checks each against the
// tools with an independent validator: the name is one of the tools',
// the arguments valid by that tool's schema.
func TestToolCall(t *testing.T) {
	toks := testVocab()
	for _, w := range []string{`get_weather`, `add`, `ping`, `"tag"`, `arguments`, `"city"`} {
		toks = append(toks[:len(toks)-2], []byte(w), nil, nil)
	}
	eos := len(toks) - 2
	v := NewVocab(toks)
	for _, key := range []string{"arguments", "parameters"} {
		g, err := CompileToolCall(key, testTools)
		if err != nil {
			t.Fatal(err)
		}
		valid := map[string]*jsonschema.Schema{}
		for _, tool := range testTools {
			p := tool.Parameters
			if p == nil {
				p = []byte(`{"type":"object"}`)
			}
			valid[tool.Name] = validator(t, p)
		}
		m := NewMasks(g, v)
		seen := map[string]int{}
		for seed := range 200 {
			out, ok := generate(t, m, toks, eos, rand.New(rand.NewPCG(uint64(seed), 9)), 400)
			if !ok {
				continue
			}
			var call map[string]json.RawMessage
			if err := json.Unmarshal(out, &call); err != nil {
				t.Fatalf("call %q does not parse: %v", out, err)
			}
			var name string
			if err := json.Unmarshal(call["name"], &name); err != nil || valid[name] == nil || len(call) != 2 {
				t.Fatalf("call %s: want {\"name\": a tool's name, %q: ...}", out, key)
			}
			inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(call[key]))
			if err := valid[name].Validate(inst); err != nil {
				t.Fatalf("call %s: the arguments do not validate against %s's parameters: %v", out, name, err)
			}
			seen[name]++
		}
		if len(seen) != len(testTools) {
			t.Errorf("%s: calls of %v, want each of the %d tools", key, seen, len(testTools))
		}
	}
	// Texts the grammar takes and refuses.
	g, err := CompileToolCall("arguments", testTools)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		text  string
		took  int
		whole bool
	}{
		{`{"name": "add", "arguments": {"a": 1, "b": null}}`, -1, true},
		{`{"name":"ping","arguments":{"x":[1]}}`, -1, true},
		{`{"name":"add","arguments":{"city":"x"}}`, len(`{"name":"add","arguments":{"`), false},
		{`{"name":"nope"`, len(`{"name":"`), false},
		{`{"arguments":{}}`, len(`{"`), false},
		{`{"name":"get_weather","arguments":{"city":"x"},"x":1}`, len(`{"name":"get_weather","arguments":{"city":"x"}`), false},
	} {
		took, whole := feed(g, tt.text)
		want := tt.took
		if want < 0 {
			want = len(tt.text)
		}
		if took != want || whole != tt.whole {
			t.Errorf("%q: took %d bytes (whole %v), want %d (whole %v)", tt.text, took, whole, want, tt.whole)
		}
	}
}

// TestToolSchemaErrors: parameters the compiler refuses, naming the tool
// and the keyword.
func TestToolSchemaErrors(t *testing.T) {
	tests := []struct {
		params  string
		keyword string
	}{
		{`{"type":"object","properties":{"q":{"type":"string","pattern":"^a"}}}`, "pattern"},
		{`{"type":"string"}`, "type"},
		{`{"anyOf":[{"type":"object"},{"type":"null"}]}`, "type"},
		{`{"type":"object","minProperties":1}`, "minProperties"},
	}
	for _, tt := range tests {
		for _, compile := range []func() error{
			func() error { _, err := CompileArguments([]byte(tt.params)); return err },
			func() error {
				_, err := CompileToolCall("arguments", []Tool{testTools[0], {Name: "bad", Parameters: []byte(tt.params)}})
				if err != nil && !strings.Contains(err.Error(), `tool "bad"`) {
					return fmt.Errorf("%v does not name the tool", err)
				}
				return err
			},
		} {
			err := compile()
			var se *SchemaError
			if !errors.As(err, &se) || se.Keyword != tt.keyword {
				t.Errorf("%s: error %v, want a *SchemaError on %q", tt.params, err, tt.keyword)
			}
		}
	}
	for _, ok := range []string{``, `null`, `{}`, `true`, `{"type":"object"}`} {
		if _, err := CompileArguments([]byte(ok)); err != nil {
			t.Errorf("CompileArguments(%q): %v", ok, err)
		}
	}
	if _, err := CompileToolCall("arguments", []Tool{{Name: "a"}, {Name: "a"}}); err == nil {
		t.Error("two tools of one name compiled")
	}
}
