package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

const calibrateUsage = `usage: kakeya-eval calibrate --model DIR --out FILE.safetensors [flags]

Runs the model over a text and writes its KV-cache calibration: per layer
and KV head the Cholesky factor of the second moment of the pre-RoPE
queries sharing that KV head (for precond=1 key codecs), and Kakeya
residual codebooks for keys (whitened) and values at each of --bits.
The text is cut into windows of --ctx tokens, each starting with BOS.
The file is written atomically; progress goes to stderr, a summary to stdout.

Flags:
`

type calibFlags struct {
	model, data, out, bits string
	ctx, tokens, threads   int
	ropeSpan               int
	ridge                  float64
	ropeAvg                bool
}

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f calibFlags
	fs := newFlagSet("calibrate", calibrateUsage, stderr)
	fs.StringVar(&f.model, "model", "", "model directory (config.json, safetensors, tokenizer.json) or Hugging Face id")
	fs.StringVar(&f.data, "data", "", "text file (default $KAKEYA_SHARED/data/wikitext-2/valid.txt, KAKEYA_SHARED default ../shared)")
	fs.StringVar(&f.out, "out", "", "calibration file to write (safetensors)")
	fs.IntVar(&f.ctx, "ctx", 0, fmt.Sprintf("window tokens, BOS included (0: min(%d, model context))", model.DefaultCalibrationCtx))
	fs.IntVar(&f.tokens, "tokens", 0, "use at most this many tokens of the text (0: all)")
	fs.Float64Var(&f.ridge, "ridge", model.DefaultCalibrationRidge, "Cholesky ridge relative to tr(Σ)/d (0: none)")
	fs.StringVar(&f.bits, "bits", "2,3,4", `residual codebook widths to train, comma-separated ("none": no codebooks)`)
	fs.BoolVar(&f.ropeAvg, "rope-avg", false, "average the query second moment over RoPE offsets [0, rope-span) (see model.RopeAverage; off: measured worse on stories260K)")
	fs.IntVar(&f.ropeSpan, "rope-span", 0, "offsets averaged with --rope-avg (0: ctx)")
	fs.IntVar(&f.threads, "threads", 0, "compute threads (0: GOMAXPROCS)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("calibrate: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("calibrate: unexpected argument %q", fs.Arg(0))
	}
	return calibrate(ctx, &f, stdout, stderr)
}

// parseBits reads "2,3,4" or "none".
func parseBits(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || b < 1 || b > 4 {
			return nil, fmt.Errorf("--bits %q: %q is not a width in 1..4", s, p)
		}
		out = append(out, b)
	}
	return out, nil
}

