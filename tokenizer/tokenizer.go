// Package tokenizer encodes text to token ids and back for the model families
// Kakeya runs, reading a Hugging Face tokenizer.json (and tokenizer_config.json
// beside it) with its own implementation: byte-level BPE (GPT-2, Qwen2/2.5/3,
// Llama-3) and SentencePiece-style BPE with byte fallback (Llama-2, Mistral,
// TinyStories models), plus streaming decoding and the model's own chat template
// (rendered by package chattmpl).
//
// The pipeline follows the Hugging Face tokenizers library: added tokens are
// split out of the raw text first, every other segment is normalized,
// pre-tokenized into pieces and each piece is run through the BPE model; a
// post-processor adds special tokens. Decoding runs the decoder chain over the
// token strings.
package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenizer encodes and decodes text for one model. It is safe for
// concurrent use by multiple goroutines.
type Tokenizer struct {
	path string

	tokens  []string       // id -> token string as written in tokenizer.json
	vocab   map[string]int // token string -> id, model vocabulary and added tokens
	special []bool         // id -> added token flagged special
	added   []*addedToken  // sorted by content length, longest first
	addedID map[int]*addedToken

	// firstRaw/firstNorm mark the first bytes of added tokens matched
	// against raw and normalized text, so the scan skips other bytes quickly.
	firstRaw, firstNorm [256]bool
	hasRaw, hasNorm     bool

	norm    normalizer
	pre     []preTokenizer
	fast    *splitScanner // non-nil when pre is exactly a known split pattern
	bpe     *bpeModel
	decoder []decoder
	post    postProcessor

	bos    int
	hasBOS bool
	eos    []int

	chat chatInfo

	perToken int // input bytes one token stands for at most, 0 for no bound (MinTokens)
}

type addedToken struct {
	id         int
	content    string
	special    bool
	lstrip     bool
	rstrip     bool
	singleWord bool
	normalized bool
}

// VocabSize returns one more than the largest token id, counting added tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of the token written s in tokenizer.json (for
// byte-level vocabularies that is the mapped form, e.g. "Ġthe").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	id, ok := t.vocab[s]
	return id, ok
}

// Token returns the token string of id as written in tokenizer.json, or ""
// for an id outside the vocabulary.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// BOS returns the beginning-of-sequence token configured in
// tokenizer_config.json (bos_token), if any.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.hasBOS }

// EOS returns the end-of-sequence ids configured in tokenizer_config.json
// (eos_token). Callers add model-specific stop ids such as ChatStopIDs.
func (t *Tokenizer) EOS() []int { return append([]int(nil), t.eos...) }

// IsSpecial reports whether id is an added token flagged special, the kind
// Decode drops when skipSpecial is set.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// Encode returns the token ids of text. With addSpecial the post-processor
// template (or tokenizer_config add_bos_token/add_eos_token) adds BOS/EOS.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	ids := make([]int, 0, len(text)/3+4)
	ids = t.encodeAdded(ids, text, nil)
	if addSpecial {
		ids = t.post.apply(ids)
	}
	return ids
}

// encodeAdded splits text on added tokens that match raw text, and encodes
// the pieces between them. Special tokens are not recognised where their
// text touches one of the plain spans (EncodeSegments; nil for none).
func (t *Tokenizer) encodeAdded(dst []int, text string, plain [][2]int) []int {
	if !t.hasRaw {
		return t.encodeSegment(dst, text, true, len(plain) == 0)
	}
	ps := plainSpans{spans: plain}
	start := 0 // start of the pending plain segment
	for i := 0; i < len(text); {
		if !t.firstRaw[text[i]] {
			i++
			continue
		}
		tok, s, e := t.matchAdded(text, start, i, false)
		if tok == nil || tok.special && ps.overlaps(i, i+len(tok.content)) {
			i++
			continue
		}
		dst = t.encodeSegment(dst, text[start:s], start == 0, !touches(plain, start, s))
		dst = append(dst, tok.id)
		start, i = e, e
	}
	return t.encodeSegment(dst, text[start:], start == 0, !touches(plain, start, len(text)))
}

