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
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kakeya-run:", err)
		os.Exit(1)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	model, prompt, system, device string
	maxTokens, threads            int
	chat, tokenize, addSpecial    bool
	quiet                         bool
	stops                         stringList
	sampling                      model.SamplingOptions
	cache                         cacheFlags
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("kakeya-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kakeya-run --model DIR|HF_ID --prompt TEXT [flags]\n       kakeya-run --model DIR|HF_ID --tokenize [--add-special] < text\n\nflags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.model, "model", "", "model directory or Hugging Face id (ORG/NAME)")
	fs.StringVar(&o.prompt, "prompt", "", "prompt text (- reads it from stdin)")
	fs.IntVar(&o.maxTokens, "max-tokens", 256, "generate at most this many tokens (0 = until the context is full)")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0 = greedy)")
	fs.IntVar(&o.sampling.TopK, "top-k", 40, "sample from the K most likely tokens (0 = all)")
	topP := fs.Float64("top-p", 0.95, "nucleus sampling: smallest set with this cumulative probability (1 = off)")
	minP := fs.Float64("min-p", 0.05, "drop tokens below this fraction of the top token's probability (0 = off)")
	rep := fs.Float64("repeat-penalty", 1.0, "penalty for tokens seen in the last --repeat-last-n tokens (1 = off)")
	fs.IntVar(&o.sampling.RepeatLastN, "repeat-last-n", 64, "tokens the repetition penalty looks back (0 = all)")
	seed := fs.Int64("seed", -1, "random seed (-1 = from the clock)")
	fs.Var(&o.stops, "stop", "stop before this string (repeatable)")
	fs.BoolVar(&o.chat, "chat", false, "format the prompt with the model's chat template")
	fs.StringVar(&o.system, "system", "", "system message for --chat")
	fs.IntVar(&o.threads, "threads", 0, "worker threads (0 = all cores)")
	fs.StringVar(&o.device, "device", "cpu", "compute device: cpu or cuda")
	fs.BoolVar(&o.tokenize, "tokenize", false, "read UTF-8 text from stdin and print its token ids as a JSON array")
	fs.BoolVar(&o.addSpecial, "add-special", false, "with --tokenize: add the special tokens (BOS) the model expects")
	fs.BoolVar(&o.quiet, "quiet", false, "do not print timings to stderr")
	o.cache.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if o.model == "" {
		return nil, errors.New("--model is required")
	}
	if !o.tokenize && o.prompt == "" {
		return nil, errors.New("--prompt is required (or --tokenize)")
	}
	if o.maxTokens < 0 {
		return nil, fmt.Errorf("--max-tokens %d must be >= 0", o.maxTokens)
	}
	if o.threads < 0 {
		return nil, fmt.Errorf("--threads %d must be >= 0", o.threads)
	}
	switch o.device {
	case "cpu":
	case "cuda":
		return nil, errors.New("--device cuda: this binary was built without CUDA support (build with `make cuda`)")
	default:
		return nil, fmt.Errorf("--device %q: want cpu or cuda", o.device)
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

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	hub := weights.HubOptionsFromEnv()
	hub.Progress = stderr
	if o.tokenize {
		return tokenize(ctx, o, hub, stdin, stdout)
	}
	if o.prompt == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		o.prompt = string(b)
	}
	mopt, err := o.cache.options()
	if err != nil {
		return err
	}
	mopt.Threads = o.threads

	start := time.Now()
	dir, err := weights.Resolve(ctx, o.model, hub)
	if err != nil {
		return err
	}
	if mopt.Cache, err = o.cache.policy(dir); err != nil {
		return err
	}
	eng, err := model.LoadEngine(ctx, dir, model.EngineOptions{Model: mopt, Hub: hub})
	if err != nil {
		return err
	}
	defer eng.Close()
	load := time.Since(start)

	out := bufio.NewWriter(stdout)
	res, err := eng.Generate(ctx, o.prompt, model.GenerateOptions{
		MaxTokens: o.maxTokens,
		Sampling:  o.sampling,
		Stop:      o.stops,
		Chat:      o.chat,
		System:    o.system,
	}, func(s string) error {
		if _, err := out.WriteString(s); err != nil {
			return err
		}
		return out.Flush()
	})
	if err != nil {
		out.Flush()
		return err
	}
	fmt.Fprintln(out)
	if err := out.Flush(); err != nil {
		return err
	}
	if !o.quiet {
		fmt.Fprintf(stderr, "\nload %.2fs | prefill %d tokens %.1f tok/s | decode %d tokens %.1f tok/s | stop: %s\n",
			load.Seconds(), res.PromptTokens, res.PrefillRate(), res.GeneratedTokens, res.DecodeRate(), res.StopReason)
		fmt.Fprintf(stderr, "KV cache: %d tokens, %s in use (a bf16 cache: %s, ratio %.2fx)",
			res.KV.Tokens, mib(res.KV.Bytes()), mib(res.KV.BF16), res.KV.Ratio())
		if res.KV.Compressed > 0 {
			fmt.Fprintf(stderr, "; encoded blocks %s, codec ratio %.2fx", mib(res.KV.Compressed), res.KV.CodecRatio())
		}
		fmt.Fprintln(stderr)
	}
	return nil
}

func tokenize(ctx context.Context, o *options, hub weights.HubOptions, stdin io.Reader, stdout io.Writer) error {
	dir, err := weights.Resolve(ctx, o.model, hub)
	if err != nil {
		return err
	}
	tok, err := loadTokenizer(dir)
	if err != nil {
		return err
	}
	text, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
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