func calibrate(ctx context.Context, f *calibFlags, stdout, stderr io.Writer) error {
	start := time.Now()
	switch {
	case f.model == "":
		return errors.New("calibrate: --model is required")
	case f.out == "":
		return errors.New("calibrate: --out is required")
	case f.ctx < 0 || f.tokens < 0 || f.threads < 0 || f.ropeSpan < 0:
		return errors.New("calibrate: --ctx, --tokens, --threads and --rope-span must be >= 0")
	case f.ridge < 0 || math.IsNaN(f.ridge) || math.IsInf(f.ridge, 0):
		return fmt.Errorf("calibrate: --ridge %v must be finite and >= 0", f.ridge)
	}
	bits, err := parseBits(f.bits)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if f.data == "" {
		f.data = sharedFile("data", "wikitext-2", "valid.txt")
	}
	dir, err := resolveModel(ctx, f.model, stderr)
	if err != nil {
		return fmt.Errorf("calibrate: model: %w", err)
	}
	f.model = dir
	if _, err := os.Stat(filepath.Join(f.model, "config.json")); err != nil {
		return fmt.Errorf("calibrate: model: %w", err)
	}
	raw, err := os.ReadFile(f.data)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	sum, err := eval.FileSHA256(f.data)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	tok, err := tokenizer.Load(filepath.Join(f.model, "tokenizer.json"))
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	// Only what is used gets tokenized: about 4 bytes per token is ample
	// for English text; fall back to the whole file when it is not.
	text := string(raw)
	if f.tokens > 0 && len(text) > 16*f.tokens {
		text = text[:16*f.tokens]
	}
	ids := tok.Encode(text, false)
	if len(ids) < 2 {
		return fmt.Errorf("calibrate: %s: %d tokens of text, want at least 2", f.data, len(ids))
	}

	ridge := f.ridge
	if ridge == 0 {
		ridge = -1 // model.CalibrateOptions: negative means none
	}
	lastTen := -1
	opt := model.CalibrateOptions{
		Ctx: f.ctx, MaxTokens: f.tokens, Ridge: ridge, RopeAveraged: f.ropeAvg, RopeSpan: f.ropeSpan, Bits: bits, Threads: f.threads,
		Progress: func(done, total int) {
			if ten := 10 * done / max(total, 1); ten > lastTen {
				lastTen = ten
				fmt.Fprintf(stderr, "calibrate %3d%% %d/%d tokens, %.1fs\n", 100*done/max(total, 1), done, total, time.Since(start).Seconds())
			}
		},
	}
	cal, err := model.Calibrate(ctx, f.model, ids, opt)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	cal.Meta["data"] = filepath.Base(f.data)
	cal.Meta["data_sha256"] = sum
	if err := model.SaveCalibration(f.out, cal); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	return writeCalibSummary(stdout, cal, f, time.Since(start))
}

// writeCalibSummary prints what was used and, per layer, the spread of the
// query second moments across KV heads: trace and condition number of
// L Lᵀ = Σ + ridge.
func writeCalibSummary(w io.Writer, cal *codec.Calibration, f *calibFlags, dur time.Duration) error {
	m := cal.Meta
	rope := "no"
	if m["rope_averaged"] == "true" {
		rope = "over " + m["rope_span"] + " offsets"
	}
	fmt.Fprintf(w, "%s: %s tokens of %s in %s windows of %s (ridge %s, rope-averaged %s), %.1fs -> %s\n",
		cal.Model, m["tokens"], filepath.Base(f.data), m["windows"], m["ctx"], m["ridge"], rope, dur.Seconds(), f.out)
	d := cal.HeadDim
	fmt.Fprintf(w, "%-6s %-24s %s\n", "layer", "tr(Σ) per kv head", "cond(Σ+ridge) per kv head")
	for l := 0; l < cal.Layers; l++ {
		var trs, conds []string
		for h := 0; h < cal.KVHeads; h++ {
			L := cal.Chol[l*cal.KVHeads+h]
			dense := mat.NewDense(d, d, nil)
			tr := 0.0
			for i, v := range L {
				dense.Set(i/d, i%d, float64(v))
				tr += float64(v) * float64(v)
			}
			var svd mat.SVD
			cond := math.Inf(1)
			if svd.Factorize(dense, mat.SVDNone) {
				s := svd.Values(nil)
				if s[len(s)-1] > 0 {
					cond = (s[0] / s[len(s)-1]) * (s[0] / s[len(s)-1])
				}
			}
			trs = append(trs, fmt.Sprintf("%.3g", tr))
			conds = append(conds, fmt.Sprintf("%.3g", cond))
		}
		fmt.Fprintf(w, "%-6d %-24s %s\n", l, strings.Join(trs, " "), strings.Join(conds, " "))
	}
	for _, side := range []struct {
		name string
		cbs  map[int]*codec.Codebook
	}{{"K (whitened)", cal.KCodebooks}, {"V", cal.VCodebooks}} {
		for b := 1; b <= 4; b++ {
			if cb := side.cbs[b]; cb != nil {
				fmt.Fprintf(w, "codebook %s b%d: %.3f\n", side.name, b, cb.Levels)
			}
		}
	}
	return nil
}
