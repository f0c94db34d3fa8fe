package tokenizer

import (
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a segment of input text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type normSequence []normalizer

func (q normSequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type normForm struct{ f norm.Form }

func (n normForm) normalize(s string) string { return n.f.String(s) }

type normPrepend struct{ prefix string }

func (n normPrepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

type normReplace struct{ p pattern }

func (n normReplace) normalize(s string) string { return n.p.replaceAll(s) }

type normLowercase struct{}

func (normLowercase) normalize(s string) string { return strings.ToLower(s) }

type normStrip struct{ left, right bool }

func (n normStrip) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, isS)
	}
	if n.right {
		s = strings.TrimRightFunc(s, isS)
	}
	return s
}

// pattern is a Replace/Split pattern: a literal string or a regex.
type pattern struct {
	lit     string
	re      *regexp2.Regexp
	content string // replacement, for Replace
}

// matches returns the byte spans of the non-overlapping matches in s.
func (p pattern) matches(s string) [][2]int {
	var out [][2]int
	if p.re == nil {
		if p.lit == "" {
			return nil
		}
		for i := 0; ; {
			j := strings.Index(s[i:], p.lit)
			if j < 0 {
				return out
			}
			out = append(out, [2]int{i + j, i + j + len(p.lit)})
			i += j + len(p.lit)
		}
	}
	// regexp2 reports rune offsets; walk s once to turn them into bytes.
	m, err := p.re.FindStringMatch(s)
	byteAt, runeAt := 0, 0
	toByte := func(r int) int {
		for runeAt < r && byteAt < len(s) {
			_, n := utf8.DecodeRuneInString(s[byteAt:])
			byteAt += n
			runeAt++
		}
		return byteAt
	}
	for err == nil && m != nil {
		if m.Length > 0 {
			b := toByte(m.Index)
			e := toByte(m.Index + m.Length)
			out = append(out, [2]int{b, e})
		}
		m, err = p.re.FindNextMatch(m)
	}
	return out
}

