package grammar

import "unsafe"

// A frame is one open construct of the pushdown automaton: the root, an
// object, an array, a string, a number or a literal being matched. A
// state is the stack of frames; frames are small values so that a mask's
// walk over the vocabulary copies states cheaply.
type frame struct {
	kind fkind
	st   uint8  // the construct's state (the constants below)
	ws   uint8  // whitespace bytes in a row
	lo   uint8  // strings: the range of the next continuation byte
	hi   uint8  //
	_    uint8  //
	n    uint16 // objects: the properties passed; arrays: items (saturated); numbers: digits; strings: pending bytes
	node int32  // the grammar node, or for literals the trie node
}

type fkind uint8

const (
	fRoot fkind = iota
	fObject
	fArray
	fString
	fNumber
	fLiteral
	fKey // a literal over an object's property names
)

// Frame states.
const (
	// fRoot
	rStart uint8 = iota
	rDone
)

const (
	// fObject
	oOpen       uint8 = iota // after '{'
	oNeedKey                 // after ','
	oAfterKey                // a key being read or read, ':' next
	oAfterColon              // a value next
	oAfterValue              // ',' or '}' next
)

const (
	// fArray
	aOpen       uint8 = iota // after '['
	aNeedValue               // after ','
	aAfterValue              // ',' or ']' next
)

const (
	// fString
	sChar uint8 = iota // content, at a character boundary
	sEsc               // after '\'
	sHex               // in \uXXXX, n hex digits to go
	sCont              // in a multi-byte character, n bytes to go, the next in [lo, hi]
)

const (
	// fNumber
	nStart uint8 = iota
	nMinus
	nZero   // complete
	nInt    // complete
	nDot    // after '.'
	nFrac   // complete
	nExp    // after 'e'
	nExpSgn // after the exponent's sign
	nExpDig // complete
)

// state is a stack of frames, the root at the bottom.
type state []frame

// result of a frame's step.
type outcome uint8

const (
	accept   outcome = iota // the byte was taken
	reject                  // the byte cannot come next
	popRetry                // the frame is complete: pop it and give the byte to its parent
)

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// step feeds one byte; it returns the new state (reusing s's array) and
// false where the byte cannot come next, leaving s in an unspecified
// state.
func (g *Grammar) step(s state, b byte) (state, bool) {
	for {
		top := len(s) - 1
		f := &s[top]
		var out outcome
		switch f.kind {
		case fRoot:
			if f.st == rDone {
				return s, false
			}
			f.st = rDone
			return g.startValue(s, g.root, b)
		case fObject:
			s, out = g.stepObject(s, b)
		case fArray:
			s, out = g.stepArray(s, b)
		case fString:
			out = stepString(f, b)
			if out == accept && f.st == sChar && f.n == 1 { // the closing quote
				return g.pop(s), true
			}
		case fNumber:
			out = g.stepNumber(f, b)
		case fLiteral, fKey:
			out = g.stepLiteral(f, b)
			if out == accept {
				t := &g.tries[f.node]
				if len(t.edges) == 0 { // complete, nothing can extend it
					return g.popWith(s, t.term), true
				}
			}
		}
		switch out {
		case accept:
			return s, true
		case reject:
			return s, false
		}
		// popRetry: only numbers and literals end without a byte of
		// their own; the parent sees the byte.
		t := int32(-1)
		if f.kind == fLiteral {
			t = g.tries[f.node].term
		}
		s = g.popWith(s, t)
	}
}

func (g *Grammar) pop(s state) state { return g.popWith(s, -1) }

// popWith closes the top frame; a key tells its object which property it
// named, and a tagged union's tag which variant the object continues as.
func (g *Grammar) popWith(s state, term int32) state {
	done := s[len(s)-1]
	s = s[:len(s)-1]
	switch p := &s[len(s)-1]; {
	case done.kind == fKey:
		p.node2(term)
	case done.kind == fLiteral && p.kind == fObject && term >= 0:
		if vs := g.nodes[p.node].variants; vs != nil {
			p.node = vs[term]
		}
	}
	return s
}

// node2 records in an object's frame the property its key named: the
// object's passed count becomes the key's index, and the value's node is
// looked up from it after ':'.
func (f *frame) node2(prop int32) { f.n = uint16(prop) }

