package attention

// Causal multi-head attention (with grouped-query heads) over a sequence's
// paged KV cache. Keys are cached before RoPE and rotated here, block by
// block, at their absolute positions.

import (
	"fmt"
	"math"
	"sync"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	kern "github.com/kakeya-ai/kakeya/kernels/cpu"
)

// queryChunk is how many query tokens one task handles: the rotated keys of
// a block are reused across queryChunk tokens times the group's heads.
const queryChunk = 8

// attention runs attention for one sequence at a time, with scratch memory
// from its Scratch. It is not safe for concurrent use.
type attention struct {
	p         compute.AttentionParams
	group     int
	scale     float32
	blockSize int
	maxCtx    int
	pool      *kern.Pool
	scratch   chan *scratch
	t         task
}

type scratch struct {
	scores []float32 // [queryChunk][group][maxCtx]
	q, o   []float32 // a chunk's query and output rows, [queryChunk][group][HeadDim]
	dec    []float32 // a decoded block
	rot    []float32 // the block's keys after RoPE
	rots   []float32 // codec.MaxBlocks blocks' keys after RoPE, when decoded at once
	// A BlocksDecoder call's arguments, here rather than on the stack,
	// where an interface call would move them to the heap each time.
	bParts   [codec.MaxBlocks]*part
	bDst     [codec.MaxBlocks][]float32
	bSrc     [codec.MaxBlocks][]byte
	bCos     [codec.MaxBlocks][]float32
	bSin     [codec.MaxBlocks][]float32
	bLo, bHi [codec.MaxBlocks]int
	runSrc   [][]byte // a RunAttender call's blocks
	runNext  [][]byte // the values of a ScoreRun call's blocks, for it to prefetch
}

// A Scratch is the scratch memory of the attentions of one shape (query
// heads per KV head, head dimension, block size, context) that run on one
// pool: a set per pool worker, plus one for a call the pool runs inline
// while busy, which every sequence's attention of that shape takes from
// rather than holding its own (about 22 MB per sequence for Qwen2.5-0.5B
// at a 32k context on 2 threads). A call that finds every set in use
// waits for one. It is safe for concurrent use.
type Scratch struct {
	group, headDim, blockSize, maxCtx int
	ch                                chan *scratch
}

// NewScratch returns the scratch of attentions of p's shape on pool.
func NewScratch(pool *kern.Pool, p compute.AttentionParams) *Scratch {
	group := 1
	if p.KVHeads > 0 && p.Heads >= p.KVHeads {
		group = p.Heads / p.KVHeads
	}
	s := &Scratch{group: group, headDim: p.HeadDim, blockSize: p.BlockSize, maxCtx: p.MaxContext}
	n := pool.Threads() + 1
	s.ch = make(chan *scratch, n)
	for range n {
		s.ch <- &scratch{
			scores:  make([]float32, queryChunk*group*p.MaxContext),
			q:       make([]float32, queryChunk*group*p.HeadDim),
			o:       make([]float32, queryChunk*group*p.HeadDim),
			dec:     make([]float32, p.BlockSize*p.HeadDim),
			rot:     make([]float32, p.BlockSize*p.HeadDim),
			rots:    make([]float32, codec.MaxBlocks*p.BlockSize*p.HeadDim),
			runSrc:  make([][]byte, 0, p.MaxContext/p.BlockSize+1),
			runNext: make([][]byte, 0, p.MaxContext/p.BlockSize+1),
		}
	}
	return s
}

// New returns the attention of one sequence over parts of a NewStore, with
// all the scratch memory it will use; its work runs on pool's threads.
func New(pool *kern.Pool, p compute.AttentionParams) (compute.Attention, error) {
	return NewShared(pool, p, nil)
}

