package codec

import (
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
		{"kakeya", "kakeya-b3-r4v0.95c4-o3x4", "kakeya"},
		{"kakeya:b=3,rank=8,outlier=3.5", "kakeya-b3-r8v0.95c4-o3.5x4", "kakeya:b=3,outlier=3.5,rank=8"},
		{" Kakeya:bits=2,rank=0,outlier=0,signs=false ", "kakeya-b2-nosign", "kakeya:b=2,outlier=0,rank=0,signs=false"},
		{"kakeya:cbits=16,var=0.9,maxout=8,seed=0x10", "kakeya-b3-r4v0.9c16-o3x8", "kakeya:cbits=16,maxout=8,seed=0x10,var=0.9"},
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
	for in, want := range map[string]string{
		"":                     "empty codec name",
		"zstd":                 "valid: f32, bf16",
		"kakeya:b":             "not key=value",
		"kakeya:b=x":           "bits",
		"kakeya:rank=1,rank=2": "twice",
		"kakeya:foo=1":         `unknown key "foo"`,
		"kakeya:b=5":           "bits 5 not in 1..4",
		"kakeya:rank=-1":       "max rank",
		"kakeya:cbits=3":       "coefficient bits",
		"kakeya:signs=maybe":   "signs",
		"int8:b=4":             "takes no bits",
		"int4:group=0":         "group 0",
		"int4:params=f32":      `params="f32": want 8bit (the default) or f16`,
	} {
		s, err := ParseSpec(in)
		if err == nil {
			_, err = New(s)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", in, err, want)
		}
	}
}
