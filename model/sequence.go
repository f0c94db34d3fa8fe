package model

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/attention"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// Sequence is one token stream being decoded: its KV cache and the scratch
// memory of the forward pass, allocated once so decoding allocates nothing
// per token. A Sequence is used by one goroutine at a time.
type Sequence struct {
	m     *Model
	cache *kvcache.Cache
	attn  *attention.Attention
	rows  int   // scratch capacity in tokens
	err   error // a failure that left the cache inconsistent

	x, xn, q, k, v, att, tmp []float32
	gate, up                 []float32
	last                     []float32 // logits of the last position
}

// SequenceOptions are the cache settings of one sequence, overriding those
// the model was loaded with.
type SequenceOptions struct {
	// Cache says which KV blocks are compressed and how (see Model.Policy).
	Cache kvcache.Policy
	// BlockSize is the number of tokens per KV cache block; 0 means the
	// model's Options.BlockSize.
	BlockSize int
}

// NewSequence returns an empty sequence with the cache policy and block
// size of the model's Options.
func (m *Model) NewSequence() (*Sequence, error) {
	return m.NewSequenceOpts(SequenceOptions{Cache: m.policy})
}

// NewSequenceWith returns an empty sequence whose cache follows p instead
// of Options.Cache, so one loaded model can serve several policies.
func (m *Model) NewSequenceWith(p kvcache.Policy) (*Sequence, error) {
	return m.NewSequenceOpts(SequenceOptions{Cache: p})
}

// NewSequenceOpts returns an empty sequence with the cache settings of o.
func (m *Model) NewSequenceOpts(o SequenceOptions) (*Sequence, error) {
	c := m.cfg
	bs := o.BlockSize
	if bs == 0 {
		bs = m.blockSize
	}
	if err := checkBlockSize(bs, m.maxCtx); err != nil {
		return nil, err
	}
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.release()
	cache, err := kvcache.New(kvcache.Config{
		Layers: c.NumLayers, KVHeads: c.NumKVHeads, HeadDim: m.headDim,
		BlockSize: bs, MaxTokens: m.maxCtx, Policy: o.Cache,
	})
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	attn, err := attention.New(m.pool, attention.Params{
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: m.headDim, Window: m.window,
	}, bs, m.maxCtx)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	n := min(prefillChunk, m.maxCtx)
	h, qd, kvd := c.HiddenSize, c.NumHeads*m.headDim, c.NumKVHeads*m.headDim
	return &Sequence{
		m: m, cache: cache, attn: attn, rows: n,
		x: make([]float32, n*h), xn: make([]float32, n*h), tmp: make([]float32, n*h),
		q: make([]float32, n*qd), att: make([]float32, n*qd),
		k: make([]float32, n*kvd), v: make([]float32, n*kvd),
		gate: make([]float32, n*c.IntermediateSize), up: make([]float32, n*c.IntermediateSize),
		last: make([]float32, c.VocabSize),
	}, nil
}

// Len returns the number of tokens in the sequence.
func (s *Sequence) Len() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.Len()
}

// Reset empties the sequence, keeping its memory for reuse. A closed
// sequence stays closed.
func (s *Sequence) Reset() {
	if s.cache == nil {
		return
	}
	s.cache.Reset()
	s.err = nil
}

// Close releases the sequence's memory. Afterwards Forward returns an error
// matching ErrClosed, Len and KVStats report an empty sequence and Reset
// does nothing. Closing twice is harmless.
func (s *Sequence) Close() {
	*s = Sequence{m: s.m, err: errSequenceClosed}
}

// KVStats returns the bytes the sequence's KV cache holds, and what a bf16
// cache of the same tokens would take.
func (s *Sequence) KVStats() kvcache.Stats {
	if s.cache == nil {
		return kvcache.Stats{}
	}
	return s.cache.Stats()
}

