// Command kakeya-run generates text with a model from a local directory or
// a Hugging Face id, streaming it to stdout as it is produced.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"
)

func main() { cli.Main("kakeya-run", run) }

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	model, prompt, system, device, calib string
	chatKwargs                           string         // --chat-template-kwargs, a JSON object
	chatVars                             map[string]any // chatKwargs decoded
	matmul, calibCache                   string
	weights                              string
	maxTokens, threads, maxContext       int
	chat, tokenize, addSpecial           bool
	json                                 bool   // --json: the output is a JSON object
	jsonSchemaFile                       string // --json-schema
	jsonSchema                           []byte // its text
	quiet, verbose                       bool
	stops                                stringList
	maxInput, kvMemory                   cli.ByteSize
	sampling                             kakeya.SamplingOptions
	cache                                kvconfig.Spec
	backend                              compute.Backend // from --device
}

func parseFlags(args []string, stdout, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("kakeya-run", flag.ContinueOnError)
	fs.StringVar(&o.model, "model", "", "model directory or Hugging Face id (ORG/NAME)")
	fs.StringVar(&o.prompt, "prompt", "", "prompt text (- reads it from stdin)")
	fs.IntVar(&o.maxTokens, "max-tokens", 256, "generate at most this many tokens (0 = until the context is full)")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0 = greedy)")
	fs.IntVar(&o.sampling.TopK, "top-k", 40, "sample from the K most likely tokens (0 = all)")
	topP := fs.Float64("top-p", 0.95, "nucleus sampling: smallest set with this cumulative probability (1 = off)")
	minP := fs.Float64("min-p", 0.05, "drop tokens below this fraction of the top token's probability (0 = off)")
	rep := fs.Float64("repeat-penalty", 1.0, "penalty for tokens seen in the last --repeat-last-n tokens (1 = off; must be > 0)")
	fs.IntVar(&o.sampling.RepeatLastN, "repeat-last-n", 64, "tokens the repetition penalty looks back (0 = all)")
	seed := fs.Int64("seed", -1, "random seed (-1 = from the clock)")
	fs.Var(&o.stops, "stop", "stop before this string (repeatable)")
	fs.BoolVar(&o.chat, "chat", false, "format the prompt with the model's chat template")
	fs.StringVar(&o.system, "system", "", "system message for --chat")
	fs.StringVar(&o.chatKwargs, "chat-template-kwargs", "", `extra variables of the chat template for --chat, a JSON object (as apply_chat_template's keyword arguments: '{"enable_thinking": false}')`)
	fs.BoolVar(&o.json, "json", false, "constrain the output to a JSON object (constrained decoding)")
	fs.StringVar(&o.jsonSchemaFile, "json-schema", "", "constrain the output to JSON that this JSON Schema file accepts (constrained decoding; docs/cli.md lists the keywords)")
	fs.IntVar(&o.threads, "threads", 0, "worker threads (0 = all cores)")
	fs.IntVar(&o.maxContext, "ctx", 0, "context length in tokens (0 = the model's, at most 32768)")
	fs.StringVar(&o.device, "device", "cpu", "compute device: "+strings.Join(device.Names(), ", "))
	fs.StringVar(&o.matmul, "matmul", "", device.MatMulUsage+" (default: bf16 on the CPU)")
	fs.StringVar(&o.weights, "weights", "", "quantize the model's F32/F16/BF16 matrices as they load, as llama-quantize does: "+weights.WeightFormats+" (q4_k and q5_k fall back to q5_0, q6_k to q8_0, for rows that are not whole blocks of 256; bf16 rounds F32/F16 matrices) (default: keep the stored types)")
	fs.StringVar(&o.calib, "calib", "", "calibration file (kakeya-eval calibrate): keys are preconditioned by the model's query covariance, kakeya codecs use its codebooks and kakeya-pc its principal components (without it, the kakeya preset and any kakeya-pc or kvtc cache are calibrated automatically on the built-in text, once per model, and the file is kept in --calib-cache)")
	fs.StringVar(&o.calibCache, "calib-cache", "", "directory of the automatic calibrations a cache without --calib gets (the kakeya preset, kakeya-pc): reused per model, made once on the built-in text (default: the user cache directory's kakeya/calib)")
	fs.BoolVar(&o.tokenize, "tokenize", false, "read UTF-8 text from stdin and print its token ids as a JSON array")
	fs.BoolVar(&o.addSpecial, "add-special", false, "with --tokenize: add the special tokens (BOS) the model expects")
	fs.BoolVar(&o.quiet, "quiet", false, "do not print timings to stderr")
	fs.BoolVar(&o.verbose, "verbose", false, "print the device and, on a GPU, where cuBLAS was looked for to stderr at load")
	o.maxInput = cli.DefaultMaxInput
	fs.Var(&o.maxInput, "max-input", cli.MaxInputUsage)
	fs.Var(&o.kvMemory, "kv-memory", cli.KVMemoryUsage)
	kvflags.Register(fs, &o.cache)
	if err := cli.Parse(fs, args, stdout, stderr, func(w io.Writer) {
		fmt.Fprintln(w, "usage: kakeya-run --model DIR|HF_ID|FILE.gguf --prompt TEXT [flags]\n       kakeya-run --model DIR|HF_ID|FILE.gguf --tokenize [--add-special] < text\n\nflags:")
		cli.PrintDefaults(fs, w)
	}); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if *rep <= 0 {
		return nil, fmt.Errorf("--repeat-penalty %g must be > 0 (1 is off)", *rep)
	}
	o.sampling.Temperature = float32(*temp)
	o.sampling.TopP = float32(*topP)
	o.sampling.MinP = float32(*minP)
	o.sampling.RepetitionPenalty = float32(*rep)
	if *seed < 0 {
		o.sampling.Seed = uint64(time.Now().UnixNano())
	} else {
		o.sampling.Seed = uint64(*seed)
	}
	if err := o.sampling.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// check rejects flags that are out of range or contradict each other,
