package kakeya

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/grammar"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/scheduler"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// prefillChunk is the most prompt tokens fed to one Forward call, the
// model's own pass size: Generate and Logits check their context between
// chunks.
const prefillChunk = 512

// A Message is one turn of a conversation, for GenerateOptions.Messages:
// its role ("system", "user", "assistant", "tool" where the model's chat
// template knows it) and its text.
type Message struct {
	Role, Content string
	// ToolCalls are the calls an assistant turn made (none elsewhere).
	ToolCalls []ToolCall
	// ToolCallID, of a tool turn, is the id of the call it answers.
	ToolCallID string
	// Name is the message's name: the function's name in a tool turn,
	// which some templates read; "" for none.
	Name string
}

// A ToolCall is a function call an assistant turn made, as the OpenAI API
// sends it: its id, the function's name and the arguments, a JSON object
// in a string (chat templates get it decoded).
type ToolCall struct {
	ID, Name, Arguments string
}

// tokenizerMessage is m in the tokenizer's terms.
func tokenizerMessage(m Message) tokenizer.Message {
	t := tokenizer.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
	for _, c := range m.ToolCalls {
		t.ToolCalls = append(t.ToolCalls, tokenizer.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return t
}

// GenerateOptions control one Generate call. The zero value generates
// greedily until EOS or a full context.
type GenerateOptions struct {
	MaxTokens int // generated tokens at most; 0 = until the context is full
	Sampling  SamplingOptions
	Stop      []string // generation ends before the first of these (non-empty) strings
	Chat      bool     // wrap the prompt in the model's chat template
	System    string   // system message, only with Chat (an error without)
	// IgnoreEOS generates past end-of-sequence tokens (and a chat turn's
	// end), which are then text like any other, up to MaxTokens or a full
	// context: runs of a fixed length, for benchmarks and tests, as
	// vLLM's ignore_eos.
	IgnoreEOS bool
	// Priority orders the request under ServingOptions.Scheduling
	// "priority": lower values are admitted first and preempted last,
	// equal ones in arrival order (vLLM's priority). Under the default
	// first-come-first-served scheduling it must be 0.
	Priority int
	// Messages, with Chat, is the whole conversation the chat template
	// renders (system, user and assistant turns), for a server that is
	// sent one: the model continues it as the assistant. It replaces the
	// prompt and System, which must then be empty.
	Messages []Message
	// ChatTemplateKwargs, with Chat, are extra variables of the model's
	// chat template, as the keyword arguments of transformers'
	// apply_chat_template: {"enable_thinking": false} turns Qwen3's
	// reasoning off, {"date_string": "01 Jan 2025"} sets Llama 3.x's date.
	// Each value goes to the template through JSON.
	ChatTemplateKwargs map[string]any
	// Tools, with Chat, are the tools the model may call: a JSON array of
	// tool definitions ({"type": "function", "function": {"name", ...}}),
	// the chat template's variable tools, as transformers'
	// apply_chat_template(tools=...). A template that does not read tools
	// ignores them. The calls come back as text in the model's format
	// (Qwen's <tool_call>{...}</tool_call>, Llama 3.x's JSON), which the
	// caller parses; kakeya-serve does (docs/cli.md).
	Tools json.RawMessage
	// SpecialInMessages, with Chat, reads the spellings of special tokens
	// (<|im_end|>, <|eot_id|>, ...) in the messages' content, the prompt
	// and System as those tokens. Off, the default, only the chat
	// template's own markup is special and content is plain text
	// (tokenizer.EncodeSegments), so that a user's text cannot close its
	// turn and forge another (a system turn, say). Turn it on only for
	// trusted content that means to spell the tokens.
	SpecialInMessages bool
	// Logprobs computes each generated token's log-probability under the
	// model's distribution: the log-softmax of the raw logits, before the
	// repetition penalty, temperature, top-k, top-p and min-p (see
	// TokenInfo.Logprob). It costs a pass over the vocabulary per token.
	// The results reach OnToken and Result.Logprobs.
	Logprobs bool
	// TopLogprobs, with Logprobs, is how many of the most likely tokens
	// at each position (0 to MaxTopLogprobs) a TokenInfo lists.
	TopLogprobs int
	// OnToken, if set, is called with each generated token, in order, on
	// Generate's goroutine, before the text the token completes reaches
	// onText. A token's text may reach onText with a later token's call
	// (an incomplete UTF-8 character, a possible stop string held back)
	// or never (the tokens of a stop string, which OnToken still sees).
	// An error from it ends Generate as one from onText does.
	OnToken func(TokenInfo) error
	// JSON constrains the output to a JSON object (OpenAI's
	// response_format json_object); JSONSchema, to JSON text that the
	// schema accepts (json_schema), within the subset package grammar
	// compiles. At each step the tokens that would leave the text no
	// prefix of such a document are masked before sampling, and
	// end-of-sequence tokens until it is complete; generation stops
	// once nothing may follow (the value closed). The document follows
	// the grammar's rules: properties in the schema's order, bounded
	// whitespace and numbers (see package grammar).
	JSON       bool
	JSONSchema []byte
	// ToolCall constrains the output to one tool call, as JSON and
	// JSONSchema constrain it to a document (and excludes them): see
	// ToolCallGrammar.
	ToolCall *ToolCallGrammar
}

// A ToolCallGrammar constrains a reply to one call of one of Tools: the
// JSON object {"name": <a tool's name>, ArgumentsKey: <its arguments>},
// the name read first and the arguments then by that tool's parameters
// schema (the subset of package grammar; CheckToolParameters checks
// one). With ArgumentsOnly, for one tool whose call's start the prompt
// already holds, the output is the arguments' object alone.
type ToolCallGrammar struct {
	Tools         []ToolSchema
	ArgumentsKey  string // "arguments" (Hermes, Qwen) or "parameters" (Llama 3.x)
	ArgumentsOnly bool
}

// A ToolSchema is a function a ToolCallGrammar calls: its name and the
// JSON Schema of its arguments (nil for any object).
type ToolSchema struct {
	Name       string
	Parameters []byte
}

// validate reports the first option Generate cannot honour.
func (o *GenerateOptions) validate() error {
	if err := o.checkPrompt(); err != nil {
		return err
	}
	if o.MaxTokens < 0 {
		return fmt.Errorf("kakeya: max tokens %d must be >= 0", o.MaxTokens)
	}
	switch {
	case o.TopLogprobs < 0 || o.TopLogprobs > MaxTopLogprobs:
		return fmt.Errorf("kakeya: top logprobs %d must be in [0, %d]", o.TopLogprobs, MaxTopLogprobs)
	case o.TopLogprobs > 0 && !o.Logprobs:
		return fmt.Errorf("kakeya: top logprobs %d needs GenerateOptions.Logprobs", o.TopLogprobs)
	}
	for i, s := range o.Stop {
		if s == "" {
			return fmt.Errorf("kakeya: stop string %d of %d is empty", i+1, len(o.Stop))
		}
	}
	if tc := o.ToolCall; tc != nil {
		switch {
		case o.JSON || len(o.JSONSchema) > 0:
			return errors.New("kakeya: GenerateOptions.ToolCall excludes JSON and JSONSchema: the output is the call")
		case len(tc.Tools) == 0:
			return errors.New("kakeya: GenerateOptions.ToolCall has no tools")
		case tc.ArgumentsOnly && len(tc.Tools) != 1:
			return fmt.Errorf("kakeya: GenerateOptions.ToolCall.ArgumentsOnly needs one tool, not %d", len(tc.Tools))
		case !tc.ArgumentsOnly && tc.ArgumentsKey == "":
			return errors.New("kakeya: GenerateOptions.ToolCall.ArgumentsKey is empty")
		}
	}
	return o.Sampling.Validate()
}

// checkPrompt reports options that shape the prompt but would be ignored.
func (o *GenerateOptions) checkPrompt() error {
	if o.System != "" && !o.Chat {
		return errors.New("kakeya: GenerateOptions.System needs Chat: the system message goes into the chat template (set Chat, or leave System empty)")
	}
	if len(o.Messages) > 0 {
		switch {
		case !o.Chat:
			return errors.New("kakeya: GenerateOptions.Messages needs Chat: the conversation goes into the chat template")
		case o.System != "":
			return errors.New("kakeya: GenerateOptions.Messages and System exclude each other: put the system message first among the Messages")
		}
	}
	if len(o.ChatTemplateKwargs) > 0 && !o.Chat {
		return errors.New("kakeya: GenerateOptions.ChatTemplateKwargs needs Chat: they are variables of the chat template")
	}
	if o.Tools != nil && !o.Chat {
		return errors.New("kakeya: GenerateOptions.Tools needs Chat: the tools go into the chat template")
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
	// Prefill and Decode are the wall times of the prompt (from the call
	// to the first token: the time to first token, a wait for admission
	// included) and of the generated tokens (from the first to the end).
	Prefill, Decode time.Duration
	// KV is the size of the sequence's KV cache at the end.
	KV kvcache.Stats
	// Kernels names the compute kernels that ran (see Engine.Kernels).
	Kernels string
	// Logprobs describes each generated token, with GenerateOptions.Logprobs
	// (nil without): what OnToken received.
	Logprobs []TokenInfo
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

// CheckPrompt makes the checks PromptIDs makes before tokenizing: the
// options that shape the prompt, and the prompt's bytes, which alone may
// be more tokens than a sequence holds (a *model.ContextError then). It
// takes no memory: a server checks a prompt with it before it lets the
// tokenizer's memory be spent on it.
func (e *Engine) CheckPrompt(prompt string, opt GenerateOptions) error {
	if err := e.model.CheckOpen(); err != nil {
		return err
	}
	if err := opt.checkPrompt(); err != nil {
		return err
	}
	return e.checkPromptBytes(prompt, opt)
}

// PromptIDs returns the token ids Generate would feed for prompt.
func (e *Engine) PromptIDs(prompt string, opt GenerateOptions) ([]int, error) {
	if err := e.CheckPrompt(prompt, opt); err != nil {
		return nil, err
	}
	if !opt.Chat {
		return e.tok.Encode(prompt, true), nil
	}
	msgs := make([]tokenizer.Message, 0, max(len(opt.Messages), 2))
	for _, m := range opt.Messages {
		msgs = append(msgs, tokenizerMessage(m))
	}
	if len(msgs) > 0 && prompt != "" {
		return nil, errors.New("kakeya: a prompt and GenerateOptions.Messages exclude each other: the Messages are the whole conversation (pass an empty prompt)")
	}
	if len(msgs) == 0 {
		if opt.System != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: opt.System})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: prompt})
	}
	segs, err := e.tok.ApplyChatToolsSegments(msgs, opt.Tools, true, opt.ChatTemplateKwargs)
	if err != nil {
		return nil, fmt.Errorf("kakeya: %s: %w", e.dir, err)
	}
	// The template already spells out BOS where the family wants one.
	if opt.SpecialInMessages {
		for i := range segs {
			segs[i].Special = true
		}
	}
	return e.tok.EncodeSegments(segs, false), nil
}

