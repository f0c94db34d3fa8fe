package kakeya

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/tensor"
)

// countingBackend counts the weights uploaded to and the matrix products
// run on the backend it wraps (hiding its optional capabilities, which
// the model then does without).
type countingBackend struct {
	compute.Backend
	uploads, matmuls atomic.Int64
}

func (b *countingBackend) Upload(m tensor.Mat) (compute.Weight, error) {
	b.uploads.Add(1)
	return b.Backend.Upload(m)
}

func (b *countingBackend) MatMul(out, x compute.Buffer, n int, w compute.Weight) {
	b.matmuls.Add(1)
	b.Backend.MatMul(out, x, n, w)
}

func newCounting(t *testing.T) *countingBackend {
	t.Helper()
	cpu, err := cpubackend.NewMatMul(1, "f32")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpu.Close() })
	return &countingBackend{Backend: cpu}
}

// TestAutoCalibrationOnEngineBackend: Load's automatic calibration runs
// on the engine's own model and backend — the backend it was given runs
// the calibration's products, and no weight is uploaded twice (the model
// is loaded once) — and it writes, under the same cache key, the bytes
// the old path wrote (calibrate.Run loading the model again on an exact
// f32 CPU backend) on ref-qwen2-6m.
func TestAutoCalibrationOnEngineBackend(t *testing.T) {
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	plainB := newCounting(t)
	plain, err := Load(ctx, dir, Options{Backend: plainB, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()

	b := newCounting(t)
	cache := t.TempDir()
	e, err := Load(ctx, dir, Options{
		Backend: b, Cache: kvconfig.Spec{KV: "kakeya"}, CalibrationCache: cache,
		CalibrationTokens: testCalibTokens, Log: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	info := e.CalibrationInfo()
	if !info.Made || info.Path == "" {
		t.Fatalf("calibration %+v, want one made into %s", info, cache)
	}
	if b.matmuls.Load() == 0 {
		t.Errorf("the engine's backend ran no matrix product during Load: the calibration ran elsewhere")
	}
	if got, want := b.uploads.Load(), plainB.uploads.Load(); got != want {
		t.Errorf("Load with an automatic calibration uploaded %d weights, without one %d: the model was loaded again", got, want)
	}

	// The old path: the model loaded again by calibrate.Run on an f32 CPU
	// backend, over the same text and options, saved as Load saves.
	tok, err := LoadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	bs := e.CacheSettings().BlockSize
	old, err := calibrate.Run(ctx, dir, tok.Encode(calibrate.Text(), false), calibrate.Options{
		MaxTokens: testCalibTokens, RopeAveraged: true, PCA: true, BlockSize: bs, Threads: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(calibrate.Text()))
	old.Meta["data"] = calibrate.BuiltinData
	old.Meta["data_sha256"] = hex.EncodeToString(sum[:])
	oldPath := filepath.Join(t.TempDir(), "old.safetensors")
	if err := calibrate.Save(oldPath, old); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(oldPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(info.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("calibration %s (%d bytes) differs from the old path's (%d bytes)", info.Path, len(got), len(want))
	}
	key, err := autoCalibration{modelDir: dir, blockSize: bs, tokens: testCalibTokens}.key()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(info.Path) != key+".safetensors" {
		t.Errorf("cache file %s, want the old key %s", filepath.Base(info.Path), key)
	}

	// Another spec of the same block size reuses the calibration: no run.
	before := b.matmuls.Load()
	_, st, info2, err := e.Caches().Cache(ctx, kvconfig.Spec{KV: "kakeya"})
	if err != nil {
		t.Fatal(err)
	}
	if info2.Path != info.Path || info2.Made || b.matmuls.Load() != before || st.BlockSize != bs {
		t.Errorf("second Cache: %+v (%d products), want the calibration of Load reused", info2, b.matmuls.Load()-before)
	}
}

// GenerateOptions.Priority needs ServingOptions.Scheduling "priority";
// an unknown scheduling policy is a Load error naming it.
func TestPriorityScheduling(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	ctx := context.Background()
	for _, tt := range []struct {
		scheduling string
		wantErr    bool
	}{{"", true}, {"fcfs", true}, {"priority", false}} {
		e, err := Load(ctx, dir, Options{Threads: 1, Serving: ServingOptions{Scheduling: tt.scheduling}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Generate(ctx, "Once upon a time", GenerateOptions{MaxTokens: 2, Priority: 1}, nil)
		if (err != nil) != tt.wantErr {
			t.Errorf("Scheduling %q, Priority 1: %v", tt.scheduling, err)
		}
		e.Close()
	}
	if _, err := Load(ctx, dir, Options{Serving: ServingOptions{Scheduling: "lifo"}}); err == nil || !strings.Contains(err.Error(), `"lifo"`) {
		t.Errorf("Scheduling lifo: %v", err)
	}
}
