package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/calibtest"
	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// parseCache parses args after --model and --prompt.
func parseCache(t *testing.T, args []string) (*options, error) {
	t.Helper()
	return parseFlags(append([]string{"--model", "m", "--prompt", "p"}, args...), io.Discard, io.Discard)
}

// The cache flags fill a kvconfig.Spec; its defaults are tested in kvplan,
// the settings in effect end to end below.
func TestCacheFlags(t *testing.T) {
	tests := []struct {
		args []string
		want kvconfig.Spec
	}{
		{nil, kvconfig.Spec{}},
		{[]string{"--kv-codec", "none", "--sinks", "4"}, kvconfig.Spec{KV: "none", Sinks: 4}},
		{[]string{"--kv-codec", "int4", "--v-codec", "none", "--boundary", "none", "--hot-window", "0"}, kvconfig.Spec{KV: "int4", V: "none", Boundary: "none", HotWindow: -1}},
		{[]string{"--k-codec", "kakeya-block:b=3,rank=4", "--v-codec", "int4-rot", "--boundary", "0,1,-2,-1", "--sinks", "4", "--hot-window", "128"},
			kvconfig.Spec{K: "kakeya-block:b=3,rank=4", V: "int4-rot", Boundary: "0,1,-2,-1", HotWindow: 128, Sinks: 4}},
		{[]string{"--kv-codec", "kakeya", "--k-bits", "3", "--v-bits", "2", "--block-size", "32"}, kvconfig.Spec{KV: "kakeya", KBits: 3, VBits: 2, BlockSize: 32}},
		{[]string{"--kv-codec", "kakeya", "--calib", "c.safetensors", "--calib-codebooks=false", "--precond"},
			kvconfig.Spec{KV: "kakeya", Codebooks: kvconfig.Off, Precondition: kvconfig.On}},
		{[]string{"--kv-codec", "int8", "--cache-type", "F32"}, kvconfig.Spec{KV: "int8", CacheType: "f32"}},
	}
	for _, tt := range tests {
		o, err := parseCache(t, tt.args)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if o.cache != tt.want {
			t.Errorf("%q: spec %+v, want %+v", tt.args, o.cache, tt.want)
		}
	}
}

// Bad flags fail before anything loads, naming the flag.
func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--block-size", "-1"}, `invalid value "-1" for flag -block-size: want an integer >= 1`},
		{[]string{"--block-size", "0"}, `invalid value "0" for flag -block-size: want an integer >= 1`},
		{[]string{"--ctx", "-2"}, "--ctx -2"},
		{[]string{"--kv-codec", "int5"}, `--kv-codec "int5": codec: unknown codec "int5"`},
		{[]string{"--kv-codec", "int8", "--k-codec", "kakeya:rank"}, `--k-codec "kakeya:rank"`},
		{[]string{"--v-codec", "kakeya-block:b=7"}, `--v-codec "kakeya-block:b=7"`},
		{[]string{"--v-codec", "int4:group=x"}, `--v-codec "int4:group=x"`},
		{[]string{"--kv-codec", "int8", "--k-bits", "4"}, "--k-bits 4: codec int8 has a fixed width"},
		{[]string{"--kv-codec", "kakeya", "--v-bits", "9"}, "--v-bits 9"},
		{[]string{"--kv-codec", "kakeya-block:b=2", "--k-bits", "3"}, `--k-bits 3 contradicts b=2 in --kv-codec "kakeya-block:b=2"`},
		{[]string{"--k-bits", "3"}, "--k-bits 3: no codec is set"},
		{[]string{"--k-codec", "int8", "--v-bits", "3"}, "--v-bits 3: no codec is set for that side (use --kv-codec)"},
		{[]string{"--kv-codec", "int8", "--hot-window", "-1"}, `invalid value "-1" for flag -hot-window`},
		{[]string{"--kv-codec", "int8", "--hot-window", "x"}, `invalid value "x" for flag -hot-window`},
		{[]string{"--kv-codec", "int8", "--sinks", "-1"}, `invalid value "-1" for flag -sinks`},
		{[]string{"--kv-codec", "int8", "--boundary", "0,x"}, `layer list "0,x": "x" is not an integer`},
		{[]string{"--kv-codec", "int8", "--boundary", "1,1"}, `layer list "1,1": layer 1 listed twice`},
		{[]string{"--calib", "c.safetensors"}, "--calib: the cache is uncompressed"},
		{[]string{"--v-codec", "int8", "--precond", "--calib", "c.safetensors"}, "--precond: preconditioning wraps the key codec, but keys are uncompressed"},
		{[]string{"--kv-codec", "int8", "--precond"}, "--precond needs --calib"},
		{[]string{"--kv-codec", "kakeya", "--calib-codebooks"}, "--calib-codebooks needs --calib"},
		{[]string{"--cache-type", "f16"}, `invalid value "f16" for flag -cache-type: want bf16 or f32`},
		{[]string{"--threads", "1000000"}, "--threads 1000000: want 0 (all cores) to"},
		{[]string{"--threads", "-1"}, "--threads -1"},
		{[]string{"--stop", "ok", "--stop", ""}, `--stop "": an empty stop string`},
		{[]string{"--repeat-penalty", "0"}, "--repeat-penalty 0 must be > 0 (1 is off)"},
		{[]string{"--repeat-penalty", "-1"}, "--repeat-penalty -1 must be > 0"},
		{[]string{"--system", "be brief"}, "--system needs --chat"},
		{[]string{"--chat-template-kwargs", `{"enable_thinking": false}`}, "--chat-template-kwargs needs --chat"},
		{[]string{"--chat", "--chat-template-kwargs", `[1]`}, `--chat-template-kwargs "[1]": want a JSON object`},
		{[]string{"--tokenize"}, "--prompt and --tokenize exclude each other"},
		{[]string{"--device", "tpu"}, `--device "tpu": want one of cpu, cuda`},
		{[]string{"--matmul", "fp16"}, `--matmul "fp16": want f32 or bf16`},
	}
	for _, tt := range tests {
		_, err := parseCache(t, tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want one containing %q", tt.args, err, tt.want)
		}
	}
	// The device opens first thing in run, before the model or the prompt
	// is read: bf16 applies to cuda, the driver is what is missing.
	if b, err := device.Open("cuda", 0, ""); err == nil {
		b.Close()
		return // a GPU is present
	}
	err := run(context.Background(), []string{"--model", "x", "--prompt", "hi", "--matmul", "bf16", "--device", "cuda"}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--device cuda: cuda: ") {
		t.Errorf("--device cuda without a driver: err = %v", err)
	}
}

