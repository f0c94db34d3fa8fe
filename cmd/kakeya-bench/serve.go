package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/scheduler"
)

// serveOptions are the flags of the serving mode (--concurrency).
type serveOptions struct {
	concurrency  []int
	kvMemory     int64
	promptLen    int
	sharedPrefix float64 // fraction of each prompt that all requests share
	requests     int     // per level; 0: one per client
	stepTokens   int
	json         bool
	temperature  float64 // 0: greedy (Request.Pick); else sampled (Request.Draw on a backend that draws on its device, else Next on the host)
	topP         float64 // sampled requests' top-p (0 or 1: off)
	topK         int     // and top-k (0: off)
	// deadline is --time-limit's end (zero: none): the level running then
	// stops and reports what it measured; no level starts after it.
	deadline time.Time
}

// picking says how the serving mode's requests pick their tokens.
func (o serveOptions) picking() string {
	if o.temperature == 0 {
		return "greedy"
	}
	f := ""
	if o.topP > 0 && o.topP < 1 {
		f += fmt.Sprintf(", top-p %g", o.topP)
	}
	if o.topK > 0 {
		f += fmt.Sprintf(", top-k %d", o.topK)
	}
	return fmt.Sprintf("sampled at temperature %g%s (drawn on the device where the backend draws there)", o.temperature, f)
}

// serveRow is one (cache, threads, concurrency) level of the serving mode.
type serveRow struct {
	Cache       string  `json:"cache"`
	MatMul      string  `json:"matmul"`
	Threads     int     `json:"threads"` // 0 on a GPU (--device)
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	PromptLen   int     `json:"prompt_tokens"`
	GenLen      int     `json:"gen_tokens"`
	KVMemory    int64   `json:"kv_memory_bytes"`
	Seconds     float64 `json:"seconds"`
	// Temperature is the requests' (0: greedy, picked on the device
	// where the backend can).
	Temperature float64 `json:"temperature"`
	// TopP and TopK are the sampled requests' filters (0: off).
	TopP float64 `json:"top_p,omitempty"`
	TopK int     `json:"top_k,omitempty"`
	// OutputRate is every generated token over the whole run; DecodeRate
	// the tokens after each request's first over the decode window (the
	// first request's first token to the last request's end).
	OutputRate float64 `json:"output_tok_s"`
	DecodeRate float64 `json:"decode_tok_s"`
	// Time to first token, over all requests and split by whether the
	// prefix cache held part of the prompt.
	TTFTp50    float64 `json:"ttft_p50_ms"`
	TTFTp99    float64 `json:"ttft_p99_ms"`
	TTFTCold   float64 `json:"ttft_cold_p50_ms"`
	TTFTCached float64 `json:"ttft_cached_p50_ms"`
	// PeakRunning is the most requests admitted at once.
	PeakRunning int `json:"peak_running"`
	// HitRate is the prompt tokens the prefix cache supplied over all
	// prompt tokens.
	HitRate     float64 `json:"prefix_hit_rate"`
	Preemptions int64   `json:"preemptions"`
	// PeakKVMiB is the most pool memory in use at once; MaxTokens the
	// longest sequence the budget holds.
	PeakKVMiB float64 `json:"peak_kv_mib"`
	MaxTokens int     `json:"max_tokens"`
	// Done is the requests that ended; below Requests only where Stopped:
	// the level reached --time-limit and reports what it measured until
	// then (the tokens generated so far, over the time it ran; the
	// requests submitted and their first tokens; the most admitted at
	// once).
	Done    int  `json:"requests_done"`
	Stopped bool `json:"stopped,omitempty"`
}

// measureServe runs the serving levels of one loaded model.
func measureServe(ctx context.Context, m *model.Model, matmul string, threads int, o options, stderr io.Writer) ([]serveRow, error) {
	if o.warmup {
		if err := warmUp(m); err != nil {
			return nil, fmt.Errorf("warmup: %w", err)
		}
	}
	var rows []serveRow
	for _, cache := range o.caches {
		if late(o.serve.deadline) {
			fmt.Fprintf(stderr, "kakeya-bench: --time-limit reached: %s and what follows not run\n", cache)
			return rows, nil
		}
		opts, err := sequenceOptions(ctx, cache, o, m, threads, stderr)
		if err != nil {
			return nil, fmt.Errorf("--cache %s: %w", cache, err)
		}
		for _, c := range o.serve.concurrency {
			if late(o.serve.deadline) {
				fmt.Fprintf(stderr, "kakeya-bench: --time-limit reached: %s at concurrency %d and what follows not run\n", cache, c)
				return rows, nil
			}
			r, err := serveLevel(ctx, m, opts, c, o)
			if err != nil {
				return nil, fmt.Errorf("--cache %s, concurrency %d: %w", cache, c, err)
			}
			r.Cache, r.MatMul, r.Threads = cache, matmul, threads
			if o.progress || r.Stopped {
				stop := ""
				if r.Stopped {
					stop = fmt.Sprintf(" (stopped at --time-limit: %d of %d requests done)", r.Done, r.Requests)
				}
				fmt.Fprintf(stderr, "kakeya-bench: %s, %s matmul, %d threads, concurrency %d: %d requests in %.1fs%s, decode %.1f tok/s, TTFT p50 %.0f ms, peak running %d, prefix hits %.0f%%, preemptions %d\n",
					cache, matmul, threads, c, r.Requests, r.Seconds, stop, r.DecodeRate, r.TTFTp50, r.PeakRunning, 100*r.HitRate, r.Preemptions)
			}
			rows = append(rows, r)
			if r.Stopped {
				return rows, nil
			}
		}
	}
	return rows, nil
}

