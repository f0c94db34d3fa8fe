//go:build unix

package main

import (
	"bufio"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/clitest"
)

func TestMain(m *testing.M) {
	if clitest.RunMain(main) {
		return
	}
	os.Exit(m.Run())
}

// startCommand runs kakeya-serve as a process (the test binary as the
// command) and returns it with its URL once it is ready.
func startCommand(t *testing.T, args ...string) (*clitest.Proc, string) {
	t.Helper()
	p := clitest.Start(t, append(serverArgs(refModel(t)), args...), nil)
	p.WaitOutput(true, `"msg":"ready"`, 20*time.Second)
	m := regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`).FindStringSubmatch(p.Stderr())
	if m == nil {
		t.Fatalf("no listening line:\n%s", p.Stderr())
	}
	return p, "http://" + m[1]
}

// streamEvents starts longRequest and returns a channel that receives
// its events, closed at the stream's end, once the first has come.
func streamEvents(t *testing.T, url string) <-chan string {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(longRequest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := make(chan string, 4096)
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("the stream ended at once")
	}
	events <- strings.TrimPrefix(sc.Text(), "data: ")
	go func() {
		defer close(events)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
	}()
	return events
}

// drainEvents returns the events left on c, waiting at most timeout for
// its end.
func drainEvents(t *testing.T, c <-chan string, timeout time.Duration) []string {
	t.Helper()
	var all []string
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-c:
			if !ok {
				return all
			}
			all = append(all, e)
		case <-deadline:
			t.Fatalf("the stream did not end within %v", timeout)
		}
	}
}

// SIGTERM drains the server: it stops accepting connections, lets the
// requests in flight finish within --drain, cancels those still running
// past it, and exits 0. A second signal ends the drain at once.
func TestSIGTERM(t *testing.T) {
	t.Run("requests finish", func(t *testing.T) {
		p, url := startCommand(t, "--drain", "20s")
		events := streamEvents(t, url)
		code, took := p.Signal(syscall.SIGTERM, 20*time.Second)
		rest := drainEvents(t, events, time.Second)
		if code != 0 {
			t.Fatalf("exit %d after %v, want 0\nstderr:\n%s", code, took, p.Stderr())
		}
		if n := len(rest); n < 3 || rest[n-1] != "[DONE]" || !strings.Contains(rest[n-2], `"finish_reason":"length"`) {
			t.Fatalf("the stream in flight ended with %q, want its last chunk and [DONE]", rest[max(0, n-2):])
		}
		if _, err := http.Get(url + "/health"); err == nil {
			t.Error("the server still accepts connections after it exited")
		}
		// The request is in flight: running, or still waiting if its
		// first event was sent before the scheduler took it in.
		m := regexp.MustCompile(`"msg":"draining","running":(\d+),"waiting":(\d+)`).FindStringSubmatch(p.Stderr())
		if m == nil || m[1]+m[2] != "10" && m[1]+m[2] != "01" || !strings.Contains(p.Stderr(), `"msg":"drained"`) {
			t.Errorf("no drain of the one request in the log:\n%s", p.Stderr())
		}
		t.Logf("drained in %v", took)
	})
	t.Run("grace runs out", func(t *testing.T) {
		p, url := startCommand(t, "--drain", "100ms")
		events := streamEvents(t, url)
		code, took := p.Signal(syscall.SIGTERM, 10*time.Second)
		rest := drainEvents(t, events, time.Second)
		if code != 0 || took > 2*time.Second {
			t.Fatalf("exit %d after %v, want 0 within 2 s\nstderr:\n%s", code, took, p.Stderr())
		}
		if n := len(rest); n < 2 || rest[n-1] != "[DONE]" || !strings.Contains(rest[n-2], `"error"`) {
			t.Fatalf("the cancelled stream ended with %q, want an error event and [DONE]", rest[max(0, n-2):])
		}
	})
	t.Run("second signal", func(t *testing.T) {
		p, url := startCommand(t, "--drain", "20s")
		streamEvents(t, url)
		m := regexp.MustCompile(`"pid":(\d+)`).FindStringSubmatch(p.Stderr())
		if m == nil {
			t.Fatalf("no pid in the log:\n%s", p.Stderr())
		}
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.WaitOutput(true, `"msg":"draining"`, 5*time.Second)
		// At once: at most a second of CPU time after the signal (a
		// loaded machine stretches wall time, not work), the request in
		// flight not finished; where the platform gives no CPU times,
		// within a second.
		code, took, used, counted := p.SignalCPU(syscall.SIGINT)
		if code != 130 || counted && used > clitest.MaxExitCPU || !counted && took > time.Second ||
			!strings.HasSuffix(strings.TrimSpace(p.Stderr()), "kakeya-serve: interrupted during the drain") {
			t.Fatalf("exit %d after %v (%v of CPU time), want 130 at once\nstderr:\n%s", code, took, used, p.Stderr())
		}
		t.Logf("exit %d in %v, %v of CPU time after the second signal", code, took, used)
	})
}

// A bad flag is reported once with the usage; -h prints the usage to
// stdout; a port in use is an error naming it.
func TestUsage(t *testing.T) {
	p := clitest.Start(t, []string{"--bogus"}, nil)
	if code := p.Wait(10 * time.Second); code != 2 || !strings.HasPrefix(p.Stderr(), "kakeya-serve: flag provided but not defined: -bogus\nusage: kakeya-serve") {
		t.Errorf("--bogus: exit %d, stderr:\n%s", code, p.Stderr())
	}
	p = clitest.Start(t, []string{"-h"}, nil)
	if code := p.Wait(10 * time.Second); code != 0 || !strings.HasPrefix(p.Stdout(), "usage: kakeya-serve") {
		t.Errorf("-h: exit %d, stdout %q", code, p.Stdout())
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "x"}, "--model is required"},
		{[]string{"--model", "m", "--addr", "nohost"}, `--addr "nohost"`},
		{[]string{"--model", "m", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"--model", "m", "--max-waiting", "-1"}, "must be >= 0"},
		{[]string{"--model", "m", "--max-body", "0"}, "is not a byte count"},
	} {
		p := clitest.Start(t, tt.args, nil)
		if code := p.Wait(10 * time.Second); code == 0 || !strings.Contains(p.Stderr(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q, want an error containing %q", tt.args, code, p.Stderr(), tt.want)
		}
	}
	_, url := startCommand(t)
	addr := strings.TrimPrefix(url, "http://")
	p = clitest.Start(t, append(serverArgs(refModel(t)), "--addr", addr), nil)
	if code := p.Wait(10 * time.Second); code != 1 || !strings.Contains(p.Stderr(), "address already in use") {
		t.Errorf("a port in use: exit %d, stderr %q", code, p.Stderr())
	}
}
