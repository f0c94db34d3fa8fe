package main

import (
	"context"
	"net/http"
	"sync"

	"github.com/kakeya-ai/kakeya"
)

// maxN bounds a request's n: each choice is a sequence of its own in the
// batch and the KV pool.
const maxN = 16

// A sample is one of a request's n choices.
type sample struct {
	resp *response
	sse  *sseWriter // streamed only
	res  *kakeya.Result
	err  error
}

// generateN runs the n choices of a request (n > 1) and answers with them
// all. Choice 0 runs first; the others start once its prompt is in (its
// first token, or its end), so that their prompts find its KV blocks in
// the pool's prefix cache and only the prompt's last, partly filled
// block is run again for each. Choice i samples with seed+i. Streamed,
// the choices' chunks interleave as they come, each with its index and
// its own finish_reason chunk; usage (the prompt counted once) and [DONE]
// follow the last.
func (s *server) generateN(ctx context.Context, w http.ResponseWriter, r *http.Request, eng *kakeya.Engine, req *request, ids []int, opt kakeya.GenerateOptions, out *response,
	gen func(*kakeya.Engine, context.Context, []int, kakeya.GenerateOptions, func(string) error) (*kakeya.Result, error)) {
	n := req.n
	samples := make([]*sample, n)
	var mu sync.Mutex // serializes the stream's writes
	sw := &syncWriter{ResponseWriter: w}
	for i := range samples {
		resp := *out
		resp.index = i
		sm := &sample{resp: &resp}
		if req.stream {
			sm.sse = &sseWriter{w: sw, rc: http.NewResponseController(sw), resp: sm.resp}
			if out.tools != nil && out.tools.parse {
				sm.sse.tools = newToolStream(sm.sse, out.tools)
			}
			sm.sse.sendEcho() // before any choice runs: no lock needed
		}
		samples[i] = sm
	}
	// Each choice may be cut short by the first one to fail.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	promptIn := make(chan struct{})
	var once, failOnce sync.Once
	var err error // the first choice to fail's, in time: the others' may be the cancellation it caused
	var failed *kakeya.Result
	run := func(i int) {
		sm := samples[i]
		o := opt
		o.Sampling.Seed = opt.Sampling.Seed + uint64(i)
		var onText func(string) error
		if sm.sse != nil {
			text := sm.sse.text
			if sm.sse.tools != nil {
				text = sm.sse.tools.text
			}
			onText = func(t string) error {
				mu.Lock()
				defer mu.Unlock()
				return text(t)
			}
			if req.logprobs {
				o.OnToken = sm.sse.token // on this choice's goroutine only
			}
		}
		if i == 0 {
			inner := o.OnToken
			o.OnToken = func(t kakeya.TokenInfo) error {
				once.Do(func() { close(promptIn) })
				if inner != nil {
					return inner(t)
				}
				return nil
			}
		}
		sm.res, sm.err = gen(eng, ctx, ids, o, onText)
		if i == 0 {
			once.Do(func() { close(promptIn) })
		}
		if sm.err != nil {
			failOnce.Do(func() { err, failed = sm.err, sm.res })
			cancel()
		}
		if sm.sse != nil && sm.err == nil {
			mu.Lock()
			sm.err = finishChoice(sm.sse, sm.res)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { run(0) })
	<-promptIn
	for i := 1; i < n; i++ {
		wg.Go(func() { run(i) })
	}
	wg.Wait()

	counted := false // the prompt, once, as usage counts it
	for _, sm := range samples {
		if sm.res != nil {
			s.metrics.observeChoice(sm.res, !counted)
			counted = true
		}
	}
	ri := info(r)
	total := 0
	for _, sm := range samples {
		if sm.res != nil {
			total += sm.res.GeneratedTokens
		}
	}
	if res := samples[0].res; res != nil {
		ri.prompt, ri.generated = res.PromptTokens, total
		if res.GeneratedTokens > 0 {
			ri.ttft = res.Prefill
		}
	}
	u := &usage{}
	if err == nil {
		u.PromptTokens = samples[0].res.PromptTokens
		u.CompletionTokens = total
		u.TotalTokens = u.PromptTokens + total
	}

	if !req.stream {
		switch {
		case err == nil:
			c := samples[0].resp.whole(samples[0].res)
			for _, sm := range samples[1:] {
				c.Choices = append(c.Choices, sm.resp.whole(sm.res).Choices...)
			}
			c.Usage = u
			writeJSON(w, http.StatusOK, c)
		case s.gone(r):
			writeError(w, errClientGone)
		default:
			writeError(w, s.publicError(r, eng, generateError(err, failed != nil)))
		}
		return
	}
	sse := samples[0].sse
	started := sw.wrote
	if err != nil {
		if s.gone(r) {
			if !started {
				writeError(w, errClientGone)
			}
			return
		}
		aerr := s.publicError(r, eng, generateError(err, failed != nil))
		if !started {
			writeError(w, aerr)
			return
		}
		if sse.event(aerr) == nil {
			sse.event("[DONE]")
		}
		return
	}
	if req.includeUsage {
		c := &completion{ID: out.id, Object: "chat.completion.chunk", Created: out.created, Model: out.model, Choices: []choice{}, Usage: u}
		if !out.chat {
			c.Object = "text_completion"
		}
		if sse.event(c) != nil {
			return
		}
	}
	sse.event("[DONE]")
}

// finishChoice sends a streamed choice's last chunk, with its
// finish_reason (and what its tool parser held).
func finishChoice(sse *sseWriter, res *kakeya.Result) error {
	fr := finishReason(res.StopReason)
	if sse.tools != nil {
		var err error
		if fr, err = sse.tools.finish(fr); err != nil {
			return err
		}
	}
	return sse.event(sse.resp.chunk("", fr, !sse.started, sse.pending))
}

// A syncWriter lets the n choices' sseWriters share one response: the
// status goes out once (each sseWriter sends it with its first event),
// and the callers serialize their writes.
type syncWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *syncWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *syncWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
