// Package calibtest writes the small calibrations the commands' tests use.
package calibtest

import (
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/weights"
)

// Diag writes to path a calibration of the model in the Hugging Face
// directory dir that holds only query Cholesky factors, each scale times
// the identity (no principal components, no codebooks): what makes the
// int8 and int4 keys preconditioned without changing what they encode
// beyond a scale.
func Diag(t testing.TB, dir, path string, scale float32) {
	t.Helper()
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.HeadDim
	cal := &codec.Calibration{Layers: cfg.NumLayers, KVHeads: cfg.NumKVHeads, HeadDim: d, Model: filepath.Base(dir)}
	for range cfg.NumLayers * cfg.NumKVHeads {
		L := make([]float32, d*d)
		for i := range d {
			L[i*d+i] = scale
		}
		cal.Chol = append(cal.Chol, L)
	}
	if err := calibrate.Save(path, cal); err != nil {
		t.Fatal(err)
	}
}
