package kakeya

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// prefillChunk is the most prompt tokens fed to one Forward call, the
// model's own pass size: Generate and Logits check their context between
// chunks.
const prefillChunk = 512

// GenerateOptions control one Generate call. The zero value generates
// greedily until EOS or a full context.
type GenerateOptions struct {
	MaxTokens int // generated tokens at most; 0 = until the context is full
	Sampling  SamplingOptions
	Stop      []string // generation ends before the first of these (non-empty) strings
	Chat      bool     // wrap the prompt in the model's chat template
	System    string   // system message, only with Chat (an error without)
}

// validate reports the first option Generate cannot honour.
func (o *GenerateOptions) validate() error {
	if err := o.checkPrompt(); err != nil {
		return err
	}
	if o.MaxTokens < 0 {
		return fmt.Errorf("kakeya: max tokens %d must be >= 0", o.MaxTokens)
	}
	for i, s := range o.Stop {
		if s == "" {
			return fmt.Errorf("kakeya: stop string %d of %d is empty", i+1, len(o.Stop))
		}
	}
	return o.Sampling.Validate()
}

// checkPrompt reports options that shape the prompt but would be ignored.
func (o *GenerateOptions) checkPrompt() error {
	if o.System != "" && !o.Chat {
		return errors.New("kakeya: GenerateOptions.System needs Chat: the system message goes into the chat template (set Chat, or leave System empty)")
	}
	return nil
}

// Why generation ended: the StopReason of a Result.
const (
	StopEOS     = "eos"     // the model produced an end-of-sequence token
	StopString  = "stop"    // a stop string appeared
	StopLength  = "length"  // MaxTokens tokens were generated
	StopContext = "context" // the context filled up before MaxTokens
)

// Result describes a generation. When Generate returns an error with a
// Result, the Result covers the work done until the error and StopReason is
// empty.
type Result struct {
	// Text is the generated text, stop strings excluded: what onText
	// received.
	Text string
	// StopReason is StopEOS, StopString, StopLength or StopContext.
	StopReason string
	// PromptTokens and GeneratedTokens count the tokens fed and sampled.
	PromptTokens    int
	GeneratedTokens int
	// Prefill and Decode are the wall times of the prompt and of the
	// generated tokens.
	Prefill, Decode time.Duration
	// KV is the size of the sequence's KV cache at the end.
	KV kvcache.Stats
	// Kernels names the compute kernels that ran (see Engine.Kernels).
	Kernels string
}

// PrefillRate returns the prompt tokens processed per second.
func (r *Result) PrefillRate() float64 { return rate(r.PromptTokens, r.Prefill) }

// DecodeRate returns the tokens generated per second.
func (r *Result) DecodeRate() float64 { return rate(r.GeneratedTokens, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// PromptIDs returns the token ids Generate would feed for prompt.
func (e *Engine) PromptIDs(prompt string, opt GenerateOptions) ([]int, error) {
	if err := e.model.CheckOpen(); err != nil {
		return nil, err
	}
	if err := opt.checkPrompt(); err != nil {
		return nil, err
	}
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
		return nil, fmt.Errorf("kakeya: %s: %w", e.dir, err)
	}
	// The template already spells out BOS where the family wants one.
	return e.tok.Encode(text, false), nil
}

// Logits tokenizes prompt as Generate does under opt (only Chat and System
// matter) and runs it through a fresh sequence. It returns the prompt's
// token ids and one row of vocab_size logits per id: row i scores the token
// that follows ids[:i+1], so the last row is the distribution Generate
// samples its first token from. The rows take len(ids)*vocab_size float32s.
// Cancelling ctx stops the work between chunks of the prompt.
func (e *Engine) Logits(ctx context.Context, prompt string, opt GenerateOptions) (ids []int, logits [][]float32, err error) {
	if ids, err = e.PromptIDs(prompt, opt); err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return nil, nil, errors.New("kakeya: empty prompt (no tokens and no BOS)")
	}
	if n := e.model.MaxContext(); len(ids) > n {
		return nil, nil, fmt.Errorf("kakeya: %w", &model.ContextError{Tokens: len(ids), Context: n, Limit: e.model.ContextLimit()})
	}
	seq, err := e.model.NewSequenceOpts(e.seq)
	if err != nil {
		return nil, nil, err
	}
	defer seq.Close()
	v := e.model.Config().VocabSize
	logits = make([][]float32, 0, len(ids))
	for i := 0; i < len(ids); i += prefillChunk {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		chunk := ids[i:min(len(ids), i+prefillChunk)]
		flat, err := seq.Forward(chunk, true)
		if err != nil {
			return nil, nil, err
		}
		for j := range chunk {
			logits = append(logits, flat[j*v:(j+1)*v:(j+1)*v])
		}
	}
	return ids, logits, nil
}

