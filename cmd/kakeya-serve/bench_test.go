package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Load run parameters (make bench-serve): a fixed number of streamed chat
// requests from a fixed number of clients, all of it bounded by
// loadLimit. Each request is a system message all share (a prefix the
// pool's cache can serve) and a prompt of its own, and generates exactly
// loadMaxTokens tokens (ignore_eos), long enough for a compressed cache
// to encode blocks (kakeya's are 64 tokens on ref-qwen2-6m).
const (
	loadRequests  = 128
	loadClients   = 16
	loadMaxTokens = 256
	loadLimit     = 60 * time.Second
)

// BenchmarkServe is the load run: for each KV cache, a server on loopback
// and loadRequests streamed chat completions from loadClients clients.
// It reports requests per second, the time to first token's p50 and p99
// as the clients see it, and the errors, which must be none.
func BenchmarkServe(b *testing.B) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"bf16", nil},
		{"kakeya", []string{"--kv-codec", "kakeya", "--calib-cache", b.TempDir()}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s := startServer(b, append([]string{"--threads", "0", "--kv-memory", "256M"}, tt.args...)...)
			for b.Loop() {
				loadRun(b, s)
			}
		})
	}
}

// loadRun sends the load and reports its figures.
func loadRun(b *testing.B, s *testServer) {
	ctx, cancel := context.WithTimeout(context.Background(), loadLimit)
	defer cancel()
	ps := prompts(loadRequests)
	ttft := make([]time.Duration, loadRequests)
	var next, errs, tokens atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range loadClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= loadRequests {
					return
				}
				t, n, err := streamChat(ctx, s.url, ps[i])
				if err != nil {
					errs.Add(1)
					// One concrete type for atomic.Value: errors of
					// different types would panic it.
					firstErr.CompareAndSwap(nil, fmt.Errorf("%w", err))
					continue
				}
				ttft[i] = t
				tokens.Add(int64(n))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed, the first with: %v", n, loadRequests, firstErr.Load())
	}
	slices.Sort(ttft)
	pct := func(p float64) float64 { return float64(ttft[int(p*float64(len(ttft)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(loadRequests)/wall.Seconds(), "req/s")
	b.ReportMetric(float64(tokens.Load())/wall.Seconds(), "tok/s")
	b.ReportMetric(pct(0.5), "ttft-p50-ms")
	b.ReportMetric(pct(0.99), "ttft-p99-ms")
	b.ReportMetric(float64(errs.Load()), "errors")
	b.ReportMetric(s.metric(b, "kakeya_kv_cache_compression_ratio"), "kv-ratio")
	b.ReportMetric(s.metric(b, "kakeya_prefix_cache_hit_tokens_total")/loadRequests, "prefix-hit-tok/req")
	b.Logf("%d requests (%d clients, %d tokens each) in %v: %.1f req/s, TTFT p50 %.1f ms p99 %.1f ms, 0 errors",
		loadRequests, loadClients, loadMaxTokens, wall.Round(time.Millisecond), float64(loadRequests)/wall.Seconds(), pct(0.5), pct(0.99))
}

// loadSystem is the system message of every load request.
const loadSystem = "You are a helpful assistant. Answer in plain words, in a few short sentences, and stay on the subject you are asked about."

// streamChat sends one streamed greedy chat completion of loadMaxTokens
// tokens (ignore_eos) and returns the time to its first content chunk
// and its completion tokens.
func streamChat(ctx context.Context, url, prompt string) (time.Duration, int, error) {
	r, err := streamChatWith(ctx, url, prompt, loadMaxTokens, `, "ignore_eos": true, "temperature": 0`)
	return r.ttft, r.tokens, err
}
