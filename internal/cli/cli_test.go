package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
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

// ReadAll returns what it read, stops with the limit named, and returns
// with its context's error (cancelled, or past its deadline) when the
// context ends while a read blocks, without waiting for that read: the
// read is released only after ReadAll returned. Nothing is timed but a
// bound on a hang (the one-second bound this test had measured how soon
// a loaded machine ran the test's goroutines after a 50 ms timer, and
// once, at load 10, it was later); ReadAll past a deadline returns no
// sooner than the deadline.
func TestReadAll(t *testing.T) {
	ctx := context.Background()
	if b, err := ReadAll(ctx, strings.NewReader("hello"), 5, "input", "--max-input"); err != nil || string(b) != "hello" {
		t.Errorf("5 bytes at a limit of 5: %q, %v", b, err)
	}
	if _, err := ReadAll(ctx, strings.NewReader("hello!"), 5, "input", "--max-input"); err == nil || err.Error() != "input holds more than 5 bytes, the input limit (--max-input raises it)" {
		t.Errorf("6 bytes at a limit of 5: %v", err)
	}
	const deadline = 50 * time.Millisecond
	for _, tt := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, deadline) }, context.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &blockedReader{reading: make(chan struct{}), release: make(chan struct{})}
			defer close(r.release)
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			type result struct {
				b   []byte
				err error
			}
			done := make(chan result, 1)
			go func() {
				b, err := ReadAll(ctx, r, 5, "standard input", "--max-input")
				done <- result{b, err}
			}()
			select {
			case <-r.reading:
			case <-time.After(time.Minute):
				t.Fatal("ReadAll did not read within a minute")
			}
			if tt.want == context.Canceled {
				select {
				case res := <-done:
					t.Fatalf("ReadAll returned (%q, %v) while its read blocked and its context was live", res.b, res.err)
				default:
				}
				cancel()
			}
			var res result
			select {
			case res = <-done:
			case <-time.After(time.Minute):
				t.Fatal("ReadAll did not return within a minute of its context's end")
			}
			if !errors.Is(res.err, tt.want) || res.b != nil || !strings.Contains(res.err.Error(), "reading standard input") {
				t.Errorf("blocked read: %q, %v; want %v naming standard input", res.b, res.err, tt.want)
			}
			if r.returned.Load() {
				t.Error("ReadAll waited for the blocked read to return")
			}
			if took := time.Since(start); tt.want == context.DeadlineExceeded && took < deadline {
				t.Errorf("returned after %v, before the %v deadline", took, deadline)
			}
		})
	}
}

// blockedReader's Read closes reading on its first call and blocks until
// release is closed, then reports the end of the input, marking that it
// returned.
type blockedReader struct {
	reading, release chan struct{}
	once             sync.Once
	returned         atomic.Bool
}

func (r *blockedReader) Read([]byte) (int, error) {
	r.once.Do(func() { close(r.reading) })
	<-r.release
	r.returned.Store(true)
	return 0, io.EOF
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