// writeCalibration writes a calibration with Cholesky factors 2*I for the
// model in dir, as kakeya-eval calibrate would, and returns its path.
func writeCalibration(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "calib.safetensors")
	calibtest.Diag(t, dir, path, 2)
	return path
}

// The settings line names the cache in effect: the defaults kakeya-eval
// ppl shares, applied for this model (5 layers, context 512).
func TestRunCacheSettings(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	calib := writeCalibration(t, dir)
	base := []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "4"}
	tests := []struct {
		args []string
		want string // the settings line; "" with err
		err  string
	}{
		{nil, "KV cache: uncompressed bf16, block 16", ""},
		{[]string{"--cache-type", "f32", "--block-size", "32"}, "KV cache: uncompressed f32, block 32", ""},
		{[]string{"--kv-codec", "int8"}, "KV cache: k=int8 v=int8 block 64, hot 64, boundary 0;4, bf16 hot blocks", ""},
		{[]string{"--k-codec", "int4", "--boundary", "none", "--hot-window", "0"}, "KV cache: k=int4 v=none block 64, hot 0, bf16 hot blocks", ""},
		{[]string{"--kv-codec", "int8", "--calib", calib, "--boundary", "2"},
			"KV cache: k=int8 v=int8 block 64, hot 64, boundary 2, preconditioned, bf16 hot blocks, calibration " + calib, ""},
		{[]string{"--kv-codec", "int8", "--boundary", "0,7"}, "", `--boundary "0,7": layer 7 outside a model of 5 layers`},
		{[]string{"--kv-codec", "int8", "--boundary", "-6"}, "", "layer -6 outside a model of 5 layers"},
		{[]string{"--kv-codec", "int8", "--block-size", "1024"}, "", "--block-size 1024 exceeds the context of 512 tokens"},
		{[]string{"--ctx", "8192"}, "", "context 8192 exceeds max_position_embeddings 512"},
		{[]string{"--kv-codec", "int8", "--calib", calib + ".missing"}, "", "calibration: "},
		{[]string{"--kv-codec", "int8", "--calib", filepath.Join(dir, "model.safetensors")}, "", "calibration: "},
		{[]string{"--kv-codec", "int8", "--calib", calib, "--precond=0"}, "", "uses neither its query factors"},
	}
	for _, tt := range tests {
		var errOut bytes.Buffer
		err := run(context.Background(), append(base, tt.args...), nil, io.Discard, &errOut)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err = %v, want one containing %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if !slices.Contains(strings.Split(errOut.String(), "\n"), tt.want) {
			t.Errorf("%q: stderr %q lacks the line %q", tt.args, errOut.String(), tt.want)
		}
	}
}

