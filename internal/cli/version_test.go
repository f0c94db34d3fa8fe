package cli

import (
	"errors"
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"

	kcpu "github.com/kakeya-ai/kakeya/kernels/cpu"
)

func TestWriteVersion(t *testing.T) {
	simd := Build{Version: "v1.2.3", Go: "go1.26.8", OS: "linux", Arch: "amd64", Experiment: "simd", SIMD: true, Cgo: true,
		Kernels: "avx2+fma (GOEXPERIMENT=simd), avx2+fma+f16c for bf16 and f16 weights (cgo)"}
	scalar := Build{Version: "(devel)", Go: "go1.26.8", OS: "linux", Arch: "amd64",
		Kernels: "scalar (built without GOEXPERIMENT=simd)"}
	arm := Build{Version: "(devel)", Go: "go1.26.8", OS: "darwin", Arch: "arm64", Cgo: true,
		Kernels: "scalar (no SIMD kernels for arm64), neon for bf16 and f16 weights (cgo)"}
	for _, tt := range []struct {
		name string
		b    Build
		want string
	}{
		{"simd", simd, "kakeya-run v1.2.3\n" +
			"built with go1.26.8 for linux/amd64: GOEXPERIMENT simd, simd on, cgo on\n" +
			"kernels: avx2+fma (GOEXPERIMENT=simd), avx2+fma+f16c for bf16 and f16 weights (cgo)\n"},
		{"scalar", scalar, "kakeya-run (devel)\n" +
			"built with go1.26.8 for linux/amd64: GOEXPERIMENT unset, simd off, cgo off\n" +
			"kernels: scalar (built without GOEXPERIMENT=simd)\n" +
			"this is the scalar build (built without GOEXPERIMENT=simd), several times slower on attention and codecs; the fast build: " + FastBuild + "\n"},
		// arm64 has no Go SIMD kernels to leave out: no advice.
		{"arm64", arm, "kakeya-run (devel)\n" +
			"built with go1.26.8 for darwin/arm64: GOEXPERIMENT unset, simd off, cgo on\n" +
			"kernels: scalar (no SIMD kernels for arm64), neon for bf16 and f16 weights (cgo)\n"},
	} {
		var sb strings.Builder
		WriteVersion(&sb, "kakeya-run", tt.b)
		if sb.String() != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, sb.String(), tt.want)
		}
	}
}

// CurrentBuild agrees with the kernels compiled in: a build without
// GOEXPERIMENT=simd is the one whose kernels say so.
func TestCurrentBuild(t *testing.T) {
	b := CurrentBuild()
	if b.Version == "" || b.Go != runtime.Version() || b.OS != runtime.GOOS || b.Arch != runtime.GOARCH {
		t.Errorf("CurrentBuild() = %+v", b)
	}
	if b.Kernels != kcpu.Features() {
		t.Errorf("Kernels %q, want kernels/cpu.Features() %q", b.Kernels, kcpu.Features())
	}
	if named := strings.HasPrefix(b.Kernels, "scalar (built without GOEXPERIMENT=simd)"); b.Scalar() != named {
		t.Errorf("Scalar() = %v, but the kernels say %q", b.Scalar(), b.Kernels)
	}
	if b.SIMD && b.Experiment != "" && !strings.Contains(b.Experiment, "simd") {
		t.Errorf("built with simd, but the build info's GOEXPERIMENT is %q", b.Experiment)
	}
}

// Parse gives every flag set --version, which prints the report and ends
// the command (flag.ErrHelp, exit 0) before any check of the other flags;
// a command's own -version flag is left alone.
func TestParseVersion(t *testing.T) {
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.String("model", "", "required elsewhere")
	var stdout strings.Builder
	help := func(w io.Writer) { io.WriteString(w, "usage\n") }
	if err := Parse(fs, []string{"--version"}, &stdout, io.Discard, help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--version: %v, want flag.ErrHelp", err)
	}
	var want strings.Builder
	WriteVersion(&want, "tool", CurrentBuild())
	if stdout.String() != want.String() {
		t.Errorf("--version printed %q, want %q", stdout.String(), want.String())
	}
	if st := report("tool", flag.ErrHelp, io.Discard); st != 0 {
		t.Errorf("exit status %d after --version, want 0", st)
	}

	stdout.Reset()
	fs = flag.NewFlagSet("tool", flag.ContinueOnError)
	if err := Parse(fs, nil, &stdout, io.Discard, help); err != nil || stdout.Len() != 0 {
		t.Errorf("no flags: %v, printed %q", err, stdout.String())
	}
	if fs.Lookup("version") == nil {
		t.Error("Parse did not define --version")
	}

	own := flag.NewFlagSet("tool", flag.ContinueOnError)
	v := own.String("version", "", "the command's own")
	if err := Parse(own, []string{"--version", "3"}, &stdout, io.Discard, help); err != nil || *v != "3" || stdout.Len() != 0 {
		t.Errorf("own --version: %v, %q, printed %q", err, *v, stdout.String())
	}
}
