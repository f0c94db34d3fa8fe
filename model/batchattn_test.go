package model

import (
	"math"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
)

// batching is a backend with compute.BatchAttention that runs each
// pass's own attention in turn (over a rotated copy of q when asked to
// rotate) and counts its calls and passes.
type batching struct {
	compute.Backend
	heads, d      int
	calls, passes int
}

func (b *batching) AttendBatch(out, q compute.Buffer, rotate bool, layer int, passes []compute.AttentionPass, cos, sin compute.Buffer) error {
	b.calls++
	b.passes += len(passes)
	row := b.heads * b.d
	if rotate { // a rotated copy: q stays as it is
		host := make([]float32, q.Len)
		b.Read(host, q)
		c := b.Alloc(q.Len)
		b.Write(c, host)
		at := 0
		for _, p := range passes {
			b.RoPE(c.Slice(at*row, (at+p.N)*row), p.N, b.heads, b.d, p.Start, cos, sin)
			at += p.N
		}
		q = c
	}
	at := 0
	for _, p := range passes {
		rows := q.Slice(at*row, (at+p.N)*row)
		if err := p.Attention.Forward(out.Slice(at*row, (at+p.N)*row), rows, p.N, p.Start, p.KV, cos, sin); err != nil {
			return err
		}
		at += p.N
	}
	return nil
}

// A backend with compute.BatchAttention gets one call per layer for each
// step of several sequences, over every pass (prefill chunks and decode
// tokens), and none for a step of one; the logits are bit for bit those
// of the per-sequence loop on the same backend without it.
func TestBatchAttentionSeam(t *testing.T) {
	dir := tinyModels(t)["qwen2"]
	run := func(b compute.Backend) [][]float32 {
		m := load(t, dir, Options{Backend: b, MaxContext: 64})
		vocab := m.Config().VocabSize
		bt, err := m.NewBatch(64)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []*Sequence
		for range 3 {
			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			seqs = append(seqs, s)
		}
		var out [][]float32
		steps := [][][]int{ // per step, each sequence's ids (nil: not in the step)
			{testIDs(7, vocab), testIDs(3, vocab-1), nil},
			{{5}, {6}, testIDs(11, vocab-2)},
			{{8}, nil, {9}},
			{{10}, nil, nil},
			{{11}, {12}, {13}},
		}
		for _, st := range steps {
			var items []BatchItem
			for i, ids := range st {
				if ids != nil {
					items = append(items, BatchItem{Seq: seqs[i], IDs: ids})
				}
			}
			if err := bt.Forward(items); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				out = append(out, append([]float32(nil), it.Logits...))
			}
		}
		return out
	}
	plain := run(cpuBackend(t, 1, ""))
	probe := load(t, dir, Options{Backend: cpuBackend(t, 1, "")})
	c := probe.Config()
	b := &batching{Backend: cpuBackend(t, 1, ""), heads: c.NumHeads, d: probe.headDim}
	got := run(b)
	for i := range plain {
		for j := range plain[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(plain[i][j]) {
				t.Fatalf("row %d logit %d: %v through BatchAttention, %v per sequence", i, j, got[i][j], plain[i][j])
			}
		}
	}
	// Steps of several sequences: 0, 1, 2 and 4, of 2, 3, 2 and 3 passes.
	if want := 4 * c.NumLayers; b.calls != want || b.passes != 10*c.NumLayers {
		t.Errorf("%d AttendBatch calls over %d passes, want %d over %d", b.calls, b.passes, want, 10*c.NumLayers)
	}
}
