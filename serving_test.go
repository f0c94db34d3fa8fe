package kakeya

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// Concurrent Generate calls are batched by the engine's scheduler and each
// gets exactly the text of its solo call, for an uncompressed and a
// compressed cache; afterwards the pool holds no referenced block.
func TestGenerateConcurrentBatched(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	prompts := []string{"Once upon a time", "The cat", "Lily and Tom went to the park", "One day,", "Ben had a red ball", "The sun was", "A little bird", "Mom said"}
	for _, cache := range []kvconfig.Spec{{CacheType: "bf16"}, {KV: "int8", BlockSize: 16}} {
		t.Run(cache.String(), func(t *testing.T) {
			e, err := Load(context.Background(), dir, Options{Threads: 2, Cache: cache})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			opt := GenerateOptions{MaxTokens: 40}
			want := make([]string, len(prompts))
			for i, p := range prompts {
				res, err := e.Generate(context.Background(), p, opt, nil)
				if err != nil {
					t.Fatal(err)
				}
				want[i] = res.Text
			}
			got := make([]*Result, len(prompts))
			errs := make([]error, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Go(func() { got[i], errs[i] = e.Generate(context.Background(), p, opt, nil) })
			}
			wg.Wait()
			for i := range prompts {
				if errs[i] != nil {
					t.Fatalf("%q: %v", prompts[i], errs[i])
				}
				if got[i].Text != want[i] || got[i].KV.Bytes() == 0 {
					t.Errorf("%q: concurrent %q (KV %d bytes), solo %q", prompts[i], got[i].Text, got[i].KV.Bytes(), want[i])
				}
			}
			st := e.Stats()
			if st.PeakRunning < 2 || st.Running != 0 || st.Waiting != 0 || st.Reserved != 0 || st.Pool.Referenced != 0 {
				t.Errorf("stats after the calls: %+v; want a peak of 2 or more and nothing held", st)
			}
		})
	}
}

// Cancelling a streaming Generate ends it with ctx's error and the text so
// far, and its blocks are free when it returns.
func TestGenerateCancelFreesBlocks(t *testing.T) {
	e := loadStoriesEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pieces := 0
	res, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 200}, func(string) error {
		if pieces++; pieces == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || res == nil || res.Text == "" || res.GeneratedTokens >= 200 {
		t.Fatalf("cancelled Generate: %v, %+v; want context.Canceled with the partial result", err, res)
	}
	if st := e.Stats(); st.Running != 0 || st.Reserved != 0 || st.Pool.Referenced != 0 || st.Pool.Used != st.Pool.CachedBytes {
		t.Errorf("after the cancelled Generate returned: %+v; want no block referenced", st)
	}
}

// The KV memory bounds the longest sequence: a prompt it cannot hold fails
// at once naming it, and generation stops with StopContext when it is full.
func TestKVMemoryBoundsSequences(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	// stories260K: 5 layers, 4 KV heads of 8, bf16: 640 bytes per token,
	// so 64 KiB hold 102 tokens, 96 in whole 16-token blocks.
	e, err := Load(context.Background(), dir, Options{Threads: 1, KVMemory: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	maxTok := e.MaxTokens()
	if maxTok != 96 {
		t.Fatalf("MaxTokens = %d with 64 KiB of KV memory, want 96", maxTok)
	}
	long := strings.Repeat("a b c d ", maxTok)
	if _, err := e.Generate(context.Background(), long, GenerateOptions{MaxTokens: 1}, nil); err == nil || !strings.Contains(err.Error(), "KV memory") {
		t.Errorf("a prompt beyond the KV memory: %v, want an error naming the KV memory", err)
	}
	res, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: 10 * maxTok}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopContext && res.StopReason != StopEOS {
		t.Errorf("stop %q after %d+%d tokens, want %q (or EOS first)", res.StopReason, res.PromptTokens, res.GeneratedTokens, StopContext)
	}
	if res.StopReason == StopContext && res.PromptTokens+res.GeneratedTokens != maxTok {
		t.Errorf("stopped for the context at %d+%d tokens, want %d in all", res.PromptTokens, res.GeneratedTokens, maxTok)
	}
	if _, err := Load(context.Background(), dir, Options{KVMemory: -1}); err == nil || !strings.Contains(err.Error(), "KV memory") {
		t.Errorf("Load with KVMemory -1: %v", err)
	}
}
