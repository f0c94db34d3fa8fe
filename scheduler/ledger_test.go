package scheduler

import (
	"context"

	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
)

// Over-commit stress: goroutines submit requests of random lengths (some
// longer than the budget holds), half of them on a shared prefix, to a
// scheduler whose pool holds about three of them, for an uncompressed and
// an int8 cache. A monitor samples the pool throughout: its bytes never
// exceed the budget, the ledger's committed bytes never either, and the
// bytes the sequences reference never exceed the committed ones. Every
// request either finishes (length or context) or is refused at Submit with
// an error naming the KV memory; none fails for want of bytes; requests
// were preempted and prefixes reused; nothing stays reserved or leaks.
func TestOvercommitStress(t *testing.T) {
	m := loadTiny(t)
	vocab := m.Config().VocabSize
	const budget = 64 << 10 // 256 tokens of the bf16 cache (256 bytes a token)
	var preemptions, hits int64
	for _, tc := range []struct {
		name string
		pol  kvcache.Policy
	}{
		{"bf16", kvcache.Policy{HotBF16: true}},
		{"int8", int8Policy(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: tc.pol}, KVMemory: budget, StepTokens: 48, MaxRunning: 8, DecodeReserve: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			maxToks := s.MaxTokens()
			stop := make(chan struct{})
			var samples atomic.Int64
			var bad atomic.Value
			var mon sync.WaitGroup
			mon.Go(func() {
				for {
					st := s.Pool().Stats()
					committed := st.Reserved + st.Shared
					if st.Used > st.Budget || committed > st.Budget || st.Used-st.CachedBytes > committed {
						bad.CompareAndSwap(nil, fmt.Sprintf("used %d (cached %d), reserved %d + shared %d, budget %d", st.Used, st.CachedBytes, st.Reserved, st.Shared, st.Budget))
					}
					samples.Add(1)
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Microsecond):
					}
				}
			})
			base := randomPrompt(rand.New(rand.NewPCG(1, 1)), 96, vocab)
			var wg sync.WaitGroup
			var refused, done atomic.Int64
			errs := make(chan error, 64)
			for g := range 8 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 17))
					for range 4 {
						n := 1 + r.IntN(160)
						if r.IntN(8) == 0 {
							n = maxToks + r.IntN(32) // never fits
						}
						p := randomPrompt(r, n, vocab)
						if r.IntN(2) == 0 {
							k := min(len(base), 16*(1+r.IntN(5)))
							p = append(slices.Clone(base[:k]), p...)
						}
						h, err := s.Submit(context.Background(), Request{Prompt: p, MaxNew: 1 + r.IntN(48), Next: greedy(-1)})
						if err != nil {
							if len(p) >= maxToks && strings.Contains(err.Error(), "KV memory") {
								refused.Add(1)
								continue
							}
							errs <- fmt.Errorf("Submit of %d tokens (the budget holds %d): %v", len(p), maxToks, err)
							return
						}
						_, o, err := collect(context.Background(), h)
						if err != nil || (o.Reason != EndLength && o.Reason != EndContext) {
							errs <- fmt.Errorf("request of %d tokens ended %q, %v", len(p), o.Reason, err)
							return
						}
						done.Add(1)
					}
				})
			}
			wg.Wait()
			close(stop)
			mon.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if b := bad.Load(); b != nil {
				t.Errorf("the pool broke the ledger's rules: %s", b)
			}
			st := s.Stats()
			if done.Load()+refused.Load() != 32 || refused.Load() == 0 {
				t.Errorf("%d requests finished, %d refused; want 32 in all, some refused", done.Load(), refused.Load())
			}
			if st.Running != 0 || st.Reserved != 0 || st.Pool.Reserved != 0 || st.Pool.Shared != 0 || st.Pool.Referenced != 0 {
				t.Errorf("after the run: %+v", st)
			}
			s.Pool().Evict()
			if u := s.Pool().Stats().Used; u != 0 {
				t.Errorf("after Evict the pool holds %d bytes: a block leaked", u)
			}
			preemptions += st.Preemptions
			hits += st.Pool.Hits
			t.Logf("%d finished, %d refused, peak running %d, %d preemptions, %d prefix hits, %d steps, %d samples, peak %d of %d bytes",
				done.Load(), refused.Load(), st.PeakRunning, st.Preemptions, st.Pool.Hits, st.Steps, samples.Load(), st.Pool.Peak, budget)
		})
	}
	if preemptions == 0 || hits == 0 {
		t.Errorf("%d preemptions and %d prefix hits in all: the stress exercised neither", preemptions, hits)
	}
}

