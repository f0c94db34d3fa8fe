package cpubackend

import (
	"fmt"
	"strings"
	"testing"
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
