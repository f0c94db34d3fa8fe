// Command kakeya-eval measures the engine: logits dumps, perplexity with
// compressed KV caches side by side, and calibration.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/device"
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
  project    project the whole-cache ratio at long contexts for model shapes

Run "kakeya-eval <command> -h" for the flags of a command, and
"kakeya-eval --version" for the version and the build (SIMD, cgo).
`

func main() {
	cli.Main("kakeya-eval", func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return run(ctx, args, stdout, stderr)
	})
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &cli.UsageError{Err: errors.New("no command given"), Usage: func() { fmt.Fprint(stderr, usage) }}
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
	case "project":
		return runProject(args[1:], stdout, stderr)
	case "pareto":
		return runPareto(ctx, rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "-version", "--version", "version":
		cli.WriteVersion(stdout, "kakeya-eval", cli.CurrentBuild())
		return nil
	}
	return &cli.UsageError{Err: fmt.Errorf("unknown command %q", cmd), Usage: func() { fmt.Fprint(stderr, usage) }}
}

// newFlagSet returns a command's flag set, which parse parses. It is
// named for the tool and the command ("kakeya-eval ppl"), the name
// --version reports.
func newFlagSet(name, _ string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kakeya-eval "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses a command's flags (cli.Parse): -h prints the command's
// usage text and flags to stdout; a bad flag is reported once, then they
// follow on stderr.
func parse(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) error {
	return cli.Parse(fs, args, stdout, stderr, func(w io.Writer) {
		io.WriteString(w, usage)
		cli.PrintDefaults(fs, w)
	})
}

// sha256Hex returns the hex SHA-256 of data: a report names the text it
// measured by the bytes it read.
func sha256Hex(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// checkThreads checks a --threads value against what the CPU backend accepts,
// so the error names the flag.
func checkThreads(n int) error {
	if n < 0 || n > device.MaxThreads() {
		return fmt.Errorf("--threads %d: want 0 (GOMAXPROCS) to %d (64 per CPU core, at most 4096)", n, device.MaxThreads())
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
