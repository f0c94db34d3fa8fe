package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/internal/outfile"
	"github.com/kakeya-ai/kakeya/internal/term"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"
)

const pplUsage = `usage: kakeya-eval ppl --model DIR|FILE.gguf [flags]

Teacher-forced perplexity, KL(ref || config) and top-1 agreement of each
--config against the uncompressed reference cache, over the same passages.

Modes:
  passages  consecutive windows of ctx+n_eval tokens: ctx tokens prefilled
            through the serving path, then n_eval predictions scored, the
            first from the prefill's last row, the rest decoding one token
            at a time (BOS replaces each window's first token)
  docs      each document (--doc-sep) on its own from BOS, every token
            scored; documents longer than --ctx are scored by sliding
            windows of ctx tokens, stride --stride
  full      the whole text as one stream, sliding windows of ctx tokens
            with stride --stride, each token scored once

Cache settings: the flags below that kakeya-run shares (--kv-codec,
--k-codec, --v-codec, --k-bits, --v-bits, --block-size, --hot-window,
--sinks, --boundary, --precond, --calib-codebooks, --cache-type), with the
same defaults. When they name a codec they form one configuration; their
other settings are the defaults of every --config and --configs entry
(--cache-type applies to the reference too).

--config (repeatable) is the compact form of the same settings:
  name=NAME,k=SPEC,v=SPEC,kv=SPEC,boundary=0;1;-1,block=N,hot=N,sinks=N,precond=0|1,cb=0|1,...
(every flag name above is a key too; kvconfig.Keys lists the short forms).
name= is optional: the settings as written name the configuration. SPEC is
a codec spec ("int8", "kakeya-block:b=3"; commas inside a spec are kept when the
next piece is not a key) and boundary layers, separated by ';' (negative
from the end; none for no layer), skip the codecs and keep bf16 blocks.
With --calib, keys are preconditioned (precond) and kakeya codecs use the
calibrated codebooks (cb) by default; precond=0 and cb=0 turn them off.
Without --calib, a configuration whose codecs need principal components
(kv=kakeya, the preset; kakeya-pc; kvtc) gets the automatic calibration
kakeya-run and kakeya-serve make: read from --calib-cache, or made on the
model over the built-in text and written there.
--configs FILE reads a JSON list of objects with the same keys.

The table goes to stdout; the JSON report is written only when --out is
given (a file atomically, a device or FIFO such as /dev/stdout in place),
with a Pareto plot beside a file (FILE.pareto.png: whole-cache ratio
against KL on a log scale, one marker per configuration). Both paths are
checked before the run starts. Ctrl-C stops the run and writes nothing.

Flags:
`

// configList collects repeated --config flags.
type configList []eval.Config

func (l *configList) String() string { return fmt.Sprint(len(*l), " configs") }

func (l *configList) Set(s string) error {
	c, err := eval.ParseConfig(s)
	if err != nil {
		return err
	}
	*l = append(*l, c)
	return nil
}

type pplFlags struct {
	cmd                                                string // the subcommand, for messages
	plot                                               bool   // a Pareto plot goes beside --out
	model, data, mode, docSep, configsFile, calib, out string
	calibCache                                         string // --calib-cache
	docs                                               string // --docs FROM:TO
	ctx, nEval, passages, stride, chunk, threads       int
	workers                                            int
	maxInput                                           cli.ByteSize // --max-input
	device, matmul                                     string
	cache                                              kvconfig.Spec // the cache flags
	configs                                            configList
}

