package kakeya

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/kakeya-ai/kakeya/grammar"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// structuredSchemas are the schemas of the structured-output tests: the
// shapes apps send (an object with required and optional fields, enums,
// nested arrays, a nullable field, recursion through $defs).
var structuredSchemas = []string{
	`{"type":"object","properties":{"city":{"enum":["Paris","Tokyo","Lima"]},"celsius":{"type":"integer"},"rain":{"type":"boolean"}},"required":["city","celsius","rain"],"additionalProperties":false}`,
	`{"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3}`,
	`{"type":"object","properties":{"ok":{"type":"boolean"},"note":{"anyOf":[{"type":"null"},{"enum":["x","y"]}]},"n":{"type":"array","items":{"enum":[1,2,3]},"maxItems":4}},"required":["ok","n"]}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	`{"enum":["yes","no",null,3.5]}`,
}

func schemaValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkStructured runs the schemas over seeds on e: every generation that
// ends by its own (not at MaxTokens) must be a document that parses and
// validates against its schema (santhosh-tekuri/jsonschema, an
// independent validator); it returns how many did.
func checkStructured(t *testing.T, e *Engine, prompt string, seeds int, chat bool) int {
	t.Helper()
	complete := 0
	for si, schema := range structuredSchemas {
		val := schemaValidator(t, schema)
		for seed := range seeds {
			opt := GenerateOptions{MaxTokens: 160, Chat: chat, JSONSchema: []byte(schema),
				Sampling: SamplingOptions{Temperature: 1, Seed: uint64(seed)}}
			if seed == 0 {
				opt.Sampling = SamplingOptions{} // greedy too
			}
			res, err := e.Generate(context.Background(), prompt, opt, nil)
			if err != nil {
				t.Fatalf("schema %d seed %d: %v", si, seed, err)
			}
			if res.StopReason == StopLength {
				continue
			}
			if res.StopReason != StopEOS {
				t.Fatalf("schema %d seed %d: stop %q after %q", si, seed, res.StopReason, res.Text)
			}
			complete++
			var v any
			if err := json.Unmarshal([]byte(res.Text), &v); err != nil {
				t.Fatalf("schema %d seed %d: output %q does not parse: %v", si, seed, res.Text, err)
			}
			inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(res.Text))
			if err := val.Validate(inst); err != nil {
				t.Fatalf("schema %d seed %d: output %s does not validate: %v", si, seed, res.Text, err)
			}
		}
	}
	return complete
}

// TestStructuredSeededModel: a random-weights model wants garbage, and
// the mask must still make every finished output a valid document.
func TestStructuredSeededModel(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	n := checkStructured(t, e, "Reply in JSON:", 6, false)
	if n < 10 {
		t.Errorf("only %d of %d generations finished", n, 6*len(structuredSchemas))
	}
}

// TestStructuredRefQwen2: the same on ref-qwen2-6m, a real BPE
// vocabulary (multi-byte tokens such as `":"` and `"}`) in chat mode,
// where <|im_end|> may end the document.
func TestStructuredRefQwen2(t *testing.T) {
	e := loadEngine(t, shareddata.File(t, "models", "ref-qwen2-6m"), Options{Threads: 1})
	n := checkStructured(t, e, "Give the weather as JSON.", 6, true)
	if n < 10 {
		t.Errorf("only %d of %d generations finished", n, 6*len(structuredSchemas))
	}
}

// TestStructuredOptions: json_object mode, an IgnoreEOS generation that
// still stops where the object closes, and a schema the grammar refuses
// (an error before the model runs, naming the keyword and path).
func TestStructuredOptions(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	for seed := range 4 {
		res, err := e.Generate(context.Background(), "{", GenerateOptions{MaxTokens: 200, JSON: true, IgnoreEOS: true,
			Sampling: SamplingOptions{Temperature: 1, Seed: uint64(seed)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Text, "{") {
			t.Fatalf("json_object output %q is no object", res.Text)
		}
		if res.StopReason == StopLength {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(res.Text), &v); err != nil || res.StopReason != StopEOS {
			t.Fatalf("json_object output %q (stop %q): %v", res.Text, res.StopReason, err)
		}
	}
	_, err := e.Generate(context.Background(), "x", GenerateOptions{JSONSchema: []byte(`{"properties":{"a":{"type":"string","pattern":"^x"}}}`)}, nil)
	var se *grammar.SchemaError
	if !errors.As(err, &se) || se.Keyword != "pattern" || se.Path != "#/properties/a" {
		t.Fatalf("a pattern: error %v, want a SchemaError for pattern at #/properties/a", err)
	}
	if err := CheckJSONSchema([]byte(`{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
}

// TestStructuredEndsAtClose: a document that closes ends the generation
// with that token: no step runs for an end-of-sequence token the grammar
// would force, so that the steps equal the tokens (the first comes from
// the prompt's step), the tokens are the document's, and the stop is
// StopEOS (finish_reason "stop").
func TestStructuredEndsAtClose(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	for _, schema := range []string{structuredSchemas[0], structuredSchemas[4]} {
		for seed := range 4 {
			var toks []string
			opt := GenerateOptions{MaxTokens: 120, JSONSchema: []byte(schema),
				Sampling: SamplingOptions{Temperature: 1, Seed: uint64(seed)},
				OnToken:  func(ti TokenInfo) error { toks = append(toks, ti.Text); return nil }}
			before := e.Stats().Steps
			res, err := e.Generate(context.Background(), "JSON:", opt, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StopReason == StopLength {
				continue
			}
			steps := e.Stats().Steps - before
			var v any
			if res.StopReason != StopEOS || json.Unmarshal([]byte(res.Text), &v) != nil {
				t.Fatalf("schema %s seed %d: %q, stop %q", schema, seed, res.Text, res.StopReason)
			}
			if got := strings.Join(toks, ""); got != res.Text || len(toks) != res.GeneratedTokens {
				t.Fatalf("seed %d: %d tokens %q, result %d tokens %q", seed, len(toks), got, res.GeneratedTokens, res.Text)
			}
			if steps != int64(res.GeneratedTokens) {
				t.Errorf("schema %s seed %d: %d steps for %d tokens (%q): want one step a token", schema, seed, steps, res.GeneratedTokens, res.Text)
			}
		}
	}
}

// TestToolCallSeededModel: under GenerateOptions.ToolCall a random-weights
// model's finished calls name one of the tools and carry arguments that
// validate against that tool's schema (an independent validator), at
// several seeds; with ArgumentsOnly the output is the arguments alone.
// Options that contradict it are errors before the model runs.
func TestToolCallSeededModel(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	tools := []ToolSchema{
		{Name: "weather", Parameters: []byte(structuredSchemas[0])},
		{Name: "tree", Parameters: []byte(structuredSchemas[3])},
		{Name: "ping"},
	}
	valid := map[string]*jsonschema.Schema{"weather": schemaValidator(t, structuredSchemas[0]), "tree": schemaValidator(t, structuredSchemas[3]), "ping": schemaValidator(t, `{"type":"object"}`)}
	finished := 0
	for _, only := range []bool{false, true} {
		for seed := range 6 {
			tc := &ToolCallGrammar{Tools: tools, ArgumentsKey: "arguments"}
			if only {
				tc = &ToolCallGrammar{Tools: tools[1:2], ArgumentsOnly: true}
			}
			res, err := e.Generate(context.Background(), "Call a tool:", GenerateOptions{MaxTokens: 160, ToolCall: tc,
				Sampling: SamplingOptions{Temperature: 1, Seed: uint64(seed)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StopReason == StopLength {
				continue
			}
			finished++
			name, args := "tree", json.RawMessage(res.Text)
			if !only {
				var call map[string]json.RawMessage
				if err := json.Unmarshal([]byte(res.Text), &call); err != nil || len(call) != 2 || json.Unmarshal(call["name"], &name) != nil {
					t.Fatalf("seed %d: call %q", seed, res.Text)
				}
				args = call["arguments"]
			}
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(args)))
			if err != nil || valid[name] == nil {
				t.Fatalf("seed %d: call %q of %q: %v", seed, res.Text, name, err)
			}
			if err := valid[name].Validate(inst); err != nil {
				t.Fatalf("seed %d: %s's arguments %s do not validate: %v", seed, name, args, err)
			}
		}
	}
	// The random weights favour one name (grammar's TestToolCall and
	// kakeya-serve's client test see several).
	if finished < 6 {
		t.Errorf("only %d of 12 calls finished", finished)
	}
	for _, opt := range []GenerateOptions{
		{ToolCall: &ToolCallGrammar{Tools: tools, ArgumentsKey: "arguments"}, JSON: true},
		{ToolCall: &ToolCallGrammar{Tools: tools, ArgumentsOnly: true}},
		{ToolCall: &ToolCallGrammar{Tools: tools}},
		{ToolCall: &ToolCallGrammar{ArgumentsKey: "arguments"}},
		{ToolCall: &ToolCallGrammar{Tools: []ToolSchema{{Name: "s", Parameters: []byte(`{"type":"string"}`)}}, ArgumentsOnly: true}},
	} {
		if _, err := e.Generate(context.Background(), "x", opt, nil); err == nil {
			t.Errorf("%+v: no error", opt.ToolCall)
		}
	}
	if err := CheckToolParameters([]byte(`{"type":"object","properties":{"q":{"type":"string","minLength":2}}}`)); err == nil || !strings.Contains(err.Error(), "minLength") {
		t.Errorf("minLength: %v", err)
	}
}

// BenchmarkMask measures a mask per step over Qwen's vocabulary (151k
// tokens, shared/tokenizers/qwen3) along a document: each step masks the
// logits and advances by the next token of a fixed JSON text, with the
// masks cache cold (a new grammar each document) and warm.
func BenchmarkMask(b *testing.B) {
	tk, err := tokenizer.Load(shareddata.File(b, "tokenizers", "qwen3", "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	toks := make([][]byte, tk.VocabSize())
	for id := range toks {
		toks[id] = tk.TokenBytes(id)
	}
	v := grammar.NewVocab(toks)
	g, err := grammar.CompileSchema([]byte(structuredSchemas[0]))
	if err != nil {
		b.Fatal(err)
	}
	doc := tk.Encode(`{"city": "Tokyo", "celsius": 21, "rain": false}`, false)
	logits := make([]float32, len(toks))
	eos := tk.EOS()
	for _, cold := range []bool{true, false} {
		b.Run(fmt.Sprintf("cold=%v", cold), func(b *testing.B) {
			m := grammar.NewMasks(g, v)
			steps := 0
			for b.Loop() {
				if cold {
					m = grammar.NewMasks(g, v)
				}
				mt := m.NewMatcher(eos, func(id int) []byte { return toks[id] })
				for _, id := range doc {
					if err := mt.Apply(logits); err != nil {
						b.Fatal(err)
					}
					if err := mt.Advance(id); err != nil {
						b.Fatal(err)
					}
					steps++
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps)/float64(len(toks)), "ns/token-step")
		})
	}
}
