// Command kakeya-testmodel writes a seeded random checkpoint with the exact
// shape of a real model (a preset of internal/testmodel: Qwen2.5-0.5B,
// 1.5B or 7B, or a tiny architecture) into a directory, in Hugging Face
// layout. The GPU report (make gpu-bundle, run.sh) writes its large
// checkpoints with it on the GPU machine rather than carrying them: the
// same shape and seed give the same bytes on every machine.
//
//	kakeya-testmodel --shape qwen2.5-7b DIR
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
)

func main() { cli.Main("kakeya-testmodel", run) }

func run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kakeya-testmodel", flag.ContinueOnError)
	shape := fs.String("shape", "qwen2.5-0.5b", "the checkpoint's shape: "+strings.Join(shapes(), ", "))
	layers := fs.Int("layers", 0, "decoder layers, fewer than the shape's for a shallower checkpoint of its widths (0: the shape's)")
	help := func(w io.Writer) {
		fmt.Fprintln(w, "usage: kakeya-testmodel [--shape NAME] DIR\n\nWrites a seeded random checkpoint of a real model's shape (bf16 for the\nQwen2.5 shapes: 1, 3.1 and 15.2 GB) into DIR, created if needed.\n\nflags:")
		cli.PrintDefaults(fs, w)
	}
	if err := cli.Parse(fs, args, stdout, stderr, help); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		return &cli.UsageError{Err: errors.New("want one directory"), Usage: func() { help(stderr) }}
	}
	spec, ok := testmodel.Presets[*shape]
	if !ok {
		return &cli.UsageError{Err: fmt.Errorf("--shape %q: want one of %s", *shape, strings.Join(shapes(), ", ")), Usage: func() { help(stderr) }}
	}
	if *layers < 0 || *layers > spec.Layers {
		return &cli.UsageError{Err: fmt.Errorf("--layers %d: want 0 to %d", *layers, spec.Layers), Usage: func() { help(stderr) }}
	}
	if *layers > 0 {
		spec.Layers = *layers
	}
	dir := fs.Arg(0)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- testmodel.Write(dir, spec) }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return &cli.InterruptedError{Detail: "while writing " + dir + " (the checkpoint there is incomplete)"}
	}
	fmt.Fprintf(stdout, "kakeya-testmodel: wrote %s: %s, %.2f GB of tensors in %.1fs\n", dir, *shape, float64(spec.Bytes())/1e9, time.Since(start).Seconds())
	return nil
}

// shapes returns the presets' names, sorted.
func shapes() []string { return slices.Sorted(maps.Keys(testmodel.Presets)) }
