package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The priority field needs --scheduling priority: a fcfs server answers it
// with a 400 naming the field and the flag, a priority server runs it;
// --scheduling takes fcfs or priority only.
func TestSchedulingPriority(t *testing.T) {
	body := `{"prompt": "Once upon a time", "max_tokens": 2, "priority": -3}`
	fcfs := startServer(t)
	if code, b := fcfs.post(t, "/v1/completions", body); code != http.StatusBadRequest || !strings.Contains(string(b), `"param":"priority"`) || !strings.Contains(string(b), "--scheduling priority") {
		t.Errorf("fcfs server: %d %s, want 400 about priority", code, b)
	}
	if code, b := fcfs.post(t, "/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 2, "priority": 0}`); code != http.StatusOK {
		t.Errorf("fcfs server, priority 0: %d %s, want 200", code, b)
	}
	prio := startServer(t, "--scheduling", "priority")
	if code, b := prio.post(t, "/v1/completions", body); code != http.StatusOK {
		t.Errorf("priority server: %d %s, want 200", code, b)
	}
	if code, b := prio.post(t, "/v1/completions", `{"prompt": "x", "priority": "high"}`); code != http.StatusBadRequest {
		t.Errorf("priority \"high\": %d %s, want 400", code, b)
	}
	err := run(context.Background(), append(serverArgs(refModel(t)), "--scheduling", "lifo"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--scheduling "lifo"`) {
		t.Errorf("--scheduling lifo: %v", err)
	}
}
