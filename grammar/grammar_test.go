package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// feed runs text through g's automaton: how many bytes it took and
// whether the whole text is a complete document.
func feed(g *Grammar, text string) (n int, accepting bool) {
	s := make(state, 1, MaxDepth+2)
	for i := 0; i < len(text); i++ {
		var ok bool
		if s, ok = g.step(s, text[i]); !ok {
			return i, false
		}
	}
	return len(text), g.accepting(s)
}

func mustCompile(t testing.TB, schema string) *Grammar {
	t.Helper()
	g, err := CompileSchema([]byte(schema))
	if err != nil {
		t.Fatalf("CompileSchema(%s): %v", schema, err)
	}
	return g
}

const person = `{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b\"c", 1.5, null]}, "minItems": 1, "maxItems": 2},
    "pet": {"$ref": "#/$defs/pet"},
    "score": {"type": ["number", "null"]}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {
    "pet": {"type": "object", "properties": {"kind": {"const": "cat"}, "next": {"$ref": "#/$defs/pet"}}}
  }
}`

// shapes is a tagged union: objects told apart by their first property's
// constant.
const shapes = `{"anyOf":[
  {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"],"additionalProperties":false},
  {"type":"object","properties":{"kind":{"enum":["rect","square"]},"w":{"type":"integer"},"h":{"type":"integer"}},"required":["kind","w"],"additionalProperties":false},
  {"type":"string"}
]}`

// list is a linked list: a recursive reference among the alternatives.
const list = `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"}`

