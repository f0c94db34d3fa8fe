package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Split patterns with a hand-written scanner. Compiled backtracking regexes
// are the slowest stage of encoding; these patterns are simple enough to scan
// directly with the same leftmost-first semantics.
const (
	// qwenPattern is the Qwen2/Qwen2.5/Qwen3 pre-tokenizer split.
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// llama3Pattern is the Llama-3 (cl100k-style) split: digits in runs of up to three.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitScanner yields the successive matches of a known split pattern over s.
// Every character is covered by some alternative of these patterns, so the
// matches tile the input and Isolated splitting is the match sequence itself.
type splitScanner struct {
	maxDigits int // run length of \p{N}{1,maxDigits}
	s         string
}

// newSplitScanner returns a scanner for pattern, or nil when the pattern is
// not one it implements.
func newSplitScanner(pattern string) *splitScanner {
	switch pattern {
	case qwenPattern:
		return &splitScanner{maxDigits: 1}
	case llama3Pattern:
		return &splitScanner{maxDigits: 3}
	}
	return nil
}

func decodeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// Character classes, with an ASCII fast path.
func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

// next returns the next match and advances.
func (sc *splitScanner) next() (string, bool) {
	s := sc.s
	if s == "" {
		return "", false
	}
	n := sc.matchLen(s)
	sc.s = s[n:]
	return s[:n], true
}

// matchLen returns the length of the match at the start of s (non-empty s).
func (sc *splitScanner) matchLen(s string) int {
	c, w := decodeAt(s, 0)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if c == '\'' {
		if n := contraction(s[1:]); n > 0 {
			return 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(c) {
		return letters(s, w)
	}
	if c != '\r' && c != '\n' && !isN(c) {
		if c2, _ := decodeAt(s, w); c2 >= 0 && isL(c2) {
			return letters(s, w)
		}
	}
	// \p{N}{1,maxDigits}
	if isN(c) {
		i := w
		for k := 1; k < sc.maxDigits; k++ {
			r, n := decodeAt(s, i)
			if r < 0 || !isN(r) {
				break
			}
			i += n
		}
		return i
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	i := 0
	if c == ' ' {
		i = 1
	}
	if r, n := decodeAt(s, i); r >= 0 && isOther(r) {
		i += n
		for {
			r, n := decodeAt(s, i)
			if r < 0 || !isOther(r) {
				break
			}
			i += n
		}
		for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
			i++
		}
		return i
	}
	// Here c is whitespace. W is the maximal whitespace run.
	end, lastNL, runes := 0, -1, 0
	for {
		r, n := decodeAt(s, end)
		if r < 0 || !isS(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		end += n
		runes++
	}
	// \s*[\r\n]+ : greedy whitespace backs off to the last line break.
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : the whole run at the end of input, else all but its last
	// character; \s+ takes a single character.
	if end == len(s) || runes == 1 {
		return end
	}
	_, n := utf8.DecodeLastRuneInString(s[:end])
	return end - n
}

// isOther reports [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func letters(s string, i int) int {
	for {
		r, n := decodeAt(s, i)
		if r < 0 || !isL(r) {
			return i
		}
		i += n
	}
}

// contraction returns the length of a case-insensitive s|t|re|ve|m|ll|d at
// the start of s, trying the alternatives in pattern order.
func contraction(s string) int {
	lower := func(i int) byte {
		if i >= len(s) {
			return 0
		}
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch a := lower(0); a {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}