// startValue pushes the frame of a value of node n that begins with b.
func (g *Grammar) startValue(s state, n int32, b byte) (state, bool) {
	nd := &g.nodes[n]
	for nd.kind == kUnion { // never a loop: newUnion refuses one
		a := nd.first[b]
		if a < 0 {
			return s, false
		}
		n = nd.alts[a]
		nd = &g.nodes[n]
	}
	if len(s) >= MaxDepth {
		return s, false
	}
	switch nd.kind {
	case kObject:
		if b != '{' {
			return s, false
		}
		return append(s, frame{kind: fObject, st: oOpen, node: n}), true
	case kArray:
		if b != '[' {
			return s, false
		}
		return append(s, frame{kind: fArray, st: aOpen, node: n}), true
	case kString:
		if b != '"' {
			return s, false
		}
		return append(s, frame{kind: fString, st: sChar}), true
	case kNumber:
		s = append(s, frame{kind: fNumber, st: nStart, node: n})
		if g.stepNumber(&s[len(s)-1], b) != accept {
			return s, false
		}
		return s, true
	case kLiteral:
		s = append(s, frame{kind: fLiteral, node: nd.lit})
		return g.step(s, b)
	}
	return s, false
}

// space counts b against the frame's run of white space: ok reports that
// b is white space, taken (accept) while the run stays within
// MaxWhitespace, else reject; any other byte ends the run.
func (f *frame) space(b byte) (out outcome, ok bool) {
	if !isWS(b) {
		f.ws = 0
		return accept, false
	}
	if f.ws >= MaxWhitespace {
		return reject, true
	}
	f.ws++
	return accept, true
}

func (g *Grammar) stepObject(s state, b byte) (state, outcome) {
	f := &s[len(s)-1]
	nd := &g.nodes[f.node]
	if out, ok := f.space(b); ok {
		return s, out
	}
	switch f.st {
	case oOpen, oNeedKey:
		if b == '}' && f.st == oOpen && g.mayClose(nd, f.n) {
			return g.pop(s), accept
		}
		if b != '"' {
			return s, reject
		}
		f.st = oAfterKey
		if nd.mapValue >= 0 {
			if len(s) >= MaxDepth {
				return s, reject
			}
			return append(s, frame{kind: fString, st: sChar}), accept
		}
		if int(f.n) >= len(nd.keys) {
			return s, reject
		}
		k := nd.keys[f.n]
		if len(g.tries[k].edges) == 0 {
			return s, reject
		}
		s = append(s, frame{kind: fKey, node: k})
		s, ok := g.step(s, b)
		if !ok {
			return s, reject
		}
		return s, accept
	case oAfterKey:
		if b != ':' {
			return s, reject
		}
		f.st = oAfterColon
		return s, accept
	case oAfterColon:
		v := nd.mapValue
		if v < 0 {
			v = nd.props[f.n].node
			f.n++ // the property is passed
		}
		f.st = oAfterValue
		s, ok := g.startValue(s, v, b)
		if !ok {
			return s, reject
		}
		return s, accept
	case oAfterValue:
		switch {
		case b == '}' && g.mayClose(nd, f.n):
			return g.pop(s), accept
		case b == ',' && (nd.mapValue >= 0 || int(f.n) < len(nd.props)):
			f.st = oNeedKey
			return s, accept
		}
	}
	return s, reject
}

// mayClose reports whether an object that passed its first n properties
// may end.
func (g *Grammar) mayClose(nd *node, n uint16) bool {
	return nd.mapValue >= 0 || nd.reqAt[n] == len(nd.props)
}

func (g *Grammar) stepArray(s state, b byte) (state, outcome) {
	f := &s[len(s)-1]
	nd := &g.nodes[f.node]
	if out, ok := f.space(b); ok {
		return s, out
	}
	switch f.st {
	case aOpen, aNeedValue:
		if b == ']' && f.st == aOpen && nd.minItems == 0 {
			return g.pop(s), accept
		}
		if f.st == aOpen && nd.maxItems == 0 {
			return s, reject
		}
		// The count saturates past the bounds, so that states differ
		// only where the bounds tell them apart.
		if lim := max(nd.minItems, nd.maxItems); int(f.n) < lim {
			f.n++
		}
		f.st = aAfterValue
		s, ok := g.startValue(s, nd.items, b)
		if !ok {
			return s, reject
		}
		return s, accept
	case aAfterValue:
		switch {
		case b == ']' && int(f.n) >= nd.minItems:
			return g.pop(s), accept
		case b == ',' && (nd.maxItems < 0 || int(f.n) < nd.maxItems):
			f.st = aNeedValue
			return s, accept
		}
	}
	return s, reject
}

