package kvconfig

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// flagWords says err as the tools do (internal/kvflags.Error, which this
// package's tests cannot import): each setting by its flag.
func flagWords(err error) error {
	var se *SettingError
	if !errors.As(err, &se) {
		return err
	}
	flag := func(key string) string {
		switch key {
		case "calib":
			return " (--calib)"
		case "or-kv-policy":
			return " (or --kv-policy)"
		}
		return "--" + key
	}
	return errors.New(strings.Replace(err.Error(), se.Error(), se.Render(flag), 1))
}

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

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Spec
		err  string
	}{
		{"kv=int8", Spec{KV: "int8"}, ""},
		{"k=kakeya-block:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0",
			Spec{K: "kakeya-block:b=3,rank=4", V: "int4", Boundary: "0,-1", BlockSize: 64, HotWindow: 64, Sinks: 4, Precondition: On, Codebooks: Off}, ""},
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
		{"layers=none/BF16|kakeya-block:b=3,rank=4/int4,hot=32", Spec{Layers: "none/none|kakeya-block:b=3,rank=4/int4", HotWindow: 32}, ""},
		{"layers=int8", Spec{}, `layer 0 "int8": want K/V`},
		{"layers=int8/", Spec{}, "layer 0 \"int8/\": empty value codec"},
		{"layers=none/none|int9/none", Spec{}, `layer 1 key codec "int9"`},
		{"policy=/nonexistent/plan.json", Spec{}, "policy file: open /nonexistent/plan.json"},
	}
	for _, tt := range tests {
		got, err := Parser{ReadFile: os.ReadFile}.Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) = %+v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if tt.in == "kv=int8,foo=1" {
			if err != nil || got.KV != "int8,foo=1" {
				t.Errorf("Parse(%q) = %+v, %v; want kv %q", tt.in, got, err, "int8,foo=1")
			}
			if err := got.Validate(); err == nil || !strings.Contains(err.Error(), "foo") {
				t.Errorf("Validate(%+v) = %v, want an error naming foo", got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		// String writes what Parse reads back.
		if back, err := Parse(got.String()); err != nil || back != got {
			t.Errorf("Parse(%q.String() = %q) = %+v, %v; want %+v", tt.in, got.String(), back, err, got)
		}
	}
	if s := (Spec{}).String(); s != "" {
		t.Errorf("zero Spec String() = %q, want empty", s)
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		spec Spec
		err  string
	}{
		{Spec{}, ""},
		{Spec{K: "kakeya-block:b=3,rank=4", V: "int4", Boundary: "0,-1", HotWindow: 64, Sinks: 4}, ""},
		{Spec{K: "int8", Precondition: On}, ""},
		{Spec{KV: "kakeya", KBits: 2}, ""},
		{Spec{Sinks: -4}, "--sinks -4 must be >= 0"},
		{Spec{BlockSize: -4}, "--block-size -4 must be > 0"},
		{Spec{Boundary: "1,1"}, "layer 1 listed twice"},
		{Spec{K: "int5"}, `--k-codec "int5": codec: unknown codec "int5"`},
		{Spec{KV: "int5"}, `--kv-codec "int5"`},
		{Spec{V: "int8:b=3"}, "--v-codec"},
		{Spec{K: "kakeya-block:rank=x"}, "rank"},
		{Spec{V: "int8", Precondition: On}, "keys are uncompressed"},
		{Spec{Codebooks: On}, "keys and values are uncompressed"},
		{Spec{KV: "int8", KBits: 4}, "--k-bits 4: codec int8 has a fixed width (only kakeya-block and turbo take a bit width)"},
		{Spec{KV: "kakeya-block:b=3", KBits: 4}, "--k-bits 4 contradicts b=3 in --kv-codec"},
		{Spec{VBits: 4}, "--v-bits 4: no codec is set for that side"},
		{Spec{KV: "kakeya", VBits: 9}, "--v-bits 9"},
		{Spec{CacheType: "f16"}, `--cache-type "f16"`},
		{Spec{Layers: "none/int8|int4/none", HotWindow: 32, Precondition: On}, ""},
		{Spec{Layers: "none/int8", Precondition: On}, "keys are uncompressed"},
		{Spec{Layers: "none/int8", KV: "int8"}, "drop --kv-codec"},
		{Spec{Layers: "none/int8", Boundary: "0"}, "--boundary"},
		{Spec{Layers: "none/int8|x/y"}, `layer 1 key codec "x"`},
		{Spec{Layers: " "}, `--layer-codecs " " names no layer`},
	}
	for _, tt := range tests {
		// The tools' words; the library's name the Spec's fields.
		err := tt.spec.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(flagWords(err).Error(), tt.err)) {
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
		{Spec{KV: "int8", V: "kakeya", VBits: 2}, "int8", "kakeya-block:b=2"},
		{Spec{K: "KAKEYA:b=3"}, "kakeya-block:b=3", ""},
	}
	for _, tt := range tests {
		c, err := tt.spec.Check()
		if err != nil || c.KCodec != tt.k || c.VCodec != tt.v {
			t.Errorf("%+v: Check() = %q, %q, %v; want codecs %q, %q", tt.spec, c.KCodec, c.VCodec, err, tt.k, tt.v)
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

// FuzzParse checks that no text makes the grammar panic and that a parsed
// Spec that validates survives a round trip through String.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"kv=int8", "k=kakeya-block:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0",
		"kv-codec=kakeya,k-bits=2,v-bits=4,block-size=32,hot-window=0,calib-codebooks=1,cache-type=f32",
		"kv=int8,k=none,boundary=none", "foo=1", "k=int4:group=32,seed=7,v=int4-rot", "",
		"kv=int8,kv=int4", "kv=kakeya-block:b=3,b=4", "kv=kakeya-block:b=0", "kv=kakeya-block:outlier=-1", "kv=int8,hot=256", "kv=int8,sinks=300,block=16",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(text)
		if err != nil {
			return
		}
		if s.Validate() != nil {
			return
		}
		back, err := Parse(s.String())
		if s.String() == "" {
			return
		}
		if err != nil || back != s {
			t.Fatalf("Parse(%q) = %+v; its String %q reads back as %+v, %v", text, s, s.String(), back, err)
		}
	})
}

// A setting given twice, under any of its names, is an error in the
// grammar and for SettingName's users; the error names both.
func TestDuplicateSettings(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"kv=int8,kv=int4", "kv=int4: kv-codec is already set by kv=int8; give each setting once"},
		{"kv=int8,kv-codec=int4", "kv-codec=int4: kv-codec is already set by kv=int8; give each setting once"},
		{"k=kakeya-block:b=3,rank=4,k=int8", "k=int8: k-codec is already set by k=kakeya-block:b=3; give each setting once"},
		{"hot=64,block=16,hot-window=0", "hot-window=0: hot-window is already set by hot=64"},
		{"sinks=4,sinks=4", "sinks=4: sinks is already set by sinks=4"},
		{"precond=1,precondition=0", "precondition=0: precond is already set by precond=1"},
		{"layers=int8/int8,policy=/nonexistent.json", "policy=/nonexistent.json: layer-codecs is already set by layers=int8/int8"},
		// Inside a codec spec the codec's own grammar finds the repeat.
		{"kv=kakeya-block:b=3,b=4", `the bit width is given twice (b=3, then b=4)`},
	} {
		s, err := Parse(tt.in)
		if err == nil {
			err = s.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q): error %v, want one containing %q", tt.in, err, tt.want)
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
// that long, NothingCompressed says so.
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
			got = flagWords(w).Error() // the tools' words
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
}

