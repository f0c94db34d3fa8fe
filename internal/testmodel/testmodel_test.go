package testmodel

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
	"github.com/kakeya-ai/kakeya/weights"
)

func TestWritePresets(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		n    int // tensors expected
	}{
		{"qwen2", Qwen2Tiny, 1 + 2*12 + 1 + 1},
		{"llama3", Llama3Tiny, 1 + 2*9 + 1},
		{"qwen3", Qwen3Tiny, 1 + 2*11 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, tc.spec); err != nil {
				t.Fatal(err)
			}
			st, err := weights.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if got := len(st.Names()); got != tc.n {
				t.Errorf("%d tensors, want %d: %v", got, tc.n, st.Names())
			}
			for _, want := range tc.spec.tensors() {
				tn, err := st.Tensor(want.name)
				if err != nil {
					t.Fatal(err)
				}
				if tn.DType != tc.spec.DType || len(tn.Shape) != len(want.shape) || tn.Shape[0] != want.shape[0] {
					t.Errorf("%s: %v %v, want %v %v", want.name, tn.DType, tn.Shape, tc.spec.DType, want.shape)
				}
				vals, err := tn.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				var sum, sq float64
				for _, v := range vals {
					sum += float64(v)
					sq += float64(v) * float64(v)
				}
				mean := sum / float64(len(vals))
				std := math.Sqrt(sq/float64(len(vals)) - mean*mean)
				if len(vals) >= 1000 && (math.Abs(mean-want.mean) > 0.1*want.std+1e-3 || math.Abs(std-want.std) > 0.1*want.std) {
					t.Errorf("%s: mean %.4f std %.4f, want %.4f %.4f", want.name, mean, std, want.mean, want.std)
				}
			}
			b, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg["model_type"] != tc.spec.ModelType || cfg["head_dim"] != float64(tc.spec.HeadDim) {
				t.Errorf("config.json: model_type %v head_dim %v", cfg["model_type"], cfg["head_dim"])
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if err := Write(d, Llama3Tiny); err != nil {
			t.Fatal(err)
		}
	}
	x, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
	y, _ := os.ReadFile(filepath.Join(b, "model.safetensors"))
	if string(x) != string(y) {
		t.Error("same spec wrote different files")
	}
}

func TestBadSpec(t *testing.T) {
	s := Qwen2Tiny
	s.ModelType = "gpt2"
	if err := Write(t.TempDir(), s); err == nil {
		t.Error("model_type gpt2: no error")
	}
	s = Qwen2Tiny
	s.DType = tensor.DType(9)
	if err := Write(t.TempDir(), s); err == nil {
		t.Error("bad dtype: no error")
	}
}
