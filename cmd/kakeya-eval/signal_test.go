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

// SIGINT and SIGTERM stop kakeya-eval within a second in every phase:
// reading --data (a FIFO no one writes), evaluating, calibrating,
// measuring sensitivity; it exits 130 or 143 with one line saying so and
// leaves no output file.
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
		wait string // stderr shows the phase has begun; "" waits 1.5 s
	}{
		{"ppl reading a FIFO", syscall.SIGINT, []string{"ppl", "--model", model, "--data", "FIFO"}, ""},
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
			if tc.wait == "" {
				time.Sleep(1500 * time.Millisecond)
			} else {
				p.WaitOutput(true, tc.wait, 60*time.Second) // a bound, not a wait: a loaded 2-core machine took over 20 s
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
