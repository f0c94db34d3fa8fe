package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// --version prints the build report and nothing else is required; the
// stats line names the same kernels, so a scalar build says it is one
// where every run's timings are.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if st := cli.Run("kakeya-run", run, []string{"--version"}, nil, &out, &errOut); st != 0 {
		t.Fatalf("--version: exit status %d, want 0 (stderr %q)", st, errOut.String())
	}
	var want strings.Builder
	cli.WriteVersion(&want, "kakeya-run", cli.CurrentBuild())
	if out.String() != want.String() {
		t.Errorf("--version printed %q, want %q", out.String(), want.String())
	}

	dir := filepath.Join(shareddata.Dir(t), "models", "stories260K")
	out.Reset()
	errOut.Reset()
	if err := run(context.Background(), []string{"--model", dir, "--prompt", "Once", "--temperature", "0", "--max-tokens", "2"}, nil, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if k := "| kernels: " + cli.CurrentBuild().Kernels; !strings.Contains(errOut.String(), k) {
		t.Errorf("stats %q lack %q", errOut.String(), k)
	}
	// stories260K's matrices are F32: 0.99 MiB of them (260K values).
	if w := "| weights: f32 0.99 MiB (0.99 MiB)\n"; !strings.Contains(errOut.String(), w) {
		t.Errorf("stats %q lack %q", errOut.String(), w)
	}
}
