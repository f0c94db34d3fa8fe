// Command kakeya-eval measures the engine: logits dumps, perplexity with
// compressed KV caches side by side, and calibration.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"
)

const usage = `usage: kakeya-eval <command> [flags]

commands:
  logits     print the logits row for each input id
  ppl        teacher-forced perplexity, KL and top-1 across KV codecs
  calibrate  collect query covariances and codebooks into a calibration file
  sensitivity  measure each layer side's KL under each codec, for allocate
  allocate   pick per-layer codecs for a byte budget: a policy file (--kv-policy)
  pareto     draw a ppl report's Pareto plot (ratio vs KL)

Run "kakeya-eval <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kakeya-eval:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "logits":
		return runLogits(ctx, rest, stdout, stderr)
	case "ppl":
		return runPPL(ctx, rest, stdout, stderr)
	case "calibrate":
		return runCalibrate(ctx, rest, stdout, stderr)
	case "sensitivity":
		return runSensitivity(ctx, rest, stdout, stderr)
	case "allocate":
		return runAllocate(ctx, rest, stdout, stderr)
	case "pareto":
		return runPareto(ctx, rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// newFlagSet returns a command's flag set: errors are returned, and -h
// prints usage (the command's help text) and then the flags to stderr.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// checkThreads checks a --threads value against what model.Load accepts,
// so the error names the flag.
func checkThreads(n int) error {
	if n < 0 || n > model.MaxThreads() {
		return fmt.Errorf("--threads %d: want 0 (GOMAXPROCS) to %d (64 per CPU core, at most 4096)", n, model.MaxThreads())
	}
	return nil
}

// sharedFile returns a file of the shared data set: $KAKEYA_SHARED, else
// ../shared.
func sharedFile(elem ...string) string {
	shared := os.Getenv("KAKEYA_SHARED")
	if shared == "" {
		shared = filepath.Join("..", "shared")
	}
	return filepath.Join(append([]string{shared}, elem...)...)
}

// resolveModel turns --model, a directory or a Hugging Face id, into a local
// directory: the id is looked up in the Hugging Face cache and downloaded
// when missing, under the HF_* environment as kakeya-run does.
func resolveModel(ctx context.Context, name string, stderr io.Writer) (string, error) {
	hub := weights.HubOptionsFromEnv()
	hub.Progress = stderr
	return weights.Resolve(ctx, name, hub)
}
