package kakeya

import (
	"math"

	"github.com/kakeya-ai/kakeya/internal/mathx"
)

// MaxTopLogprobs is the most alternatives GenerateOptions.TopLogprobs may
// ask for, as the OpenAI API's top_logprobs.
const MaxTopLogprobs = 20

// A TokenInfo describes one generated token, for GenerateOptions.OnToken
// and Result.Logprobs.
type TokenInfo struct {
	ID int
	// Text is the token's own text: what it adds to the text of the
	// token before it (a SentencePiece token keeps its leading space). A
	// token that holds part of a multi-byte character reads as U+FFFD,
	// as vLLM reports it; the generated text is the tokens decoded
	// together.
	Text string
	// Logprob is the token's log-probability (natural logarithm) under
	// the model's distribution: the log-softmax of the logits as the
	// model computed them, before the repetition penalty, temperature,
	// top-k, top-p and min-p shaped the sampling (vLLM's default, its
	// "raw" logprobs). It is set with GenerateOptions.Logprobs, 0
	// otherwise.
	Logprob float32
	// Top holds the GenerateOptions.TopLogprobs most likely tokens at
	// this position, most likely first (ties by ascending id), under the
	// same distribution; ID may or may not be among them.
	Top []TopLogprob
}

// A TopLogprob is one of the most likely tokens at a position.
type TopLogprob struct {
	ID      int
	Text    string // as TokenInfo.Text, after the same token
	Logprob float32
}

// tokenLogprobs is what Next works out for a token it keeps: the scheduler
// carries it, as the token's payload, to the goroutine that called
// Generate.
type tokenLogprobs struct {
	logprob float32
	n       int // entries of top in use
	top     [MaxTopLogprobs]struct {
		id      int32
		logprob float32
	}
}

// logprober computes log-probabilities on the scheduler's goroutine. Its
// scratch lives as long as the generation, so a token costs no allocation
// but the payload that carries the result away.
type logprober struct {
	k      int       // alternatives wanted
	raw    []float32 // a copy of the logits where sampling changes them in place
	lse    float64   // log of the sum of exp(logits)
	cur    tokenLogprobs
	topIDs [MaxTopLogprobs]int32
	topLog [MaxTopLogprobs]float32
}

// measure takes in the logits of a position before sampling sees them:
// their log-sum-exp and the k largest. keep copies them, for a sampler
// that modifies them (the repetition penalty).
func (p *logprober) measure(logits []float32, keep bool) {
	n := 0
	maxL := float32(math.Inf(-1))
	for i, v := range logits {
		maxL = max(maxL, v)
		if n == p.k && (n == 0 || v <= p.topLog[n-1]) {
			continue
		}
		// Insert v after the entries >= v: ties keep the smaller id first.
		j := n
		if n < p.k {
			n++
		} else {
			j = n - 1
		}
		for j > 0 && p.topLog[j-1] < v {
			p.topLog[j], p.topIDs[j] = p.topLog[j-1], p.topIDs[j-1]
			j--
		}
		p.topLog[j], p.topIDs[j] = v, int32(i)
	}
	sum := 0.0
	for _, v := range logits {
		sum += mathx.Exp(float64(v - maxL))
	}
	p.lse = float64(maxL) + math.Log(sum)
	p.cur.n = n
	for i := range n {
		p.cur.top[i].id = p.topIDs[i]
		p.cur.top[i].logprob = float32(float64(p.topLog[i]) - p.lse)
	}
	if keep {
		p.raw = append(p.raw[:0], logits...)
	} else {
		p.raw = p.raw[:0]
	}
}

// pick records that id was sampled from the logits measure saw (logits,
// unless measure kept a copy).
func (p *logprober) pick(id int, logits []float32) {
	if len(p.raw) > 0 {
		logits = p.raw
	}
	p.cur.logprob = float32(float64(logits[id]) - p.lse)
}

// payload returns a copy of the last token's log-probabilities, to travel
// with it.
func (p *logprober) payload(int) any {
	c := p.cur
	return &c
}