// checkPromptBytes rejects, before any tokenizing, a prompt whose text
// alone is more tokens than a sequence holds (tokenizer.MinTokens: bytes
// bound tokens from below): tokenizing takes tens of bytes per byte of
// text, which a prompt that cannot run must not cost.
func (e *Engine) checkPromptBytes(prompt string, opt GenerateOptions) error {
	n, size := e.tok.MinTokens(prompt)+e.tok.MinTokens(opt.System), len(prompt)+len(opt.System)
	for _, m := range opt.Messages {
		n, size = n+e.tok.MinTokens(m.Content), size+len(m.Content)
		for _, c := range m.ToolCalls {
			n, size = n+e.tok.MinTokens(c.Arguments), size+len(c.Arguments)
		}
	}
	if opt.Tools != nil {
		n, size = n+e.tok.MinTokens(string(opt.Tools)), size+len(opt.Tools)
	}
	if most := e.MaxTokens(); n >= most {
		return fmt.Errorf("kakeya: the prompt's %d bytes are at least %d tokens: %w", size, n,
			&model.ContextError{Tokens: n, Context: most, Limit: e.model.ContextLimit(), Generate: true})
	}
	return nil
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
	g, err := e.newGeneration(prompt, opt, onText)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return g.run(ctx)
}

// GenerateIDs is Generate for a prompt already tokenized: ids as PromptIDs
// returned them under opt (a server tokenizes first to check the prompt's
// length, and need not tokenize it again). Of the options that shape the
// prompt only Chat counts, choosing the tokens that end the generation.
// Ids outside the vocabulary are an error.
func (e *Engine) GenerateIDs(ctx context.Context, ids []int, opt GenerateOptions, onText func(string) error) (*Result, error) {
	if err := e.model.CheckOpen(); err != nil {
		return nil, err
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	v := e.model.Config().VocabSize
	for i, id := range ids {
		if id < 0 || id >= v {
			return nil, fmt.Errorf("kakeya: prompt token %d is id %d, outside the vocabulary of %d", i, id, v)
		}
	}
	g, err := e.newGenerationIDs(ids, opt, onText)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return g.run(ctx)
}

// generation is one Generate call: what it was asked for, once checked,
// and the state of its run.
type generation struct {
	e        *Engine
	sampler  *Sampler
	priority int          // GenerateOptions.Priority
	ids      []int        // the prompt's tokens
	maxNew   int          // tokens it may generate
	limit    string       // the StopReason when it generates maxNew
	eos      map[int]bool // the tokens that end it
	onText   func(string) error
	onToken  func(TokenInfo) error
	lp       *logprober       // nil without GenerateOptions.Logprobs
	cons     *grammar.Matcher // nil without structured output
	prev     int              // the token before the one being described
	pair     [2]int           // scratch for decoding a token after prev

	res    *Result
	text   []byte // what emit passed on
	stream *tokenizer.Stream
	filter stopFilter
}

// newGeneration checks opt and the prompt, which must leave room in the
// context for a token, and settles how many tokens Generate may add and
// what ends it. Nothing runs on the model yet.
func (e *Engine) newGeneration(prompt string, opt GenerateOptions, onText func(string) error) (*generation, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	ids, err := e.PromptIDs(prompt, opt)
	if err != nil {
		return nil, err
	}
	return e.newGenerationIDs(ids, opt, onText)
}

// newGenerationIDs is newGeneration for the prompt's ids, opt validated.
func (e *Engine) newGenerationIDs(ids []int, opt GenerateOptions, onText func(string) error) (*generation, error) {
	sampler, err := NewSampler(opt.Sampling)
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
	if opt.Priority != 0 && e.policy.Name() != "priority" {
		return nil, fmt.Errorf("kakeya: GenerateOptions.Priority %d needs ServingOptions.Scheduling \"priority\" (the engine schedules %s)", opt.Priority, e.policy.Name())
	}
	g := &generation{e: e, sampler: sampler, ids: ids, maxNew: ctxLen - len(ids), limit: StopContext, onText: onText, priority: opt.Priority}
	if !opt.IgnoreEOS {
		g.eos = e.stopIDs(opt.Chat)
	}
	if opt.MaxTokens > 0 && opt.MaxTokens <= g.maxNew {
		g.maxNew, g.limit = opt.MaxTokens, StopLength
	}
	g.filter = stopFilter{stops: opt.Stop}
	g.onToken = opt.OnToken
	if g.cons, err = e.matcher(&opt, g.eos); err != nil {
		return nil, err
	}
	if opt.Logprobs {
		g.lp = &logprober{k: opt.TopLogprobs}
	}
	return g, nil
}

// next is the scheduler's Request.Next: it checks the logits, computed
// after history, and samples the next token, which ends the generation
// if it is an end-of-sequence token. With logprobs, it measures the
// logits before sampling changes them. It runs on the scheduler's
// goroutine.
func (g *generation) next(logits []float32, history []int) (int, bool, error) {
	if err := g.e.checkFinite(logits, len(history)-len(g.ids)); err != nil {
		return 0, false, err
	}
	if g.cons != nil && g.cons.Done() {
		// The document closed with the last token; Request.Last ends
		// the request there, so this is a guard.
		return 0, true, nil
	}
	if g.lp != nil {
		g.lp.measure(logits, g.sampler.penalizes())
	}
	if g.cons != nil {
		if err := g.cons.Apply(logits); err != nil {
			return 0, false, fmt.Errorf("kakeya: structured output: %w", err)
		}
	}
	id := g.sampler.Sample(logits, history)
	if g.lp != nil {
		g.lp.pick(id, logits)
	}
	if g.cons != nil {
		if err := g.cons.Advance(id); err != nil {
			return 0, false, fmt.Errorf("kakeya: structured output: %w", err)
		}
	}
	return id, g.eos[id], nil
}

// greedy reports whether the generation takes the device's greedy
// tokens (scheduler.Request.Pick): at temperature 0, with no repetition
// penalty, no log-probabilities to measure and no grammar to mask by
// (those need the logits),
// on a backend that picks on its device, so that only the token ids cross
// back to the host. Elsewhere the sampler's arg max picks the same tokens
// from the logits.
func (g *generation) greedy() bool {
	return g.sampler.opt.Temperature == 0 && !g.sampler.penalizes() && g.lp == nil && g.cons == nil && g.e.model.DeviceGreedy()
}

// drawn reports whether the generation takes tokens drawn on the device
// (scheduler.Request.Draw): sampled at a temperature with min-p, top-p
// and a top-k of at most compute.MaxDrawTopK (Sampler.DrawRow), with no
// repetition penalty, no log-probabilities and no grammar, on a
// backend that draws on its device, so that only the token ids cross
// back to the host. The tokens are those the sampler draws from the
// logits (compute.Draw says where a rounding may part them).
func (g *generation) drawn() bool {
	return g.sampler.drawable(g.e.model.Config().VocabSize) && g.lp == nil && g.cons == nil && g.e.model.DeviceDraw()
}

// draw is the scheduler's Request.Draw for a drawn generation.
func (g *generation) draw() compute.DrawRow {
	d, _ := g.sampler.DrawRow(g.e.model.Config().VocabSize)
	return d
}

// pick is the scheduler's Request.Pick for a greedy or drawn generation:
// the token the device picked or drew, which ends the generation if it
// is an end-of-sequence token. Non-finite logits fail it, as next's
// check does.
func (g *generation) pick(id, nonFinite int, history []int) (bool, error) {
	g.sampler.Drawn()
	if nonFinite >= 0 {
		when := "after the prompt"
		if n := len(history) - len(g.ids); n > 0 {
			when = fmt.Sprintf("after the prompt and %d generated tokens", n)
		}
		return false, fmt.Errorf("kakeya: non-finite logits %s (at token id %d): do the weights in %s hold NaN or Inf?", when, nonFinite, g.e.dir)
	}
	return g.eos[id], nil
}

// run submits the generation to the engine's scheduler and passes its
// tokens' text on as they come, until a stop. Once it was submitted, an
// error comes with the partial Result.
func (g *generation) run(ctx context.Context) (*Result, error) {
	req := scheduler.Request{Prompt: g.ids, MaxNew: g.maxNew, Next: g.next, Priority: g.priority}
	if g.lp != nil {
		req.Payload = g.lp.payload
	}
	switch {
	case g.greedy():
		req.Pick = g.pick
	case g.drawn():
		req.Pick, req.Draw = g.pick, g.draw
	}
	if g.cons != nil {
		req.Last = g.cons.Done // the document closed: no step for EOS
	}
	h, err := g.e.sched.Submit(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kakeya: %w", err)
	}
	g.res = &Result{PromptTokens: len(g.ids), Kernels: g.e.Kernels()}
	g.prev = g.ids[len(g.ids)-1]
	g.stream = g.e.tok.NewStream()
	stop, err := g.receive(ctx, h)
	// A stop string, or an error here, leaves the request running:
	// cancel it and wait the step it may be in, so that its blocks are
	// free when Generate returns and the Result has its KV statistics.
	h.Cancel()
	for {
		if _, done, _ := h.Tokens(context.Background()); done {
			break
		}
	}
	o, _ := h.Outcome()
	if !o.FirstToken.IsZero() {
		g.res.Prefill = o.FirstToken.Sub(o.Submitted)
		g.res.Decode = o.Finished.Sub(o.FirstToken)
	} else {
		g.res.Prefill = o.Finished.Sub(o.Submitted)
	}
	g.res.Text = string(g.text)
	g.res.KV = o.KV
	if err != nil {
		return g.res, err
	}
	g.res.StopReason = stop
	return g.res, nil
}

// receive emits the text of the request's tokens as they come and returns
// the StopReason.
func (g *generation) receive(ctx context.Context, h *scheduler.Handle) (string, error) {
	for {
		ids, payloads, done, err := h.TokensWith(ctx)
		if err != nil {
			return "", err
		}
		for i, id := range ids {
			g.res.GeneratedTokens++
			var lp *tokenLogprobs
			if payloads != nil {
				lp = payloads[i].(*tokenLogprobs)
			}
			if err := g.token(id, lp); err != nil {
				return "", err
			}
			g.prev = id
			out, stopped := g.filter.push(g.stream.Add(id))
			if err := g.emit(out); err != nil {
				return "", err
			}
			if stopped {
				return StopString, nil
			}
			// The scheduler may have run ahead: a ctx cancelled while
			// onText ran stops the tokens already taken too, as it
			// would the next step (a server's client gone mid-burst).
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		if !done {
			continue
		}
		o, _ := h.Outcome()
		switch {
		case o.Err != nil:
			if errors.Is(o.Err, context.Canceled) || errors.Is(o.Err, context.DeadlineExceeded) {
				return "", ctx.Err()
			}
			return "", o.Err
		case o.Reason == scheduler.EndToken:
			return g.end(StopEOS)
		case o.Reason == scheduler.EndLength:
			return g.end(g.limit)
		default:
			return g.end(StopContext)
		}
	}
}

// token passes a generated token, with its log-probabilities if computed,
// on to OnToken and Result.Logprobs.
func (g *generation) token(id int, lp *tokenLogprobs) error {
	if g.onToken == nil && lp == nil {
		return nil
	}
	info := TokenInfo{ID: id, Text: g.decode(id)}
	if lp != nil {
		info.Logprob = lp.logprob
		if lp.n > 0 {
			info.Top = make([]TopLogprob, lp.n)
		}
		for i := range info.Top {
			t := lp.top[i]
			info.Top[i] = TopLogprob{ID: int(t.id), Text: g.decode(int(t.id)), Logprob: t.logprob}
		}
		g.res.Logprobs = append(g.res.Logprobs, info)
	}
	if g.onToken != nil {
		return g.onToken(info)
	}
	return nil
}

// decode returns the text of token id alone, as it reads after the token
// before it: decoders that strip a leading space from the first token
// (SentencePiece's) would otherwise drop it from every token.
func (g *generation) decode(id int) string {
	tok := g.e.tok
	g.pair = [2]int{g.prev, id}
	both, before := tok.Decode(g.pair[:], false), tok.Decode(g.pair[:1], false)
	if s, ok := strings.CutPrefix(both, before); ok && !strings.HasSuffix(before, "\uFFFD") {
		return s
	}
	return tok.Decode(g.pair[1:], false)
}

// end emits what the stream and the stop filter hold back when generation
// ends other than by a stop string (an incomplete character or a held-back
// stop-string prefix is still text the model produced) and returns reason,
// or StopString where that text completes a stop string.
func (g *generation) end(reason string) (string, error) {
	out, stopped := g.filter.push(g.stream.Flush())
	if stopped {
		reason = StopString
	} else {
		out += g.filter.flush()
	}
	if err := g.emit(out); err != nil {
		return "", err
	}
	return reason, nil
}

// emit passes a non-empty piece of text on to onText, keeping it for the
// Result.
func (g *generation) emit(s string) error {
	if s == "" {
		return nil
	}
	g.text = append(g.text, s...)
	if g.onText != nil {
		return g.onText(s)
	}
	return nil
}

// checkFinite fails if logits, computed after the prompt and generated
// tokens, hold a NaN or an infinity: sampling them yields garbage, and the
// usual cause is NaN or Inf in the weights.
func (e *Engine) checkFinite(logits []float32, generated int) error {
	i := pick.FirstNonFinite(logits)
	if i < 0 {
		return nil
	}
	when := "after the prompt"
	if generated > 0 {
		when = fmt.Sprintf("after the prompt and %d generated tokens", generated)
	}
	return fmt.Errorf("kakeya: non-finite logits %s (%v at token id %d): do the weights in %s hold NaN or Inf?", when, logits[i], i, e.dir)
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
