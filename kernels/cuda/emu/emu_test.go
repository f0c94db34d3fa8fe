//go:build cgo && linux

package emu

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kernels/cuda"
)

// Every kernel source is part of all.cu, the one translation unit both
// clang and the emulator compile.
func TestAllIncludesEverySource(t *testing.T) {
	all, err := fs.ReadFile(cuda.Sources(), "all.cu")
	if err != nil {
		t.Fatal(err)
	}
	included := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#include "([^"]+)"`).FindAllStringSubmatch(string(all), -1) {
		included[m[1]] = true
	}
	cus, err := fs.Glob(cuda.Sources(), "*.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range cus {
		if f != "all.cu" && !included[f] {
			t.Errorf("all.cu does not include %s", f)
		}
	}
}

// Launches the device would refuse fail in the emulator too.
func TestRunRejectsBadLaunches(t *testing.T) {
	p, err := Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(p)
	// add(float *x, const float *y, int n): 8 + 8 + 4 bytes, the .param
	// space's size (no padding after the last).
	good := make([]byte, 20)
	for _, c := range []struct {
		name        string
		kernel      string
		grid, block [3]uint32
		shared      uint32
		args        []byte
		want        string
	}{
		{"unknown kernel", "nope", [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, good, "no kernel"},
		{"short arguments", "add", [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, good[:16], "bytes of arguments"},
		{"padded arguments", "add", [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, append(good, 0, 0, 0, 0), "bytes of arguments"},
		{"empty grid", "add", [3]uint32{0, 1, 1}, [3]uint32{32, 1, 1}, 0, good, "grid"},
		{"grid y", "add", [3]uint32{1, 65536, 1}, [3]uint32{32, 1, 1}, 0, good, "grid"},
		{"big block", "add", [3]uint32{1, 1, 1}, [3]uint32{1025, 1, 1}, 0, good, "block"},
		{"shared", "add", [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 1 << 20, good, "shared"},
	} {
		err := Run(c.kernel, c.grid, c.block, c.shared, c.args, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

func TestKernelsAreUnique(t *testing.T) {
	ks := Kernels()
	if len(ks) == 0 {
		t.Fatal("no kernels")
	}
	s := slices.Clone(ks)
	slices.Sort(s)
	if len(slices.Compact(s)) != len(ks) {
		t.Fatalf("duplicate kernel names in %v", ks)
	}
}