func runPPL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := pplFlags{cmd: "ppl", plot: true}
	fs := newFlagSet("ppl", pplUsage, stderr)
	fs.StringVar(&f.model, "model", "", "model directory (config.json, safetensors, tokenizer.json), Hugging Face id or GGUF file")
	fs.StringVar(&f.data, "data", "", "text file (default $KAKEYA_SHARED/data/wikitext-2-raw/wiki.test.raw, KAKEYA_SHARED default ../shared)")
	fs.StringVar(&f.mode, "mode", eval.ModePassages, "passages, docs or full")
	fs.IntVar(&f.ctx, "ctx", 0, "passages: prefix tokens (0: min(1024, model context - n-eval)); docs, full: window tokens (0: model context)")
	fs.IntVar(&f.nEval, "n-eval", 64, "passages: scored tokens per passage")
	fs.IntVar(&f.passages, "passages", 0, "at most this many passages, documents (docs) or windows (full); 0: all")
	fs.IntVar(&f.stride, "stride", 0, "docs, full: window stride (0: ctx/2)")
	fs.StringVar(&f.docs, "docs", "", "score only documents FROM:TO of --data (split by --doc-sep): indices (3226:4302) or fractions (0.75:1, 75%:)")
	fs.StringVar(&f.docSep, "doc-sep", "auto", "docs: blank (paragraphs), line (non-empty lines) or auto (blank when the text has blank lines)")
	fs.IntVar(&f.chunk, "chunk", 0, "tokens per Forward call after the prefill (0: 1 in passages mode, i.e. the decode path; 512 otherwise)")
	fs.Var(&f.configs, "config", "a cache configuration to compare with the reference (repeatable)")
	fs.StringVar(&f.configsFile, "configs", "", "JSON file with a list of configurations")
	fs.StringVar(&f.calib, "calib", "", "calibration file (kakeya-eval calibrate): keys are preconditioned and kakeya codecs use its codebooks unless precond=0, cb=0 (without it, a configuration whose codecs need principal components is calibrated automatically on the built-in text, once per model, and the file is kept in --calib-cache)")
	fs.StringVar(&f.calibCache, "calib-cache", "", "directory of the automatic calibrations, as kakeya-run's: a configuration whose codecs need principal components (kv=kakeya, kakeya-pc, kvtc) without --calib is calibrated on the model here, on the built-in text, once per model (default: the user cache directory's kakeya/calib)")
	fs.StringVar(&f.out, "out", "", "write the JSON report here (default: no report file)")
	fs.IntVar(&f.threads, "threads", 0, "compute threads per model (0: GOMAXPROCS)")
	fs.IntVar(&f.workers, "workers", 1, "passages evaluated at once")
	fs.StringVar(&f.device, "device", "cpu", "compute device: "+strings.Join(device.Names(), ", "))
	fs.StringVar(&f.matmul, "matmul", "f32", device.MatMulUsage+"; f32 by default here, so measurements do not mix the codec's error with bf16 rounding")
	f.maxInput = cli.DefaultMaxInput
	fs.Var(&f.maxInput, "max-input", cli.MaxInputUsage)
	kvflags.Register(fs, &f.cache)
	if err := parse(fs, pplUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("ppl: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ppl: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	err := ppl(ctx, &f, stdout, stderr)
	var intr interrupted
	if err != nil && ctx.Err() != nil && !errors.As(err, &intr) {
		return interrupted("ppl: interrupted before scoring began; nothing written")
	}
	// The library names cache settings by their Spec fields; say the flags.
	return kvflags.Error(err)
}

// interrupted is the one-line summary of a run stopped by Ctrl-C.
type interrupted string

func (e interrupted) Error() string { return string(e) }

// checkCounts names the first numeric flag outside its range.
func (f *pplFlags) checkCounts() error {
	for _, c := range []struct {
		name  string
		v     int
		least int
	}{
		{"--workers", f.workers, 1}, {"--n-eval", f.nEval, 1}, {"--ctx", f.ctx, 0}, {"--passages", f.passages, 0},
		{"--stride", f.stride, 0}, {"--chunk", f.chunk, 0},
	} {
		if c.v < c.least {
			return fmt.Errorf("%s %d must be >= %d", c.name, c.v, c.least)
		}
	}
	return checkThreads(f.threads)
}

// configurations gathers the reference and the configurations the flags,
// --configs and --config name, each completed by the cache flags' settings.
func (f *pplFlags) configurations() ([]eval.Config, error) {
	base := f.cache
	base.KV, base.K, base.V, base.KBits, base.VBits = "", "", "", 0, 0
	ref := eval.Reference()
	ref.Spec.CacheType = f.cache.CacheType
	configs := []eval.Config{ref}
	if f.cache.Compressed() {
		configs = append(configs, eval.Config{Name: f.cache.String(), Spec: f.cache})
	}
	if f.configsFile != "" {
		cs, err := eval.LoadConfigs(f.configsFile)
		if err != nil {
			return nil, err
		}
		configs = append(configs, cs...)
	}
	configs = append(configs, f.configs...)
	if err := eval.CheckNames(configs[1:]); err != nil {
		return nil, err
	}
	for i := range configs[1:] {
		c := &configs[i+1]
		c.Spec = c.Spec.Inherit(base)
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("config %s: %w", c.Name, err)
		}
		if f.calib == "" && c.Spec.Precondition == kvconfig.On {
			return nil, fmt.Errorf("config %s: precond=1 needs --calib", c.Name)
		}
		if f.calib == "" && c.Spec.Codebooks == kvconfig.On {
			return nil, fmt.Errorf("config %s: cb=1 needs --calib", c.Name)
		}
	}
	return configs, nil
}

