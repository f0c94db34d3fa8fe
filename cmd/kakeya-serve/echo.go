package main

import (
	"context"

	"github.com/kakeya-ai/kakeya"
)

// echoed is what an echoing completion (echo: true) puts before each
// choice: the prompt's text and, with logprobs, its tokens' logprobs
// (kakeya.Engine.PromptLogprobs: the first token's reported as null).
type echoed struct {
	text     string
	logprobs []kakeya.TokenInfo
}

// echoPrompt returns the echo of req's prompt, whose tokens are ids.
func echoPrompt(ctx context.Context, eng *kakeya.Engine, req *request, ids []int) (*echoed, error) {
	e := &echoed{text: req.prompt}
	if req.logprobs {
		lp, err := eng.PromptLogprobs(ctx, ids, req.topLogprobs)
		if err != nil {
			return nil, err
		}
		e.logprobs = lp
	}
	return e, nil
}

// sendEcho streams the echoed prompt, if any, as the choice's first chunk.
func (s *sseWriter) sendEcho() error {
	o := s.resp
	if o.echo == nil {
		return nil
	}
	o.firstNull = o.logprobs
	return s.event(o.chunk(o.echo.text, "", true, o.echo.logprobs))
}

// scoreOnly is the generation of an echoing request with max_tokens 0:
// none; the prompt is all the choice's text.
func scoreOnly(_ *kakeya.Engine, _ context.Context, ids []int, _ kakeya.GenerateOptions, _ func(string) error) (*kakeya.Result, error) {
	return &kakeya.Result{PromptTokens: len(ids), StopReason: kakeya.StopLength}, nil
}
