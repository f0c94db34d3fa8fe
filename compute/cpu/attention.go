package cpu

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

// attention holds the scratch memory to run attention for one sequence at a
// time. It is not safe for concurrent use.
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
	dec    []float32 // a decoded block
	rot    []float32 // the block's keys after RoPE
}

// NewAttention returns the attention of one sequence, with all the scratch
// memory it will use.
func (b *Backend) NewAttention(p compute.AttentionParams) (compute.Attention, error) {
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
	}
	a := &attention{
		p:         p,
		group:     p.Heads / p.KVHeads,
		scale:     float32(1 / math.Sqrt(float64(p.HeadDim))),
		blockSize: blockSize,
		maxCtx:    maxContext,
		pool:      b.pool,
	}
	// One scratch per pool worker, plus one for a call the pool runs inline
	// while busy.
	n := b.pool.Threads() + 1
	a.scratch = make(chan *scratch, n)
	for range n {
		a.scratch <- &scratch{
			scores: make([]float32, queryChunk*a.group*maxContext),
			dec:    make([]float32, blockSize*p.HeadDim),
			rot:    make([]float32, blockSize*p.HeadDim),
		}
	}
	a.t.a = a
	return a, nil
}

// Forward implements compute.Attention. The result does not depend on the
// block size or the thread count: every sum runs over key positions in
// order.
func (a *attention) Forward(outBuf, qBuf compute.Buffer, n, start int, kv compute.KVLayer, cosBuf, sinBuf compute.Buffer) error {
	out, q, cos, sin := host(outBuf), host(qBuf), host(cosBuf), host(sinBuf)
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
// i / KVHeads).
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
	for i := lo; i < hi; i++ {
		if err := t.unit(s, i%t.a.p.KVHeads, i/t.a.p.KVHeads); err != nil {
			t.mu.Lock()
			if t.err == nil {
				t.err = err
			}
			t.mu.Unlock()
			return
		}
	}
}

// rows returns the rows [lo, hi) of block b, within the rows [r0, r1) the
// query chunk needs, that query position qp attends to (lo >= hi: none).
func (t *task) rows(qp, b, r0, r1 int) (lo, hi int) {
	bs := t.a.blockSize
	return max(r0, t.first(qp)-b*bs), min(r1, qp+1-b*bs)
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
	d, half, bs, G := a.p.HeadDim, a.p.HeadDim/2, a.blockSize, a.group
	row := a.p.Heads * d
	i0 := chunk * queryChunk
	i1 := min(t.n, i0+queryChunk)
	kEnd := t.start + i1 // keys [kBeg, kEnd) are needed by some query
	kBeg := t.first(t.start + i0)
	stride := kEnd
	sc := s.scores

	// Pass 1: scores of every (query, head) against each rotated key.
	for b := kBeg / bs; b*bs < kEnd; b++ {
		kb, err := t.rowsOf(g, b, 0, s.dec)
		if err != nil {
			return err
		}
		r0, r1 := max(kBeg-b*bs, 0), min(bs, kEnd-b*bs)
		p0 := b*bs + r0
		kern.RoPEBlock(s.rot[r0*d:r1*d], kb[r0*d:r1*d], t.cos[p0*half:], t.sin[p0*half:], r1-r0, d)
		for qi := i0; qi < i1; qi++ {
			qp := t.start + qi
			lo, hi := t.rows(qp, b, r0, r1)
			if lo >= hi {
				continue
			}
			for hh := 0; hh < G; hh++ {
				qv := t.q[qi*row+(g*G+hh)*d : qi*row+(g*G+hh+1)*d]
				srow := sc[((qi-i0)*G+hh)*stride+b*bs:]
				kern.DotBlock(srow[lo:hi], qv, s.rot[lo*d:hi*d], hi-lo, d)
				kern.Scale(srow[lo:hi], a.scale)
			}
		}
	}

	// Pass 2: softmax over each query's own key range.
	for qi := i0; qi < i1; qi++ {
		qp := t.start + qi
		for hh := 0; hh < G; hh++ {
			srow := sc[((qi-i0)*G+hh)*stride:]
			kern.Softmax(srow[t.first(qp) : qp+1])
			o := t.out[qi*row+(g*G+hh)*d : qi*row+(g*G+hh+1)*d]
			clear(o)
		}
	}

	// Pass 3: probability-weighted sum of the values, in key order.
	for b := kBeg / bs; b*bs < kEnd; b++ {
		r0, r1 := max(kBeg-b*bs, 0), min(bs, kEnd-b*bs)
		if i1-i0 == 1 {
			// One query (decode): a codec that sums encoded rows itself
			// skips reconstructing every value row of the block.
			done, err := t.combine(sc, stride, g, b, i0, r0, r1)
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
		for qi := i0; qi < i1; qi++ {
			qp := t.start + qi
			lo, hi := t.rows(qp, b, r0, r1)
			if lo >= hi {
				continue
			}
			for hh := 0; hh < G; hh++ {
				srow := sc[((qi-i0)*G+hh)*stride+b*bs:]
				o := t.out[qi*row+(g*G+hh)*d : qi*row+(g*G+hh+1)*d]
				kern.AxpyBlock(o, srow[lo:hi], vb[lo*d:hi*d], hi-lo, d)
			}
		}
	}
	return nil
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

// combine adds query qi's weighted sum of the values in rows [r0, r1) of
// block b for every head of KV group g through the V codec's RowCombiner,
// reporting false (nothing done) when the block is hot or its codec cannot.
// sc holds the query's probabilities, one row of stride values per head.
func (t *task) combine(sc []float32, stride, g, b, qi, r0, r1 int) (bool, error) {
	pt, ok := t.kv.Part(g, b, 1).(*part)
	if !ok || pt.dec == nil {
		return false, nil
	}
	rc, ok := pt.dec.(codec.RowCombiner)
	if !ok {
		return false, nil
	}
	enc := pt.enc
	a := t.a
	d, bs, G := a.p.HeadDim, a.blockSize, a.group
	qp := t.start + qi
	lo, hi := t.rows(qp, b, r0, r1)
	if lo >= hi {
		return true, nil
	}
	row := a.p.Heads * d
	w := sc[b*bs:]
	o := t.out[qi*row+g*G*d : qi*row+(g+1)*G*d]
	if err := rc.AddWeighted(o, G, w, stride, enc, bs, d, lo, hi); err != nil {
		return true, fmt.Errorf("attention: block %d head %d V: %s: %w", b, g, pt.dec.Name(), err)
	}
	return true, nil
}
