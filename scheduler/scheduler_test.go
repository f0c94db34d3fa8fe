package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// loadTiny loads a seeded Qwen2-style checkpoint with 16-token blocks.
func loadTiny(t testing.TB) *model.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	b := cpubackend.New(2)
	t.Cleanup(func() { b.Close() })
	m, err := model.Load(dir, model.Options{Backend: b, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// greedy picks the largest logit; eos (if >= 0) ends the request.
func greedy(eos int) func([]float32, []int) (int, bool, error) {
	return func(logits []float32, _ []int) (int, bool, error) {
		best := pick.ArgMax(logits)
		return best, best == eos, nil
	}
}

// solo decodes prompt greedily on a sequence of its own, one token per
// step after the prompt, as a lone Generate would.
func solo(t testing.TB, m *model.Model, pol kvcache.Policy, prompt []int, maxNew int) []int {
	t.Helper()
	seq, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol})
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	logits, err := seq.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	next := greedy(-1)
	for len(out) < maxNew && seq.Len() < m.MaxContext() {
		id, _, _ := next(logits, nil)
		out = append(out, id)
		if len(out) == maxNew || seq.Len()+1 > m.MaxContext() {
			break
		}
		if logits, err = seq.Forward([]int{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// collect reads every token of h.
func collect(ctx context.Context, h *Handle) ([]int, Outcome, error) {
	var out []int
	for {
		ids, done, err := h.Tokens(ctx)
		if err != nil {
			return out, Outcome{}, err
		}
		out = append(out, ids...)
		if done {
			o, _ := h.Outcome()
			return out, o, o.Err
		}
	}
}

func int8Policy(layers int) kvcache.Policy {
	l := make([]kvcache.LayerCodecs, layers)
	for i := range l {
		l[i] = kvcache.LayerCodecs{K: []codec.Codec{codec.Int8{}}, V: codec.Int8{}}
	}
	return kvcache.Policy{Layers: l, HotWindow: 16, HotBF16: true}
}

func randomPrompt(r *rand.Rand, n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = r.IntN(vocab)
	}
	return p
}

// Concurrent requests of mixed lengths, batched, each get exactly the
// greedy tokens of their solo run, for an uncompressed and an encoded
// cache, and leave the pool holding no referenced block.
func TestBatchedEqualsSolo(t *testing.T) {
	m := loadTiny(t)
	vocab := m.Config().VocabSize
	for _, tc := range []struct {
		name string
		pol  kvcache.Policy
		step int
	}{
		// Steps of 64 tokens split prompts across steps, which an
		// uncompressed cache does not notice.
		{"bf16", kvcache.Policy{HotBF16: true}, 64},
		// Under a compressing policy a prompt's later chunk attends to
		// its earlier chunks' encoded blocks, as a decode step does, so
		// only prompts run whole in one step give a one-step prefill's
		// logits: steps of 2,048 tokens hold every prompt here.
		{"int8", int8Policy(m.Config().NumLayers), 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: tc.pol}, KVMemory: 64 << 20, StepTokens: tc.step})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r := rand.New(rand.NewPCG(1, 2))
			const n = 12
			prompts := make([][]int, n)
			maxNew := make([]int, n)
			for i := range prompts {
				prompts[i] = randomPrompt(r, 1+r.IntN(90), vocab)
				maxNew[i] = 1 + r.IntN(40)
			}
			got := make([][]int, n)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, err := s.Submit(context.Background(), Request{Prompt: prompts[i], MaxNew: maxNew[i], Next: greedy(-1)})
					if err != nil {
						errs <- err
						return
					}
					out, o, err := collect(context.Background(), h)
					if err == nil && o.Reason != EndLength {
						err = fmt.Errorf("request %d ended with %q, want %q", i, o.Reason, EndLength)
					}
					got[i] = out
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for i := range prompts {
				if want := solo(t, m, tc.pol, prompts[i], maxNew[i]); !slices.Equal(got[i], want) {
					t.Errorf("request %d (prompt %d tokens): batched %v, solo %v", i, len(prompts[i]), got[i], want)
				}
			}
			st := s.Stats()
			if st.PeakRunning < 2 {
				t.Errorf("at most %d requests ran at once: nothing was batched", st.PeakRunning)
			}
			if st.Pool.Referenced != 0 || st.Running != 0 || st.Reserved != 0 {
				t.Errorf("after every request ended: %+v", st)
			}
		})
	}
}

