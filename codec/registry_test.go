package codec

import (
	"bytes"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseSpecAndNew(t *testing.T) {
	tests := []struct {
		in, name, str string
	}{
		{"bf16", "bf16", "bf16"},
		{"f32", "f32", "f32"},
		{"int8", "int8", "int8"},
		{"int4", "int4", "int4"},
		{"int4-rot", "int4-rot", "int4-rot"},
		{"int4-k:group=64", "int4-k-g64", "int4-k:group=64"},
		{"int4:params=f16", "int4-f16", "int4:params=f16"},
		{"int2-k:params=8bit", "int2-k", "int2-k:params=8bit"},
		{"kakeya-block", "kakeya-b3-r4v0.95c4-o3x4", "kakeya-block"},
		{"kakeya-block:b=3,rank=8,outlier=3.5", "kakeya-b3-r8v0.95c4-o3.5x4", "kakeya-block:b=3,outlier=3.5,rank=8"},
		{" Kakeya-block:bits=2,rank=0,outlier=0,signs=false ", "kakeya-b2-nosign", "kakeya-block:b=2,outlier=0,rank=0,signs=false"},
		{"kakeya-block:cbits=16,var=0.9,maxout=8,seed=0x10", "kakeya-b3-r4v0.9c16-o3x8", "kakeya-block:cbits=16,maxout=8,seed=0x10,var=0.9"},
		{"kakeya-pc", "kakeya-pc-r2.5", "kakeya-pc"},
		{"kakeya-pc:rate=1.75,maxbits=4,block=32", "kakeya-pc-r1.75-m4-n32", "kakeya-pc:block=32,maxbits=4,rate=1.75"},
		{"kakeya-pc:qw=true", "kakeya-pc-r2.5-qw", "kakeya-pc:qw=true"},
		{"kakeya-pc:rate=2,ec=true", "kakeya-pc-r2-ec", "kakeya-pc:ec=true,rate=2"},
		{"kvtc:rate=2", "kvtc-r2", "kvtc:rate=2"},
	}
	for _, tt := range tests {
		s, err := ParseSpec(tt.in)
		if err != nil {
			t.Fatalf("ParseSpec(%q): %v", tt.in, err)
		}
		if s.String() != tt.str {
			t.Errorf("ParseSpec(%q).String() = %q, want %q", tt.in, s.String(), tt.str)
		}
		c, err := New(s)
		if err != nil {
			t.Fatalf("New(%q): %v", tt.in, err)
		}
		if c.Name() != tt.name {
			t.Errorf("New(%q).Name() = %q, want %q", tt.in, c.Name(), tt.name)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty codec name"},
		{"zstd", "valid: f32, bf16"},
		{"kakeya-block:b", "not key=value"},
		{"kakeya-block:b=x", "bits"},
		{"kakeya-block:rank=1,rank=2", `codec: spec "kakeya-block:rank=1,rank=2": key "rank" given twice (rank=1, then rank=2); give it once`},
		{"kakeya-block:b=3,b=4", `codec: spec "kakeya-block:b=3,b=4": the bit width is given twice (b=3, then b=4); give it once`},
		{"kakeya-block:bits=3,b=3", `the bit width is given twice (bits=3, then b=3)`},
		{"kakeya-block:foo=1", `unknown key "foo"`},
		{"kakeya-block:b=0", `codec: spec "kakeya-block:b=0": b=0: want a bit width in 1..4 for kakeya-block`},
		{"kakeya-block:b=5", `codec: spec "kakeya-block:b=5": b=5: want a bit width in 1..4 for kakeya-block`},
		{"turbo:bits=1", `codec: spec "turbo:bits=1": bits=1: want a bit width in 2..4 for turbo`},
		{"int8:b=0", `codec: spec "int8:b=0": b=0: want a bit width >= 1`},
		{"kakeya-block:rank=-1", `codec: spec kakeya-block:rank=-1: rank="-1": want an integer in 0..255`},
		{"kakeya-block:rank=256", `rank="256": want an integer in 0..255`},
		{"kakeya-block:maxout=300", `maxout="300": want an integer in 0..255`},
		{"kakeya-block:cbits=3", `codec: spec kakeya-block:cbits=3: cbits="3": want 4, 8 or 16`},
		{"kakeya-block:var=0", `var="0": want a variance ratio in (0, 1]`},
		{"kakeya-block:var=NaN", `var="NaN": want a variance ratio in (0, 1]`},
		{"kakeya-block:outlier=-1", `codec: spec kakeya-block:outlier=-1: outlier="-1": want a threshold >= 0 in standard deviations (0 turns outliers off)`},
		{"kakeya-block:outlier=Inf", `outlier="Inf": want a threshold >= 0`},
		{"kakeya-block:outlier=1e39", `outlier="1e39": want a threshold >= 0`},
		{"kakeya-block:signs=maybe", "signs"},
		{"turbo:group=48", `codec: spec turbo:group=48: group="48": want a power of two in 2..1024`},
		{"int8:b=4", "takes no bits"},
		{"int4:group=0", `codec: spec int4:group=0: group="0": want an integer in 1..65535`},
		{"int4:params=f32", `params="f32": want 8bit (the default) or f16`},
	}
	for _, tt := range tests {
		s, err := ParseSpec(tt.in)
		if err == nil {
			_, err = New(s)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.in, err, tt.want)
		}
	}
}

// FuzzParseSpec checks that no text makes the codec grammar panic, that
// errors come from this package, and that an accepted spec survives a
// round trip through String: the same Spec, and the same codec from New.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"int8", "kakeya-block", "kakeya-block:b=3,rank=8,outlier=3.5", " Kakeya-block:bits=2,rank=0,outlier=0,signs=false ",
		"kakeya-block:cbits=16,var=0.9,maxout=8,seed=0x10", "int4-k:group=64", "int4:params=f16", "turbo:b=3,group=64",
		"kakeya-block:b=3,b=4", "kakeya-block:b=0", "kakeya-block:outlier=-1", "int8:b=4", "kakeya-block:rank=1,rank=2", "", ":",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSpec(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "codec: ") {
				t.Errorf("ParseSpec(%q): error %q does not name the package", text, err)
			}
			return
		}
		if lo, hi, ok := bitsRange(s.Name); s.Bits != 0 && ok && (s.Bits < lo || s.Bits > hi) {
			t.Fatalf("ParseSpec(%q) accepted bits %d outside %d..%d", text, s.Bits, lo, hi)
		}
		back, err := ParseSpec(s.String())
		if err != nil || back.Name != s.Name || back.Bits != s.Bits || !maps.Equal(back.Params, s.Params) {
			t.Fatalf("ParseSpec(%q) = %+v; its String %q reads back as %+v, %v", text, s, s.String(), back, err)
		}
		c, err := New(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "codec: ") {
				t.Errorf("New(%q): error %q does not name the package", text, err)
			}
			return
		}
		c2, err := New(back)
		if err != nil || c2.Name() != c.Name() {
			t.Fatalf("New(%q) = %s, but its String %q builds %v, %v", text, c.Name(), s.String(), c2, err)
		}
	})
}

