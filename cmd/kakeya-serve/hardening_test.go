package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// HEAD answers as GET without the body, OPTIONS with 204 and the methods a
// path takes (Allow), any other method with a 405 naming them.
func TestHeadOptions(t *testing.T) {
	s := newServer(serverConfig{name: "ref", maxBody: 1 << 20, log: discardLog()})
	hs := httptest.NewServer(s.handler())
	defer hs.Close()
	for _, tt := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodHead, "/health", 503, ""}, // loading, as GET says
		{http.MethodHead, "/metrics", 200, ""},
		{http.MethodOptions, "/health", 204, "GET, HEAD, OPTIONS"},
		{http.MethodOptions, "/v1/chat/completions", 204, "POST, OPTIONS"},
		{http.MethodOptions, "/v1/models", 204, "GET, HEAD, OPTIONS"},
		{http.MethodPut, "/v1/completions", 405, "POST, OPTIONS"},
		{http.MethodHead, "/v1/completions", 405, "POST, OPTIONS"},
	} {
		req, err := http.NewRequest(tt.method, hs.URL+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, %q", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), tt.status, tt.allow)
		}
		if (tt.method == http.MethodHead || tt.method == http.MethodOptions) && len(body) != 0 {
			t.Errorf("%s %s: a body of %d bytes", tt.method, tt.path, len(body))
		}
	}
}

// Error responses keep the server's paths to the log: a 500 says where
// the details are, a 400 that names the model directory names the served
// model instead.
func TestPublicError(t *testing.T) {
	eng := reference(t)
	dir := eng.Dir()
	s := newServer(serverConfig{name: "ref", maxBody: 1 << 20, log: discardLog()})
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	for _, e := range []*apiError{
		generateError(&pathError{"kakeya: non-finite logits: do the weights in " + dir + " hold NaN or Inf?"}, true),
		badRequest("messages", "kakeya: %s: tokenizer: %s/tokenizer_config.json: the Mistral [INST] template has no system role", dir, dir),
	} {
		got := s.publicError(r, eng, e)
		if strings.Contains(got.message, dir) || got.status != e.status {
			t.Errorf("%d %q: became %d %q", e.status, e.message, got.status, got.message)
		}
	}
}

type pathError struct{ s string }

func (e *pathError) Error() string { return e.s }

