package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

const pplUsage = `usage: kakeya-eval ppl --model DIR [flags]

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

--config grammar (repeatable): comma-separated key=value,
  name=NAME,k=SPEC,v=SPEC,kv=SPEC,boundary=0;1;-1,block=N,hot=N,sinks=N,precond=0|1,cb=0|1
where SPEC is a codec spec ("int8", "kakeya:b=3"; commas inside a spec are
kept when the next piece is not one of these keys) and boundary layers,
separated by ';' (negative from the end), skip the codecs and keep bf16 blocks.
precond=1 whitens keys by the calibrated query covariance and cb=1 gives kakeya
codecs the calibrated Lloyd-Max codebooks; both need --calib.
--configs FILE reads a JSON list of {"name","k","v","boundary","block","hot","sinks","precond","cb"}.

The table goes to stdout; the JSON report is written (atomically) only when
--out is given. Ctrl-C stops the run and writes nothing.

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
	model, data, mode, docSep, configsFile, calib, out  string
	cacheType                                           string
	ctx, nEval, passages, stride, chunk, threads, block int
	workers                                             int
	configs                                             configList
}

func runPPL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f pplFlags
	fs := newFlagSet("ppl", pplUsage, stderr)
	fs.StringVar(&f.model, "model", "", "model directory (config.json, safetensors, tokenizer.json) or Hugging Face id")
	fs.StringVar(&f.data, "data", "", "text file (default $KAKEYA_SHARED/data/wikitext-2-raw/wiki.test.raw, KAKEYA_SHARED default ../shared)")
	fs.StringVar(&f.mode, "mode", eval.ModePassages, "passages, docs or full")
	fs.IntVar(&f.ctx, "ctx", 0, "passages: prefix tokens (0: min(1024, model context - n-eval)); docs, full: window tokens (0: model context)")
	fs.IntVar(&f.nEval, "n-eval", 64, "passages: scored tokens per passage")
	fs.IntVar(&f.passages, "passages", 0, "at most this many passages, documents (docs) or windows (full); 0: all")
	fs.IntVar(&f.stride, "stride", 0, "docs, full: window stride (0: ctx/2)")
	fs.StringVar(&f.docSep, "doc-sep", "auto", "docs: blank (paragraphs), line (non-empty lines) or auto (blank when the text has blank lines)")
	fs.IntVar(&f.chunk, "chunk", 0, "tokens per Forward call after the prefill (0: 1 in passages mode, i.e. the decode path; 512 otherwise)")
	fs.Var(&f.configs, "config", "a cache configuration to compare with the reference (repeatable)")
	fs.StringVar(&f.configsFile, "configs", "", "JSON file with a list of configurations")
	fs.StringVar(&f.cacheType, "cache-type", "bf16", "storage of uncompressed KV blocks in every configuration, the reference included: bf16 or f32 (exact)")
	fs.StringVar(&f.calib, "calib", "", "calibration file for precond=1 and cb=1 configurations")
	fs.StringVar(&f.out, "out", "", "write the JSON report here (default: no report file)")
	fs.IntVar(&f.threads, "threads", 0, "compute threads per model (0: GOMAXPROCS)")
	fs.IntVar(&f.block, "block-size", 0, "tokens per KV block for configurations without block= (0: the engine default)")
	fs.IntVar(&f.workers, "workers", 1, "passages evaluated at once")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("ppl: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ppl: unexpected argument %q", fs.Arg(0))
	}
	return ppl(ctx, &f, stdout, stderr)
}

func ppl(ctx context.Context, f *pplFlags, stdout, stderr io.Writer) error {
	start := time.Now()
	if f.model == "" {
		return errors.New("ppl: --model is required")
	}
	if f.data == "" {
		f.data = sharedFile("data", "wikitext-2-raw", "wiki.test.raw")
	}
	configs := []eval.Config{eval.Reference()}
	if f.configsFile != "" {
		cs, err := eval.LoadConfigs(f.configsFile)
		if err != nil {
			return fmt.Errorf("ppl: %w", err)
		}
		configs = append(configs, cs...)
	}
	configs = append(configs, f.configs...)
	if err := eval.CheckNames(configs[1:]); err != nil {
		return fmt.Errorf("ppl: %w", err)
	}
	switch f.cacheType {
	case "f32", "bf16":
	default:
		return fmt.Errorf("ppl: --cache-type %q: want f32 or bf16", f.cacheType)
	}
	for _, c := range configs {
		if c.Precondition && f.calib == "" {
			return fmt.Errorf("ppl: config %s: precond=1 needs --calib", c.Name)
		}
		if c.Codebooks && f.calib == "" {
			return fmt.Errorf("ppl: config %s: cb=1 needs --calib", c.Name)
		}
		if err := cacheSpec(c, f.cacheType).Validate(); err != nil {
			return fmt.Errorf("ppl: config %s: %w", c.Name, err)
		}
	}
	if f.workers < 1 || f.threads < 0 || f.block < 0 || f.nEval < 1 || f.passages < 0 || f.stride < 0 || f.chunk < 0 || f.ctx < 0 {
		return errors.New("ppl: --workers must be >= 1, --n-eval >= 1, and --ctx, --passages, --stride, --chunk, --threads, --block-size >= 0")
	}

	dir, err := resolveModel(ctx, f.model, stderr)
	if err != nil {
		return fmt.Errorf("ppl: %w", err)
	}
	f.model = dir
	raw, err := os.ReadFile(f.data)
	if err != nil {
		return fmt.Errorf("ppl: %w", err)
	}
	sum, err := eval.FileSHA256(f.data)
	if err != nil {
		return fmt.Errorf("ppl: %w", err)
	}
	text := string(raw)
	tokPath := filepath.Join(f.model, "tokenizer.json")
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		return fmt.Errorf("ppl: %w", err)
	}

	eng, err := openEngine(ctx, f, configs)
	if err != nil {
		return err
	}
	defer eng.Close()

	maxCtx := eng.m.MaxContext()
	p := eval.UnitParams{Mode: f.mode, Ctx: f.ctx, NEval: f.nEval, Stride: f.stride, Max: f.passages, DocSep: f.docSep}
	switch f.mode {
	case eval.ModePassages:
		if p.Ctx == 0 {
			p.Ctx = min(1024, maxCtx-f.nEval)
		}
		if p.Ctx < 1 || p.Ctx+f.nEval > maxCtx {
			return fmt.Errorf("ppl: ctx %d + n_eval %d = %d tokens exceeds the model context of %d", p.Ctx, f.nEval, p.Ctx+f.nEval, maxCtx)
		}
		if f.chunk == 0 {
			f.chunk = 1
		}
	case eval.ModeDocs, eval.ModeFull:
		if p.Ctx == 0 {
			p.Ctx = maxCtx
		}
		if p.Ctx > maxCtx {
			return fmt.Errorf("ppl: window ctx %d exceeds the model context of %d", p.Ctx, maxCtx)
		}
		if f.chunk == 0 {
			f.chunk = 512
		}
		if p.DocSep == "auto" {
			p.DocSep = eval.SepLine
			if strings.Contains(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
				p.DocSep = eval.SepBlank
			}
		}
	default:
		return fmt.Errorf("ppl: unknown --mode %q (want passages, docs or full)", f.mode)
	}
	if p.Stride == 0 {
		p.Stride = p.Ctx / 2
	}
	units, err := eval.BuildUnits(text, tok, p)
	if err != nil {
		return fmt.Errorf("ppl: %s: %w", f.data, err)
	}

	prog := eval.NewProgress(stderr, isTerminal(stderr), "ppl", len(units))
	runStart := time.Now()
	res, err := eval.Run(ctx, eng, units, configs, eval.Options{Chunk: f.chunk, Workers: f.workers, Progress: prog.Update})
	prog.Finish()
	if err != nil {
		return fmt.Errorf("ppl: %w", err)
	}
	r := eval.NewReport(res, units, start, time.Since(start))
	r.Model, r.Data, r.DataSHA256, r.Tokenizer = f.model, f.data, sum, tokPath
	r.Mode, r.Ctx, r.Chunk, r.BlockSize, r.Calib, r.Workers = f.mode, p.Ctx, f.chunk, f.block, f.calib, f.workers
	r.Threads, r.CacheType = f.threads, f.cacheType
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
	fmt.Fprintf(stdout, "%s: %s mode, ctx %d, %d passages, %d scored tokens, %s hot blocks, %.1fs (run %.1fs)\n",
		filepath.Base(f.data), f.mode, p.Ctx, len(units), r.Tokens, f.cacheType, r.Seconds, time.Since(runStart).Seconds())
	if err := r.WriteTable(stdout); err != nil {
		return err
	}
	if f.out != "" {
		if err := r.WriteJSON(f.out); err != nil {
			return fmt.Errorf("ppl: %w", err)
		}
	}
	return nil
}

// engine adapts model.Model to eval.Engine: one loaded model, and per
// configuration the cache settings its sequences get.
type engine struct {
	m    *model.Model
	opts map[string]model.SequenceOptions
}

func openEngine(ctx context.Context, f *pplFlags, configs []eval.Config) (*engine, error) {
	m, err := model.Load(f.model, model.Options{Threads: f.threads, BlockSize: f.block})
	if err != nil {
		return nil, fmt.Errorf("ppl: %w", err)
	}
	e := &engine{m: m, opts: map[string]model.SequenceOptions{}}
	var cal *codec.Calibration
	for _, c := range configs {
		if err := ctx.Err(); err != nil {
			e.Close()
			return nil, err
		}
		if (c.Precondition || c.Codebooks) && cal == nil {
			if cal, err = model.LoadCalibration(f.calib, m.Config()); err != nil {
				e.Close()
				return nil, fmt.Errorf("ppl: config %s: %w", c.Name, err)
			}
		}
		pol, err := m.Policy(cacheSpec(c, f.cacheType), cal)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("ppl: config %s: %w", c.Name, err)
		}
		e.opts[c.Name] = model.SequenceOptions{Cache: pol, BlockSize: c.BlockSize}
	}
	return e, nil
}

// cacheSpec is the model's view of a configuration's cache settings, with
// uncompressed blocks stored as cacheType (f32 or bf16).
func cacheSpec(c eval.Config, cacheType string) model.CacheSpec {
	return model.CacheSpec{K: c.K, V: c.V, Boundary: c.Boundary, HotWindow: c.HotWindow, Sinks: c.Sinks,
		Precondition: c.Precondition, Codebooks: c.Codebooks, HotBF16: cacheType == "bf16"}
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

func (e *engine) Close() { e.m.Close() }

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

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