// A request whose prompt starts with blocks another request left cached
// reuses them and gets the tokens of a cold run.
func TestPrefixReuse(t *testing.T) {
	m := loadTiny(t)
	pol := kvcache.Policy{HotBF16: true}
	s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: pol}, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(3, 4))
	shared := randomPrompt(r, 100, m.Config().VocabSize)
	run := func(prompt []int) ([]int, Outcome) {
		h, err := s.Submit(context.Background(), Request{Prompt: prompt, MaxNew: 8, Next: greedy(-1)})
		if err != nil {
			t.Fatal(err)
		}
		out, o, err := collect(context.Background(), h)
		if err != nil {
			t.Fatal(err)
		}
		return out, o
	}
	if _, o := run(shared[:70]); o.Reused != 0 {
		t.Fatalf("the first request reused %d tokens of an empty pool", o.Reused)
	}
	prompt := append(slices.Clone(shared[:90]), 5, 6)
	out, o := run(prompt)
	if o.Reused != 64 {
		t.Errorf("reused %d tokens, want 64 (the 4 full blocks of the first prompt)", o.Reused)
	}
	if want := solo(t, m, pol, prompt, 8); !slices.Equal(out, want) {
		t.Errorf("after reuse %v, cold %v", out, want)
	}
	if st := s.Stats(); st.Pool.Hits != 1 || st.Pool.HitTokens != 64 {
		t.Errorf("pool stats %+v, want one hit of 64 tokens", st.Pool)
	}
}

// A randomized schedule of joins, cancellations and preemptions under a
// tight budget: no request fails for want of bytes, the pool never holds
// more than its budget, no block leaks, and every request that was not
// cancelled gets its solo greedy output.
func TestRandomSchedule(t *testing.T) {
	// Room for about three 120-token sequences at once.
	randomSchedule(t, loadTiny(t), kvcache.Policy{HotBF16: true}, int64(3*128*2*2*2*16*2), 12)
}

