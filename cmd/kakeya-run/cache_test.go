package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"
)

// parseCache parses args with only the cache flags registered.
func parseCache(t *testing.T, args []string) (*cacheFlags, error) {
	t.Helper()
	var c cacheFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return &c, nil
}

func TestCacheFlags(t *testing.T) {
	tests := []struct {
		args  []string
		block int
		spec  model.CacheSpec
	}{
		{nil, 16, model.CacheSpec{HotBF16: true}},
		{[]string{"--kv-codec", "none", "--sinks", "4"}, 16, model.CacheSpec{HotBF16: true}},
		{[]string{"--block-size", "32"}, 32, model.CacheSpec{HotBF16: true}},
		{[]string{"--kv-codec", "int8"}, 64, model.CacheSpec{K: "int8", V: "int8", Boundary: []int{0, -1}, HotWindow: 64, HotBF16: true}},
		{[]string{"--kv-codec", "int8", "--block-size", "16"}, 16, model.CacheSpec{K: "int8", V: "int8", Boundary: []int{0, -1}, HotWindow: 16, HotBF16: true}},
		{[]string{"--kv-codec", "int4", "--v-codec", "none", "--boundary", "none", "--hot-window", "0"}, 64, model.CacheSpec{K: "int4", HotBF16: true}},
		{[]string{"--k-codec", "kakeya:b=3,rank=4", "--v-codec", "int4-rot", "--boundary", "0,1,-2,-1", "--sinks", "4", "--hot-window", "128"}, 64,
			model.CacheSpec{K: "kakeya:b=3,rank=4", V: "int4-rot", Boundary: []int{0, 1, -2, -1}, HotWindow: 128, Sinks: 4, HotBF16: true}},
		{[]string{"--kv-codec", "kakeya", "--k-bits", "3", "--v-bits", "2"}, 64,
			model.CacheSpec{K: "kakeya:b=3", V: "kakeya:b=2", Boundary: []int{0, -1}, HotWindow: 64, HotBF16: true}},
		{[]string{"--kv-codec", "kakeya:b=4", "--k-bits", "4"}, 64, model.CacheSpec{K: "kakeya:b=4", V: "kakeya:b=4", Boundary: []int{0, -1}, HotWindow: 64, HotBF16: true}},
		{[]string{"--kv-codec", "INT8", "--k-codec", "None"}, 64, model.CacheSpec{V: "int8", Boundary: []int{0, -1}, HotWindow: 64, HotBF16: true}},
		{[]string{"--k-codec", "bf16", "--calib", "c.safetensors"}, 64, model.CacheSpec{K: "bf16", Boundary: []int{0, -1}, HotWindow: 64, Precondition: true, Codebooks: true, HotBF16: true}},
		{[]string{"--kv-codec", "kakeya", "--calib", "c.safetensors", "--calib-codebooks=false"}, 64,
			model.CacheSpec{K: "kakeya", V: "kakeya", Boundary: []int{0, -1}, HotWindow: 64, Precondition: true, HotBF16: true}},
		{[]string{"--cache-type", "f32"}, 16, model.CacheSpec{}},
		{[]string{"--kv-codec", "int8", "--cache-type", "F32"}, 64, model.CacheSpec{K: "int8", V: "int8", Boundary: []int{0, -1}, HotWindow: 64}},
		{[]string{"--kv-codec", "kakeya", "--calib", "c.safetensors", "--calib-codebooks"}, 64,
			model.CacheSpec{K: "kakeya", V: "kakeya", Boundary: []int{0, -1}, HotWindow: 64, Precondition: true, Codebooks: true, HotBF16: true}},
	}
	for _, tt := range tests {
		c, err := parseCache(t, tt.args)
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		opt, err := c.options()
		if err != nil {
			t.Errorf("%q: options: %v", tt.args, err)
			continue
		}
		spec, err := c.spec()
		if err != nil {
			t.Errorf("%q: spec: %v", tt.args, err)
			continue
		}
		if opt.BlockSize != tt.block {
			t.Errorf("%q: block size %d, want %d", tt.args, opt.BlockSize, tt.block)
		}
		if spec.K != tt.spec.K || spec.V != tt.spec.V || !slices.Equal(spec.Boundary, tt.spec.Boundary) ||
			spec.HotWindow != tt.spec.HotWindow || spec.Sinks != tt.spec.Sinks || spec.Precondition != tt.spec.Precondition ||
			spec.Codebooks != tt.spec.Codebooks || spec.HotBF16 != tt.spec.HotBF16 {
			t.Errorf("%q: spec %+v, want %+v", tt.args, spec, tt.spec)
		}
	}
}

func TestCacheFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--block-size", "-1"}, "--block-size -1 must be > 0"},
		{[]string{"--ctx", "-2"}, "--ctx -2"},
		{[]string{"--kv-codec", "int5"}, `--kv-codec "int5": codec: unknown codec "int5"`},
		{[]string{"--kv-codec", "int8", "--k-codec", "kakeya:rank"}, `--k-codec "kakeya:rank"`},
		{[]string{"--v-codec", "kakeya:b=7"}, `--v-codec "kakeya:b=7"`},
		{[]string{"--v-codec", "int4:group=x"}, `--v-codec "int4:group=x"`},
		{[]string{"--kv-codec", "int8", "--k-bits", "4"}, "--k-bits 4: codec int8 has a fixed width"},
		{[]string{"--kv-codec", "kakeya", "--v-bits", "9"}, "--v-bits 9"},
		{[]string{"--kv-codec", "kakeya:b=2", "--k-bits", "3"}, `--k-bits 3 contradicts b=2 in --kv-codec "kakeya:b=2"`},
		{[]string{"--k-bits", "3"}, "--k-bits 3: no codec is set"},
		{[]string{"--k-codec", "int8", "--v-bits", "3"}, "--v-bits 3: no codec is set for that side (use --kv-codec)"},
		{[]string{"--kv-codec", "int8", "--hot-window", "-1"}, "--hot-window -1 must be >= 0"},
		{[]string{"--kv-codec", "int8", "--sinks", "-1"}, "--sinks -1 must be >= 0"},
		{[]string{"--kv-codec", "int8", "--boundary", "0,x"}, `--boundary: layer list "0,x": "x" is not an integer`},
		{[]string{"--kv-codec", "int8", "--boundary", "1,1"}, "--boundary: layer list \"1,1\": layer 1 listed twice"},
		{[]string{"--calib", "c.safetensors"}, "--calib preconditions the key codec, but keys are uncompressed"},
		{[]string{"--v-codec", "int8", "--calib", "c.safetensors"}, "keys are uncompressed: set --kv-codec or --k-codec"},
		{[]string{"--kv-codec", "int8", "--k-codec", "none", "--calib", "c.safetensors"}, "keys are uncompressed"},
		{[]string{"--kv-codec", "kakeya", "--calib-codebooks"}, "--calib-codebooks needs --calib"},
		{[]string{"--cache-type", "f16"}, `--cache-type "f16": want f32 or bf16`},
	}
	for _, tt := range tests {
		c, err := parseCache(t, tt.args)
		if err == nil {
			_, err = c.options()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want one containing %q", tt.args, err, tt.want)
		}
	}
	// A malformed integer is the flag package's error, naming the flag.
	if _, err := parseCache(t, []string{"--hot-window", "x"}); err == nil || !strings.Contains(err.Error(), "-hot-window") {
		t.Errorf("--hot-window x: err = %v", err)
	}
}

// writeCalibration writes a calibration with Cholesky factors 2*I for the
// model in dir, as kakeya-eval calibrate would.
func writeCalibration(t *testing.T, dir string) string {
	t.Helper()
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.HeadDim
	cal := &codec.Calibration{Layers: cfg.NumLayers, KVHeads: cfg.NumKVHeads, HeadDim: d, Model: "stories260K"}
	for range cfg.NumLayers * cfg.NumKVHeads {
		L := make([]float32, d*d)
		for i := range d {
			L[i*d+i] = 2
		}
		cal.Chol = append(cal.Chol, L)
	}
	path := filepath.Join(t.TempDir(), "calib.safetensors")
	if err := model.SaveCalibration(path, cal); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCachePolicy(t *testing.T) {
	dir := filepath.Join(shareddata.Dir(t), "models", "stories260K") // 5 layers, 4 KV heads
	calib := writeCalibration(t, dir)
	tests := []struct {
		args []string
		want []string // per layer: K codec name(s) | V codec name; nil: no policy
		err  string
	}{
		{nil, nil, ""},
		{[]string{"--kv-codec", "int8"}, []string{"bf16|bf16", "int8|int8", "int8|int8", "int8|int8", "bf16|bf16"}, ""},
		{[]string{"--k-codec", "int4", "--boundary", "none"}, []string{"int4|-", "int4|-", "int4|-", "int4|-", "int4|-"}, ""},
		{[]string{"--kv-codec", "int8", "--calib", calib, "--boundary", "2"},
			[]string{"pre+int8|int8", "pre+int8|int8", "bf16|bf16", "pre+int8|int8", "pre+int8|int8"}, ""},
		{[]string{"--kv-codec", "int8", "--boundary", "0,7"}, nil, `--boundary "0,7": layer 7 outside a model of 5 layers`},
		{[]string{"--kv-codec", "int8", "--boundary", "-6"}, nil, "layer -6 outside a model of 5 layers"},
		{[]string{"--kv-codec", "int8", "--calib", calib + ".missing"}, nil, "--calib: "},
		{[]string{"--kv-codec", "int8", "--calib", filepath.Join(dir, "model.safetensors")}, nil, "--calib: "},
	}
	for _, tt := range tests {
		c, err := parseCache(t, tt.args)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.policy(dir)
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
		if tt.want == nil {
			if p.Layers != nil {
				t.Errorf("%q: policy %+v, want none", tt.args, p)
			}
			continue
		}
		var got []string
		for l := range 5 {
			k, v := "-", "-"
			if cd := p.KCodec(l, 3); cd != nil {
				k = cd.Name()
			}
			if cd := p.VCodec(l); cd != nil {
				v = cd.Name()
			}
			got = append(got, k+"|"+v)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: codecs %v, want %v", tt.args, got, tt.want)
		}
	}
}

var kvLine = regexp.MustCompile(`KV cache: (\d+) tokens, .* ratio ([0-9.]+)x\)(; encoded blocks .*, codec ratio ([0-9.]+)x)?`)

// kakeya-run end to end with a compressed cache: a 300-token generation
// encodes blocks, and the KV line reports a cache smaller than bf16 when
// every layer is compressed with 16-token blocks.
func TestRunCompressed(t *testing.T) {
	dir := filepath.Join(shareddata.Dir(t), "models", "stories260K")
	calib := writeCalibration(t, dir)
	base := []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "300"}
	tests := []struct {
		args           []string
		minRatio       float64 // whole cache vs bf16
		minCodec       float64 // encoded blocks vs bf16; 0: none encoded
		sameAsBaseline bool    // greedy text identical to the uncompressed run's
	}{
		{nil, 0.45, 0, true},
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
			baseline = out.String()
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
	args := append(base, "--kv-codec", "kakeya", "--calib", calib, "--calib-codebooks")
	if err := run(context.Background(), args, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no 3-bit codebook") {
		t.Errorf("--calib-codebooks with a calibration without codebooks: err = %v", err)
	}
}
