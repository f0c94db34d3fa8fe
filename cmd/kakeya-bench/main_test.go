package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

func TestTable(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := run(context.Background(), []string{"--model", dir, "--cache", "plain,int8", "--matmul", "f32,bf16", "--threads", "1", "--ctx", "16,80", "--gen", "3", "--reps", "1", "--progress=false"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// Header line, blank, table header, separator, eight rows.
	if len(lines) != 12 {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range []string{
		"| plain | f32 | 1 | 16 |", "| plain | f32 | 1 | 80 |", "| plain | bf16 | 1 | 16 |", "| plain | bf16 | 1 | 80 |",
		"| int8 | f32 | 1 | 16 |", "| int8 | f32 | 1 | 80 |", "| int8 | bf16 | 1 | 16 |", "| int8 | bf16 | 1 | 80 |",
	} {
		if !strings.HasPrefix(lines[4+i], want) {
			t.Errorf("row %d = %q, want it to start with %q", i, lines[4+i], want)
		}
	}
	// A decode step of the two-layer Qwen2 on the CPU asks 37 operations
	// of the seam (the embedding; per layer the norm, three projections
	// and their biases, RoPE, attention, the output projection and its
	// residual add, the norm, gate, up, silu*up, down and its residual
	// add; the final norm and the head), whatever the cache; no driver.
	for l := 4; l < 12; l++ {
		f := strings.Split(lines[l], "|")
		if len(f) < 12 || strings.TrimSpace(f[10]) != "37.0" || strings.TrimSpace(f[11]) != "–" {
			t.Errorf("row %q: ops/step and driver calls/step want 37.0 and –", lines[l])
		}
	}
	// At ctx 80 with 64-token blocks int8 has encoded a block: a ratio is
	// reported against the plain row of the same precision.
	for _, l := range []int{9, 11} {
		if f := strings.Split(lines[l], "|"); len(f) < 10 || !strings.HasSuffix(strings.TrimSpace(f[7]), "x") || !strings.HasSuffix(strings.TrimSpace(f[9]), "x") {
			t.Errorf("int8 ctx 80 row %q lacks its ratios", lines[l])
		}
	}
}

// --boundary keeps the listed layers bf16: on a two-layer model "0,-1"
// keeps every layer, and the whole-cache ratio falls below 1x (the blocks
// a codec would have encoded stay whole, besides the hot window).
func TestBoundary(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	ratio := func(boundary string) float64 {
		var out strings.Builder
		err := run(context.Background(), []string{"--model", dir, "--cache", "int8", "--boundary", boundary, "--threads", "1", "--ctx", "400", "--gen", "1", "--reps", "1", "--warmup=false", "--progress=false"}, &out, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		f := strings.Split(lines[len(lines)-1], "|")
		r, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[9]), "x"), 64)
		if err != nil {
			t.Fatalf("--boundary %s: row %q: %v", boundary, lines[len(lines)-1], err)
		}
		return r
	}
	none, one, both := ratio("none"), ratio("0"), ratio("0,-1")
	if !(none > one && one > both) {
		t.Errorf("KV ratio %.2fx with --boundary none, %.2fx with 0, %.2fx with 0,-1; want them falling", none, one, both)
	}
}

// --perf-ctl writes enable before each timed decode loop and disable
// after it, nothing around the prefills; a path that does not open is an
// error naming the flag.
func TestPerfControl(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, "ctl")
	if err := os.WriteFile(ctl, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--model", dir, "--cache", "plain,int8", "--threads", "1", "--ctx", "20", "--gen", "2", "--reps", "2", "--warmup=false", "--progress=false"}
	if err := run(context.Background(), append(args, "--perf-ctl", ctl), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("enable\ndisable\n", 4); string(got) != want {
		t.Errorf("--perf-ctl wrote %q, want %q", got, want)
	}
	missing := filepath.Join(dir, "none", "ctl")
	if err := run(context.Background(), append(args, "--perf-ctl", missing), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--perf-ctl") {
		t.Errorf("--perf-ctl %s: err = %v, want one naming --perf-ctl", missing, err)
	}
	if err := run(context.Background(), append(args, "--perf-ctl", ctl+","+missing), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--perf-ctl: ack") {
		t.Errorf("--perf-ctl with a missing ack FIFO: err = %v, want one naming --perf-ctl", err)
	}
}

// A list holding ; splits there, and one ; at its end makes a list of a
// single spec holding commas.
func TestParseCaches(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"plain,int8", []string{"plain", "int8"}},
		{"plain;kakeya-pc:rate=2.5,ec=true", []string{"plain", "kakeya-pc:rate=2.5,ec=true"}},
		{"kakeya-pc:rate=1.95,ec=true;", []string{"kakeya-pc:rate=1.95,ec=true"}},
		{"int8;", []string{"int8"}},
	} {
		got, err := parseCaches(tt.in, "none")
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseCaches(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"--cache", "int9"}, "--cache int9"},
		{[]string{"--cache", "plain,,int8"}, "empty entry"},
		{[]string{"--cache", "plain;;int8"}, "empty entry"},
		{[]string{"--cache", ";"}, "empty entry"},
		{[]string{"--cache", "int8;;"}, "empty entry"},
		{[]string{"--cache", "int8,int8"}, "int8 listed twice"},
		{[]string{"--cache", "int8/int9"}, "--cache int8/int9"},
		{[]string{"--cache", "plain;kv=kakeya,block=x"}, "--cache kv=kakeya,block=x"},
		{[]string{"--cache", "plain;kv=kakeya,hot=4,hot=8"}, "hot-window is already set"},
		{[]string{"--boundary", "x"}, "--cache int8"},
		{[]string{"--threads", "0"}, `--threads "0"`},
		{[]string{"--matmul", "fp16"}, `--matmul "fp16": "fp16" is not f32 or bf16`},
		{[]string{"--matmul", "bf16,bf16"}, "bf16 listed twice"},
		{[]string{"--ctx", "x"}, `--ctx "x": "x" is not an integer`},
		{[]string{"--gen", "0"}, "--gen 0 must be >= 1"},
		{[]string{"--reps", "0"}, "--reps 0 must be >= 1"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--device", "cuda", "--threads", "2"}, "--threads applies to --device cpu, not cuda"},
		{[]string{"--device", "cuda", "--matmul", "f32"}, "--matmul applies to --device cpu, not cuda"},
		{[]string{"--device", "tpu"}, `--device "tpu": want one of cpu, cuda, reference, cuda:N`},
	} {
		if err := run(context.Background(), tt.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.err)
		}
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, io.Discard); err != nil {
		t.Errorf("-h: %v", err)
	}
}

