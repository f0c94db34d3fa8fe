package eval

import (
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

func TestFrontier(t *testing.T) {
	pts := []paretoPoint{
		{"int4", 2.5, 8e-5}, {"kivi-4", 2.5, 4e-5}, {"b3", 2.55, 4e-5}, {"b2", 2.97, 2.8e-4},
		{"turbo3", 3.14, 4.7e-4}, {"b2-pre", 3.03, 2.7e-3}, {"kivi-2", 3.44, 1.1e-3}, {"b4", 2.24, 1e-5},
	}
	var got []string
	for _, p := range frontier(pts) {
		got = append(got, p.name)
	}
	// kivi-4 and int4 lose to b3 (more bytes, no lower KL); b2-pre to turbo3.
	want := []string{"b4", "b3", "b2", "turbo3", "kivi-2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("frontier %v, want %v", got, want)
	}
}

func TestWritePareto(t *testing.T) {
	cfg := func(name, spec string) Config {
		s, err := kvconfig.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return Config{Name: name, Spec: s}
	}
	r := &Report{Configs: []ConfigReport{
		{Config: Reference(), Ratio: 1},
		{Config: cfg("int8", "kv=int8"), Ratio: 1.69, MeanKL: 0},
		{Config: cfg("int4", "kv=int4"), Ratio: 2.5, MeanKL: 8e-5},
		{Config: cfg("b2", "kv=kakeya-block:b=2"), Ratio: 2.97, MeanKL: 2.8e-4},
	}}
	path := filepath.Join(t.TempDir(), "pareto.png")
	if err := r.WritePareto(path, "test"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 400 {
		t.Errorf("plot is %v", b)
	}
	if pts, off := r.paretoPoints(); len(pts) != 2 || !reflect.DeepEqual(off, []string{"int8"}) {
		t.Errorf("points %v, left off %v", pts, off)
	}
	// One point: the ranges must not collapse (a log axis of one value
	// panics inside the plotting library).
	one := &Report{Configs: []ConfigReport{{Config: Reference()}, {Config: cfg("int4", "kv=int4"), Ratio: 2.5, MeanKL: 8e-5}}}
	if err := one.WritePareto(path, "one"); err != nil {
		t.Errorf("one point: %v", err)
	}
	empty := &Report{Configs: []ConfigReport{{Config: Reference()}}}
	if err := empty.WritePareto(path, "x"); err == nil || !strings.Contains(err.Error(), "no configuration with a positive KL") {
		t.Errorf("empty report: %v", err)
	}
}
