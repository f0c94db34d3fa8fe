package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"golang.org/x/text/unicode/norm"
)

// tokenizerPaths maps the names in tokenizer_cases.json to their files.
var tokenizerPaths = map[string]string{
	"qwen3":         "tokenizers/qwen3/tokenizer.json",
	"llama2-format": "tokenizers/llama2-format/tokenizer.json",
	"stories260K":   "models/stories260K/tokenizer.json",
}

var loaded sync.Map // name -> *Tokenizer, so each test binary parses a file once

func loadShared(t testing.TB, name string) *Tokenizer {
	t.Helper()
	if tk, ok := loaded.Load(name); ok {
		return tk.(*Tokenizer)
	}
	tk, err := Load(shareddata.File(t, tokenizerPaths[name]))
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(name, tk)
	return tk
}

type referenceCases struct {
	Cases      []string `json:"cases"`
	Tokenizers map[string]struct {
		AddSpecialTokens bool     `json:"add_special_tokens"`
		IDs              [][]int  `json:"ids"`
		Decoded          []string `json:"decoded"`
	} `json:"tokenizers"`
}

func loadCases(t *testing.T) referenceCases {
	t.Helper()
	data, err := os.ReadFile(shareddata.File(t, "reference", "tokenizer_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rc referenceCases
	if err := json.Unmarshal(data, &rc); err != nil {
		t.Fatalf("tokenizer_cases.json: %v", err)
	}
	if len(rc.Cases) == 0 || len(rc.Tokenizers) != len(tokenizerPaths) {
		t.Fatalf("tokenizer_cases.json: %d cases, %d tokenizers; want cases for %d tokenizers", len(rc.Cases), len(rc.Tokenizers), len(tokenizerPaths))
	}
	return rc
}

// TestReferenceCases checks ids and decodes against the Hugging Face
// tokenizers library. The reference decodes keep special tokens.
func TestReferenceCases(t *testing.T) {
	rc := loadCases(t)
	for name, ref := range rc.Tokenizers {
		if _, ok := tokenizerPaths[name]; !ok {
			t.Fatalf("tokenizer_cases.json: unknown tokenizer %q", name)
		}
		tk := loadShared(t, name)
		for i, text := range rc.Cases {
			got := tk.Encode(text, ref.AddSpecialTokens)
			if !equalInts(got, ref.IDs[i]) {
				t.Errorf("%s: Encode(%q, %v)\n got %v\nwant %v", name, text, ref.AddSpecialTokens, got, ref.IDs[i])
			}
			if dec := tk.Decode(ref.IDs[i], false); dec != ref.Decoded[i] {
				t.Errorf("%s: Decode(%v) = %q, want %q", name, ref.IDs[i], dec, ref.Decoded[i])
			}
			s := tk.NewStream()
			var b strings.Builder
			for _, id := range ref.IDs[i] {
				piece := s.Add(id)
				if !utf8.ValidString(piece) || strings.ContainsRune(piece, utf8.RuneError) {
					t.Errorf("%s: case %d: stream emitted broken text %q", name, i, piece)
				}
				b.WriteString(piece)
			}
			b.WriteString(s.Flush())
			if b.String() != ref.Decoded[i] {
				t.Errorf("%s: streamed %q, want %q", name, b.String(), ref.Decoded[i])
			}
		}
	}
}

func equalInts(a, b []int) bool {
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

func readWikitext(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(shareddata.File(t, "data", "wikitext-2-raw", "wiki.test.raw"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestWikitextRoundTrip: byte-level BPE loses nothing after normalization.
func TestWikitextRoundTrip(t *testing.T) {
	tk := loadShared(t, "qwen3")
	text := readWikitext(t)
	ids := tk.Encode(text, false)
	got := tk.Decode(ids, false)
	want := norm.NFC.String(text)
	if got != want {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("round trip differs at byte %d: got %q want %q", i, got[i:min(i+40, len(got))], want[i:min(i+40, len(want))])
	}
	// Streaming the whole document gives the same text.
	s := tk.NewStream()
	var b strings.Builder
	for _, id := range ids[:20000] {
		b.WriteString(s.Add(id))
	}
	b.WriteString(s.Flush())
	if w := tk.Decode(ids[:20000], false); b.String() != w {
		t.Fatalf("streamed decode of the first 20000 ids differs from Decode")
	}
	t.Logf("%d bytes -> %d tokens (%.2f bytes/token)", len(text), len(ids), float64(len(text))/float64(len(ids)))
}

func TestMetadata(t *testing.T) {
	tests := []struct {
		name      string
		vocab     int
		bos       int
		hasBOS    bool
		eos       []int
		special   []int
		notSpec   []int
		tokenID   string
		wantID    int
		chat      bool
		chatStops []int
	}{
		{"qwen3", 151669, 0, false, []int{151645}, []int{151643, 151644, 151645}, []int{151667, 9707}, "Ġworld", 1879, true, []int{151645, 151643}},
		{"llama2-format", 32000, 1, true, []int{2}, []int{0, 1, 2}, []int{3, 22557}, "▁Hello", 22557, false, []int{2}},
		{"stories260K", 512, 1, true, []int{2}, []int{0, 1, 2}, []int{3, 410}, "▁", 410, false, []int{2}},
	}
	for _, tt := range tests {
		tk := loadShared(t, tt.name)
		if got := tk.VocabSize(); got != tt.vocab {
			t.Errorf("%s: VocabSize = %d, want %d", tt.name, got, tt.vocab)
		}
		if id, ok := tk.BOS(); id != tt.bos || ok != tt.hasBOS {
			t.Errorf("%s: BOS = %d, %v; want %d, %v", tt.name, id, ok, tt.bos, tt.hasBOS)
		}
		if got := tk.EOS(); !equalInts(got, tt.eos) {
			t.Errorf("%s: EOS = %v, want %v", tt.name, got, tt.eos)
		}
		for _, id := range tt.special {
			if !tk.IsSpecial(id) {
				t.Errorf("%s: IsSpecial(%d) = false", tt.name, id)
			}
		}
		for _, id := range tt.notSpec {
			if tk.IsSpecial(id) {
				t.Errorf("%s: IsSpecial(%d) = true", tt.name, id)
			}
		}
		if id, ok := tk.TokenID(tt.tokenID); !ok || id != tt.wantID {
			t.Errorf("%s: TokenID(%q) = %d, %v; want %d", tt.name, tt.tokenID, id, ok, tt.wantID)
		}
		if s := tk.Token(tt.wantID); s != tt.tokenID {
			t.Errorf("%s: Token(%d) = %q, want %q", tt.name, tt.wantID, s, tt.tokenID)
		}
		if s := tk.Token(-1) + tk.Token(tt.vocab); s != "" {
			t.Errorf("%s: Token out of range = %q, want empty", tt.name, s)
		}
		if got := tk.HasChatTemplate(); got != tt.chat {
			t.Errorf("%s: HasChatTemplate = %v, want %v", tt.name, got, tt.chat)
		}
		if got := tk.ChatStopIDs(); !equalInts(got, tt.chatStops) {
			t.Errorf("%s: ChatStopIDs = %v, want %v", tt.name, got, tt.chatStops)
		}
	}
}

func TestDecodeSkipSpecial(t *testing.T) {
	tests := []struct {
		name string
		ids  []int
		want string
	}{
		{"llama2-format", []int{1, 22557, 1526, 2}, "Hello world"},
		{"stories260K", []int{1, 346, 306, 414, 263, 304, 341}, "Hello world"},
		{"qwen3", []int{151644, 872, 198, 13048, 0, 151645, 151667}, "user\nHi!<think>"},
	}
	for _, tt := range tests {
		tk := loadShared(t, tt.name)
		if got := tk.Decode(tt.ids, true); got != tt.want {
			t.Errorf("%s: Decode(%v, true) = %q, want %q", tt.name, tt.ids, got, tt.want)
		}
		s := tk.NewStreamSkipSpecial()
		var b strings.Builder
		for _, id := range tt.ids {
			b.WriteString(s.Add(id))
		}
		if b.String() != tt.want {
			t.Errorf("%s: skip-special stream = %q, want %q", tt.name, b.String(), tt.want)
		}
	}
}

// TestStreamHoldsPartialCharacters: a character spelled by several byte
// tokens comes out whole, once its last byte arrives.
func TestStreamHoldsPartialCharacters(t *testing.T) {
	tk := loadShared(t, "stories260K")
	// "▁" then the bytes of 你 (E4 BD A0) as <0xNN> tokens (id = 3 + byte), then "▁a".
	ids := []int{410, 3 + 0xE4, 3 + 0xBD, 3 + 0xA0, 410}
	s := tk.NewStream()
	var got []string
	for _, id := range ids {
		got = append(got, s.Add(id))
	}
	want := []string{"", "", "", "你", " "}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stream pieces = %q, want %q", got, want)
		}
	}
	// An incomplete character at the end comes out on Flush.
	s = tk.NewStream()
	s.Add(410)
	if p := s.Add(3 + 0xE4); p != "" {
		t.Fatalf("partial byte emitted %q", p)
	}
	if p := s.Flush(); p != "\uFFFD" {
		t.Fatalf("Flush = %q, want U+FFFD", p)
	}
}

// TestConcurrentEncode: one Tokenizer serves several goroutines (run with
// -race to check the word cache and scratch pool).
func TestConcurrentEncode(t *testing.T) {
	tk := loadShared(t, "qwen3")
	text := readWikitext(t)[:200000]
	want := tk.Encode(text, false)
	tk.bpe.cache.clear()
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := tk.Encode(text, false); !equalInts(got, want) {
				errs <- "concurrent Encode differs"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// ref-qwen2-6m's own byte-level BPE tokenizer against the Hugging Face
// tokenizers library's ids and decodes for the same cases.
func TestRefQwen2Cases(t *testing.T) {
	data, err := os.ReadFile(shareddata.File(t, "reference", "ref-qwen2-6m_tokenizer_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rc referenceCases
	if err := json.Unmarshal(data, &rc); err != nil {
		t.Fatalf("ref-qwen2-6m_tokenizer_cases.json: %v", err)
	}
	ref, ok := rc.Tokenizers["ref-qwen2-6m"]
	if !ok || len(rc.Cases) == 0 || len(ref.IDs) != len(rc.Cases) || len(ref.Decoded) != len(rc.Cases) {
		t.Fatalf("ref-qwen2-6m_tokenizer_cases.json: %d cases, %d id lists", len(rc.Cases), len(ref.IDs))
	}
	tk, err := Load(shareddata.File(t, "models", "ref-qwen2-6m", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range rc.Cases {
		if got := tk.Encode(text, ref.AddSpecialTokens); !equalInts(got, ref.IDs[i]) {
			t.Errorf("Encode(%q, %v)\n got %v\nwant %v", text, ref.AddSpecialTokens, got, ref.IDs[i])
		}
		if dec := tk.Decode(ref.IDs[i], false); dec != ref.Decoded[i] {
			t.Errorf("Decode(%v) = %q, want %q", ref.IDs[i], dec, ref.Decoded[i])
		}
	}
}