// The serving mode sends its requests through the scheduler and reports,
// per level, the prefix cache's share of the prompts exactly: with one
// client, every request after the first finds the shared 16-token block.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := run(context.Background(), []string{"--model", dir, "--cache", "plain,int8", "--threads", "1", "--concurrency", "1,3",
		"--requests", "3", "--prompt-len", "40", "--shared-prefix", "0.5", "--gen", "5", "--kv-memory", "8M", "--json", "--progress=false"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var rows []serveRow
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (2 caches x 2 levels):\n%s", len(rows), out.String())
	}
	for i, r := range rows {
		wantCache, wantC := []string{"plain", "plain", "int8", "int8"}[i], []int{1, 3, 1, 3}[i]
		if r.Cache != wantCache || r.Concurrency != wantC || r.Requests != 3 || r.PromptLen != 40 || r.GenLen != 5 || r.KVMemory != 8<<20 {
			t.Errorf("row %d = %+v, want cache %s, concurrency %d, 3 requests of 40+5 tokens in 8 MiB", i, r, wantCache, wantC)
		}
		if r.DecodeRate <= 0 || r.OutputRate <= 0 || r.TTFTp50 <= 0 || r.TTFTp99 < r.TTFTp50 || r.PeakRunning < 1 || r.PeakRunning > wantC || r.PeakKVMiB <= 0 {
			t.Errorf("row %d has implausible figures: %+v", i, r)
		}
	}
	// One client, plain 16-token blocks: requests 2 and 3 reuse the shared
	// first block of 16 of their 40 tokens. (int8 uses 64-token blocks: no
	// full block is shared.)
	if r := rows[0]; r.HitRate != 2*16/120.0 || r.TTFTCached <= 0 || r.TTFTCold <= 0 || r.PeakRunning != 1 {
		t.Errorf("plain, one client: %+v; want a prefix hit rate of 32/120 with cold and cached TTFTs", r)
	}
	if r := rows[2]; r.HitRate != 0 {
		t.Errorf("int8, one client: prefix hit rate %v, want 0", r.HitRate)
	}
	// At a temperature the requests sample on the host (Next): the row
	// says so, and every request still generates its 5 tokens.
	out.Reset()
	err = run(context.Background(), []string{"--model", dir, "--cache", "plain", "--threads", "1", "--concurrency", "2",
		"--requests", "3", "--prompt-len", "40", "--gen", "5", "--kv-memory", "8M", "--temperature", "1", "--top-p", "0.9", "--top-k", "40", "--json", "--progress=false"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rows = nil
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("--temperature 1 --json output %q: %v", out.String(), err)
	}
	if r := rows[0]; r.Temperature != 1 || r.TopP != 0.9 || r.TopK != 40 || r.OutputRate <= 0 || math.Abs(r.OutputRate*r.Seconds-15) > 1e-6 {
		t.Errorf("--temperature 1 --top-p 0.9 --top-k 40: %+v, want temperature 1, top-p 0.9, top-k 40 and 3 x 5 tokens", r)
	}
	var bad strings.Builder
	for _, args := range [][]string{{"--shared-prefix", "2"}, {"--prompt-len", "0"}, {"--concurrency", "0"}, {"--kv-memory", "x"}, {"--temperature", "-1"}, {"--temperature", "NaN"}, {"--top-p", "1.5"}, {"--top-k", "-1"}} {
		bad.Reset()
		err := run(context.Background(), append([]string{"--model", dir, "--concurrency", "1"}, args...), &bad, io.Discard)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: err = %v, want one naming the flag", args, err)
		}
	}
}

