package grammar

import (
	"math"
	"testing"
)

// FuzzGrammar: any schema text compiles or is refused with an error, and
// any text then runs through the automaton and the masks without a panic
// or a hang; a text the automaton takes whole is allowed token by token
// by the masks of a byte vocabulary.
func FuzzGrammar(f *testing.F) {
	for _, s := range []string{person, list, `{}`, `true`, `{"enum":[1,"a",null]}`, `{"type":["string","null"]}`,
		`{"type":"array","items":{"$ref":"#"},"maxItems":2}`, `{"anyOf":[{"type":"object"},{"type":"array"}]}`} {
		f.Add([]byte(s), []byte(`{"name":"x","age":1}`))
		f.Add([]byte(s), []byte(`[[],[null]]`))
	}
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	toks = append(toks, nil) // end of sequence
	v := NewVocab(toks)
	f.Fuzz(func(t *testing.T, schema, text []byte) {
		g, err := CompileSchema(schema)
		if err != nil {
			return
		}
		took, _ := feed(g, string(text))
		mt := NewMasks(g, v).NewMatcher([]int{256}, func(id int) []byte { return toks[id] })
		logits := make([]float32, len(toks))
		for i := 0; i < took && i < 64; i++ {
			clear(logits)
			if err := mt.Apply(logits); err != nil {
				t.Fatalf("after %q: %v", text[:i], err)
			}
			if math.IsInf(float64(logits[text[i]]), -1) {
				t.Fatalf("after %q: byte %q masked, which the automaton takes", text[:i], text[i])
			}
			if err := mt.Advance(int(text[i])); err != nil {
				t.Fatal(err)
			}
		}
	})
}
