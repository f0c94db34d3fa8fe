package kvcache

import (
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
)

func TestParseLayers(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string
	}{
		{"0,1,-2,-1", []int{0, 1, -2, -1}, ""},
		{"0;-1", []int{0, -1}, ""},
		{" 3 , 4 ", []int{3, 4}, ""},
		{"", nil, ""},
		{"none", nil, ""},
		{"0,,1", nil, `"" is not an integer`},
		{"a", nil, `"a" is not an integer`},
		{"1,-1,1", nil, "layer 1 listed twice"},
	}
	for _, tt := range tests {
		got, err := ParseLayers(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseLayers(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseLayers(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
		err  string
	}{
		{"kv=int8", Spec{KV: "int8"}, ""},
		{"k=kakeya:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0",
			Spec{K: "kakeya:b=3,rank=4", V: "int4", Boundary: "0,-1", BlockSize: 64, HotWindow: 64, Sinks: 4, Precondition: On, Codebooks: Off}, ""},
		// The flag names are keys too.
		{"kv-codec=kakeya,k-bits=2,v-bits=4,block-size=32,hot-window=0,calib-codebooks=1,cache-type=F32",
			Spec{KV: "kakeya", KBits: 2, VBits: 4, BlockSize: 32, HotWindow: -1, Codebooks: On, CacheType: "f32"}, ""},
		{"kv=int8,k=none,boundary=none", Spec{KV: "int8", K: "none", Boundary: "none"}, ""},
		{"", Spec{}, `"" is not key=value`},
		{"foo=1", Spec{}, "unknown key foo (valid: kv-codec, kv, k-codec, k,"},
		{"kv=int8,foo=1", Spec{}, ""}, // a continuation of the codec spec: rejected by Validate
		{"block=0", Spec{}, `block-size "0": want an integer >= 1`},
		{"block=-4", Spec{}, `block-size "-4": want an integer >= 1`},
		{"hot=-1", Spec{}, `hot-window "-1": want an integer >= 0`},
		{"boundary=0;x", Spec{}, `boundary "0;x": layer list "0;x": "x" is not an integer`},
		{"precond=maybe", Spec{}, `precond "maybe": want 1 or 0`},
		{"cache-type=f16", Spec{}, `cache-type "f16": want bf16 or f32`},
		{"block", Spec{}, `"block" is not key=value`},
		// Per-layer codecs: commas inside a layer's codec spec continue it.
		{"layers=none/BF16|kakeya:b=3,rank=4/int4,hot=32", Spec{Layers: "none/none|kakeya:b=3,rank=4/int4", HotWindow: 32}, ""},
		{"layers=int8", Spec{}, `layer 0 "int8": want K/V`},
		{"layers=int8/", Spec{}, "layer 0 \"int8/\": empty value codec"},
		{"layers=none/none|int9/none", Spec{}, `layer 1 key codec "int9"`},
		{"policy=/nonexistent/plan.json", Spec{}, "policy file: open /nonexistent/plan.json"},
	}
	for _, tt := range tests {
		got, err := ParseSpec(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSpec(%q) = %+v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if tt.in == "kv=int8,foo=1" {
			if err != nil || got.KV != "int8,foo=1" {
				t.Errorf("ParseSpec(%q) = %+v, %v; want kv %q", tt.in, got, err, "int8,foo=1")
			}
			if err := got.Validate(); err == nil || !strings.Contains(err.Error(), "foo") {
				t.Errorf("Validate(%+v) = %v, want an error naming foo", got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		// String writes what ParseSpec reads back.
		if back, err := ParseSpec(got.String()); err != nil || back != got {
			t.Errorf("ParseSpec(%q.String() = %q) = %+v, %v; want %+v", tt.in, got.String(), back, err, got)
		}
	}
	if s := (Spec{}).String(); s != "" {
		t.Errorf("zero Spec String() = %q, want empty", s)
	}
}

// The flags and the compact grammar fill the same Spec.
func TestRegisterFlags(t *testing.T) {
	var s Spec
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.RegisterFlags(fs)
	err := fs.Parse([]string{"--k-codec", "kakeya:b=3,rank=4", "--v-codec=int4", "--boundary", "0;-1", "--block-size", "64",
		"--hot-window", "64", "--sinks", "4", "--precond", "--calib-codebooks=false"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ParseSpec("k=kakeya:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0")
	if s != want {
		t.Errorf("flags gave %+v, want %+v", s, want)
	}
	for _, args := range [][]string{{"--block-size", "0"}, {"--hot-window", "x"}, {"--cache-type", "f16"}} {
		var s Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s.RegisterFlags(fs)
		if err := fs.Parse(args); err == nil || !strings.Contains(err.Error(), args[0][2:]) {
			t.Errorf("%v: err = %v, want one naming the flag", args, err)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		spec Spec
		err  string
	}{
		{Spec{}, ""},
		{Spec{K: "kakeya:b=3,rank=4", V: "int4", Boundary: "0,-1", HotWindow: 64, Sinks: 4}, ""},
		{Spec{K: "int8", Precondition: On}, ""},
		{Spec{KV: "kakeya", KBits: 2}, ""},
		{Spec{Sinks: -4}, "--sinks -4 must be >= 0"},
		{Spec{BlockSize: -4}, "--block-size -4 must be > 0"},
		{Spec{Boundary: "1,1"}, "layer 1 listed twice"},
		{Spec{K: "int5"}, `--k-codec "int5": codec: unknown codec "int5"`},
		{Spec{KV: "int5"}, `--kv-codec "int5"`},
		{Spec{V: "int8:b=3"}, "--v-codec"},
		{Spec{K: "kakeya:rank=x"}, "rank"},
		{Spec{V: "int8", Precondition: On}, "keys are uncompressed"},
		{Spec{Codebooks: On}, "keys and values are uncompressed"},
		{Spec{KV: "int8", KBits: 4}, "--k-bits 4: codec int8 has a fixed width (only kakeya and turbo take a bit width)"},
		{Spec{KV: "kakeya:b=3", KBits: 4}, "--k-bits 4 contradicts b=3 in --kv-codec"},
		{Spec{VBits: 4}, "--v-bits 4: no codec is set for that side"},
		{Spec{KV: "kakeya", VBits: 9}, "--v-bits 9"},
		{Spec{CacheType: "f16"}, `--cache-type "f16"`},
		{Spec{Layers: "none/int8|int4/none", HotWindow: 32, Precondition: On}, ""},
		{Spec{Layers: "none/int8", Precondition: On}, "keys are uncompressed"},
		{Spec{Layers: "none/int8", KV: "int8"}, "drop --kv-codec"},
		{Spec{Layers: "none/int8", Boundary: "0"}, "--boundary"},
		{Spec{Layers: "none/int8|x/y"}, `layer 1 key codec "x"`},
	}
	for _, tt := range tests {
		// The tools' words; the library's name the Spec's fields.
		err := tt.spec.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(FlagError(err).Error(), tt.err)) {
			t.Errorf("%+v: Validate() = %v, want %q", tt.spec, err, tt.err)
		}
		if err != nil && strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: Validate() = %v: a library error names a flag", tt.spec, err)
		}
	}
}

func TestSpecCodecs(t *testing.T) {
	tests := []struct {
		spec Spec
		k, v string
	}{
		{Spec{}, "", ""},
		{Spec{KV: "none"}, "", ""},
		{Spec{KV: "int8"}, "int8", "int8"},
		{Spec{KV: "int8", K: "none"}, "", "int8"},
		{Spec{KV: "int8", V: "kakeya", VBits: 2}, "int8", "kakeya:b=2"},
		{Spec{K: "KAKEYA:b=3"}, "kakeya:b=3", ""},
	}
	for _, tt := range tests {
		k, v, err := tt.spec.Codecs()
		if err != nil || k != tt.k || v != tt.v {
			t.Errorf("%+v: Codecs() = %q, %q, %v; want %q, %q", tt.spec, k, v, err, tt.k, tt.v)
		}
		if c := tt.spec.Compressed(); c != (tt.k != "" || tt.v != "") {
			t.Errorf("%+v: Compressed() = %v", tt.spec, c)
		}
	}
}

func TestInherit(t *testing.T) {
	base := Spec{KV: "int4", BlockSize: 32, HotWindow: -1, Boundary: "none", CacheType: "f32", Precondition: Off}
	got := Spec{K: "int8", BlockSize: 64}.Inherit(base)
	want := Spec{K: "int8", BlockSize: 64, HotWindow: -1, Boundary: "none", CacheType: "f32", Precondition: Off}
	if got != want {
		t.Errorf("Inherit = %+v, want %+v", got, want)
	}
	if got := (Spec{}).Inherit(base); got != base {
		t.Errorf("zero Inherit = %+v, want the base %+v", got, base)
	}
	// A per-layer plan takes the base's block and hot window, not its
	// codecs, bit widths or boundary layers, so it still validates.
	plan := Spec{Layers: "int8/none|none/int4"}.Inherit(Spec{KV: "kakeya", KBits: 3, Boundary: "0", BlockSize: 32})
	if want := (Spec{Layers: "int8/none|none/int4", BlockSize: 32}); plan != want {
		t.Errorf("plan Inherit = %+v, want %+v", plan, want)
	}
	if err := plan.Validate(); err != nil {
		t.Errorf("inherited plan: %v", err)
	}
}

// testCalibration returns a calibration whose Cholesky factors are 2*I.
func testCalibration(layers, kvHeads, d int) *codec.Calibration {
	cal := &codec.Calibration{Layers: layers, KVHeads: kvHeads, HeadDim: d, Model: "test"}
	for range layers * kvHeads {
		L := make([]float32, d*d)
		for i := range d {
			L[i*d+i] = 2
		}
		cal.Chol = append(cal.Chol, L)
	}
	return cal
}

// codecNames lists each layer's codecs as "K|V" names ("-" for none).
func codecNames(p Policy, layers, kvHeads int) []string {
	var out []string
	for l := range layers {
		var ks []string
		for h := range kvHeads {
			k := "-"
			if c := p.KCodec(l, h); c != nil {
				k = c.Name()
			}
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
		v := "-"
		if c := p.VCodec(l); c != nil {
			v = c.Name()
		}
		out = append(out, strings.Join(ks, "/")+"|"+v)
	}
	return out
}

func TestNewPolicy(t *testing.T) {
	shape := Shape{Layers: 5, KVHeads: 2, HeadDim: 4, MaxContext: 512}
	cal := testCalibration(5, 2, 4)
	noChol := testCalibration(5, 2, 4)
	noChol.Chol[3] = nil // layer 1, head 1
	cb, err := codec.GaussianCodebook(2)
	if err != nil {
		t.Fatal(err)
	}
	cal.KCodebooks = map[int]*codec.Codebook{2: cb}
	cal.VCodebooks = map[int]*codec.Codebook{2: cb}
	const kk = "kakeya-b2-r4v0.95c4-o3x4"
	plain := []string{"-|-", "-|-", "-|-", "-|-", "-|-"}
	tests := []struct {
		name  string
		spec  Spec
		cal   *codec.Calibration
		shape *Shape
		want  []string
		st    Settings
		err   string
	}{
		{name: "zero", spec: Spec{}, want: plain, st: Settings{BlockSize: 16, CacheType: "bf16"}},
		{name: "uncompressed ignores the cache settings", spec: Spec{HotWindow: 8, Boundary: "1", CacheType: "f32"}, want: plain,
			st: Settings{BlockSize: 16, CacheType: "f32"}},
		{name: "kv int8 at the defaults", spec: Spec{KV: "int8"},
			want: []string{"bf16|bf16", "int8|int8", "int8|int8", "int8|int8", "bf16|bf16"},
			st:   Settings{K: "int8", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0, 4}, CacheType: "bf16"}},
		{name: "no boundary, no hot window", spec: Spec{KV: "int8", Boundary: "none", HotWindow: -1, BlockSize: 32},
			want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"},
			st:   Settings{K: "int8", V: "int8", BlockSize: 32, CacheType: "bf16"}},
		{name: "boundary", spec: Spec{K: "int8", V: "int4", Boundary: "0,-1,2", HotWindow: 8, Sinks: 2},
			want: []string{"bf16|bf16", "int8|int4", "bf16|bf16", "int8|int4", "bf16|bf16"},
			st:   Settings{K: "int8", V: "int4", BlockSize: 64, HotWindow: 8, Sinks: 2, Boundary: []int{0, 2, 4}, CacheType: "bf16"}},
		{name: "k only", spec: Spec{K: "bf16", Boundary: "none"}, want: []string{"bf16|-", "bf16|-", "bf16|-", "bf16|-", "bf16|-"},
			st: Settings{K: "bf16", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "precond with a calibration by default", spec: Spec{KV: "int8", Boundary: "-5", Codebooks: Off}, cal: cal,
			want: []string{"bf16|bf16", "pre+int8|int8", "pre+int8|int8", "pre+int8|int8", "pre+int8|int8"},
			st:   Settings{K: "int8", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Precondition: true, CacheType: "bf16"}},
		{name: "precond off", spec: Spec{KV: "int8", Boundary: "none", Precondition: Off}, cal: cal,
			want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"},
			st:   Settings{K: "int8", V: "int8", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "values only: nothing to precondition", spec: Spec{V: "int8", Boundary: "none"}, cal: cal,
			want: []string{"-|int8", "-|int8", "-|int8", "-|int8", "-|int8"},
			st:   Settings{V: "int8", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "block clamped to a short context", spec: Spec{KV: "int8", Boundary: "none"}, shape: &Shape{Layers: 5, KVHeads: 2, HeadDim: 4, MaxContext: 48},
			want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"},
			st:   Settings{K: "int8", V: "int8", BlockSize: 48, HotWindow: 48, CacheType: "bf16"}},
		{name: "block longer than the context", spec: Spec{KV: "int8", BlockSize: 1000000}, err: "--block-size 1000000 exceeds the context of 512 tokens"},
		{name: "boundary past the end", spec: Spec{K: "int8", Boundary: "7"}, err: `--boundary "7": layer 7 outside a model of 5 layers`},
		{name: "boundary before the start", spec: Spec{K: "int8", Boundary: "-6"}, err: "layer -6 outside a model of 5 layers"},
		{name: "precond without calibration", spec: Spec{K: "int8", Precondition: On}, err: "--precond needs a calibration"},
		{name: "precond, K uncompressed", spec: Spec{V: "int8", Precondition: On}, cal: cal, err: "keys are uncompressed"},
		{name: "calibration of another model", spec: Spec{K: "int8"}, cal: testCalibration(4, 2, 4),
			err: "calibration for \"test\" is for 4 layers x 2 kv heads x head_dim 4, model has 5 x 2 x 4"},
		{name: "missing factor", spec: Spec{K: "int8"}, cal: noChol, err: "no Cholesky factor for layer 1 kv head 1"},
		{name: "bad codec", spec: Spec{K: "kakeya:b=9"}, err: "--k-codec"},
		// Unwhitened keys keep the Gaussian codebook: the key codebook was
		// fitted to whitened ones.
		{name: "codebooks", spec: Spec{KV: "kakeya:b=2", Boundary: "0", Precondition: Off}, cal: cal,
			want: []string{"bf16|bf16", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal"},
			st:   Settings{K: "kakeya:b=2", V: "kakeya:b=2", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Codebooks: true, CacheType: "bf16"}},
		{name: "codebooks, precond", spec: Spec{K: "kakeya:b=2", V: "int8", Boundary: "0"}, cal: cal,
			want: []string{"bf16|bf16", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8"},
			st:   Settings{K: "kakeya:b=2", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Precondition: true, Codebooks: true, CacheType: "bf16"}},
		{name: "codebooks off", spec: Spec{K: "kakeya:b=2", V: "int8", Boundary: "0", Codebooks: Off}, cal: cal,
			want: []string{"bf16|bf16", "pre+" + kk + "|int8", "pre+" + kk + "|int8", "pre+" + kk + "|int8", "pre+" + kk + "|int8"},
			st:   Settings{K: "kakeya:b=2", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Precondition: true, CacheType: "bf16"}},
		// Auto codebooks skip a width the calibration lacks; asked for, it is an error.
		{name: "auto codebook of other bits", spec: Spec{V: "kakeya:b=3", Boundary: "none"}, cal: cal,
			want: []string{"-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4"},
			st:   Settings{V: "kakeya:b=3", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "codebook of other bits", spec: Spec{V: "kakeya:b=3", Codebooks: On}, cal: cal, err: "no 3-bit codebook (it has [2]"},
		{name: "codebooks without calibration", spec: Spec{V: "kakeya:b=2", Codebooks: On}, err: "--calib-codebooks needs a calibration"},
		// A per-layer plan: none stores bf16 blocks, as a boundary layer
		// does; keys coded by any codec are preconditioned, bf16 keys not.
		{name: "per-layer plan", spec: Spec{Layers: "none/none|int8/int4|kakeya:b=2/none|none/int8|int4/kakeya:b=2"}, cal: cal,
			want: []string{"bf16|bf16", "pre+int8|int4", "pre+" + kk + "-cal|bf16", "bf16|int8", "pre+int4|" + kk + "-cal"},
			st: Settings{BlockSize: 64, HotWindow: 64, Precondition: true, Codebooks: true, CacheType: "bf16",
				Layers: []LayerPlan{{"none", "none"}, {"int8", "int4"}, {"kakeya:b=2", "none"}, {"none", "int8"}, {"int4", "kakeya:b=2"}}}},
		{name: "per-layer plan, values only", spec: Spec{Layers: "none/int8|none/int8|none/int8|none/int8|none/int8"}, cal: cal,
			want: []string{"bf16|int8", "bf16|int8", "bf16|int8", "bf16|int8", "bf16|int8"},
			st: Settings{BlockSize: 64, HotWindow: 64, CacheType: "bf16",
				Layers: []LayerPlan{{"none", "int8"}, {"none", "int8"}, {"none", "int8"}, {"none", "int8"}, {"none", "int8"}}}},
		{name: "per-layer plan of another depth", spec: Spec{Layers: "none/int8|int8/int8"}, err: "--layer-codecs names 2 layers, the model has 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := shape
			if tt.shape != nil {
				m = *tt.shape
			}
			p, st, err := NewPolicy(tt.spec, m, tt.cal)
			if tt.err != "" {
				if err == nil || !strings.Contains(FlagError(err).Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := codecNames(p, m.Layers, m.KVHeads); !slices.Equal(got, tt.want) {
				t.Errorf("codecs %v, want %v", got, tt.want)
			}
			if st.String() != tt.st.String() || !slices.Equal(st.Boundary, tt.st.Boundary) {
				t.Errorf("settings %+v, want %+v", st, tt.st)
			}
			if p.HotWindow != st.HotWindow || p.Sinks != st.Sinks || p.HotBF16 != (st.CacheType == "bf16") {
				t.Errorf("policy hot %d sinks %d bf16 %v disagrees with settings %+v", p.HotWindow, p.Sinks, p.HotBF16, st)
			}
			if st.Precondition && len(p.Layers[1].K) != m.KVHeads {
				t.Errorf("preconditioned layer has %d K codecs, want one per KV head", len(p.Layers[1].K))
			}
		})
	}
}

// FuzzParseSpec checks that no text makes the grammar panic, that a parsed
// Spec that validates survives a round trip through String, and that
// NewPolicy warns exactly when the hot window and sinks leave nothing to
// compress.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"kv=int8", "k=kakeya:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0",
		"kv-codec=kakeya,k-bits=2,v-bits=4,block-size=32,hot-window=0,calib-codebooks=1,cache-type=f32",
		"kv=int8,k=none,boundary=none", "foo=1", "k=int4:group=32,seed=7,v=int4-rot", "",
		"kv=int8,kv=int4", "kv=kakeya:b=3,b=4", "kv=kakeya:b=0", "kv=kakeya:outlier=-1", "kv=int8,hot=256", "kv=int8,sinks=300,block=16",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSpec(text)
		if err != nil {
			return
		}
		if s.Validate() != nil {
			return
		}
		back, err := ParseSpec(s.String())
		if s.String() == "" {
			return
		}
		if err != nil || back != s {
			t.Fatalf("ParseSpec(%q) = %+v; its String %q reads back as %+v, %v", text, s, s.String(), back, err)
		}
		const ctx = 256
		_, st, err := NewPolicy(s, Shape{Layers: 3, KVHeads: 2, HeadDim: 8, MaxContext: ctx}, nil)
		if err != nil {
			if !strings.Contains(FlagError(err).Error(), "--") {
				t.Fatalf("NewPolicy(%+v): error %q names no setting", s, err)
			}
			return
		}
		// The warning is given exactly when no block is encoded within the
		// context.
		if first := st.FirstEncoded(); st.Compressed() && (st.Warning == nil) != (first <= ctx) {
			t.Fatalf("NewPolicy(%+v): warning %q with the first block encoded at %d tokens of %d", s, st.Warning, first, ctx)
		}
	})
}

// A setting given twice, under any of its names, is an error in the
// grammar, in the flags and for SettingName's users; the error names both.
func TestDuplicateSettings(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"kv=int8,kv=int4", "kv=int4: kv-codec is already set by kv=int8; give each setting once"},
		{"kv=int8,kv-codec=int4", "kv-codec=int4: kv-codec is already set by kv=int8; give each setting once"},
		{"k=kakeya:b=3,rank=4,k=int8", "k=int8: k-codec is already set by k=kakeya:b=3; give each setting once"},
		{"hot=64,block=16,hot-window=0", "hot-window=0: hot-window is already set by hot=64"},
		{"sinks=4,sinks=4", "sinks=4: sinks is already set by sinks=4"},
		{"precond=1,precondition=0", "precondition=0: precond is already set by precond=1"},
		{"layers=int8/int8,policy=/nonexistent.json", "policy=/nonexistent.json: layer-codecs is already set by layers=int8/int8"},
		// Inside a codec spec the codec's own grammar finds the repeat.
		{"kv=kakeya:b=3,b=4", `the bit width is given twice (b=3, then b=4)`},
	} {
		s, err := ParseSpec(tt.in)
		if err == nil {
			err = s.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSpec(%q): error %v, want one containing %q", tt.in, err, tt.want)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--kv-codec", "int8", "--kv-codec", "int4"}, `invalid value "int4" for flag -kv-codec: --kv-codec is already set by --kv-codec "int8"; give each setting once`},
		{[]string{"--hot-window=64", "--hot-window=64"}, `--hot-window is already set by --hot-window "64"`},
		{[]string{"--precond", "--precond=false"}, `--precond is already set by --precond "true"`},
		{[]string{"--layer-codecs", "int8/int8", "--kv-policy", "p.json"}, `--layer-codecs is already set by --layer-codecs "int8/int8"`},
	} {
		var s Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s.RegisterFlags(fs)
		if err := fs.Parse(tt.args); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
	for _, tt := range []struct{ key, want string }{
		{"kv", "kv-codec"}, {"kv-codec", "kv-codec"}, {"hot", "hot-window"}, {"cb", "calib-codebooks"},
		{"policy", "layer-codecs"}, {"layers", "layer-codecs"}, {"foo", ""},
	} {
		if got, ok := SettingName(tt.key); got != tt.want || ok != (tt.want != "") {
			t.Errorf("SettingName(%q) = %q, %v; want %q", tt.key, got, ok, tt.want)
		}
	}
}

// A compressed cache encodes a block once the sequence holds the sinks
// (in whole blocks), one block and the hot window; when no sequence gets
// that long, NothingCompressed says so and NewPolicy's settings carry it.
func TestNothingCompressed(t *testing.T) {
	const msg = "nothing will be compressed: with --hot-window %d, --sinks %d and %d-token blocks the first block is encoded once a sequence holds %s, and sequences here hold at most %d; lower --hot-window or --sinks (or --block-size)"
	for _, tt := range []struct {
		st    Settings
		n     int
		first int
		want  string
	}{
		{Settings{BlockSize: 16}, 10, 0, ""}, // uncompressed
		{Settings{K: "int8", BlockSize: 16, HotWindow: 16}, 32, 32, ""},
		{Settings{K: "int8", BlockSize: 16, HotWindow: 16}, 31, 32, fmt.Sprintf(msg, 16, 0, 16, "32 tokens", 31)},
		{Settings{K: "int8", BlockSize: 16, HotWindow: 16}, 0, 32, ""}, // unknown length
		{Settings{V: "int4", BlockSize: 16, HotWindow: 47, Sinks: 1}, 79, 79, ""},
		{Settings{V: "int4", BlockSize: 16, HotWindow: 47, Sinks: 1}, 78, 79, fmt.Sprintf(msg, 47, 1, 16, "79 tokens", 78)},
		{Settings{V: "int4", BlockSize: 16, Sinks: 32}, 48, 48, ""},
		{Settings{K: "int8", BlockSize: 64, HotWindow: 4096}, 2048, 4160, fmt.Sprintf(msg, 4096, 0, 64, "4160 tokens", 2048)},
		{Settings{K: "int8", BlockSize: 64, Sinks: 2048}, 2048, 2112, fmt.Sprintf(msg, 0, 2048, 64, "2112 tokens", 2048)},
		{Settings{K: "int8", BlockSize: 64, HotWindow: math.MaxInt}, 2048, math.MaxInt, fmt.Sprintf(msg, math.MaxInt, 0, 64, "more than 2048 tokens", 2048)},
		{Settings{K: "int8", BlockSize: 64, Sinks: math.MaxInt - 64}, 2048, math.MaxInt, fmt.Sprintf(msg, 0, math.MaxInt-64, 64, "more than 2048 tokens", 2048)},
		{Settings{Layers: []LayerPlan{{"none", "int8"}}, BlockSize: 8, HotWindow: 8}, 15, 16, fmt.Sprintf(msg, 8, 0, 8, "16 tokens", 15)},
	} {
		got := ""
		if w := tt.st.NothingCompressed(tt.n); w != nil {
			got = FlagError(w).Error() // the tools' words
			if lib := w.Error(); !strings.Contains(lib, "with Spec.HotWindow") || strings.Contains(lib, "--") {
				t.Errorf("%+v.NothingCompressed(%d) = %q, want the Spec's fields named", tt.st, tt.n, lib)
			}
		}
		if got != tt.want {
			t.Errorf("%+v.NothingCompressed(%d) = %q\nwant %q", tt.st, tt.n, got, tt.want)
		}
		if got := tt.st.FirstEncoded(); got != tt.first {
			t.Errorf("%+v.FirstEncoded() = %d, want %d", tt.st, got, tt.first)
		}
	}
	m := Shape{Layers: 3, KVHeads: 2, HeadDim: 8, MaxContext: 256}
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Spec{KV: "int8"}, ""},
		{Spec{}, ""},
		{Spec{KV: "int8", HotWindow: 192}, ""},
		{Spec{KV: "int8", HotWindow: 193}, fmt.Sprintf(msg, 193, 0, 64, "257 tokens", 256)},
		{Spec{KV: "int8", HotWindow: 1 << 20}, fmt.Sprintf(msg, 1<<20, 0, 64, "1048640 tokens", 256)},
		{Spec{KV: "int8", Sinks: 256}, fmt.Sprintf(msg, 64, 256, 64, "384 tokens", 256)},
		{Spec{KV: "int8", BlockSize: 256}, fmt.Sprintf(msg, 256, 0, 256, "512 tokens", 256)},
	} {
		_, st, err := NewPolicy(tt.spec, m, nil)
		if err != nil {
			t.Fatalf("%+v: %v", tt.spec, err)
		}
		got := ""
		if st.Warning != nil {
			got = FlagError(st.Warning).Error()
		}
		if got != tt.want {
			t.Errorf("%+v: Warning %q\nwant %q", tt.spec, got, tt.want)
		}
	}
}

// FuzzSpecFlags checks the flag form of the settings: no argument list
// makes it panic, a setting repeated is refused, and flags that parse and
// validate fill the Spec that their String form reads back as.
func FuzzSpecFlags(f *testing.F) {
	for _, s := range []string{
		"--kv-codec int8", "--k-codec kakeya:b=3,rank=4 --v-codec=int4 --boundary 0;-1 --block-size 64 --hot-window 64 --sinks 4 --precond --calib-codebooks=false",
		"--kv-codec int8 --kv-codec int4", "--hot-window 0 --cache-type f32", "--layer-codecs none/int8|int8/none --hot-window 8",
		"--kv-codec kakeya:b=0", "--k-bits 0", "--precond --precond", "--block-size -1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		var s Spec
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			return
		}
		// Each setting appeared at most once among the parsed flags.
		seen := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) {
			set, _ := SettingName(fl.Name)
			if seen[set] {
				t.Fatalf("%q: setting %s accepted twice", line, set)
			}
			seen[set] = true
		})
		if s.Validate() != nil || s.String() == "" {
			return
		}
		back, err := ParseSpec(s.String())
		if err != nil || back != s {
			t.Fatalf("flags %q gave %+v; its String %q reads back as %+v, %v", line, s, s.String(), back, err)
		}
	})
}