// TestRandomScheduleGemma is TestRandomSchedule on a Gemma 3 model, whose
// sliding layers release the blocks their 8-token window left: admission
// counts them so (kvcache.Config.Windows), preemption returns what they
// hold, and every request still gets its solo tokens.
func TestRandomScheduleGemma(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gemma3")
	if err := testmodel.Write(dir, testmodel.Gemma3Tiny); err != nil {
		t.Fatal(err)
	}
	b := cpubackend.New(2)
	t.Cleanup(func() { b.Close() })
	m, err := model.Load(dir, model.Options{Backend: b, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.CacheShape().Windows == nil {
		t.Fatal("no sliding windows for the cache: the test checks nothing")
	}
	// 140 KB: a 120-token sequence holds about 56 KB (768 bytes a token
	// in full, one layer of six), so preemptions happen.
	randomSchedule(t, m, kvcache.Policy{HotBF16: true}, 140<<10, 6)
}

// TestRandomScheduleMistral is TestRandomSchedule on a Mistral model,
// every layer sliding (a 12-token window) and coding its blocks once they
// leave the 4-token hot window, then releasing them as they slide out:
// admission counts a sequence by its window, preemption returns what it
// holds, encoded or not, and every request still gets its solo tokens.
// The codec, bf16 over a bf16 cache, is lossless, so that a prompt split
// across steps (attending to encoded blocks) decodes as one prefilled
// at once.
func TestRandomScheduleMistral(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mistral")
	spec := testmodel.MistralTiny
	spec.SlidingWindow = 12
	if err := testmodel.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	b := cpubackend.New(2)
	t.Cleanup(func() { b.Close() })
	m, err := model.Load(dir, model.Options{Backend: b, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if w := m.CacheShape().Windows; len(w) != spec.Layers || w[0] != 12 {
		t.Fatalf("windows %v: the test checks nothing", w)
	}
	bf16, err := codec.Parse("bf16")
	if err != nil {
		t.Fatal(err)
	}
	lc := kvcache.LayerCodecs{K: []codec.Codec{bf16}, V: bf16}
	pol := kvcache.Policy{HotBF16: true, HotWindow: 4, Layers: []kvcache.LayerCodecs{lc, lc}}
	// 40 KB: a block position takes 1 KB (2 layers x 2 KV heads x K, V x
	// 4 tokens x 16 x 2 bytes; bf16 encoded, a 16-byte header more), and
	// a sequence may hold its window and a 48-token step's chunk, about
	// 17 blocks a layer: a few run at once, and preemptions happen.
	randomSchedule(t, m, pol, 40<<10, 6)
}

// randomSchedule runs seeds random schedules of 16 requests on m under
// pol in a pool of budget bytes, each request checked against its solo
// run.
func randomSchedule(t *testing.T, m *model.Model, pol kvcache.Policy, budget int64, seeds int) {
	vocab := m.Config().VocabSize
	if testing.Short() {
		seeds = 3
	}
	if raceEnabled {
		// The race detector watches the goroutines of a few schedules;
		// the run without it (make test runs both) covers every seed.
		seeds = min(seeds, 4)
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 99))
			s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: pol}, KVMemory: budget, StepTokens: 48, MaxRunning: 8, DecodeReserve: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const n = 16
			type job struct {
				prompt []int
				maxNew int
				cancel bool
			}
			jobs := make([]job, n)
			base := randomPrompt(r, 64, vocab)
			for i := range jobs {
				p := randomPrompt(r, 1+r.IntN(80), vocab)
				if r.IntN(3) == 0 { // a shared prefix
					p = append(slices.Clone(base[:16*(1+r.IntN(3))]), p...)
				}
				jobs[i] = job{prompt: p, maxNew: 1 + r.IntN(48), cancel: r.IntN(5) == 0}
			}
			got := make([][]int, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, j := range jobs {
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					h, err := s.Submit(ctx, Request{Prompt: j.prompt, MaxNew: j.maxNew, Next: greedy(-1)})
					if err != nil {
						errs[i] = err
						return
					}
					if j.cancel {
						ids, _, err := h.Tokens(ctx)
						if err != nil {
							errs[i] = err
							return
						}
						got[i] = ids
						cancel()
						_, _, err = collect(context.Background(), h)
						if err != nil && !errors.Is(err, context.Canceled) {
							errs[i] = fmt.Errorf("cancelled request ended with %v", err)
						}
						return
					}
					got[i], _, errs[i] = collect(context.Background(), h)
				}()
			}
			wg.Wait()
			for i, j := range jobs {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				want := solo(t, m, pol, j.prompt, j.maxNew)
				if j.cancel {
					want = want[:min(len(want), len(got[i]))]
				}
				if !slices.Equal(got[i], want) {
					t.Errorf("request %d (prompt %d, max %d, cancel %v): got %v, solo %v", i, len(j.prompt), j.maxNew, j.cancel, got[i], want)
				}
			}
			st := s.Stats()
			if st.Pool.Peak > budget || st.Pool.Peak == 0 {
				t.Errorf("the pool held at most %d bytes, budget %d", st.Pool.Peak, budget)
			}
			if st.Running != 0 || st.Waiting != 0 || st.Reserved != 0 || st.Pool.Referenced != 0 {
				t.Errorf("after the schedule: %+v", st)
			}
			s.Pool().Evict()
			if u := s.Pool().Stats().Used; u != 0 {
				t.Errorf("after Evict the pool holds %d bytes: a block leaked", u)
			}
			t.Logf("peak running %d, preemptions %d, steps %d, prefix hits %d", st.PeakRunning, st.Preemptions, st.Steps, st.Pool.Hits)
		})
	}
}

