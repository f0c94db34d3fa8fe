package kakeya

import (
	"context"
	"errors"
	"iter"
)

// A Token is one value of Stream: a piece of the generated text, or, last,
// the finished generation's Result.
type Token struct {
	// Text is the text the generation adds, as Generate's callback gets
	// it; "" on the last value.
	Text string
	// Result is set on the last value only: the generation's result, the
	// partial one when the error beside it is not nil.
	Result *Result
}

// errStopped ends a generation whose Stream loop broke off.
var errStopped = errors.New("kakeya: stream stopped by its consumer")

// Stream is Generate as an iterator, beside the callback form:
//
//	for tok, err := range eng.Stream(ctx, "Why is the sky blue?", opt) {
//		if err != nil {
//			return err
//		}
//		fmt.Print(tok.Text)
//	}
//
// It yields each piece of text as it is generated, then a last value whose
// Result is set (and whose Text is ""). A failure is yielded once, last,
// with the partial Result. Breaking out of the loop ends the generation,
// as a callback returning an error does, and frees its cache.
func (e *Engine) Stream(ctx context.Context, prompt string, opt GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		stopped := false
		res, err := e.Generate(ctx, prompt, opt, func(piece string) error {
			if !yield(Token{Text: piece}, nil) {
				stopped = true
				return errStopped
			}
			return nil
		})
		if stopped {
			return
		}
		yield(Token{Result: res}, err)
	}
}
