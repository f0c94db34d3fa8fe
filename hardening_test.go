package kakeya

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"

	"github.com/kakeya-ai/kakeya/pick"
)

// writeByteTokenizer writes a byte-level tokenizer.json whose 256 tokens
// are the bytes, id = byte value, so a testmodel checkpoint (vocab 256)
// can run in an Engine.
func writeByteTokenizer(t testing.TB, dir string) {
	t.Helper()
	vocab := make(map[string]int, 256)
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !('!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	doc := map[string]any{
		"version": "1.0", "added_tokens": []any{}, "normalizer": nil, "post_processor": nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tinyEngineDir writes spec with a byte tokenizer, after edit (if not nil)
// has changed its tensors.
func tinyEngineDir(t testing.TB, spec testmodel.Spec, edit func(name string, data []byte)) string {
	t.Helper()
	dir := t.TempDir()
	if err := testmodel.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	writeByteTokenizer(t, dir)
	if edit == nil {
		return dir
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ts []weights.Tensor
	for _, name := range st.Names() {
		tn, err := st.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		c := *tn
		c.Data = slices.Clone(tn.Data)
		edit(name, c.Data)
		ts = append(ts, c)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := weights.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadEngine(t testing.TB, dir string, opt Options) *Engine {
	t.Helper()
	e, err := Load(context.Background(), dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestClosedEngine: after Close every method that returns an error returns
// one matching ErrClosed, whether on the engine, its model or a sequence
// made before; the others stay harmless; Close twice is fine.
func TestClosedEngine(t *testing.T) {
	e := loadStoriesEngine(t)
	m := e.Model()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seq.Forward([]int{1, 2}, false); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	calls := []struct {
		name string
		call func() error
	}{
		{"Engine.Generate", func() error {
			res, err := e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 5}, nil)
			if res != nil {
				return fmt.Errorf("result %+v", res)
			}
			return err
		}},
		{"Engine.PromptIDs", func() error { _, err := e.PromptIDs("Once", GenerateOptions{}); return err }},
		{"Engine.Logits", func() error { _, _, err := e.Logits(ctx, "Once", GenerateOptions{}); return err }},
		{"Model.Logits", func() error { _, err := m.Logits([]int{1, 2}); return err }},
		{"Model.NewSequence", func() error { _, err := m.NewSequence(); return err }},
		{"Model.NewSequenceOpts", func() error { _, err := m.NewSequenceOpts(model.SequenceOptions{BlockSize: 8}); return err }},
		{"Sequence.Forward of the closed model", func() error { _, err := seq.Forward([]int{3}, false); return err }},
		{"Model.Close", func() error {
			if err := m.Close(); err != nil {
				return fmt.Errorf("Close: %v", err)
			}
			return ErrClosed
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("error %v, want one matching ErrClosed", err)
			}
		})
	}
	if got := seq.Len(); got != 2 {
		t.Errorf("Len of a sequence of the closed model = %d, want 2", got)
	}
	seq.Reset()
	seq.Close()
	seq.Close()
	if _, err := seq.Forward([]int{3}, false); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "sequence is closed") {
		t.Errorf("Forward of a closed sequence: %v", err)
	}
	if m.Config().VocabSize != 512 || m.MaxContext() != 512 || len(m.InvFreq()) != 4 || e.Dir() == "" || e.Kernels() == "" {
		t.Error("a method without an error misbehaves after Close")
	}
}

// TestGenerateRacingClose (meant for -race): Close while generations run
// waits for their forward passes; each generation either completes or ends
// with ErrClosed and the partial result, and nothing crashes.
func TestGenerateRacingClose(t *testing.T) {
	const full = 40
	want := func() string {
		e := loadStoriesEngine(t)
		res, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: full}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}()
	closedMidway := 0
	for round, delay := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, time.Second} {
		e := loadStoriesEngine(t)
		var wg sync.WaitGroup
		errs := make([]error, 3)
		results := make([]*Result, 3)
		for i := range errs {
			wg.Go(func() {
				results[i], errs[i] = e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: full}, nil)
			})
		}
		time.Sleep(delay)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, err := range errs {
			res := results[i]
			switch {
			case err == nil:
				if res.Text != want || res.GeneratedTokens != full {
					t.Errorf("round %d: completed generation %q (%d tokens), want %q", round, res.Text, res.GeneratedTokens, want)
				}
			case !errors.Is(err, ErrClosed):
				t.Errorf("round %d: error %v, want nil or ErrClosed", round, err)
			case res != nil:
				closedMidway++
				if !strings.HasPrefix(want, res.Text) || res.GeneratedTokens >= full || res.StopReason != "" {
					t.Errorf("round %d: partial result %q (%d tokens, stop %q) is not a prefix of %q", round, res.Text, res.GeneratedTokens, res.StopReason, want)
				}
			}
		}
	}
	t.Logf("%d generations were cut short by Close", closedMidway)
}

