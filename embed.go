package kakeya

import (
	"context"
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/model"
)

// Pooling says how Embed reduces a text's hidden states to one vector.
type Pooling int

const (
	// PoolLast takes the last position's hidden state: in a causal
	// decoder the only one that has seen the whole text, what decoder
	// embedding models (e5-mistral, gte-Qwen, Qwen3-Embedding) use.
	PoolLast Pooling = iota
	// PoolMean averages every position's, BOS included.
	PoolMean
)

// String names the pooling as the tools' flags do: last or mean.
func (p Pooling) String() string {
	switch p {
	case PoolLast:
		return "last"
	case PoolMean:
		return "mean"
	}
	return fmt.Sprintf("Pooling(%d)", int(p))
}

// ParsePooling returns the Pooling named last or mean.
func ParsePooling(name string) (Pooling, error) {
	switch name {
	case "last":
		return PoolLast, nil
	case "mean":
		return PoolMean, nil
	}
	return 0, fmt.Errorf("kakeya: pooling %q: want last or mean", name)
}

// EmbedOptions are the options of Embed.
type EmbedOptions struct {
	Pooling Pooling
	// Normalize scales each vector to unit length (L2), as the OpenAI
	// API's embeddings are, so that a dot product is a cosine.
	Normalize bool
}

// Embed returns, for each text, one vector of hidden_size: the model's
// final norm output (the hidden state its classifier reads) pooled over
// the text's tokens, which Embed tokenizes as Generate does a prompt (the
// model's BOS first, when it has one); and how many tokens each text was.
//
// A generative model is not trained for this: its vectors serve
// similarity of text as the model sees it, for search over its own
// inputs or as features, less well than a trained embedding model's
// (load one of those, a decoder such as Qwen3-Embedding, to serve those).
//
// The texts run in batched steps of their own, outside the scheduler's:
// each step packs up to a prefill chunk of tokens from the texts in turn
// (a long text split across steps), every matrix product running once
// over them all; cancelling ctx stops the work between steps. A text that is empty (no tokens) or longer than the
// context is an error naming its index.
func (e *Engine) Embed(ctx context.Context, texts []string, opt EmbedOptions) (vecs [][]float32, tokens []int, err error) {
	if opt.Pooling != PoolLast && opt.Pooling != PoolMean {
		return nil, nil, fmt.Errorf("kakeya: EmbedOptions.Pooling %v: want PoolLast or PoolMean", opt.Pooling)
	}
	ids := make([][]int, len(texts))
	for i, text := range texts {
		if ids[i], err = e.PromptIDs(text, GenerateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("kakeya: text %d: %w", i, err)
		}
		switch n := len(ids[i]); {
		case n == 0:
			return nil, nil, fmt.Errorf("kakeya: text %d is empty (no tokens and no BOS)", i)
		case n > e.model.MaxContext():
			return nil, nil, fmt.Errorf("kakeya: text %d: %w", i, &model.ContextError{Tokens: n, Context: e.model.MaxContext(), Limit: e.model.ContextLimit()})
		}
	}
	bt, err := e.model.NewBatch(prefillChunk)
	if err != nil {
		return nil, nil, err
	}
	h := e.model.Config().HiddenSize
	vecs, tokens = make([][]float32, len(texts)), make([]int, len(texts))
	sums := make([][]float64, len(texts))       // of the texts started, until pooled
	seqs := make([]*model.Sequence, len(texts)) // likewise
	var free []*model.Sequence                  // reset, for the next texts
	defer func() {
		for _, s := range append(free, seqs...) {
			if s != nil {
				s.Close()
			}
		}
	}()
	// Steps of up to prefillChunk tokens, packed with the texts in order
	// (a long one split across steps), each text in a sequence of its own:
	// every matrix product of a step runs once over all its texts.
	var items []model.BatchItem
	var owners []int
	next, pos := 0, 0 // the next text to feed, and its tokens fed
	for next < len(ids) {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		items, owners = items[:0], owners[:0]
		for room := prefillChunk; room > 0 && next < len(ids); {
			if seqs[next] == nil {
				if len(free) > 0 {
					seqs[next], free = free[len(free)-1], free[:len(free)-1]
				} else if seqs[next], err = e.model.NewSequenceOpts(e.seq); err != nil {
					return nil, nil, err
				}
				sums[next] = make([]float64, h)
			}
			n := min(room, len(ids[next])-pos)
			items = append(items, model.BatchItem{Seq: seqs[next], IDs: ids[next][pos : pos+n], Hidden: true})
			owners = append(owners, next)
			room, pos = room-n, pos+n
			if pos == len(ids[next]) {
				next, pos = next+1, 0
			}
		}
		if err := bt.Forward(items); err != nil {
			return nil, nil, fmt.Errorf("kakeya: embedding: %w", err)
		}
		for k, it := range items {
			i, sum := owners[k], sums[owners[k]]
			done := seqs[i].Len() == len(ids[i])
			switch opt.Pooling {
			case PoolMean:
				for r := range it.IDs {
					for j, v := range it.States[r*h : (r+1)*h] {
						sum[j] += float64(v)
					}
				}
			case PoolLast:
				if done {
					for j, v := range it.States[(len(it.IDs)-1)*h:] {
						sum[j] = float64(v)
					}
				}
			}
			if !done {
				continue
			}
			if opt.Pooling == PoolMean {
				for j := range sum {
					sum[j] /= float64(len(ids[i]))
				}
			}
			vecs[i], tokens[i] = pooled(sum, opt.Normalize), len(ids[i])
			seqs[i].Reset()
			free, seqs[i], sums[i] = append(free, seqs[i]), nil, nil
		}
	}
	return vecs, tokens, nil
}

// pooled returns v as float32s, scaled to unit length if normalize.
func pooled(v []float64, normalize bool) []float32 {
	scale := 1.0
	if normalize {
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		if ss > 0 {
			scale = 1 / math.Sqrt(ss)
		}
	}
	out := make([]float32, len(v))
	for j, x := range v {
		out[j] = float32(x * scale)
	}
	return out
}
