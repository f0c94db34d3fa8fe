package eval

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// KVUsage is the KV-cache footprint of one sequence.
type KVUsage struct {
	K    int64 `json:"k_bytes"`    // bytes held for keys
	V    int64 `json:"v_bytes"`    // bytes held for values
	BF16 int64 `json:"bf16_bytes"` // bytes the same keys and values take in bf16
	// Encoded is the part of K+V held by encoded (compressed) blocks, and
	// EncodedBF16 what those blocks' values would take in bf16; engines
	// that do not tell leave both 0.
	Encoded     int64 `json:"encoded_bytes,omitempty"`
	EncodedBF16 int64 `json:"encoded_bf16_bytes,omitempty"`
}

// Add adds the byte counts of o to u.
func (u *KVUsage) Add(o KVUsage) {
	u.K += o.K
	u.V += o.V
	u.BF16 += o.BF16
	u.Encoded += o.Encoded
	u.EncodedBF16 += o.EncodedBF16
}

// KBits returns the bits per stored key value (16 for bf16), or 0 when
// nothing is held.
func (u KVUsage) KBits() float64 { return u.bits(u.K) }

// VBits returns the bits per stored value element.
func (u KVUsage) VBits() float64 { return u.bits(u.V) }

func (u KVUsage) bits(b int64) float64 {
	if u.BF16 == 0 {
		return 0
	}
	return 16 * float64(b) / (float64(u.BF16) / 2)
}

// Ratio returns how many times smaller the cache is than in bf16, or 0
// when nothing is held.
func (u KVUsage) Ratio() float64 {
	if u.K+u.V == 0 {
		return 0
	}
	return float64(u.BF16) / float64(u.K+u.V)
}

// CodecRatio returns how many times smaller than bf16 the encoded blocks
// alone are, leaving out the hot window, sinks, boundary layers and
// partly filled blocks that Ratio counts; 0 when nothing is encoded.
func (u KVUsage) CodecRatio() float64 {
	if u.Encoded == 0 {
		return 0
	}
	return float64(u.EncodedBF16) / float64(u.Encoded)
}

// A Sequence is one decoding stream with its own KV cache.
type Sequence interface {
	// Forward appends ids at the next positions and returns the logits of
	// the last one (vocab values) or, with allLogits, of every one
	// (len(ids)*vocab values). The slice may be reused by the next call.
	Forward(ids []int, allLogits bool) ([]float32, error)
	// KV returns the cache footprint now.
	KV() KVUsage
	Close() error
}

// An Engine opens sequences whose KV cache follows a Config. NewSequence
// must be safe to call from several goroutines when Options.Workers > 1.
type Engine interface {
	Vocab() int
	NewSequence(c Config) (Sequence, error)
}

// Options tune Run.
type Options struct {
	// Chunk is how many tokens each Forward call after the prefill feeds;
	// <= 1 feeds one token at a time (the decode path).
	Chunk int
	// Workers is how many units are evaluated at once; <= 1 one at a time.
	// Totals do not depend on it: they are summed in unit order.
	Workers int
	// Progress, when set, is called after each unit with the units done
	// and the tokens fed so far (over all configurations); calls are
	// serialized.
	Progress func(done, tokens int)
}

// UnitResult holds one unit's metrics, per configuration.
type UnitResult struct {
	Stats []Stats   // per configuration, in Run's order
	KV    []KVUsage // footprint at the end of the unit, per configuration
}

// Result is what Run measured.
type Result struct {
	Configs []Config
	Units   []UnitResult
	Totals  []Stats   // per configuration, summed over units in order
	KV      []KVUsage // per configuration, summed over units
}

