//go:build unix

package main

import (
	"os"
	"regexp"
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

// SIGINT and SIGTERM stop kakeya-bench within a second while it writes its
// 1 GB checkpoint (which goes with it) and while it measures; it exits 130
// or 143 with one line saying so.
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
		p.WaitOutput(true, "checkpoint to ", 20*time.Second)
		time.Sleep(300 * time.Millisecond)
		tmp := regexp.MustCompile(`checkpoint to (\S+)`).FindStringSubmatch(p.Stderr())[1]
		p.Interrupt(syscall.SIGINT, "kakeya-bench")
		if _, err := os.Stat(tmp); !os.IsNotExist(err) {
			t.Errorf("the checkpoint directory %s is still there (%v)", tmp, err)
			os.RemoveAll(tmp)
		}
	})
	t.Run("measuring", func(t *testing.T) {
		p := clitest.Start(t, []string{"--model", long, "--threads", "1", "--ctx", "30000", "--reps", "1", "--cache", "plain"}, nil)
		time.Sleep(1500 * time.Millisecond)
		p.Interrupt(syscall.SIGTERM, "kakeya-bench")
		if p.Stdout() != "" {
			t.Errorf("stdout %q, want no table", p.Stdout())
		}
	})
}