// With --time-limit the serving mode stops where the limit finds it: the
// level running reports what it measured until then (the requests done,
// fewer than sent for; the tokens generated so far; the most admitted at
// once), marked stopped in the table and the JSON, and the levels and
// caches after it do not run; the command returns soon after the limit.
func TestServeTimeLimit(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	const limit = 1500 * time.Millisecond
	args := []string{"--model", dir, "--cache", "plain,int8", "--threads", "1", "--concurrency", "4,8",
		"--requests", "5000", "--prompt-len", "40", "--gen", "64", "--kv-memory", "8M", "--progress=false", "--time-limit", limit.String()}
	for _, asJSON := range []bool{true, false} {
		var out, stderr strings.Builder
		t0 := time.Now()
		a := slices.Clone(args)
		if asJSON {
			a = append(a, "--json")
		}
		if err := run(context.Background(), a, &out, &stderr); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took > limit+5*time.Second {
			t.Errorf("--time-limit %v: the run took %v", limit, took)
		}
		if !asJSON {
			if !strings.Contains(out.String(), "| stopped |") || !strings.Contains(out.String(), "time limit: ") || strings.Count(out.String(), "\n| plain |") != 1 {
				t.Errorf("table:\n%s", out.String())
			}
			continue
		}
		var rows []serveRow
		if err := json.Unmarshal([]byte(out.String()), &rows); err != nil {
			t.Fatalf("--json output %q: %v", out.String(), err)
		}
		if len(rows) != 1 {
			t.Fatalf("%d rows, want 1 (the level the limit stopped; nothing after it):\n%s", len(rows), out.String())
		}
		r := rows[0]
		t.Logf("stopped row: %+v", r)
		// The level's seconds run until the requests in flight see the
		// limit and stop: past it by a step or so, more on a loaded
		// machine (1.512 s at load 12), never by a second.
		if !r.Stopped || r.Done >= r.Requests || r.Requests != 5000 || r.Cache != "plain" || r.Concurrency != 4 ||
			r.OutputRate <= 0 || r.DecodeRate <= 0 || r.PeakRunning < 1 || r.PeakRunning > 4 || r.Seconds <= 0 || r.Seconds > limit.Seconds()+1 {
			t.Errorf("the stopped level: %+v, want plain at 4 clients, stopped, fewer than 5000 done, tokens and admissions measured", r)
		}
		if !strings.Contains(stderr.String(), "stopped at --time-limit") {
			t.Errorf("stderr does not say the level stopped: %q", stderr.String())
		}
	}
	var bad strings.Builder
	if err := run(context.Background(), []string{"--model", dir, "--time-limit", "1s"}, &bad, io.Discard); err == nil || !strings.Contains(err.Error(), "--time-limit") {
		t.Errorf("--time-limit without --concurrency: err = %v, want one naming the flag", err)
	}
}