// touches reports whether [s, e) overlaps one of the plain spans.
func touches(plain [][2]int, s, e int) bool {
	for _, p := range plain {
		if p[0] < e && s < p[1] {
			return true
		}
	}
	return false
}

// matchAdded returns the longest added token (of the requested normalized
// kind) starting at text[i:], with the span it covers after lstrip/rstrip;
// lstrip never reaches before lo.
func (t *Tokenizer) matchAdded(text string, lo, i int, normalized bool) (*addedToken, int, int) {
	for _, tok := range t.added {
		if tok.normalized != normalized || !strings.HasPrefix(text[i:], tok.content) {
			continue
		}
		s, e := i, i+len(tok.content)
		if tok.singleWord && (wordCharBefore(text, s) || wordCharAfter(text, e)) {
			continue
		}
		if tok.lstrip {
			for s > lo {
				r, n := utf8.DecodeLastRuneInString(text[lo:s])
				if !unicode.IsSpace(r) {
					break
				}
				s -= n
			}
		}
		if tok.rstrip {
			for e < len(text) {
				r, n := utf8.DecodeRuneInString(text[e:])
				if !unicode.IsSpace(r) {
					break
				}
				e += n
			}
		}
		return tok, s, e
	}
	return nil, 0, 0
}

func isWordChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func wordCharBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isWordChar(r)
}

func wordCharAfter(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isWordChar(r)
}

// encodeSegment normalizes one stretch of text free of raw added tokens,
// splits it on normalized added tokens and encodes the rest with the model.
// first reports whether the segment starts the input (Metaspace "first");
// without special, normalized added tokens flagged special are text (the
// stretch holds message content, see EncodeSegments).
func (t *Tokenizer) encodeSegment(dst []int, seg string, first, special bool) []int {
	if seg == "" {
		return dst
	}
	if t.norm != nil {
		seg = t.norm.normalize(seg)
	}
	if !t.hasNorm {
		return t.encodeNormalized(dst, seg, first)
	}
	start := 0
	for i := 0; i < len(seg); {
		if !t.firstNorm[seg[i]] {
			i++
			continue
		}
		tok, s, e := t.matchAdded(seg, start, i, true)
		if tok == nil || tok.special && !special {
			i++
			continue
		}
		dst = t.encodeNormalized(dst, seg[start:s], first && start == 0)
		dst = append(dst, tok.id)
		start, i = e, e
	}
	return t.encodeNormalized(dst, seg[start:], first && start == 0)
}

// encodeNormalized pre-tokenizes normalized text and runs the model on each
// piece.
func (t *Tokenizer) encodeNormalized(dst []int, s string, first bool) []int {
	if s == "" {
		return dst
	}
	if t.fast != nil {
		sc := *t.fast
		sc.s = s
		for {
			piece, ok := sc.next()
			if !ok {
				return dst
			}
			dst = t.bpe.encode(dst, piece)
		}
	}
	pieces := []string{s}
	for _, p := range t.pre {
		pieces = p.split(pieces, first)
	}
	for _, piece := range pieces {
		if piece != "" {
			dst = t.bpe.encode(dst, piece)
		}
	}
	return dst
}

// Decode returns the text of ids. With skipSpecial, added tokens flagged
// special are left out. Ids outside the vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) || (skipSpecial && t.special[id]) {
			continue
		}
		toks = append(toks, t.tokens[id])
	}
	if len(t.decoder) == 0 {
		return strings.Join(toks, " ") // what the reference does without a decoder
	}
	for _, d := range t.decoder {
		toks = d.decode(toks)
	}
	return strings.Join(toks, "")
}

// sortAdded orders added tokens longest first so the scan takes the longest
// match at a position, as the Hugging Face trie does.
func sortAdded(toks []*addedToken) {
	sort.SliceStable(toks, func(i, j int) bool { return len(toks[i].content) > len(toks[j].content) })
}

func (t *Tokenizer) errorf(format string, args ...any) error {
	return fmt.Errorf("tokenizer: %s: %s", t.path, fmt.Sprintf(format, args...))
}
