package model

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"
)

// EngineOptions configure LoadEngine.
type EngineOptions struct {
	Model Options            // forward pass and KV cache
	Hub   weights.HubOptions // how a Hugging Face id is resolved and fetched
}

// An Engine is a loaded model with its tokenizer: the embedding API for
// programs that generate text. Its methods may be called from several
// goroutines; each Generate call runs its own sequence.
type Engine struct {
	model *Model
	tok   *tokenizer.Tokenizer
	dir   string
}

// LoadEngine loads a model from a local directory or a Hugging Face id
// (resolved through the HF cache, downloading it when allowed).
func LoadEngine(ctx context.Context, nameOrDir string, opt EngineOptions) (*Engine, error) {
	dir, err := weights.Resolve(ctx, nameOrDir, opt.Hub)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	m, err := Load(dir, opt.Model)
	if err != nil {
		return nil, err
	}
	if v := m.Config().VocabSize; tok.VocabSize() > v {
		m.Close()
		return nil, fmt.Errorf("model: %s: tokenizer has %d tokens but the model's vocab_size is %d", dir, tok.VocabSize(), v)
	}
	return &Engine{model: m, tok: tok, dir: dir}, nil
}

// Model returns the loaded model.
func (e *Engine) Model() *Model { return e.model }

// Tokenizer returns the model's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Dir returns the local directory the model was loaded from.
func (e *Engine) Dir() string { return e.dir }

// Close releases the model's memory maps and workers.
func (e *Engine) Close() error { return e.model.Close() }

// GenerateOptions control one Generate call.
type GenerateOptions struct {
	MaxTokens int // generated tokens at most; 0 = until the context is full
	Sampling  SamplingOptions
	Stop      []string // generation ends before the first of these strings
	Chat      bool     // wrap the prompt in the model's chat template
	System    string   // system message when Chat is set
}

// Why generation ended.
const (
	StopEOS    = "eos"    // the model produced an end-of-sequence token
	StopString = "stop"   // a stop string appeared
	StopLength = "length" // MaxTokens or the context was reached
)

// Result describes a finished generation.
type Result struct {
	Text            string
	StopReason      string
	PromptTokens    int
	GeneratedTokens int
	Prefill, Decode time.Duration
	KV              kvcache.Stats
}

// PrefillRate and DecodeRate are in tokens per second.
func (r *Result) PrefillRate() float64 { return rate(r.PromptTokens, r.Prefill) }
func (r *Result) DecodeRate() float64  { return rate(r.GeneratedTokens, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// PromptIDs returns the token ids Generate would feed for prompt.
func (e *Engine) PromptIDs(prompt string, opt GenerateOptions) ([]int, error) {
	if !opt.Chat {
		return e.tok.Encode(prompt, true), nil
	}
	var msgs []tokenizer.Message
	if opt.System != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: opt.System})
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: prompt})
	text, err := e.tok.ApplyChat(msgs, true)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", e.dir, err)
	}
	// The template already spells out BOS where the family wants one.
	return e.tok.Encode(text, false), nil
}

// Generate continues prompt, calling onText with each piece of new text as
// soon as it is complete (never half a UTF-8 character, never part of a stop
// string). It stops on EOS, a stop string, MaxTokens, a full context, an
// error from onText or the cancellation of ctx.
func (e *Engine) Generate(ctx context.Context, prompt string, opt GenerateOptions, onText func(string) error) (*Result, error) {
	if opt.MaxTokens < 0 {
		return nil, fmt.Errorf("model: max tokens %d must be >= 0", opt.MaxTokens)
	}
	sampler, err := NewSampler(opt.Sampling)
	if err != nil {
		return nil, err
	}
	ids, err := e.PromptIDs(prompt, opt)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("model: empty prompt (no tokens and no BOS)")
	}
	ctxLen := e.model.MaxContext()
	if len(ids) >= ctxLen {
		return nil, fmt.Errorf("model: prompt of %d tokens exceeds the context of %d", len(ids), ctxLen)
	}
	maxNew := ctxLen - len(ids)
	if opt.MaxTokens > 0 && opt.MaxTokens < maxNew {
		maxNew = opt.MaxTokens
	}
	eos := e.stopIDs(opt.Chat)

	seq, err := e.model.NewSequence()
	if err != nil {
		return nil, err
	}
	defer seq.Close()

	res := &Result{PromptTokens: len(ids)}
	start := time.Now()
	logits, err := seq.Forward(ids, false)
	if err != nil {
		return nil, err
	}
	res.Prefill = time.Since(start)

	history := append(make([]int, 0, len(ids)+maxNew), ids...)
	stream := e.tok.NewStream()
	filter := stopFilter{stops: opt.Stop}
	var text []byte
	emit := func(s string) error {
		if s == "" {
			return nil
		}
		text = append(text, s...)
		if onText != nil {
			return onText(s)
		}
		return nil
	}

	start = time.Now()
	res.StopReason = StopLength
	for res.GeneratedTokens < maxNew {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id := sampler.Sample(logits, history)
		if eos[id] {
			res.StopReason = StopEOS
			break
		}
		res.GeneratedTokens++
		history = append(history, id)
		out, stopped := filter.push(stream.Add(id))
		if err := emit(out); err != nil {
			return nil, err
		}
		if stopped {
			res.StopReason = StopString
			break
		}
		if res.GeneratedTokens == maxNew {
			break
		}
		if logits, err = seq.Forward(history[len(history)-1:], false); err != nil {
			return nil, err
		}
	}
	if res.StopReason != StopString {
		// An incomplete character or a held-back stop-string prefix is
		// still text the model produced.
		out, stopped := filter.push(stream.Flush())
		if stopped {
			res.StopReason = StopString
		} else {
			out += filter.flush()
		}
		if err := emit(out); err != nil {
			return nil, err
		}
	}
	res.Decode = time.Since(start)
	res.Text = string(text)
	res.KV = seq.KVStats()
	return res, nil
}

// stopIDs gathers the token ids that end generation: the config's and the
// tokenizer's EOS, plus the chat turn terminators in chat mode.
func (e *Engine) stopIDs(chat bool) map[int]bool {
	ids := map[int]bool{}
	for _, id := range e.model.Config().EOSTokenIDs {
		ids[id] = true
	}
	for _, id := range e.tok.EOS() {
		ids[id] = true
	}
	if chat {
		for _, id := range e.tok.ChatStopIDs() {
			ids[id] = true
		}
	}
	return ids
}