func ppl(ctx context.Context, f *pplFlags, stdout, stderr io.Writer) error {
	r, run, err := evaluate(ctx, f, nil, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s mode, ctx %d, %d passages, %d scored tokens, %s hot blocks, %.1fs (run %.1fs)\n",
		filepath.Base(f.data), f.mode, r.Ctx, r.Passages, r.Tokens, r.CacheType, r.Seconds, run.Seconds())
	if err := r.WriteTable(stdout); err != nil {
		return err
	}
	if f.out != "" {
		if err := r.WriteJSON(f.out); err != nil {
			return fmt.Errorf("ppl: %w", err)
		}
		// The Pareto plot goes next to the report, when a configuration
		// can stand on its log-KL axis.
		png, ok := f.plotPath()
		if !ok {
			fmt.Fprintf(stdout, "report %s (no Pareto plot beside a device or FIFO)\n", f.out)
			return nil
		}
		title := fmt.Sprintf("%s on %s: %d passages, %d scored tokens", filepath.Base(r.Model), filepath.Base(f.data), r.Passages, r.Tokens)
		if err := r.WritePareto(png, title); err == nil {
			fmt.Fprintf(stdout, "report %s, Pareto plot %s\n", f.out, png)
		} else {
			fmt.Fprintf(stdout, "report %s (no Pareto plot: %v)\n", f.out, err)
		}
	}
	return nil
}

// paretoPath names the Pareto plot of the report at out: out.json gives
// out.pareto.png.
func paretoPath(out string) string {
	return strings.TrimSuffix(out, filepath.Ext(out)) + ".pareto.png"
}

// plotPath returns where ppl draws the Pareto plot of its report, beside
// --out; there is none without a report or when the report is written in
// place (--out /dev/stdout would put it in /dev).
func (f *pplFlags) plotPath() (string, bool) {
	if !f.plot || f.out == "" || outfile.IsInPlace(f.out) {
		return "", false
	}
	return paretoPath(f.out), true
}

// checkOutputs finds an output of f that cannot be written before the
// run, not after it.
func (f *pplFlags) checkOutputs() error {
	if f.out == "" {
		return nil
	}
	if err := outfile.Check(f.out); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if png, ok := f.plotPath(); ok {
		if err := outfile.Check(png); err != nil {
			return fmt.Errorf("pareto plot beside --out: %w", err)
		}
	}
	return nil
}