// late reports whether deadline (zero: none) has passed.
func late(deadline time.Time) bool {
	return !deadline.IsZero() && !time.Now().Before(deadline)
}

// serveLevel runs o.serve.requests synthetic requests (one per client if
// 0) from c clients, each sending its next request when the last ended,
// through a fresh scheduler (an empty prefix cache).
func serveLevel(ctx context.Context, m *model.Model, opts model.SequenceOptions, c int, o options) (serveRow, error) {
	so := o.serve
	s, err := scheduler.New(scheduler.Config{
		Model: m, Cache: opts, KVMemory: so.kvMemory, StepTokens: so.stepTokens,
		MaxRunning: min(max(c, scheduler.DefaultMaxRunning), so.stepTokens), MaxWaiting: max(c, 1),
	})
	if err != nil {
		return serveRow{}, err
	}
	defer s.Close()
	n := so.requests
	if n == 0 {
		n = c
	}
	vocab := m.Config().VocabSize
	rng := rand.New(rand.NewPCG(uint64(so.promptLen), 7))
	shared := int(float64(so.promptLen) * so.sharedPrefix)
	prefix := randomIDs(rng, shared, vocab)
	prompts := make([][]int, n)
	for i := range prompts {
		prompts[i] = append(slices.Clone(prefix), randomIDs(rng, so.promptLen-shared, vocab)...)
	}
	outs := make([]scheduler.Outcome, n)
	// The level stops at --time-limit: lctx ends the requests then, and
	// each keeps what it had generated (its handle's Outcome so far).
	lctx, cancel := ctx, context.CancelFunc(func() {})
	if !so.deadline.IsZero() {
		lctx, cancel = context.WithDeadline(ctx, so.deadline)
	}
	defer cancel()
	stopped := func() bool { return lctx.Err() != nil && ctx.Err() == nil }
	var next atomic.Int64
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				if stopped() {
					return
				}
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				req := scheduler.Request{Prompt: prompts[i], MaxNew: o.gen, Pick: greedy}
				if so.temperature > 0 {
					// Each request its own sampler (Next runs on the
					// scheduler's sampling goroutines, one per row).
					sm, err := kakeya.NewSampler(kakeya.SamplingOptions{Temperature: float32(so.temperature), TopP: float32(so.topP), TopK: so.topK, Seed: uint64(i)})
					if err != nil {
						errs <- err
						return
					}
					req.Pick, req.Next = nil, sampled(sm)
					if m.DeviceDraw() && sm.Drawable(vocab) {
						// Drawn on the device from sm's uniforms: only
						// the token crosses to the host.
						req.Pick, req.Draw = drawn(sm), func() compute.DrawRow {
							d, _ := sm.DrawRow(vocab)
							return d
						}
					}
				}
				h, err := s.Submit(lctx, req)
				if err != nil {
					if !stopped() {
						errs <- err
					}
					return
				}
				for {
					_, end, err := h.Tokens(lctx)
					if err != nil {
						if stopped() {
							outs[i], _ = h.Outcome() // what it generated so far
							return
						}
						errs <- err
						return
					}
					if end {
						break
					}
				}
				outs[i], _ = h.Outcome()
				if outs[i].Err != nil {
					if !stopped() {
						errs <- outs[i].Err
					}
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return serveRow{}, err
	}
	if err := ctx.Err(); err != nil {
		return serveRow{}, err
	}
	end := time.Now()
	st := s.Stats()
	r := serveRow{
		Concurrency: c, Requests: n, PromptLen: so.promptLen, GenLen: o.gen, KVMemory: so.kvMemory,
		Seconds: end.Sub(start).Seconds(), Temperature: so.temperature, TopP: so.topP, TopK: so.topK, PeakRunning: st.PeakRunning, Preemptions: st.Preemptions,
		PeakKVMiB: float64(st.Pool.Peak) / (1 << 20), MaxTokens: st.MaxTokens, Done: int(done.Load()),
	}
	r.Stopped = r.Done < n
	var gen, after, hit, sent int
	firstToken := end
	var all, cold, cached []float64
	for _, out := range outs {
		if out.Submitted.IsZero() {
			continue // never sent: the level stopped first
		}
		sent++
		gen += out.Generated
		hit += out.Reused
		if out.FirstToken.IsZero() {
			continue // stopped before its first token
		}
		after += out.Generated - 1
		if out.FirstToken.Before(firstToken) {
			firstToken = out.FirstToken
		}
		ttft := float64(out.FirstToken.Sub(out.Submitted).Microseconds()) / 1e3
		all = append(all, ttft)
		if out.Reused > 0 {
			cached = append(cached, ttft)
		} else {
			cold = append(cold, ttft)
		}
	}
	r.OutputRate = float64(gen) / r.Seconds
	if w := end.Sub(firstToken).Seconds(); w > 0 {
		r.DecodeRate = float64(after) / w
	}
	r.TTFTp50, r.TTFTp99 = percentile(all, 0.5), percentile(all, 0.99)
	r.TTFTCold, r.TTFTCached = percentile(cold, 0.5), percentile(cached, 0.5)
	if sent > 0 {
		r.HitRate = float64(hit) / float64(sent*so.promptLen)
	}
	return r, nil
}

