package kakeya

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/pick"

	"github.com/kakeya-ai/kakeya/internal/mathx"
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
	opt  SamplingOptions
	rng  *rand.Rand
	cand candidates
	seen map[int]struct{}
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
// top-k, min-p and top-p keep, in that order. Without a top-k it costs a
// pass or two over the vocabulary and a sort of only the tokens top-p can
// reach (sampleAll); a top-k keeps its k best by a heap (sampleTopK).
func (s *Sampler) Sample(logits []float32, history []int) int {
	s.penalize(logits, history)
	if s.opt.Temperature == 0 {
		return pick.ArgMax(logits)
	}
	if k := s.opt.TopK; k > 0 && k < len(logits) {
		return s.sampleTopK(logits)
	}
	return s.sampleAll(logits)
}

// DrawRow returns the next token's draw for a backend that draws on its
// device (compute.Draw) from a row of vocab logits, and true; or false
// when this sampler's draw needs the logits on the host: greedy
// (temperature 0, the arg max), a repetition penalty, a top-k below
// vocab or a top-p below 1. The draw's uniform is the sampler's random
// number for the token, as Sample would take it, so that a seeded request
// draws the same tokens on the device as Sample draws here (compute.Draw
// says where they may differ: a float64 rounding at a boundary between
// two tokens). DrawRow returns the same draw until Drawn says its token
// was taken: a step planned with it may be dropped and planned again.
func (s *Sampler) DrawRow(vocab int) (compute.DrawRow, bool) {
	if !s.drawable(vocab) {
		return compute.DrawRow{}, false
	}
	if !s.pending {
		s.u, s.pending = s.rng.Float64(), true
	}
	return compute.DrawRow{U: s.u, Temperature: s.opt.Temperature, MinP: s.opt.MinP}, true
}

// Drawn says the token of the draw DrawRow returned was taken: the next
// DrawRow draws a new uniform.
func (s *Sampler) Drawn() { s.pending = false }

// drawable reports whether DrawRow gives this sampler's draws over a
// vocabulary of vocab tokens.
func (s *Sampler) drawable(vocab int) bool {
	o := s.opt
	return o.Temperature > 0 && !s.penalizes() && !(o.TopK > 0 && o.TopK < vocab) && !(o.TopP > 0 && o.TopP < 1)
}

// sampleTopK draws from the k most likely tokens, sorted by descending
// logit (ties by id): min-p and top-p cut that list from its end.
func (s *Sampler) sampleTopK(logits []float32) int {
	c := s.topK(logits)
	// Softmax over the candidates at the given temperature, most likely first.
	inv := 1 / float64(s.opt.Temperature)
	maxL := float64(c.logit[0])
	sum := 0.0
	for i := range c.id {
		p := mathx.Exp((float64(c.logit[i]) - maxL) * inv)
		c.prob[i] = p
		sum += p
	}
	n := len(c.id)
	if s.opt.MinP > 0 {
		floor := float64(s.opt.MinP) * c.prob[0]
		for n > 1 && c.prob[n-1] < floor {
			sum -= c.prob[n-1]
			n--
		}
	}
	if p := float64(s.opt.TopP); p > 0 && p < 1 {
		cum := 0.0
		for i := 0; i < n; i++ {
			cum += c.prob[i]
			if cum >= p*sum {
				sum = cum
				n = i + 1
				break
			}
		}
	}
	r := s.rng.Float64() * sum
	for i := 0; i < n; i++ {
		r -= c.prob[i]
		if r < 0 {
			return int(c.id[i])
		}
	}
	return int(c.id[n-1])
}