// evaluate scores the configurations of f (and of configsFor, when given,
// which sees the model's layer count) against the reference on the units of
// f's data, and returns the report and the time the scoring took.
func evaluate(ctx context.Context, f *pplFlags, configsFor func(layers int) ([]eval.Config, error), stderr io.Writer) (*eval.Report, time.Duration, error) {
	start := time.Now()
	docRange, err := f.prepare()
	if err != nil {
		return nil, 0, err
	}
	configs, err := f.configurations()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", f.cmd, err)
	}
	dir, err := resolveModel(ctx, f.model, stderr)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", f.cmd, err)
	}
	f.model = dir
	if configsFor != nil {
		if configs, err = f.addConfigs(configsFor); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", f.cmd, err)
		}
	}
	in, err := f.readInput(ctx, docRange)
	if err != nil {
		return nil, 0, err
	}
	eng, err := openEngine(ctx, f, configs, stderr)
	if err != nil {
		return nil, 0, err
	}
	defer eng.Close()

	p, err := f.unitParams(eng.m.MaxContext(), in.text)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", f.cmd, err)
	}
	units, err := eval.BuildUnits(in.text, in.tok, p)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %s: %w", f.cmd, f.data, err)
	}
	warnNothingCompressed(stderr, f.cmd, configs, units)

	runStart := time.Now()
	res, err := f.run(ctx, eng, units, configs, start, stderr)
	if err != nil {
		return nil, 0, err
	}
	r, err := f.report(res, units, configs, p, in, start)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", f.cmd, err)
	}
	if r.Calib == "" && eng.calib.Path != "" {
		// The automatic calibration's file reproduces the run as --calib.
		r.Calib = eng.calib.Path
		if r.CalibSHA256, err = eval.FileSHA256(r.Calib); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", f.cmd, err)
		}
	}
	return r, time.Since(runStart), nil
}

// prepare validates f's flags before anything is read, settles the
// defaults that depend on none of the input (--data, the device's
// --matmul and backend), and returns --docs parsed.
func (f *pplFlags) prepare() (eval.DocRange, error) {
	var docRange eval.DocRange
	if f.model == "" {
		return docRange, fmt.Errorf("%s: --model is required", f.cmd)
	}
	if f.data == "" {
		f.data = sharedFile("data", "wikitext-2-raw", "wiki.test.raw")
	}
	if err := f.checkCounts(); err != nil {
		return docRange, fmt.Errorf("%s: %w", f.cmd, err)
	}
	if err := f.checkOutputs(); err != nil {
		return docRange, fmt.Errorf("%s: %w", f.cmd, err)
	}
	if err := device.Check(f.device); err != nil {
		return docRange, fmt.Errorf("%s: %w", f.cmd, err)
	}
	if err := device.CheckMatMul(f.matmul); err != nil {
		return docRange, fmt.Errorf("%s: %w", f.cmd, err)
	}
	var err error
	if f.docs != "" {
		if docRange, err = eval.ParseDocRange(f.docs); err != nil {
			return docRange, fmt.Errorf("%s: --docs: %w", f.cmd, err)
		}
	}
	return docRange, nil
}

// addConfigs appends the configurations configsFor makes for the model's
// layer count to f's, and returns them all resolved again.
func (f *pplFlags) addConfigs(configsFor func(layers int) ([]eval.Config, error)) ([]eval.Config, error) {
	cfg, err := weights.LoadConfig(f.model)
	if err != nil {
		return nil, err
	}
	more, err := configsFor(cfg.NumLayers)
	if err != nil {
		return nil, err
	}
	f.configs = append(f.configs, more...)
	return f.configurations()
}

// input is the text an evaluation scores and what its report says of it.
type input struct {
	text     string               // the selected documents of --data
	sum      string               // SHA-256 of all of --data, hex
	docsNote string               // "first:end of total" under --docs
	tok      *tokenizer.Tokenizer // the model's
	tokPath  string
}

// readInput reads --data (its --docs selection) and the model's tokenizer.
func (f *pplFlags) readInput(ctx context.Context, docRange eval.DocRange) (*input, error) {
	raw, err := cli.ReadFile(ctx, f.data, int64(f.maxInput), "--max-input")
	if err != nil {
		return nil, fmt.Errorf("%s: --data: %w", f.cmd, err)
	}
	in := &input{text: string(raw), sum: sha256Hex(raw), tokPath: filepath.Join(f.model, "tokenizer.json")}
	if weights.IsGGUF(f.model) {
		in.tokPath = f.model // its tokenizer.ggml.* keys
	}
	if f.docs != "" {
		sel, first, end, total, err := eval.SelectDocuments(in.text, f.docSep, docRange)
		if err != nil {
			return nil, fmt.Errorf("%s: --docs %s: %w", f.cmd, f.docs, err)
		}
		in.docsNote = fmt.Sprintf("%d:%d of %d", first, end, total)
		in.text = sel
	}
	if in.tok, err = kakeya.LoadTokenizer(f.model); err != nil {
		return nil, fmt.Errorf("%s: %w", f.cmd, err)
	}
	return in, nil
}