// stepString takes one byte of a string's content (after the opening
// quote). A closing quote sets st sChar and n 1, for step to pop.
func stepString(f *frame, b byte) outcome {
	switch f.st {
	case sChar:
		switch {
		case b == '"':
			f.n = 1
			return accept
		case b == '\\':
			f.st = sEsc
			return accept
		case b < 0x20:
			return reject
		case b < 0x80:
			return accept
		}
		// A UTF-8 lead byte: the bytes to follow, and the range of the
		// first (RFC 3629's table, no overlongs, no surrogates).
		switch {
		case 0xC2 <= b && b <= 0xDF:
			f.n, f.lo, f.hi = 1, 0x80, 0xBF
		case b == 0xE0:
			f.n, f.lo, f.hi = 2, 0xA0, 0xBF
		case 0xE1 <= b && b <= 0xEC, b == 0xEE, b == 0xEF:
			f.n, f.lo, f.hi = 2, 0x80, 0xBF
		case b == 0xED:
			f.n, f.lo, f.hi = 2, 0x80, 0x9F
		case b == 0xF0:
			f.n, f.lo, f.hi = 3, 0x90, 0xBF
		case 0xF1 <= b && b <= 0xF3:
			f.n, f.lo, f.hi = 3, 0x80, 0xBF
		case b == 0xF4:
			f.n, f.lo, f.hi = 3, 0x80, 0x8F
		default:
			return reject
		}
		f.st = sCont
		return accept
	case sCont:
		if b < f.lo || b > f.hi {
			return reject
		}
		f.n--
		f.lo, f.hi = 0x80, 0xBF
		if f.n == 0 {
			f.st, f.lo, f.hi = sChar, 0, 0
		}
		return accept
	case sEsc:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.st = sChar
			return accept
		case 'u':
			f.st, f.n = sHex, 4
			return accept
		}
		return reject
	case sHex:
		if _, ok := hexDigit(b); !ok {
			return reject
		}
		f.n--
		if f.n == 0 {
			f.st = sChar
		}
		return accept
	}
	return reject
}

func hexDigit(b byte) (byte, bool) {
	switch {
	case '0' <= b && b <= '9', 'a' <= b && b <= 'f', 'A' <= b && b <= 'F':
		return b, true
	}
	return 0, false
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func (g *Grammar) stepNumber(f *frame, b byte) outcome {
	integer := g.nodes[f.node].integer
	switch f.st {
	case nStart, nMinus:
		switch {
		case b == '-' && f.st == nStart:
			f.st = nMinus
		case b == '0':
			f.st = nZero
		case '1' <= b && b <= '9':
			f.st, f.n = nInt, 1
		default:
			return reject
		}
		return accept
	case nZero, nInt:
		switch {
		case isDigit(b) && f.st == nInt:
			if f.n >= maxIntDigits {
				return reject
			}
			f.n++
			return accept
		case b == '.' && !integer:
			f.st, f.n = nDot, 0
			return accept
		case (b == 'e' || b == 'E') && !integer:
			f.st, f.n = nExp, 0
			return accept
		}
		return popRetry
	case nDot, nFrac:
		switch {
		case isDigit(b):
			if f.n >= maxFracDigits {
				return reject
			}
			f.st = nFrac
			f.n++
			return accept
		case f.st == nFrac && (b == 'e' || b == 'E'):
			f.st, f.n = nExp, 0
			return accept
		case f.st == nFrac:
			return popRetry
		}
		return reject
	case nExp:
		switch {
		case b == '+' || b == '-':
			f.st = nExpSgn
			return accept
		case isDigit(b):
			f.st, f.n = nExpDig, 1
			return accept
		}
		return reject
	case nExpSgn, nExpDig:
		switch {
		case isDigit(b):
			if f.n >= maxExpDigits {
				return reject
			}
			f.st = nExpDig
			f.n++
			return accept
		case f.st == nExpDig:
			return popRetry
		}
		return reject
	}
	return reject
}

func (g *Grammar) stepLiteral(f *frame, b byte) outcome {
	t := &g.tries[f.node]
	for _, e := range t.edges {
		if e.b == b {
			f.node = e.next
			return accept
		}
	}
	if t.term >= 0 {
		return popRetry
	}
	return reject
}

// complete reports whether the frame's value could end here (a number or
// a literal that the next byte might still extend).
func (g *Grammar) complete(f *frame) bool {
	switch f.kind {
	case fNumber:
		switch f.st {
		case nZero, nInt, nFrac, nExpDig:
			return true
		}
	case fLiteral:
		return g.tries[f.node].term >= 0
	}
	return false
}

// accepting reports whether the output so far is a whole document: the
// root's value read, or one that may end here.
func (g *Grammar) accepting(s state) bool {
	switch len(s) {
	case 1:
		return s[0].st == rDone
	case 2:
		return g.complete(&s[1])
	}
	return false
}

// done reports whether the document is complete and nothing may follow.
func (g *Grammar) done(s state) bool { return len(s) == 1 && s[0].st == rDone }

// key returns the state's bytes, the key of a mask cache.
func (s state) key() string {
	if len(s) == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(frame{})))
}
