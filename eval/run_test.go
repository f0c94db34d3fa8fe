package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

const fakeVocab = 7

// fakeLogits is a deterministic stand-in for a model: the row after
// history depends on every token of it and on the position.
func fakeLogits(history []int, noise float64) []float32 {
	s := 0
	for i, t := range history {
		s += (i + 1) * t
	}
	p := len(history)
	row := make([]float32, fakeVocab)
	for v := range row {
		row[v] = float32(3*math.Sin(float64(v)*1.3+float64(s)*0.7+float64(p)*0.1) + noise*math.Cos(float64(v+p)))
	}
	return row
}

type fakeEngine struct {
	mu    sync.Mutex
	calls map[string][]string // per config: "prefill n" / "chunk n" log
	fail  string              // config name whose Forward fails
}

func (e *fakeEngine) Vocab() int { return fakeVocab }

func (e *fakeEngine) NewSequence(c Config) (Sequence, error) {
	noise := 0.0
	switch c.Spec.KV {
	case "", "same":
	default:
		fmt.Sscanf(c.Spec.KV, "noise%g", &noise)
	}
	return &fakeSeq{e: e, c: c, noise: noise}, nil
}

type fakeSeq struct {
	e     *fakeEngine
	c     Config
	noise float64
	hist  []int
	out   []float32
}

func (s *fakeSeq) Forward(ids []int, all bool) ([]float32, error) {
	if s.c.Name == s.e.fail {
		return nil, errors.New("boom")
	}
	s.e.mu.Lock()
	if s.e.calls != nil {
		s.e.calls[s.c.Name] = append(s.e.calls[s.c.Name], fmt.Sprintf("%d+%d %v", len(s.hist), len(ids), all))
	}
	s.e.mu.Unlock()
	s.out = s.out[:0]
	for _, id := range ids {
		s.hist = append(s.hist, id)
		if all {
			s.out = append(s.out, fakeLogits(s.hist, s.noise)...)
		}
	}
	if !all {
		s.out = append(s.out, fakeLogits(s.hist, s.noise)...)
	}
	return s.out, nil
}

func (s *fakeSeq) KV() KVUsage {
	n := int64(len(s.hist)) * 4 // 4 values per token per side
	if s.c.Spec.KV == "" {
		return KVUsage{K: 4 * n, V: 4 * n, BF16: 4 * n}
	}
	// Half of it encoded at 4x against bf16.
	return KVUsage{K: n / 2, V: n, BF16: 4 * n, Encoded: n / 2, EncodedBF16: 2 * n}
}

func (s *fakeSeq) Close() error { return nil }

// bruteStats scores units directly from fakeLogits.
func bruteStats(units []Unit, noise float64) Stats {
	var st Stats
	var sc Scorer
	for _, u := range units {
		for i := u.Score; i < len(u.Tokens); i++ {
			ref := fakeLogits(u.Tokens[:i], 0)
			alt := fakeLogits(u.Tokens[:i], noise)
			if noise == 0 {
				alt = ref
			}
			if err := sc.Score(&st, ref, alt, u.Tokens[i]); err != nil {
				panic(err)
			}
		}
	}
	return st
}

func testUnits() []Unit {
	ids := make([]int, 200)
	for i := range ids {
		ids[i] = (i*i + 3*i) % fakeVocab
	}
	us, err := PassageUnits(ids, 12, 5, 0, 1)
	if err != nil {
		panic(err)
	}
	return us
}

