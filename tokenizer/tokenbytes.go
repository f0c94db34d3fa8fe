package tokenizer

import "strings"

// TokenBytes returns the bytes token id adds to the text in the middle of
// a decode (a SentencePiece token's leading space included), raw: a
// byte-level token that holds part of a UTF-8 character gives that part.
// Special added tokens, and ids outside the vocabulary, give nil: they are
// markup, not text. A constrained decoder matches these bytes.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) || t.special[id] {
		return nil
	}
	tok := t.tokens[id]
	if _, added := t.addedID[id]; added {
		return []byte(tok)
	}
	for _, d := range t.decoder {
		switch d := d.(type) {
		case byteLevelDecoder:
			b := make([]byte, 0, len(tok))
			for _, r := range tok {
				c, ok := d.charByte[r]
				if !ok {
					return []byte(tok) // raw text, as the decoder takes it
				}
				b = append(b, c)
			}
			return b
		case byteFallbackDecoder:
			if b, ok := parseByteToken(tok); ok {
				return []byte{b}
			}
		}
	}
	// The text after the token, where decoders treat a first token
	// specially (a stripped leading space): decode it twice and keep what
	// the second adds.
	one, two := t.Decode([]int{id}, false), t.Decode([]int{id, id}, false)
	if s, ok := strings.CutPrefix(two, one); ok {
		return []byte(s)
	}
	return []byte(one)
}
