package cli

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	kcpu "github.com/kakeya-ai/kakeya/kernels/cpu"
)

// FastBuild says how to get the SIMD build: a plain go build or go install
// gives the scalar Go loops, since the simd/archsimd kernels need the
// GOEXPERIMENT=simd build setting.
const FastBuild = "make build, or GOEXPERIMENT=simd go install github.com/kakeya-ai/kakeya/cmd/...@latest"

// A Build describes the running binary: what --version prints.
type Build struct {
	Version    string // the main module's version; "(devel)" when unknown
	Go         string // the Go release it was built with
	OS, Arch   string
	Experiment string // GOEXPERIMENT as set at build time; "" when unset
	SIMD       bool   // built with GOEXPERIMENT=simd: the Go SIMD kernels are in
	Cgo        bool   // built with cgo: the C matmul kernels are in
	Kernels    string // the CPU kernels this binary runs on this CPU (kernels/cpu.Features)
}

// CurrentBuild returns the running binary's Build, from its build
// information and the build tags it was compiled with.
func CurrentBuild() Build {
	b := Build{
		Version: "(devel)",
		Go:      runtime.Version(),
		OS:      runtime.GOOS,
		Arch:    runtime.GOARCH,
		SIMD:    simdBuild,
		Cgo:     cgoBuild,
		Kernels: kcpu.Features(),
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" {
			b.Version = v
		}
		for _, s := range info.Settings {
			if s.Key == "GOEXPERIMENT" {
				b.Experiment = s.Value
			}
		}
	}
	return b
}

// Scalar reports whether b is the slow build of an amd64 machine: one
// built without GOEXPERIMENT=simd, whose attention and codecs run scalar
// Go loops. (Other architectures have no Go SIMD kernels to leave out.)
func (b Build) Scalar() bool { return b.Arch == "amd64" && !b.SIMD }

// WriteVersion writes name's version report for b to w: the module
// version, the toolchain and platform, the build settings the speed
// depends on, the kernels, and for a scalar build how to get the fast one.
func WriteVersion(w io.Writer, name string, b Build) {
	simd := "off"
	if b.SIMD {
		simd = "on"
	}
	cgo := "off"
	if b.Cgo {
		cgo = "on"
	}
	exp := b.Experiment
	if exp == "" {
		exp = "unset"
	}
	fmt.Fprintf(w, "%s %s\n", name, b.Version)
	fmt.Fprintf(w, "built with %s for %s/%s: GOEXPERIMENT %s, simd %s, cgo %s\n", b.Go, b.OS, b.Arch, exp, simd, cgo)
	fmt.Fprintf(w, "kernels: %s\n", b.Kernels)
	if b.Scalar() {
		fmt.Fprintf(w, "this is the scalar build (built without GOEXPERIMENT=simd), several times slower on attention and codecs; the fast build: %s\n", FastBuild)
	}
}

// versionFlag is the name of the flag Parse gives every command.
const versionFlag = "version"

// addVersionFlag registers --version on fs unless the command defines its
// own, and returns where its value lands (nil when the command owns it).
func addVersionFlag(fs *flag.FlagSet) *bool {
	if fs.Lookup(versionFlag) != nil {
		return nil
	}
	return fs.Bool(versionFlag, false, "print the version, the build (SIMD, cgo) and the CPU kernels, and exit")
}