// TestNamesBuild: every name Names lists (the list the tools' help prints)
// builds a codec that round-trips a block, and a name it does not list is
// unknown. kakeya-pc, which needs a calibration's statistics, refuses to
// code without them and round-trips once given them.
func TestNamesBuild(t *testing.T) {
	for _, name := range Names() {
		c, err := New(Spec{Name: name})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		const n, d = 64, 64
		x := make([]float32, n*d)
		for i := range x {
			x[i] = float32(i%17) - 8
		}
		if pc, ok := c.(*KakeyaPC); ok {
			if _, err := pc.Encode(nil, x, n, d); err == nil || !strings.Contains(err.Error(), "calibration") {
				t.Errorf("%s without statistics: encode error %v, want one naming the calibration", name, err)
			}
			acc := NewPCAAccumulator(d)
			if err := acc.AddBlock(x, n); err != nil {
				t.Fatal(err)
			}
			st, err := acc.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if c, err = NewKakeyaPC(pc.Options(), st, nil); err != nil {
				t.Fatal(err)
			}
		}
		enc, err := c.Encode(nil, x, n, d)
		if err != nil {
			t.Errorf("%s: encode: %v", name, err)
			continue
		}
		if err := c.Decode(make([]float32, n*d), enc, n, d); err != nil {
			t.Errorf("%s: decode: %v", name, err)
		}
	}
	for _, name := range []string{"int2-rot", "int2-k-rot"} {
		if !slices.Contains(Names(), name) {
			t.Errorf("Names() lacks %s", name)
		}
	}
	if _, err := New(Spec{Name: "int3"}); err == nil || !strings.Contains(err.Error(), `unknown codec "int3" (valid: f32, bf16, int8, int4, int4-rot, int4-k, int4-k-rot, int2, int2-rot, int2-k, int2-k-rot, kakeya-block, turbo, fp8, kakeya-pc, kvtc)`) {
		t.Errorf("int3: %v", err)
	}
}

