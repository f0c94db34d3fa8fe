package testmodel

import (
	"os"
	"path/filepath"
	"testing"
)

// The production-shaped presets have the parameter counts of the models
// they copy (Hugging Face's model cards), and Bytes is the size of the
// tensors a written checkpoint holds.
func TestPresetShapes(t *testing.T) {
	for name, want := range map[string]int64{
		"qwen2.5-0.5b": 494_032_768,
		"qwen2.5-1.5b": 1_543_714_304,
		"qwen2.5-7b":   7_615_616_512,
	} {
		s, ok := Presets[name]
		if !ok {
			t.Fatalf("no preset %s", name)
		}
		if got := s.Bytes() / int64(s.DType.Size()); got != want {
			t.Errorf("%s: %d parameters, want %d", name, got, want)
		}
	}
	dir := t.TempDir()
	if err := Write(dir, Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hdr := int64(f[0]) | int64(f[1])<<8 | int64(f[2])<<16 | int64(f[3])<<24
	if got := fi.Size() - 8 - hdr; got != Qwen2Tiny.Bytes() {
		t.Errorf("the file holds %d bytes of tensors, Bytes says %d", got, Qwen2Tiny.Bytes())
	}
}
