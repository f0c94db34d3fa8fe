package main

import (
	"context"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cli"
)

// --version prints the build report, before anything is measured.
func TestVersion(t *testing.T) {
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"--version"}, &out, &errOut); err != nil {
		t.Fatalf("--version: %v (stderr %q)", err, errOut.String())
	}
	var want strings.Builder
	cli.WriteVersion(&want, "kakeya-bench", cli.CurrentBuild())
	if out.String() != want.String() {
		t.Errorf("--version printed %q, want %q", out.String(), want.String())
	}
}
