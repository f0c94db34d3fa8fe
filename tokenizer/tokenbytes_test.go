package tokenizer

import (
	"bytes"
	"testing"
)

// TestTokenBytes: the bytes of a text's tokens, joined, are the text
// (after the leading space a SentencePiece encoding adds), for texts
// whose characters byte-level tokens split; special tokens have none.
func TestTokenBytes(t *testing.T) {
	texts := []string{
		`{"name": "Zoë", "tags": ["a\"b", 1.5e-3], "ok": true}`,
		"日本語のテキスト 🙂 and\n\ttabs",
		"  leading spaces, ümlauts, and a ∑ sign",
	}
	for _, name := range []string{"qwen3", "llama2-format"} {
		tk := loadShared(t, name)
		for _, text := range texts {
			var got []byte
			for _, id := range tk.Encode(text, false) {
				got = append(got, tk.TokenBytes(id)...)
			}
			if !bytes.Equal(got, []byte(text)) && !bytes.Equal(got, []byte(" "+text)) {
				t.Errorf("%s: token bytes of %q join to %q", name, text, got)
			}
		}
		for _, id := range tk.EOS() {
			if b := tk.TokenBytes(id); b != nil && tk.IsSpecial(id) {
				t.Errorf("%s: special token %d has bytes %q", name, id, b)
			}
		}
		if tk.TokenBytes(-1) != nil || tk.TokenBytes(tk.VocabSize()) != nil {
			t.Errorf("%s: ids outside the vocabulary have bytes", name)
		}
	}
}
