package kakeya

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A ctx cancelled while onText runs ends Generate with ctx's error even
// when the scheduler has already generated every token: the tokens taken
// but not yet passed on are not delivered as a success.
func TestGenerateCancelAfterSchedulerEnded(t *testing.T) {
	e := loadStoriesEngine(t)
	before := e.Stats().Finished
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	res, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 20}, func(string) error {
		if calls++; calls == 1 {
			// Let the scheduler run the request to its end, then cancel.
			deadline := time.Now().Add(10 * time.Second)
			for e.Stats().Finished == before {
				if time.Now().After(deadline) {
					t.Fatal("the request did not end within 10 s")
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if calls != 1 || res == nil || res.GeneratedTokens >= 20 {
		t.Errorf("onText called %d times, result %+v: want one call and the tokens cut short", calls, res)
	}
}