// NewShared is New taking its scratch memory from sc, which must have been
// made for p's shape on pool (see Scratch); nil makes the attention a
// Scratch of its own.
func NewShared(pool *kern.Pool, p compute.AttentionParams, sc *Scratch) (compute.Attention, error) {
	blockSize, maxContext := p.BlockSize, p.MaxContext
	switch {
	case p.Heads <= 0 || p.KVHeads <= 0 || p.Heads%p.KVHeads != 0:
		return nil, fmt.Errorf("attention: %d query heads cannot share %d KV heads", p.Heads, p.KVHeads)
	case p.HeadDim <= 0 || p.HeadDim%2 != 0:
		return nil, fmt.Errorf("attention: head dim %d must be even and positive", p.HeadDim)
	case blockSize <= 0 || maxContext <= 0:
		return nil, fmt.Errorf("attention: block size %d and context %d must be positive", blockSize, maxContext)
	case p.Window < 0:
		return nil, fmt.Errorf("attention: window %d is negative", p.Window)
	case p.Scale < 0 || p.Softcap < 0:
		return nil, fmt.Errorf("attention: scale %g and softcap %g must not be negative", p.Scale, p.Softcap)
	}
	scale := float32(1 / math.Sqrt(float64(p.HeadDim)))
	if p.Scale != 0 {
		scale = float32(p.Scale)
	}
	a := &attention{
		p:         p,
		group:     p.Heads / p.KVHeads,
		scale:     scale,
		blockSize: blockSize,
		maxCtx:    maxContext,
		pool:      pool,
	}
	if sc == nil {
		sc = NewScratch(pool, p)
	} else if sc.group != a.group || sc.headDim != p.HeadDim || sc.blockSize != blockSize || sc.maxCtx != maxContext {
		return nil, fmt.Errorf("attention: scratch for %d heads per KV head, head dim %d, %d-token blocks and a context of %d; want %d, %d, %d, %d",
			sc.group, sc.headDim, sc.blockSize, sc.maxCtx, a.group, p.HeadDim, blockSize, maxContext)
	}
	a.scratch = sc.ch
	a.t.a = a
	return a, nil
}

// Forward implements compute.Attention. The result does not depend on the
// block size or the thread count: every sum runs over key positions in
// order.
func (a *attention) Forward(outBuf, qBuf compute.Buffer, n, start int, kv compute.KVLayer, cosBuf, sinBuf compute.Buffer) error {
	out, q, cos, sin := compute.Host(outBuf), compute.Host(qBuf), compute.Host(cosBuf), compute.Host(sinBuf)
	d := a.p.HeadDim
	row := a.p.Heads * d
	switch {
	case n <= 0:
		return nil
	case len(q) < n*row || len(out) < n*row:
		return fmt.Errorf("attention: %d queries need %d values of q and out, got %d and %d", n, n*row, len(q), len(out))
	case start+n > a.maxCtx:
		return fmt.Errorf("attention: positions up to %d exceed the context of %d", start+n, a.maxCtx)
	case kv.Len() < start+n:
		return fmt.Errorf("attention: the cache holds %d tokens, queries reach position %d", kv.Len(), start+n-1)
	case len(cos) < (start+n)*d/2 || len(sin) < (start+n)*d/2:
		return fmt.Errorf("attention: RoPE tables of %d and %d values do not reach position %d", len(cos), len(sin), start+n-1)
	}
	t := &a.t
	t.out, t.q, t.n, t.start, t.kv, t.cos, t.sin = out, q, n, start, kv, cos, sin
	t.err = nil
	chunks := (n + queryChunk - 1) / queryChunk
	a.pool.Run(chunks*a.p.KVHeads, t)
	err := t.err
	*t = task{a: a}
	return err
}

// task is one Forward call; unit i is (KV head i % KVHeads, query chunk
// chunks-1 - i / KVHeads): the last chunks, which attend to the most keys,
// come first so the pool's threads finish together.
type task struct {
	a        *attention
	out, q   []float32
	n, start int
	kv       compute.KVLayer
	cos, sin []float32

	mu  sync.Mutex
	err error
}

func (t *task) Run(lo, hi int) {
	s := <-t.a.scratch
	defer func() { t.a.scratch <- s }()
	chunks := (t.n + queryChunk - 1) / queryChunk
	for i := lo; i < hi; i++ {
		if err := t.unit(s, i%t.a.p.KVHeads, chunks-1-i/t.a.p.KVHeads); err != nil {
			t.mu.Lock()
			if t.err == nil {
				t.err = err
			}
			t.mu.Unlock()
			return
		}
	}
}

// first returns the first key position query position qp attends to.
func (t *task) first(qp int) int {
	if w := t.a.p.Window; w > 0 && qp-w+1 > 0 {
		return qp - w + 1
	}
	return 0
}