// before anything loads.
func (o *options) check() error {
	switch {
	case o.model == "":
		return errors.New("--model is required")
	case o.tokenize && o.prompt != "":
		return errors.New("--prompt and --tokenize exclude each other (--tokenize reads stdin)")
	case !o.tokenize && o.prompt == "":
		return errors.New("--prompt is required (or --tokenize)")
	case o.system != "" && !o.chat:
		return errors.New("--system needs --chat (the system message goes into the chat template)")
	case o.chatKwargs != "" && !o.chat:
		return errors.New("--chat-template-kwargs needs --chat (they are variables of the chat template)")
	case o.chatKwargs != "" && json.Unmarshal([]byte(o.chatKwargs), &o.chatVars) != nil:
		return fmt.Errorf("--chat-template-kwargs %q: want a JSON object such as '{\"enable_thinking\": false}'", o.chatKwargs)
	case o.maxTokens < 0:
		return fmt.Errorf("--max-tokens %d must be >= 0", o.maxTokens)
	case o.threads < 0 || o.threads > device.MaxThreads():
		return fmt.Errorf("--threads %d: want 0 (all cores) to %d", o.threads, device.MaxThreads())
	case o.maxContext < 0:
		return fmt.Errorf("--ctx %d must be >= 0", o.maxContext)
	}
	for _, s := range o.stops {
		if s == "" {
			return errors.New(`--stop "": an empty stop string would stop before the first token`)
		}
	}
	if o.jsonSchemaFile != "" {
		if o.json {
			return errors.New("--json and --json-schema exclude each other (a schema says what JSON)")
		}
		b, err := readSchema(o.jsonSchemaFile, int64(o.maxInput))
		if err != nil {
			return err
		}
		if err := kakeya.CheckJSONSchema(b); err != nil {
			return fmt.Errorf("--json-schema %s: %w", o.jsonSchemaFile, err)
		}
		o.jsonSchema = b
	}
	if err := device.Check(o.device); err != nil {
		return err
	}
	if err := device.CheckMatMul(o.matmul); err != nil {
		return err
	}
	if err := kvflags.Check(o.cache, o.calib); err != nil {
		return err
	}
	return nil
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	// The library names cache settings by their Spec fields; say the flags.
	defer func() { err = kvflags.Error(err) }()
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	// The device opens before anything is read, so that a missing GPU
	// fails at once; it closes after the engine (deferred first).
	if o.backend, err = device.Open(o.device, o.threads, o.matmul); err != nil {
		return err
	}
	defer o.backend.Close()
	hub := weights.HubOptionsFromEnv()
	hub.Progress = stderr
	if o.tokenize {
		return tokenize(ctx, o, hub, stdin, stdout)
	}
	if o.prompt == "-" {
		b, err := cli.ReadAll(ctx, stdin, int64(o.maxInput), "the prompt on standard input", "--max-input")
		if err != nil {
			return err
		}
		o.prompt = string(b)
	}

	if o.verbose && o.device != "cpu" {
		printDevice(stderr, o.backend)
	}
	start := time.Now()
	opt := kakeya.Options{
		Backend:          o.backend,
		MaxContext:       o.maxContext,
		Weights:          o.weights,
		Hub:              hub,
		Cache:            o.cache,
		Calibration:      o.calib,
		CalibrationCache: o.calibCache,
		KVMemory:         int64(o.kvMemory),
		Log:              logger(stderr, o.quiet),
	}
	if !o.quiet {
		opt.CalibrationProgress = cli.CalibrationProgress(stderr, "kakeya-run")
	}
	eng, err := kakeya.Load(ctx, o.model, opt)
	if err != nil {
		if ctx.Err() != nil {
			return &cli.InterruptedError{Detail: "while loading the model"}
		}
		return err
	}
	defer eng.Close()
	load := time.Since(start)
	if o.verbose && o.device == "cpu" {
		fmt.Fprintf(stderr, "kakeya-run: device: cpu, kernels: %s\n", eng.Kernels())
	}
	if w := eng.CacheSettings().Warning; w != nil {
		fmt.Fprintf(stderr, "kakeya-run: warning: KV cache: %s\n", kvflags.Error(w))
	}

	out := bufio.NewWriter(stdout)
	res, err := eng.Generate(ctx, o.prompt, kakeya.GenerateOptions{
		MaxTokens:          o.maxTokens,
		Sampling:           o.sampling,
		Stop:               o.stops,
		Chat:               o.chat,
		System:             o.system,
		ChatTemplateKwargs: o.chatVars,
		JSON:               o.json,
		JSONSchema:         o.jsonSchema,
	}, func(s string) error {
		if _, err := out.WriteString(s); err != nil {
			return err
		}
		return out.Flush()
	})
	if err != nil {
		out.Flush()
		if ce := (*model.ContextError)(nil); errors.As(err, &ce) {
			return errors.New(ce.Explain("--ctx"))
		}
		if ctx.Err() != nil {
			n := 0
			if res != nil {
				n = res.GeneratedTokens
			}
			return &cli.InterruptedError{Detail: fmt.Sprintf("after generating %d tokens", n)}
		}
		return err
	}
	fmt.Fprintln(out)
	if err := out.Flush(); err != nil {
		return err
	}
	if !o.quiet {
		printStats(stderr, eng, res, load)
	}
	return nil
}