func (p pattern) replaceAll(s string) string {
	if p.re == nil {
		if p.lit == "" {
			return s
		}
		return strings.ReplaceAll(s, p.lit, p.content)
	}
	spans := p.matches(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	prev := 0
	for _, sp := range spans {
		b.WriteString(s[prev:sp[0]])
		b.WriteString(p.content)
		prev = sp[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

// preTokenizer splits each piece into smaller pieces. first reports whether
// the text began the original input.
type preTokenizer interface {
	split(pieces []string, first bool) []string
}

type splitBehavior int

const (
	behaviorIsolated splitBehavior = iota
	behaviorRemoved
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

type preSplit struct {
	p        pattern
	scanner  *splitScanner // when the regex is one scanned by hand
	behavior splitBehavior
	invert   bool
}

func (ps *preSplit) spans(s string) [][2]int {
	if ps.scanner == nil {
		return ps.p.matches(s)
	}
	var out [][2]int
	sc := splitScanner{maxDigits: ps.scanner.maxDigits, s: s}
	off := 0
	for {
		m, ok := sc.next()
		if !ok {
			return out
		}
		out = append(out, [2]int{off, off + len(m)})
		off += len(m)
	}
}

func (ps *preSplit) split(pieces []string, _ bool) []string {
	var out []string
	for _, s := range pieces {
		out = splitBy(out, s, ps.spans(s), ps.behavior, ps.invert)
	}
	return out
}

// splitBy appends the pieces of s given its match spans, with the Hugging
// Face SplitDelimiterBehavior semantics.
func splitBy(out []string, s string, spans [][2]int, behavior splitBehavior, invert bool) []string {
	type part struct {
		s       string
		isMatch bool
	}
	var parts []part
	prev := 0
	for _, sp := range spans {
		if sp[0] > prev {
			parts = append(parts, part{s[prev:sp[0]], invert})
		}
		parts = append(parts, part{s[sp[0]:sp[1]], !invert})
		prev = sp[1]
	}
	if prev < len(s) {
		parts = append(parts, part{s[prev:], invert})
	}
	switch behavior {
	case behaviorIsolated:
		for _, p := range parts {
			out = append(out, p.s)
		}
	case behaviorRemoved:
		for _, p := range parts {
			if !p.isMatch {
				out = append(out, p.s)
			}
		}
	case behaviorMergedWithPrevious:
		prevGap := false
		for _, p := range parts {
			if p.isMatch && prevGap {
				out[len(out)-1] += p.s
			} else {
				out = append(out, p.s)
			}
			prevGap = !p.isMatch
		}
	case behaviorMergedWithNext:
		// A match joins the piece after it unless that piece is a match too.
		pending, hasPending := "", false
		for _, p := range parts {
			if p.isMatch {
				if hasPending {
					out = append(out, pending)
				}
				pending, hasPending = p.s, true
				continue
			}
			out = append(out, pending+p.s)
			pending, hasPending = "", false
		}
		if hasPending {
			out = append(out, pending)
		}
	case behaviorContiguous:
		prevMatch := false
		for i, p := range parts {
			if p.isMatch && prevMatch && i > 0 {
				out[len(out)-1] += p.s
			} else {
				out = append(out, p.s)
			}
			prevMatch = p.isMatch
		}
	}
	return out
}

// preByteLevel is the ByteLevel pre-tokenizer. The byte-to-character mapping
// itself is folded into the model, which works on raw bytes; this step only
// adds the prefix space and the optional GPT-2 split.
type preByteLevel struct {
	addPrefixSpace bool
	regex          *preSplit // GPT-2 split when use_regex
}

func (b preByteLevel) split(pieces []string, first bool) []string {
	if b.addPrefixSpace {
		for i, p := range pieces {
			if p != "" && p[0] != ' ' {
				pieces[i] = " " + p
			}
		}
	}
	if b.regex != nil {
		return b.regex.split(pieces, first)
	}
	return pieces
}

// preMetaspace replaces spaces with the replacement character, prepends it
// per prepend_scheme and optionally splits before each replacement.
type preMetaspace struct {
	repl    string
	prepend string // "always", "first" or "never"
	splitOn bool
}

func (m preMetaspace) split(pieces []string, first bool) []string {
	var out []string
	for i, p := range pieces {
		p = strings.ReplaceAll(p, " ", m.repl)
		if (m.prepend == "always" || m.prepend == "first" && first && i == 0) && !strings.HasPrefix(p, m.repl) {
			p = m.repl + p
		}
		if !m.splitOn {
			out = append(out, p)
			continue
		}
		var spans [][2]int
		for j := 0; ; {
			k := strings.Index(p[j:], m.repl)
			if k < 0 {
				break
			}
			spans = append(spans, [2]int{j + k, j + k + len(m.repl)})
			j += k + len(m.repl)
		}
		out = splitBy(out, p, spans, behaviorMergedWithNext, false)
	}
	return out
}

// preDigits splits digits from other characters, one piece per digit when
// individual.
type preDigits struct{ individual bool }

func (d preDigits) split(pieces []string, _ bool) []string {
	var out []string
	for _, p := range pieces {
		var spans [][2]int
		for i := 0; i < len(p); {
			r, n := decodeAt(p, i)
			if !isN(r) {
				i += n
				continue
			}
			j := i + n
			for !d.individual && j < len(p) {
				r2, n2 := decodeAt(p, j)
				if !isN(r2) {
					break
				}
				j += n2
			}
			spans = append(spans, [2]int{i, j})
			i = j
		}
		out = splitBy(out, p, spans, behaviorIsolated, false)
	}
	return out
}

// postProcessor adds special tokens around an encoded single sequence.
type postProcessor struct {
	prefix, suffix []int
}

func (p postProcessor) apply(ids []int) []int {
	if len(p.prefix) == 0 && len(p.suffix) == 0 {
		return ids
	}
	out := make([]int, 0, len(p.prefix)+len(ids)+len(p.suffix))
	out = append(out, p.prefix...)
	out = append(out, ids...)
	return append(out, p.suffix...)
}
