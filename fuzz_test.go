package kakeya

import (
	"context"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// fuzzCodecs are the KV caches FuzzLoadSettings picks from: none needs a
// calibration, so a Load stays in milliseconds.
var fuzzCodecs = []string{"", "int8", "int4", "fp8", "kivi"}

// FuzzLoadSettings: no combination of the settings Load takes (context,
// block size, hot window, sinks, KV memory, codec, batching) panics: Load
// either returns an error or an engine that generates a token or fails
// with an error. A sliding-window model (MistralTiny) and a Qwen3 one are
// both loaded. Its seeds, which run in make test, are the cases that
// panicked once (--ctx 1) and the edges around them; go test -fuzz
// FuzzLoadSettings searches further.
func FuzzLoadSettings(f *testing.F) {
	for _, s := range []struct {
		ctx, block, hot, sinks int
		memory                 int64
		codec, steps, running  uint8
		mistral                bool
	}{
		{ctx: 1},           // scheduler.New built its error with cost(2) past the peaks
		{ctx: 1, block: 1}, // the same with an explicit block
		{ctx: 2, block: 2, memory: 1},
		{ctx: 2, block: 1, memory: 1 << 20},
		{ctx: 3, block: 4}, // a block past the context
		{ctx: 16, block: 16, hot: -1, sinks: 16, codec: 1},
		{ctx: 64, block: 7, hot: 3, sinks: 1000, codec: 2, mistral: true},
		{ctx: 512, block: 512, codec: 3, memory: 4096},
		{ctx: 513}, // past max_position_embeddings
		{ctx: -1},
		{block: -1},
		{memory: -1},
		{ctx: 32, steps: 1, running: 2},
		{ctx: 32, hot: 1 << 30, sinks: -5, codec: 4},
		{ctx: 1 << 40, block: 1 << 40, memory: 1 << 62},
	} {
		f.Add(s.ctx, s.block, s.hot, s.sinks, s.memory, s.codec, s.steps, s.running, s.mistral)
	}
	qwen, mistral := tinyEngineDir(f, testmodel.Qwen3Tiny, nil), tinyEngineDir(f, testmodel.MistralTiny, nil)
	f.Fuzz(func(t *testing.T, ctx, block, hot, sinks int, memory int64, codec, steps, running uint8, useMistral bool) {
		dir := qwen
		if useMistral {
			dir = mistral
		}
		opt := Options{
			Threads:    1,
			MaxContext: ctx,
			Cache: kvconfig.Spec{
				KV: fuzzCodecs[int(codec)%len(fuzzCodecs)], BlockSize: block, HotWindow: hot, Sinks: sinks,
			},
			KVMemory: memory,
			Serving:  ServingOptions{StepTokens: int(steps), MaxRunning: int(running)},
		}
		if memory == 0 {
			opt.KVMemory = 64 << 20 // not half the machine's memory
		}
		e, err := Load(context.Background(), dir, opt)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("Load returned an empty error")
			}
			return
		}
		defer e.Close()
		if _, err := e.Generate(context.Background(), "ab", GenerateOptions{MaxTokens: 2}, nil); err != nil && err.Error() == "" {
			t.Fatal("Generate returned an empty error")
		}
	})
}