// Run evaluates every unit under every configuration; configs[0] must be
// the reference, which the others are compared to position by position.
// For each unit all configurations step in lockstep through the same feed
// schedule (see Unit), so only one chunk of reference logits is held. A
// cancelled ctx stops Run between Forward calls with ctx's error.
func Run(ctx context.Context, e Engine, units []Unit, configs []Config, opt Options) (*Result, error) {
	if len(configs) == 0 || !configs[0].IsReference() {
		return nil, errors.New("eval: the first configuration must be the uncompressed reference")
	}
	if len(units) == 0 {
		return nil, errors.New("eval: nothing to evaluate")
	}
	vocab := e.Vocab()
	if vocab <= 0 {
		return nil, fmt.Errorf("eval: engine vocabulary size %d", vocab)
	}
	for i, u := range units {
		if u.Score < 1 || u.Score >= len(u.Tokens) {
			return nil, fmt.Errorf("eval: unit %d: score_from %d outside 1..%d", i, u.Score, len(u.Tokens)-1)
		}
		for _, t := range u.Tokens {
			if t < 0 || t >= vocab {
				return nil, fmt.Errorf("eval: unit %d: token %d outside vocabulary of %d", i, t, vocab)
			}
		}
	}
	chunk := max(opt.Chunk, 1)
	workers := min(max(opt.Workers, 1), len(units))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := &Result{Configs: configs, Units: make([]UnitResult, len(units))}
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		tokens   int
		wg       sync.WaitGroup
	)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := worker{e: e, configs: configs, vocab: vocab, chunk: chunk}
			for i := range next {
				ur, err := w.unit(ctx, units[i])
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("eval: unit %d: %w", i, err)
						if ctx.Err() != nil {
							firstErr = ctx.Err()
						}
					}
					cancel()
				} else {
					res.Units[i] = ur
					done++
					tokens += (len(units[i].Tokens) - 1) * len(configs)
					if opt.Progress != nil {
						opt.Progress(done, tokens)
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range units {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Totals = make([]Stats, len(configs))
	res.KV = make([]KVUsage, len(configs))
	for _, ur := range res.Units {
		for c := range configs {
			res.Totals[c].Add(ur.Stats[c])
			res.KV[c].Add(ur.KV[c])
		}
	}
	return res, nil
}

// worker holds the per-goroutine scratch of Run.
type worker struct {
	e       Engine
	configs []Config
	vocab   int
	chunk   int
	ref     []float32 // the reference rows of the current step
	sc      Scorer
}

func (w *worker) unit(ctx context.Context, u Unit) (ur UnitResult, err error) {
	seqs := make([]Sequence, 0, len(w.configs))
	defer func() {
		for _, s := range seqs {
			if cerr := s.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("closing sequence: %w", cerr)
			}
		}
	}()
	for _, c := range w.configs {
		s, err := w.e.NewSequence(c)
		if err != nil {
			return ur, fmt.Errorf("config %s: %w", c.Name, err)
		}
		seqs = append(seqs, s)
	}
	ur.Stats = make([]Stats, len(w.configs))
	ur.KV = make([]KVUsage, len(w.configs))
	// Prefill: only the last row is needed.
	if err := w.step(ctx, seqs, ur.Stats, u.Tokens[:u.Score], false, u.Tokens[u.Score:u.Score+1]); err != nil {
		return ur, err
	}
	last := len(u.Tokens) - 1
	for i := u.Score; i < last; i += w.chunk {
		j := min(i+w.chunk, last)
		if err := w.step(ctx, seqs, ur.Stats, u.Tokens[i:j], true, u.Tokens[i+1:j+1]); err != nil {
			return ur, err
		}
	}
	for c, s := range seqs {
		ur.KV[c] = s.KV()
	}
	return ur, nil
}

// step feeds ids to every sequence and scores the returned rows, which
// predict targets.
func (w *worker) step(ctx context.Context, seqs []Sequence, st []Stats, ids []int, all bool, targets []int) error {
	rows := len(targets)
	n := rows * w.vocab
	if cap(w.ref) < n {
		w.ref = make([]float32, n)
	}
	ref := w.ref[:n]
	for c, s := range seqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := s.Forward(ids, all)
		if err != nil {
			return fmt.Errorf("config %s: forward of %d tokens: %w", w.configs[c].Name, len(ids), err)
		}
		if len(out) != n {
			return fmt.Errorf("config %s: forward of %d tokens returned %d logits, want %d", w.configs[c].Name, len(ids), len(out), n)
		}
		if c == 0 {
			copy(ref, out)
			out = ref
		}
		for r := range rows {
			if err := w.sc.Score(&st[c], ref[r*w.vocab:(r+1)*w.vocab], out[r*w.vocab:(r+1)*w.vocab], targets[r]); err != nil {
				return fmt.Errorf("config %s: position %d: %w", w.configs[c].Name, r, err)
			}
		}
	}
	return nil
}
