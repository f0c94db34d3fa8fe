package eval

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		in   string
		want Config
		err  string
	}{
		{in: "name=kk3,k=kakeya:b=3,v=kakeya:b=3,boundary=0;-1,block=256,hot=64,precond=1",
			want: Config{Name: "kk3", K: "kakeya:b=3", V: "kakeya:b=3", Boundary: []int{0, -1}, BlockSize: 256, HotWindow: 64, Precondition: true}},
		{in: "name=i4,kv=int4,sinks=4", want: Config{Name: "i4", K: "int4", V: "int4", Sinks: 4}},
		{in: "name=u", want: Config{Name: "u"}},
		{in: "name=k8,k=int8", want: Config{Name: "k8", K: "int8"}},
		// commas inside a codec spec continue the spec
		{in: "name=m,k=kakeya:b=3,r=4,v=int4", want: Config{Name: "m", K: "kakeya:b=3,r=4", V: "int4"}},
		{in: "name=m,kv=kakeya:b=2,outliers=8,hot=16", want: Config{Name: "m", K: "kakeya:b=2,outliers=8", V: "kakeya:b=2,outliers=8", HotWindow: 16}},
		{in: "name=m,boundary=0; 1;-2", want: Config{Name: "m", Boundary: []int{0, 1, -2}}},
		{in: "name=m,precond=false", want: Config{Name: "m"}},
		{in: "name=m,kv=kakeya:b=2,precond=1,cb=1", want: Config{Name: "m", K: "kakeya:b=2", V: "kakeya:b=2", Precondition: true, Codebooks: true}},

		{in: "", err: "not key=value"},
		{in: "k=int4", err: "name is missing"},
		{in: "name=a,bits=3", err: `unknown key "bits"`},
		{in: "name=a,int4", err: "not key=value"},
		{in: "name=a,block=0", err: "must be positive"},
		{in: "name=a,block=-4", err: "non-negative integer"},
		{in: "name=a,hot=x", err: "non-negative integer"},
		{in: "name=a,precond=2", err: "want 0 or 1"},
		{in: "name=a,cb=maybe", err: `cb="maybe": want 0 or 1`},
		{in: "name=a,boundary=0,1", err: `"1" is not key=value`},
		{in: "name=a,boundary=0:1", err: "separate layer indices with ';'"},
		{in: "name=a,boundary=", err: "no layers"},
		{in: "name=a,boundary=1;1", err: "listed twice"},
		{in: "name=a,name=b", err: "name given twice"},
		{in: "name=a,k=int4,kv=int8", err: "kv given twice"},
		{in: "name=a b,k=int4", err: "space"},
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

func TestParseConfigsJSON(t *testing.T) {
	good := `[{"name":"kk3","k":"kakeya:b=3","v":"kakeya:b=3","boundary":[0,-1],"block":256,"hot":64,"sinks":4,"precond":true,"cb":true},
	          {"name":"i8","k":"int8","v":"int8"}]`
	got, err := ParseConfigsJSON([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []Config{
		{Name: "kk3", K: "kakeya:b=3", V: "kakeya:b=3", Boundary: []int{0, -1}, BlockSize: 256, HotWindow: 64, Sinks: 4, Precondition: true, Codebooks: true},
		{Name: "i8", K: "int8", V: "int8"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []struct{ in, err string }{
		{`[{"name":"a","bits":3}]`, `unknown field "bits"`},
		{`[{"k":"int4"}]`, "entry 0"},
		{`{"name":"a"}`, "cannot unmarshal"},
		{`[{"name":"a","hot":-1}]`, "negative"},
		{`[] []`, "trailing"},
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