// greedy is the requests' Pick: the most likely token, as a server
// decoding at temperature 0 takes it (on the device where the backend
// picks there, so only the token crosses to the host), never ending before
// MaxNew; a NaN or infinite logit fails the request.
func greedy(id, nonFinite int, _ []int) (bool, error) {
	if nonFinite >= 0 {
		return false, fmt.Errorf("logit %d of token %d's step is not finite", nonFinite, id)
	}
	return false, nil
}

// sampled is the requests' Next at a temperature: sm's draw from the
// step's logits, never ending before MaxNew (non-finite logits are
// drawn from as they are; the greedy path checks them).
func sampled(sm *kakeya.Sampler) func([]float32, []int) (int, bool, error) {
	return func(logits []float32, history []int) (int, bool, error) {
		return sm.Sample(logits, history), false, nil
	}
}

// drawn is the requests' Pick at a temperature on a backend that draws
// on its device (Request.Draw gives sm's uniforms): the drawn token,
// taken; a NaN or infinite logit fails the request.
func drawn(sm *kakeya.Sampler) func(int, int, []int) (bool, error) {
	return func(id, nonFinite int, history []int) (bool, error) {
		sm.Drawn()
		return greedy(id, nonFinite, history)
	}
}

// randomIDs returns n token ids in [1, vocab).
func randomIDs(r *rand.Rand, n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1 + r.IntN(vocab-1)
	}
	return ids
}

// percentile returns the q-quantile of v (nearest rank), 0 for none.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// writeServe prints the serving rows as a Markdown table, or as JSON.
func writeServe(w io.Writer, rows []serveRow, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprintln(w, "| cache | threads | concurrency | requests | decode tok/s | vs 1 | output tok/s | TTFT p50 ms | TTFT p99 ms | cold / cached p50 ms | peak running | prefix hits | preemptions | peak KV | stopped |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	type key struct {
		cache, matmul string
		threads       int
	}
	one := map[key]float64{}
	for _, r := range rows {
		if r.Concurrency == 1 {
			one[key{r.Cache, r.MatMul, r.Threads}] = r.DecodeRate
		}
	}
	for _, r := range rows {
		rel := "–"
		if b, ok := one[key{r.Cache, r.MatMul, r.Threads}]; ok && b > 0 {
			rel = fmt.Sprintf("%.2fx", r.DecodeRate/b)
		}
		split := "–"
		if r.TTFTCached > 0 {
			split = fmt.Sprintf("%.0f / %.0f", r.TTFTCold, r.TTFTCached)
		}
		threads := "–" // a GPU's level (--device)
		if r.Threads > 0 {
			threads = strconv.Itoa(r.Threads)
		}
		stopped := "–"
		if r.Stopped {
			stopped = fmt.Sprintf("time limit: %d of %d done", r.Done, r.Requests)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.1f | %s | %.1f | %.0f | %.0f | %s | %d | %.0f%% | %d | %s | %s |\n",
			r.Cache, threads, r.Concurrency, r.Requests, r.DecodeRate, rel, r.OutputRate, r.TTFTp50, r.TTFTp99, split,
			r.PeakRunning, 100*r.HitRate, r.Preemptions, cli.Bytes(int64(r.PeakKVMiB*(1<<20))), stopped)
	}
	return nil
}
