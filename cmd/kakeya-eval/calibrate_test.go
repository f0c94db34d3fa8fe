package main

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/weights"
)

// TestCalibrateEndToEnd writes a calibration from a little TinyStories text
// and checks that it loads and that ppl runs precond=1 and cb=1
// configurations with it.
func TestCalibrateEndToEnd(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	data := shareddata.File(t, "data", "tinystories", "val.txt")
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
	// Not a terminal: one plain line per window (each is a fifth), with
	// the ETA, and no \r redraws.
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "calibrate  20% 1/5 windows, ") || !strings.Contains(lines[0], " tok/s, ETA ") ||
		!strings.HasPrefix(lines[4], "calibrate 100% 5/5 windows, ") || !strings.Contains(lines[4], ", took ") {
		t.Errorf("progress on stderr, want one line per window with an ETA:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "\r") {
		t.Errorf("carriage return in progress to a non-terminal: %q", stderr.String())
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cal, err := calibrate.Load(out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cal.Meta["rope_averaged"] != "true" || cal.Meta["ctx"] != "64" || len(cal.Meta["data_sha256"]) != 64 ||
		cal.KCodebooks[2] == nil || cal.VCodebooks[3] == nil || cal.KCodebooks[4] != nil {
		t.Errorf("calibration meta %v, k codebooks %v, v codebooks %v", cal.Meta, cal.KCodebooks, cal.VCodebooks)
	}
	r, _ := runReport(t, "--model", dir, "--data", data, "--ctx", "32", "--n-eval", "8", "--passages", "2",
		"--calib", out, "--config", "name=x,k=kakeya-block:b=3,v=kakeya-block:b=3,precond=1,block=16,boundary=none,hot=0",
		"--config", "name=y,kv=kakeya-block:b=2,precond=1,cb=1,block=16,boundary=none,hot=0")
	if len(r.Configs) != 3 || r.Configs[1].Config.Name != "x" || !(r.Configs[1].MeanKL >= 0) ||
		r.Configs[2].Config.Name != "y" || !(r.Configs[2].MeanKL > 0) {
		t.Fatalf("ppl report %+v", r)
	}
	// The calibration holds no 4-bit codebooks: a clear error, not a fallback.
	err = runPPL(context.Background(), []string{"--model", dir, "--data", data, "--ctx", "32", "--n-eval", "8", "--passages", "2",
		"--calib", out, "--config", "name=z,kv=kakeya-block:b=4,cb=1", "--out", filepath.Join(t.TempDir(), "z.json")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no 4-bit codebook") {
		t.Errorf("cb=1 at 4 bits with 2- and 3-bit codebooks: err = %v", err)
	}
}

func TestCalibrateErrors(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	data := shareddata.File(t, "data", "tinystories", "val.txt")
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(tmp, "short.txt") // 10 stories260K tokens
	if err := os.WriteFile(short, []byte("Spot. Spot saw the s"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "c.safetensors")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative ctx", []string{"--model", dir, "--out", out, "--ctx", "-2"}, "--ctx -2 must be >= 0"},
		{"negative tokens", []string{"--model", dir, "--out", out, "--tokens", "-1"}, "--tokens -1 must be >= 0"},
		{"negative rope span", []string{"--model", dir, "--out", out, "--rope-avg", "--rope-span", "-3"}, "--rope-span -3 must be >= 0"},
		{"rope span alone", []string{"--model", dir, "--out", out, "--rope-span", "64"}, "--rope-span 64 has no effect without --rope-avg"},
		{"negative threads", []string{"--model", dir, "--out", out, "--threads", "-1"}, "--threads -1: want 0 (GOMAXPROCS) to"},
		{"too many threads", []string{"--model", dir, "--out", out, "--threads", "100000"}, "--threads 100000: want 0 (GOMAXPROCS) to"},
		{"unknown device", []string{"--model", dir, "--out", out, "--device", "tpu"}, `--device "tpu": want one of cpu, cuda`},
		{"bits value", []string{"--model", dir, "--out", out, "--bits", "2,9"}, `--bits "2,9": "9" is not a width in 1..4`},
		{"ctx below a block", []string{"--model", dir, "--out", out, "--data", data, "--ctx", "8"}, "--ctx 8 is shorter than a KV block of 16 tokens"},
		// --out is checked before the model is even looked at.
		{"out dir missing", []string{"--model", filepath.Join(tmp, "nomodel"), "--out", filepath.Join(tmp, "no", "c.safetensors")}, "--out: cannot write"},
		{"out is a dir", []string{"--model", dir, "--out", tmp}, "--out: cannot write " + tmp + ": it is a directory"},
		{"too little text", []string{"--model", dir, "--out", out, "--data", short},
			"--data " + short + " gives 10 tokens; calibrating 2,3,4-bit codebooks needs at least 15 tokens"},
		{"too few tokens", []string{"--model", dir, "--out", out, "--data", data, "--tokens", "10", "--bits", "2"},
			"--tokens 10 leaves 10 tokens; calibrating 2-bit codebooks needs at least 15 tokens"},
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
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("failed runs left %s behind: %v", out, err)
	}
	// Without codebooks the short text does.
	if err := runCalibrate(context.Background(), []string{"--model", dir, "--out", out, "--data", short, "--bits", "none"}, io.Discard, io.Discard); err != nil {
		t.Errorf("--bits none on 10 tokens: %v", err)
	}
}

// cancelAt is a progress writer that cancels the run once it has written
// the line of window n.
type cancelAt struct {
	strings.Builder
	trigger string
	cancel  context.CancelFunc
}

func (w *cancelAt) Write(p []byte) (int, error) {
	n, err := w.Builder.Write(p)
	if strings.Contains(w.String(), w.trigger) {
		w.cancel()
	}
	return n, err
}

// TestCalibrateInterrupted checks that Ctrl-C gives a one-line summary, not
// a bare "context canceled", and writes nothing.
func TestCalibrateInterrupted(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	data := shareddata.File(t, "data", "tinystories", "val.txt")
	for _, tc := range []struct {
		name    string
		trigger string // cancel once stderr holds this; "" before the run
		want    string
	}{
		{"before the run", "", "calibrate: interrupted before the first window; nothing written"},
		{"after window 2", " 2/5 windows", "calibrate: interrupted after 2/5 windows ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "c.safetensors")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stderr := &cancelAt{trigger: tc.trigger, cancel: cancel}
			if tc.trigger == "" {
				cancel()
			}
			err := runCalibrate(ctx, []string{"--model", dir, "--out", out, "--data", data,
				"--tokens", "300", "--ctx", "64", "--bits", "2", "--threads", "1"}, io.Discard, stderr)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), "; nothing written") ||
				strings.Contains(err.Error(), "context canceled") {
				t.Errorf("error %v, want a one-line summary starting %q", err, tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("interrupted run left %s behind: %v", out, err)
			}
		})
	}
}

// TestCalibrateBuiltinIsAuto: --data builtin calibrates on the text built
// into the binary, and with the automatic calibration's recipe (--pca
// --rope-avg --bits none, the preset's blocks) writes exactly the
// calibration kakeya.Load makes for the kakeya preset: what the
// evaluations of the preset measure is what its users get.
func TestCalibrateBuiltinIsAuto(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	out := filepath.Join(t.TempDir(), "builtin.safetensors")
	var stdout strings.Builder
	err := runCalibrate(context.Background(), []string{"--model", dir, "--data", "builtin", "--out", out, "--tokens", "1024",
		"--pca", "--rope-avg", "--bits", "none", "--block-size", "64", "--threads", "1"}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "tokens of builtin in") {
		t.Errorf("summary does not name the built-in text:\n%s", stdout.String())
	}
	eng, err := kakeya.Load(context.Background(), dir, kakeya.Options{Threads: 1, Cache: kvconfig.Spec{KV: "kakeya"},
		CalibrationCache: t.TempDir(), CalibrationTokens: 1024, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cfg, err := weights.LoadConfig(eng.ModelInfo().Dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := calibrate.Load(out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := calibrate.Load(eng.Calibration(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Meta, want.Meta) {
		t.Errorf("--data builtin meta %v\nautomatic calibration's %v", got.Meta, want.Meta)
	}
	gt, wt := got.Tensors(), want.Tensors()
	if len(gt) != len(wt) || len(gt) == 0 {
		t.Fatalf("--data builtin has %d tensors, the automatic calibration %d", len(gt), len(wt))
	}
	for name, w := range wt {
		if g, ok := gt[name]; !ok || !slices.Equal(g.Shape, w.Shape) || !slices.Equal(g.Data, w.Data) {
			t.Errorf("tensor %s differs between --data builtin and the automatic calibration", name)
		}
	}
}
