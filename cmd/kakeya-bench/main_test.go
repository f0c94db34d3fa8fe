package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
)

func TestTable(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := run(context.Background(), []string{"--model", dir, "--cache", "plain,int8", "--threads", "1", "--ctx", "16,80", "--gen", "3", "--reps", "1", "--progress=false"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// Header line, blank, table header, separator, four rows.
	if len(lines) != 8 {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range []string{"| plain | 1 | 16 |", "| plain | 1 | 80 |", "| int8 | 1 | 16 |", "| int8 | 1 | 80 |"} {
		if !strings.HasPrefix(lines[4+i], want) {
			t.Errorf("row %d = %q, want it to start with %q", i, lines[4+i], want)
		}
	}
	// At ctx 80 with 64-token blocks int8 has encoded a block: a ratio is
	// reported against the plain row.
	if f := strings.Split(lines[7], "|"); len(f) < 9 || !strings.HasSuffix(strings.TrimSpace(f[6]), "x") || !strings.HasSuffix(strings.TrimSpace(f[8]), "x") {
		t.Errorf("int8 ctx 80 row %q lacks its ratios", lines[7])
	}
}

func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"--cache", "int9"}, "--cache int9"},
		{[]string{"--cache", "plain,,int8"}, "empty entry"},
		{[]string{"--cache", "int8,int8"}, "int8 listed twice"},
		{[]string{"--threads", "0"}, `--threads "0"`},
		{[]string{"--ctx", "x"}, `--ctx "x": "x" is not an integer`},
		{[]string{"--gen", "0"}, "--gen 0 must be >= 1"},
		{[]string{"--reps", "0"}, "--reps 0 must be >= 1"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		if err := run(context.Background(), tt.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.err)
		}
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, io.Discard); err != nil {
		t.Errorf("-h: %v", err)
	}
}