// TestPresetWithoutCalib: the kakeya preset (and any kakeya-pc cache)
// runs without --calib on a calibration made once per block size on
// random tokens, said on stderr, and compresses; --calib naming a missing
// file is an error naming it.
func TestPresetWithoutCalib(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"--model", dir, "--cache", "kakeya;kakeya-pc:rate=2.5", "--threads", "1", "--ctx", "200",
		"--gen", "3", "--reps", "1", "--warmup=false", "--block-size", "16", "--progress=false"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(errOut.String(), "calibrated on 4096 random tokens"); n != 1 {
		t.Errorf("%d calibration lines, want 1 (one per block size):\n%s", n, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[4], "| kakeya | ") || !strings.HasPrefix(lines[5], "| kakeya-pc:rate=2.5 | ") {
		t.Fatalf("output:\n%s", out.String())
	}
	// Both rows hold encoded kakeya-pc blocks on every layer.
	ratio := func(line string) float64 {
		f := strings.Split(line, "|")
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[9]), "x"), 64)
		if err != nil {
			t.Fatalf("KV ratio of %q: %v", line, err)
		}
		return v
	}
	if p, pc := ratio(lines[4]), ratio(lines[5]); !(p > 1.5 && pc > 1.5) {
		t.Errorf("KV ratios %v (preset) and %v (kakeya-pc), want both compressed", p, pc)
	}
	err = run(context.Background(), []string{"--model", dir, "--cache", "kakeya", "--calib", filepath.Join(dir, "missing.safetensors"), "--threads", "1", "--ctx", "40", "--reps", "1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--calib") || !strings.Contains(err.Error(), "missing.safetensors") {
		t.Errorf("--calib of a missing file: %v", err)
	}
}

