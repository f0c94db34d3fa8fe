package model

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/pick"
)

// DrawRow is one row's sampled draw (compute.DrawRow): a uniform from
// the request's own generator, its temperature and min-p. The model names
// it for the layers above it, which reach no backend.
type DrawRow = compute.DrawRow

// A BatchItem is one sequence's part of a batched forward step: a prefill
// chunk or a decode token, appended at the sequence's own position.
type BatchItem struct {
	// Seq is the sequence the ids are appended to; a step holds each
	// sequence at most once.
	Seq *Sequence
	// IDs are the tokens, at positions Seq.Len(), Seq.Len()+1, ...; at
	// least one.
	IDs []int
	// All asks for the logits of every position, not only the last.
	All bool
	// Logits is set by Batch.Forward: the last position's vocab_size
	// logits, or len(IDs) rows of them if All. It lives in the Batch and
	// is overwritten by its next Forward. It is nil for a Draw item, and
	// for a Greedy item whose token was picked on the device.
	Logits []float32
	// Greedy asks for the last position's greedy token (not with All):
	// Forward sets Token and NonFinite. Where every item of the step is
	// Greedy and the model picks on its device (Model.DeviceGreedy), only
	// the token ids cross back to the host; otherwise the logits are read
	// back and the arg max taken on the host, with the same result.
	Greedy bool
	// Draw, when set, asks for the last position's token drawn at its
	// temperature with its filters (min-p, top-p, top-k) and uniform (not
	// with All, Hidden or Greedy), as pick.DrawFiltered draws it: Forward
	// sets Token and NonFinite.
	// Where every item of the step is Greedy or has a Draw and the model
	// draws on its device (Model.DeviceDraw; Model.DeviceGreedy for a step
	// of Greedy items only), only the token ids cross back to the host;
	// otherwise the logits are read back and the token drawn on the host.
	// compute.Draw says where the two may differ: a float64 rounding at a
	// boundary between two tokens. A top-k above compute.MaxDrawTopK (and
	// below the vocabulary) is drawn on the host.
	Draw *DrawRow
	// Token is the index of the largest logit (NaN skipped, the first of
	// equal ones; -1 when every logit is NaN) for a Greedy item, the drawn
	// token for a Draw, and NonFinite the index of the first NaN or ±Inf
	// logit, -1 if none: set by Forward for a Greedy or Draw item.
	Token, NonFinite int
	// Hidden asks, instead of logits, for the final norm's output at
	// every position (what Sequence.Hidden returns): Forward sets States.
	// Every item of a step asks for it or none does; not with Greedy.
	Hidden bool
	// States is set by Batch.Forward for a Hidden item: len(IDs) rows of
	// hidden_size, living in the Batch until its next Forward.
	States []float32
}

// A Batch runs forward steps over several sequences at once: every matrix
// product of a step runs once over all its tokens, so the weights are read
// once per step rather than once per sequence, which is what makes
// concurrent decoding faster than decoding the sequences in turn. Its
// activation scratch is allocated on the backend by the first steps and
// grown to the largest step, so steady decoding allocates nothing. A Batch
// is used by one goroutine at a time; its sequences must not run Forward
// while a step holds them.
type Batch struct {
	m       *Model
	maxRows int
	sc      scratch
	passes  []pass
	logits  []float32         // every item's logits, on the host
	states  []float32         // or every Hidden item's hidden states
	picks   []int             // Greedy items' tokens picked on the device
	draws   []compute.DrawRow // a step's draws on the device, one per item
	bad     []int             // and where their first non-finite logits are
	pick    pick.Scratch      // the host's draws
}

// NewBatch returns a Batch whose steps hold at most maxRows tokens in
// all (a scheduler's token budget per step): it bounds the activation
// scratch, which takes about (3*hidden + 2*(q+kv) + 2*intermediate)*4
// bytes per token.
func (m *Model) NewBatch(maxRows int) (*Batch, error) {
	if maxRows <= 0 {
		return nil, fmt.Errorf("model: batch of at most %d tokens, want > 0", maxRows)
	}
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	return &Batch{m: m, maxRows: maxRows}, nil
}

