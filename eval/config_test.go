package eval

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		in   string
		want Config
		err  string
	}{
		{in: "name=kk3,k=kakeya-block:b=3,v=kakeya-block:b=3,boundary=0;-1,block=256,hot=64,precond=1",
			want: Config{Name: "kk3", Spec: kvconfig.Spec{K: "kakeya-block:b=3", V: "kakeya-block:b=3", Boundary: "0,-1", BlockSize: 256, HotWindow: 64, Precondition: kvconfig.On}}},
		{in: "name=i4,kv=int4,sinks=4", want: Config{Name: "i4", Spec: kvconfig.Spec{KV: "int4", Sinks: 4}}},
		{in: "name=u", want: Config{Name: "u"}},
		{in: "name=k8,k=int8", want: Config{Name: "k8", Spec: kvconfig.Spec{K: "int8"}}},
		// name= is optional: the settings name the configuration.
		{in: "kv=int8,hot=0", want: Config{Name: "kv=int8,hot=0", Spec: kvconfig.Spec{KV: "int8", HotWindow: -1}}},
		{in: "block-size=32,kv-codec=int4", want: Config{Name: "kv=int4,block=32", Spec: kvconfig.Spec{KV: "int4", BlockSize: 32}}},
		// The name may come anywhere; names may hold spaces.
		{in: "kv=int8,name=my int8", want: Config{Name: "my int8", Spec: kvconfig.Spec{KV: "int8"}}},
		// commas inside a codec spec continue the spec
		{in: "name=m,k=kakeya-block:b=3,r=4,v=int4", want: Config{Name: "m", Spec: kvconfig.Spec{K: "kakeya-block:b=3,r=4", V: "int4"}}},
		{in: "name=m,kv=kakeya-block:b=2,outliers=8,hot=16", want: Config{Name: "m", Spec: kvconfig.Spec{KV: "kakeya-block:b=2,outliers=8", HotWindow: 16}}},
		{in: "name=m,boundary=0; 1;-2", want: Config{Name: "m", Spec: kvconfig.Spec{Boundary: "0,1,-2"}}},
		{in: "name=m,boundary=none", want: Config{Name: "m", Spec: kvconfig.Spec{Boundary: "none"}}},
		{in: "name=m,precond=false", want: Config{Name: "m", Spec: kvconfig.Spec{Precondition: kvconfig.Off}}},
		{in: "name=m,kv=kakeya-block:b=2,precond=1,cb=1", want: Config{Name: "m", Spec: kvconfig.Spec{KV: "kakeya-block:b=2", Precondition: kvconfig.On, Codebooks: kvconfig.On}}},
		// k and v override kv, in any order.
		{in: "name=a,k=int4,kv=int8", want: Config{Name: "a", Spec: kvconfig.Spec{KV: "int8", K: "int4"}}},

		{in: "", err: "not key=value"},
		{in: "name=", err: "empty name"},
		{in: "name=a,foo=1", err: "unknown key foo (valid: kv-codec, kv,"},
		{in: "name=a,bits=3", err: "unknown key bits"},
		{in: "name=a,int4", err: "not key=value"},
		{in: "name=a,block=0", err: `block-size "0": want an integer >= 1`},
		{in: "name=a,block=-4", err: `block-size "-4": want an integer >= 1`},
		{in: "name=a,hot=x", err: `hot-window "x": want an integer >= 0`},
		{in: "name=a,precond=2", err: "want 1 or 0"},
		{in: "name=a,cb=maybe", err: `calib-codebooks "maybe": want 1 or 0`},
		{in: "name=a,boundary=0,1", err: `"1" is not key=value`},
		{in: "name=a,boundary=0:1", err: `"0:1" is not an integer`},
		{in: "name=a,boundary=1;1", err: "listed twice"},
		{in: "name=a,name=b", err: "name given twice"},
		{in: "name=a,kv=int8,kv=int4", err: `eval: config "name=a,kv=int8,kv=int4": kv=int4: kv-codec is already set by kv=int8; give each setting once`},
		{in: "name=a,hot=8,hot-window=16", err: "hot-window=16: hot-window is already set by hot=8"},
		{in: "name=a\tb,k=int4", err: "tab"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseConfig(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			// String writes the same grammar back.
			again, err := ParseConfig(got.String())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("round trip through %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct{ in, err string }{
		{"name=a,kv=int8", ""},
		{"name=a,kv=int5", `Spec.KV "int5": codec: unknown codec "int5"`},
		{"name=a,kv=int8,foo=1", `Spec.KV "int8,foo=1"`},
		{"name=a,v=int8,precond=1", "keys are uncompressed"},
		{"name=a,kv=int8,k-bits=3", "Spec.KBits 3: codec int8 has a fixed width"},
	} {
		c, err := ParseConfig(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		err = c.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: Validate() = %v, want %q", tt.in, err, tt.err)
		}
	}
}

func TestParseConfigsJSON(t *testing.T) {
	good := `[{"name":"kk3","k":"kakeya-block:b=3","v":"kakeya-block:b=3","boundary":[0,-1],"block":256,"hot":64,"sinks":4,"precond":true,"cb":true},
	          {"name":"i8","k":"int8","v":"int8","hot":0,"boundary":[]},
	          {"kv-codec":"int4","block-size":32,"boundary":"none","cb":false}]`
	got, err := ParseConfigsJSON([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []Config{
		{Name: "kk3", Spec: kvconfig.Spec{K: "kakeya-block:b=3", V: "kakeya-block:b=3", Boundary: "0,-1", BlockSize: 256, HotWindow: 64, Sinks: 4, Precondition: kvconfig.On, Codebooks: kvconfig.On}},
		{Name: "i8", Spec: kvconfig.Spec{K: "int8", V: "int8", HotWindow: -1, Boundary: "none"}},
		{Name: "kv=int4,block=32,boundary=none,cb=0", Spec: kvconfig.Spec{KV: "int4", BlockSize: 32, Boundary: "none", Codebooks: kvconfig.Off}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []struct{ in, err string }{
		{`[{"name":"a","bits":3}]`, "entry 0: unknown key bits (valid:"},
		{`[{"name":"a","block":1.5}]`, `block-size "1.5"`},
		{`[{"name":"a","boundary":[0,"x"]}]`, "not a number"},
		{`[{"name":"a","k":null}]`, "k: unsupported JSON value"},
		{`[{}]`, "entry 0: name is missing"},
		{`{"name":"a"}`, "cannot unmarshal"},
		{`[{"name":"a","hot":-1}]`, `hot-window "-1": want an integer >= 0`},
		{`[] []`, "trailing"},
		{`[{"name":"a","kv":"int8","kv-codec":"int4"}]`, "eval: configs: entry 0: kv-codec: kv-codec is already set by kv; give each setting once"},
		{`[{"name":"a","policy":"p.json","layers":"int8/int8"}]`, "entry 0: policy: layer-codecs is already set by layers; give each setting once"},
	} {
		if _, err := ParseConfigsJSON([]byte(bad.in)); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s: err = %v, want %q", bad.in, err, bad.err)
		}
	}
}

func TestCheckNames(t *testing.T) {
	if err := CheckNames([]Config{{Name: "a"}, {Name: "b"}}); err != nil {
		t.Error(err)
	}
	if err := CheckNames([]Config{{Name: "a"}, {Name: "a"}}); err == nil {
		t.Error("duplicate names: want an error")
	}
	if err := CheckNames([]Config{{Name: "ref"}}); err == nil {
		t.Error("name of the reference: want an error")
	}
}