// Without --calib, a cache that needs principal components gets the
// automatic calibration of kakeya-run: the same file under --calib-cache
// (made by the first run, read by the next) as kakeya.Load names for the
// model and the preset; an explicit --calib wins and makes none.
func TestCalibrationSharedWithRun(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	cache := t.TempDir()
	bench := func(extra ...string) string {
		t.Helper()
		var stderr strings.Builder
		args := append([]string{"--model", dir, "--cache", "kakeya", "--matmul", "f32", "--threads", "1", "--ctx", "70", "--gen", "2", "--reps", "1", "--warmup=false"}, extra...)
		if err := run(context.Background(), args, io.Discard, &stderr); err != nil {
			t.Fatalf("kakeya-bench %v: %v\n%s", args, err, stderr.String())
		}
		return stderr.String()
	}
	log := bench("--calib-cache", cache)
	files, _ := filepath.Glob(filepath.Join(cache, "*.safetensors"))
	if len(files) != 1 || !strings.Contains(log, "calibration auto: "+files[0]+" (made on the built-in text") {
		t.Fatalf("the calibration cache holds %v after the first run; stderr:\n%s", files, log)
	}
	e, err := kakeya.Load(context.Background(), dir, kakeya.Options{Cache: kvconfig.Spec{KV: "kakeya"}, CalibrationCache: cache, KVMemory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	info := e.CalibrationInfo()
	e.Close()
	if info.Path != files[0] || info.Made {
		t.Errorf("kakeya.Load's calibration %+v, want the file kakeya-bench made, %s, read", info, files[0])
	}
	if log := bench("--calib-cache", cache); !strings.Contains(log, "calibration auto: "+files[0]+"\n") {
		t.Errorf("second run did not read the cached file; stderr:\n%s", log)
	}
	empty := t.TempDir()
	log = bench("--calib-cache", empty, "--calib", files[0])
	if again, _ := filepath.Glob(filepath.Join(empty, "*")); len(again) != 0 || strings.Contains(log, "calibration auto") {
		t.Errorf("with --calib the calibration cache holds %v; stderr:\n%s", again, log)
	}
}

// A --cache entry is plain, a codec spec, K/V codec specs, or settings in
// kvconfig's grammar; --boundary, --block-size and --hot-window fill what
// it leaves unset.
func TestCacheSpec(t *testing.T) {
	for _, tt := range []struct {
		cache, boundary string
		block, hot      int
		want            kvconfig.Spec
	}{
		{"plain", "none", 32, 32, kvconfig.Spec{}},
		{"int8", "none", 0, 0, kvconfig.Spec{KV: "int8", Boundary: "none"}},
		{"int8", "none", 0, 32, kvconfig.Spec{KV: "int8", Boundary: "none", HotWindow: 32}},
		{"kakeya", "none", 0, -1, kvconfig.Spec{KV: "kakeya", Boundary: "none", HotWindow: -1}},
		{"kakeya-pc:rate=2.5,coded=16", "", 32, 32, kvconfig.Spec{KV: "kakeya-pc:rate=2.5,coded=16", BlockSize: 32, HotWindow: 32}},
		{"kakeya-pc:coded=8/kakeya-pc", "none", 0, 32, kvconfig.Spec{K: "kakeya-pc:coded=8", V: "kakeya-pc", Boundary: "none", HotWindow: 32}},
		{"kv=kakeya,block=32,hot=16", "none", 64, 32, kvconfig.Spec{KV: "kakeya", BlockSize: 32, HotWindow: 16, Boundary: "none"}},
		{"kv=int8,block=32", "none", 64, 48, kvconfig.Spec{KV: "int8", BlockSize: 32, HotWindow: 48, Boundary: "none"}},
		{"k=kakeya-pc:codedfrac=0.25,rate=2.5,v=kakeya-pc:rate=2.3,hot=0,boundary=0", "none", 32, 32,
			kvconfig.Spec{K: "kakeya-pc:codedfrac=0.25,rate=2.5", V: "kakeya-pc:rate=2.3", HotWindow: -1, Boundary: "0", BlockSize: 32}},
	} {
		got, err := cacheSpec(tt.cache, tt.boundary, tt.block, tt.hot)
		if err != nil || got != tt.want {
			t.Errorf("cacheSpec(%q, %q, %d, %d) = %+v, %v; want %+v", tt.cache, tt.boundary, tt.block, tt.hot, got, err, tt.want)
		}
	}
}

// Every compressed row takes --hot-window (32 by default, the kakeya
// preset's) unless its entry sets hot=, and the table says each row's
// window and the blocks a layer side encodes during the decode steps: at
// ctx 200 and 40 generated tokens in blocks of 64, a window of 32 encodes
// block 2 (tokens 128-191) at token 224, inside the run (1); a window of
// 64 encodes it at token 256, a window of 8 or none in the prefill (0).
// The cache holds what the column says: with blocks 0-2 encoded at the
// end where a window of 64 leaves block 2 bf16, the KV ratio is higher.
func TestHotWindow(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	table := func(args ...string) map[string][]string {
		t.Helper()
		var out strings.Builder
		err := run(context.Background(), append([]string{"--model", dir, "--threads", "1", "--ctx", "200", "--gen", "40", "--reps", "1", "--warmup=false", "--progress=false"}, args...), &out, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string][]string{}
		for _, l := range strings.Split(out.String(), "\n") {
			if f := strings.Split(l, "|"); len(f) == 15 && !strings.Contains(l, "---") {
				rows[strings.TrimSpace(f[1])] = f
			}
		}
		return rows
	}
	ratio := func(f []string) float64 {
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[9]), "x"), 64)
		if err != nil {
			t.Fatalf("KV ratio of %q: %v", f, err)
		}
		return v
	}
	for _, tt := range []struct {
		args     []string
		want     map[string][2]string // hot, encodes/run
		ratioLow string               // a row whose ratio is below ratioHigh's
		ratioHi  string
	}{
		{[]string{"--cache", "plain;int8;kv=int8,hot=64;kv=int8,hot=8"},
			map[string][2]string{"plain": {"–", "–"}, "int8": {"32", "1"}, "kv=int8,hot=64": {"64", "0"}, "kv=int8,hot=8": {"8", "0"}},
			"kv=int8,hot=64", "int8"},
		{[]string{"--cache", "int8;kv=int8,hot=64", "--hot-window", "0"},
			map[string][2]string{"int8": {"0", "0"}, "kv=int8,hot=64": {"64", "0"}},
			"kv=int8,hot=64", "int8"},
	} {
		rows := table(tt.args...)
		for name, want := range tt.want {
			f, ok := rows[name]
			if !ok {
				t.Fatalf("%v: no row %s in %v", tt.args, name, rows)
			}
			if got := [2]string{strings.TrimSpace(f[12]), strings.TrimSpace(f[13])}; got != want {
				t.Errorf("%v: row %s: hot and encodes/run %q, want %q", tt.args, name, got, want)
			}
		}
		if lo, hi := ratio(rows[tt.ratioLow]), ratio(rows[tt.ratioHi]); !(lo < hi) {
			t.Errorf("%v: KV ratio %v for %s, %v for %s; want the first lower", tt.args, lo, tt.ratioLow, hi, tt.ratioHi)
		}
	}
	if err := run(context.Background(), []string{"--hot-window", "-1"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--hot-window -1") {
		t.Errorf("--hot-window -1: err = %v, want one naming the flag", err)
	}
}