var kvLine = regexp.MustCompile(`KV cache: (\d+) tokens, .* ratio ([0-9.]+)x\)(; encoded blocks .*, codec ratio ([0-9.]+)x)?`)

// kakeya-run end to end with a compressed cache: a 300-token generation
// encodes blocks, and the KV line reports a cache smaller than bf16 when
// every layer is compressed with 16-token blocks.
func TestRunCompressed(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	calib := writeCalibration(t, dir)
	base := []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "300"}
	tests := []struct {
		args           []string
		minRatio       float64 // whole cache vs bf16
		minCodec       float64 // encoded blocks vs bf16; 0: none encoded
		sameAsBaseline bool    // greedy text identical to the uncompressed run's
	}{
		{[]string{"--kv-codec", "f32", "--boundary", "none", "--block-size", "16"}, 0.45, 0.45, true},
		{[]string{"--kv-codec", "int8", "--boundary", "none", "--block-size", "16"}, 1.2, 1.4, false},
		// The default boundary layers (0 and -1) store bf16 blocks, which
		// count among the encoded blocks at 1x.
		{[]string{"--kv-codec", "int8"}, 0.7, 1.2, false},
		{[]string{"--kv-codec", "kakeya", "--k-bits", "3", "--v-codec", "int4", "--calib", calib}, 0.7, 1.3, false},
	}
	var baseline string
	for i, tt := range tests {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append(base, tt.args...), nil, &out, &errOut); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		m := kvLine.FindStringSubmatch(errOut.String())
		if m == nil {
			t.Fatalf("%q: no KV line in %q", tt.args, errOut.String())
		}
		if i == 0 {
			var plain bytes.Buffer
			if err := run(context.Background(), base, nil, &plain, io.Discard); err != nil {
				t.Fatal(err)
			}
			baseline = plain.String()
		}
		ratio, _ := strconv.ParseFloat(m[2], 64)
		codecRatio, _ := strconv.ParseFloat(m[4], 64) // 0 when absent
		t.Logf("%q: %s", tt.args, m[0])
		if m[1] != "304" {
			t.Errorf("%q: %s tokens in the cache, want 304 (5 prompt + 299 fed back)", tt.args, m[1])
		}
		if ratio < tt.minRatio {
			t.Errorf("%q: cache ratio %v, want >= %v", tt.args, ratio, tt.minRatio)
		}
		if (tt.minCodec == 0) != (m[3] == "") || codecRatio < tt.minCodec {
			t.Errorf("%q: codec ratio %q, want >= %v", tt.args, m[3], tt.minCodec)
		}
		if tt.sameAsBaseline && out.String() != baseline {
			t.Errorf("%q: lossless cache changed the greedy text:\n%q\nwant\n%q", tt.args, out.String(), baseline)
		}
	}
	// The calibration above holds no codebooks: used by default only when
	// present, but asked for explicitly their absence is an error.
	args := append(base, "--kv-codec", "kakeya", "--calib", calib, "--calib-codebooks=1")
	if err := run(context.Background(), args, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no 3-bit codebook") {
		t.Errorf("--calib-codebooks with a calibration without codebooks: err = %v", err)
	}
}

// kakeya-run --kv-codec kakeya runs the preset: the first run calibrates
// into --calib-cache and says so on stderr, the settings line names the
// preset, both sides' codecs and the file, and a second run reuses the
// file.
func TestRunPreset(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	cache := t.TempDir()
	args := []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "120",
		"--kv-codec", "kakeya", "--calib-cache", cache, "--threads", "1"}
	settings := regexp.MustCompile(`KV cache: k=kakeya-pc:codedfrac=0\.25,maxbits=5,rate=1\.3 v=kakeya-pc:rate=2\.5 block 64, hot 32, bf16 hot blocks, preset kakeya, calibration auto: (\S+)\n`)
	var first string
	for i := range 2 {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, nil, &out, &errOut); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, errOut.String())
		}
		m := settings.FindStringSubmatch(errOut.String())
		if m == nil || filepath.Dir(m[1]) != cache {
			t.Fatalf("run %d: no preset settings line naming a file in %s:\n%s", i, cache, errOut.String())
		}
		calibrated := strings.Contains(errOut.String(), "calibrated the KV cache on")
		if calibrated != (i == 0) {
			t.Errorf("run %d: calibrated %v, want %v:\n%s", i, calibrated, i == 0, errOut.String())
		}
		if i == 0 {
			first = out.String()
		} else if out.String() != first {
			t.Errorf("the second run generated\n%q\nwant the first's\n%q", out.String(), first)
		}
	}
}
