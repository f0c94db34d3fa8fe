package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"4096", 4096, false}, {"64M", 64 << 20, false}, {"64MiB", 64 << 20, false}, {"1G", 1 << 30, false},
		{"2K", 2048, false}, {"0", 0, true}, {"-3", 0, true}, {"1T", 0, true}, {"M", 0, true}, {"9223372036854775807G", 0, true},
	} {
		var b ByteSize
		err := b.Set(tt.in)
		if tt.err != (err != nil) || !tt.err && int64(b) != tt.want {
			t.Errorf("Set(%q) = %d, %v; want %d (error %v)", tt.in, b, err, tt.want, tt.err)
		}
	}
	if s := Bytes(64 << 20); s != "64 MiB" {
		t.Errorf("Bytes(64 MiB) = %q", s)
	}
}

// ReadAll returns what it read, stops with the limit named, and returns at
// once when its context ends while a read blocks.
func TestReadAll(t *testing.T) {
	ctx := context.Background()
	if b, err := ReadAll(ctx, strings.NewReader("hello"), 5, "input", "--max-input"); err != nil || string(b) != "hello" {
		t.Errorf("5 bytes at a limit of 5: %q, %v", b, err)
	}
	if _, err := ReadAll(ctx, strings.NewReader("hello!"), 5, "input", "--max-input"); err == nil || err.Error() != "input holds more than 5 bytes, the input limit (--max-input raises it)" {
		t.Errorf("6 bytes at a limit of 5: %v", err)
	}
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ReadAll(ctx, r, 5, "standard input", "--max-input"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Errorf("blocked read: %v after %v", err, time.Since(start))
	}
}

// Run reports an error once, a usage error before its usage, help as
// success, and a run that succeeds as 0.
func TestRunStatus(t *testing.T) {
	usage := func(w io.Writer) { fmt.Fprintln(w, "usage: tool [flags]") }
	for _, tt := range []struct {
		name   string
		run    RunFunc
		code   int
		stderr string
	}{
		{"ok", func(context.Context, []string, io.Reader, io.Writer, io.Writer) error { return nil }, 0, ""},
		{"error", func(context.Context, []string, io.Reader, io.Writer, io.Writer) error { return errors.New("boom") }, 1, "tool: boom\n"},
		{"help", func(context.Context, []string, io.Reader, io.Writer, io.Writer) error { return flag.ErrHelp }, 0, ""},
		{"bad flag", func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			fs := flag.NewFlagSet("tool", flag.ContinueOnError)
			fs.Int("n", 0, "a number")
			return Parse(fs, args, stdout, stderr, usage)
		}, 2, "tool: invalid value \"x\" for flag -n: parse error\nusage: tool [flags]\n"},
	} {
		var stderr strings.Builder
		if code := Run("tool", tt.run, []string{"-n", "x"}, nil, io.Discard, &stderr); code != tt.code || stderr.String() != tt.stderr {
			t.Errorf("%s: status %d, stderr %q; want %d, %q", tt.name, code, stderr.String(), tt.code, tt.stderr)
		}
	}
}

// CalibrationProgress writes the start, then a line per quarter passed.
func TestCalibrationProgress(t *testing.T) {
	var b strings.Builder
	p := CalibrationProgress(&b, "x")
	for _, d := range []int{0, 100, 300, 500, 600, 1000} {
		p(d, 1000)
	}
	want := "x: calibrating the KV cache on the built-in text: 0/1000 tokens\n" +
		"x: calibrating the KV cache on the built-in text: 300/1000 tokens\n" +
		"x: calibrating the KV cache on the built-in text: 500/1000 tokens\n" +
		"x: calibrating the KV cache on the built-in text: 1000/1000 tokens\n"
	if b.String() != want {
		t.Errorf("got\n%swant\n%s", b.String(), want)
	}
}