// TestPrefixes checks texts against the automaton: the bytes it takes
// (all, for a valid prefix) and whether the text is a whole document.
func TestPrefixes(t *testing.T) {
	tests := []struct {
		schema string
		text   string
		took   int // -1: all of it
		whole  bool
	}{
		{person, `{"name":"x","age":3}`, -1, true},
		{person, `{"name": "x", "age": -30}`, -1, true},
		{person, "{\n  \"name\": \"\\u00e9\\n\\\"\",\n  \"age\": 0\n}", -1, true},
		{person, `{"name":"héllo 世界 🙂","age":1}`, -1, true},
		{person, `{"name":"x","age":1,"tags":["a","b\"c"]}`, -1, true},
		{person, `{"name":"x","age":1,"tags":[1.5,null]}`, -1, true},
		{person, `{"name":"x","age":1,"tags":[]}`, len(`{"name":"x","age":1,"tags":[`), false},                   // minItems 1
		{person, `{"name":"x","age":1,"tags":["a","a","a"]}`, len(`{"name":"x","age":1,"tags":["a","a"`), false}, // maxItems 2
		{person, `{"name":"x","age":1,"tags":["c"]}`, len(`{"name":"x","age":1,"tags":["`), false},
		{person, `{"name":"x","age":1,"pet":{"kind":"cat","next":{"next":{}}}}`, -1, true},
		{person, `{"name":"x","age":1,"pet":{"kind":"dog"}}`, len(`{"name":"x","age":1,"pet":{"kind":"`), false},
		{person, `{"name":"x","age":1,"score":-1.25e+10}`, -1, true},
		{person, `{"name":"x","age":1,"score":null}`, -1, true},
		{person, `{"name":"x","age":1.5}`, len(`{"name":"x","age":1`), false},           // integer
		{person, `{"name":"x","age":01}`, len(`{"name":"x","age":0`), false},            // leading zero
		{person, `{"name":"x","age":1,"extra":1}`, len(`{"name":"x","age":1,"`), false}, // additionalProperties
		{person, `{"age":1}`, len(`{"`), false},                                         // required name first
		{person, `{"name":"x"}`, len(`{"name":"x"`), false},                             // required age
		{person, `{"name":"a` + "\x01", len(`{"name":"a`), false},                       // control character
		{person, `{"name":"\x"`, len(`{"name":"\`), false},                              // bad escape
		{person, `{"name":"\u12G4"`, len(`{"name":"\u12`), false},
		{person, "{\"name\":\"\xc3\x28", len("{\"name\":\"\xc3"), false},      // bad UTF-8
		{person, "{\"name\":\"\xed\xa0\x80", len("{\"name\":\"\xed"), false},  // a surrogate
		{person, `{"name":"x","age":1} `, len(`{"name":"x","age":1}`), false}, // nothing after
		{person, `{` + strings.Repeat(" ", MaxWhitespace+1), 1 + MaxWhitespace, false},
		{`{"type":"number"}`, `-0.5E-7`, -1, true},
		{`{"type":"number"}`, `-`, -1, false},
		{`{"type":"number"}`, `1.`, -1, false},
		{`{"type":"number"}`, `1e`, -1, false},
		{`{"type":"number"}`, `1.5e3x`, 5, false},
		{`{"type":"integer"}`, `123`, -1, true},
		{`{"type":"integer"}`, strings.Repeat("9", maxIntDigits+1), maxIntDigits, false},
		{`{"type":"boolean"}`, `true`, -1, true},
		{`{"type":"boolean"}`, `tru`, -1, false},
		{`{"enum":[1,12,"x"]}`, `1`, -1, true},
		{`{"enum":[1,12,"x"]}`, `12`, -1, true},
		{`{"enum":[1,12,"x"]}`, `13`, 1, false},
		{`{"enum":[{"a":[1,true]}]}`, `{"a":[1,true]}`, -1, true},
		{`{"anyOf":[{"type":"string"},{"type":"array","items":{"type":"integer"}}]}`, `[1,2]`, -1, true},
		{`{"oneOf":[{"type":"string"},{"type":"null"}]}`, `null`, -1, true},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"a":1,"b":2}`, -1, true},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"a":"x"}`, len(`{"a":`), false},
		{`{"type":"object","additionalProperties":false}`, `{}`, -1, true},
		{`{"type":"object","additionalProperties":false}`, `{"`, 1, false},
		{`{"type":"object","properties":{"a":{},"b":{},"c":{}},"required":["c"]}`, `{"b":[{"x":null}],"c":"y"}`, -1, true},
		{`{"type":"object","properties":{"a":{},"b":{},"c":{}},"required":["c"]}`, `{"b":1}`, len(`{"b":1`), false},
		{`{"type":"object","properties":{"a":{},"b":{},"c":{}}}`, `{"c":1,"a":2}`, len(`{"c":1`), false}, // schema order
		{`{"type":"array","items":{"$ref":"#"}}`, `[[],[[]]]`, -1, true},
		{`{}`, `"just a string"`, -1, true},
		{list, `{"v":1,"next":{"v":2,"next":null}}`, -1, true},
		{list, `{"v":1,"next":{"v":2,"next":[`, len(`{"v":1,"next":{"v":2,"next":`), false},
		{`true`, `{"x":[1,{"y":null}]}`, -1, true},
		// A tagged union: the tag's value chooses the alternative.
		{shapes, `{"kind":"circle","r":1.5}`, -1, true},
		{shapes, `{"kind": "rect", "w": 2, "h": 3}`, -1, true},
		{shapes, `{"kind":"square","w":2}`, -1, true},
		{shapes, `{"kind":"circle","w":2}`, len(`{"kind":"circle","`), false},
		{shapes, `{"kind":"rect","w":2}`, -1, true}, // h optional
		{shapes, `"a string"`, -1, true},
		{shapes, `{"kind":"oval"}`, len(`{"kind":"`), false},
		{shapes, `{"r":1}`, len(`{"`), false}, // the tag first
		{shapes, `{"kind":"circle"}`, len(`{"kind":"circle"`), false},
	}
	for _, tt := range tests {
		g := mustCompile(t, tt.schema)
		took, whole := feed(g, tt.text)
		want := tt.took
		if want < 0 {
			want = len(tt.text)
		}
		if took != want || whole != tt.whole {
			t.Errorf("%s\n  %q: took %d bytes (whole %v), want %d (whole %v)", tt.schema, tt.text, took, whole, want, tt.whole)
		}
	}
}

func TestJSONObject(t *testing.T) {
	g := JSONObject()
	for text, whole := range map[string]bool{`{}`: true, `{"a":[1,"b",{"c":null}],"d":false}`: true, `[]`: false, `"x"`: false, `{"a":`: false} {
		took, w := feed(g, text)
		if w != whole || (whole && took != len(text)) {
			t.Errorf("%q: took %d, whole %v; want whole %v", text, took, w, whole)
		}
	}
	deep := strings.Repeat("[", MaxDepth+1)
	if took, _ := feed(g, `{"a":`+deep); took >= len(`{"a":`)+len(deep) {
		t.Errorf("nesting past MaxDepth was taken")
	}
}

// TestSchemaErrors: what the compiler refuses, naming keyword and path.
func TestSchemaErrors(t *testing.T) {
	tests := []struct{ schema, path, keyword string }{
		{`{"type":"string","pattern":"^a"}`, "#", "pattern"},
		{`{"properties":{"a":{"type":"string","minLength":3}}}`, "#/properties/a", "minLength"},
		{`{"type":"array","items":[{"type":"string"}]}`, "#", "items"},
		{`{"type":"widget"}`, "#", "type"},
		{`{"anyOf":[{"type":"integer"},{"type":"number"}]}`, "#/anyOf", "anyOf"},
		{`{"type":["integer","number"]}`, "#", "type"},
		{`{"$ref":"#/$defs/missing"}`, "#", "$ref"},
		{`{"$ref":"http://example.com/s.json"}`, "#", "$ref"},
		{`{"properties":{"a/b":{"allOf":[]}}}`, "#/properties/a~1b", "allOf"},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, "#", "required"},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":true}`, "#", "additionalProperties"},
		{`{"type":"array","minItems":3,"maxItems":2}`, "#", "minItems"},
		{`{"type":"array","maxItems":-1}`, "#", "maxItems"},
		{`{"enum":[]}`, "#", "enum"},
		{`{"type":"string","enum":[1,2]}`, "#", "enum"},
		{`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "#", "$ref"},
		{`{"items":{"not":{}}}`, "#/items", "not"},
		{`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`, "#/$defs/a/anyOf", "anyOf"},
		{manyOptional(3000), "#", "properties"},
		// Objects whose tags share a value are no tagged union.
		{`{"anyOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"object","properties":{"k":{"enum":["b","a"]}},"required":["k"]}]}`, "#/anyOf", "anyOf"},
	}
	for _, tt := range tests {
		_, err := CompileSchema([]byte(tt.schema))
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v, want a *SchemaError", tt.schema, err)
			continue
		}
		if se.Path != tt.path || se.Keyword != tt.keyword {
			t.Errorf("%s: error at %s, keyword %q (%v); want %s, %q", tt.schema, se.Path, se.Keyword, err, tt.path, tt.keyword)
		}
	}
	for _, bad := range []string{``, `{`, `[1]`, `{"a":1}{}`, `false`} {
		if _, err := CompileSchema([]byte(bad)); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

// manyOptional is an object schema of n optional properties.
func manyOptional(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"property_number_%d":{"type":"integer"}`, i)
	}
	b.WriteString(`}}`)
	return b.String()
}

// testVocab is a byte-level vocabulary: every byte, then pieces of JSON
// that a real one has (quotes with punctuation, words, digits, spaces,
// multi-byte characters, a half character).
func testVocab() [][]byte {
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range []string{
		`{"`, `":`, `",`, `"}`, `"]`, `":"`, `","`, `name`, `age`, `tags`, `pet`, `kind`, `next`, `score`,
		`cat`, `null`, `true`, `false`, `12`, `345`, `0.`, `e+`, `-1`, `  `, "\n  ", "\n", `\"`, `\\`, `\u00`,
		`é`, `世界`, "\xe4\xb8", `[{`, `}]`, `},`, `],`, `{}`, `[]`, ` "`, `a"`, `1,`, `1}`, `"a"`, `"b\"c"`,
	} {
		toks = append(toks, []byte(s))
	}
	toks = append(toks, nil, nil) // two special tokens: end of sequence and another
	return toks
}

// TestRandomGeneration is the property test on the automaton and the
// masks together: random schemas, random tokens among those each mask
// allows, and every document that ends must parse and validate against
// its schema with an independent validator (santhosh-tekuri/jsonschema).
func TestRandomGeneration(t *testing.T) {
	toks := testVocab()
	eos := len(toks) - 2
	v := NewVocab(toks)
	r := rand.New(rand.NewPCG(1, 2))
	complete := 0
	for i := range 150 {
		schema := randomSchema(r, 0)
		text, err := json.Marshal(schema)
		if err != nil {
			t.Fatal(err)
		}
		g, err := CompileSchema(text)
		if err != nil {
			var se *SchemaError
			if errors.As(err, &se) && strings.Contains(se.Reason, "overlap") || strings.Contains(err.Error(), "alternatives") {
				continue // a random union of integer and number
			}
			t.Fatalf("schema %s: %v", text, err)
		}
		sch := validator(t, text)
		for seed := range 4 {
			out, ok := generate(t, NewMasks(g, v), toks, eos, rand.New(rand.NewPCG(uint64(i), uint64(seed))), 400)
			if !ok {
				continue // ran out of tokens
			}
			complete++
			var doc any
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("schema %s: output %q does not parse: %v", text, out, err)
			}
			inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err := sch.Validate(inst); err != nil {
				t.Fatalf("schema %s: output %s does not validate: %v", text, out, err)
			}
		}
	}
	if complete < 300 {
		t.Errorf("only %d of 600 generations completed", complete)
	}
}

