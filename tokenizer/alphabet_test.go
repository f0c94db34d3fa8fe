package tokenizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// byteLevelVocab returns a vocabulary of the byte-level symbols of the first
// n bytes, ids 0..n-1.
func byteLevelVocab(n int) map[string]int {
	chars := bytesToChars()
	v := make(map[string]int, n)
	for b := 0; b < n; b++ {
		v[string(chars[b])] = b
	}
	return v
}

// fallbackVocab returns <unk>, "a" and the <0xNN> tokens of bytes
// [0, n), skipping the byte skip (use -1 for none).
func fallbackVocab(n, skip int) map[string]int {
	v := map[string]int{"<unk>": 0, "a": 1}
	for b := 0; b < n; b++ {
		if b != skip {
			v[fmt.Sprintf("<0x%02X>", b)] = len(v)
		}
	}
	return v
}

// with adds token tok to vocabulary v, with the next id.
func with(v map[string]int, tok string) map[string]int {
	v[tok] = len(v)
	return v
}

// TestLoadChecksAlphabet: a vocabulary that cannot spell every byte is
// rejected at load, naming the file, the count and the first missing one,
// instead of encoding text to fewer tokens (or none).
func TestLoadChecksAlphabet(t *testing.T) {
	byteLevel := map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
	}
	tests := []struct {
		name    string
		model   map[string]any
		extra   map[string]any
		wantErr string // "" = loads
		text    string // encoded when it loads
		want    int    // tokens of text
	}{
		{"byte-level, 6 bytes", map[string]any{"type": "BPE", "vocab": byteLevelVocab(6), "merges": []string{}}, byteLevel,
			`byte-level BPE vocabulary lacks 250 of the 256 byte symbols (first: 'Ć' for byte 0x06)`, "", 0},
		{"byte-level, 255 bytes", map[string]any{"type": "BPE", "vocab": byteLevelVocab(255), "merges": []string{}}, byteLevel,
			`lacks 1 of the 256 byte symbols (first: 'ÿ' for byte 0xFF)`, "", 0},
		{"byte-level, all bytes", map[string]any{"type": "BPE", "vocab": byteLevelVocab(256), "merges": []string{}}, byteLevel,
			"", "héllo", 6},
		{"byte fallback, no byte tokens, no unk", map[string]any{"type": "BPE", "vocab": fallbackVocab(0, -1), "merges": []string{}, "byte_fallback": true}, nil,
			`byte_fallback is set but the vocabulary lacks 256 of the 256 byte tokens <0x00>..<0xFF> (first: <0x00>)`, "", 0},
		{"byte fallback, one missing, no unk", map[string]any{"type": "BPE", "vocab": fallbackVocab(256, 0x80), "merges": []string{}, "byte_fallback": true}, nil,
			`lacks 1 of the 256 byte tokens <0x00>..<0xFF> (first: <0x80>)`, "", 0},
		// With unk_token a character one of whose bytes has no token (and
		// that is no token itself) becomes unk, as upstream's BPE does:
		// "é" is C3 A9, so "aé" is a and <unk>.
		{"byte fallback, one missing, unk", map[string]any{"type": "BPE", "vocab": fallbackVocab(256, 0xA9), "merges": []string{}, "unk_token": "<unk>", "byte_fallback": true}, nil,
			"", "aé", 2},
		// Gemma's tokenizer.json has the token "\t" and no <0x09>.
		{"byte fallback, a byte that is a token", map[string]any{"type": "BPE", "vocab": with(fallbackVocab(256, 0x09), "\t"), "merges": []string{}, "unk_token": "<unk>", "byte_fallback": true}, nil,
			"", "a\ta", 3},
		{"byte fallback, all bytes", map[string]any{"type": "BPE", "vocab": fallbackVocab(256, -1), "merges": []string{}, "unk_token": "<unk>", "byte_fallback": true}, nil,
			"", "aé", 3},
		{"no byte fallback needs no byte tokens", map[string]any{"type": "BPE", "vocab": fallbackVocab(0, -1), "merges": []string{}, "unk_token": "<unk>"}, nil,
			"", "aé", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFiles(t, tinyJSON(t, tt.model, tt.extra), "")
			tk, err := Load(path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := tk.Encode(tt.text, false); len(got) != tt.want {
					t.Fatalf("Encode(%q) = %v, want %d tokens", tt.text, got, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
		})
	}
}

// TestSharedTokenizersCoverBytes: every real tokenizer in the shared data
// passes the alphabet check, and encodes bytes outside its merges.
func TestSharedTokenizersCoverBytes(t *testing.T) {
	for _, path := range []string{
		"tokenizers/qwen3/tokenizer.json",
		"tokenizers/llama2-format/tokenizer.json",
		"models/stories260K/tokenizer.json",
		"models/ref-qwen2-6m/tokenizer.json",
	} {
		t.Run(path, func(t *testing.T) {
			tk, err := Load(shareddata.File(t, path))
			if err != nil {
				t.Fatal(err)
			}
			const text = "\x00\x01 ǅ\u2028\U0001F600"
			ids := tk.Encode(text, false)
			if got := tk.Decode(ids, false); got != text {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", text, got, ids)
			}
		})
	}
}