// Forward runs one step over items, each a prefill chunk or a decode token
// of its own sequence, and sets each item's Logits. A bad item (no ids, an
// id out of range, a sequence closed, unusable, of another model or in the
// step twice, a step past a sequence's context or past the batch's tokens)
// fails the step before it runs, with an error naming the item, and leaves
// every sequence as it was.
//
// A failure while the step runs (a sequence's cache or attention, the
// backend's recorded failure, checked once per step as for Sequence.Forward)
// returns an error naming the failing item if one did, and leaves every
// sequence of the step unusable until Reset: each may hold the new tokens
// in some layers and not in others.
func (bt *Batch) Forward(items []BatchItem) error {
	m := bt.m
	if err := m.acquire(); err != nil {
		return err
	}
	defer m.release()
	rows, want, err := bt.check(items)
	if err != nil {
		return err
	}
	vocab := m.cfg.VocabSize
	hidden := items[0].Hidden
	width := vocab // of a wanted row
	if hidden {
		width = m.cfg.HiddenSize
	}
	bt.sc.grow(m, roundUp(rows, bt.maxRows))
	switch n := want * width; {
	case hidden && len(bt.states) < n:
		bt.states = make([]float32, n)
	case !hidden && len(bt.logits) < n:
		bt.logits = make([]float32, n)
	}
	bt.passes = bt.passes[:0]
	bt.sc.reset()
	for i := range items {
		it := &items[i]
		p := bt.sc.add(it.Seq, it.IDs)
		p.logits = lastRow
		if it.All || hidden {
			p.logits = allRows
		}
		bt.passes = append(bt.passes, p)
	}
	// Every item greedy or drawn on a backend that picks on its device:
	// the step reads back token ids rather than logits; with a draw among
	// them, every row is drawn (a greedy one at temperature 0).
	device, drawn := !hidden, false
	for i := range items {
		d := items[i].Draw
		device = device && (items[i].Greedy || d != nil && (d.TopK <= compute.MaxDrawTopK || int(d.TopK) >= vocab))
		drawn = drawn || d != nil
	}
	device = device && (drawn && m.draw != nil || !drawn && m.greedy != nil)
	bt.sc.picks, bt.sc.bad, bt.sc.draws = nil, nil, nil
	if device {
		if len(bt.picks) < want {
			bt.picks, bt.bad = make([]int, want), make([]int, want)
		}
		bt.sc.picks, bt.sc.bad = bt.picks[:want], bt.bad[:want]
		if drawn {
			bt.draws = bt.draws[:0]
			for i := range items {
				d := compute.DrawRow{} // a greedy item's: the arg max
				if items[i].Draw != nil {
					d = *items[i].Draw
				}
				bt.draws = append(bt.draws, d)
			}
			bt.sc.draws = bt.draws
		}
	}
	var dst []float32
	if hidden {
		bt.sc.hidden = bt.states[:want*width]
	} else {
		dst = bt.logits[:want*vocab]
	}
	failed, err := m.step(&bt.sc, bt.passes, dst)
	bt.sc.picks, bt.sc.bad, bt.sc.draws, bt.sc.hidden = nil, nil, nil, nil
	if err == nil {
		err = m.backendErr()
	}
	// With a pool, the tokens name the blocks they filled, so later
	// sequences can share them (a no-op for a cache of its own).
	for i := 0; err == nil && i < len(items); i++ {
		if err = items[i].Seq.cache.AppendTokens(items[i].IDs); err != nil {
			failed = i
		}
	}
	if err != nil {
		if failed >= 0 {
			err = fmt.Errorf("model: batch item %d (a sequence of %d tokens): %w", failed, bt.passes[failed].start, err)
		}
		for i := range items {
			items[i].Seq.err = fmt.Errorf("model: sequence unusable until Reset: a batched step failed: %w", err)
			items[i].Logits, items[i].States = nil, nil
		}
		return err
	}
	off := 0
	for i := range items {
		it := &items[i]
		w := bt.passes[i].wanted() * width
		it.States = nil
		switch {
		case hidden:
			it.Logits, it.States = nil, bt.states[off:off+w:off+w]
		case device:
			it.Logits, it.Token, it.NonFinite = nil, bt.picks[i], bt.bad[i]
		case it.Greedy:
			it.Logits = bt.logits[off : off+w : off+w]
			it.Token, it.NonFinite = pick.ArgMax(it.Logits), pick.FirstNonFinite(it.Logits)
		case it.Draw != nil:
			row := bt.logits[off : off+w : off+w]
			it.Logits, it.NonFinite = nil, pick.FirstNonFinite(row)
			if d := it.Draw; d.Temperature == 0 {
				it.Token = pick.ArgMax(row)
			} else {
				f := pick.Filter{TopK: int(d.TopK), TopP: d.TopP, MinP: d.MinP}
				it.Token = pick.DrawFiltered(row, d.Temperature, f, d.U, &bt.pick) // overwrites row
			}
		default:
			it.Logits = bt.logits[off : off+w : off+w]
		}
		off += w
	}
	return nil
}

