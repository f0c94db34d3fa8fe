package model

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// Sequence is one token stream being decoded: its KV cache and attention,
// and the activation scratch of its own forward passes, allocated on the
// backend by the first Forward so that decoding allocates nothing per
// token (a sequence that only runs in a Batch never allocates it). A
// Sequence is used by one goroutine at a time.
type Sequence struct {
	m     *Model
	cache *kvcache.Cache
	attn  []compute.Attention // one per layer kind of the architecture
	rows  int                 // activation capacity of Forward's passes, in tokens
	err   error               // a failure that left the cache inconsistent
	// observe is SequenceOptions.Observe.
	observe func(layer, start, n int, q, k []float32)

	sc   scratch
	last []float32 // logits of the last position, on the host
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
	// StepTokens, when set, is the most tokens a forward step gives the
	// sequence (a scheduler's step budget): Forward's passes are no
	// longer, and a sliding layer's cache counts its blocks by it (see
	// kvcache.Config.SlideChunk). 0: Model.PassTokens.
	StepTokens int
	// KeepAll keeps every KV block, also those a sliding layer's window no
	// longer sees, for a caller that reads blocks back (KVBlock), as
	// calibration does.
	KeepAll bool
	// Observe, if set, is the sequence's own Options.Observe: called for
	// every layer of every chunk this sequence runs, as Options.Observe
	// is (which, when also set, is called as well). It lets a caller
	// calibrate on a model loaded without a hook (kakeya.Load does, on
	// the engine's own model and backend); it turns the backend's fused
	// attention input off for the steps the sequence is in.
	Observe func(layer, start, n int, q, k []float32)
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
	kc, err := m.CacheConfig(o)
	if err != nil {
		return nil, err
	}
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.release()
	rows := m.PassTokens()
	if o.StepTokens > 0 {
		rows = min(rows, o.StepTokens)
	}
	if o.Pool == nil {
		kc.Store = m.b.NewBlockStore(kc.BlockSize, m.headDim, o.Cache.HotBF16)
	}
	c := m.cfg
	cache, err := kvcache.New(kc)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	attn := make([]compute.Attention, len(m.desc.Kinds))
	for i, k := range m.desc.Kinds {
		if attn[i], err = m.b.NewAttention(compute.AttentionParams{
			Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: m.headDim, Window: k.Window,
			Scale: k.Scale, Softcap: k.Softcap, BlockSize: kc.BlockSize, MaxContext: m.maxCtx,
		}); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	s := &Sequence{
		m: m, cache: cache, attn: attn, rows: rows, observe: o.Observe,
		last: make([]float32, c.VocabSize),
	}
	if err := m.backendErr(); err != nil {
		// The cache's store could not be made (or an earlier step
		// failed): the sequence could not run.
		return nil, err
	}
	return s, nil
}

// HostEncoded returns the layer sides of o's cache whose full blocks the
// model's backend would read back and encode on the host although its
// block store encodes parts itself (a GPU's: kvcache.Policy.HostEncoded),
// each such block a host wait; nil on a backend whose store encodes
// nothing itself (the CPU's).
func (m *Model) HostEncoded(o SequenceOptions) ([]kvcache.HostSide, error) {
	kc, err := m.CacheConfig(o)
	if err != nil {
		return nil, err
	}
	st := m.b.NewBlockStore(kc.BlockSize, m.headDim, o.Cache.HotBF16)
	return o.Cache.HostEncoded(m.cfg.NumKVHeads, st), nil
}

// CacheConfig returns the configuration of the KV cache a sequence made
// with o has, without its block store (Store is nil unless o.Pool is
// set): what a kvcache.Ledger over o.Pool sizes.
func (m *Model) CacheConfig(o SequenceOptions) (kvcache.Config, error) {
	bs := o.BlockSize
	if bs == 0 {
		bs = m.blockSize
	}
	if err := checkBlockSize(bs, m.maxCtx); err != nil {
		return kvcache.Config{}, err
	}
	kc := kvcache.Config{
		Layers: m.cfg.NumLayers, KVHeads: m.cfg.NumKVHeads, HeadDim: m.headDim,
		BlockSize: bs, MaxTokens: m.maxCtx, Policy: o.Cache, Pool: o.Pool,
		Windows: m.windows(), SlideChunk: m.PassTokens(),
	}
	if o.KeepAll {
		kc.Windows = nil
	}
	if o.StepTokens > 0 {
		kc.SlideChunk = o.StepTokens
	}
	return kc, nil
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
//
// A shared block holds what the sequence that wrote it computed. With an
// uncompressed cache that does not depend on how the tokens were fed; with
// a compressing policy the keys and values of later layers do (a token
// decoded after older blocks were encoded attended to their decoded
// values, a token of a one-step prefill to the exact ones), so reuse gives
// a cold prefill's logits when the writer prefilled those tokens, and its
// own continuation's otherwise.
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

// Reserve makes the pooled sequence's reservation in l's pool cover its
// way to n tokens (see kvcache.Ledger.Reserve): an error matching
// kvcache.ErrPoolFull when the pool has not the bytes uncommitted. Close
// returns the reservation.
func (s *Sequence) Reserve(l *kvcache.Ledger, n int) error {
	if s.cache == nil {
		return errSequenceClosed
	}
	if err := l.Reserve(s.cache, n); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return nil
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
	return s.forward(ids, allLogits, false)
}

// Hidden runs ids through the sequence as Forward does (their keys and
// values join its cache) and returns, instead of logits, the final norm's
// output at every position: len(ids) rows of hidden_size, the hidden
// state the classifier reads (what an embedding pools).
func (s *Sequence) Hidden(ids []int) ([]float32, error) {
	return s.forward(ids, true, true)
}

// forward is Forward, or Hidden when hidden is set (allLogits then).
func (s *Sequence) forward(ids []int, allLogits, hidden bool) ([]float32, error) {
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
	width := vocab // of a row of out
	if hidden {
		width = m.cfg.HiddenSize
	}
	var out []float32
	if allLogits {
		out = make([]float32, len(ids)*width)
	}
	s.sc.grow(m, s.rows)
	for i := 0; i < len(ids); i += s.rows {
		chunk := ids[i:min(len(ids), i+s.rows)]
		s.sc.reset()
		p := s.sc.add(s, chunk)
		var dst []float32
		switch {
		case hidden:
			p.logits, s.sc.hidden = allRows, out[i*width:(i+len(chunk))*width]
		case allLogits:
			p.logits, dst = allRows, out[i*vocab:(i+len(chunk))*vocab]
		case i+len(chunk) == len(ids):
			p.logits, dst = lastRow, s.last
		}
		// A step of one pass: the layer code Batch.Forward runs.
		passes := [1]pass{p}
		_, err := m.step(&s.sc, passes[:], dst)
		s.sc.hidden = nil
		if err == nil {
			err = m.backendErr()
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
