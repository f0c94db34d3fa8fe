package kakeya

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"

	"github.com/kakeya-ai/kakeya/pick"
)

// logSoftmax returns the log-softmax of row in float64.
func logSoftmax(row []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = max(m, float64(v))
	}
	sum := 0.0
	for _, v := range row {
		sum += math.Exp(float64(v) - m)
	}
	lse := m + math.Log(sum)
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v) - lse
	}
	return out
}

// Each greedy token's logprob, and its top alternatives', are the
// log-softmax of the model's logits at its position; the alternatives are
// the most likely tokens, sorted; OnToken sees the tokens in order, each
// before the text it completes, and Result.Logprobs holds the same.
func TestGenerateLogprobs(t *testing.T) {
	e := loadStoriesEngine(t)
	const prompt, n, k = "Once upon a time", 16, 5
	var seen []TokenInfo
	var events []string
	res, err := e.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: n, Logprobs: true, TopLogprobs: k,
		OnToken: func(ti TokenInfo) error {
			seen = append(seen, ti)
			events = append(events, "token")
			return nil
		}}, func(s string) error {
		events = append(events, "text")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Logprobs) != n || len(seen) != n {
		t.Fatalf("%d Result.Logprobs, %d OnToken calls for %d tokens", len(res.Logprobs), len(seen), n)
	}
	if events[0] != "token" || events[len(events)-1] != "text" {
		t.Errorf("events %v: OnToken must come before the text its token completes", events)
	}
	ids, err := e.PromptIDs(prompt, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := len(ids)
	var text strings.Builder
	for i, ti := range res.Logprobs {
		if ti.ID != seen[i].ID || ti.Logprob != seen[i].Logprob || !slices.Equal(ti.Top, seen[i].Top) {
			t.Fatalf("token %d: Result.Logprobs %+v, OnToken %+v", i, ti, seen[i])
		}
		ids = append(ids, ti.ID)
		text.WriteString(ti.Text)
	}
	if text.String() != res.Text {
		t.Errorf("the tokens' texts add up to %q, the generated text is %q", text.String(), res.Text)
	}
	rows, err := e.Model().Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	const tol = 1e-4
	for i, ti := range res.Logprobs {
		want := logSoftmax(rows[start+i-1])
		if ti.ID != pick.ArgMax(rows[start+i-1]) {
			t.Fatalf("token %d is %d, not the arg max of its logits", i, ti.ID)
		}
		if d := math.Abs(float64(ti.Logprob) - want[ti.ID]); d > tol || ti.Logprob > 0 {
			t.Errorf("token %d (%q): logprob %g, want %g", i, ti.Text, ti.Logprob, want[ti.ID])
		}
		if len(ti.Top) != k {
			t.Fatalf("token %d: %d alternatives, want %d", i, len(ti.Top), k)
		}
		// The greedy token is the most likely; the rest follow in order,
		// and no token left out beats the last one kept.
		if ti.Top[0].ID != ti.ID || ti.Top[0].Logprob != ti.Logprob || ti.Top[0].Text != ti.Text {
			t.Errorf("token %d: first alternative %+v, want the token itself %+v", i, ti.Top[0], ti)
		}
		for j, a := range ti.Top {
			if d := math.Abs(float64(a.Logprob) - want[a.ID]); d > tol {
				t.Errorf("token %d alternative %d (id %d): logprob %g, want %g", i, j, a.ID, a.Logprob, want[a.ID])
			}
			if j > 0 && (a.Logprob > ti.Top[j-1].Logprob || a.Logprob == ti.Top[j-1].Logprob && a.ID < ti.Top[j-1].ID) {
				t.Errorf("token %d: alternatives out of order: %+v", i, ti.Top)
			}
		}
		last := ti.Top[k-1].Logprob
		for id, lp := range want {
			if !slices.ContainsFunc(ti.Top, func(a TopLogprob) bool { return a.ID == id }) && lp > float64(last)+tol {
				t.Errorf("token %d: id %d (logprob %g) beats the last alternative kept (%g)", i, id, lp, last)
			}
		}
	}
}

