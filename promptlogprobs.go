package kakeya

import (
	"context"
	"errors"
	"fmt"

	"github.com/kakeya-ai/kakeya/model"
)

// PromptLogprobs scores a prompt's tokens, as the OpenAI API's echo with
// logprobs and vLLM's prompt_logprobs report them: for each of ids after
// the first, its log-probability given the tokens before it and the top
// most likely tokens at its position (0 to MaxTopLogprobs), under the
// model's raw distribution as TokenInfo.Logprob describes it. The first
// token has nothing before it: its TokenInfo holds its ID and Text alone.
//
// It runs ids through a sequence of its own, outside the batches
// Generate's requests share (as Logits does), a prefill chunk at a time,
// keeping no more logits than a chunk's. Cancelling ctx stops it between
// chunks.
func (e *Engine) PromptLogprobs(ctx context.Context, ids []int, top int) ([]TokenInfo, error) {
	switch {
	case len(ids) == 0:
		return nil, errors.New("kakeya: empty prompt (no tokens)")
	case top < 0 || top > MaxTopLogprobs:
		return nil, fmt.Errorf("kakeya: top logprobs %d must be in [0, %d]", top, MaxTopLogprobs)
	}
	if err := e.model.CheckOpen(); err != nil {
		return nil, err
	}
	v := e.model.Config().VocabSize
	for i, id := range ids {
		if id < 0 || id >= v {
			return nil, fmt.Errorf("kakeya: prompt token %d is id %d, outside the vocabulary of %d", i, id, v)
		}
	}
	if n := e.model.MaxContext(); len(ids) > n {
		return nil, fmt.Errorf("kakeya: %w", &model.ContextError{Tokens: len(ids), Context: n, Limit: e.model.ContextLimit()})
	}
	seq, err := e.model.NewSequenceOpts(e.seq)
	if err != nil {
		return nil, err
	}
	defer seq.Close()
	// The token texts read as Generate's do: each after the one before.
	g := &generation{e: e}
	out := make([]TokenInfo, len(ids))
	out[0] = TokenInfo{ID: ids[0], Text: e.tok.Decode(ids[:1], false)}
	lp := &logprober{k: top}
	for i := 0; i+1 < len(ids); i += prefillChunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The last token's logits score nothing: it is left out.
		chunk := ids[i:min(len(ids)-1, i+prefillChunk)]
		flat, err := seq.Forward(chunk, true)
		if err != nil {
			return nil, err
		}
		for j := range chunk {
			p := i + j // the row scores ids[p+1]
			row := flat[j*v : (j+1)*v]
			if err := e.checkFinite(row, 0); err != nil {
				return nil, err
			}
			lp.measure(row, false)
			next := ids[p+1]
			lp.pick(next, row)
			g.prev = ids[p]
			info := TokenInfo{ID: next, Text: g.decode(next), Logprob: lp.cur.logprob}
			if lp.cur.n > 0 {
				info.Top = make([]TopLogprob, lp.cur.n)
				for k := range info.Top {
					t := lp.cur.top[k]
					info.Top[k] = TopLogprob{ID: int(t.id), Text: g.decode(int(t.id)), Logprob: t.logprob}
				}
			}
			out[p+1] = info
		}
	}
	return out, nil
}
