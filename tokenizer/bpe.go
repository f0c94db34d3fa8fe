package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel is the BPE model of tokenizer.json. Merges are ranked pairs of
// token ids; a word is merged lowest rank first (leftmost on ties) with a
// binary heap over a linked list of symbols, as the Hugging Face
// implementation does.
type bpeModel struct {
	vocab  map[string]int // model vocabulary (not added tokens)
	merges map[uint64]merge

	unk          int // -1 without unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	// byteLevel: words are raw bytes and each byte starts as the token of
	// its byte-level character (byteIDs); rawVocab maps the raw bytes of a
	// whole token to its id for ignore_merges.
	byteLevel bool
	byteIDs   [256]int32
	rawVocab  map[string]int

	fallbackIDs [256]int32 // <0xNN> tokens, -1 when missing

	// splitMark, when set, is a character no merge ever joins to a preceding
	// different character (SentencePiece's "▁" in Llama-2 vocabularies), so
	// a long word can be cut before each such character with the same
	// result; without a pre-tokenizer this keeps whole paragraphs from
	// becoming one huge word.
	splitMark string

	scratch sync.Pool // *bpeScratch
	cache   wordCache
}

// setSplitMark enables splitting before mark when no merge result holds
// another character directly followed by mark.
func (m *bpeModel) setSplitMark(mark string, results []string) {
	for _, r := range results {
		for i := 1; i < len(r); i++ {
			if strings.HasPrefix(r[i:], mark) && !strings.HasSuffix(r[:i], mark) {
				return
			}
		}
	}
	m.splitMark = mark
}

// encode appends the ids of one pre-tokenized piece, cut at splitMark.
func (m *bpeModel) encode(dst []int, word string) []int {
	if m.splitMark == "" {
		return m.encodeWord(dst, word)
	}
	start := 0
	for i := 1; i < len(word); {
		k := strings.Index(word[i:], m.splitMark)
		if k < 0 {
			break
		}
		i += k
		if !strings.HasSuffix(word[start:i], m.splitMark) {
			dst = m.encodeWord(dst, word[start:i])
			start = i
		}
		i += len(m.splitMark)
	}
	return m.encodeWord(dst, word[start:])
}

