package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/weights"
)

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	var out strings.Builder
	if err := run(context.Background(), []string{"--shape", "qwen2-tiny", dir}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "wrote "+dir+": qwen2-tiny") {
		t.Errorf("output %q", out.String())
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ModelType != "qwen2" {
		t.Errorf("model_type %q", cfg.ModelType)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"--shape", "gpt-5", t.TempDir()}, {"a", "b"}} {
		var stderr strings.Builder
		if st := cli.Run("kakeya-testmodel", run, args, nil, io.Discard, &stderr); st != cli.ExitUsage {
			t.Errorf("%q: exit status %d, want %d; stderr:\n%s", args, st, cli.ExitUsage, stderr.String())
		}
	}
	var stderr strings.Builder
	cli.Run("kakeya-testmodel", run, []string{"--shape", "gpt-5", "x"}, nil, io.Discard, &stderr)
	if !strings.Contains(stderr.String(), "qwen2.5-7b") {
		t.Errorf("an unknown shape's message lists none of the shapes:\n%s", stderr.String())
	}
}