// A client that half-closes its connection after the request (its
// sending side) gets an error saying its request was cancelled, not an
// empty 200.
func TestHalfClose(t *testing.T) {
	s := startServer(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := strings.Replace(longRequest, `"stream": true`, `"stream": false`, 1)
	if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 499 {
		t.Fatalf("status %d, want 499: %q", resp.StatusCode, b)
	}
	if _, _, _, code := checkError(t, b); deref(code) != "client_closed_request" {
		t.Errorf("code %s: %s", deref(code), b)
	}
}

// A client that sends its headers and then its body a byte at a time gets
// 408 once --read-timeout passes, and its connection closes; connections
// past --max-connections are answered 503 at once (counted on /metrics),
// so a crowd of them cannot leave /health unanswered, which answers again
// as soon as the slow ones are dropped.
func TestSlowBody(t *testing.T) {
	s := startServer(t, "--read-timeout", "400ms", "--max-connections", "3")
	addr := strings.TrimPrefix(s.url, "http://")
	noKeep := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		resp, err := noKeep.Get(s.url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	slow := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	start := time.Now()
	conns := []net.Conn{slow(), slow(), slow()}
	// The slots are taken once the server has accepted them.
	deadline := time.Now().Add(5 * time.Second)
	var code int
	for code != 503 && time.Now().Before(deadline) {
		code, _ = get("/health")
	}
	if code != 503 {
		t.Fatalf("/health with 3 slow clients at --max-connections 3: %d, want the 503 of a full server", code)
	}
	c := conns[0]
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	go func() { // one more byte after a while: still too slow
		time.Sleep(200 * time.Millisecond)
		io.WriteString(c, `"`)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the slow client got no response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || took > 5*time.Second {
		t.Fatalf("the slow client got %d after %v: %s", resp.StatusCode, took, b)
	}
	if _, _, _, ecode := checkError(t, b); deref(ecode) != "timeout" {
		t.Errorf("code %s: %s", deref(ecode), b)
	}
	// Every slow one dropped, the server answers again, and says what
	// it turned away.
	for code = 0; code != 200 && time.Now().Before(deadline.Add(5*time.Second)); {
		code, _ = get("/health")
	}
	if code != 200 {
		t.Fatalf("/health after the slow clients' timeout: %d", code)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{"kakeya_connections_max 3", "kakeya_connections_rejected_total "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("no %q on /metrics", want)
		}
	}
	if strings.Contains(metrics, "kakeya_connections_rejected_total 0\n") {
		t.Error("no rejected connection counted")
	}
}

// Six concurrent 4 MB one-word prompts (past the context of 2048 tokens)
// raise the process's peak RSS by at most 200 MB: the engine rejects them
// from their length before tokenizing (which took 60-70 bytes per byte,
// 1.16 GB for the six), each with a 400 context_length_exceeded.
func TestPromptMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("no /proc/self/clear_refs to reset the peak RSS: Linux only")
	}
	s := startServer(t, "--max-body", "5M")
	word := strings.Repeat("a", 4<<20)
	body := `{"prompt": "` + word + `", "max_tokens": 1}`
	word = ""
	runtime.GC()
	idle := procStatusKB(t, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil { // resets VmHWM
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Go(func() {
			resp, err := http.Post(s.url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
			if resp.StatusCode == 400 && !strings.Contains(string(b), "context_length_exceeded") {
				t.Errorf("400 without context_length_exceeded: %s", b)
			}
		})
	}
	wg.Wait()
	peak := procStatusKB(t, "VmHWM")
	for i, c := range codes {
		if c != 400 {
			t.Errorf("request %d: status %d, want 400", i, c)
		}
	}
	t.Logf("RSS idle %d MB, peak %d MB", idle>>10, peak>>10)
	if peak-idle > 200<<10 {
		t.Errorf("6 concurrent 4 MB prompts raised the peak RSS by %d MB, over 200 MB", (peak-idle)>>10)
	}
}

// procStatusKB returns a field of /proc/self/status in KiB.
func procStatusKB(t *testing.T, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// Requests are charged to --max-prompt-memory from before their bodies
// are read until they end: while one holds 7 MiB of an 8 MiB limit (its
// 3.5 MiB body arriving), another that needs 2 MiB to read gets 429 with
// its body unread, and one that alone needs more than the limit to
// tokenize gets 413. /metrics shows the charge, the limit and the
// rejections, and the charge returns to 0.
func TestPromptMemoryLimit(t *testing.T) {
	s := startServer(t, "--max-prompt-memory", "8M")
	if got := s.metric(t, "kakeya_prompt_memory_max_bytes"); got != 8<<20 {
		t.Errorf("kakeya_prompt_memory_max_bytes %v, want %d", got, 8<<20)
	}
	const held = 3584 << 10 // 3.5 MiB, read at 2 bytes per byte
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(held)+"\r\n\r\n{\"prompt\": "); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.metric(t, "kakeya_prompt_memory_bytes") != 2*held {
		if time.Now().After(deadline) {
			t.Fatalf("kakeya_prompt_memory_bytes %v, want %d while the body arrives", s.metric(t, "kakeya_prompt_memory_bytes"), 2*held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	body := `{"prompt": "Once upon a time", "max_tokens": 2}` + strings.Repeat(" ", 1<<20)
	code, b := s.post(t, "/v1/completions", body)
	if _, _, _, ecode := checkError(t, b); code != http.StatusTooManyRequests || deref(ecode) != "prompt_memory_full" || !strings.Contains(string(b), "--max-prompt-memory") {
		t.Errorf("a 1 MiB body while 7 of 8 MiB are held: status %d: %s; want 429 prompt_memory_full naming the flag", code, b)
	}
	c.Close() // the held body never comes: its request ends
	for s.metric(t, "kakeya_prompt_memory_bytes") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("kakeya_prompt_memory_bytes %v after the requests ended, want 0", s.metric(t, "kakeya_prompt_memory_bytes"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// 1 MiB of body needs 64 MiB to tokenize: never within 8 MiB.
	code, b = s.post(t, "/v1/completions", body)
	if _, _, _, ecode := checkError(t, b); code != http.StatusRequestEntityTooLarge || deref(ecode) != "request_too_large" || !strings.Contains(string(b), "--max-prompt-memory") {
		t.Errorf("a 1 MiB body with 8 MiB of prompt memory: status %d: %s; want 413 naming the flag", code, b)
	}
	if code, b := s.post(t, "/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 2}`); code != 200 {
		t.Errorf("a small request after: status %d: %s", code, b)
	}
	if got := s.metric(t, "kakeya_prompt_memory_rejected_total"); got != 2 {
		t.Errorf("kakeya_prompt_memory_rejected_total %v, want 2", got)
	}
	if got := s.metric(t, "kakeya_prompt_memory_bytes"); got != 0 {
		t.Errorf("kakeya_prompt_memory_bytes %v at the end, want 0", got)
	}
}

// Six concurrent 760 KB one-word prompts, each within the context by its
// bytes (so tokenized: 760k tokens, then a 400 context_length_exceeded),
// raise the peak RSS by at most 200 MB: --max-prompt-memory 100M lets two
// tokenize at once (48 MB each by the charge), the others get 429 (about
// +85 to +115 MB here). Without the limit (1G), the six took +180 MB, and
// +265 to +290 MB with the tokenizer's buffers grown by doubling.
func TestPromptMemoryTokenizing(t *testing.T) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("no /proc/self/clear_refs to reset the peak RSS: Linux only")
	}
	s := startServer(t, "--max-body", "1M", "--max-prompt-memory", "100M")
	body := `{"prompt": "` + strings.Repeat("a", 760<<10) + `", "max_tokens": 1}`
	runtime.GC()
	idle := procStatusKB(t, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil { // resets VmHWM
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Go(func() {
			resp, err := http.Post(s.url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
			_, _, _, ecode := checkError(t, b)
			if !(resp.StatusCode == 400 && deref(ecode) == "context_length_exceeded" || resp.StatusCode == 429 && deref(ecode) == "prompt_memory_full") {
				t.Errorf("request %d: status %d: %s; want 400 context_length_exceeded or 429 prompt_memory_full", i, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	peak := procStatusKB(t, "VmHWM")
	t.Logf("statuses %v; RSS idle %d MB, peak %d MB", codes, idle>>10, peak>>10)
	if !slices.Contains(codes, 400) {
		t.Error("no prompt was tokenized")
	}
	if peak-idle > 200<<10 {
		t.Errorf("6 concurrent 760 KB prompts raised the peak RSS by %d MB, over 200 MB", (peak-idle)>>10)
	}
}