// peakRunning submits n requests of prompt+gen tokens at once to a fresh
// scheduler and returns the most that ran at once.
func peakRunning(t *testing.T, m *model.Model, pol kvcache.Policy, budget int64, stepTokens, n, prompt, gen int) int {
	t.Helper()
	s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: pol}, KVMemory: budget, StepTokens: stepTokens, MaxWaiting: n})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(uint64(prompt), 3))
	var hs []*Handle
	for range n {
		h, err := s.Submit(context.Background(), Request{Prompt: randomPrompt(r, prompt, m.Config().VocabSize), MaxNew: gen, Pick: func(int, int, []int) (bool, error) { return false, nil }})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if _, o, err := collect(context.Background(), h); err != nil || o.Reason != EndLength {
			t.Fatalf("request ended %q, %v", o.Reason, err)
		}
	}
	return s.Stats().PeakRunning
}

// Admission is bound by bytes where bytes bind: under one budget an int8
// cache runs more sequences at once than a bf16 one. Where they do not, the
// step's token budget binds instead, for every cache alike: with prompts of
// about four steps' tokens and 32 generated, a request spends ~4 steps in
// prefill and 32 decoding while new prompts enter at one per ~4 steps, so
// about 1 + 32*(S-R)/P ≈ 9 run at once (Little's law) however much memory
// is free. That is the GPU bundle's KV-bound row (2,016 + 32 tokens, 512
// step tokens, plain and int8 both 9 at once): it was never bound by its
// 1,792 MiB.
func TestAdmissionBoundBy(t *testing.T) {
	if raceEnabled {
		t.Skip("counts steps of ~17,000 tokens, no concurrency of its own: too slow under -race (TestOvercommitStress runs there)")
	}
	m := loadTiny(t)
	const tok = 2 * 2 * 2 * 16 * 2 // bf16 bytes a token: layers x KV heads x K,V x head dim x 2
	bf16, i8 := kvcache.Policy{HotBF16: true}, int8Policy(2)
	// Bytes bind: room for 4 bf16 sequences of 96 + 32 tokens, prompts
	// in two steps. (The int8 cache holds its 16-token hot window and, on
	// this 2-layer model, half its layers' excess while a layer encodes a
	// chunk: 5 fit.)
	budget := int64(4 * 128 * tok)
	kb, ki := peakRunning(t, m, bf16, budget, 64, 16, 96, 32), peakRunning(t, m, i8, budget, 64, 16, 96, 32)
	if kb != 4 || ki <= kb {
		t.Errorf("KV-bound: bf16 ran %d at once, int8 %d; want 4 and more", kb, ki)
	}
	// Steps bind (the bundle's row scaled by 1/8: 252 + 32 tokens, 64
	// step tokens, 48 requests), with memory for all 48.
	budget = 48 * 288 * tok
	pb, pi := peakRunning(t, m, bf16, budget, 64, 48, 252, 32), peakRunning(t, m, i8, budget, 64, 48, 252, 32)
	if pb != pi || pb > 12 {
		t.Errorf("step-bound: bf16 ran %d at once, int8 %d; want the same, about 9", pb, pi)
	}
	t.Logf("KV-bound: bf16 %d, int8 %d at once; step-bound: bf16 %d, int8 %d", kb, ki, pb, pi)
}
