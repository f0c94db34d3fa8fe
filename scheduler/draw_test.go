package scheduler

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// A request with Draw gets in Pick the token drawn with its draws (here
// on the host, the CPU backend drawing none on its device): the tokens a
// Next request draws with pick.Draw from the logits and the same
// uniforms, over prompts of several chunks (a chunk with more to come
// asks for no draw) and requests batched together.
func TestDrawRequests(t *testing.T) {
	m := loadTiny(t)
	vocab := m.Config().VocabSize
	const n, gen = 4, 12
	run := func(drawn bool) [][]int {
		s, err := New(Config{Model: m, KVMemory: 1 << 22, StepTokens: 16, MaxWaiting: n})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r := rand.New(rand.NewPCG(1, 2))
		var hs []*Handle
		for i := range n {
			u := rand.New(rand.NewPCG(uint64(i), 9))
			d := model.DrawRow{U: u.Float64(), Temperature: 0.9 + 0.1*float32(i), MinP: 0.02}
			req := Request{Prompt: randomPrompt(r, 10+9*i, vocab), MaxNew: gen}
			if drawn {
				req.Draw = func() model.DrawRow { return d }
				req.Pick = func(id, bad int, _ []int) (bool, error) {
					if bad >= 0 {
						t.Errorf("request %d: a non-finite logit at %d", i, bad)
					}
					d.U = u.Float64() // the token taken: the next draw's uniform
					return false, nil
				}
			} else {
				req.Next = func(logits []float32, _ []int) (int, bool, error) {
					id := pick.Draw(logits, d.Temperature, d.MinP, d.U)
					d.U = u.Float64()
					return id, false, nil
				}
			}
			h, err := s.Submit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		var out [][]int
		for _, h := range hs {
			ids, o, err := collect(context.Background(), h)
			if err != nil || o.Reason != EndLength {
				t.Fatalf("request ended %q, %v", o.Reason, err)
			}
			out = append(out, ids)
		}
		return out
	}
	want, got := run(false), run(true)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d: drawn tokens %v, Next's %v", i, got[i], want[i])
		}
	}
}
