package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/outfile"
)

const paretoUsage = `usage: kakeya-eval pareto --report FILE.json [--out FILE.png] [--title TEXT]

Draws (or redraws) the Pareto plot of a ppl report: whole-cache ratio
against KL on a log scale, one labelled marker per configuration, the
frontier dashed. ppl --out writes the same plot beside its report.

Flags:
`

func runPareto(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var report, out, title string
	fs := newFlagSet("pareto", paretoUsage, stderr)
	fs.StringVar(&report, "report", "", "JSON report of kakeya-eval ppl (required)")
	fs.StringVar(&out, "out", "", "PNG to write (default: the report's name with .pareto.png)")
	fs.StringVar(&title, "title", "", "plot title (default: model, data, passages and tokens of the report)")
	if err := parse(fs, paretoUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("pareto: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("pareto: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if report == "" {
		return errors.New("pareto: --report is required")
	}
	if out == "" {
		out = paretoPath(report)
	}
	if err := outfile.Check(out); err != nil {
		return fmt.Errorf("pareto: --out: %w", err)
	}
	r, err := eval.ReadReportPoints(report)
	if err != nil {
		return fmt.Errorf("pareto: %w", err)
	}
	if title == "" {
		title = fmt.Sprintf("%s on %s: %d passages, %d scored tokens", filepath.Base(r.Model), filepath.Base(r.Data), r.Passages, r.Tokens)
	}
	if err := r.WritePareto(out, title); err != nil {
		return fmt.Errorf("pareto: %w", err)
	}
	fmt.Fprintln(stdout, "Pareto plot", out)
	return nil
}
