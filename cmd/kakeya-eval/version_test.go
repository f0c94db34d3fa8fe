package main

import (
	"context"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cli"
)

// --version works as the command and after every command, before any
// other flag is checked.
func TestVersion(t *testing.T) {
	for _, tt := range []struct {
		args []string
		name string
	}{
		{[]string{"--version"}, "kakeya-eval"},
		{[]string{"-version"}, "kakeya-eval"},
		{[]string{"version"}, "kakeya-eval"},
		{[]string{"ppl", "--version"}, "kakeya-eval ppl"},
		{[]string{"logits", "--version"}, "kakeya-eval logits"},
		{[]string{"calibrate", "--version"}, "kakeya-eval calibrate"},
		{[]string{"sensitivity", "--version"}, "kakeya-eval sensitivity"},
		{[]string{"allocate", "--version"}, "kakeya-eval allocate"},
		{[]string{"pareto", "--version"}, "kakeya-eval pareto"},
	} {
		var out, errOut strings.Builder
		if err := run(context.Background(), tt.args, &out, &errOut); err != nil {
			t.Errorf("%q: %v (stderr %q)", tt.args, err, errOut.String())
			continue
		}
		var want strings.Builder
		cli.WriteVersion(&want, tt.name, cli.CurrentBuild())
		if out.String() != want.String() {
			t.Errorf("%q printed %q, want %q", tt.args, out.String(), want.String())
		}
	}
}