// Parse reads back what String writes, for a table of specs and for
// random valid ones.
func TestRoundTrip(t *testing.T) {
	specs := []Spec{
		{KV: "int8"},
		{KV: "none"},
		{K: "kakeya-block:b=3,rank=4", V: "int4", Boundary: "0,-1", BlockSize: 64, HotWindow: 64, Sinks: 4, Precondition: On, Codebooks: Off},
		{KV: "kakeya", KBits: 2, VBits: 4, BlockSize: 32, HotWindow: -1, Codebooks: On, CacheType: "f32"},
		{KV: "int8", K: "none", Boundary: "none"},
		{Layers: "none/none|kakeya-block:b=3,rank=4/int4", HotWindow: 32, CacheType: "bf16"},
		{V: "int4-rot", Boundary: "1,2,-2"},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for len(specs) < 200+7 {
		if s := randomSpec(r); s != (Spec{}) && s.Validate() == nil {
			specs = append(specs, s)
		}
	}
	for _, s := range specs {
		text := s.String()
		back, err := Parse(text)
		if err != nil || back != s {
			t.Errorf("%+v: String %q reads back as %+v, %v", s, text, back, err)
		}
		if again := back.String(); again != text {
			t.Errorf("%+v: String %q, then %q", s, text, again)
		}
	}
}

// randomSpec returns a Spec of random settings, each in the form Parse
// gives it; not every one validates.
func randomSpec(r *rand.Rand) Spec {
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	codecs := []string{"", "", "none", "int8", "int4", "int4-rot", "bf16", "kakeya", "kakeya-block:b=3,rank=4", "kakeya-block:b=2,outliers=8"}
	count := func(least int) int {
		if r.IntN(2) == 0 {
			return 0
		}
		return least + r.IntN(300)
	}
	s := Spec{KV: pick(codecs...), K: pick(codecs...), V: pick(codecs...), BlockSize: count(1), Sinks: count(0),
		Boundary:     pick("", "none", "0,-1", "1", "0,1,-2,-1"),
		CacheType:    pick("", "bf16", "f32"),
		Precondition: Switch(r.IntN(3)), Codebooks: Switch(r.IntN(3)),
	}
	if s.HotWindow = count(0); s.HotWindow == 0 && r.IntN(2) == 0 {
		s.HotWindow = -1 // hot=0
	}
	if r.IntN(3) == 0 {
		s.KBits = 1 + r.IntN(4)
	}
	if r.IntN(3) == 0 {
		s.VBits = 1 + r.IntN(4)
	}
	if r.IntN(4) == 0 {
		layers := make([]LayerPlan, 1+r.IntN(4))
		for i := range layers {
			layers[i] = LayerPlan{K: pick(codecs[2:]...), V: pick(codecs[2:]...)}
		}
		s.KV, s.K, s.V, s.KBits, s.VBits, s.Boundary = "", "", "", 0, 0, ""
		s.Layers = FormatLayerCodecs(layers)
	}
	return s
}

// Check reads the text of a Spec once: the codecs in effect, the boundary
// layers with the default applied, and a per-layer plan.
func TestCheck(t *testing.T) {
	tests := []struct {
		spec Spec
		want Checked
	}{
		{Spec{}, Checked{}},
		{Spec{Boundary: "1"}, Checked{Spec: Spec{Boundary: "1"}}},
		{Spec{KV: "int8"}, Checked{Spec: Spec{KV: "int8"}, KCodec: "int8", VCodec: "int8", Boundary: []int{0, -1}}},
		{Spec{KV: "kakeya", KBits: 3, V: "none", Boundary: "none"}, Checked{Spec: Spec{KV: "kakeya", KBits: 3, V: "none", Boundary: "none"}, KCodec: "kakeya-block:b=3"}},
		{Spec{V: "INT4", Boundary: "2,-2"}, Checked{Spec: Spec{V: "INT4", Boundary: "2,-2"}, VCodec: "int4", Boundary: []int{2, -2}}},
		{Spec{Layers: "none/none|int8/none"}, Checked{Spec: Spec{Layers: "none/none|int8/none"}, Layers: []LayerPlan{{"none", "none"}, {"int8", "none"}}}},
	}
	for _, tt := range tests {
		got, err := tt.spec.Check()
		if err != nil {
			t.Errorf("%+v: Check: %v", tt.spec, err)
			continue
		}
		if got.Spec != tt.want.Spec || got.KCodec != tt.want.KCodec || got.VCodec != tt.want.VCodec ||
			!slices.Equal(got.Boundary, tt.want.Boundary) || !slices.Equal(got.Layers, tt.want.Layers) {
			t.Errorf("%+v: Check = %+v, want %+v", tt.spec, got, tt.want)
		}
	}
	// Check's errors are SettingErrors that name the fields.
	_, err := Spec{KV: "int8", KBits: 9}.Check()
	var se *SettingError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "Spec.KBits 9") {
		t.Errorf("Check of 9-bit int8: %v, want a SettingError naming Spec.KBits", err)
	}
}