type merge struct {
	rank int32
	id   int32 // token produced by the merge
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type symbol struct {
	id         int32
	prev, next int32 // neighbour indices, -1 at the ends
	dead       bool
}

type heapItem struct {
	rank int32
	pos  int32 // index of the left symbol of the pair
	id   int32 // token the pair merges into
}

type bpeScratch struct {
	syms []symbol
	heap []heapItem
	ids  []int32
}

func (a heapItem) less(b heapItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

func (s *bpeScratch) push(it heapItem) {
	h := append(s.heap, it)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	s.heap = h
}

func (s *bpeScratch) pop() heapItem {
	h := s.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	s.heap = h
	return top
}

// maxCachedWord bounds the words kept in the cache; longer pieces rarely
// repeat and would only pin memory.
const maxCachedWord = 64

// encodeWord appends the ids of one pre-tokenized piece.
func (m *bpeModel) encodeWord(dst []int, word string) []int {
	if len(word) <= maxCachedWord {
		if ids, ok := m.cache.get(word); ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	sc, _ := m.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = new(bpeScratch)
	}
	ids := m.merge(sc, word)
	dst = slices.Grow(dst, len(ids))
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	if len(word) <= maxCachedWord {
		m.cache.put(word, ids)
	}
	if len(word) <= maxPooledWord {
		m.scratch.Put(sc)
	}
	return dst
}

// maxPooledWord bounds the words whose scratch goes back to the pool: a
// huge word's (tens of bytes per byte) is left to the collector rather
// than held for the next Encode.
const maxPooledWord = 64 << 10

// merge runs BPE on word and returns its ids in sc.ids.
func (m *bpeModel) merge(sc *bpeScratch, word string) []int32 {
	sc.ids = sc.ids[:0]
	if m.ignoreMerges {
		v := m.vocab
		if m.byteLevel {
			v = m.rawVocab
		}
		if id, ok := v[word]; ok {
			return append(sc.ids, int32(id))
		}
	}
	// Every byte is at most one symbol, and the heap starts with at most
	// one pair per symbol: sized once, not grown by doubling, which for a
	// long word cost a copy and twice the memory.
	syms := slices.Grow(sc.syms[:0], len(word))
	if m.byteLevel {
		for i := 0; i < len(word); i++ {
			syms = m.appendSymbol(syms, m.byteIDs[word[i]])
		}
	} else {
		syms = m.charSymbols(syms, word)
	}
	sc.syms = syms
	if len(syms) > 1 {
		sc.heap = slices.Grow(sc.heap[:0], len(syms))
		for i := 0; i+1 < len(syms); i++ {
			if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
				sc.push(heapItem{mg.rank, int32(i), mg.id})
			}
		}
		for len(sc.heap) > 0 {
			it := sc.pop()
			left := &syms[it.pos]
			if left.dead || left.next < 0 {
				continue
			}
			right := &syms[left.next]
			// A stale entry: one side has merged with something else since.
			if mg, ok := m.merges[pairKey(left.id, right.id)]; !ok || mg.id != it.id {
				continue
			}
			left.id = it.id
			right.dead = true
			left.next = right.next
			if right.next >= 0 {
				syms[right.next].prev = it.pos
			}
			if left.prev >= 0 {
				if mg, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
					sc.push(heapItem{mg.rank, left.prev, mg.id})
				}
			}
			if left.next >= 0 {
				if mg, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
					sc.push(heapItem{mg.rank, it.pos, mg.id})
				}
			}
		}
	}
	for i := range syms {
		if !syms[i].dead && syms[i].id >= 0 {
			sc.ids = append(sc.ids, syms[i].id)
		}
	}
	return sc.ids
}

// appendSymbol adds one initial symbol, standing for unk when id < 0 and
// fusing runs of unk when the model asks for it.
func (m *bpeModel) appendSymbol(syms []symbol, id int32) []symbol {
	if id < 0 {
		if m.unk < 0 {
			return syms // no unk token: the character is dropped, as upstream does
		}
		id = int32(m.unk)
		if m.fuseUnk && len(syms) > 0 && syms[len(syms)-1].id == id {
			return syms
		}
	}
	n := int32(len(syms))
	prev := n - 1
	if n > 0 {
		syms[n-1].next = n
	}
	return append(syms, symbol{id: id, prev: prev, next: -1})
}

// charSymbols splits word into characters looked up in the vocabulary, with
// the subword prefix/suffix and byte fallback.
func (m *bpeModel) charSymbols(syms []symbol, word string) []symbol {
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+n]
		key := ch
		if m.prefix != "" && i > 0 {
			key = m.prefix + key
		}
		if m.suffix != "" && i+n == len(word) {
			key += m.suffix
		}
		if id, ok := m.vocab[key]; ok {
			syms = m.appendSymbol(syms, int32(id))
		} else if m.byteFallback && m.hasFallback(ch) {
			for j := 0; j < len(ch); j++ {
				syms = m.appendSymbol(syms, m.fallbackIDs[ch[j]])
			}
		} else {
			syms = m.appendSymbol(syms, -1)
		}
		i += n
	}
	return syms
}

func (m *bpeModel) hasFallback(ch string) bool {
	for j := 0; j < len(ch); j++ {
		if m.fallbackIDs[ch[j]] < 0 {
			return false
		}
	}
	return true
}

// wordCache maps pre-token strings to their ids. It is bounded: once full it
// is emptied, which keeps memory flat on long inputs with many rare words.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const wordCacheMax = 1 << 17

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	cp := append([]int32(nil), ids...)
	key := strings.Clone(w) // w may point into a large input
	c.mu.Lock()
	if c.m == nil || len(c.m) >= wordCacheMax {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[key] = cp
	c.mu.Unlock()
}

// clear empties the cache (for measuring the uncached path).
func (c *wordCache) clear() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}
