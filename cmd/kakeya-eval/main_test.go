package main

import (
	"context"
	"strings"
	"testing"
)

// TestHelpExitsZero checks that -h and --help print a command's usage and
// return nil (exit status 0) for every command.
func TestHelpExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage string // the start of what -h prints
	}{
		{[]string{"-h"}, "usage: kakeya-eval <command>"},
		{[]string{"help"}, "usage: kakeya-eval <command>"},
		{[]string{"logits", "-h"}, "usage: kakeya-eval logits"},
		{[]string{"logits", "--help"}, "usage: kakeya-eval logits"},
		{[]string{"ppl", "-h"}, "usage: kakeya-eval ppl"},
		{[]string{"calibrate", "-h"}, "usage: kakeya-eval calibrate"},
		{[]string{"calibrate", "--model", "m", "-help"}, "usage: kakeya-eval calibrate"},
	} {
		var stdout, stderr strings.Builder
		if err := run(context.Background(), tc.args, &stdout, &stderr); err != nil {
			t.Errorf("%q: %v, want nil (exit 0)", tc.args, err)
		}
		if got := stdout.String() + stderr.String(); !strings.HasPrefix(got, tc.usage) {
			t.Errorf("%q printed %q, want the usage %q", tc.args, got, tc.usage)
		}
	}
}
