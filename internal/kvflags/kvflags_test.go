package kvflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// The flags and the compact grammar fill the same Spec.
func TestRegister(t *testing.T) {
	var s kvconfig.Spec
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	Register(fs, &s)
	err := fs.Parse([]string{"--k-codec", "kakeya-block:b=3,rank=4", "--v-codec=int4", "--boundary", "0;-1", "--block-size", "64",
		"--hot-window", "64", "--sinks", "4", "--precond", "--calib-codebooks=false"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := kvconfig.Parse("k=kakeya-block:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0")
	if s != want {
		t.Errorf("flags gave %+v, want %+v", s, want)
	}
	for _, args := range [][]string{{"--block-size", "0"}, {"--hot-window", "x"}, {"--cache-type", "f16"}} {
		var s kvconfig.Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Register(fs, &s)
		if err := fs.Parse(args); err == nil || !strings.Contains(err.Error(), args[0][2:]) {
			t.Errorf("%v: err = %v, want one naming the flag", args, err)
		}
	}
}

// --kv-policy reads its file from the file system into the per-layer
// codecs; a missing file is the flag's error.
func TestPolicyFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	plan := `{"format": "kakeya-kv-plan/1", "layers": [{"k": "none", "v": "int8"}, {"k": "kakeya-block:b=3,rank=4", "v": "bf16"}]}`
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		layers string
		err    string
	}{
		{[]string{"--kv-policy", path, "--hot-window", "8"}, "none/int8|kakeya-block:b=3,rank=4/none", ""},
		{[]string{"--kv-policy", path + ".missing"}, "", "invalid value \"" + path + ".missing\" for flag -kv-policy: policy file: open " + path + ".missing"},
	} {
		var s kvconfig.Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Register(fs, &s)
		err := fs.Parse(tt.args)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err = %v, want one containing %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || s.Layers != tt.layers || s.HotWindow != 8 {
			t.Errorf("%q: spec %+v, %v; want layers %q", tt.args, s, err, tt.layers)
		}
	}
}

// A setting given twice, under any of its flags, is an error that names
// both.
func TestDuplicateFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--kv-codec", "int8", "--kv-codec", "int4"}, `invalid value "int4" for flag -kv-codec: --kv-codec is already set by --kv-codec "int8"; give each setting once`},
		{[]string{"--hot-window=64", "--hot-window=64"}, `--hot-window is already set by --hot-window "64"`},
		{[]string{"--precond", "--precond=false"}, `--precond is already set by --precond "true"`},
		{[]string{"--layer-codecs", "int8/int8", "--kv-policy", "p.json"}, `--layer-codecs is already set by --layer-codecs "int8/int8"`},
	} {
		var s kvconfig.Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Register(fs, &s)
		if err := fs.Parse(tt.args); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

// Error says a setting error in the flags' words, and leaves other errors
// as they are.
func TestError(t *testing.T) {
	_, err := kvconfig.Spec{KV: "int8", KBits: 3}.Check()
	wrapped := fmt.Errorf("kakeya: cache: %w", err)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{err, "--k-bits 3: codec int8 has a fixed width (only kakeya-block and turbo take a bit width)"},
		{wrapped, "kakeya: cache: --k-bits 3: codec int8 has a fixed width"},
		{kvconfig.Errorf("{precond} needs a calibration{calib}"), "--precond needs a calibration (--calib)"},
		{errors.New("other: Spec.KV"), "other: Spec.KV"},
	} {
		if got := Error(tt.err).Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("Error(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
	if Error(nil) != nil {
		t.Errorf("Error(nil) != nil")
	}
}

// FuzzSpecFlags checks the flag form of the settings: no argument list
// makes it panic, a setting repeated is refused, and flags that parse and
// validate fill the Spec that their String form reads back as.
func FuzzSpecFlags(f *testing.F) {
	for _, s := range []string{
		"--kv-codec int8", "--k-codec kakeya-block:b=3,rank=4 --v-codec=int4 --boundary 0;-1 --block-size 64 --hot-window 64 --sinks 4 --precond --calib-codebooks=false",
		"--kv-codec int8 --kv-codec int4", "--hot-window 0 --cache-type f32", "--layer-codecs none/int8|int8/none --hot-window 8",
		"--kv-codec kakeya-block:b=0", "--k-bits 0", "--precond --precond", "--block-size -1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		var s kvconfig.Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Register(fs, &s)
		if err := fs.Parse(args); err != nil {
			return
		}
		// Each setting appeared at most once among the parsed flags.
		seen := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) {
			set, _ := kvconfig.SettingName(fl.Name)
			if seen[set] {
				t.Fatalf("%q: setting %s accepted twice", line, set)
			}
			seen[set] = true
		})
		if s.Validate() != nil || s.String() == "" {
			return
		}
		back, err := kvconfig.Parse(s.String())
		if err != nil || back != s {
			t.Fatalf("flags %q gave %+v; its String %q reads back as %+v, %v", line, s, s.String(), back, err)
		}
	})
}
