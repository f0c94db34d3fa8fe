package grammar

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// A Vocab is a tokenizer's vocabulary as the bytes each token adds to the
// text, in a trie: a mask walks the prefixes tokens share once. Build it
// once per tokenizer; it is immutable and safe for concurrent use.
type Vocab struct {
	size  int     // token ids are 0..size-1
	order []int32 // the ids of the tokens with bytes, in byte order
	nodes []vnode // the trie, nodes[0] its root (the empty prefix)
	none  []int32 // the ids without bytes (special tokens), never allowed

	infOnce sync.Once
	infs    []float32 // size times -Inf, to clear logits by copy
}

// negInf returns size times -Inf.
func (v *Vocab) negInf() []float32 {
	v.infOnce.Do(func() {
		v.infs = make([]float32, v.size)
		for i := range v.infs {
			v.infs[i] = float32(math.Inf(-1))
		}
	})
	return v.infs
}

// vnode is a trie node: the prefix of the tokens order[lo:hi], of which
// the first end ones end here; children are nodes[child:child+nchild].
type vnode struct {
	lo, hi        int32
	child, nchild int32
	end           int32
	b             byte
	// plain: every token below continues from here with whole UTF-8
	// characters that a JSON string holds unescaped, so that inside a
	// string all of them are allowed without a walk.
	plain bool
}

// NewVocab builds the trie of a vocabulary: tokens[id] is the bytes token
// id adds to the text, nil (or empty) for a token that never may be
// generated under a grammar (special tokens; end-of-sequence tokens are
// passed to NewMatcher).
func NewVocab(tokens [][]byte) *Vocab {
	v := &Vocab{size: len(tokens)}
	for id, t := range tokens {
		if len(t) == 0 {
			v.none = append(v.none, int32(id))
			continue
		}
		v.order = append(v.order, int32(id))
	}
	slices.SortStableFunc(v.order, func(a, b int32) int { return bytes.Compare(tokens[a], tokens[b]) })
	// plainAt[off[i]+d]: token order[i]'s bytes from d on are plain
	// string content.
	off := make([]int, len(v.order)+1)
	for i, id := range v.order {
		off[i+1] = off[i] + len(tokens[id]) + 1
	}
	plainAt := make([]bool, off[len(v.order)])
	for i, id := range v.order {
		t, ok := tokens[id], plainAt[off[i]:off[i+1]]
		ok[len(t)] = true
		for p := len(t) - 1; p >= 0; p-- {
			c := t[p]
			switch {
			case c < 0x80:
				ok[p] = c >= 0x20 && c != '"' && c != '\\' && ok[p+1]
			case utf8.RuneStart(c):
				r, n := utf8.DecodeRune(t[p:])
				ok[p] = r != utf8.RuneError && ok[p+n]
			}
		}
	}
	// Breadth first, so that each node's children are contiguous.
	type item struct {
		node  int32
		depth int
	}
	v.nodes = []vnode{{lo: 0, hi: int32(len(v.order))}}
	queue := []item{{0, 0}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		nd := v.nodes[it.node]
		i := nd.lo
		for i < nd.hi && len(tokens[v.order[i]]) == it.depth {
			i++
		}
		end := i - nd.lo
		first := int32(len(v.nodes))
		for i < nd.hi {
			b := tokens[v.order[i]][it.depth]
			j := i + 1
			for j < nd.hi && tokens[v.order[j]][it.depth] == b {
				j++
			}
			v.nodes = append(v.nodes, vnode{lo: i, hi: j, b: b})
			queue = append(queue, item{int32(len(v.nodes) - 1), it.depth + 1})
			i = j
		}
		p := &v.nodes[it.node]
		p.end, p.child, p.nchild = end, first, int32(len(v.nodes))-first
		p.plain = true
		for k := nd.lo; k < nd.hi; k++ {
			if !plainAt[off[k]+it.depth] {
				p.plain = false
				break
			}
		}
	}
	return v
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return v.size }

