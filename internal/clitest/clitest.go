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

// HangBound bounds the waits of a test of a command's phases: how long
// a step may take before the test calls it a hang. It bounds no speed:
// other work on the machine (a loaded 2-core machine ran a 1 s exit in
// 1.3 s) stretches every wall-clock time, so what a test asserts of speed
// it asserts in CPU time (Interrupt, WaitCPU).
const HangBound = 60 * time.Second

// MaxExitCPU is the most CPU time a command may use between a signal
// and its exit (Interrupt): it stops at once, whatever it was doing,
// rather than finishing a phase (a prefill, a measurement, a write of
// seconds of work) or a step of one. Exits take a few milliseconds.
const MaxExitCPU = time.Second

// Interrupt sends sig and checks that the command named name exits the
// way every tool must: at once, with status 128+sig, its last line on
// stderr "name: interrupted..." and the only one saying so. At once is
// work, not wall time, which a loaded machine stretches: the command uses
// at most MaxExitCPU of CPU time after the signal (where the platform
// gives CPU times: Linux; elsewhere it exits within 5 s) and exits within
// HangBound.
func (p *Proc) Interrupt(sig syscall.Signal, name string) {
	p.t.Helper()
	code, took, used, counted := p.SignalCPU(sig)
	lines := strings.Split(strings.TrimSpace(p.Stderr()), "\n")
	last := lines[len(lines)-1]
	if want := 128 + int(sig); code != want || !strings.HasPrefix(last, name+": interrupted") {
		p.t.Errorf("after %v: exit %d in %v, last stderr line %q; want %d and %s: interrupted", sig, code, took, last, want, name)
	}
	if n := strings.Count(p.Stderr(), "interrupted"); n != 1 {
		p.t.Errorf("%d lines say interrupted, want 1:\n%s", n, p.Stderr())
	}
	switch {
	case counted:
		if used > MaxExitCPU {
			p.t.Errorf("after %v: %v of CPU time before the exit (in %v), want at most %v", sig, used, took, MaxExitCPU)
		}
		p.t.Logf("%v: exit %d in %v, %v of CPU time after the signal", sig, code, took, used)
	case took > 5*time.Second:
		p.t.Errorf("after %v: exit in %v, want within 5 s (no CPU times on this platform)", sig, took)
	}
}

// SignalCPU sends sig and waits for the command to exit, at most
// HangBound (then it is killed and the test fails); it returns the exit
// status, how long the exit took, and the CPU time, user and system, the
// command used between the signal and its exit (to within a tick of 10
// ms), which counted reports false for where the platform does not say
// (Linux's /proc does).
func (p *Proc) SignalCPU(sig syscall.Signal) (code int, took, used time.Duration, counted bool) {
	p.t.Helper()
	before, counted := cpuTime(p.cmd.Process.Pid)
	code, took = p.Signal(sig, HangBound)
	after, ok := p.cpuUsed()
	return code, took, after - before, counted && ok
}

// cpuUsed returns the CPU time, user and system, the command used in
// all, once it has exited, and false where the platform does not say.
func (p *Proc) cpuUsed() (time.Duration, bool) {
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// WaitCPU waits until the command has used d of CPU time, so that it is
// in a phase of work that its start-up (loading a small model, reading
// its input: a fraction of d) comes before, however loaded the machine;
// it fails the test if the command exits first or HangBound passes.
// Where the platform gives no CPU times (Linux's /proc does) it waits d.
func (p *Proc) WaitCPU(d time.Duration) {
	p.t.Helper()
	if _, ok := cpuTime(p.cmd.Process.Pid); !ok {
		time.Sleep(d)
		return
	}
	deadline := time.Now().Add(HangBound)
	for {
		used, ok := cpuTime(p.cmd.Process.Pid)
		if ok && used >= d {
			return
		}
		select {
		case <-p.done:
			p.t.Fatalf("the command ended (%v) before using %v of CPU time\nstdout: %s\nstderr: %s", p.err, d, p.stdout.String(), p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%v of CPU time used in %v, want %v\nstderr: %s", used, HangBound, d, p.stderr.String())
		}
	}
}

// WaitBlocked waits until the command is blocked (in a read of input no
// one writes, on a peer that does not answer): every thread asleep, and
// no CPU time used, over 100 ms, which a command still starting up or at
// work does not show however loaded the machine (a thread waiting for a
// CPU is not asleep); it fails the test if the command exits first or
// HangBound passes. Where the platform does not say (Linux's /proc does)
// it waits 300 ms.
func (p *Proc) WaitBlocked() {
	p.t.Helper()
	pid := p.cmd.Process.Pid
	if _, ok := asleep(pid); !ok {
		time.Sleep(300 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(HangBound)
	quiet := 0 // consecutive samples asleep with no CPU time used
	last, _ := cpuTime(pid)
	for quiet < 5 {
		select {
		case <-p.done:
			p.t.Fatalf("the command ended (%v) before it blocked\nstdout: %s\nstderr: %s", p.err, p.stdout.String(), p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		used, _ := cpuTime(pid)
		if a, _ := asleep(pid); a && used == last {
			quiet++
		} else {
			quiet = 0
		}
		last = used
		if time.Now().After(deadline) {
			p.t.Fatalf("the command did not block within %v\nstderr: %s", HangBound, p.stderr.String())
		}
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
