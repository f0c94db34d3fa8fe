package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// A configuration whose hot window (or sinks) covers every passage encodes
// nothing: the run warns on stderr, once per such configuration, and the
// table and report mark its row "nothing compressed" rather than grading
// figures that are the reference's. Passages of 48+16 tokens feed 63
// tokens: with blocks of 16, a hot window of 47 still encodes one block.
func TestPPLNothingCompressed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr strings.Builder
	err := runPPL(context.Background(), []string{"--model", shareddata.File(t, "models", "stories260K"),
		"--data", shareddata.File(t, "data", "tinystories", "val.txt"), "--ctx", "48", "--n-eval", "16", "--passages", "2",
		"--config", "name=hot47,kv=int8,block=16,boundary=none,hot=47",
		"--config", "name=hot48,kv=int8,block=16,boundary=none,hot=48",
		"--config", "name=sinks,kv=int8,block=16,boundary=none,hot=0,sinks=64",
		"--out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Configs []struct {
			Verdict string `json:"verdict"`
			KV      struct {
				Encoded int64 `json:"encoded_bytes"`
			} `json:"kv"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Configs) != 4 {
		t.Fatalf("%d configurations in the report", len(r.Configs))
	}
	for i, want := range []struct {
		name    string
		nothing bool
		warning string
	}{
		{"hot47", false, ""},
		{"hot48", true, "ppl: warning: config hot48: nothing will be compressed: with --hot-window 48, --sinks 0 and 16-token blocks the first block is encoded once a sequence holds 64 tokens, and sequences here hold at most 63"},
		{"sinks", true, "ppl: warning: config sinks: nothing will be compressed: with --hot-window 0, --sinks 64 and 16-token blocks the first block is encoded once a sequence holds 80 tokens, and sequences here hold at most 63"},
	} {
		c := r.Configs[i+1]
		// The verdict follows the settings; the bytes the cache encoded agree.
		if got := c.Verdict == "nothing compressed"; got != want.nothing || (c.KV.Encoded == 0) != want.nothing {
			t.Errorf("%s: verdict %q with %d encoded bytes, want nothing compressed: %v", want.name, c.Verdict, c.KV.Encoded, want.nothing)
		}
		if want.warning != "" && strings.Count(stderr.String(), want.warning) != 1 {
			t.Errorf("%s: stderr does not warn once with %q:\n%s", want.name, want.warning, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "config hot47") {
		t.Errorf("stderr warns about hot47, which encodes a block:\n%s", stderr.String())
	}
	if n := strings.Count(stdout.String(), "nothing compressed"); n != 2 {
		t.Errorf("table marks %d rows nothing compressed, want 2:\n%s", n, stdout.String())
	}
}
