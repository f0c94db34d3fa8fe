package weights_test

import (
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/weights"
)

// The architecture table lists exactly the tensors, in exactly the shapes,
// of checkpoints written independently of it (internal/testmodel, which
// follows the Hugging Face modeling code): the Qwen2 biases, the Qwen3 q/k
// norms, a tied or untied head, and nothing else.
func TestArchTableMatchesCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec testmodel.Spec
	}{
		{"qwen2", testmodel.Qwen2Tiny},
		{"llama3", testmodel.Llama3Tiny},
		{"qwen3", testmodel.Qwen3Tiny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := testmodel.Write(dir, tc.spec); err != nil {
				t.Fatal(err)
			}
			cfg, err := weights.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			s, err := weights.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			table := cfg.ModelTensors()
			for i := range cfg.NumLayers {
				table = append(table, cfg.LayerTensors(i)...)
			}
			var names []string
			roles := map[weights.Role]int{}
			for _, ts := range table {
				names = append(names, ts.Name)
				roles[ts.Role]++
				tensor, err := s.Tensor(ts.Name)
				if err != nil {
					t.Errorf("%s: %v", ts.Name, err)
					continue
				}
				if !slices.Equal(tensor.Shape, ts.Shape()) {
					t.Errorf("%s: checkpoint shape %v, table %v", ts.Name, tensor.Shape, ts.Shape())
				}
				if (ts.Layer < 0) != (ts.Role < weights.InputNorm) {
					t.Errorf("%s: layer %d for role %d", ts.Name, ts.Layer, ts.Role)
				}
			}
			slices.Sort(names)
			got := s.Names()
			slices.Sort(got)
			if !slices.Equal(names, got) {
				t.Errorf("table lists %v\ncheckpoint holds %v", names, got)
			}
			for r, n := range roles {
				if r >= weights.InputNorm && n != cfg.NumLayers {
					t.Errorf("role %d appears %d times, want once per layer (%d)", r, n, cfg.NumLayers)
				}
			}
		})
	}
}
