package kakeya

import (
	"context"
	"errors"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
)

// Stream yields Generate's pieces and then its result; a loop that breaks
// off ends the generation (nothing left running); a failure comes last,
// with the partial result.
func TestStream(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	ctx := context.Background()
	opt := GenerateOptions{MaxTokens: 10, Sampling: SamplingOptions{Seed: 3, Temperature: 0.8}}
	var want string
	res, err := e.Generate(ctx, "hello", opt, func(p string) error { want += p; return nil })
	if err != nil {
		t.Fatal(err)
	}
	var got string
	var last *Result
	n := 0
	for tok, err := range e.Stream(ctx, "hello", opt) {
		if err != nil {
			t.Fatal(err)
		}
		if last != nil {
			t.Fatal("a value after the one holding the result")
		}
		got += tok.Text
		last = tok.Result
		n++
	}
	if got != want || last == nil || last.GeneratedTokens != res.GeneratedTokens || last.StopReason != res.StopReason {
		t.Errorf("Stream: %q, result %+v; want Generate's %q, %d tokens, %s", got, last, want, res.GeneratedTokens, res.StopReason)
	}
	for range e.Stream(ctx, "hello", opt) {
		break
	}
	if st := e.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Errorf("after a loop broke off: %d running, %d waiting", st.Running, st.Waiting)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errs []error
	for tok, err := range e.Stream(cctx, "hello", opt) {
		cancel()
		if err != nil {
			errs = append(errs, err)
			if tok.Result == nil {
				t.Error("the failure came without the partial result")
			}
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("cancelled: errors %v, want one matching context.Canceled", errs)
	}
}