// generate samples uniformly among the allowed tokens (with some
// preference for ending, so that documents close), checking each mask
// against the automaton: an allowed token must advance, and a sample of
// disallowed ones must not.
func generate(t *testing.T, m *Masks, toks [][]byte, eos int, r *rand.Rand, limit int) ([]byte, bool) {
	mt := m.NewMatcher([]int{eos}, func(id int) []byte { return toks[id] })
	logits := make([]float32, len(toks))
	var out []byte
	for range limit {
		for i := range logits {
			logits[i] = 0
		}
		if err := mt.Apply(logits); err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		var allowed []int
		for id, l := range logits {
			if !math.IsInf(float64(l), -1) {
				allowed = append(allowed, id)
			}
		}
		// Check the mask: every allowed token continues the text, and
		// a disallowed one (a few at random) does not.
		for k := 0; k < 3; k++ {
			id := r.IntN(len(toks))
			ok := mt.try(toks[id], id == eos)
			if ok != !math.IsInf(float64(logits[id]), -1) {
				t.Fatalf("after %q: token %d (%q) allowed %v by the mask, continues %v", out, id, toks[id], !math.IsInf(float64(logits[id]), -1), ok)
			}
		}
		id := allowed[r.IntN(len(allowed))]
		// Prefer closing tokens half the time, so that random documents
		// end before the limit.
		if r.IntN(2) == 0 {
			for _, c := range allowed {
				if c == eos || bytes.ContainsAny(toks[c], `}]"`) && !bytes.ContainsAny(toks[c], `{[`) {
					id = c
					break
				}
			}
		}
		if err := mt.Advance(id); err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		if id != eos {
			out = append(out, toks[id]...)
		}
		if mt.Done() {
			return out, true
		}
	}
	return out, false
}