func TestRunMatchesBruteForce(t *testing.T) {
	units := testUnits()
	configs := []Config{Reference(), {Name: "same", Spec: kvconfig.Spec{KV: "same"}}, {Name: "noisy", Spec: kvconfig.Spec{KV: "noise0.5"}}}
	for _, opt := range []Options{{}, {Chunk: 3}, {Workers: 3}, {Chunk: 64, Workers: 2}} {
		t.Run(fmt.Sprintf("chunk%d-workers%d", opt.Chunk, opt.Workers), func(t *testing.T) {
			res, err := Run(context.Background(), &fakeEngine{}, units, configs, opt)
			if err != nil {
				t.Fatal(err)
			}
			ref, same, noisy := res.Totals[0], res.Totals[1], res.Totals[2]
			if ref.N != len(units)*5 {
				t.Errorf("reference scored %d tokens, want %d", ref.N, len(units)*5)
			}
			if want := bruteStats(units, 0); !near(ref.NLL, want.NLL, 1e-9) || ref.N != want.N || ref.KL != 0 || ref.Top1 != ref.N {
				t.Errorf("reference totals %+v, want %+v", ref, want)
			}
			// A configuration identical to the reference: ΔPPL 0, KL 0, top-1 100%.
			if same != ref || DeltaPPL(ref.PPL(), same.PPL()) != 0 || same.MeanKL() != 0 || same.Top1Rate() != 100 {
				t.Errorf("identical configuration totals %+v, reference %+v", same, ref)
			}
			want := bruteStats(units, 0.5)
			if !near(noisy.NLL, want.NLL, 1e-9) || !near(noisy.KL, want.KL, 1e-9) || noisy.Top1 != want.Top1 || noisy.KL <= 0 {
				t.Errorf("noisy totals %+v, want %+v", noisy, want)
			}
			// Passage rows sum to the totals.
			var sum Stats
			for _, u := range res.Units {
				sum.Add(u.Stats[2])
			}
			if sum != noisy {
				t.Errorf("passage rows sum to %+v, totals %+v", sum, noisy)
			}
			kv := res.KV[2]
			if kv.KBits() != 4 || kv.VBits() != 8 || kv.Ratio() != 4/1.5 || kv.CodecRatio() != 4 {
				t.Errorf("noisy KV %+v: K bits %v, V bits %v, ratio %v, codec ratio %v", kv, kv.KBits(), kv.VBits(), kv.Ratio(), kv.CodecRatio())
			}
			if r := res.KV[0].CodecRatio(); r != 0 {
				t.Errorf("reference codec ratio %v, want 0 (nothing encoded)", r)
			}
		})
	}
}

func TestRunFeedSchedule(t *testing.T) {
	units := []Unit{{Tokens: []int{1, 2, 3, 4, 5, 6, 0}, Score: 3}}
	tests := []struct {
		chunk int
		want  []string
	}{
		// prefill 3 (last row only), then decode tokens 3,4,5 one by one
		{1, []string{"0+3 false", "3+1 true", "4+1 true", "5+1 true"}},
		{2, []string{"0+3 false", "3+2 true", "5+1 true"}},
		{9, []string{"0+3 false", "3+3 true"}},
	}
	for _, tt := range tests {
		e := &fakeEngine{calls: map[string][]string{}}
		if _, err := Run(context.Background(), e, units, []Config{Reference()}, Options{Chunk: tt.chunk}); err != nil {
			t.Fatal(err)
		}
		if got := e.calls["ref"]; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("chunk %d: calls %q, want %q", tt.chunk, got, tt.want)
		}
	}
}

func TestRunErrors(t *testing.T) {
	units := testUnits()
	e := &fakeEngine{}
	ctx := context.Background()
	if _, err := Run(ctx, e, units, []Config{{Name: "x", Spec: kvconfig.Spec{KV: "int4"}}}, Options{}); err == nil {
		t.Error("first configuration not the reference: want an error")
	}
	if _, err := Run(ctx, e, nil, []Config{Reference()}, Options{}); err == nil {
		t.Error("no units: want an error")
	}
	if _, err := Run(ctx, e, []Unit{{Tokens: []int{1, 9}, Score: 1}}, []Config{Reference()}, Options{}); err == nil {
		t.Error("token outside vocabulary: want an error")
	}
	if _, err := Run(ctx, e, []Unit{{Tokens: []int{1, 2}, Score: 2}}, []Config{Reference()}, Options{}); err == nil {
		t.Error("nothing scored in a unit: want an error")
	}
	if _, err := Run(ctx, &fakeEngine{fail: "bad"}, units, []Config{Reference(), {Name: "bad", Spec: kvconfig.Spec{KV: "x"}}}, Options{Workers: 2}); err == nil {
		t.Error("failing Forward: want an error")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Run(cctx, e, units, []Config{Reference()}, Options{Workers: 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v, want context.Canceled", err)
	}
	// Cancelled half way through, from the progress callback.
	cctx, cancel = context.WithCancel(ctx)
	defer cancel()
	_, err := Run(cctx, e, units, []Config{Reference()}, Options{Progress: func(done, _ int) {
		if done == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled mid-run: err = %v, want context.Canceled", err)
	}
}
