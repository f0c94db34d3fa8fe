package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// decoder is one step of the decoder chain, mapping token strings to token
// strings as the Hugging Face decode_chain does.
type decoder interface {
	decode(toks []string) []string
}

// byteLevelDecoder maps byte-level characters back to bytes. A token with a
// character outside the mapping (an added token such as "<|im_end|>" usually
// maps fine; one with a plain space does not) is taken as raw text.
type byteLevelDecoder struct{ charByte map[rune]byte }

func (d byteLevelDecoder) decode(toks []string) []string {
	var b []byte
	for _, t := range toks {
		n := len(b)
		ok := true
		for _, r := range t {
			c, found := d.charByte[r]
			if !found {
				ok = false
				break
			}
			b = append(b, c)
		}
		if !ok {
			b = append(b[:n], t...)
		}
	}
	return []string{lossyUTF8(b)}
}

type replaceDecoder struct{ p pattern }

func (d replaceDecoder) decode(toks []string) []string {
	for i, t := range toks {
		toks[i] = d.p.replaceAll(t)
	}
	return toks
}

// byteFallbackDecoder turns runs of <0xNN> tokens into the text they spell,
// or one U+FFFD per byte when the run is not valid UTF-8.
type byteFallbackDecoder struct{}

func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(t[3])
	lo, ok2 := hexVal(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func (byteFallbackDecoder) decode(toks []string) []string {
	out := toks[:0:0]
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range toks {
		if b, ok := parseByteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

type fuseDecoder struct{}

func (fuseDecoder) decode(toks []string) []string { return []string{strings.Join(toks, "")} }

// stripDecoder removes up to start leading and stop trailing content
// characters from each token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decode(toks []string) []string {
	for i, t := range toks {
		for k := 0; k < d.start; k++ {
			r, n := utf8.DecodeRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[n:]
		}
		for k := 0; k < d.stop; k++ {
			r, n := utf8.DecodeLastRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[:len(t)-n]
		}
		toks[i] = t
	}
	return toks
}

// metaspaceDecoder turns the replacement character back into spaces and
// drops the space the pre-tokenizer prepended to the first token.
type metaspaceDecoder struct {
	repl       string
	stripFirst bool
}

func (d metaspaceDecoder) decode(toks []string) []string {
	for i, t := range toks {
		t = strings.ReplaceAll(t, d.repl, " ")
		if i == 0 && d.stripFirst {
			t = strings.TrimPrefix(t, " ")
		}
		toks[i] = t
	}
	return toks
}

// Stream decodes generated ids incrementally: Add returns only text that is
// complete, holding back bytes of a multi-byte character split across tokens.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	ids         []int  // context tokens already emitted, then pending ones
	ctxText     string // Decode of the context tokens
	one         [1]int
}

// NewStream returns a streaming decoder whose output concatenates to
// Decode(ids, false).
func (t *Tokenizer) NewStream() *Stream { return &Stream{t: t} }

// NewStreamSkipSpecial returns a streaming decoder whose output concatenates
// to Decode(ids, true).
func (t *Tokenizer) NewStreamSkipSpecial() *Stream { return &Stream{t: t, skipSpecial: true} }

// Add appends id and returns the text it completes, possibly "".
func (s *Stream) Add(id int) string {
	s.ids = append(s.ids, id)
	text := s.t.Decode(s.ids, s.skipSpecial)
	if strings.HasSuffix(text, "\uFFFD") {
		return ""
	}
	var out string
	switch {
	case strings.HasPrefix(text, s.ctxText):
		out = text[len(s.ctxText):]
	default:
		// Bytes that looked complete turned out to start an invalid
		// sequence; what was emitted cannot be taken back, so emit what
		// differs after the common prefix.
		n := 0
		for n < len(text) && n < len(s.ctxText) && text[n] == s.ctxText[n] {
			n++
		}
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		out = text[n:]
	}
	if out == "" {
		return ""
	}
	// Keep as context the tokens from the last one that decodes cleanly on
	// its own, so that decoders treating the first token specially (a
	// stripped leading space) see the same first token in both decodes and
	// the strip only ever applies at the very start of the stream.
	k := len(s.ids) - 1
	for k > 0 && !s.clean(s.ids[k]) {
		k--
	}
	s.ids = append(s.ids[:0], s.ids[k:]...)
	s.ctxText = s.t.Decode(s.ids, s.skipSpecial)
	return out
}

// clean reports whether id is a whole-character token: not a <0xNN> byte and
// decoding to valid text by itself.
func (s *Stream) clean(id int) bool {
	if _, isByte := parseByteToken(s.t.Token(id)); isByte {
		return false
	}
	s.one[0] = id
	return !strings.ContainsRune(s.t.Decode(s.one[:], s.skipSpecial), utf8.RuneError)
}

// Flush returns text still held back (an incomplete character at the end of
// generation, decoded with replacement characters) and resets the stream.
func (s *Stream) Flush() string {
	text := s.t.Decode(s.ids, s.skipSpecial)
	var out string
	if len(text) > len(s.ctxText) && strings.HasPrefix(text, s.ctxText) {
		out = text[len(s.ctxText):]
	}
	s.ids, s.ctxText = s.ids[:0], ""
	return out
}

// lossyUTF8 converts b to a string replacing each maximal invalid subpart
// with one U+FFFD, as Rust's String::from_utf8_lossy (and so the reference
// implementation) does.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefix(b[i:])
	}
	return sb.String()
}

// invalidPrefix returns the length of the maximal prefix of b (which does
// not start a valid character) that could begin a valid sequence, at least 1.
func invalidPrefix(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		n++
	}
	return n
}
