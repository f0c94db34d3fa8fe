package tokenizer

// textShrink is how many bytes of input one byte of normalized text may
// stand for, at most, under the normalizers that do not remove text: NFC
// and NFKC compose (a base and up to two combining marks, 5 bytes, into
// one character of 2 or more) and lowercasing shortens a few characters
// by a byte.
const textShrink = 4

// MinTokens returns a lower bound on the number of tokens Encode(text,
// false) returns, found without tokenizing: each token stands for at most
// the longest token's bytes of text (and, after a normalizer, textShrink
// bytes of input per byte). It is 0 for a tokenizer whose normalizer or
// pre-tokenizer may drop text (Strip, a Replace by something shorter, a
// Split that removes its matches), where text does not bound tokens. A
// caller rejects a prompt that cannot fit a context before spending the
// memory of tokenizing all of it.
func (t *Tokenizer) MinTokens(text string) int {
	per := t.maxTokenBytes()
	if per == 0 {
		return 0
	}
	return len(text) / per
}

// maxTokenBytes returns the most input bytes one token may stand for, 0
// when there is no bound (see MinTokens). Computed once, at Load.
func (t *Tokenizer) maxTokenBytes() int { return t.perToken }

// boundTokenBytes computes perToken for MinTokens.
func (t *Tokenizer) boundTokenBytes() int {
	longest := 1
	for _, s := range t.tokens {
		longest = max(longest, len(s))
	}
	for _, p := range t.pre {
		if s, ok := p.(*preSplit); ok && s.behavior == behaviorRemoved {
			return 0
		}
	}
	switch {
	case t.norm == nil:
		return longest
	case !keepsText(t.norm):
		return 0
	}
	return longest * textShrink
}

// keepsText reports whether n shortens text by at most textShrink times.
func keepsText(n normalizer) bool {
	switch n := n.(type) {
	case normSequence:
		for _, m := range n {
			if !keepsText(m) {
				return false
			}
		}
		return true
	case normReplace:
		return n.p.re == nil && len(n.p.content) >= len(n.p.lit)
	case normForm, normPrepend, normLowercase:
		return true
	}
	return false // Strip, and any normalizer added later until shown safe
}
