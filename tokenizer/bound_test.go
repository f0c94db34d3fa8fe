package tokenizer

import (
	"strings"
	"testing"
)

// MinTokens never exceeds the token count of the Hugging Face ids of the
// reference cases (nor of long runs of one character, the worst case of a
// long word), and bounds a 4 MB one-word prompt past a 4k context (the
// bound is loose: a 256-byte token, NFC's slack).
func TestMinTokens(t *testing.T) {
	rc := loadCases(t)
	for name, ref := range rc.Tokenizers {
		tk := loadShared(t, name)
		if tk.maxTokenBytes() == 0 {
			t.Errorf("%s: no bound", name)
			continue
		}
		texts := append([]string{}, rc.Cases...)
		for _, c := range []string{"a", " ", "=", "\n", "é", "0"} {
			texts = append(texts, strings.Repeat(c, 5000))
		}
		for i, text := range texts {
			n := len(tk.Encode(text, false))
			if i < len(rc.Cases) && ref.AddSpecialTokens {
				n = len(ref.IDs[i]) // with specials: at least as many
			}
			if m := tk.MinTokens(text); m > n {
				t.Errorf("%s: MinTokens(%.40q...) = %d, but it encodes to %d tokens", name, text, m, n)
			}
		}
		if m := tk.MinTokens(strings.Repeat("a", 4<<20)); m < 4096 {
			t.Errorf("%s: a 4 MB prompt is at least %d tokens: no bound past a 4k context", name, m)
		}
	}
}
