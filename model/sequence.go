package model

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// Sequence is one token stream being decoded: its KV cache and the
// activations of the forward pass, allocated on the backend once so that
// decoding allocates nothing per token. A Sequence is used by one goroutine
// at a time.
type Sequence struct {
	m     *Model
	cache *kvcache.Cache
	attn  compute.Attention
	rows  int   // activation capacity in tokens
	err   error // a failure that left the cache inconsistent

	x, xn, q, k, v, att, tmp compute.Buffer
	gate, up                 compute.Buffer
	logits                   compute.Buffer // one row of vocab_size, or logitRows once every row's logits were asked for
	last                     []float32      // logits of the last position, on the host
	ids                      []int          // the chunk's ids, so the caller's slice never escapes to the backend
	obsQ, obsK               []float32      // q and k on the host for Options.Observe
}

// logitRows is how many positions' logits one lm_head product writes when
// every position's logits are wanted; longer chunks take several.
const logitRows = 64

// SequenceOptions are the cache settings of one sequence, overriding those
// the model was loaded with.
type SequenceOptions struct {
	// Cache says which KV blocks are compressed and how (see Model.Policy).
	Cache kvcache.Policy
	// BlockSize is the number of tokens per KV cache block; 0 means the
	// model's Options.BlockSize.
	BlockSize int
	// Pool, when set, holds the cache's blocks in memory shared with other
	// sequences under its byte budget, and lets the sequence share full
	// blocks by prefix (see Sequence.AttachPrefix). It must have been made
	// over a block store of the model's backend, for this block size, head
	// dimension and hot dtype.
	Pool *kvcache.Pool
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
	kc := kvcache.Config{
		Layers: c.NumLayers, KVHeads: c.NumKVHeads, HeadDim: m.headDim,
		BlockSize: bs, MaxTokens: m.maxCtx, Policy: o.Cache, Pool: o.Pool,
	}
	if o.Pool == nil {
		kc.Store = m.b.NewBlockStore(bs, m.headDim, o.Cache.HotBF16)
	}
	cache, err := kvcache.New(kc)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	attn, err := m.b.NewAttention(compute.AttentionParams{
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: m.headDim, Window: m.window,
		BlockSize: bs, MaxContext: m.maxCtx,
	})
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	n := min(prefillChunk, m.maxCtx)
	h, qd, kvd := c.HiddenSize, c.NumHeads*m.headDim, c.NumKVHeads*m.headDim
	b := m.b
	s := &Sequence{
		m: m, cache: cache, attn: attn, rows: n,
		x: b.Alloc(n * h), xn: b.Alloc(n * h), tmp: b.Alloc(n * h),
		q: b.Alloc(n * qd), att: b.Alloc(n * qd),
		k: b.Alloc(n * kvd), v: b.Alloc(n * kvd),
		gate: b.Alloc(n * c.IntermediateSize), up: b.Alloc(n * c.IntermediateSize),
		logits: b.Alloc(c.VocabSize),
		last:   make([]float32, c.VocabSize),
		ids:    make([]int, 0, n),
	}
	if m.observe != nil {
		s.obsQ, s.obsK = make([]float32, n*qd), make([]float32, n*kvd)
	}
	if err := m.backendErr(); err != nil {
		// An allocation failed (or an earlier step did): the sequence
		// could not run.
		return nil, err
	}
	return s, nil
}

// backendErr returns the failure the backend recorded (compute's contract),
// wrapped with the backend's name, nil if none. The model checks it once
// per forward step, after the step's results were read back (a device's
// queued work fails after the call that queued it, and the read-back
// waited for it) and before they are returned.
func (m *Model) backendErr() error {
	if err := m.b.Err(); err != nil {
		return fmt.Errorf("model: %s backend: %w", m.b.Name(), err)
	}
	return nil
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
	if s.cache != nil && s.cache.Config().Pool != nil {
		// A pooled cache's blocks go back to the pool (shared ones stay
		// cached there); a private store's go with the sequence anyway.
		s.cache.Reset()
	}
	*s = Sequence{m: s.m, err: errSequenceClosed}
}

// AttachPrefix starts an empty pooled sequence with the longest run of
// cached KV blocks holding a prefix of prompt (see kvcache.Cache.AttachPrefix)
// and returns the tokens it reused: the caller runs Forward on
// prompt[reused:], with the logits a cold sequence would give for prompt.
func (s *Sequence) AttachPrefix(prompt []int) (reused int, err error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.cache == nil {
		return 0, errSequenceClosed
	}
	n, err := s.cache.AttachPrefix(prompt)
	if err != nil {
		return 0, fmt.Errorf("model: %w", err)
	}
	return n, nil
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
//
// A failure of the backend (see compute's contract) is checked after every
// chunk of at most the model's pass size: Forward then returns it, wrapped
// so that errors.Is matches the backend's error, and no logits; the
// sequence is unusable until Reset, and the backend itself may stay
// failed.
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
		return nil, fmt.Errorf("model: %w", &ContextError{Tokens: s.Len() + len(ids), Context: m.maxCtx, Limit: m.ContextLimit()})
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
		err := s.forward(chunk, logits, allLogits)
		if err == nil {
			err = s.m.backendErr()
		}
		if err == nil {
			// With a pool, the tokens name the blocks they filled.
			err = s.cache.AppendTokens(chunk)
		}
		if err != nil {
			s.err = fmt.Errorf("model: sequence unusable until Reset: %w", err)
			return nil, err
		}
	}
	if allLogits {
		return out, nil
	}
	return s.last, nil
}