// unitParams returns how f's mode cuts text into units for a model of
// maxCtx positions: --ctx, --stride and the document separator with their
// defaults filled in. It defaults --chunk too, per mode.
func (f *pplFlags) unitParams(maxCtx int, text string) (eval.UnitParams, error) {
	p := eval.UnitParams{Mode: f.mode, Ctx: f.ctx, NEval: f.nEval, Stride: f.stride, Max: f.passages, DocSep: f.docSep}
	switch f.mode {
	case eval.ModePassages:
		if p.Ctx == 0 {
			p.Ctx = min(1024, maxCtx-f.nEval)
		}
		if p.Ctx < 1 || p.Ctx+f.nEval > maxCtx {
			return p, fmt.Errorf("ctx %d + n_eval %d = %d tokens exceeds the model context of %d", p.Ctx, f.nEval, p.Ctx+f.nEval, maxCtx)
		}
		if f.chunk == 0 {
			f.chunk = 1
		}
	case eval.ModeDocs, eval.ModeFull:
		if p.Ctx == 0 {
			p.Ctx = maxCtx
		}
		if p.Ctx > maxCtx {
			return p, fmt.Errorf("window ctx %d exceeds the model context of %d", p.Ctx, maxCtx)
		}
		if f.chunk == 0 {
			f.chunk = 512
		}
		var err error
		if p.DocSep, err = eval.ResolveDocSep(f.docSep, text); err != nil {
			return p, fmt.Errorf("--doc-sep: %w", err)
		}
	default:
		return p, fmt.Errorf("unknown --mode %q (want passages, docs or full)", f.mode)
	}
	if p.Stride == 0 {
		p.Stride = p.Ctx / 2
	}
	return p, nil
}

// warnNothingCompressed warns, once per configuration, where its hot
// window and sinks cover every unit, so that it scores as the reference
// (the table marks its row).
func warnNothingCompressed(stderr io.Writer, cmd string, configs []eval.Config, units []eval.Unit) {
	longest := eval.LongestFed(units)
	for _, c := range configs[1:] {
		if c.Settings == nil {
			continue
		}
		if w := c.Settings.NothingCompressed(longest); w != nil {
			fmt.Fprintf(stderr, "%s: warning: config %s: %s\n", cmd, c.Name, kvflags.Error(w))
		}
	}
}

// run scores units under every configuration with a progress line on
// stderr. Stopped by ctx, it returns interrupted, saying how far it got
// since start.
func (f *pplFlags) run(ctx context.Context, eng *engine, units []eval.Unit, configs []eval.Config, start time.Time, stderr io.Writer) (*eval.Result, error) {
	prog := eval.NewProgress(stderr, term.IsTerminal(stderr), f.cmd, len(units))
	switch f.mode {
	case eval.ModeDocs:
		prog.Unit = "documents"
	case eval.ModeFull:
		prog.Unit = "windows"
	}
	var done int
	res, err := eval.Run(ctx, eng, units, configs, eval.Options{Chunk: f.chunk, Workers: f.workers, Progress: func(d, tokens int) {
		done = d
		prog.Update(d, tokens)
	}})
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			unit := prog.Unit
			if unit == "" {
				unit = "passages"
			}
			return nil, interrupted(fmt.Sprintf("%s: interrupted after %d of %d %s (%.0fs); nothing written", f.cmd, done, len(units), unit, time.Since(start).Seconds()))
		}
		return nil, fmt.Errorf("%s: %w", f.cmd, err)
	}
	return res, nil
}