// try reports whether token bytes b (or end of sequence) may come next,
// by the automaton itself rather than the mask.
func (mt *Matcher) try(b []byte, eos bool) bool {
	if eos {
		return mt.m.g.accepting(mt.s)
	}
	if len(b) == 0 {
		return false
	}
	s := append(state(nil), mt.s...)
	for _, c := range b {
		var ok bool
		if s, ok = mt.m.g.step(s, c); !ok {
			return false
		}
	}
	return true
}

func validator(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("the validator refuses %s: %v", schema, err)
	}
	return sch
}

// randomSchema makes a schema of the supported subset, nested up to 3
// deep, as JSON-ready values (properties in a fixed order).
func randomSchema(r *rand.Rand, depth int) map[string]any {
	kinds := []string{"string", "integer", "number", "boolean", "null", "enum", "object", "array", "nullable", "any"}
	if depth >= 3 {
		kinds = kinds[:6]
	}
	switch k := kinds[r.IntN(len(kinds))]; k {
	case "enum":
		vals := []any{"red", "gr\"een", 7, 2.5, true, nil, "ü"}
		r.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
		return map[string]any{"enum": vals[:1+r.IntN(4)]}
	case "object":
		props := map[string]any{}
		var req []string
		for i := range r.IntN(4) {
			name := fmt.Sprintf("p%d", i)
			props[name] = randomSchema(r, depth+1)
			if r.IntN(2) == 0 {
				req = append(req, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(req) > 0 {
			s["required"] = req
		}
		if len(props) == 0 && r.IntN(2) == 0 {
			s = map[string]any{"type": "object", "additionalProperties": randomSchema(r, depth+1)}
		}
		return s
	case "array":
		s := map[string]any{"type": "array", "items": randomSchema(r, depth+1)}
		if r.IntN(2) == 0 {
			lo := r.IntN(3)
			s["minItems"] = lo
			s["maxItems"] = lo + r.IntN(3)
		}
		return s
	case "nullable":
		return map[string]any{"anyOf": []any{randomSchema(r, depth+1), map[string]any{"type": "null"}}}
	case "any":
		return map[string]any{}
	default:
		return map[string]any{"type": k}
	}
}
