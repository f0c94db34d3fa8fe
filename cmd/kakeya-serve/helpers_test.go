package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/internal/clitest"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// refModel returns ref-qwen2-6m, the model every server test serves (a
// ChatML chat template, a 2048-token context); it skips without the
// shared data set.
func refModel(t testing.TB) string {
	t.Helper()
	return shareddata.File(t, "models", "ref-qwen2-6m")
}

// serverArgs are the flags every test server gets before its own: one
// compute thread (the tests share two cores) and a fixed KV memory.
func serverArgs(dir string) []string {
	return []string{"--model", dir, "--served-model-name", "ref", "--addr", "127.0.0.1:0", "--threads", "1", "--kv-memory", "64M", "--log-format", "json"}
}

// A testServer is kakeya-serve's run in this process, on a loopback port.
type testServer struct {
	url  string
	logs *clitest.SyncBuffer
	stop context.CancelFunc
	done chan error
}

// startServer runs the server with serverArgs and args until the test
// ends (then it drains and must return nil within 10 s).
func startServer(t testing.TB, args ...string) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{logs: &clitest.SyncBuffer{}, stop: cancel, done: make(chan error, 1)}
	// The model's path is found here, on the test's goroutine: where the
	// data set is missing its Skip must end the test, not the server's
	// goroutine (which left the test waiting for a server never started).
	args = append(serverArgs(refModel(t)), args...)
	go func() { s.done <- run(ctx, args, io.Discard, s.logs) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.logs.String(), `"msg":"ready"`) {
		select {
		case err := <-s.done:
			t.Fatalf("the server ended before it was ready: %v\nlog:\n%s", err, s.logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not ready within 20 s\nlog:\n%s", s.logs)
		}
	}
	m := regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`).FindStringSubmatch(s.logs.String())
	if m == nil {
		t.Fatalf("no listening line in the log:\n%s", s.logs)
	}
	s.url = "http://" + m[1]
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the server did not drain within 10 s")
		}
	})
	return s
}

// post sends body to path and returns the status and the response body.
func (s *testServer) post(t testing.TB, path, body string, header ...string) (int, []byte) {
	t.Helper()
	return s.do(t, http.MethodPost, path, body, header...)
}

// do sends a request with headers given as name, value pairs.
func (s *testServer) do(t testing.TB, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// metric returns the value of the sample named series (with its labels,
// as the text format writes them) on /metrics.
func (s *testServer) metric(t testing.TB, series string) float64 {
	t.Helper()
	code, body := s.do(t, http.MethodGet, "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d", code)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s:\n%s", series, body)
	return 0
}

// waitMetric polls /metrics until series has value want, failing after
// timeout.
func (s *testServer) waitMetric(t testing.TB, series string, want float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := s.metric(t, series)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %g after %v, want %g", series, v, timeout, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMetricAtLeast polls /metrics until series is at least min, failing
// after timeout.
func (s *testServer) waitMetricAtLeast(t testing.TB, series string, min float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for v := s.metric(t, series); v < min; v = s.metric(t, series) {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %g after %v, want at least %g", series, v, timeout, min)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errorBody is the OpenAI error shape; a field the server left out stays
// nil, so a test can tell null from absent.
type errorBody struct {
	Error *struct {
		Message *string `json:"message"`
		Type    *string `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// checkError checks that b is an OpenAI error with the message, type and
// param/code fields present (param and code may be null), and returns it.
func checkError(t testing.TB, b []byte) (msg, typ string, param, code *string) {
	t.Helper()
	var e errorBody
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&e); err != nil || e.Error == nil || e.Error.Message == nil || e.Error.Type == nil {
		t.Fatalf("not an OpenAI error body (%v): %s", err, b)
	}
	if !bytes.Contains(b, []byte(`"param":`)) || !bytes.Contains(b, []byte(`"code":`)) {
		t.Fatalf("error body without param or code: %s", b)
	}
	return *e.Error.Message, *e.Error.Type, e.Error.Param, e.Error.Code
}

// reference is an engine like the test servers' (its own, since a
// server's engine is inside run): what kakeya-run runs for a prompt and
// settings.
func reference(t testing.TB) *kakeya.Engine {
	t.Helper()
	e, err := kakeya.Load(context.Background(), refModel(t), kakeya.Options{Threads: 1, KVMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// generate returns the reference engine's text for prompt.
func generate(t testing.TB, e *kakeya.Engine, prompt string, opt kakeya.GenerateOptions) *kakeya.Result {
	t.Helper()
	res, err := e.Generate(context.Background(), prompt, opt, nil)
	if err != nil {
		t.Fatalf("%q: %v", prompt, err)
	}
	return res
}

// discardLog returns a logger that writes nothing.
func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// readEvents reads a server-sent event stream to its end and returns the
// data of each event.
func readEvents(t testing.TB, r io.Reader) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := sc.Text()
		if l == "" {
			continue
		}
		d, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", l)
		}
		events = append(events, d)
	}
	return events
}

// prompts returns n distinct prompts for the concurrency tests.
func prompts(n int) []string {
	subjects := []string{"a cat", "the sea", "a robot", "my garden", "winter", "a train", "the moon", "bread"}
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("Tell me about %s, part %d.", subjects[i%len(subjects)], i)
	}
	return ps
}