// Logprobs are the model's, whatever the sampling settings: with a
// temperature and a repetition penalty (which changes the logits in place
// before sampling), the sampled tokens still get the log-softmax of the
// raw logits. Without Logprobs, OnToken gets ids and texts only.
func TestGenerateLogprobsSampled(t *testing.T) {
	e := loadStoriesEngine(t)
	const prompt = "Once upon a time"
	opt := GenerateOptions{MaxTokens: 12, Logprobs: true, Sampling: SamplingOptions{Temperature: 1.5, RepetitionPenalty: 1.3, Seed: 3}}
	res, err := e.Generate(context.Background(), prompt, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := e.PromptIDs(prompt, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := len(ids)
	for _, ti := range res.Logprobs {
		ids = append(ids, ti.ID)
	}
	rows, err := e.Model().Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	greedy := 0
	for i, ti := range res.Logprobs {
		want := logSoftmax(rows[start+i-1])[ti.ID]
		if d := math.Abs(float64(ti.Logprob) - want); d > 1e-4 || ti.Top != nil {
			t.Errorf("token %d: logprob %g and %d alternatives, want %g and none", i, ti.Logprob, len(ti.Top), want)
		}
		if ti.ID == pick.ArgMax(rows[start+i-1]) {
			greedy++
		}
	}
	if greedy == len(res.Logprobs) {
		t.Errorf("every sampled token was the arg max: the test does not sample")
	}

	// The same seed without Logprobs: the same tokens, no logprobs.
	opt.Logprobs = false
	var got []TokenInfo
	opt.OnToken = func(ti TokenInfo) error { got = append(got, ti); return nil }
	res2, err := e.Generate(context.Background(), prompt, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Text != res.Text || res2.Logprobs != nil || len(got) != len(res.Logprobs) {
		t.Fatalf("without Logprobs: %q, %d Result.Logprobs, %d OnToken calls; want %q, none, %d", res2.Text, len(res2.Logprobs), len(got), res.Text, len(res.Logprobs))
	}
	for i, ti := range got {
		if ti.ID != res.Logprobs[i].ID || ti.Text != res.Logprobs[i].Text || ti.Logprob != 0 || ti.Top != nil {
			t.Errorf("token %d without Logprobs: %+v, want id %d, text %q and nothing else", i, ti, res.Logprobs[i].ID, res.Logprobs[i].Text)
		}
	}
}

// Out-of-range logprob options fail before the model runs.
func TestLogprobOptions(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	for _, tt := range []struct {
		name string
		opt  GenerateOptions
		want string
	}{
		{"negative top", GenerateOptions{Logprobs: true, TopLogprobs: -1}, "top logprobs -1 must be in [0, 20]"},
		{"too many top", GenerateOptions{Logprobs: true, TopLogprobs: 21}, "top logprobs 21 must be in [0, 20]"},
		{"top without logprobs", GenerateOptions{TopLogprobs: 2}, "top logprobs 2 needs GenerateOptions.Logprobs"},
	} {
		res, err := e.Generate(context.Background(), "hi", tt.opt, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || res != nil {
			t.Errorf("%s: %v, %v; want no result and an error containing %q", tt.name, res, err, tt.want)
		}
	}
	// An error from OnToken ends Generate with it, and the partial Result.
	stop := context.Canceled
	res, err := e.Generate(context.Background(), "hi", GenerateOptions{MaxTokens: 5, IgnoreEOS: true, OnToken: func(TokenInfo) error { return stop }}, nil)
	if err != stop || res == nil || res.GeneratedTokens != 1 {
		t.Errorf("OnToken failing: %v, %+v; want its error after 1 token", err, res)
	}
}

// The logprober keeps the k largest logits, ties by ascending id, even
// where k exceeds the vocabulary, and allocates nothing per token.
func TestLogprober(t *testing.T) {
	for _, tt := range []struct {
		logits []float32
		k      int
		want   []int32
	}{
		{[]float32{1, 3, 3, 2}, 3, []int32{1, 2, 3}},
		{[]float32{1, 3, 3, 2}, 1, []int32{1}},
		{[]float32{5, 4, 3}, 0, nil},
		{[]float32{0, 0, 7}, 5, []int32{2, 0, 1}},
		{[]float32{-1, -2, -3, 9, -4, 9}, 2, []int32{3, 5}},
	} {
		p := &logprober{k: tt.k}
		p.measure(tt.logits, false)
		want := logSoftmax(tt.logits)
		var got []int32
		for i := range p.cur.n {
			e := p.cur.top[i]
			got = append(got, e.id)
			if math.Abs(float64(e.logprob)-want[e.id]) > 1e-6 {
				t.Errorf("%v: id %d logprob %g, want %g", tt.logits, e.id, e.logprob, want[e.id])
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%v, k %d: top %v, want %v", tt.logits, tt.k, got, tt.want)
		}
	}
	logits := make([]float32, 4096)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	p := &logprober{k: MaxTopLogprobs}
	p.measure(logits, true) // the first call sizes the copy
	if n := testing.AllocsPerRun(10, func() {
		p.measure(logits, true)
		logits[7] = 100 // a sampler's penalty changes the logits in place
		p.pick(7, logits)
		logits[7] = float32(math.Sin(7))
	}); n != 0 {
		t.Errorf("%g allocations per token", n)
	}
	if want := logSoftmax(logits)[7]; math.Abs(float64(p.cur.logprob)-want) > 1e-6 {
		t.Errorf("pick after the logits changed: %g, want %g from the kept copy", p.cur.logprob, want)
	}
}
