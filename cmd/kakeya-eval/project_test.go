package main

import (
	"io"
	"strings"
	"testing"
)

// TestProject: the table's ratios, one checked by hand, kakeya-pc's and
// kvtc's synthetic statistics marked, and bad flags refused.
func TestProject(t *testing.T) {
	var out strings.Builder
	args := []string{"--shapes", "2x1x16", "--kv", "int8 kakeya-pc:rate=2 kvtc:rate=2", "--windows", "16:16", "--tokens", "64,1024", "--boundary", "none,0"}
	if err := runProject(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+3*2 {
		t.Fatalf("%d lines, want a header, a rule and 6 rows:\n%s", len(lines), out.String())
	}
	// int8 blocks of 16 x 16: 16 + 2*16 + 256 = 304 bytes against 512 in
	// bf16. At 64 tokens with a hot window of 16, 3 of 4 blocks are coded:
	// 2048 / (3*304 + 512) = 1.44x per layer side; with layer 0 a
	// boundary layer, whose old blocks are bf16 blocks with a header
	// (16 + 512 bytes), 4096 / ((3*528 + 512) + (3*304 + 512)) = 1.16x.
	for _, want := range []string{
		"| 2x1x16 | 2x1x16 | int8 | 16 | 16 | none | 1.44x |",
		"| 2x1x16 | 2x1x16 | int8 | 16 | 16 | 0 | 1.16x |",
		"| kakeya-pc:rate=2 (synthetic) | 16 | 16 | none |",
		"| kvtc:rate=2 (synthetic) | 16 | 16 | none |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	// Mistral's shape, every layer sliding (window 4096) and coded, at
	// 8k tokens: each layer, KV head and side holds blocks 64-127, 63 of
	// them int8 (16 + 256*34 = 8720 bytes) and the newest hot (64 x 128
	// bf16 = 16384 bytes): 512 x (63*8720 + 16384) = 276.2 MiB, against
	// 1 GiB for a bf16 cache of every position (3.71x) or 512 MiB for
	// one of the same window (1.85x).
	for against, want := range map[string]string{
		"all":    "| mistral-7b | 32x8x128 | int8 | 64 | 64 | none | 3.71x (276.2 MiB) |",
		"window": "| mistral-7b | 32x8x128 | int8 | 64 | 64 | none | 1.85x (276.2 MiB) |",
	} {
		out.Reset()
		args := []string{"--shapes", "mistral-7b", "--kv", "int8", "--windows", "64:64", "--tokens", "8192", "--boundary", "none", "--against", against, "--bytes"}
		if err := runProject(args, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("--against %s: no %q in\n%s", against, want, out.String())
		}
	}
	for _, bad := range [][]string{
		{"--against", "some"},
		{"--shapes", "2x1"},
		{"--windows", "16"},
		{"--tokens", "0"},
		{"--tokens", "99999999999999"},             // ran without bound
		{"--shapes", "99999999x99999999x99999999"}, // panicked (makeslice)
		{"--shapes", "2x1x99999999"},               // head_dim^2 floats
		{"--shapes", "99999999x99999999x16"},       // a loop of 1e16 heads
		{"--windows", "99999999999:0"},             // probe blocks of that many tokens
		{"--kv", "nope"},
		{"--calib", "x.safetensors"},
	} {
		if err := runProject(bad, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
