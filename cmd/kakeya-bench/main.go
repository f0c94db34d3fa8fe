// Command kakeya-bench measures prefill and decode speed the way llama.cpp's
// llama-bench does, and prints one Markdown table: for every KV cache, thread
// count and context, the prefill rate of a ctx-token prompt and the decode
// rate of --gen tokens after it.
//
// Without --model it writes a seeded random checkpoint with Qwen2.5-0.5B's
// exact shape (bf16, about 1 GB) to a temporary directory first, so runs on
// different machines or commits compare like with like.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/internal/stats"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	kcpu "github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

const usage = `usage: kakeya-bench [flags]

Prefill and decode tokens/s per KV cache, thread count and context, as one
Markdown table. Each cell is the median of --reps runs: a fresh sequence
prefills a prompt of ctx random tokens, then decodes --gen tokens one step
at a time; each model load is warmed up first by an untimed short run.
Caches: plain (bf16, the tools' default), or a codec spec, each compressed
cache with every layer compressed (--boundary none, unless given),
64-token blocks (--block-size) and one hot window for every row,
--hot-window's (32 tokens, the kakeya preset's), so that the rows compare
like with like: the same bf16 rows to read each step, and the same block
encodes inside the timed steps (the last two columns). kakeya-run gives a
codec spec a hot window of one block instead (64 tokens): write hot=64
in an entry, or --hot-window 64, to measure that. An entry in the
settings grammar of kakeya-eval's configurations sets its own
(kv=kakeya,block=32,hot=16; --boundary, --block-size and --hot-window
fill the rest). kakeya alone is the kakeya preset (keys
kakeya-pc:codedfrac=0.25,maxbits=5,rate=1.3, values kakeya-pc:rate=2.5,
a 32-token hot window), which, like any
kakeya-pc or kvtc cache, needs a calibration: --calib, or
else the automatic one kakeya-run and kakeya-serve make (the same file,
read from --calib-cache or made there once on the built-in text). The
seeded checkpoint written without --model has no tokenizer: there (and for
any model without one), without --calib, one is made in memory on random
tokens like the prompts' (the speed is the same; its statistics are not a
real text's).
Per row, the operations a decode step asks of the device (ops/step: kernel
launches on CUDA, counted inside replayed graphs too; the seam's operations
on the CPU), on CUDA the host's calls into the driver per step, the hot
window in tokens, and how many blocks each layer side of each KV head
encodes during a run's --gen steps (encodes/run: one per --block-size
tokens in the steady state; which steps they fall in follows from ctx,
the hot window and the block size, so a --gen of a multiple of the block
size measures the steady state whatever the context).
A signal (SIGINT, SIGTERM) stops the run between two passes of a prefill
(of at most 512 tokens) or two decode steps.

With --concurrency, the serving mode instead: per cache, thread count and
client count, synthetic requests (--prompt-len, --shared-prefix, --gen)
run through the scheduler over one block pool of --kv-memory bytes, and
the table gives decode and output tok/s, time to first token, the most
requests admitted at once, the prefix hit rate and preemptions.

Flags:
`

func main() {
	cli.Main("kakeya-bench", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return kvflags.Error(run(ctx, args, stdout, stderr))
	})
}