// TestGenerateErrorReturnsPartial: cancellation and an onText error end
// generation with the error and the result so far.
func TestGenerateErrorReturnsPartial(t *testing.T) {
	e := loadStoriesEngine(t)
	const prompt = "Once upon a time"
	full, err := e.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		onText  func(n int, cancel context.CancelFunc) error
		wantErr error
	}{
		{"cancelled after 3 pieces", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(n int, cancel context.CancelFunc) error {
				if n == 3 {
					cancel()
				}
				return nil
			}, context.Canceled},
		{"onText fails at piece 4", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(n int, _ context.CancelFunc) error {
				if n == 4 {
					return stop
				}
				return nil
			}, stop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			var streamed strings.Builder
			n := 0
			res, err := e.Generate(ctx, prompt, GenerateOptions{MaxTokens: 30}, func(s string) error {
				streamed.WriteString(s)
				n++
				return tt.onText(n, cancel)
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if res == nil {
				t.Fatal("no partial result")
			}
			if res.Text != streamed.String() || res.Text == "" || !strings.HasPrefix(full.Text, res.Text) || len(res.Text) >= len(full.Text) {
				t.Errorf("partial text %q (streamed %q), want a proper prefix of %q", res.Text, streamed.String(), full.Text)
			}
			if res.PromptTokens != full.PromptTokens || res.GeneratedTokens < n || res.GeneratedTokens >= 30 {
				t.Errorf("prompt %d, generated %d tokens after %d pieces; want prompt %d and fewer than 30 generated", res.PromptTokens, res.GeneratedTokens, n, full.PromptTokens)
			}
			if res.StopReason != "" || res.Prefill <= 0 || res.Decode <= 0 || res.KV.Bytes() <= 0 || res.Kernels != cpu.Features()+f32Suffix {
				t.Errorf("partial result %+v: want no stop reason, timings, KV stats and kernels", res)
			}
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := e.Generate(ctx, prompt, GenerateOptions{}, nil); !errors.Is(err, context.Canceled) || res != nil {
		t.Errorf("cancelled before the start: %+v, %v; want nil, context.Canceled", res, err)
	}
}

// TestEngineLogits: Engine.Logits tokenizes like Generate and matches
// Model.Logits; its last row gives greedy generation's first token.
func TestEngineLogits(t *testing.T) {
	e := loadStoriesEngine(t)
	const prompt = "Once upon a time, there was"
	ids, rows, err := e.Logits(context.Background(), prompt, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, err := e.PromptIDs(prompt, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, wantIDs) || ids[0] != 1 {
		t.Fatalf("ids %v, want %v (BOS 1 first)", ids, wantIDs)
	}
	want, err := e.Model().Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(ids) {
		t.Fatalf("%d rows for %d ids", len(rows), len(ids))
	}
	for i := range rows {
		if len(rows[i]) != 512 || !slices.Equal(rows[i], want[i]) {
			t.Fatalf("row %d differs from Model.Logits", i)
		}
	}
	res, err := e.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if next := e.tok.Decode([]int{pick.ArgMax(rows[len(rows)-1])}, true); res.Text != next {
		t.Errorf("arg max of the last row decodes to %q, greedy Generate gives %q", next, res.Text)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		opt  GenerateOptions
		want string
	}{
		{"cancelled", ctx, GenerateOptions{}, "context canceled"},
		{"no chat template", context.Background(), GenerateOptions{Chat: true}, "chat"},
		{"system without chat", context.Background(), GenerateOptions{System: "Be brief."}, "kakeya: GenerateOptions.System needs Chat"},
	} {
		if _, _, err := e.Logits(tc.ctx, prompt, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestGenerateNonFiniteLogits: NaN or Inf in the weights fails at the
// prompt with an error naming the value, the token id and the directory,
// instead of sampling garbage.
func TestGenerateNonFiniteLogits(t *testing.T) {
	put := func(data []byte, i int, v float32) {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	h := testmodel.Qwen3Tiny.Hidden
	tests := []struct {
		name   string
		tensor string
		index  int
		value  float32
		want   []string
	}{
		// The final norm's NaN reaches every logit: the first is id 0.
		{"NaN in the final norm", "model.norm.weight", 3, float32(math.NaN()), []string{"(NaN at token id 0)"}},
		// Inf in the (tied) output row of token 17 makes its logit infinite.
		{"Inf in an output row", "model.embed_tokens.weight", 17 * h, float32(math.Inf(1)), []string{"Inf at token id 17)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tinyEngineDir(t, testmodel.Qwen3Tiny, func(name string, data []byte) {
				if name == tt.tensor {
					put(data, tt.index, tt.value)
				}
			})
			e := loadEngine(t, dir, Options{Threads: 1})
			var streamed strings.Builder
			res, err := e.Generate(context.Background(), "hi", GenerateOptions{MaxTokens: 5}, func(s string) error {
				streamed.WriteString(s)
				return nil
			})
			if err == nil {
				t.Fatalf("no error; generated %q", res.Text)
			}
			for _, w := range append(tt.want, "non-finite logits after the prompt", dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if res == nil || res.GeneratedTokens != 0 || streamed.Len() != 0 {
				t.Errorf("result %+v, streamed %q: want an empty partial result", res, streamed.String())
			}
		})
	}

	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	if res, err := e.Generate(context.Background(), "hi", GenerateOptions{MaxTokens: 5}, nil); err != nil || res.GeneratedTokens+len(res.StopReason) == 0 {
		t.Errorf("unmodified checkpoint: %+v, %v", res, err)
	}
}

// TestStopReasons: MaxTokens reached is StopLength, a full context
// StopContext.
func TestStopReasons(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	e := loadEngine(t, dir, Options{Threads: 2, MaxContext: 24})
	ids, err := e.PromptIDs("Once upon a time", GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	room := 24 - len(ids)
	tests := []struct {
		maxTokens int
		want      string
		generated int
	}{
		{0, StopContext, room},
		{5, StopLength, 5},
		{room, StopLength, room},
		{room + 1, StopContext, room},
	}
	for _, tt := range tests {
		res, err := e.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: tt.maxTokens}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != tt.want || res.GeneratedTokens != tt.generated {
			t.Errorf("MaxTokens %d: stop %q after %d tokens, want %q after %d", tt.maxTokens, res.StopReason, res.GeneratedTokens, tt.want, tt.generated)
		}
	}
}

// TestGenerateOptionValidation: generation options the library must refuse
// itself, with errors naming the value and the bound.
func TestGenerateOptionValidation(t *testing.T) {
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	nan := float32(math.NaN())
	gens := []struct {
		name string
		opt  GenerateOptions
		want string
	}{
		{"empty stop string", GenerateOptions{Stop: []string{"x", ""}}, "stop string 2 of 2 is empty"},
		{"negative repetition penalty", GenerateOptions{Sampling: SamplingOptions{RepetitionPenalty: -1}}, "repetition penalty -1 must be > 0"},
		{"NaN repetition penalty", GenerateOptions{Sampling: SamplingOptions{RepetitionPenalty: nan}}, "repetition penalty NaN"},
		{"infinite repetition penalty", GenerateOptions{Sampling: SamplingOptions{RepetitionPenalty: float32(math.Inf(1))}}, "repetition penalty +Inf"},
		{"infinite temperature", GenerateOptions{Sampling: SamplingOptions{Temperature: float32(math.Inf(1))}}, "temperature +Inf"},
	}
	for _, tt := range gens {
		res, err := e.Generate(context.Background(), "hi", tt.opt, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || res != nil {
			t.Errorf("%s: %v, %v; want no result and an error containing %q", tt.name, res, err, tt.want)
		}
	}
}

// f32Suffix ends the CPU backend's description for a model of f32 weights.
const f32Suffix = "; matmuls: f32 weights x f32 activations"

// TestKernels: the engine reports the kernels this process runs and the
// matrix products its weights really get.
func TestKernels(t *testing.T) {
	for _, tc := range []struct {
		spec   testmodel.Spec
		matmul string
		suffix string
	}{
		{testmodel.Qwen2Tiny, "", "; matmuls: bf16 weights x bf16 activations"},
		{testmodel.Qwen2Tiny, "f32", "; matmuls: bf16 weights x f32 activations"},
		{testmodel.Llama3Tiny, "", "; matmuls: f16 weights x f32 activations"},
	} {
		e := loadEngine(t, tinyEngineDir(t, tc.spec, nil), Options{Threads: 1, MatMul: tc.matmul})
		if got := e.Kernels(); got != cpu.Features()+tc.suffix {
			t.Errorf("%s weights, matmul %q: Kernels() = %q, want %q", tc.spec.DType, tc.matmul, got, cpu.Features()+tc.suffix)
		}
	}
	e := loadEngine(t, tinyEngineDir(t, testmodel.Qwen3Tiny, nil), Options{Threads: 1})
	got, ok := strings.CutSuffix(e.Kernels(), f32Suffix)
	if v := os.Getenv(cpu.EnvCPU); v != "" {
		// A capped run (TestKernelLevels' children, or a user's) says so.
		got = strings.TrimSuffix(got, " ["+cpu.EnvCPU+"="+v+"]")
	}
	if want := wantKernels(); !ok || !slices.Contains(want, got) {
		t.Fatalf("Kernels() = %q, want one of %q followed by %q", e.Kernels(), want, f32Suffix)
	}
	got = e.Kernels()
	res, err := e.Generate(context.Background(), "hi", GenerateOptions{MaxTokens: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kernels != got {
		t.Errorf("Result.Kernels = %q, want %q", res.Kernels, got)
	}
}
