package kakeya

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"

	"github.com/kakeya-ai/kakeya/pick"
)

func loadStoriesEngine(t *testing.T) *Engine {
	t.Helper()
	dir := shareddata.File(t, "models", "stories260K")
	// A float32 cache keeps the engine's logits those of Model.Logits.
	e, err := Load(context.Background(), dir, Options{Threads: 2, Cache: kvconfig.Spec{CacheType: "f32"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestGenerateGreedyMatchesArgmax checks that greedy generation is the arg max
// of the model's own logits at every step, and that the streamed pieces add
// up to the decoded ids.
func TestGenerateGreedyMatchesArgmax(t *testing.T) {
	e := loadStoriesEngine(t)
	const prompt = "Once upon a time"
	var streamed strings.Builder
	res, err := e.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 30}, func(s string) error {
		streamed.WriteString(s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != streamed.String() {
		t.Fatalf("result text %q differs from the streamed text %q", res.Text, streamed.String())
	}
	if res.GeneratedTokens != 30 || res.StopReason != StopLength {
		t.Fatalf("generated %d tokens, stop %q; want 30, %q", res.GeneratedTokens, res.StopReason, StopLength)
	}

	ids := e.tok.Encode(prompt, true)
	if res.PromptTokens != len(ids) {
		t.Fatalf("prompt tokens %d, want %d", res.PromptTokens, len(ids))
	}
	start := len(ids)
	for range 30 {
		rows, err := e.Model().Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, pick.ArgMax(rows[len(rows)-1]))
	}
	want := e.tok.Decode(ids[start:], true)
	if res.Text != want {
		t.Fatalf("greedy text\n%q\nwant (arg max of Logits)\n%q", res.Text, want)
	}
}

func TestGenerateStops(t *testing.T) {
	e := loadStoriesEngine(t)
	ctx := context.Background()

	full, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(full.Text, "Lily")
	if i < 0 {
		t.Fatalf("greedy continuation %q has no %q to stop at", full.Text, "Lily")
	}
	res, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 40, Stop: []string{"Lily"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopString || res.Text != full.Text[:i] {
		t.Fatalf("with stop string: %q (%s), want %q (%s)", res.Text, res.StopReason, full.Text[:i], StopString)
	}

	// Long enough runs end on EOS (id 2) once a story is finished.
	res, err = e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 400}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopEOS && res.GeneratedTokens != 400 {
		t.Fatalf("stopped for %q after %d tokens", res.StopReason, res.GeneratedTokens)
	}
}

func TestGenerateSeeded(t *testing.T) {
	e := loadStoriesEngine(t)
	opt := GenerateOptions{MaxTokens: 40, Sampling: SamplingOptions{Temperature: 1, TopK: 40, TopP: 0.95, Seed: 42}}
	a, err := e.Generate(context.Background(), "Once upon a time", opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Generate(context.Background(), "Once upon a time", opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Text != b.Text {
		t.Fatalf("same seed, different text:\n%q\n%q", a.Text, b.Text)
	}
}

func TestGenerateErrors(t *testing.T) {
	e := loadStoriesEngine(t)
	long := strings.Repeat("Once upon a time there was a girl. ", 80)
	tests := []struct {
		name   string
		prompt string
		opt    GenerateOptions
		want   string
	}{
		{"prompt longer than the context", long, GenerateOptions{}, "more than the context of 512, the most this model allows: shorten the prompt"},
		{"negative max tokens", "hi", GenerateOptions{MaxTokens: -1}, "max tokens"},
		{"bad temperature", "hi", GenerateOptions{Sampling: SamplingOptions{Temperature: -1}}, "temperature"},
		{"no chat template", "hi", GenerateOptions{Chat: true}, "chat"},
		{"system without chat", "hi", GenerateOptions{System: "Be brief."},
			"kakeya: GenerateOptions.System needs Chat: the system message goes into the chat template (set Chat, or leave System empty)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Generate(context.Background(), tt.prompt, tt.opt, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestGenerateCancel(t *testing.T) {
	e := loadStoriesEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 100}, func(string) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	stop := errors.New("enough")
	_, err = e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: 100}, func(string) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("error %v, want the callback's error", err)
	}
}

// Options.Cache sets the cache of every sequence the engine runs,
// with the tools' defaults; the zero value is a bf16 cache.
func TestEngineCache(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	for _, tt := range []struct {
		spec       kvconfig.Spec
		settings   string
		compressed bool
	}{
		{kvconfig.Spec{}, "uncompressed bf16, block 16", false},
		{kvconfig.Spec{KV: "int8", BlockSize: 16}, "k=int8 v=int8 block 16, hot 16, boundary 0;4, bf16 hot blocks", true},
	} {
		e, err := Load(context.Background(), dir, Options{Threads: 2, Cache: tt.spec})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.CacheSettings().String(); got != tt.settings {
			t.Errorf("%+v: settings %q, want %q", tt.spec, got, tt.settings)
		}
		res, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: 60}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if (res.KV.Compressed > 0) != tt.compressed || res.KV.Tokens != res.PromptTokens+res.GeneratedTokens-1 {
			t.Errorf("%+v: KV stats %+v", tt.spec, res.KV)
		}
		e.Close()
	}
	cpu := cpubackend.New(1)
	defer cpu.Close()
	for _, tt := range []struct {
		opt Options
		err string
	}{
		// The library names the Spec's fields, not the tools' flags.
		{Options{Cache: kvconfig.Spec{KV: "int5"}}, `kakeya: cache: Spec.KV "int5": codec: unknown codec "int5"`},
		{Options{Backend: cpu, Threads: 2}, "Threads and MatMul apply to the default CPU backend, not to a given one (cpu)"},
		{Options{Threads: -1}, "kakeya: cpu: -1 threads"},
		{Options{MatMul: "fp16"}, `"fp16"`},
		{Options{Cache: kvconfig.Spec{KV: "int8", Boundary: "9"}}, `kakeya: cache: Spec.Boundary "9": layer 9 outside a model of 5 layers`},
		{Options{Cache: kvconfig.Spec{KV: "int8"}, Calibration: filepath.Join(dir, "missing.safetensors")}, "kakeya: calibration: "},
	} {
		if _, err := Load(context.Background(), dir, tt.opt); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%+v: err = %v, want %q", tt.opt, err, tt.err)
		}
	}
	// A hot window (or sinks) covering the whole context compresses
	// nothing: the engine loads, and its settings carry the warning.
	for _, tt := range []struct {
		spec kvconfig.Spec
		want string
	}{
		{kvconfig.Spec{KV: "int8"}, ""},
		{kvconfig.Spec{KV: "int8", HotWindow: 448}, ""}, // one block of 64 + 448 = 512 tokens, the context
		{kvconfig.Spec{KV: "int8", HotWindow: 449}, "nothing will be compressed: with Spec.HotWindow 449, Spec.Sinks 0 and 64-token blocks the first block is encoded once a sequence holds 513 tokens, and sequences here hold at most 512; lower Spec.HotWindow or Spec.Sinks (or Spec.BlockSize)"},
		{kvconfig.Spec{KV: "int8", HotWindow: 512}, "with Spec.HotWindow 512, Spec.Sinks 0 and 64-token blocks the first block is encoded once a sequence holds 576 tokens"},
		{kvconfig.Spec{KV: "int8", Sinks: 1000}, "nothing will be compressed: with Spec.HotWindow 64, Spec.Sinks 1000 and 64-token blocks the first block is encoded once a sequence holds 1152 tokens"},
	} {
		e, err := Load(context.Background(), dir, Options{Threads: 2, Cache: tt.spec})
		if err != nil {
			t.Fatal(err)
		}
		werr := e.CacheSettings().Warning
		e.Close()
		w := ""
		if werr != nil {
			w = werr.Error()
		}
		if tt.want == "" && w != "" || !strings.Contains(w, tt.want) {
			t.Errorf("%+v: warning %q, want %q", tt.spec, w, tt.want)
		}
	}
}

// generation_config.json's eos ids stop generation as config.json's do
// (transformers' generate stops on them).
func TestGenerationConfigEOS(t *testing.T) {
	dir := tinyEngineDir(t, testmodel.Qwen3Tiny, nil)
	e := loadEngine(t, dir, Options{Threads: 1})
	greedy := GenerateOptions{MaxTokens: 4, Sampling: SamplingOptions{Temperature: 0}}
	ids, err := e.PromptIDs("hi", greedy)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Generate(context.Background(), "hi", greedy, nil)
	if err != nil || res.StopReason != StopLength || res.GeneratedTokens != 4 {
		t.Fatalf("without: %+v, %v", res, err)
	}
	_, logits, err := e.Logits(context.Background(), "hi", greedy)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Index(logits[len(ids)-1], slices.Max(logits[len(ids)-1])) // greedy's first token
	gen := fmt.Sprintf(`{"bos_token_id": 1, "eos_token_id": [2, %d]}`, first)
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	e = loadEngine(t, dir, Options{Threads: 1})
	res, err = e.Generate(context.Background(), "hi", greedy, nil)
	if err != nil || res.StopReason != StopEOS || res.GeneratedTokens != 0 {
		t.Errorf("eos %d in generation_config.json: %+v, %v; want a stop at eos before any token", first, res, err)
	}
}

// GenerateIDs continues the ids PromptIDs returned exactly as Generate
// continues the prompt, and rejects ids outside the vocabulary (and the
// options Generate rejects) before running.
func TestGenerateIDs(t *testing.T) {
	e := loadStoriesEngine(t)
	ctx := context.Background()
	opt := GenerateOptions{MaxTokens: 12}
	want, err := e.Generate(ctx, "Once upon a time", opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := e.PromptIDs("Once upon a time", opt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.GenerateIDs(ctx, ids, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != want.Text || got.PromptTokens != want.PromptTokens || got.GeneratedTokens != want.GeneratedTokens {
		t.Errorf("GenerateIDs: %q (%d+%d tokens), Generate: %q (%d+%d)", got.Text, got.PromptTokens, got.GeneratedTokens, want.Text, want.PromptTokens, want.GeneratedTokens)
	}
	v := e.Model().Config().VocabSize
	for _, tc := range []struct {
		ids  []int
		opt  GenerateOptions
		want string
	}{
		{[]int{1, v}, opt, fmt.Sprintf("prompt token 1 is id %d, outside the vocabulary of %d", v, v)},
		{[]int{-1}, opt, "prompt token 0 is id -1"},
		{nil, opt, "empty prompt"},
		{ids, GenerateOptions{MaxTokens: -1}, "max tokens -1"},
	} {
		if _, err := e.GenerateIDs(ctx, tc.ids, tc.opt, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GenerateIDs(%v): %v, want an error saying %q", tc.ids, err, tc.want)
		}
	}
}