// options are the parsed flags.
type options struct {
	model         string
	device        string // --device: cpu, cuda or cuda:N
	boundary      string
	blockSize     int
	hotWindow     int           // --hot-window: tokens, -1 for none
	calib         string        // --calib: a calibration file for codecs that need one
	calibCache    string        // --calib-cache: the automatic calibrations' directory
	noTokenizer   bool          // the model has no tokenizer (the seeded checkpoint)
	dir           string        // the model directory
	cals          *calibrations // --calib's, loaded once, or those made without it
	caches        []string
	matmuls       []string
	threads, ctxs []int
	gen, reps     int
	warmup        bool
	progress      bool
	perf          *perfControl // --perf-ctl, or nil
	serve         serveOptions // with --concurrency
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	began := time.Now()
	var o options
	var caches, matmuls, threads, ctxs, conc string
	var timeLimit time.Duration
	kvMemory := cli.ByteSize(2 << 30)
	fs := flag.NewFlagSet("kakeya-bench", flag.ContinueOnError)
	fs.StringVar(&o.device, "device", "cpu", "compute device: "+strings.Join(device.Names(), ", ")+"; on a GPU --threads and --matmul do not apply (one run per cache and context)")
	fs.StringVar(&o.model, "model", "", "model directory or GGUF file (default: a seeded checkpoint of Qwen2.5-0.5B's shape, written to a temporary directory)")
	fs.StringVar(&o.boundary, "boundary", "none", "layers of compressed caches kept bf16, as kakeya-run's --boundary ("+kvconfig.DefaultBoundary+" is the tools' default)")
	fs.IntVar(&o.blockSize, "block-size", 0, "tokens per block of the compressed caches, as kakeya-run's --block-size (0: the tools' default, 64 with a codec)")
	fs.IntVar(&o.hotWindow, "hot-window", kvconfig.PresetHotWindow, "the newest `N` tokens of every compressed cache stay bf16, for each --cache entry that does not set its own (hot= in the settings grammar): one window for all rows, by default the kakeya preset's, so that they compare like with like (kakeya-run gives a codec spec one block, 64 tokens; 0: none)")
	fs.StringVar(&o.calib, "calib", "", "calibration `FILE` from kakeya-eval calibrate, as kakeya-run's --calib: kakeya-pc and kvtc caches need one with principal components; the others use its query factors and codebooks (without it, those that need one are calibrated automatically on the built-in text, once per model, as kakeya-run does, and the file is kept in --calib-cache; a model without a tokenizer on random tokens)")
	fs.StringVar(&o.calibCache, "calib-cache", "", "directory of the automatic calibrations, as kakeya-run's: a cache that needs principal components (the kakeya preset, kakeya-pc, kvtc) without --calib gets the file kakeya-run would, read from here or made here once on the built-in text (default: the user cache directory's kakeya/calib)")
	fs.StringVar(&caches, "cache", "plain,int8,int4,kakeya-block:b=3,kakeya", "KV caches, comma-separated: plain or a codec spec (kakeya-block:b=3 ...; separate specs holding commas with ;, and end a single one with ;), or K/V, the keys' codec and the values' (kakeya-pc:coded=8/kakeya-pc), or settings in kvconfig's grammar (kv=kakeya,block=32,hot=16); kakeya alone is the preset, whose calibration, as for the other kakeya-pc and kvtc caches, is --calib or the automatic one (see --calib-cache)")
	fs.StringVar(&matmuls, "matmul", "bf16", "precisions of the activations in bf16 matrix products, comma-separated: bf16 (llama.cpp's arithmetic, kakeya-run's default) and/or f32 (exact, kakeya-eval's default)")
	fs.StringVar(&threads, "threads", "1,2", "thread counts, comma-separated")
	fs.StringVar(&ctxs, "ctx", "128,2048", "contexts (prompt tokens before decoding), comma-separated")
	fs.IntVar(&o.gen, "gen", 32, "decoded tokens per run")
	fs.IntVar(&o.reps, "reps", 3, "runs per cell (the median is reported)")
	fs.BoolVar(&o.warmup, "warmup", true, "after each model load, run one untimed short prefill and decode step first (llama-bench's warmup): the first timed run then does not pay for paging the weights in")
	fs.BoolVar(&o.progress, "progress", true, "print each run to stderr as it finishes")
	var perfCtl string
	fs.StringVar(&perfCtl, "perf-ctl", "", "`FIFO[,ACK]`: perf record's control FIFO (and ack FIFO) of --control fifo:FIFO,ACK: each timed decode loop is preceded by enable and followed by disable there, so that perf record -D -1 samples the decode steps alone, not the prefills")
	fs.StringVar(&conc, "concurrency", "", "serving mode: client counts, comma-separated (e.g. 1,4,16,64); each level sends synthetic requests through the scheduler")
	fs.Var(&kvMemory, "kv-memory", "serving mode: the KV block pool's budget (K, M, G suffixes, binary)")
	fs.IntVar(&o.serve.promptLen, "prompt-len", 128, "serving mode: prompt tokens per request")
	fs.Float64Var(&o.serve.sharedPrefix, "shared-prefix", 0, "serving mode: the fraction of each prompt that every request shares (0..1)")
	fs.IntVar(&o.serve.requests, "requests", 0, "serving mode: requests per level (0: one per client); a client sends its next when its last ended")
	fs.IntVar(&o.serve.stepTokens, "step-tokens", 512, "serving mode: the most tokens one batched step runs")
	fs.BoolVar(&o.serve.json, "json", false, "serving mode: print the rows as JSON instead of a table")
	fs.Float64Var(&o.serve.temperature, "temperature", 0, "serving mode: 0 takes the most likely token (on the device where the backend picks there); above 0 each request samples at this temperature (with --top-p and --top-k): drawn on the device where the backend draws there (only the token crosses to the host), else from the logits on the host")
	fs.Float64Var(&o.serve.topP, "top-p", 0, "serving mode, with --temperature: each request's top-p (0 or 1: off)")
	fs.DurationVar(&timeLimit, "time-limit", 0, "serving mode: stop measuring this long after kakeya-bench starts (0: never): the level running then reports what it measured so far (the requests done, the tokens generated until then, the most admitted at once), its row marked stopped, and the levels and caches after it do not run")
	fs.IntVar(&o.serve.topK, "top-k", 0, "serving mode, with --temperature: each request's top-k (0: off; above 1024, below the vocabulary, drawn on the host)")
	if err := cli.Parse(fs, args, stdout, stderr, func(w io.Writer) {
		io.WriteString(w, usage)
		cli.PrintDefaults(fs, w)
	}); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	var err error
	if o.device != "cpu" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, f := range []string{"threads", "matmul"} {
			if set[f] {
				return fmt.Errorf("--%s applies to --device cpu, not %s", f, o.device)
			}
		}
		// Fail before writing a checkpoint on a machine without the
		// device; each level opens it again.
		b, err := device.Open(o.device, 0, "")
		if err != nil {
			return err
		}
		b.Close()
		// One level: the device's own arithmetic, no CPU threads.
		matmuls, threads = "f32", "0"
	}
	switch {
	case o.hotWindow < 0:
		return fmt.Errorf("--hot-window %d must be >= 0", o.hotWindow)
	case o.hotWindow == 0:
		o.hotWindow = -1 // none: 0 in a kvconfig.Spec means one block
	}
	if o.caches, err = parseCaches(caches, o.boundary); err != nil {
		return err
	}
	if perfCtl != "" {
		if o.perf, err = openPerfControl(perfCtl); err != nil {
			return err
		}
		defer o.perf.Close()
	}
	if o.matmuls, err = parseMatMuls(matmuls); err != nil {
		return err
	}
	lo := 1 // threads; 0 stands for the device's level, which has none
	if o.device != "cpu" {
		lo = 0
	}
	if o.threads, err = parseInts("--threads", threads, lo, cpubackend.MaxThreads()); err != nil {
		return err
	}
	if o.ctxs, err = parseInts("--ctx", ctxs, 1, 1<<20); err != nil {
		return err
	}
	switch {
	case o.gen < 1:
		return fmt.Errorf("--gen %d must be >= 1", o.gen)
	case o.reps < 1:
		return fmt.Errorf("--reps %d must be >= 1", o.reps)
	case o.blockSize < 0:
		return fmt.Errorf("--block-size %d must be >= 0", o.blockSize)
	}
	if conc != "" {
		if o.serve.concurrency, err = parseInts("--concurrency", conc, 1, 4096); err != nil {
			return err
		}
		o.serve.kvMemory = int64(kvMemory)
		switch {
		case o.serve.promptLen < 1:
			return fmt.Errorf("--prompt-len %d must be >= 1", o.serve.promptLen)
		case !(o.serve.sharedPrefix >= 0 && o.serve.sharedPrefix <= 1):
			return fmt.Errorf("--shared-prefix %v must be in [0, 1]", o.serve.sharedPrefix)
		case o.serve.requests < 0:
			return fmt.Errorf("--requests %d must be >= 0", o.serve.requests)
		case o.serve.stepTokens < 1:
			return fmt.Errorf("--step-tokens %d must be >= 1", o.serve.stepTokens)
		case !(o.serve.temperature >= 0 && o.serve.temperature <= 2):
			return fmt.Errorf("--temperature %v must be in [0, 2]", o.serve.temperature)
		case !(o.serve.topP >= 0 && o.serve.topP <= 1):
			return fmt.Errorf("--top-p %v must be in [0, 1]", o.serve.topP)
		case o.serve.topK < 0:
			return fmt.Errorf("--top-k %d must be >= 0", o.serve.topK)
		case timeLimit < 0:
			return fmt.Errorf("--time-limit %v must be >= 0", timeLimit)
		}
		if timeLimit > 0 {
			o.serve.deadline = began.Add(timeLimit)
		}
	} else if timeLimit != 0 {
		return fmt.Errorf("--time-limit applies to the serving mode (--concurrency)")
	}

	dir, desc := o.model, "model "+o.model
	if dir == "" {
		tmp, err := os.MkdirTemp("", "kakeya-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		// Interrupted, the command may exit before run returns: the
		// checkpoint goes as soon as the signal comes (a mapped file
		// stays readable once unlinked).
		stop := context.AfterFunc(ctx, func() { os.RemoveAll(tmp) })
		defer stop()
		fmt.Fprintln(stderr, "kakeya-bench: writing a seeded Qwen2.5-0.5B-shaped bf16 checkpoint to", tmp)
		if err := testmodel.Write(tmp, testmodel.Qwen25_05B); err != nil {
			return err
		}
		dir, desc = tmp, "seeded checkpoint of Qwen2.5-0.5B's shape (bf16)"
	}
	if !strings.HasSuffix(strings.ToLower(dir), ".gguf") { // a GGUF file holds its tokenizer
		_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
		o.noTokenizer = err != nil
	}
	o.dir, o.cals = dir, new(calibrations)
	if o.serve.concurrency != nil {
		rows, err := measureServing(ctx, dir, o, stderr)
		if err != nil {
			return err
		}
		if !o.serve.json {
			fmt.Fprintf(stdout, "%s; %s; kernels %s; GOMAXPROCS %d; serving: %d-token prompts (%.0f%% shared), %d generated tokens each, %s, KV memory %s, steps of %d tokens\n\n",
				desc, runtime.GOARCH, kcpu.Features(), runtime.GOMAXPROCS(0), o.serve.promptLen, 100*o.serve.sharedPrefix, o.gen, o.serve.picking(), cli.Bytes(o.serve.kvMemory), o.serve.stepTokens)
		}
		return writeServe(stdout, rows, o.serve.json)
	}
	rows, dev, err := measure(ctx, dir, o, stderr)
	if err != nil {
		return err
	}
	if o.device != "cpu" {
		desc += "; device " + dev
	}
	fmt.Fprintf(stdout, "%s; %s; kernels %s; GOMAXPROCS %d; %d decoded tokens per run, median of %d\n\n",
		desc, runtime.GOARCH, kcpu.Features(), runtime.GOMAXPROCS(0), o.gen, o.reps)
	writeTable(stdout, rows)
	return nil
}