// readSchema reads the --json-schema file, up to limit bytes.
func readSchema(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--json-schema: %w", err)
	}
	defer f.Close()
	return cli.ReadAll(context.Background(), f, limit, "the --json-schema file "+path, "--max-input")
}

// logger returns the engine's log on stderr: the line of an automatic
// calibration (how long it took, which file) and the warnings, without
// the time stamps a one-shot command does not need; only the warnings
// with --quiet.
func logger(stderr io.Writer, quiet bool) *slog.Logger {
	level := slog.LevelInfo
	if quiet {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}))
}

// printStats writes the run's figures: timings, why it stopped, the cache
// in use and what it holds, the kernels.
func printStats(w io.Writer, eng *kakeya.Engine, res *kakeya.Result, load time.Duration) {
	fmt.Fprintf(w, "\nload %.2fs | prefill %d tokens %.1f tok/s | decode %d tokens %.1f tok/s | stop: %s | kernels: %s | weights: %s\n",
		load.Seconds(), res.PromptTokens, res.PrefillRate(), res.GeneratedTokens, res.DecodeRate(), res.StopReason, eng.Kernels(), eng.ModelInfo().Weights)
	st := eng.CacheSettings()
	fmt.Fprintf(w, "KV cache: %s", st)
	if cal := eng.CalibrationInfo().String(); cal != "" {
		fmt.Fprintf(w, ", %s", cal)
	}
	fmt.Fprintln(w)
	kv := res.KV
	if !st.Compressed() {
		// Without a codec there is no ratio to report: the cache is a bf16
		// (or float32) cache, whose last block is partly filled.
		fmt.Fprintf(w, "KV cache: %d tokens, %s in use in %d-token blocks\n", kv.Tokens, mib(kv.Bytes()), st.BlockSize)
		return
	}
	fmt.Fprintf(w, "KV cache: %d tokens, %s in use (a bf16 cache: %s, ratio %.2fx)", kv.Tokens, mib(kv.Bytes()), mib(kv.BF16), kv.Ratio())
	if kv.Compressed > 0 {
		fmt.Fprintf(w, "; encoded blocks %s, codec ratio %.2fx", mib(kv.Compressed), kv.CodecRatio())
	}
	fmt.Fprintln(w)
}

// printDevice writes, for --verbose, the description of a backend that
// has one (a GPU's: device, and which cuBLAS runs prefill's products) and
// the search for cuBLAS of one that made it.
func printDevice(w io.Writer, b compute.Backend) {
	if d, ok := b.(compute.Describer); ok {
		fmt.Fprintf(w, "kakeya-run: device: %s\n", d.Describe())
	}
	if s, ok := b.(interface{ CUBLASSearch() string }); ok && s.CUBLASSearch() != "" {
		fmt.Fprintf(w, "kakeya-run: %s", s.CUBLASSearch())
	}
}

func tokenize(ctx context.Context, o *options, hub weights.HubOptions, stdin io.Reader, stdout io.Writer) error {
	dir, err := weights.Resolve(ctx, o.model, hub)
	if err != nil {
		return err
	}
	tok, err := kakeya.LoadTokenizer(dir)
	if err != nil {
		return err
	}
	text, err := cli.ReadAll(ctx, stdin, int64(o.maxInput), "standard input", "--max-input")
	if err != nil {
		return err
	}
	ids := tok.Encode(string(text), o.addSpecial)
	if ids == nil {
		ids = []int{}
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