// sampleAll draws from the whole vocabulary. logits becomes each token's
// weight relative to the most likely one's, w = exp((l - max)/T) in
// float32 (1 for the most likely), summed in index order; min-p keeps the
// tokens with w >= min-p. Without top-p the draw walks the kept tokens in
// index order: the same distribution as walking them sorted, with no
// sort. Top-p needs the most likely tokens first, but only as many as
// hold p of the weight: the kept weights' sums by binary exponent (one
// pass) give the highest power of two t such that the tokens with w >= t
// hold at least that much, and only those are sorted (by descending
// weight, ties by id) to find the cut, at most one octave of weights
// more than it needs.
func (s *Sampler) sampleAll(logits []float32) int {
	p := float64(s.opt.TopP)
	if !(p > 0 && p < 1) {
		// Temperature and min-p alone: the draw a device makes too.
		return pick.Draw(logits, s.opt.Temperature, s.opt.MinP, s.rng.Float64())
	}
	inv := 1 / float64(s.opt.Temperature)
	maxL := float64(logits[pick.ArgMax(logits)])
	floor := float32(s.opt.MinP) // the most likely token's weight is exactly 1
	sum := 0.0
	for i, l := range logits {
		w := mathx.ExpWeight((float64(l) - maxL) * inv)
		if w < floor || !(w > 0) {
			w = 0
		} else {
			sum += float64(w)
		}
		logits[i] = w
	}
	// The weight held at each binary exponent, the largest first, down to
	// the exponent t whose octave completes p of the sum.
	var octave [256]float64
	for _, w := range logits {
		if w > 0 {
			octave[math.Float32bits(w)>>23] += float64(w)
		}
	}
	t, held := uint32(255), 0.0
	for ; t > 0; t-- {
		if held += octave[t]; held >= p*sum {
			break
		}
	}
	nc := 0
	for _, w := range logits {
		if w > 0 && math.Float32bits(w)>>23 >= t {
			nc++
		}
	}
	c := &s.cand
	c.reset(nc)
	for i, w := range logits {
		if w > 0 && math.Float32bits(w)>>23 >= t {
			c.id = append(c.id, int32(i))
			c.logit = append(c.logit, w)
		}
	}
	c.sortDesc() // by weight, ties by id
	n, cum := len(c.id), 0.0
	for i, w := range c.logit {
		cum += float64(w)
		if cum >= p*sum {
			n = i + 1
			break
		}
	}
	r := s.rng.Float64() * cum
	for i, w := range c.logit[:n] {
		r -= float64(w)
		if r < 0 {
			return int(c.id[i])
		}
	}
	return int(c.id[n-1])
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

// topK fills the candidate list with the K highest logits (all when K is 0
// or exceeds the vocabulary), sorted by descending logit.
func (s *Sampler) topK(logits []float32) *candidates {
	c := &s.cand
	k := s.opt.TopK
	if k <= 0 || k > len(logits) {
		k = len(logits)
	}
	c.reset(k)
	if k == len(logits) {
		for i, l := range logits {
			c.id = append(c.id, int32(i))
			c.logit = append(c.logit, l)
		}
	} else {
		// A min-heap of the best k seen so far: O(V log k).
		for i, l := range logits {
			if len(c.id) < k {
				c.id = append(c.id, int32(i))
				c.logit = append(c.logit, l)
				if len(c.id) == k {
					heap.Init(c)
				}
				continue
			}
			if l > c.logit[0] {
				c.id[0], c.logit[0] = int32(i), l
				heap.Fix(c, 0)
			}
		}
	}
	c.sortDesc()
	c.prob = c.prob[:len(c.id)]
	return c
}

// candidates is a struct of parallel slices so heap and sort move no
// interfaces per element; it implements heap.Interface as a min-heap.
type candidates struct {
	id    []int32
	logit []float32
	prob  []float64
	order []int32
}

func (c *candidates) reset(k int) {
	if cap(c.id) < k {
		c.id = make([]int32, 0, k)
		c.logit = make([]float32, 0, k)
		c.prob = make([]float64, k)
		c.order = make([]int32, 0, k)
	}
	c.id, c.logit, c.prob = c.id[:0], c.logit[:0], c.prob[:k]
}

func (c *candidates) Len() int           { return len(c.id) }
func (c *candidates) Less(i, j int) bool { return c.logit[i] < c.logit[j] }
func (c *candidates) Swap(i, j int) {
	c.id[i], c.id[j] = c.id[j], c.id[i]
	c.logit[i], c.logit[j] = c.logit[j], c.logit[i]
}
func (c *candidates) Push(any) { panic("candidates: fixed size") }
func (c *candidates) Pop() any { panic("candidates: fixed size") }

// sortDesc orders by descending logit, ties by ascending id, so results do
// not depend on the heap's internal order.
func (c *candidates) sortDesc() {
	c.order = c.order[:0]
	for i := range c.id {
		c.order = append(c.order, int32(i))
	}
	slices.SortFunc(c.order, func(a, b int32) int {
		la, lb := c.logit[a], c.logit[b]
		switch {
		case la > lb:
			return -1
		case la < lb:
			return 1
		}
		return int(c.id[a] - c.id[b])
	})
	// Gather through scratch: prob holds the logits, order becomes the ids.
	for i, o := range c.order {
		c.prob[i] = float64(c.logit[o])
		c.order[i] = c.id[o]
	}
	for i := range c.order {
		c.logit[i] = float32(c.prob[i])
	}
	copy(c.id, c.order)
}