// row is one cell of the table.
type row struct {
	cache, matmul   string
	threads, ctx    int
	prefill, decode float64 // tokens/s, medians
	kvMiB, kvRatio  float64 // after the last run's decode
	// Per decode step of the last run: the operations asked of the
	// device, and the driver calls (driver false where none are counted).
	ops, calls float64
	driver     bool
	// For a compressed cache (compressed true): its hot window in
	// tokens, and the blocks each layer side of a KV head encodes during
	// a run's decode steps.
	compressed   bool
	hot, encodes int
}

// backend opens --device's backend for one level: on the CPU of th
// threads and matmul precision mm (a GPU's levels are "f32" and 0, its
// own arithmetic). done releases it.
func (o options) backend(mm string, th int) (b compute.Backend, done func(), err error) {
	if o.device != "cpu" {
		mm = ""
	}
	if b, err = device.Open(o.device, th, mm); err != nil {
		return nil, nil, err
	}
	return b, func() { b.Close() }, nil
}

// measureLoad loads the model on the backend of one level (see backend)
// and runs its cells; it returns them and the backend's description.
func measureLoad(ctx context.Context, dir string, maxCtx int, mm string, th int, o options, stderr io.Writer) ([]row, string, error) {
	b, done, err := o.backend(mm, th)
	if err != nil {
		return nil, "", err
	}
	defer done()
	desc := b.Name()
	if d, ok := b.(compute.Describer); ok {
		desc = d.Describe()
	}
	b, counts := device.Count(b) // before the model loads: see device.Count
	m, err := model.Load(dir, model.Options{Backend: b, MaxContext: maxCtx})
	if err != nil {
		return nil, "", err
	}
	defer m.Close()
	rows, err := measureModel(ctx, m, counts, mm, th, o, stderr)
	return rows, desc, err
}

