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
// The texts run one after another, each through a sequence of its own
// outside the scheduler's batches; cancelling ctx stops the work between
// chunks of a text. A text that is empty (no tokens) or longer than the
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
	seq, err := e.model.NewSequenceOpts(e.seq)
	if err != nil {
		return nil, nil, err
	}
	defer seq.Close()
	h := e.model.Config().HiddenSize
	vecs, tokens = make([][]float32, len(texts)), make([]int, len(texts))
	sum := make([]float64, h)
	for i, text := range ids {
		seq.Reset()
		clear(sum)
		for c := 0; c < len(text); c += prefillChunk {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			chunk := text[c:min(len(text), c+prefillChunk)]
			rows, err := seq.Hidden(chunk)
			if err != nil {
				return nil, nil, fmt.Errorf("kakeya: text %d: %w", i, err)
			}
			switch opt.Pooling {
			case PoolMean:
				for r := range chunk {
					for j, v := range rows[r*h : (r+1)*h] {
						sum[j] += float64(v)
					}
				}
			case PoolLast:
				if c+len(chunk) == len(text) {
					for j, v := range rows[(len(chunk)-1)*h:] {
						sum[j] = float64(v)
					}
				}
			}
		}
		if opt.Pooling == PoolMean {
			for j := range sum {
				sum[j] /= float64(len(text))
			}
		}
		vecs[i], tokens[i] = pooled(sum, opt.Normalize), len(text)
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