// Masks computes the masks of one grammar over one vocabulary and keeps
// them by automaton state (within a limit), for all the grammar's
// matchers: a state's mask is computed once. It is safe for concurrent
// use.
type Masks struct {
	g *Grammar
	v *Vocab

	mu    sync.Mutex
	cache map[string][]uint64
	limit int // masks kept at most
	pool  []*walker
}

// maskCacheBytes bounds the memory of a Masks' cache.
const maskCacheBytes = 8 << 20

// NewMasks returns the masks of g over v.
func NewMasks(g *Grammar, v *Vocab) *Masks {
	words := (len(v.order) + 63) / 64
	return &Masks{g: g, v: v, cache: map[string][]uint64{}, limit: max(16, maskCacheBytes/(8*max(words, 1)))}
}

// walker is the scratch of a mask's walk: a state per trie depth.
type walker struct {
	bufs   [][]frame
	sorted []uint64 // the mask in byte order
}

// mask returns the mask of state s: bit id set where token id may come
// next. The slice is shared; callers only read it.
func (m *Masks) mask(s state) []uint64 {
	k := s.key()
	m.mu.Lock()
	if mk, ok := m.cache[k]; ok {
		m.mu.Unlock()
		return mk
	}
	var w *walker
	if n := len(m.pool); n > 0 {
		w, m.pool = m.pool[n-1], m.pool[:n-1]
	} else {
		w = &walker{}
	}
	m.mu.Unlock()

	// The walk marks tokens in byte order (a subtree is a range), the
	// mask is by id (so that Apply runs through the logits in order).
	v := m.v
	if w.sorted == nil {
		w.sorted = make([]uint64, (len(v.order)+63)/64)
	}
	clear(w.sorted)
	w.walk(m.g, v, 0, s, 0, w.sorted)
	mk := make([]uint64, (v.size+63)/64)
	for i, word := range w.sorted {
		for word != 0 {
			j := i*64 + bits.TrailingZeros64(word)
			word &= word - 1
			id := v.order[j]
			mk[id/64] |= 1 << (id % 64)
		}
	}

	m.mu.Lock()
	if len(m.cache) >= m.limit {
		for old := range m.cache { // drop one: states repeat in runs
			delete(m.cache, old)
			break
		}
	}
	m.cache[strings.Clone(k)] = mk // k aliases the state
	m.pool = append(m.pool, w)
	m.mu.Unlock()
	return mk
}

func setRange(mk []uint64, lo, hi int32) {
	for i := lo; i < hi; {
		w, b := i/64, i%64
		if b == 0 && hi-i >= 64 {
			mk[w] = ^uint64(0)
			i += 64
			continue
		}
		mk[w] |= 1 << b
		i++
	}
}

// walk marks the tokens below trie node n that may follow state s.
func (w *walker) walk(g *Grammar, v *Vocab, n int32, s state, depth int, mk []uint64) {
	for len(w.bufs) <= depth+1 {
		w.bufs = append(w.bufs, make([]frame, 0, MaxDepth+2))
	}
	nd := &v.nodes[n]
	for c := nd.child; c < nd.child+nd.nchild; c++ {
		cn := &v.nodes[c]
		t := append(w.bufs[depth+1][:0], s...)
		t, ok := g.step(t, cn.b)
		w.bufs[depth+1] = t[:0]
		if !ok {
			continue
		}
		if top := &t[len(t)-1]; cn.plain && top.kind == fString && top.st == sChar {
			setRange(mk, cn.lo, cn.hi)
			continue
		}
		setRange(mk, cn.lo, cn.lo+cn.end)
		if cn.nchild > 0 {
			w.walk(g, v, c, t, depth+1, mk)
		}
	}
}

// A Matcher follows one generation under a grammar: Apply masks the
// logits of the next token, Advance takes the token sampled. It is used
// by one goroutine at a time.
type Matcher struct {
	m       *Masks
	s       state
	eos     []int32
	tokens  func(id int) []byte
	ended   bool
	scratch []float32
	ids     []int32
}

