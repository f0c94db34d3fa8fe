// Package cli holds what the commands share around their work: a main that
// stops on SIGINT and SIGTERM within a second with the conventional exit
// status, flag parsing that reports an error once before the usage, and
// reading input whole with a bound.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit statuses: a run that failed, a command line that did not parse, and
// a run stopped by SIGINT or SIGTERM (128 + the signal, as shells report).
const (
	ExitError     = 1
	ExitUsage     = 2
	ExitInterrupt = 130
	ExitTerm      = 143
)

// Grace is how long Main waits, after the first SIGINT or SIGTERM, for the
// run to return once its context is cancelled, before it abandons the run
// and exits anyway: a phase that does not watch its context (a model load,
// one long forward pass) must not hold the command past a second.
const Grace = 500 * time.Millisecond

// A RunFunc is a command: it runs with args until done or until ctx is
// cancelled, reading stdin and writing stdout and stderr.
type RunFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error

// Main runs run with the process's arguments and standard streams and a
// context that the first SIGINT or SIGTERM cancels, prints its error once
// ("name: error"), and exits: 0 when run succeeds (or printed help), 1 on an
// error, 2 on a usage error (then the usage follows the error), 130 or 143
// after SIGINT or SIGTERM, printing "name: interrupted". A run that has not
// returned Grace after the signal is abandoned; a second signal ends it at
// once.
func Main(name string, run RunFunc) {
	os.Exit(Run(name, run, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Run is Main without the exit: it returns the exit status.
func Run(name string, run RunFunc, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, stdin, stdout, stderr) }()

	select {
	case err := <-done:
		return report(name, err, stderr)
	case sig := <-sigs:
		cancel()
		status := ExitInterrupt
		if sig == syscall.SIGTERM {
			status = ExitTerm
		}
		detail := ""
		select {
		case err := <-done:
			if err == nil {
				// It finished as the signal came: its work is whole.
				return 0
			}
			var ie *InterruptedError
			if errors.As(err, &ie) {
				detail = " " + ie.Detail
			}
		case <-sigs:
		case <-time.After(Grace):
		}
		fmt.Fprintf(stderr, "%s: interrupted%s\n", name, detail)
		return status
	}
}

// report prints err, if any, and returns the exit status for it.
func report(name string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var u *UsageError
	if errors.As(err, &u) {
		if u.Usage != nil {
			u.Usage()
		}
		return ExitUsage
	}
	return ExitError
}

// An InterruptedError is what a run stopped by its context may return to
// say how far it got: Main prints "name: interrupted " and Detail (e.g.
// "after generating 12 tokens").
type InterruptedError struct{ Detail string }

func (e *InterruptedError) Error() string { return "interrupted " + e.Detail }

// A UsageError is a command line that did not parse: Main prints the error,
// then calls Usage to print how to use the command.
type UsageError struct {
	Err   error
	Usage func()
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Parse parses args into fs. help writes the command's usage text (the
// flags included) to w. On -h or --help it writes help to stdout and
// returns flag.ErrHelp; on a bad flag it returns a *UsageError that prints
// help to stderr after Main has printed the error, so the error is said
// once and not buried above the usage.
//
// Parse also gives every command --version (unless fs defines a flag of
// that name): it writes WriteVersion's report for fs's name to stdout and
// returns flag.ErrHelp, so the command ends there with status 0 and no
// other flag, required or not, is checked.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, help func(w io.Writer)) error {
	version := addVersionFlag(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case err == nil && version != nil && *version:
		WriteVersion(stdout, fs.Name(), CurrentBuild())
		return flag.ErrHelp
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		help(stdout)
		return err
	}
	return &UsageError{Err: err, Usage: func() { help(stderr) }}
}

// PrintDefaults writes fs's flags with their defaults and usage to w, as
// flag.PrintDefaults does to the flag set's output.
func PrintDefaults(fs *flag.FlagSet, w io.Writer) {
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// DefaultMaxInput is the most input a command reads whole (standard input,
// a --data file) unless its --max-input flag says otherwise.
const DefaultMaxInput = 64 << 20

// MaxInputUsage is the usage line of the commands' --max-input flag.
const MaxInputUsage = "the most input (standard input, --data) read whole, in bytes with an optional K, M or G (binary) suffix; more is an error"

// KVMemoryUsage is the usage line of the commands' --kv-memory flag.
const KVMemoryUsage = "the KV cache's memory, shared by all sequences, e.g. 2G or 512M (binary); the longest sequence is what it holds (default: half the available memory)"

// A ByteSize is a flag.Value holding a count of bytes, set from "4096",
// "64M", "64MiB", "1G" (binary multiples).
type ByteSize int64

// String formats b as Bytes does.
func (b *ByteSize) String() string { return Bytes(int64(*b)) }

// Set parses s: a positive whole number of bytes, optionally followed by
// K, M or G (KiB, MiB, GiB).
func (b *ByteSize) Set(s string) error {
	num, mult := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return fmt.Errorf("%q is not a byte count (e.g. 64M, 1G, 4096)", s)
	}
	*b = ByteSize(n * mult)
	return nil
}

// ReadAll reads r to its end. It stops with an error naming what (e.g.
// "standard input") and flag when r holds more than limit bytes, having
// read limit+1, and with ctx's error as soon as ctx is done, even while a
// read blocks (a terminal or a pipe that stays open): that read is left
// to a goroutine, so the command need not wait for it.
func ReadAll(ctx context.Context, r io.Reader, limit int64, what, flag string) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	c := make(chan result, 1)
	go func() {
		var buf bytes.Buffer
		_, err := buf.ReadFrom(io.LimitReader(r, limit+1))
		c <- result{buf.Bytes(), err}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("reading %s: %w", what, context.Cause(ctx))
	case res := <-c:
		switch {
		case res.err != nil:
			return nil, fmt.Errorf("reading %s: %w", what, res.err)
		case int64(len(res.b)) > limit:
			return nil, fmt.Errorf("%s holds more than %s, the input limit (%s raises it)", what, Bytes(limit), flag)
		}
		return res.b, nil
	}
}

// ReadFile is ReadAll for the file at path, which may be a FIFO or a
// device (/dev/stdin); a read blocked when ctx is done is unblocked by
// closing the file.
func ReadFile(ctx context.Context, path string, limit int64, flag string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer func() {
		if stop() {
			f.Close()
		}
	}()
	return ReadAll(ctx, f, limit, path, flag)
}

// Bytes formats n bytes for a message: "64 MiB", "1.5 GiB", "300 bytes".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// CalibrationProgress returns a kakeya.Options.CalibrationProgress that
// writes the automatic calibration's progress to w, one line at its start
// and one at each further quarter of its tokens: "PREFIX: calibrating the
// KV cache on the built-in text: DONE/TOTAL tokens".
func CalibrationProgress(w io.Writer, prefix string) func(done, total int) {
	next := 0 // the next quarter to report
	return func(done, total int) {
		if total <= 0 || done*4 < next*total {
			return
		}
		fmt.Fprintf(w, "%s: calibrating the KV cache on the built-in text: %d/%d tokens\n", prefix, done, total)
		next = done*4/total + 1
	}
}
