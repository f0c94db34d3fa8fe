package tokenizer

import (
	"runtime"
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

// Encode's memory is a small multiple of its input, and not kept: a
// 256 KB one-word prompt (BPE's worst case, a symbol and a heap entry per
// byte) allocates at most 64 bytes per byte (135 to 157 before the
// symbols, heap and ids were sized once instead of grown by doubling),
// prose at most 24, and a long word's scratch does not stay pooled.
func TestEncodeMemory(t *testing.T) {
	for _, name := range []string{"qwen3", "llama2-format", "stories260K"} {
		tk := loadShared(t, name)
		for _, tc := range []struct {
			text string
			most float64
		}{
			{strings.Repeat("a", 256<<10), 64},
			{strings.Repeat("Hello world, this is prose. ", 256<<10/28), 24},
		} {
			tk.Encode(tc.text[:100], false) // the pool and cache warm
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tk.Encode(tc.text, false)
			runtime.ReadMemStats(&after)
			if per := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(tc.text)); per > tc.most {
				t.Errorf("%s: Encode(%.12q...) allocated %.1f bytes per byte, want at most %v", name, tc.text, per, tc.most)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			if kept := int64(after.HeapAlloc) - int64(before.HeapAlloc); kept > int64(len(tc.text)) {
				t.Errorf("%s: Encode(%.12q...) left %d bytes on the heap for %d of text", name, tc.text, kept, len(tc.text))
			}
		}
	}
}