// Without a file reader the policy key is an error, and ReadPlan reads
// through the reader it is given.
func TestParserFiles(t *testing.T) {
	if _, err := Parse("policy=p.json"); err == nil || !strings.Contains(err.Error(), "kv-policy \"p.json\": policy file p.json: this parser reads no files") {
		t.Errorf("Parse(policy=p.json) without a reader: %v", err)
	}
	files := map[string]string{
		"p.json":   `{"format": "kakeya-kv-plan/1", "layers": [{"k": "none", "v": "int8"}, {"k": "int4", "v": "bf16"}]}`,
		"bad.json": `{"format": "kakeya-kv-plan/1", "layers": []}`,
	}
	p := Parser{ReadFile: func(name string) ([]byte, error) {
		if f, ok := files[name]; ok {
			return []byte(f), nil
		}
		return nil, fmt.Errorf("open %s: %w", name, os.ErrNotExist)
	}}
	for _, tt := range []struct{ in, layers, err string }{
		{"policy=p.json,hot=8", "none/int8|int4/none", ""},
		{"policy=bad.json", "", "policy file bad.json: no layers"},
		{"policy=gone.json", "", "policy file: open gone.json: file does not exist"},
	} {
		s, err := p.Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q): %v, want an error containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || s.Layers != tt.layers || s.HotWindow != 8 {
			t.Errorf("Parse(%q) = %+v, %v; want layers %q", tt.in, s, err, tt.layers)
		}
	}
}