// report builds the run's report: the results, and the inputs and
// settings that reproduce them.
func (f *pplFlags) report(res *eval.Result, units []eval.Unit, configs []eval.Config, p eval.UnitParams, in *input, start time.Time) (*eval.Report, error) {
	r := eval.NewReport(res, units, start, time.Since(start))
	r.Model, r.Data, r.DataSHA256, r.Tokenizer = f.model, f.data, in.sum, in.tokPath
	var err error
	if r.ModelSHA256, err = eval.ModelSHA256(f.model); err != nil {
		return nil, err
	}
	if f.calib != "" {
		r.Calib = f.calib
		if r.CalibSHA256, err = eval.FileSHA256(f.calib); err != nil {
			return nil, err
		}
	}
	r.Mode, r.Ctx, r.Chunk, r.Workers, r.Docs = f.mode, p.Ctx, f.chunk, f.workers, in.docsNote
	r.Threads, r.CacheType = f.threads, configs[0].Settings.CacheType
	if r.Threads == 0 {
		r.Threads = runtime.GOMAXPROCS(0)
	}
	switch f.mode {
	case eval.ModePassages:
		r.NEval = f.nEval
	case eval.ModeDocs:
		r.DocSep, r.Stride = p.DocSep, p.Stride
	case eval.ModeFull:
		r.Stride = p.Stride
	}
	return r, nil
}

// logger is the automatic calibration's log on stderr: its line (how
// long, which file) and warnings, without time stamps.
func logger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}))
}

// engine adapts model.Model to eval.Engine: one loaded model, and per
// configuration the cache settings its sequences get.
type engine struct {
	m     *model.Model
	calib kakeya.CalibrationInfo // the automatic calibration, when a configuration made or read one
	opts  map[string]model.SequenceOptions
	done  func() // releases the backend openEngine opened
}

// openEngine loads the model once and resolves every configuration for it,
// recording the settings in effect in configs.
func openEngine(ctx context.Context, f *pplFlags, configs []eval.Config, stderr io.Writer) (*engine, error) {
	b, err := device.Open(f.device, f.threads, f.matmul)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.cmd, err)
	}
	done := func() { b.Close() }
	m, err := model.Load(f.model, model.Options{Backend: b})
	if err != nil {
		done()
		return nil, fmt.Errorf("%s: %w", f.cmd, err)
	}
	e := &engine{m: m, opts: map[string]model.SequenceOptions{}, done: done}
	cs, err := kakeya.NewCaches(m, kakeya.Options{
		Calibration: f.calib, CalibrationCache: f.calibCache,
		CalibrationProgress: cli.CalibrationProgress(stderr, f.cmd), Log: logger(stderr),
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("%s: %w", f.cmd, err)
	}
	for i := range configs {
		if err := ctx.Err(); err != nil {
			e.Close()
			return nil, err
		}
		c := &configs[i]
		seq, st, info, err := cs.Cache(ctx, c.Spec)
		if err != nil {
			e.Close()
			if se := (*kvconfig.SettingError)(nil); errors.As(err, &se) {
				err = se // named by the configuration below
			}
			return nil, fmt.Errorf("%s: config %s: %w", f.cmd, c.Name, err)
		}
		if info.Auto {
			e.calib = info
		}
		c.Settings = &st
		e.opts[c.Name] = seq
	}
	return e, nil
}

func (e *engine) Vocab() int { return e.m.Config().VocabSize }

func (e *engine) NewSequence(c eval.Config) (eval.Sequence, error) {
	o, ok := e.opts[c.Name]
	if !ok {
		return nil, fmt.Errorf("no cache policy built for configuration %s", c.Name)
	}
	s, err := e.m.NewSequenceOpts(o)
	if err != nil {
		return nil, err
	}
	return sequence{s}, nil
}

func (e *engine) Close() {
	e.m.Close()
	e.done()
}

// sequence adapts model.Sequence to eval.Sequence.
type sequence struct{ s *model.Sequence }

func (s sequence) Forward(ids []int, all bool) ([]float32, error) { return s.s.Forward(ids, all) }

func (s sequence) KV() eval.KVUsage {
	st := s.s.KVStats()
	u := eval.KVUsage{BF16: st.BF16, Encoded: st.Compressed, EncodedBF16: st.CompressedBF16}
	for _, l := range st.Layers {
		u.K += l.KHot + l.KCompressed
		u.V += l.VHot + l.VCompressed
	}
	return u
}

func (s sequence) Close() error {
	s.s.Close()
	return nil
}
