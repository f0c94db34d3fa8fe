package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache"
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

// A step planned with its requests' draws and dropped before their tokens
// are picked (here failed after planning, as a pool whose blocks outgrew
// their estimate fails it: every request in it is preempted and
// recomputed) draws the same tokens when planned again. A request's Draw
// hands out its next token's uniform until Pick takes the token, as
// kakeya.Sampler.DrawRow does; the dropped step calls no Pick, so the
// replanned step asks Draw again and gets the same uniform, and every
// request's tokens equal those of a run without the failures.
func TestDrawPreempted(t *testing.T) {
	m := loadTiny(t)
	vocab := m.Config().VocabSize
	const n, gen = 3, 10
	type calls struct{ draws, redraws, picks int }
	run := func(fail bool) ([][]int, []calls, Stats) {
		cfg := Config{Model: m, KVMemory: 1 << 22, StepTokens: 16, MaxWaiting: n}
		if fail {
			steps := 0
			cfg.forward = func(b *model.Batch, items []model.BatchItem) error {
				if steps++; len(items) > 1 && steps%4 == 0 {
					return fmt.Errorf("test: a block outgrew its estimate: %w", kvcache.ErrPoolFull)
				}
				return b.Forward(items)
			}
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r := rand.New(rand.NewPCG(3, 4))
		log := make([]calls, n)
		var hs []*Handle
		for i := range n {
			u := rand.New(rand.NewPCG(uint64(i), 7))
			d := model.DrawRow{U: u.Float64(), Temperature: 0.8, MinP: 0.02, TopP: 0.9, TopK: 20}
			pending := false
			req := Request{Prompt: randomPrompt(r, 6+11*i, vocab), MaxNew: gen}
			req.Draw = func() model.DrawRow {
				log[i].draws++
				if pending {
					log[i].redraws++ // planned before and dropped
				}
				pending = true
				return d
			}
			req.Pick = func(id, bad int, _ []int) (bool, error) {
				log[i].picks++
				pending = false
				d.U = u.Float64() // the token taken: the next draw's uniform
				return false, nil
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
		return out, log, s.Stats()
	}
	want, wantLog, _ := run(false)
	got, gotLog, st := run(true)
	redraws := 0
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d: tokens %v with dropped steps, %v without", i, got[i], want[i])
		}
		if wantLog[i].redraws != 0 || gotLog[i].picks != gen || wantLog[i].picks != gen {
			t.Errorf("request %d: draws and picks %+v with dropped steps, %+v without; want %d picks", i, gotLog[i], wantLog[i], gen)
		}
		redraws += gotLog[i].redraws
	}
	if st.Preemptions == 0 || redraws == 0 {
		t.Errorf("%d preemptions, %d draws planned again: the test dropped no planned draw", st.Preemptions, redraws)
	}
	t.Logf("%d preemptions, %d draws planned again", st.Preemptions, redraws)
}