// measureServing runs every (threads, cache, concurrency) level of the
// serving mode.
func measureServing(ctx context.Context, dir string, o options, stderr io.Writer) ([]serveRow, error) {
	var rows []serveRow
	for _, mm := range o.matmuls {
		for _, th := range o.threads {
			if late(o.serve.deadline) {
				fmt.Fprintf(stderr, "kakeya-bench: --time-limit reached: %s matmul, %d threads and what follows not run\n", mm, th)
				return rows, nil
			}
			b, done, err := o.backend(mm, th)
			if err != nil {
				return nil, err
			}
			m, err := model.Load(dir, model.Options{Backend: b, MaxContext: o.serve.promptLen + o.gen})
			if err != nil {
				done()
				return nil, err
			}
			r, err := measureServe(ctx, m, mm, th, o, stderr)
			m.Close()
			done()
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
	}
	return rows, nil
}

// measure runs every (cache, threads, ctx) cell, and returns the rows and
// the last backend's description.
func measure(ctx context.Context, dir string, o options, stderr io.Writer) ([]row, string, error) {
	maxCtx := slices.Max(o.ctxs) + o.gen
	var rows []row
	var desc string
	for _, mm := range o.matmuls {
		for _, th := range o.threads {
			r, d, err := measureLoad(ctx, dir, maxCtx, mm, th, o, stderr)
			if err != nil {
				return nil, "", err
			}
			rows, desc = append(rows, r...), d
		}
	}
	// Group by cache, then precision, threads and context.
	slices.SortStableFunc(rows, func(a, b row) int {
		return slices.Index(o.caches, a.cache) - slices.Index(o.caches, b.cache)
	})
	return rows, desc, nil
}

// measureModel runs the cells of one model load; counts reports what its
// backend was asked to do (see device.Count).
func measureModel(ctx context.Context, m *model.Model, counts func() device.Counts, matmul string, threads int, o options, stderr io.Writer) ([]row, error) {
	var rows []row
	vocab := m.Config().VocabSize
	if o.warmup {
		if err := warmUp(m); err != nil {
			return nil, fmt.Errorf("warmup: %w", err)
		}
	}
	for _, cache := range o.caches {
		opts, err := sequenceOptions(ctx, cache, o, m, threads, stderr)
		if err != nil {
			return nil, fmt.Errorf("--cache %s: %w", cache, err)
		}
		for _, n := range o.ctxs {
			s, err := m.NewSequenceOpts(opts)
			if err != nil {
				return nil, err
			}
			r := row{cache: cache, matmul: matmul, threads: threads, ctx: n, compressed: cache != "plain"}
			if r.compressed {
				bs := cmp.Or(opts.BlockSize, m.BlockSize())
				r.hot = opts.Cache.HotWindow
				r.encodes = opts.Cache.EncodedBlocks(n+o.gen, bs) - opts.Cache.EncodedBlocks(n, bs)
			}
			var pre, dec []float64
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			prompt := make([]int, n)
			for i := range prompt {
				prompt[i] = 1 + rng.IntN(vocab-1)
			}
			for rep := range o.reps {
				s.Reset()
				t0 := time.Now()
				if err := prefill(ctx, s, prompt, m.PassTokens()); err != nil {
					s.Close()
					return nil, interrupted(err, fmt.Sprintf("in the prefill of run %d of %s at ctx %d", rep+1, cache, n))
				}
				if err := o.perf.send("enable"); err != nil {
					s.Close()
					return nil, err
				}
				t1 := time.Now()
				c0 := counts()
				tok := prompt[n-1]
				for i := range o.gen {
					if err := ctx.Err(); err != nil {
						s.Close()
						return nil, interrupted(err, fmt.Sprintf("in decode step %d of run %d of %s at ctx %d", i+1, rep+1, cache, n))
					}
					if _, err := s.Forward([]int{tok}, false); err != nil {
						s.Close()
						return nil, err
					}
					tok = 1 + (tok+i*7919)%(vocab-1)
				}
				t2 := time.Now()
				if err := o.perf.send("disable"); err != nil {
					s.Close()
					return nil, err
				}
				c1 := counts()
				r.ops, r.calls = float64(c1.Ops-c0.Ops)/float64(o.gen), float64(c1.DriverCalls-c0.DriverCalls)/float64(o.gen)
				r.driver = c1.Driver
				pre = append(pre, float64(n)/t1.Sub(t0).Seconds())
				dec = append(dec, float64(o.gen)/t2.Sub(t1).Seconds())
				if o.progress {
					fmt.Fprintf(stderr, "kakeya-bench: %s, %s matmul, %d threads, ctx %d, run %d: prefill %.1f tok/s, decode %.2f tok/s\n",
						cache, matmul, threads, n, rep+1, pre[rep], dec[rep])
				}
			}
			kv := s.KVStats()
			r.kvMiB = float64(kv.Bytes()) / (1 << 20)
			r.kvRatio = kv.Ratio()
			s.Close()
			r.prefill, r.decode = stats.Median(pre), stats.Median(dec)
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// prefill runs prompt through s in passes of at most pass tokens (the
// model's pass size, so the same passes as one Forward of the whole
// prompt, each computing its last row's logits besides) and checks ctx
// before each, so that a signal stops a long prefill within a pass.
func prefill(ctx context.Context, s *model.Sequence, prompt []int, pass int) error {
	for i := 0; i < len(prompt); i += pass {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := s.Forward(prompt[i:min(len(prompt), i+pass)], false); err != nil {
			return err
		}
	}
	return nil
}

// interrupted returns err, or where it is the context's cancellation,
// a *cli.InterruptedError saying where the run stopped: the line
// cli.Main prints after a signal.
func interrupted(err error, where string) error {
	if errors.Is(err, context.Canceled) {
		return &cli.InterruptedError{Detail: where}
	}
	return err
}

// warmUp runs a 16-token prefill and one decode step on a plain-cache
// sequence, so every weight page has been touched and the kernels' scratch
// grown before the clock starts.
func warmUp(m *model.Model) error {
	s, err := m.NewSequence()
	if err != nil {
		return err
	}
	defer s.Close()
	prompt := make([]int, min(16, m.MaxContext()-1))
	vocab := m.Config().VocabSize
	for i := range prompt {
		prompt[i] = 1 + i%(vocab-1)
	}
	if _, err := s.Forward(prompt, false); err != nil {
		return err
	}
	_, err = s.Forward([]int{1}, false)
	return err
}

// sequenceOptions builds the sequence options of one --cache entry: through
// kakeya.Caches, the assembly path of kakeya-run and kakeya-eval (--calib,
// else the automatic calibration of --calib-cache), except on a model
// without a tokenizer for the built-in text (the seeded checkpoint) and
// without --calib.
func sequenceOptions(ctx context.Context, cache string, o options, m *model.Model, threads int, stderr io.Writer) (model.SequenceOptions, error) {
	spec, err := cacheSpec(cache, o.boundary, o.blockSize, o.hotWindow)
	if err != nil {
		return model.SequenceOptions{}, fmt.Errorf("--cache %s: %w", cache, err)
	}
	if o.noTokenizer && o.calib == "" {
		cal, err := o.cals.random(ctx, spec, m, stderr)
		if err != nil {
			return model.SequenceOptions{}, err
		}
		pol, st, err := kvplan.NewPolicy(spec, m.CacheShape(), cal)
		if err != nil {
			return model.SequenceOptions{}, err
		}
		return model.SequenceOptions{Cache: pol, BlockSize: st.BlockSize}, nil
	}
	if o.calib != "" {
		if _, err := os.Stat(o.calib); err != nil {
			return model.SequenceOptions{}, fmt.Errorf("--calib: %w", err)
		}
	}
	cs, err := o.cals.caches(m, o, stderr)
	if err != nil {
		return model.SequenceOptions{}, err
	}
	opts, _, info, err := cs.Cache(ctx, spec)
	if err != nil {
		return model.SequenceOptions{}, err
	}
	if info.Auto && o.progress {
		made := ""
		if info.Made {
			made = fmt.Sprintf(" (made on the built-in text in %.1fs)", info.Took.Seconds())
		}
		fmt.Fprintf(stderr, "kakeya-bench: --cache %s: %s%s\n", cache, info, made)
	}
	return opts, nil
}

// writeTable prints the rows as a Markdown table.
func writeTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| cache | matmul | threads | ctx | prefill tok/s | decode tok/s | decode vs plain | KV MiB | KV ratio | ops/step | driver calls/step | hot | encodes/run |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	type cell struct {
		matmul       string
		threads, ctx int
	}
	plain := map[cell]float64{}
	for _, r := range rows {
		if r.cache == "plain" {
			plain[cell{r.matmul, r.threads, r.ctx}] = r.decode
		}
	}
	for _, r := range rows {
		rel := "–"
		if p, ok := plain[cell{r.matmul, r.threads, r.ctx}]; ok && r.cache != "plain" {
			rel = fmt.Sprintf("%.2fx", r.decode/p)
		}
		ratio := "–"
		if r.cache != "plain" && r.kvRatio > 0 {
			ratio = fmt.Sprintf("%.2fx", r.kvRatio)
		}
		threads, calls := "–", "–"
		if r.threads > 0 {
			threads = strconv.Itoa(r.threads)
		}
		if r.driver {
			calls = fmt.Sprintf("%.1f", r.calls)
		}
		hot, enc := "–", "–"
		if r.compressed {
			hot, enc = strconv.Itoa(max(r.hot, 0)), strconv.Itoa(r.encodes)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.1f | %.2f | %s | %.1f | %s | %.1f | %s | %s | %s |\n", r.cache, r.matmul, threads, r.ctx, r.prefill, r.decode, rel, r.kvMiB, ratio, r.ops, calls, hot, enc)
	}
}

// parseCaches splits the --cache list: by ';' when it holds one (codec specs
// may hold commas), else by ','; each compressed cache is checked with the
// --boundary value.
func parseCaches(s, boundary string) ([]string, error) {
	sep, list := ",", s
	if strings.Contains(s, ";") {
		// One ; ending the list makes it a list of ;-separated specs
		// even of one: a single spec holding commas.
		sep, list = ";", strings.TrimSuffix(s, ";")
	}
	var out []string
	for _, c := range strings.Split(list, sep) {
		c = strings.TrimSpace(c)
		if c == "" {
			return nil, fmt.Errorf("--cache %q: empty entry", s)
		}
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("--cache %q: %s listed twice", s, c)
		}
		if c != "plain" {
			spec, err := cacheSpec(c, boundary, 0, 0)
			if err == nil {
				err = spec.Validate()
			}
			if err != nil {
				return nil, fmt.Errorf("--cache %s: %w", c, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// cacheSpec returns the cache settings of a --cache entry: none for
// plain, a codec spec for keys and values, "K/V" one for each side, or
// settings in the grammar of kakeya-eval's configurations and kakeya-serve's
// requests (kvconfig.Parse: an entry whose first piece is KEY=VALUE with a
// key of kvconfig.Keys, such as kv=kakeya,block=32,hot=16). --boundary,
// --block-size and --hot-window (hot, in kvconfig.Spec.HotWindow's terms:
// 0 the default, negative none) fill what the entry leaves unset.
func cacheSpec(cache, boundary string, blockSize, hot int) (kvconfig.Spec, error) {
	if cache == "plain" {
		return kvconfig.Spec{}, nil
	}
	if name, _, ok := strings.Cut(cache, "="); ok {
		if _, key := kvconfig.SettingName(strings.TrimSpace(name)); key {
			spec, err := kvconfig.Parse(cache)
			if err != nil {
				return kvconfig.Spec{}, err
			}
			if spec.Boundary == "" {
				spec.Boundary = boundary
			}
			if spec.BlockSize == 0 {
				spec.BlockSize = blockSize
			}
			if spec.HotWindow == 0 {
				spec.HotWindow = hot
			}
			return spec, nil
		}
	}
	spec := kvconfig.Spec{KV: cache, Boundary: boundary, BlockSize: blockSize, HotWindow: hot}
	if k, v, ok := strings.Cut(cache, "/"); ok {
		spec.KV, spec.K, spec.V = "", k, v
	}
	return spec, nil
}

// parseMatMuls reads the --matmul list.
func parseMatMuls(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if _, err := kcpu.ParsePrecision(f); err != nil || f == "" {
			return nil, fmt.Errorf("--matmul %q: %q is not f32 or bf16", s, f)
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("--matmul %q: %s listed twice", s, f)
		}
		out = append(out, f)
	}
	return out, nil
}

// parseInts reads a comma-separated list of integers in [lo, hi].
func parseInts(flagName, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%s %q: %q is not an integer in [%d, %d]", flagName, s, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// calibrations holds the run's cache assemblers, one per model load
// (kakeya.Caches: --calib's file, or the automatic calibration, which
// kakeya-run and kakeya-serve share through --calib-cache), and on the
// models without a tokenizer (the seeded checkpoint), without --calib, the
// calibrations of the caches that need principal components, made once per block size on random tokens, as
// the measured prompts are. Speed does not depend on the statistics, so
// those rows are those of a real calibration; their bytes per block are
// too (fixed by the rate).
type calibrations struct {
	byModel map[*model.Model]*kakeya.Caches
	byBlock map[int]*codec.Calibration
}

// caches returns the cache assembler of m.
func (a *calibrations) caches(m *model.Model, o options, stderr io.Writer) (*kakeya.Caches, error) {
	if cs, ok := a.byModel[m]; ok {
		return cs, nil
	}
	opt := kakeya.Options{Calibration: o.calib, CalibrationCache: o.calibCache, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if o.progress {
		opt.CalibrationProgress = cli.CalibrationProgress(stderr, "kakeya-bench")
	}
	cs, err := kakeya.NewCaches(m, opt)
	if err != nil {
		return nil, err
	}
	if a.byModel == nil {
		a.byModel = map[*model.Model]*kakeya.Caches{}
	}
	a.byModel[m] = cs
	return cs, nil
}

// autoCalibTokens is how many random tokens an automatic calibration
// runs: the engine's default for its built-in text.
const autoCalibTokens = 4096

// random returns the calibration spec's cache needs, made on random tokens
// (nil for none).
func (a *calibrations) random(ctx context.Context, spec kvconfig.Spec, m *model.Model, stderr io.Writer) (*codec.Calibration, error) {
	if spec.KV == "" && spec.K == "" && spec.V == "" {
		return nil, nil // plain
	}
	c, err := spec.Check()
	if err != nil {
		return nil, err
	}
	bs, need, err := kvplan.NeedsPCA(c, m.MaxContext())
	if err != nil || !need {
		return nil, err
	}
	if cal, ok := a.byBlock[bs]; ok {
		return cal, nil
	}
	vocab := m.Config().VocabSize
	r := rand.New(rand.NewPCG(7, uint64(bs)))
	ids := make([]int, autoCalibTokens)
	for i := range ids {
		ids[i] = 1 + r.IntN(vocab-1)
	}
	start := time.Now()
	// On the loaded model and its backend, as the engine calibrates: no
	// second load.
	cal, err := calibrate.RunModel(ctx, m, ids, calibrate.Options{
		MaxTokens: autoCalibTokens, RopeAveraged: true, PCA: true, BlockSize: bs,
	})
	if err != nil {
		return nil, fmt.Errorf("--cache %s: no --calib, and a calibration on random tokens failed: %w", spec.KV, err)
	}
	fmt.Fprintf(stderr, "kakeya-bench: --cache %s: no --calib, and the model has no tokenizer for the built-in text; calibrated on %d random tokens in %.1fs (speed only: not a real text's statistics)\n",
		spec.KV, autoCalibTokens, time.Since(start).Seconds())
	if a.byBlock == nil {
		a.byBlock = map[int]*codec.Calibration{}
	}
	a.byBlock[bs] = cal
	return cal, nil
}

// A perfControl is --perf-ctl: perf record's control FIFO, and its ack
// FIFO, if given, whose "ack" a command waits for.
type perfControl struct {
	ctl, ack *os.File
}

// openPerfControl opens --perf-ctl's FIFO[,ACK] (FIFO for writing, ACK
// for reading).
func openPerfControl(arg string) (*perfControl, error) {
	ctlPath, ackPath, _ := strings.Cut(arg, ",")
	p := new(perfControl)
	var err error
	if p.ctl, err = os.OpenFile(ctlPath, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return nil, fmt.Errorf("--perf-ctl: %w", err)
	}
	if ackPath != "" {
		if p.ack, err = os.Open(ackPath); err != nil {
			p.ctl.Close()
			return nil, fmt.Errorf("--perf-ctl: ack: %w", err)
		}
	}
	return p, nil
}

// send writes cmd to the control FIFO and waits for perf's ack where
// there is an ack FIFO; nil p sends nothing.
func (p *perfControl) send(cmd string) error {
	if p == nil {
		return nil
	}
	if _, err := io.WriteString(p.ctl, cmd+"\n"); err != nil {
		return fmt.Errorf("--perf-ctl: %s: %w", cmd, err)
	}
	if p.ack != nil {
		var b [5]byte
		if _, err := p.ack.Read(b[:]); err != nil {
			return fmt.Errorf("--perf-ctl: waiting for the ack of %s: %w", cmd, err)
		}
	}
	return nil
}

// Close closes the FIFOs.
func (p *perfControl) Close() {
	p.ctl.Close()
	if p.ack != nil {
		p.ack.Close()
	}
}
