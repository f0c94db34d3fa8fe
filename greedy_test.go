package kakeya

import (
	"context"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
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