// Requests that can never run fail at Submit with an error that says why.
func TestSubmitErrors(t *testing.T) {
	m := loadTiny(t)
	pol := kvcache.Policy{HotBF16: true}
	// 4 blocks of 16 tokens: 2 layers x 2 heads x K,V x 16 x 16 x 2 bytes.
	s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: pol}, KVMemory: 4 * 2 * 2 * 2 * 16 * 16 * 2, MaxWaiting: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxTokens() != 64 {
		t.Errorf("MaxTokens = %d, want 64", s.MaxTokens())
	}
	next := greedy(-1)
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{MaxNew: 1, Next: next}, "empty prompt"},
		{Request{Prompt: []int{1}, Next: next}, "generate 0 tokens"},
		{Request{Prompt: []int{1}, MaxNew: 1}, "Next"},
		{Request{Prompt: []int{1, 999}, MaxNew: 1, Next: next}, "id 999"},
		{Request{Prompt: make([]int, 64), MaxNew: 1, Next: next}, "KV memory"},
	} {
		if _, err := s.Submit(context.Background(), tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Submit(%d tokens) = %v, want an error naming %q", len(tc.r.Prompt), err, tc.want)
		}
	}
	// A request longer than MaxTokens allows ends with EndContext.
	h, err := s.Submit(context.Background(), Request{Prompt: make([]int, 60), MaxNew: 100, Next: next})
	if err != nil {
		t.Fatal(err)
	}
	out, o, err := collect(context.Background(), h)
	if err != nil || len(out) != 4 || o.Reason != EndContext {
		t.Errorf("60-token prompt in 64 tokens of memory: %d tokens, %q, %v; want 4, %q", len(out), o.Reason, err, EndContext)
	}
	s.Close()
	if _, err := s.Submit(context.Background(), Request{Prompt: []int{1}, MaxNew: 1, Next: next}); !errors.Is(err, model.ErrClosed) {
		t.Errorf("Submit after Close = %v, want ErrClosed", err)
	}
	if _, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: pol}, KVMemory: 100}); err == nil || !strings.Contains(err.Error(), "KV memory") {
		t.Errorf("New with 100 bytes = %v, want an error naming the KV memory", err)
	}
}

