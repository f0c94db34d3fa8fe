package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/internal/outfile"
	"github.com/kakeya-ai/kakeya/internal/term"
	"github.com/kakeya-ai/kakeya/weights"
)

const calibrateUsage = `usage: kakeya-eval calibrate --model DIR --out FILE.safetensors [flags]

Runs the model over a text and writes its KV-cache calibration: per layer
and KV head the Cholesky factor of the second moment of the pre-RoPE
queries sharing that KV head (for precond=1 key codecs), Kakeya
residual codebooks for keys (whitened) and values at each of --bits, and
with --pca the principal components of the cached keys (per layer and KV
head) and values (per layer) over blocks of --block-size tokens, which the
kakeya-pc codec allocates its bits from.
The text is cut into windows of --ctx tokens, each starting with BOS.
The file is written atomically; progress goes to stderr, a summary to stdout.

Flags:
`

type calibFlags struct {
	model, data, out, bits string
	ctx, tokens, threads   int
	ropeSpan, blockSize    int
	pca                    bool
	ridge                  float64
	ropeAvg                bool
	maxInput               cli.ByteSize // --max-input
	device                 string
}

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f calibFlags
	fs := newFlagSet("calibrate", calibrateUsage, stderr)
	fs.StringVar(&f.model, "model", "", "model directory (config.json, safetensors, tokenizer.json), Hugging Face id or GGUF file")
	fs.StringVar(&f.data, "data", "", "text file, or builtin for the calibration text built into the binary (default $KAKEYA_SHARED/data/wikitext-2/valid.txt, KAKEYA_SHARED default ../shared)")
	fs.StringVar(&f.out, "out", "", "calibration file to write (safetensors)")
	fs.IntVar(&f.ctx, "ctx", 0, fmt.Sprintf("window tokens, BOS included (0: min(%d, model context))", calibrate.DefaultCtx))
	fs.IntVar(&f.tokens, "tokens", 0, "use at most this many tokens of the text (0: all)")
	fs.Float64Var(&f.ridge, "ridge", calibrate.DefaultRidge, "Cholesky ridge relative to tr(Σ)/d (0: none)")
	fs.StringVar(&f.bits, "bits", "2,3,4", `residual codebook widths to train, comma-separated ("none": no codebooks)`)
	fs.BoolVar(&f.ropeAvg, "rope-avg", false, "average the query second moment over RoPE offsets [0, rope-span) (see calibrate.RopeAverage; off: measured worse on stories260K)")
	fs.IntVar(&f.ropeSpan, "rope-span", 0, "offsets averaged with --rope-avg (0: ctx)")
	fs.IntVar(&f.threads, "threads", 0, "compute threads (0: GOMAXPROCS)")
	fs.BoolVar(&f.pca, "pca", false, "measure the principal components of cached keys and values (for kakeya-pc)")
	fs.IntVar(&f.blockSize, "block-size", 0, fmt.Sprintf("KV block tokens of the codebook samples and the PCA (0: %d; use the cache's)", calibrate.DefaultBlockSize))
	fs.StringVar(&f.device, "device", "cpu", "compute device: "+strings.Join(device.Names(), ", "))
	f.maxInput = cli.DefaultMaxInput
	fs.Var(&f.maxInput, "max-input", cli.MaxInputUsage)
	if err := parse(fs, calibrateUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("calibrate: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("calibrate: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	err := writeCalibration(ctx, &f, stdout, stderr)
	var intr interrupted
	if err != nil && ctx.Err() != nil && !errors.As(err, &intr) {
		return interrupted("calibrate: interrupted before the first window; nothing written")
	}
	return err
}

// check names the first flag with a value out of range.
func (f *calibFlags) check() error {
	switch {
	case f.model == "":
		return errors.New("--model is required")
	case f.out == "":
		return errors.New("--out is required")
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--ctx", f.ctx}, {"--tokens", f.tokens}, {"--rope-span", f.ropeSpan}, {"--block-size", f.blockSize}} {
		if c.v < 0 {
			return fmt.Errorf("%s %d must be >= 0", c.name, c.v)
		}
	}
	if err := device.Check(f.device); err != nil {
		return err
	}
	if err := checkThreads(f.threads); err != nil {
		return err
	}
	if f.ridge < 0 || math.IsNaN(f.ridge) || math.IsInf(f.ridge, 0) {
		return fmt.Errorf("--ridge %v must be finite and >= 0", f.ridge)
	}
	if f.ropeSpan > 0 && !f.ropeAvg {
		return fmt.Errorf("--rope-span %d has no effect without --rope-avg", f.ropeSpan)
	}
	return nil
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

// writeCalibration runs the calibration f describes and writes it to --out.
func writeCalibration(ctx context.Context, f *calibFlags, stdout, stderr io.Writer) error {
	start := time.Now()
	if err := f.check(); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	bits, err := parseBits(f.bits)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	bs := f.blockSize
	if bs == 0 {
		bs = calibrate.DefaultBlockSize
	}
	if len(bits) > 0 && f.ctx > 0 && f.ctx < bs {
		return fmt.Errorf("calibrate: --ctx %d is shorter than a KV block of %d tokens, whose residuals the codebooks are trained on; use --ctx %d or more, or --bits none",
			f.ctx, bs, bs)
	}
	if f.pca && f.ctx > 0 && f.ctx < bs {
		return fmt.Errorf("calibrate: --ctx %d is shorter than a KV block of %d tokens, whose principal components --pca measures; use --ctx %d or more", f.ctx, bs, bs)
	}
	// The run can be long: find an unwritable --out before it, not after.
	if err := outfile.Check(f.out); err != nil {
		return fmt.Errorf("calibrate: --out: %w", err)
	}
	if f.data == "" {
		f.data = sharedFile("data", "wikitext-2", "valid.txt")
	}
	raw, err := readCalibData(ctx, f)
	if err != nil {
		return fmt.Errorf("calibrate: --data: %w", err)
	}
	sum := sha256Hex(raw)
	dir, err := resolveModel(ctx, f.model, stderr)
	if err != nil {
		return fmt.Errorf("calibrate: --model: %w", err)
	}
	f.model = dir
	if _, err := weights.LoadConfig(f.model); err != nil {
		return fmt.Errorf("calibrate: --model: %w", err)
	}
	tok, err := kakeya.LoadTokenizer(f.model)
	if err != nil {
		return fmt.Errorf("calibrate: --model: %w", err)
	}
	// Only what is used gets tokenized: about 4 bytes per token is ample
	// for English text; fall back to the whole file when it is not.
	text := string(raw)
	if f.tokens > 0 && len(text) > 16*f.tokens {
		text = text[:16*f.tokens]
	}
	ids := tok.Encode(text, false)
	if len(ids) < 2 {
		return fmt.Errorf("calibrate: --data %s gives %d tokens, want at least 2", f.data, len(ids))
	}

	ridge := f.ridge
	if ridge == 0 {
		ridge = -1 // calibrate.Options: negative means none
	}
	// On the CPU, calibration multiplies in exact f32, as calibrate.Run's
	// default backend does; a GPU keeps its default precision.
	mm := ""
	if f.device == "cpu" {
		mm = "f32"
	}
	backend, err := device.Open(f.device, f.threads, mm)
	if err != nil {
		return err
	}
	defer backend.Close()
	var (
		prog *eval.Progress
		last calibrate.Progress
	)
	opt := calibrate.Options{
		Ctx: f.ctx, MaxTokens: f.tokens, Ridge: ridge, RopeAveraged: f.ropeAvg, RopeSpan: f.ropeSpan, Bits: bits, Backend: backend,
		BlockSize: f.blockSize, PCA: f.pca,
		Progress: func(p calibrate.Progress) {
			last = p
			if prog == nil {
				prog = eval.NewProgress(stderr, term.IsTerminal(stderr), "calibrate", p.TotalWindows)
				prog.Unit = "windows"
			}
			prog.Update(p.Windows, p.Tokens)
		},
	}
	cal, err := calibrate.Run(ctx, f.model, ids, opt)
	if prog != nil {
		prog.Finish()
	}
	if err != nil {
		var few *calibrate.TooFewTokensError
		switch {
		case ctx.Err() != nil && last.Windows > 0:
			return interrupted(fmt.Sprintf("calibrate: interrupted after %d/%d windows (%.0fs); nothing written",
				last.Windows, last.TotalWindows, time.Since(start).Seconds()))
		case errors.As(err, &few):
			return tooFewTokens(f, few)
		}
		return fmt.Errorf("calibrate: %w", err)
	}
	cal.Meta["data"] = filepath.Base(f.data)
	cal.Meta["data_sha256"] = sum
	if err := calibrate.Save(f.out, cal); err != nil {
		return fmt.Errorf("calibrate: --out: %w", err)
	}
	return writeCalibSummary(stdout, cal, f, time.Since(start))
}

// readCalibData returns the text of --data: the calibration text built
// into the binary for "builtin" (calibrate.Text, what the engine calibrates
// on when it is given no calibration), else the file's bytes.
func readCalibData(ctx context.Context, f *calibFlags) ([]byte, error) {
	if f.data == calibrate.BuiltinData {
		return []byte(calibrate.Text()), nil
	}
	return cli.ReadFile(ctx, f.data, int64(f.maxInput), "--max-input")
}

// tooFewTokens says, in the command's terms, how much text the codebooks
// need.
func tooFewTokens(f *calibFlags, e *calibrate.TooFewTokensError) error {
	bos := ""
	if e.BOS {
		bos = ", BOS included"
	}
	blocks := "one full KV block"
	if e.Blocks > 1 {
		blocks = fmt.Sprintf("%d full KV blocks", e.Blocks)
	}
	src, fix := fmt.Sprintf("--data %s gives", f.data), "a longer --data text"
	if f.tokens > 0 && e.Tokens >= f.tokens {
		src, fix = fmt.Sprintf("--tokens %d leaves", f.tokens), "a larger --tokens"
	}
	return fmt.Errorf("calibrate: %s %d tokens; calibrating %s-bit codebooks needs at least %d tokens (%s of %d tokens%s, whose residuals the codebooks are trained on); use %s, or --bits none",
		src, e.Tokens, joinInts(e.Bits), e.Need, blocks, e.BlockSize, bos, fix)
}

// joinInts formats 2, 3, 4 as "2,3,4".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
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
	if cal.VPCA != nil {
		fmt.Fprintf(w, "PCA over %s blocks of %s tokens: components holding 90%% / 99%% of the within-block variance\n", m["pca_blocks"], m["block_size"])
		for l := 0; l < cal.Layers; l++ {
			var ks []string
			for h := 0; h < cal.KVHeads; h++ {
				ks = append(ks, pcaSpread(cal.KPCA[l*cal.KVHeads+h]))
			}
			fmt.Fprintf(w, "layer %d: K %s  V %s\n", l, strings.Join(ks, " "), pcaSpread(cal.VPCA[l]))
		}
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

// pcaSpread formats how many components hold 90% and 99% of st's
// within-block variance, e.g. "12/40".
func pcaSpread(st *codec.PCAStats) string {
	var total float64
	for _, v := range st.Var {
		total += float64(v)
	}
	at := func(share float64) int {
		var s float64
		for j, v := range st.Var {
			if s += float64(v); s >= share*total {
				return j + 1
			}
		}
		return len(st.Var)
	}
	return fmt.Sprintf("%d/%d", at(0.9), at(0.99))
}