// NewMatcher starts a generation. eos are the end-of-sequence tokens,
// allowed where the document is complete; tokenBytes returns a token's
// bytes as the Vocab has them.
func (m *Masks) NewMatcher(eos []int, tokenBytes func(id int) []byte) *Matcher {
	mt := &Matcher{m: m, tokens: tokenBytes, s: make(state, 1, MaxDepth+2)}
	for _, id := range eos {
		mt.eos = append(mt.eos, int32(id))
	}
	return mt
}

// ErrNoToken is Apply's error where no token can continue the document:
// the vocabulary lacks the bytes the grammar needs.
var ErrNoToken = errors.New("grammar: no token of the vocabulary continues the document")

// Apply sets to -Inf the logits of the tokens that cannot come next:
// tokens whose bytes would make the text no prefix of a document of the
// grammar, and end-of-sequence tokens until the document is complete.
func (mt *Matcher) Apply(logits []float32) error {
	v := mt.m.v
	if len(logits) < v.size {
		return fmt.Errorf("grammar: %d logits for a vocabulary of %d", len(logits), v.size)
	}
	inf := float32(math.Inf(-1))
	var mk []uint64
	if !mt.m.g.done(mt.s) {
		mk = mt.m.mask(mt.s)
	}
	allowed := 0
	for _, w := range mk {
		allowed += bits.OnesCount64(w)
	}
	acc := mt.m.g.accepting(mt.s)
	if allowed == 0 && (!acc || len(mt.eos) == 0) {
		return ErrNoToken
	}
	if acc {
		for _, id := range mt.eos {
			mt.ids = append(mt.ids, id)
			mt.scratch = append(mt.scratch, logits[id])
		}
	}
	// One pass in id order: whole words of 64 tokens are kept as they
	// are, runs of cleared words copied over from -Inf.
	words := (v.size + 63) / 64
	for w := 0; w < words; {
		var word uint64
		if mk != nil {
			word = mk[w]
		}
		switch word {
		case ^uint64(0):
			w++
		case 0:
			e := w + 1
			for e < words && (mk == nil || mk[e] == 0) {
				e++
			}
			copy(logits[w*64:min(e*64, v.size)], v.negInf())
			w = e
		default:
			l := logits[w*64 : min(w*64+64, v.size)]
			for z := ^word; z != 0; z &= z - 1 {
				if i := bits.TrailingZeros64(z); i < len(l) {
					l[i] = inf
				}
			}
			w++
		}
	}
	for i := v.size; i < len(logits); i++ {
		logits[i] = inf // padding of the model's vocabulary
	}
	for i, id := range mt.ids {
		logits[id] = mt.scratch[i]
	}
	mt.ids, mt.scratch = mt.ids[:0], mt.scratch[:0]
	return nil
}

// Advance moves past token id, which Apply allowed. An end-of-sequence
// token ends the document, which must be complete; any other token's
// bytes must continue it.
func (mt *Matcher) Advance(id int) error {
	if slices.Contains(mt.eos, int32(id)) {
		if !mt.m.g.accepting(mt.s) {
			return fmt.Errorf("grammar: end of sequence (token %d) before the document is complete", id)
		}
		mt.ended = true
		return nil
	}
	b := mt.tokens(id)
	if len(b) == 0 {
		return fmt.Errorf("grammar: token %d has no text to match", id)
	}
	s := mt.s
	for i, c := range b {
		var ok bool
		if s, ok = mt.m.g.step(s, c); !ok {
			return fmt.Errorf("grammar: token %d (%q) does not continue the document at its byte %d", id, b, i)
		}
	}
	mt.s = s
	return nil
}

// Done reports whether the document is complete and nothing may follow
// it (a closed object or array, a string, a literal), or an
// end-of-sequence token ended it: generation stops here.
func (mt *Matcher) Done() bool { return mt.ended || mt.m.g.done(mt.s) }

// Accepting reports whether the text so far is a whole document (a
// number may still go on).
func (mt *Matcher) Accepting() bool { return mt.ended || mt.m.g.accepting(mt.s) }