// Close ends the requests in flight with ErrClosed.
func TestCloseEndsRequests(t *testing.T) {
	m := loadTiny(t)
	s, err := New(Config{Model: m, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Submit(context.Background(), Request{Prompt: []int{1, 2, 3}, MaxNew: 400, Next: greedy(-1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Tokens(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, _, err := collect(context.Background(), h); !errors.Is(err, model.ErrClosed) {
		t.Errorf("a request running at Close ended with %v, want ErrClosed", err)
	}
	s.Close()
}

// Request.Payload's value for each kept token reaches TokensWith beside
// that token, in order, across concurrent requests; an end token gets no
// payload, and a request without Payload gets none.
func TestPayload(t *testing.T) {
	m := loadTiny(t)
	pol := kvcache.Policy{HotBF16: true}
	s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: pol}, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type pick struct {
		id, pos int     // the token and its place in the history
		logit   float32 // its logit, as Next saw it
	}
	r := rand.New(rand.NewPCG(5, 6))
	vocab := m.Config().VocabSize
	prompts := [][]int{randomPrompt(r, 20, vocab), randomPrompt(r, 37, vocab), randomPrompt(r, 9, vocab)}
	const maxNew = 6
	// The second request ends on the third token of its solo run.
	eos := solo(t, m, pol, prompts[1], maxNew)[2]
	type result struct {
		ids      []int
		payloads []any
		calls    int
		err      error
	}
	results := make([]result, len(prompts))
	var wg sync.WaitGroup
	for i, prompt := range prompts {
		var last pick
		end := -1
		if i == 1 {
			end = eos
		}
		g := greedy(end)
		req := Request{Prompt: prompt, MaxNew: maxNew, Next: func(logits []float32, history []int) (int, bool, error) {
			id, stop, err := g(logits, history)
			last = pick{id, len(history), logits[id]}
			return id, stop, err
		}}
		if i != 2 {
			req.Payload = func(id int) any {
				results[i].calls++
				if id != last.id {
					return fmt.Sprintf("Payload(%d) after Next picked %d", id, last.id)
				}
				return last
			}
		}
		h, err := s.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			res := &results[i]
			for {
				ids, ps, done, err := h.TokensWith(context.Background())
				if err != nil {
					res.err = err
					return
				}
				if ps != nil && len(ps) != len(ids) {
					res.err = fmt.Errorf("%d payloads for %d tokens", len(ps), len(ids))
					return
				}
				res.ids, res.payloads = append(res.ids, ids...), append(res.payloads, ps...)
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, res := range results {
		if res.err != nil {
			t.Fatalf("request %d: %v", i, res.err)
		}
		want := solo(t, m, pol, prompts[i], maxNew)
		if i == 1 {
			want = want[:2]
		}
		if !slices.Equal(res.ids, want) {
			t.Errorf("request %d: tokens %v, want %v", i, res.ids, want)
		}
		if i == 2 {
			if res.payloads != nil {
				t.Errorf("request %d has no Payload but got payloads %v", i, res.payloads)
			}
			continue
		}
		if res.calls != len(res.ids) || len(res.payloads) != len(res.ids) {
			t.Errorf("request %d: %d tokens, %d payloads, %d Payload calls", i, len(res.ids), len(res.payloads), res.calls)
			continue
		}
		for j, p := range res.payloads {
			got, ok := p.(pick)
			if !ok || got.id != res.ids[j] || got.pos != len(prompts[i])+j || got.logit == 0 {
				t.Errorf("request %d token %d (id %d at %d): payload %v", i, j, res.ids[j], len(prompts[i])+j, p)
			}
		}
	}
}

// TestLast: a request whose Last says its token is the output's last
// ends with it (EndToken, the token delivered), beside a request that
// runs on; kakeya's TestStructuredEndsAtClose counts the steps.
func TestLast(t *testing.T) {
	m := loadTiny(t)
	s, err := New(Config{Model: m, Cache: model.SequenceOptions{Cache: kvcache.Policy{HotBF16: true}}, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(7, 8))
	vocab := m.Config().VocabSize
	a, b := randomPrompt(r, 12, vocab), randomPrompt(r, 12, vocab)
	want := solo(t, m, kvcache.Policy{HotBF16: true}, a, 3)
	kept := 0
	ha, err := s.Submit(context.Background(), Request{Prompt: a, MaxNew: 10, Next: greedy(-1),
		Last: func() bool { kept++; return kept == 3 }})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := s.Submit(context.Background(), Request{Prompt: b, MaxNew: 8, Next: greedy(-1)})
	if err != nil {
		t.Fatal(err)
	}
	got, o, err := collect(context.Background(), ha)
	if err != nil || !slices.Equal(got, want) || o.Reason != EndToken {
		t.Fatalf("with Last true on the third token: %v (%q, %v), want %v (%q)", got, o.Reason, err, want, EndToken)
	}
	if gotB, o, err := collect(context.Background(), hb); err != nil || len(gotB) != 8 || o.Reason != EndLength {
		t.Fatalf("the other request: %d tokens (%q, %v), want 8 (%q)", len(gotB), o.Reason, err, EndLength)
	}
	if kept != 3 {
		t.Errorf("Last called %d times, want 3", kept)
	}
}
