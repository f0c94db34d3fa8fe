package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/calibtest"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
)

// A sensitivity run, an allocation from it, and ppl with the policy on the
// same passages: the policy's cache holds exactly the bytes the allocation
// predicted, within the budget of --like int4, and its KL is no worse than
// uniform int4's on those passages (the costs are additive only
// approximately, so allow a margin).
func TestSensitivityAllocatePolicy(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	data := shareddata.File(t, "data", "tinystories", "val.txt")
	tmp := t.TempDir()
	sensPath, planPath := filepath.Join(tmp, "sens.json"), filepath.Join(tmp, "plan.json")
	common := []string{"--model", dir, "--data", data, "--ctx", "96", "--n-eval", "16", "--passages", "2", "--block-size", "16", "--hot-window", "16"}
	var stdout strings.Builder
	if err := runSensitivity(context.Background(), append(common, "--choices", "int8 int4 kakeya-block:b=2", "--out", sensPath), &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	sens, err := readSensitivity(sensPath)
	if err != nil {
		t.Fatal(err)
	}
	if sens.Layers != 5 || len(sens.Entries) != 5*2*3 || sens.SideBF16 <= 0 {
		t.Fatalf("sensitivity: %d layers, %d entries, side %d bytes; want 5 layers x 2 sides x 3 codecs", sens.Layers, len(sens.Entries), sens.SideBF16)
	}
	if !strings.Contains(stdout.String(), "kakeya-block:b=2 KL") {
		t.Errorf("table:\n%s", stdout.String())
	}
	stdout.Reset()
	if err := runAllocate(context.Background(), []string{"--sensitivity", sensPath, "--like", "int4", "--out", planPath}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	plan, err := kvplan.ReadPlan(planPath)
	if err != nil {
		t.Fatal(err)
	}
	int4Ratio, err := uniformRatio(sens, "int4")
	if err != nil {
		t.Fatal(err)
	}
	if plan.Ratio < int4Ratio {
		t.Errorf("plan ratio %.4f below int4's %.4f", plan.Ratio, int4Ratio)
	}

	out := filepath.Join(tmp, "report.json")
	if err := runPPL(context.Background(), append(common, "--config", "name=plan,policy="+planPath, "--config", "name=int4,kv=int4,boundary=none", "--out", out), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Configs []struct {
			Config struct{ Name string } `json:"config"`
			KV     struct {
				K int64 `json:"k_bytes"`
				V int64 `json:"v_bytes"`
			} `json:"kv"`
			MeanKL float64 `json:"mean_kl"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	var planBytes int64
	var int4KL, planKL float64
	for _, c := range r.Configs {
		switch c.Config.Name {
		case "plan":
			planKL, planBytes = c.MeanKL, c.KV.K+c.KV.V
		case "int4":
			int4KL = c.MeanKL
		}
	}
	// The report's plot is written beside it, and pareto redraws it from
	// the JSON alone.
	if _, err := os.Stat(paretoPath(out)); err != nil {
		t.Errorf("ppl wrote no Pareto plot: %v", err)
	}
	png := filepath.Join(tmp, "again.png")
	if err := runPareto(context.Background(), []string{"--report", out, "--out", png}, io.Discard, io.Discard); err != nil {
		t.Errorf("pareto: %v", err)
	} else if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("pareto wrote %v, %v", st, err)
	}
	if err := runPareto(context.Background(), []string{"--report", sensPath}, io.Discard, io.Discard); err == nil {
		t.Error("pareto of a sensitivity file: no error")
	}
	if planBytes != plan.Bytes {
		t.Errorf("the policy's cache holds %v bytes, the allocation predicted %d", planBytes, plan.Bytes)
	}
	if planKL > 1.5*int4KL {
		t.Errorf("policy KL %.6f, uniform int4 %.6f at no more bytes", planKL, int4KL)
	}
	t.Logf("int4 ratio %.3f KL %.6f; plan ratio %.3f KL %.6f (predicted %.6f): %s", int4Ratio, int4KL, plan.Ratio, planKL, plan.PredictedKL, kvconfig.FormatLayerCodecs(plan.Layers))

	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"--sensitivity", sensPath, "--out", planPath}, "give one of --target-ratio and --like"},
		{[]string{"--sensitivity", sensPath, "--target-ratio", "1000", "--out", planPath}, "the smallest measured codecs reach only"},
		{[]string{"--sensitivity", sensPath, "--like", "turbo:b=3", "--out", planPath}, "measured on 0 of 10 layer sides"},
		{[]string{"--sensitivity", planPath, "--like", "int4", "--out", planPath}, "cannot unmarshal"},
	} {
		if err := runAllocate(context.Background(), tt.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("allocate %v: err = %v, want %q", tt.args, err, tt.err)
		}
	}
	if err := runSensitivity(context.Background(), append(common, "--kv-codec", "int8", "--out", sensPath), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "the codecs are --choices") {
		t.Errorf("sensitivity with --kv-codec: err = %v", err)
	}
}

// Without --choices, sensitivity measures kvplan.DefaultChoices: int8,
// int4 and kakeya-pc at four fixed rates (every one encoded on a CUDA
// device itself), the kakeya-pc ones on the automatic calibration when
// --calib names none; a --calib without principal components drops
// kakeya-pc and says so. kakeya-block is never among them.
func TestSensitivityDefaultChoices(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	data := shareddata.File(t, "data", "tinystories", "val.txt")
	tmp := t.TempDir()
	noPCA := filepath.Join(tmp, "nopca.safetensors")
	calibtest.Diag(t, dir, noPCA, 1)
	common := []string{"--model", dir, "--data", data, "--ctx", "48", "--n-eval", "8", "--passages", "1", "--block-size", "16", "--hot-window", "16",
		"--calib-cache", filepath.Join(tmp, "auto")}
	for _, c := range []struct {
		name  string
		args  []string
		want  []string
		notes string
	}{
		{"automatic calibration", nil, []string{"int8", "int4", "kakeya-pc:rate=1.5", "kakeya-pc:rate=2", "kakeya-pc:rate=3", "kakeya-pc:rate=4"}, ""},
		{"calibration without principal components", []string{"--calib", noPCA}, []string{"int8", "int4"}, "has no principal components"},
	} {
		out := filepath.Join(tmp, c.name+".json")
		var stderr strings.Builder
		if err := runSensitivity(context.Background(), append(append(slices.Clone(common), c.args...), "--out", out), io.Discard, &stderr); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sens, err := readSensitivity(out)
		if err != nil {
			t.Fatal(err)
		}
		var specs []string
		for _, e := range sens.Entries {
			if !slices.Contains(specs, e.Spec) {
				specs = append(specs, e.Spec)
			}
		}
		if !slices.Equal(specs, c.want) || len(sens.Entries) != 2*sens.Layers*len(c.want) {
			t.Errorf("%s: measured %v (%d entries over %d layers), want %v", c.name, specs, len(sens.Entries), sens.Layers, c.want)
		}
		if c.notes != "" && !strings.Contains(stderr.String(), c.notes) {
			t.Errorf("%s: stderr %q does not say %q", c.name, stderr.String(), c.notes)
		}
	}
	if !slices.Equal(kvplan.DefaultChoices(false), []string{"int8", "int4"}) {
		t.Errorf("DefaultChoices(false) = %v", kvplan.DefaultChoices(false))
	}
}