// forward runs one chunk of at most s.rows tokens through the layers, the
// way llama2.c's forward() does for one token. If logits is not nil it
// receives every row's logits (all) or the last row's.
func (s *Sequence) forward(ids []int, logits []float32, all bool) error {
	m, c, b := s.m, s.m.cfg, s.m.b
	n, start := len(ids), s.Len()
	h, d := c.HiddenSize, m.headDim
	heads, kvHeads := c.NumHeads, c.NumKVHeads
	qd, kvd, inter := heads*d, kvHeads*d, c.IntermediateSize
	x, xn, tmp := s.x.Slice(0, n*h), s.xn.Slice(0, n*h), s.tmp.Slice(0, n*h)
	q, k, v, att := s.q.Slice(0, n*qd), s.k.Slice(0, n*kvd), s.v.Slice(0, n*kvd), s.att.Slice(0, n*qd)
	gate, up := s.gate.Slice(0, n*inter), s.up.Slice(0, n*inter)

	// Token embeddings: the residual stream starts as each token's row.
	s.ids = append(s.ids[:0], ids...)
	b.Embed(x, m.embed, s.ids)
	for li := range m.layers {
		l := &m.layers[li]

		// Attention: normalise the stream, project it to queries, keys and
		// values (Qwen2 adds biases; Qwen3 normalises each head of q and k).
		b.RMSNorm(xn, x, l.inNorm, n, m.eps)
		b.MatMul(q, xn, n, l.q)
		b.MatMul(k, xn, n, l.k)
		b.MatMul(v, xn, n, l.v)
		if l.qBias.Len > 0 {
			b.AddRows(q, l.qBias, n)
			b.AddRows(k, l.kBias, n)
			b.AddRows(v, l.vBias, n)
		}
		if l.qNorm.Len > 0 {
			b.RMSNorm(q, q, l.qNorm, n*heads, m.eps)
			b.RMSNorm(k, k, l.kNorm, n*kvHeads, m.eps)
		}
		if m.observe != nil {
			// Calibration sees queries and keys before RoPE.
			b.Read(s.obsQ[:n*qd], q)
			b.Read(s.obsK[:n*kvd], k)
			m.observe(li, start, n, s.obsQ[:n*qd], s.obsK[:n*kvd])
		}
		// Keys enter the cache before RoPE, so a codec sees them as the
		// projection made them (position-free, and whitenable by the query
		// covariance); attention rotates them at their positions. Queries
		// are rotated here.
		b.RoPE(q, n, heads, d, start, m.cos, m.sin)
		if err := s.cache.Append(li, k, v, n); err != nil {
			return err
		}
		if err := s.attn.Forward(att, q, n, start, s.cache.Layer(li), m.cos, m.sin); err != nil {
			return err
		}
		// Output projection, added to the residual stream.
		b.MatMul(tmp, att, n, l.o)
		if l.oBias.Len > 0 {
			b.AddRows(tmp, l.oBias, n)
		}
		b.Add(x, tmp)

		// Feed-forward: SwiGLU, down(silu(gate(x)) * up(x)), added to the
		// residual stream (with Llama's mlp_bias, each projection has a bias).
		b.RMSNorm(xn, x, l.postNorm, n, m.eps)
		b.MatMul(gate, xn, n, l.gate)
		b.MatMul(up, xn, n, l.up)
		if l.gateBias.Len > 0 {
			b.AddRows(gate, l.gateBias, n)
			b.AddRows(up, l.upBias, n)
		}
		b.SiLUMul(gate, up)
		b.MatMul(tmp, gate, n, l.down)
		if l.downBias.Len > 0 {
			b.AddRows(tmp, l.downBias, n)
		}
		b.Add(x, tmp)
	}
	if logits == nil {
		return nil
	}

	// Final norm and the classifier into logits: every row's, or the last.
	vocab := c.VocabSize
	if !all {
		b.RMSNorm(xn.Slice(0, h), x.Slice((n-1)*h, n*h), m.norm, 1, m.eps)
		out := s.logits.Slice(0, vocab)
		b.MatMul(out, xn.Slice(0, h), 1, m.lmHead)
		b.Read(logits, out)
		return nil
	}
	if rows := min(s.rows, logitRows); s.logits.Len < rows*vocab {
		// Grown on the first call that wants every row: decoding alone
		// never holds more than one row (a large vocabulary makes 64 rows
		// tens of MiB per sequence).
		s.logits = b.Alloc(rows * vocab)
	}
	b.RMSNorm(xn, x, m.norm, n, m.eps)
	for r := 0; r < n; r += logitRows {
		rows := min(logitRows, n-r)
		out := s.logits.Slice(0, rows*vocab)
		b.MatMul(out, xn.Slice(r*h, (r+rows)*h), rows, m.lmHead)
		b.Read(logits[r*vocab:(r+rows)*vocab], out)
	}
	return nil
}
