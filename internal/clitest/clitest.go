//go:build unix

// Package clitest runs a command's test binary as the command itself, so a
// test can signal it, feed it endless input and watch how it ends. A
// command package's TestMain calls RunMain first; its tests call Start.
package clitest

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envMain marks a child started by Start: its TestMain runs the command.
const envMain = "KAKEYA_CLITEST_MAIN"

// RunMain runs main instead of the tests when the test binary was started
// by Start (its arguments are then the command's), and reports whether it
// did (main normally exits first). TestMain calls it before m.Run parses
// the test flags.
func RunMain(main func()) bool {
	if os.Getenv(envMain) != "1" {
		return false
	}
	main()
	return true
}

// A Proc is a command started by Start.
type Proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdout SyncBuffer
	stderr SyncBuffer
	done   chan struct{}
	err    error
}

// Start runs the command under test with args, stdin (nil: an empty
// input) and extra environment variables. The command is killed when the
// test ends if it is still running.
func Start(t testing.TB, args []string, stdin io.Reader, env ...string) *Proc {
	t.Helper()
	argv := append([]string{os.Args[0]}, args...)
	if w := strings.Fields(os.Getenv("KAKEYA_TEST_EXEC")); len(w) > 0 {
		// A test binary for another architecture runs under the emulator
		// that runs this one (go test -exec; see leveltest.EnvExec).
		argv = append(w, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append(env, envMain+"=1")...)
	cmd.Stdin = stdin
	// A stdin that is not a file is copied in by a goroutine Wait would
	// otherwise wait for, though the command has gone.
	cmd.WaitDelay = time.Second
	p := &Proc{t: t, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// WaitOutput waits until the command's stdout (stderr false) or stderr
// contains s, and fails the test if the command exits first or timeout
// passes.
func (p *Proc) WaitOutput(stderr bool, s string, timeout time.Duration) {
	p.t.Helper()
	buf := &p.stdout
	if stderr {
		buf = &p.stderr
	}
	deadline := time.Now().Add(timeout)
	for !strings.Contains(buf.String(), s) {
		select {
		case <-p.done:
			p.t.Fatalf("the command ended (%v) before printing %q\nstdout: %s\nstderr: %s", p.err, s, p.stdout.String(), p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q within %v\nstdout: %s\nstderr: %s", s, timeout, p.stdout.String(), p.stderr.String())
		}
	}
}

// Running reports whether the command has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig and waits for the command to exit, at most timeout; it
// returns the exit status and how long the exit took.
func (p *Proc) Signal(sig syscall.Signal, timeout time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	return p.Wait(timeout), time.Since(start)
}

// Interrupt sends sig and checks that the command named name exits the way
// every tool must: within a second, with status 128+sig, its last line on
// stderr "name: interrupted..." and the only one saying so.
func (p *Proc) Interrupt(sig syscall.Signal, name string) {
	p.t.Helper()
	code, took := p.Signal(sig, 5*time.Second)
	lines := strings.Split(strings.TrimSpace(p.Stderr()), "\n")
	last := lines[len(lines)-1]
	if want := 128 + int(sig); code != want || took > time.Second || !strings.HasPrefix(last, name+": interrupted") {
		p.t.Errorf("after %v: exit %d in %v, last stderr line %q; want %d within 1s and %s: interrupted", sig, code, took, last, want, name)
	}
	if n := strings.Count(p.Stderr(), "interrupted"); n != 1 {
		p.t.Errorf("%d lines say interrupted, want 1:\n%s", n, p.Stderr())
	}
}

// Wait waits for the command to exit, at most timeout (then it is killed
// and the test fails), and returns its exit status.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("the command did not exit within %v\nstderr: %s", timeout, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// MaxRSS returns the command's peak resident memory in bytes, once it has
// exited (0 where the platform does not say).
func (p *Proc) MaxRSS() int64 {
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024 // kilobytes on Linux
	}
	return 0
}

// Stdout and Stderr return what the command has written so far.
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr returns what the command has written to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Endless is a reader that never ends: "yes\n" forever, like yes(1).
type Endless struct{}

func (Endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "yes\n"[i%4]
	}
	return len(p), nil
}

// Stalled returns a pipe no one writes to until the test ends, like a
// terminal no one types into.
func Stalled(t testing.TB) *os.File {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r
}