// Parse is ParseSpec then New: the codec it builds, and either's errors.
func TestParse(t *testing.T) {
	c, err := Parse("kakeya-block:b=2,rank=3")
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := ParseSpec("kakeya-block:b=2,rank=3")
	want, _ := New(sp)
	x := make([]float32, 16*8)
	for i := range x {
		x[i] = float32(i%11) - 5
	}
	got, _ := c.Encode(nil, x, 16, 8)
	exp, _ := want.Encode(nil, x, 16, 8)
	if c.Name() != want.Name() || string(got) != string(exp) {
		t.Errorf("Parse built %s encoding %d bytes, New %s %d", c.Name(), len(got), want.Name(), len(exp))
	}
	for _, bad := range []string{"", "kakeya-block:b", "int3", "int8:rank=2"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// The old spelling "kakeya" of kakeya-block reads as kakeya-block, and
// the first read logs one line saying so; later reads log nothing.
func TestDeprecatedName(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	warned.Delete("kakeya")
	for range 3 {
		sp, err := ParseSpec("kakeya:b=2,rank=3")
		if err != nil {
			t.Fatal(err)
		}
		if got := sp.String(); got != "kakeya-block:b=2,rank=3" {
			t.Errorf("ParseSpec(kakeya:b=2,rank=3).String() = %q, want kakeya-block:b=2,rank=3", got)
		}
	}
	if _, err := New(Spec{Name: "kakeya", Bits: 2}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `level=WARN`) || !strings.Contains(lines[0], `\"kakeya\" is deprecated, write \"kakeya-block\"`) {
		t.Errorf("log = %q, want one warning naming kakeya and kakeya-block", buf.String())
	}
}

// TestRegistry: every registration is complete and found by its names;
// the principal-basis codecs are the calibrated ones; registering a name
// twice panics.
func TestRegistry(t *testing.T) {
	for _, r := range Registered() {
		for _, n := range slices.Concat([]string{r.Name}, r.Aliases, r.Deprecated) {
			got, ok := Lookup(n)
			if !ok || got.Name != r.Name {
				t.Errorf("Lookup(%q) = %q, %v; want %q", n, got.Name, ok, r.Name)
			}
		}
		for _, id := range r.Formats {
			if _, ok := BuiltinFormat(id); !ok {
				t.Errorf("%s: format %d is not described", r.Name, id)
			}
		}
		c, err := New(Spec{Name: r.Name})
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if d, ok := c.(Described); ok && d.Format().ID != r.Formats[0] {
			t.Errorf("%s writes format %d by default, registered %d first", r.Name, d.Format().ID, r.Formats[0])
		}
		_, isPC := c.(*KakeyaPC)
		if r.Principal != isPC || IsPrincipal(r.Name) != isPC {
			t.Errorf("%s: Principal %v, IsPrincipal %v; the codec is KakeyaPC: %v", r.Name, r.Principal, IsPrincipal(r.Name), isPC)
		}
	}
	if !IsPrincipal("kvtc:rate=2") || IsPrincipal("kakeya-pc:rate") || IsPrincipal("int8") {
		t.Error("IsPrincipal: wrong for kvtc:rate=2, a bad spec or int8")
	}
	if _, ok := Lookup("zstd"); ok {
		t.Error("Lookup(zstd) found a codec")
	}
	defer func() {
		if recover() == nil {
			t.Error("registering int8 twice did not panic")
		}
	}()
	Register(Registration{Name: "int8", Formats: []FormatID{FormatInt8}, New: func(Spec, *Args) (Codec, error) { return Int8{}, nil }})
}
