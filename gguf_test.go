package kakeya

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/ggufdata"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// The tokenizer built from a GGUF's tokenizer.ggml.* keys encodes and
// decodes the shared reference cases as the Hugging Face tokenizers library
// does with the model directory's tokenizer.json: ref-qwen2-6m's byte-level
// BPE (gpt2, pre qwen2) and stories260K's SentencePiece vocabulary (llama,
// merges derived from the scores).
func TestGGUFTokenizer(t *testing.T) {
	for _, tc := range []struct{ model, cases, name string }{
		{"ref-qwen2-6m", "ref-qwen2-6m_tokenizer_cases.json", "ref-qwen2-6m"},
		{"stories260K", "tokenizer_cases.json", "stories260K"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			data, err := os.ReadFile(shareddata.File(t, "reference", tc.cases))
			if err != nil {
				t.Fatal(err)
			}
			var rc struct {
				Cases      []string `json:"cases"`
				Tokenizers map[string]struct {
					AddSpecialTokens bool     `json:"add_special_tokens"`
					IDs              [][]int  `json:"ids"`
					Decoded          []string `json:"decoded"`
				} `json:"tokenizers"`
			}
			if err := json.Unmarshal(data, &rc); err != nil {
				t.Fatal(err)
			}
			ref, ok := rc.Tokenizers[tc.name]
			if !ok || len(ref.IDs) != len(rc.Cases) || len(rc.Cases) == 0 {
				t.Fatalf("%s: no cases for %s", tc.cases, tc.name)
			}
			file := ggufdata.Convert(t, tc.model, "native")
			tok, err := LoadTokenizer(file)
			if err != nil {
				t.Fatal(err)
			}
			hf, err := LoadTokenizer(shareddata.File(t, "models", tc.model))
			if err != nil {
				t.Fatal(err)
			}
			if tok.VocabSize() != hf.VocabSize() {
				t.Errorf("vocabulary of %d tokens, want %d", tok.VocabSize(), hf.VocabSize())
			}
			for i, text := range rc.Cases {
				if got := tok.Encode(text, ref.AddSpecialTokens); !equalIDs(got, ref.IDs[i]) {
					t.Errorf("Encode(%q, %v)\n got %v\nwant %v", text, ref.AddSpecialTokens, got, ref.IDs[i])
				}
				if dec := tok.Decode(ref.IDs[i], false); dec != ref.Decoded[i] {
					t.Errorf("Decode(%v) = %q, want %q", ref.IDs[i], dec, ref.Decoded[i])
				}
			}
			if got, want := tok.EOS(), hf.EOS(); !equalIDs(got, want) {
				t.Errorf("EOS %v, want %v", got, want)
			}
			if got, want := tok.ChatTemplate(), hf.ChatTemplate(); got != want {
				t.Errorf("chat template %q, want %q", got, want)
			}
		})
	}
}

func equalIDs(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
