//go:build unix

package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/clitest"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
)

func TestMain(m *testing.M) {
	if clitest.RunMain(main) {
		return
	}
	os.Exit(m.Run())
}

// longModel writes testmodel.LongTiny with stories260K's tokenizer: slow
// enough at long contexts to be caught in prefill or in decode.
func longModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.LongTiny); err != nil {
		t.Fatal(err)
	}
	stories := shareddata.File(t, "models", "stories260K")
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(stories, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// stallingHub listens on loopback and accepts connections it never
// answers: a Hugging Face endpoint that hangs. It returns the endpoint and
// a channel that receives once a request arrives.
func stallingHub(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}()
	return "http://" + ln.Addr().String(), got
}

// SIGINT and SIGTERM stop kakeya-run at once in every phase (exit 130 or
// 143 with one line saying so, at most a second of CPU time after the
// signal: clitest.Interrupt): reading the prompt (signalled once the
// command is blocked on its stdin), fetching the model (once the request
// reached the hub), prefill (once it has used a second of CPU time, past
// the model's load, with no token out) and decode (once tokens come).
// Each signal comes in its phase however loaded the machine, and only a
// hang fails on time.
func TestSignalPhases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the command several times, each run a second or two")
	}
	long := longModel(t)
	story, err := os.ReadFile(shareddata.File(t, "data", "tinystories", "val.txt"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := story[:50000] // ~24k tokens: a prefill of several seconds
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		start func(t *testing.T) *clitest.Proc
	}{
		{"reading stdin", syscall.SIGINT, func(t *testing.T) *clitest.Proc {
			p := clitest.Start(t, []string{"--model", long, "--prompt", "-"}, clitest.Stalled(t))
			p.WaitBlocked()
			if p.Stdout() != "" {
				t.Fatalf("blocked with output %q, want none before the prompt is read", p.Stdout())
			}
			return p
		}},
		{"fetching the model", syscall.SIGTERM, func(t *testing.T) *clitest.Proc {
			endpoint, got := stallingHub(t)
			p := clitest.Start(t, []string{"--model", "kakeya-test/no-such-model", "--prompt", "hi"}, nil,
				"HF_ENDPOINT="+endpoint, "HF_HUB_CACHE="+t.TempDir(), "HF_HUB_OFFLINE=0", "HF_TOKEN=")
			select {
			case <-got:
			case <-time.After(clitest.HangBound):
				t.Fatalf("no request reached the hub\nstderr: %s", p.Stderr())
			}
			return p
		}},
		{"prefill", syscall.SIGTERM, func(t *testing.T) *clitest.Proc {
			p := clitest.Start(t, []string{"--model", long, "--prompt", "-", "--max-tokens", "1", "--ctx", "32768"}, bytes.NewReader(prompt))
			p.WaitCPU(time.Second)
			if p.Stdout() != "" || !p.Running() {
				t.Fatalf("not in prefill after a second of CPU time: stdout %q\nstderr: %s", p.Stdout(), p.Stderr())
			}
			return p
		}},
		{"decode", syscall.SIGINT, func(t *testing.T) *clitest.Proc {
			p := clitest.Start(t, []string{"--model", long, "--prompt", "Once upon a time", "--max-tokens", "0", "--ctx", "32768", "--seed", "1"}, nil)
			p.WaitOutput(false, " ", clitest.HangBound)
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.start(t).Interrupt(tc.sig, "kakeya-run") })
	}
}

// Endless standard input ends in an error naming the limit and the flag
// that raises it, quickly and in bounded memory.
func TestEndlessInput(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	for _, args := range [][]string{
		{"--model", dir, "--prompt", "-"},
		{"--model", dir, "--tokenize"},
	} {
		t.Run(args[2], func(t *testing.T) {
			p := clitest.Start(t, args, clitest.Endless{})
			start := time.Now()
			code := p.Wait(10 * time.Second)
			took, rss := time.Since(start), p.MaxRSS()
			if code != 1 || !strings.Contains(p.Stderr(), "more than 64 MiB, the input limit (--max-input raises it)") {
				t.Errorf("exit %d, stderr %q; want 1 and the input limit named", code, p.Stderr())
			}
			if took > 10*time.Second || rss > 1<<30 {
				t.Errorf("took %v with peak RSS %d MiB; want within 10 s and 1 GiB", took, rss>>20)
			}
			t.Logf("%v, peak RSS %d MiB", took, rss>>20)
		})
	}
	// A larger limit is a flag away.
	p := clitest.Start(t, []string{"--model", dir, "--tokenize", "--max-input", "1K"}, strings.NewReader(strings.Repeat("a", 1500)))
	if code := p.Wait(10 * time.Second); code != 1 || !strings.Contains(p.Stderr(), "more than 1024 bytes") {
		t.Errorf("--max-input 1K: exit %d, stderr %q", code, p.Stderr())
	}
	p = clitest.Start(t, []string{"--model", dir, "--tokenize", "--max-input", "2K"}, strings.NewReader(strings.Repeat("a", 1500)))
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Errorf("--max-input 2K: exit %d, stderr %q", code, p.Stderr())
	}
	p = clitest.Start(t, []string{"--model", dir, "--tokenize", "--max-input", "-3"}, nil)
	if code := p.Wait(10 * time.Second); code != 2 || !strings.Contains(p.Stderr(), fmt.Sprintf("%q is not a byte count", "-3")) {
		t.Errorf("--max-input -3: exit %d, stderr %q", code, p.Stderr())
	}
}

// A bad flag is reported once, on the first line, and the usage follows;
// other errors come without the usage; -h prints the usage to stdout.
func TestUsageOnce(t *testing.T) {
	p := clitest.Start(t, []string{"--bogus"}, nil)
	code := p.Wait(10 * time.Second)
	lines := strings.Split(p.Stderr(), "\n")
	if code != 2 || lines[0] != "kakeya-run: flag provided but not defined: -bogus" || strings.Count(p.Stderr(), "-bogus") != 1 ||
		!strings.Contains(p.Stderr(), "usage: kakeya-run") {
		t.Errorf("--bogus: exit %d, stderr:\n%s", code, p.Stderr())
	}
	p = clitest.Start(t, []string{"--prompt", "x"}, nil)
	if code := p.Wait(10 * time.Second); code != 1 || p.Stderr() != "kakeya-run: --model is required\n" {
		t.Errorf("no --model: exit %d, stderr %q", code, p.Stderr())
	}
	p = clitest.Start(t, []string{"-h"}, nil)
	if code := p.Wait(10 * time.Second); code != 0 || !strings.HasPrefix(p.Stdout(), "usage: kakeya-run") || p.Stderr() != "" {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, p.Stdout(), p.Stderr())
	}
}
