package kakeya

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/pick"
)

// SamplingOptions choose how the next token is drawn from the logits.
// A zero Temperature means greedy decoding (arg max); the other knobs then
// only matter through RepetitionPenalty.
type SamplingOptions struct {
	Temperature float32 // 0 = greedy
	TopK        int     // keep the K most likely tokens; 0 = all
	TopP        float32 // keep the smallest set with cumulative probability >= TopP; 0 or 1 = all
	MinP        float32 // drop tokens with probability < MinP * p(max); 0 = off

	// RepetitionPenalty > 1 discourages tokens seen in the last RepeatLastN
	// tokens (prompt included), as in HF transformers and llama.cpp: a
	// positive logit is divided by it, a negative one multiplied. 1 is off,
	// and so is 0, the zero value: an unset penalty. Negative, infinite and
	// NaN values are rejected.
	RepetitionPenalty float32
	RepeatLastN       int // 0 = the whole history

	Seed uint64 // the same seed, prompt and options give the same output
}

// Validate reports the first out-of-range option.
func (o SamplingOptions) Validate() error {
	switch {
	case !(o.Temperature >= 0) || math.IsInf(float64(o.Temperature), 1):
		return fmt.Errorf("sampling: temperature %v must be >= 0 and finite", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("sampling: top-k %d must be >= 0", o.TopK)
	case o.TopP < 0 || o.TopP > 1 || math.IsNaN(float64(o.TopP)):
		return fmt.Errorf("sampling: top-p %v must be in [0, 1]", o.TopP)
	case o.MinP < 0 || o.MinP > 1 || math.IsNaN(float64(o.MinP)):
		return fmt.Errorf("sampling: min-p %v must be in [0, 1]", o.MinP)
	case !(o.RepetitionPenalty >= 0) || math.IsInf(float64(o.RepetitionPenalty), 1):
		return fmt.Errorf("sampling: repetition penalty %v must be > 0 and finite (1 = off; 0 = unset, also off)", o.RepetitionPenalty)
	case o.RepeatLastN < 0:
		return fmt.Errorf("sampling: repeat-last-n %d must be >= 0", o.RepeatLastN)
	}
	return nil
}

// A Sampler draws tokens under fixed options. It keeps its scratch space
// between calls, so one Sampler serves one sequence at a time.
type Sampler struct {
	opt     SamplingOptions
	rng     *rand.Rand
	scratch pick.Scratch
	seen    map[int]struct{}
	// u is the uniform DrawRow handed out, pending until Drawn.
	u       float64
	pending bool
}

// NewSampler returns a sampler seeded from opt.Seed.
func NewSampler(opt SamplingOptions) (*Sampler, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{
		opt:  opt,
		rng:  rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15)),
		seen: make(map[int]struct{}),
	}, nil
}

// Sample picks the next token from one row of logits. history holds the
// tokens so far (for the repetition penalty). logits is modified in place.
//
// The draw is the softmax at the temperature over the candidates that
// top-k, min-p and top-p keep, in that order (pick.DrawFiltered says
// exactly how). Without a top-k it costs a pass or two over the
// vocabulary and a sort of only the tokens top-p can reach; a top-k keeps
// its k best by a heap.
func (s *Sampler) Sample(logits []float32, history []int) int {
	s.penalize(logits, history)
	if s.opt.Temperature == 0 {
		return pick.ArgMax(logits)
	}
	return pick.DrawFiltered(logits, s.opt.Temperature, s.filter(), s.rng.Float64(), &s.scratch)
}

// filter is the sampler's pick.Filter.
func (s *Sampler) filter() pick.Filter {
	return pick.Filter{TopK: s.opt.TopK, TopP: s.opt.TopP, MinP: s.opt.MinP}
}

// DrawRow returns the next token's draw for a backend that draws on its
// device (compute.Draw) from a row of vocab logits, and true; or false
// when this sampler's draw needs the logits on the host: greedy
// (temperature 0, the arg max), a repetition penalty, or a top-k below
// vocab and above compute.MaxDrawTopK. The draw's uniform is the
// sampler's random number for the token, as Sample would take it, so that
// a seeded request draws the same tokens on the device as Sample draws
// here (compute.Draw says where they may differ: with top-p and no top-k,
// a float64 rounding at a boundary between two tokens). DrawRow returns
// the same draw until Drawn says its token was taken: a step planned with
// it may be dropped and planned again.
func (s *Sampler) DrawRow(vocab int) (compute.DrawRow, bool) {
	if !s.drawable(vocab) {
		return compute.DrawRow{}, false
	}
	if !s.pending {
		s.u, s.pending = s.rng.Float64(), true
	}
	o := s.opt
	d := compute.DrawRow{U: s.u, Temperature: o.Temperature, MinP: o.MinP, TopP: o.TopP}
	if o.TopK > 0 && o.TopK < vocab {
		d.TopK = int32(o.TopK)
	}
	return d, true
}

// Drawn says the token of the draw DrawRow returned was taken: the next
// DrawRow draws a new uniform.
func (s *Sampler) Drawn() { s.pending = false }

// Drawable reports whether DrawRow gives this sampler's draws over a
// vocabulary of vocab tokens (a backend that draws on its device can
// draw them), without drawing a uniform.
func (s *Sampler) Drawable(vocab int) bool { return s.drawable(vocab) }

// drawable reports whether DrawRow gives this sampler's draws over a
// vocabulary of vocab tokens.
func (s *Sampler) drawable(vocab int) bool {
	o := s.opt
	return o.Temperature > 0 && !s.penalizes() && !(o.TopK > compute.MaxDrawTopK && o.TopK < vocab)
}

// penalizes reports whether Sample changes the logits it is given (the
// repetition penalty does, in place).
func (s *Sampler) penalizes() bool {
	pen := s.opt.RepetitionPenalty
	return pen != 0 && pen != 1
}

func (s *Sampler) penalize(logits []float32, history []int) {
	pen := s.opt.RepetitionPenalty
	if !s.penalizes() || len(history) == 0 {
		return
	}
	if n := s.opt.RepeatLastN; n > 0 && len(history) > n {
		history = history[len(history)-n:]
	}
	clear(s.seen)
	for _, id := range history {
		if id < 0 || id >= len(logits) {
			continue
		}
		if _, ok := s.seen[id]; ok {
			continue
		}
		s.seen[id] = struct{}{}
		if logits[id] > 0 {
			logits[id] /= pen
		} else {
			logits[id] *= pen
		}
	}
}