func (t *task) unit(s *scratch, g, chunk int) error {
	a := t.a
	d, bs, G := a.p.HeadDim, a.blockSize, a.group
	row := a.p.Heads * d
	i0 := chunk * queryChunk
	i1 := min(t.n, i0+queryChunk)
	m := (i1 - i0) * G   // query rows: the chunk's tokens, each with the group's heads
	kEnd := t.start + i1 // keys [kBeg, kEnd) are needed by some query
	kBeg := t.first(t.start + i0)
	stride := kEnd
	sc := s.scores // row r of m holds its scores at [r*stride, (r+1)*stride)

	// Gather the group's query rows; a token's heads of one group are
	// adjacent, so each token is one copy.
	qs, os := s.q[:m*d], s.o[:m*d]
	for qi := i0; qi < i1; qi++ {
		copy(qs[(qi-i0)*G*d:(qi-i0+1)*G*d], t.q[qi*row+g*G*d:qi*row+(g+1)*G*d])
	}

	// Pass 1: scores of every query row against each rotated key of the
	// chunk's range, whether or not that row attends to it (pass 2 keeps
	// only its own range): a few wasted products on the diagonal buy one
	// tiled kernel call per block.
	for b := kBeg / bs; b*bs < kEnd; b++ {
		r0, r1 := max(kBeg-b*bs, 0), min(bs, kEnd-b*bs)
		if nb := t.scoreRun(s, qs, m, sc, stride, g, b, r0, kEnd); nb > 0 {
			b += nb - 1
			continue
		}
		if nb := t.rotatedBlocks(s, g, b, kEnd); nb > 1 {
			// Blocks b to b+nb-1 decoded at once (rows from 0 after b).
			for j := range nb {
				bj := b + j
				r1 = min(bs, kEnd-bj*bs)
				rot := s.rots[j*bs*d:]
				kern.ScoreBlock(sc[bj*bs+r0:], stride, qs, m, rot[r0*d:r1*d], r1-r0, d, a.scale)
				r0 = 0
			}
			b += nb - 1
			continue
		}
		if err := t.rotatedKeys(s, g, b, r0, r1); err != nil {
			return err
		}
		kern.ScoreBlock(sc[b*bs+r0:], stride, qs, m, s.rot[r0*d:r1*d], r1-r0, d, a.scale)
	}

	// Pass 2: softmax over each query's own key range, and zero weights
	// for the rest of the chunk's range so pass 3 can sum whole blocks.
	for qi := i0; qi < i1; qi++ {
		qp := t.start + qi
		lo := t.first(qp)
		for hh := 0; hh < G; hh++ {
			srow := sc[((qi-i0)*G+hh)*stride:]
			if c := a.p.Softcap; c != 0 {
				kern.Softcap(srow[lo:qp+1], float32(c))
			}
			kern.Softmax(srow[lo : qp+1])
			clear(srow[kBeg:lo])
			clear(srow[qp+1 : kEnd])
		}
	}

	// Pass 3: probability-weighted sum of the values, in key order.
	clear(os)
	for b := kBeg / bs; b*bs < kEnd; b++ {
		r0, r1 := max(kBeg-b*bs, 0), min(bs, kEnd-b*bs)
		p0 := b*bs + r0
		if i1-i0 == 1 {
			// One query (decode): a codec that sums encoded rows itself
			// skips reconstructing every value row of the block, and
			// one that does several blocks at once takes them so.
			if nb := t.valueRun(s, os, sc, stride, g, b, r0, kEnd); nb > 0 {
				b += nb - 1
				continue
			}
			if nb := t.combineBlocks(s, os, sc, stride, g, b, r0, kEnd); nb > 1 {
				b += nb - 1
				continue
			}
			done, err := t.combine(os, sc, stride, g, b, r0, r1)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		vb, err := t.rowsOf(g, b, 1, s.dec)
		if err != nil {
			return err
		}
		kern.MixBlock(os, m, sc[p0:], stride, vb[r0*d:r1*d], r1-r0, d)
	}
	for qi := i0; qi < i1; qi++ {
		copy(t.out[qi*row+g*G*d:qi*row+(g+1)*G*d], os[(qi-i0)*G*d:(qi-i0+1)*G*d])
	}
	return nil
}

// rotatedKeys sets rows [r0, r1) of s.rot to the keys of block b of KV
// head g rotated at their positions: in one pass where the block is
// encoded by a codec that rotates as it decodes (codec.RotaryDecoder) and
// the RoPE tables cover the whole block, else decoded or widened first and
// rotated by RoPEBlock.
func (t *task) rotatedKeys(s *scratch, g, b, r0, r1 int) error {
	bs, d, half := t.a.blockSize, t.a.p.HeadDim, t.a.p.HeadDim/2
	if pt, ok := t.kv.Part(g, b, 0).(*part); ok && pt.dec != nil {
		lo, hi := b*bs*half, (b+1)*bs*half
		if pt.rot != nil && hi <= len(t.cos) && hi <= len(t.sin) {
			if err := pt.rot.DecodeRotated(s.rot[:bs*d], pt.enc, bs, d, t.cos[lo:hi], t.sin[lo:hi]); err != nil {
				return fmt.Errorf("attention: block %d head %d K: %s: %w", b, g, pt.dec.Name(), err)
			}
			return nil
		}
	}
	kb, err := t.rowsOf(g, b, 0, s.dec)
	if err != nil {
		return err
	}
	p0 := b*bs + r0
	kern.RoPEBlock(s.rot[r0*d:r1*d], kb[r0*d:r1*d], t.cos[p0*half:], t.sin[p0*half:], r1-r0, d)
	return nil
}

// blocksOf sets s.bParts to the parts of KV head g's keys (kv 0) or
// values (kv 1) from block b on, while they are encoded by one
// BlocksDecoder, hold keys before kEnd and number at most
// codec.MaxBlocks, and returns the decoder and how many; fewer than 2 is
// no group.
func (t *task) blocksOf(s *scratch, g, b, kv, kEnd int) (codec.BlocksDecoder, int) {
	bs := t.a.blockSize
	p0, ok := t.kv.Part(g, b, kv).(*part)
	if !ok || p0.multi == nil {
		return nil, 0
	}
	s.bParts[0] = p0
	nb := 1
	for ; nb < codec.MaxBlocks && (b+nb)*bs < kEnd; nb++ {
		p, ok := t.kv.Part(g, b+nb, kv).(*part)
		if !ok || p.dec != p0.dec {
			break
		}
		s.bParts[nb] = p
	}
	return p0.multi, nb
}

// runOf sets s.runSrc to the blocks of KV head g's keys (kv 0) or values
// (kv 1) from block b on while they are encoded by one RunAttender, hold
// keys before kEnd and, for keys, have RoPE tables covering them whole,
// and returns their RunAttender, or nil where block b is not so encoded.
func (t *task) runOf(s *scratch, g, b, kv, kEnd int) codec.RunAttender {
	bs, half := t.a.blockSize, t.a.p.HeadDim/2
	p0, ok := t.kv.Part(g, b, kv).(*part)
	if !ok || p0.run == nil {
		return nil
	}
	tables := min(len(t.cos), len(t.sin))
	s.runSrc = s.runSrc[:0]
	for j := b; j*bs < kEnd; j++ {
		if kv == 0 && (j+1)*bs*half > tables {
			break // the kernels rotate whole blocks
		}
		p, ok := t.kv.Part(g, j, kv).(*part)
		if !ok || p.dec != p0.dec {
			break
		}
		s.runSrc = append(s.runSrc, p.enc)
	}
	if len(s.runSrc) == 0 {
		return nil
	}
	return p0.run
}

// scoreRun sets the scores of the m query rows qs against KV head g's
// keys from block b on (rows from r0 in b, before kEnd) in one
// RunAttender call where one encodes them, and returns how many blocks it
// took; 0 where it did not. On an error it returns 0, and the calls block
// by block return the error naming the block.
func (t *task) scoreRun(s *scratch, qs []float32, m int, sc []float32, stride, g, b, r0, kEnd int) int {
	ra := t.runOf(s, g, b, 0, kEnd)
	if ra == nil {
		return 0
	}
	a := t.a
	bs, d, half := a.blockSize, a.p.HeadDim, a.p.HeadDim/2
	nb := len(s.runSrc)
	r1 := min(bs, kEnd-(b+nb-1)*bs)
	if err := ra.ScoreRun(sc[b*bs:], stride, qs, m, s.runSrc, bs, d, t.cos[b*bs*half:], t.sin[b*bs*half:], a.scale, r0, r1, true, t.valuesOf(s, g, b, nb)); err != nil {
		return 0
	}
	return nb
}

// valuesOf sets s.runNext to the encoded bytes of KV head g's value
// parts of blocks b to b+nb-1 that are encoded, which pass 3 reads after
// their keys' scores, and returns it: ScoreRun prefetches them as it
// ends, so that their misses overlap its arithmetic.
func (t *task) valuesOf(s *scratch, g, b, nb int) [][]byte {
	s.runNext = s.runNext[:0]
	for j := b; j < b+nb; j++ {
		if p, ok := t.kv.Part(g, j, 1).(*part); ok && p.dec != nil {
			s.runNext = append(s.runNext, p.enc)
		}
	}
	return s.runNext
}

// valueRun adds to o the probability-weighted sums of KV head g's values
// from block b on (rows from r0 in b, before kEnd) in one RunAttender call
// where one encodes them, and returns how many blocks it took; 0 where it
// did not. On an error it returns 0 with o as it was, and the calls block
// by block return the error naming the block.
func (t *task) valueRun(s *scratch, o, sc []float32, stride, g, b, r0, kEnd int) int {
	ra := t.runOf(s, g, b, 1, kEnd)
	if ra == nil {
		return 0
	}
	a := t.a
	bs, d := a.blockSize, a.p.HeadDim
	nb := len(s.runSrc)
	r1 := min(bs, kEnd-(b+nb-1)*bs)
	if err := ra.AddWeightedRun(o, a.group, sc[b*bs:], stride, s.runSrc, bs, d, r0, r1, true); err != nil {
		return 0
	}
	return nb
}

// rotatedBlocks sets s.rots to the whole rotated keys of KV head g's
// blocks from b on in one call where a BlocksDecoder encodes several and
// the RoPE tables cover them, and returns how many; 0 where it did not.
// On an error it returns 0, and rotatedKeys, block by block, returns the
// error naming the block.
func (t *task) rotatedBlocks(s *scratch, g, b, kEnd int) int {
	bs, d, half := t.a.blockSize, t.a.p.HeadDim, t.a.p.HeadDim/2
	bd, nb := t.blocksOf(s, g, b, 0, kEnd)
	if nb < 2 {
		return 0
	}
	nb = min(nb, len(t.cos)/(bs*half)-b, len(t.sin)/(bs*half)-b)
	if nb < 2 {
		return 0
	}
	for j := range nb {
		lo, hi := (b+j)*bs*half, (b+j+1)*bs*half
		s.bDst[j], s.bSrc[j], s.bCos[j], s.bSin[j] = s.rots[j*bs*d:(j+1)*bs*d], s.bParts[j].enc, t.cos[lo:hi], t.sin[lo:hi]
	}
	if err := bd.DecodeRotatedBlocks(s.bDst[:nb], s.bSrc[:nb], bs, d, s.bCos[:nb], s.bSin[:nb]); err != nil {
		return 0
	}
	return nb
}

// combineBlocks is combine for KV head g's blocks from b on (rows from r0
// in b, from 0 after, before key position kEnd) in one call where a
// BlocksDecoder encodes several, and returns how many; 0 where it did
// not. On an error it returns 0 with o as it was, and combine, block by
// block, returns the error naming the block.
func (t *task) combineBlocks(s *scratch, o, sc []float32, stride, g, b, r0, kEnd int) int {
	bd, nb := t.blocksOf(s, g, b, 1, kEnd)
	if nb < 2 {
		return 0
	}
	a := t.a
	d, bs, G := a.p.HeadDim, a.blockSize, a.group
	for j := range nb {
		bj := b + j
		s.bDst[j], s.bSrc[j], s.bLo[j], s.bHi[j] = sc[bj*bs:], s.bParts[j].enc, r0, min(bs, kEnd-bj*bs)
		r0 = 0
	}
	if err := bd.AddWeightedBlocks(o, G, s.bDst[:nb], stride, s.bSrc[:nb], bs, d, s.bLo[:nb], s.bHi[:nb]); err != nil {
		return 0
	}
	return nb
}

// rowsOf returns the keys (kv 0) or values (kv 1) of block b of KV head g
// as BlockSize rows: a float32 hot part as it is, a bf16 or encoded one
// widened or decoded into scratch.
func (t *task) rowsOf(g, b, kv int, scratch []float32) ([]float32, error) {
	pt, ok := t.kv.Part(g, b, kv).(*part)
	if !ok {
		return nil, fmt.Errorf("attention: block %d head %d is not stored by a CPU block store", b, g)
	}
	v, err := pt.values(scratch, t.a.blockSize, t.a.p.HeadDim)
	if err != nil {
		return nil, fmt.Errorf("attention: block %d head %d %s: %w", b, g, kvName(kv), err)
	}
	return v, nil
}

func kvName(kv int) string {
	if kv == 0 {
		return "K"
	}
	return "V"
}

// combine adds one query's weighted sum of the values in rows [r0, r1) of
// block b to o, the G output rows of KV group g, through the V codec's
// RowCombiner, reporting false (nothing done) when the block is hot or its
// codec cannot. sc holds the query's probabilities, one row of stride
// values per head, zero outside the query's own range.
func (t *task) combine(o, sc []float32, stride, g, b, r0, r1 int) (bool, error) {
	pt, ok := t.kv.Part(g, b, 1).(*part)
	if !ok || pt.comb == nil {
		return false, nil
	}
	a := t.a
	d, bs, G := a.p.HeadDim, a.blockSize, a.group
	if err := pt.comb.AddWeighted(o, G, sc[b*bs:], stride, pt.enc, bs, d, r0, r1); err != nil {
		return true, fmt.Errorf("attention: block %d head %d V: %s: %w", b, g, pt.dec.Name(), err)
	}
	return true, nil
}
