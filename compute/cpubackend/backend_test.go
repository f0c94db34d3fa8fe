package cpubackend

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
)

// NewMatMul refuses thread counts and precisions it cannot run, naming
// the value and the bound, and starts one at the bound.
func TestNewMatMulValidation(t *testing.T) {
	bound := MaxThreads()
	for _, tt := range []struct {
		name    string
		threads int
		matmul  string
		want    []string // nil: starts
	}{
		{"defaults", 0, "", nil},
		{"f32", 1, "f32", nil},
		{"threads at the bound", bound, "bf16", nil},
		{"negative threads", -1, "", []string{"-1 threads", fmt.Sprint(bound)}},
		{"too many threads", 1000000, "", []string{"1000000 threads", fmt.Sprintf("to %d", bound)}},
		{"unknown precision", 1, "fp16", []string{`"fp16"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewMatMul(tt.threads, tt.matmul)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				b.Close()
				return
			}
			if err == nil {
				b.Close()
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// The attention scratch is per backend worker and shape, not per
// sequence: attentions of one shape (windows and scales aside) share it.
func TestAttentionScratchShared(t *testing.T) {
	b := New(2)
	defer b.Close()
	p := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 8, BlockSize: 16, MaxContext: 64}
	for _, w := range []int{0, 0, 9} {
		q := p
		q.Window = w
		if _, err := b.NewAttention(q); err != nil {
			t.Fatal(err)
		}
	}
	p.MaxContext = 128
	if _, err := b.NewAttention(p); err != nil {
		t.Fatal(err)
	}
	if len(b.scratch) != 2 {
		t.Errorf("%d scratch sets for 4 attentions of 2 shapes, want 2", len(b.scratch))
	}
}