// check validates items, returning the step's tokens and the rows of
// logits it asks for.
func (bt *Batch) check(items []BatchItem) (rows, want int, err error) {
	m := bt.m
	if len(items) == 0 {
		return 0, 0, fmt.Errorf("model: batch step of no items")
	}
	vocab := m.cfg.VocabSize
	for i := range items {
		it := &items[i]
		s := it.Seq
		switch {
		case s == nil:
			return 0, 0, fmt.Errorf("model: batch item %d: nil sequence", i)
		case s.m != m:
			return 0, 0, fmt.Errorf("model: batch item %d: the sequence belongs to another model", i)
		case s.err != nil:
			return 0, 0, fmt.Errorf("model: batch item %d: %w", i, s.err)
		case len(it.IDs) == 0:
			return 0, 0, fmt.Errorf("model: batch item %d: no token ids", i)
		case it.Greedy && it.All:
			return 0, 0, fmt.Errorf("model: batch item %d: Greedy picks the last position's token; All asks for every position's logits", i)
		case it.Greedy && it.Hidden:
			return 0, 0, fmt.Errorf("model: batch item %d: Greedy picks a token from logits; Hidden asks for hidden states instead", i)
		case it.Draw != nil && (it.All || it.Hidden || it.Greedy):
			return 0, 0, fmt.Errorf("model: batch item %d: Draw draws the last position's token; not with All, Hidden or Greedy", i)
		case it.Draw != nil && !(it.Draw.Temperature >= 0 && it.Draw.Temperature <= math.MaxFloat32 && it.Draw.MinP >= 0 && it.Draw.MinP <= 1 && it.Draw.U >= 0 && it.Draw.U < 1):
			return 0, 0, fmt.Errorf("model: batch item %d: draw of temperature %v, min-p %v, uniform %v: want a finite temperature >= 0, min-p in [0, 1] and a uniform in [0, 1)", i, it.Draw.Temperature, it.Draw.MinP, it.Draw.U)
		case it.Hidden != items[0].Hidden:
			return 0, 0, fmt.Errorf("model: batch items 0 and %d: a step gives hidden states to every item (Hidden) or to none", i)
		case s.Len()+len(it.IDs) > m.maxCtx:
			return 0, 0, fmt.Errorf("model: batch item %d: %w", i, &ContextError{Tokens: s.Len() + len(it.IDs), Context: m.maxCtx, Limit: m.ContextLimit()})
		case s.cache.Config().Windows != nil && len(it.IDs) > s.cache.Config().SlideChunk:
			return 0, 0, fmt.Errorf("model: batch item %d: %d tokens in one step, more than the %d its sliding layers' cache was made for (SequenceOptions.StepTokens)", i, len(it.IDs), s.cache.Config().SlideChunk)
		}
		// A quadratic scan: steps hold tens of sequences, and a map
		// would allocate every step.
		for j := range i {
			if items[j].Seq == s {
				return 0, 0, fmt.Errorf("model: batch items %d and %d are the same sequence", j, i)
			}
		}
		for j, id := range it.IDs {
			if id < 0 || id >= vocab {
				return 0, 0, fmt.Errorf("model: batch item %d: token id %d at index %d is out of range [0, %d)", i, id, j, vocab)
			}
		}
		rows += len(it.IDs)
		if it.All || it.Hidden {
			want += len(it.IDs)
		} else {
			want++
		}
	}
	if rows > bt.maxRows {
		return 0, 0, fmt.Errorf("model: batch step of %d tokens exceeds the batch's %d", rows, bt.maxRows)
	}
	return rows, want, nil
}

// roundUp returns the power of two at or above n, at most limit (n ≤
// limit), so a growing step reallocates the scratch a few times only.
func roundUp(n, limit int) int {
	if n <= 1 {
		return 1
	}
	return min(1<<bits.Len(uint(n-1)), limit)
}