// Forward appends ids at positions Len(), Len()+1, ... and returns logits:
// len(ids) rows of vocab_size values if allLogits, else only the last row.
// The all-rows result is the caller's; the last row lives in the sequence
// and is overwritten by the next call. Once the sequence or its model is
// closed, Forward returns an error matching ErrClosed; Close of the model
// waits for a Forward in flight to return.
func (s *Sequence) Forward(ids []int, allLogits bool) ([]float32, error) {
	if s.err != nil {
		return nil, s.err
	}
	m := s.m
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.release()
	vocab := m.cfg.VocabSize
	switch {
	case len(ids) == 0:
		return nil, fmt.Errorf("model: Forward of no tokens")
	case s.Len()+len(ids) > m.maxCtx:
		if s.Len() > 0 {
			return nil, fmt.Errorf("model: prompt of %d tokens (%d already in the sequence) exceeds the context of %d", s.Len()+len(ids), s.Len(), m.maxCtx)
		}
		return nil, fmt.Errorf("model: prompt of %d tokens exceeds the context of %d", len(ids), m.maxCtx)
	}
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("model: token id %d at index %d is out of range [0, %d)", id, i, vocab)
		}
	}
	var out []float32
	if allLogits {
		out = make([]float32, len(ids)*vocab)
	}
	for i := 0; i < len(ids); i += s.rows {
		chunk := ids[i:min(len(ids), i+s.rows)]
		var logits []float32
		switch {
		case allLogits:
			logits = out[i*vocab : (i+len(chunk))*vocab]
		case i+len(chunk) == len(ids):
			logits = s.last
		}
		if err := s.forward(chunk, logits, allLogits); err != nil {
			s.err = fmt.Errorf("model: sequence unusable until Reset: %w", err)
			return nil, err
		}
	}
	if allLogits {
		return out, nil
	}
	return s.last, nil
}

// forward runs one chunk of at most s.rows tokens through the layers. If
// logits is not nil it receives every row's logits (all) or the last row's.
func (s *Sequence) forward(ids []int, logits []float32, all bool) error {
	m, c := s.m, s.m.cfg
	n, start := len(ids), s.Len()
	h, d, half := c.HiddenSize, m.headDim, m.headDim/2
	qd, kvd := c.NumHeads*d, c.NumKVHeads*d
	inter := c.IntermediateSize
	pool := m.pool
	x, xn, tmp := s.x[:n*h], s.xn[:n*h], s.tmp[:n*h]
	q, k, v, att := s.q[:n*qd], s.k[:n*kvd], s.v[:n*kvd], s.att[:n*qd]
	gate, up := s.gate[:n*inter], s.up[:n*inter]

	for i, id := range ids {
		cpu.RowF32(x[i*h:(i+1)*h], m.embed, id)
	}
	for li := range m.layers {
		l := &m.layers[li]
		s.norm(xn, x, l.inNorm, n, h)
		pool.MatMul(q, xn, n, l.q)
		pool.MatMul(k, xn, n, l.k)
		pool.MatMul(v, xn, n, l.v)
		if l.qBias != nil {
			addRows(q, l.qBias, n)
			addRows(k, l.kBias, n)
			addRows(v, l.vBias, n)
		}
		if l.qNorm != nil {
			s.norm(q, q, l.qNorm, n*c.NumHeads, d)
			s.norm(k, k, l.kNorm, n*c.NumKVHeads, d)
		}
		if m.observe != nil {
			m.observe(li, start, n, q, k)
		}
		// Keys enter the cache before RoPE; queries are rotated here.
		for i := 0; i < n; i++ {
			p := start + i
			cs, sn := m.cos[p*half:(p+1)*half], m.sin[p*half:(p+1)*half]
			for hd := 0; hd < c.NumHeads; hd++ {
				cpu.RoPE(q[i*qd+hd*d:i*qd+(hd+1)*d], cs, sn)
			}
		}
		if err := s.cache.Append(li, k, v, n); err != nil {
			return err
		}
		if err := s.attn.Forward(att, q, n, start, s.cache, li, m.cos, m.sin); err != nil {
			return err
		}
		pool.MatMul(tmp, att, n, l.o)
		if l.oBias != nil {
			addRows(tmp, l.oBias, n)
		}
		cpu.Add(x, tmp)

		s.norm(xn, x, l.postNorm, n, h)
		pool.MatMul(gate, xn, n, l.gate)
		pool.MatMul(up, xn, n, l.up)
		cpu.SiLUMul(gate, up)
		pool.MatMul(tmp, gate, n, l.down)
		cpu.Add(x, tmp)
	}
	if logits == nil {
		return nil
	}
	if all {
		s.norm(xn, x, m.norm, n, h)
		pool.MatMul(logits, xn, n, m.lmHead)
		return nil
	}
	last := x[(n-1)*h:]
	cpu.RMSNorm(xn[:h], last, m.norm, m.eps)
	pool.MatMul(logits, xn[:h], 1, m.lmHead)
	return nil
}

// norm applies RMSNorm with weight w to each of the rows vectors of width d.
func (s *Sequence) norm(out, x, w []float32, rows, d int) {
	for r := 0; r < rows; r++ {
		cpu.RMSNorm(out[r*d:(r+1)*d], x[r*d:(r+1)*d], w, s.m.eps)
	}
}

// addRows adds bias to each of the n rows of x.
func addRows(x, bias []float32, n int) {
	d := len(bias)
	for r := 0; r < n; r++ {
		cpu.Add(x[r*d:(r+1)*d], bias)
	}
}