// Generate continues prompt, calling onText with each piece of new text as
// soon as it is complete (never half a UTF-8 character, never part of a stop
// string). It stops on EOS, a stop string, MaxTokens, a full context, an
// error from onText or the cancellation of ctx.
//
// Errors found before the model runs (bad options, a prompt too long, a
// closed engine) come with a nil Result. Once the prompt is being processed,
// an error (ctx's, onText's, ErrClosed from a concurrent Close, a failure
// of the model's backend, non-finite logits) comes with the partial Result:
// the text passed to onText so far, the token counts, timings and KV
// statistics. A backend's failure (see compute's contract) ends the forward
// step it happened in, whose logits are never sampled; the error matches
// the backend's own with errors.Is, and the backend may stay failed.
func (e *Engine) Generate(ctx context.Context, prompt string, opt GenerateOptions, onText func(string) error) (*Result, error) {
	if err := opt.validate(); err != nil {
		return nil, err
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
		return nil, errors.New("kakeya: empty prompt (no tokens and no BOS)")
	}
	ctxLen := e.model.MaxContext()
	if len(ids) >= ctxLen {
		return nil, fmt.Errorf("kakeya: %w", &model.ContextError{Tokens: len(ids), Context: ctxLen, Limit: e.model.ContextLimit(), Generate: true})
	}
	maxNew, limit := ctxLen-len(ids), StopContext
	if opt.MaxTokens > 0 && opt.MaxTokens <= maxNew {
		maxNew, limit = opt.MaxTokens, StopLength
	}
	eos := e.stopIDs(opt.Chat)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	seq, err := e.model.NewSequenceOpts(e.seq)
	if err != nil {
		return nil, err
	}
	defer seq.Close()

	res := &Result{PromptTokens: len(ids), Kernels: e.Kernels()}
	var text []byte
	start := time.Now()
	// finish ends a generation that began, setting the duration *d of the
	// phase it ends in; with an error the result is partial.
	finish := func(err error, d *time.Duration) (*Result, error) {
		*d = time.Since(start)
		res.Text = string(text)
		res.KV = seq.KVStats()
		return res, err
	}
	logits, err := prefill(ctx, seq, ids)
	if err == nil {
		err = e.checkFinite(logits, 0)
	}
	if err != nil {
		return finish(err, &res.Prefill)
	}
	res.Prefill = time.Since(start)

	history := append(make([]int, 0, len(ids)+maxNew), ids...)
	stream := e.tok.NewStream()
	filter := stopFilter{stops: opt.Stop}
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
	stop := limit
	for res.GeneratedTokens < maxNew {
		if err := ctx.Err(); err != nil {
			return finish(err, &res.Decode)
		}
		id := sampler.Sample(logits, history)
		if eos[id] {
			stop = StopEOS
			break
		}
		res.GeneratedTokens++
		history = append(history, id)
		out, stopped := filter.push(stream.Add(id))
		if err := emit(out); err != nil {
			return finish(err, &res.Decode)
		}
		if stopped {
			stop = StopString
			break
		}
		if res.GeneratedTokens == maxNew {
			break
		}
		if logits, err = seq.Forward(history[len(history)-1:], false); err == nil {
			err = e.checkFinite(logits, res.GeneratedTokens)
		}
		if err != nil {
			return finish(err, &res.Decode)
		}
	}
	if stop != StopString {
		// An incomplete character or a held-back stop-string prefix is
		// still text the model produced.
		out, stopped := filter.push(stream.Flush())
		if stopped {
			stop = StopString
		} else {
			out += filter.flush()
		}
		if err := emit(out); err != nil {
			return finish(err, &res.Decode)
		}
	}
	res.StopReason = stop
	return finish(nil, &res.Decode)
}

// prefill feeds the prompt in chunks, checking ctx between them, and
// returns the logits of its last position.
func prefill(ctx context.Context, seq *model.Sequence, ids []int) ([]float32, error) {
	var logits []float32
	for i := 0; i < len(ids); i += prefillChunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var err error
		if logits, err = seq.Forward(ids[i:min(len(ids), i+prefillChunk)], false); err != nil {
			return nil, err
		}
	}
	return logits, nil
}

// checkFinite fails if logits, computed after the prompt and generated
// tokens, hold a NaN or an infinity: sampling them yields garbage, and the
// usual cause is NaN or Inf in the weights.
func (e *Engine) checkFinite(logits []float32, generated int) error {
	i := firstNonFinite(logits)
	if i < 0 {
		return nil
	}
	when := "after the prompt"
	if generated > 0 {
		when = fmt.Sprintf("after the prompt and %d generated tokens", generated)
	}
	return fmt.Errorf("kakeya: non-finite logits %s (%v at token id %d): do the weights in %s hold NaN or Inf?", when, logits[i], i, e.dir)
}

// firstNonFinite returns the index of the first NaN or ±Inf in x, or -1.
func firstNonFinite(x []float32) int {
	for i, v := range x {
		// v-v is 0 for every finite v and NaN for NaN and ±Inf.
		if v-v != 0 {
			return i
		}
	}
	return -1
}

// stopIDs gathers the token ids that end generation: the EOS ids of
// config.json, generation_config.json (as transformers' generate stops on
// them) and the tokenizer, plus the chat turn terminators in chat mode.
func (e *Engine) stopIDs(chat bool) map[int]bool {
	ids := map[int]bool{}
	cfg := e.model.Config()
	for _, id := range cfg.EOSTokenIDs {
		ids[id] = true
	}
	if cfg.Generation != nil {
		for _, id := range cfg.Generation.EOSTokenIDs {
			ids[id] = true
		}
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
