// Package leveltest runs a test binary's tests again at each kernel level
// below the best this CPU runs ($KAKEYA_CPU, see kernels/cpu), so that a
// machine with AVX-512 also tests the AVX2 and scalar paths.
package leveltest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	kcpu "github.com/kakeya-ai/kakeya/kernels/cpu"
)

// EnvExec names the environment variable holding the command line that
// runs a test binary built for another architecture (the go test -exec
// wrapper, e.g. "qemu-aarch64-static -L /usr/aarch64-linux-gnu"): Rerun
// starts its children through it.
const EnvExec = "KAKEYA_TEST_EXEC"

// EnvRerun names the environment variable that, set to 0, makes Rerun
// skip its reruns: make test's scalar job (a build without
// GOEXPERIMENT=simd) sets it, since its SIMD job reruns every level of
// the same C kernels, and the scalar job is there for the Go loops' scalar
// fallbacks, which its own run at the CPU's level exercises.
const EnvRerun = "KAKEYA_LEVELS_RERUN"

// marker starts the line a child logs to show the level it ran at.
const marker = "leveltest: kernel level "

// An Option narrows the levels Rerun covers.
type Option int

// NoMatMul says the package's code never multiplies through kernels/cpu's
// MatMul: a level that differs from the one in force only there
// (kcpu.MatMulOnly: avx512 below avx512bf16) would rerun the same code,
// and is left out.
const NoMatMul Option = 1

// Rerun runs the tests of this test binary that match the regular
// expression pattern once per kernel level below the best of kcpu.Levels,
// each in a child process with $KAKEYA_CPU naming the level, and fails t,
// with the child's output, if a child fails, ran no test or did not run at
// its level. In a child (where $KAKEYA_CPU is set) it logs the level in
// force and returns: the parent covers the levels. A test a child skips
// (the shared data set missing where that is allowed) is logged.
func Rerun(t *testing.T, pattern string, opts ...Option) {
	t.Helper()
	if v := os.Getenv(kcpu.EnvCPU); v != "" {
		t.Logf("%s%s (%s=%s)", marker, kcpu.Level(), kcpu.EnvCPU, v)
		return
	}
	if os.Getenv(EnvRerun) == "0" {
		t.Skipf("%s=0: the kernel levels below %s are rerun elsewhere (make test's GOEXPERIMENT=simd job)", EnvRerun, kcpu.Level())
	}
	all := kcpu.Levels()
	levels := all[:len(all)-1]
	if slices.Contains(opts, NoMatMul) {
		if same := kcpu.MatMulOnly(kcpu.Level()); same != "" {
			levels = slices.DeleteFunc(slices.Clone(levels), func(l string) bool { return l == same })
			t.Logf("%s differs from %s only in MatMul, which this package does not use: not rerun", same, kcpu.Level())
		}
	}
	t.Logf("this process runs %s; rerunning at %v", kcpu.Level(), levels)
	run := "^" + t.Name() + "$|" + pattern
	for _, level := range levels {
		t.Run(level, func(t *testing.T) {
			ctx := context.Background()
			if d, ok := t.Deadline(); ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, d)
				defer cancel()
			}
			argv := []string{os.Args[0], "-test.run", run, "-test.count", "1", "-test.v"}
			if w := strings.Fields(os.Getenv(EnvExec)); len(w) > 0 {
				// A test binary for another architecture runs under the
				// emulator that runs this one (go test -exec).
				argv = append(w, argv...)
			}
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), kcpu.EnvCPU+"="+level)
			out, err := cmd.CombinedOutput()
			s := string(out)
			switch {
			case err != nil:
				t.Fatalf("%s=%s: %v\n%s", kcpu.EnvCPU, level, err, s)
			case !strings.Contains(s, marker+level+" "):
				t.Fatalf("%s=%s: the child did not report running at %s\n%s", kcpu.EnvCPU, level, level, s)
			case strings.Count(s, "--- PASS") < 2:
				t.Fatalf("%s=%s: no test matched %q\n%s", kcpu.EnvCPU, level, pattern, s)
			}
			for _, line := range strings.Split(s, "\n") {
				if strings.Contains(line, "--- SKIP") {
					t.Logf("%s=%s: %s", kcpu.EnvCPU, level, strings.TrimSpace(line))
				}
			}
		})
	}
}
