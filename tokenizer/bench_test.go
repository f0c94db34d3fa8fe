package tokenizer

import (
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// BenchmarkEncodeWikitextQwen3 encodes all of wiki.test.raw with the Qwen3
// tokenizer; the word cache is warm after the first iteration.
func BenchmarkEncodeWikitextQwen3(b *testing.B) {
	tk := loadShared(b, "qwen3")
	text := readWikitext(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tk.Encode(text, false)
	}
}

// BenchmarkEncodeWikitextQwen3Uncached empties the word cache before each
// iteration, so every distinct word is merged once per pass.
func BenchmarkEncodeWikitextQwen3Uncached(b *testing.B) {
	tk := loadShared(b, "qwen3")
	text := readWikitext(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tk.bpe.cache.clear()
		tk.Encode(text, false)
	}
}

// BenchmarkEncodeWikitextQwen3NoCache bypasses the word cache entirely:
// every piece goes through the heap merge.
func BenchmarkEncodeWikitextQwen3NoCache(b *testing.B) {
	tk := loadShared(b, "qwen3")
	text := readWikitext(b)
	b.SetBytes(int64(len(text)))
	sc := new(bpeScratch)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := splitScanner{maxDigits: 1, s: text}
		n := 0
		for {
			piece, ok := s.next()
			if !ok {
				break
			}
			n += len(tk.bpe.merge(sc, piece))
		}
		if n == 0 {
			b.Fatal("no tokens")
		}
	}
}

// BenchmarkEncodeWikitextLlama2 is the SentencePiece-style path.
func BenchmarkEncodeWikitextLlama2(b *testing.B) {
	tk := loadShared(b, "llama2-format")
	text := readWikitext(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tk.Encode(text, true)
	}
}

func BenchmarkLoadQwen3(b *testing.B) {
	path := shareddata.File(b, tokenizerPaths["qwen3"])
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}
