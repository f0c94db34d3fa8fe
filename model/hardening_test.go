package model

import (
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
)

// TestOptionValidation: options the library must refuse itself, with
// errors naming the value and the bound.
func TestOptionValidation(t *testing.T) {
	models := tinyModels(t)
	linear := t.TempDir()
	spec := testmodel.Qwen3Tiny
	spec.RopeScaling = &testmodel.RopeScaling{Type: "linear", Factor: 4}
	if err := testmodel.Write(linear, spec); err != nil {
		t.Fatal(err)
	}
	cpu := cpuBackend(t, 1, "")
	loads := []struct {
		name string
		dir  string
		opt  Options
		want []string // nil: loads
	}{
		{"no backend", models["qwen3"], Options{MaxContext: 16}, []string{"Options.Backend is nil"}},
		{"block larger than the context", models["qwen3"], Options{Backend: cpu, BlockSize: 1000000}, []string{"block size 1000000 exceeds the context of 512 tokens"}},
		{"block larger than a set context", models["qwen3"], Options{Backend: cpu, BlockSize: 32, MaxContext: 16}, []string{"block size 32 exceeds the context of 16 tokens"}},
		{"default block in a short context", models["qwen3"], Options{Backend: cpu, MaxContext: 10}, nil},
		{"context beyond max_position_embeddings", models["qwen3"], Options{Backend: cpu, MaxContext: 8192},
			[]string{"context 8192 exceeds max_position_embeddings 512 of " + models["qwen3"], "no rope_scaling that extends it"}},
		{"context at max_position_embeddings", models["qwen3"], Options{Backend: cpu, MaxContext: 512}, nil},
		{"linear rope_scaling extends the context", linear, Options{Backend: cpu, MaxContext: 2048}, nil},
		{"beyond linear rope_scaling", linear, Options{Backend: cpu, MaxContext: 2049},
			[]string{"context 2049 exceeds 2048", "max_position_embeddings 512", "rope_scaling (linear, factor 4)"}},
		{"llama3 rope_scaling extends the context", models["llama3"], Options{Backend: cpu, MaxContext: 65536}, nil},
		{"beyond llama3 rope_scaling", models["llama3"], Options{Backend: cpu, MaxContext: 65537},
			[]string{"context 65537 exceeds 65536", "max_position_embeddings 1024", "rope_scaling (llama3, factor 8)"}},
	}
	for _, tt := range loads {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Load(tt.dir, tt.opt)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				m.Close()
				return
			}
			if err == nil {
				m.Close()
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	m := load(t, models["qwen3"], Options{Backend: cpu, MaxContext: 64})
	if _, err := m.NewSequenceOpts(SequenceOptions{BlockSize: 65}); err == nil || !strings.Contains(err.Error(), "block size 65 exceeds the context of 64 tokens") {
		t.Errorf("sequence block larger than the context: %v", err)
	}
}
