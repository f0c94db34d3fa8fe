//go:build unix

package main

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/clitest"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
)

func TestMain(m *testing.M) {
	if clitest.RunMain(main) {
		return
	}
	os.Exit(m.Run())
}

// SIGINT and SIGTERM stop kakeya-bench at once (clitest.Interrupt: the
// exit status and line, at most a second of CPU time after the signal)
// while it writes its 1 GB checkpoint (which goes with it) and while it
// measures; each signal comes in its phase, however loaded the machine:
// once the checkpoint's directory is there and no run has finished, and
// once the measurement has used a second of CPU time (the model's load
// takes milliseconds) and no run has finished.
func TestSignalPhases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the command twice, each run a second or two")
	}
	long := t.TempDir()
	if err := testmodel.Write(long, testmodel.LongTiny); err != nil {
		t.Fatal(err)
	}
	t.Run("writing the checkpoint", func(t *testing.T) {
		p := clitest.Start(t, []string{"--threads", "1", "--ctx", "16", "--reps", "1"}, nil)
		p.WaitOutput(true, "checkpoint to ", clitest.HangBound)
		time.Sleep(300 * time.Millisecond)
		tmp := regexp.MustCompile(`checkpoint to (\S+)`).FindStringSubmatch(p.Stderr())[1]
		if _, err := os.Stat(tmp); err != nil || !p.Running() || strings.Contains(p.Stderr(), "run 1:") {
			t.Fatalf("not writing the checkpoint: %s (%v), running %v\nstderr: %s", tmp, err, p.Running(), p.Stderr())
		}
		p.Interrupt(syscall.SIGINT, "kakeya-bench")
		if _, err := os.Stat(tmp); !os.IsNotExist(err) {
			t.Errorf("the checkpoint directory %s is still there (%v)", tmp, err)
			os.RemoveAll(tmp)
		}
		if strings.Contains(p.Stderr(), "run 1:") || p.Stdout() != "" {
			t.Errorf("a run finished: stdout %q\nstderr: %s", p.Stdout(), p.Stderr())
		}
	})
	t.Run("measuring", func(t *testing.T) {
		p := clitest.Start(t, []string{"--model", long, "--threads", "1", "--ctx", "30000", "--reps", "1", "--cache", "plain"}, nil)
		p.WaitCPU(time.Second)
		if strings.Contains(p.Stderr(), "run 1:") || !p.Running() {
			t.Fatalf("not measuring: running %v\nstderr: %s", p.Running(), p.Stderr())
		}
		p.Interrupt(syscall.SIGTERM, "kakeya-bench")
		if p.Stdout() != "" || strings.Contains(p.Stderr(), "run 1:") {
			t.Errorf("stdout %q, want no table\nstderr: %s", p.Stdout(), p.Stderr())
		}
	})
	// The run itself stops between two passes of a prefill or two decode
	// steps and returns, saying where, rather than being abandoned after
	// cli.Grace: here each pass (512 tokens over at most 2,048) takes tens
	// of ms of CPU time at most, so the run returns well inside Grace on a
	// loaded machine too, and the interrupted line names where it stopped
	// (a run cli.Main abandons says "interrupted" alone).
	t.Run("between passes", func(t *testing.T) {
		p := clitest.Start(t, []string{"--model", long, "--threads", "1", "--ctx", "2048", "--gen", "4", "--reps", "1000000", "--cache", "plain", "--warmup=false", "--progress=false"}, nil)
		p.WaitCPU(time.Second)
		p.Interrupt(syscall.SIGINT, "kakeya-bench")
		where := regexp.MustCompile(`kakeya-bench: interrupted in (the prefill|decode step [1-4]) of run [0-9]+ of plain at ctx 2048\n`)
		if !where.MatchString(p.Stderr()) || p.Stdout() != "" {
			t.Errorf("stdout %q, stderr %q: want no table and the line saying where the run stopped", p.Stdout(), p.Stderr())
		}
	})
}
