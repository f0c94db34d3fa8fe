//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/clitest"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

func TestMain(m *testing.M) {
	if clitest.RunMain(main) {
		return
	}
	os.Exit(m.Run())
}

// SIGINT and SIGTERM stop kakeya-eval at once in every phase (exit 130
// or 143 with one line saying so, at most a second of CPU time after the
// signal: clitest.Interrupt) and leave no output file: reading --data (a
// FIFO no one writes: signalled once the command is blocked, its FIFO
// open for reading), evaluating, calibrating (signalled once their first
// progress line is out), measuring sensitivity (once it has used a second
// of CPU time, past the model's load). Each signal comes in its phase
// however loaded the machine, and only a hang fails on time.
func TestSignalPhases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the command several times, each run a second or two")
	}
	model := shareddata.File(t, "models", "stories260K")
	stories := shareddata.File(t, "data", "tinystories", "val.txt")
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		args []string
		// stderr shows the phase has begun; "" waits for a second of CPU
		// time (clitest.WaitCPU), "blocked" for the command to block
		// (clitest.WaitBlocked).
		wait string
	}{
		{"ppl reading a FIFO", syscall.SIGINT, []string{"ppl", "--model", model, "--data", "FIFO"}, "blocked"},
		// Progress lines come at each tenth of the work (stderr is no
		// terminal): a tenth of 400 documents, or of 40k tokens, is
		// under a second, and nine tenths are left to interrupt (of the
		// whole file, the first line took ten seconds of both cores).
		{"ppl evaluating", syscall.SIGTERM, []string{"ppl", "--model", model, "--data", stories, "--mode", "docs", "--docs", "0:400"}, "ppl "},
		{"calibrate", syscall.SIGINT, []string{"calibrate", "--model", model, "--data", stories, "--tokens", "40960"}, "calibrat"},
		{"sensitivity", syscall.SIGTERM, []string{"sensitivity", "--model", model, "--data", stories, "--passages", "0", "--ctx", "256"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			args := append(tc.args, "--out", out)
			for i, a := range args {
				if a == "FIFO" {
					args[i] = filepath.Join(dir, "fifo")
					if err := syscall.Mkfifo(args[i], 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := clitest.Start(t, args, nil)
			switch tc.wait {
			case "":
				p.WaitCPU(time.Second)
			case "blocked":
				p.WaitBlocked()
				// Blocked in the FIFO's open: a writer opened without
				// blocking finds the command's end open (else ENXIO).
				w, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					t.Fatalf("the command is blocked, but not with the FIFO open for reading: %v\nstderr: %s", err, p.Stderr())
				}
				defer w.Close() // no one writes: the command blocks in its read now
			default:
				p.WaitOutput(true, tc.wait, clitest.HangBound) // a loaded 2-core machine took over 20 s
				time.Sleep(300 * time.Millisecond)
			}
			if !p.Running() {
				t.Fatalf("the command ended before the signal\nstderr: %s", p.Stderr())
			}
			p.Interrupt(tc.sig, "kakeya-eval")
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.Name() != "fifo" {
					t.Errorf("left %s behind", e.Name())
				}
			}
		})
	}
}

// --data /dev/zero ends in an error naming the input limit and its flag,
// quickly and in bounded memory.
func TestEndlessData(t *testing.T) {
	model := shareddata.File(t, "models", "stories260K")
	for _, cmd := range []string{"ppl", "calibrate", "sensitivity"} {
		t.Run(cmd, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			p := clitest.Start(t, []string{cmd, "--model", model, "--data", "/dev/zero", "--out", out}, nil)
			start := time.Now()
			code := p.Wait(10 * time.Second)
			took, rss := time.Since(start), p.MaxRSS()
			if code != 1 || !strings.Contains(p.Stderr(), "/dev/zero holds more than 64 MiB, the input limit (--max-input raises it)") {
				t.Errorf("exit %d, stderr %q; want 1 and the input limit named", code, p.Stderr())
			}
			if took > 10*time.Second || rss > 1<<30 {
				t.Errorf("took %v with peak RSS %d MiB; want within 10 s and 1 GiB", took, rss>>20)
			}
		})
	}
}

// A bad flag is reported once, then the command's usage; an unknown
// command likewise with the list of commands.
func TestUsageOnce(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		first, then string
	}{
		{[]string{"ppl", "--bogus"}, "kakeya-eval: ppl: flag provided but not defined: -bogus", "usage: kakeya-eval ppl"},
		{[]string{"bogus"}, `kakeya-eval: unknown command "bogus"`, "usage: kakeya-eval <command>"},
		{nil, "kakeya-eval: no command given", "usage: kakeya-eval <command>"},
	} {
		p := clitest.Start(t, tc.args, nil)
		code := p.Wait(10 * time.Second)
		lines := strings.SplitN(p.Stderr(), "\n", 2)
		if code != 2 || lines[0] != tc.first || len(lines) < 2 || !strings.HasPrefix(lines[1], tc.then) || strings.Count(p.Stderr(), tc.first) != 1 {
			t.Errorf("%q: exit %d, stderr:\n%s", tc.args, code, p.Stderr())
		}
	}
}
