package main

import (
	"io"
	"strconv"
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
	// A codec per side (K/V), and kakeya for the preset's: the same
	// bytes as the preset's codecs spelled out, fewer than rate 2.5 on
	// both sides (the keys capped at a quarter of their components, 32 of 128,
	// in codes of at most 5 bits), and
	// int8/int8 is int8.
	out.Reset()
	args = []string{"--shapes", "llama-3-8b", "--kv", "kakeya kakeya-pc:rate=1.3,maxbits=5,codedfrac=0.25/kakeya-pc:rate=2.5 kakeya-pc:rate=2.5 int8/int8 int8",
		"--windows", "64:32", "--tokens", "8192", "--boundary", "none", "--bytes"}
	if err := runProject(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	cells := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[2:] {
		f := strings.Split(line, "|")
		cells[strings.TrimSuffix(strings.TrimSpace(f[3]), " (synthetic)")] = strings.TrimSpace(f[7])
	}
	preset, spelled, pc := cells["kakeya"], cells["kakeya-pc:rate=1.3,maxbits=5,codedfrac=0.25/kakeya-pc:rate=2.5"], cells["kakeya-pc:rate=2.5"]
	ratio := func(c string) float64 {
		v, _ := strconv.ParseFloat(strings.TrimSuffix(strings.Fields(c)[0], "x"), 64)
		return v
	}
	if preset == "" || preset != spelled || !(ratio(preset) > ratio(pc)) || cells["int8/int8"] != cells["int8"] {
		t.Errorf("per-side rows %q (preset), %q (spelled out), %q (rate 2.5), %q (int8/int8), %q (int8):\n%s", preset, spelled, pc, cells["int8/int8"], cells["int8"], out.String())
	}
	// A kakeya-pc spec without block= allocates for the row's block size,
	// as a cache of that block size does (kvplan): at blocks of 32 the
	// same bytes as block=32 written, other bytes than block=64.
	out.Reset()
	args = []string{"--shapes", "llama-3-8b", "--kv", "kakeya-pc:rate=2.5 kakeya-pc:block=32,rate=2.5 kakeya-pc:block=64,rate=2.5",
		"--windows", "32:31", "--tokens", "1023,8192", "--boundary", "none", "--bytes"}
	if err := runProject(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[2:] {
		f := strings.Split(line, "|")
		rows[strings.TrimSuffix(strings.TrimSpace(f[3]), " (synthetic)")] = strings.Join(f[7:], "|")
	}
	if own, b32, b64 := rows["kakeya-pc:rate=2.5"], rows["kakeya-pc:block=32,rate=2.5"], rows["kakeya-pc:block=64,rate=2.5"]; own == "" || own != b32 || own == b64 {
		t.Errorf("blocks of 32: %q (no block=), %q (block=32), %q (block=64):\n%s", own, b32, b64, out.String())
	}
	for _, bad := range [][]string{
		{"--kv", "int8/"},
		{"--kv", "/int8"},
		{"--kv", "int8/nope"},
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
