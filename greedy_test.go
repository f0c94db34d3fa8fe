package kakeya

import (
	"context"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/pick"
)

// pickingBackend is the CPU backend with compute.Greedy done on the host:
// a stand-in for a device that picks greedy tokens, counting the rows it
// picked.
type pickingBackend struct {
	compute.Backend
	rows int
	row  []float32
}

func (p *pickingBackend) ArgMax(ids, bad []int, x compute.Buffer, cols int) {
	p.rows += len(ids)
	if len(p.row) < cols {
		p.row = make([]float32, cols)
	}
	for i := range ids {
		p.Read(p.row[:cols], x.Slice(i*cols, (i+1)*cols))
		ids[i], bad[i] = -1, -1
		for j, v := range p.row[:cols] {
			if v == v && (ids[i] < 0 || v > p.row[ids[i]]) {
				ids[i] = j
			}
			if v-v != 0 && bad[i] < 0 {
				bad[i] = j
			}
		}
	}
}

// Greedy generation on a backend that picks tokens on its device takes
// its picks (one per generated token, no logits read back) and writes
// the text the sampler's arg max writes; sampling at a temperature, a
// repetition penalty or log-probabilities still read the logits.
func TestGenerateGreedyOnDevice(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	ctx := context.Background()
	gen := func(b compute.Backend, opt GenerateOptions) string {
		e, err := Load(ctx, dir, Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		res, err := e.Generate(ctx, "Once upon a time", opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}
	cpu := cpubackend.New(1)
	defer cpu.Close()
	for _, tc := range []struct {
		name   string
		opt    GenerateOptions
		picked bool
	}{
		{"greedy", GenerateOptions{MaxTokens: 40}, true},
		{"penalty", GenerateOptions{MaxTokens: 20, Sampling: SamplingOptions{RepetitionPenalty: 1.3}}, false},
		{"logprobs", GenerateOptions{MaxTokens: 20, Logprobs: true}, false},
		{"temperature", GenerateOptions{MaxTokens: 20, Sampling: SamplingOptions{Temperature: 0.8, Seed: 5}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := gen(cpu, tc.opt)
			p := &pickingBackend{Backend: cpu}
			if got := gen(p, tc.opt); got != want {
				t.Errorf("text %q, want %q", got, want)
			}
			if picked := p.rows > 0; picked != tc.picked || tc.picked && p.rows < tc.opt.MaxTokens-1 {
				t.Errorf("%d rows picked on the device, want picks %v", p.rows, tc.picked)
			}
		})
	}
}

// drawingBackend is the CPU backend with compute.Draw done on the host by
// pick.DrawFiltered: a stand-in for a device that draws sampled tokens,
// counting the rows it drew.
type drawingBackend struct {
	compute.Backend
	rows int
	row  []float32
	sc   pick.Scratch
}

func (p *drawingBackend) Draw(ids, bad []int, x compute.Buffer, cols int, rows []compute.DrawRow) {
	p.rows += len(ids)
	if len(p.row) < cols {
		p.row = make([]float32, cols)
	}
	for i, d := range rows {
		row := p.row[:cols]
		p.Read(row, x.Slice(i*cols, (i+1)*cols))
		bad[i] = pick.FirstNonFinite(row)
		if d.Temperature == 0 {
			ids[i] = pick.ArgMax(row)
		} else {
			ids[i] = pick.DrawFiltered(row, d.Temperature, pick.Filter{TopK: int(d.TopK), TopP: d.TopP, MinP: d.MinP}, d.U, &p.sc)
		}
	}
}

// Sampled generation on a backend that draws tokens on its device takes
// its draws (one per generated token, no logits read back) and writes
// the text the host Sampler writes from the same seed, with top-k (up to
// compute.MaxDrawTopK) and top-p too; a repetition penalty or
// log-probabilities still read the logits.
func TestGenerateDrawnOnDevice(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	ctx := context.Background()
	gen := func(b compute.Backend, opt GenerateOptions) string {
		e, err := Load(ctx, dir, Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		res, err := e.Generate(ctx, "Once upon a time", opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}
	cpu := cpubackend.New(1)
	defer cpu.Close()
	for _, tc := range []struct {
		name  string
		opt   GenerateOptions
		drawn bool
	}{
		{"temperature", GenerateOptions{MaxTokens: 40, Sampling: SamplingOptions{Temperature: 0.8, Seed: 5}}, true},
		{"hot, min-p", GenerateOptions{MaxTokens: 40, Sampling: SamplingOptions{Temperature: 1.5, MinP: 0.05, Seed: 6}}, true},
		{"top-p 1, top-k at the vocabulary", GenerateOptions{MaxTokens: 30, Sampling: SamplingOptions{Temperature: 1, TopP: 1, TopK: 512, Seed: 7}}, true},
		{"top-k", GenerateOptions{MaxTokens: 20, Sampling: SamplingOptions{Temperature: 1, TopK: 40, Seed: 8}}, true},
		{"top-p", GenerateOptions{MaxTokens: 20, Sampling: SamplingOptions{Temperature: 1, TopP: 0.9, Seed: 9}}, true},
		{"top-k, top-p, min-p", GenerateOptions{MaxTokens: 20, Sampling: SamplingOptions{Temperature: 0.7, TopK: 50, TopP: 0.95, MinP: 0.05, Seed: 12}}, true},
		{"penalty", GenerateOptions{MaxTokens: 20, Sampling: SamplingOptions{Temperature: 1, RepetitionPenalty: 1.3, Seed: 10}}, false},
		{"logprobs", GenerateOptions{MaxTokens: 20, Logprobs: true, Sampling: SamplingOptions{Temperature: 1, Seed: 11}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := gen(cpu, tc.opt)
			p := &drawingBackend{Backend: cpu}
			if got := gen(p, tc.opt); got != want {
				t.Errorf("text %q, want %q", got, want)
			}
			if drawn := p.rows > 0; drawn != tc.drawn || tc.drawn && p.rows < tc.opt.MaxTokens-1 {
				t.Errorf("%d rows drawn on the device, want draws %v", p.rows, tc.drawn)
			}
		})
	}
}
