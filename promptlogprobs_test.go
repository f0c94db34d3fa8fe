package kakeya

import (
	"context"
	"math"
	"testing"
)

// PromptLogprobs gives each prompt token after the first the log-softmax,
// in float64, of the logits Engine.Logits computes before it, and the
// most likely tokens there in order; the first token has none.
func TestPromptLogprobs(t *testing.T) {
	e := loadStoriesEngine(t)
	const prompt = "The quick brown fox jumps over the lazy dog. The quick brown"
	ids, logits, err := e.Logits(context.Background(), prompt, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const top = 3
	got, err := e.PromptLogprobs(context.Background(), ids, top)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Fatalf("%d entries for %d tokens", len(got), len(ids))
	}
	if got[0].ID != ids[0] || got[0].Logprob != 0 || got[0].Top != nil || got[0].Text == "" {
		t.Errorf("first token %+v, want its id and text alone", got[0])
	}
	text := got[0].Text
	for i := 1; i < len(ids); i++ {
		row := logits[i-1]
		maxL := math.Inf(-1)
		for _, v := range row {
			maxL = math.Max(maxL, float64(v))
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - maxL)
		}
		lse := maxL + math.Log(sum)
		want := float64(row[ids[i]]) - lse
		if got[i].ID != ids[i] || math.Abs(float64(got[i].Logprob)-want) > 1e-3 {
			t.Errorf("token %d: id %d logprob %g, want %d %g", i, got[i].ID, got[i].Logprob, ids[i], want)
		}
		if len(got[i].Top) != top {
			t.Fatalf("token %d: %d top entries, want %d", i, len(got[i].Top), top)
		}
		for k, a := range got[i].Top {
			if math.Abs(float64(a.Logprob)-(float64(row[a.ID])-lse)) > 1e-3 || k > 0 && a.Logprob > got[i].Top[k-1].Logprob {
				t.Errorf("token %d: top %d = %+v", i, k, a)
			}
			if k == 0 {
				for id, v := range row {
					if float64(v) > float64(row[a.ID]) {
						t.Errorf("token %d: id %d scores above the top entry %d", i, id, a.ID)
						break
					}
				}
			}
		}
		text += got[i].Text
	}
	if want := e.Decode(ids, false); text != want {
		t.Errorf("the tokens' texts join to %q, want %q", text, want)
	}
	if _, err := e.PromptLogprobs(context.Background(), []int{1 << 30}, 0); err == nil {
		t.Error("an id outside the vocabulary: no error")
	}
}
