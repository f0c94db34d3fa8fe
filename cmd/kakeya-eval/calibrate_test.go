package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"
)

// TestCalibrateEndToEnd writes a calibration from a little TinyStories text
// and checks that it loads and that ppl runs precond=1 and cb=1
// configurations with it.
func TestCalibrateEndToEnd(t *testing.T) {
	sh := shareddata.Dir(t)
	dir := filepath.Join(sh, "models", "stories260K")
	data := filepath.Join(sh, "data", "tinystories", "val.txt")
	out := filepath.Join(t.TempDir(), "calib.safetensors")
	var stdout, stderr strings.Builder
	err := runCalibrate(context.Background(), []string{"--model", dir, "--data", data, "--out", out,
		"--tokens", "300", "--ctx", "64", "--bits", "2,3", "--rope-avg", "--threads", "1"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, stderr.String())
	}
	// 300 text tokens in windows of BOS + 63: 5 windows, 305 tokens.
	if !strings.Contains(stdout.String(), "305 tokens of val.txt in 5 windows of 64") {
		t.Errorf("summary does not give the tokens used:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "100%") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cal, err := model.LoadCalibration(out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cal.Meta["rope_averaged"] != "true" || cal.Meta["ctx"] != "64" || len(cal.Meta["data_sha256"]) != 64 ||
		cal.KCodebooks[2] == nil || cal.VCodebooks[3] == nil || cal.KCodebooks[4] != nil {
		t.Errorf("calibration meta %v, k codebooks %v, v codebooks %v", cal.Meta, cal.KCodebooks, cal.VCodebooks)
	}
	r, _ := runReport(t, "--model", dir, "--data", data, "--ctx", "32", "--n-eval", "8", "--passages", "2",
		"--calib", out, "--config", "name=x,k=kakeya:b=3,v=kakeya:b=3,precond=1",
		"--config", "name=y,kv=kakeya:b=2,precond=1,cb=1")
	if len(r.Configs) != 3 || r.Configs[1].Config.Name != "x" || !(r.Configs[1].MeanKL >= 0) ||
		r.Configs[2].Config.Name != "y" || !(r.Configs[2].MeanKL > 0) {
		t.Fatalf("ppl report %+v", r)
	}
	// The calibration holds no 4-bit codebooks: a clear error, not a fallback.
	err = runPPL(context.Background(), []string{"--model", dir, "--data", data, "--ctx", "32", "--n-eval", "8", "--passages", "2",
		"--calib", out, "--config", "name=z,kv=kakeya:b=4,cb=1", "--out", filepath.Join(t.TempDir(), "z.json")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no 4-bit codebook") {
		t.Errorf("cb=1 at 4 bits with 2- and 3-bit codebooks: err = %v", err)
	}
}

func TestCalibrateErrors(t *testing.T) {
	sh := shareddata.Dir(t)
	dir := filepath.Join(sh, "models", "stories260K")
	data := filepath.Join(sh, "data", "tinystories", "val.txt")
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "c.safetensors")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"--out", out}, "--model is required"},
		{"no out", []string{"--model", dir}, "--out is required"},
		{"bad bits", []string{"--model", dir, "--out", out, "--bits", "2,9"}, "--bits"},
		{"bad ridge", []string{"--model", dir, "--out", out, "--ridge", "-1"}, "--ridge"},
		{"bad flag", []string{"--model", dir, "--out", out, "--ctx", "x"}, "invalid value"},
		{"extra arg", []string{"--model", dir, "--out", out, "extra"}, "unexpected argument"},
		{"missing model", []string{"--model", filepath.Join(tmp, "nomodel"), "--out", out, "--data", data}, "nomodel"},
		{"missing data", []string{"--model", dir, "--out", out, "--data", filepath.Join(tmp, "nodata.txt")}, "nodata.txt"},
		{"empty data", []string{"--model", dir, "--out", out, "--data", empty}, "0 tokens"},
		{"window too long", []string{"--model", dir, "--out", out, "--data", data, "--tokens", "100", "--ctx", "4096"}, "window"},
	} {
		err := runCalibrate(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// An interrupted run writes nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runCalibrate(ctx, []string{"--model", dir, "--out", out, "--data", data, "--tokens", "100"}, io.Discard, io.Discard); err == nil {
		t.Error("cancelled run: no error")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("failed runs left %s behind: %v", out, err)
	}
}
