package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// parseLogits parses the dump layout: per line an id then the logits.
func parseLogits(t *testing.T, text string) (ids []int, rows [][]float64) {
	t.Helper()
	for n, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fs := strings.Fields(line)
		id, err := strconv.Atoi(fs[0])
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		row := make([]float64, len(fs)-1)
		for i, f := range fs[1:] {
			if row[i], err = strconv.ParseFloat(f, 64); err != nil {
				t.Fatalf("line %d: %v", n+1, err)
			}
		}
		ids, rows = append(ids, id), append(rows, row)
	}
	return ids, rows
}

func TestLogitsMatchesReference(t *testing.T) {
	ref, err := os.ReadFile(shareddata.File(t, "reference", "stories260K_runc_logits.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, want := parseLogits(t, string(ref))
	var list []string
	for _, id := range wantIDs {
		list = append(list, strconv.Itoa(id))
	}
	for _, step := range []bool{false, true} {
		args := []string{"--model", shareddata.File(t, "models", "stories260K"), "--ids", strings.Join(list, ","), "--threads", "2"}
		if step {
			args = append(args, "--step")
		}
		var out, errb bytes.Buffer
		if err := runLogits(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("step=%v: %v (stderr %q)", step, err, errb.String())
		}
		ids, got := parseLogits(t, out.String())
		if len(ids) != len(wantIDs) {
			t.Fatalf("step=%v: %d lines, want %d", step, len(ids), len(wantIDs))
		}
		var worst float64
		for p := range ids {
			if ids[p] != wantIDs[p] || len(got[p]) != len(want[p]) {
				t.Fatalf("step=%v: line %d: id %d with %d logits, want id %d with %d", step, p, ids[p], len(got[p]), wantIDs[p], len(want[p]))
			}
			for i := range got[p] {
				worst = math.Max(worst, math.Abs(got[p][i]-want[p][i]))
			}
		}
		if worst > 1e-3 {
			t.Errorf("step=%v: max abs error vs llama2.c %.3g, want <= 1e-3", step, worst)
		}
	}
}

// --model also takes a Hugging Face id, found offline in the HF cache.
func TestLogitsFromHubCache(t *testing.T) {
	src := shareddata.File(t, "models", "stories260K")
	cache := t.TempDir()
	const commit = "0123456789abcdef0123456789abcdef01234567"
	repo := filepath.Join(cache, "models--test-org--stories260K")
	snap := filepath.Join(repo, "snapshots", commit)
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(snap, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "1")
	var byID, byDir bytes.Buffer
	if err := runLogits(context.Background(), []string{"--model", "test-org/stories260K", "--ids", "1,403,407"}, &byID, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := runLogits(context.Background(), []string{"--model", src, "--ids", "1,403,407"}, &byDir, io.Discard); err != nil {
		t.Fatal(err)
	}
	if byID.Len() == 0 || byID.String() != byDir.String() {
		t.Errorf("logits by id differ from logits by directory")
	}
	err := runLogits(context.Background(), []string{"--model", "test-org/absent", "--ids", "1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "offline") {
		t.Errorf("absent repo offline: err = %v", err)
	}
}

func TestLogitsBadFlags(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"--ids", "1,2"}, "--model"},
		{"no ids", []string{"--model", dir}, "no token ids"},
		{"not an integer", []string{"--model", dir, "--ids", "1,x,3"}, `"x"`},
		{"negative", []string{"--model", dir, "--ids", "1,-4"}, "negative"},
		{"beyond vocab", []string{"--model", dir, "--ids", "1,512"}, "512"},
		{"bad model dir", []string{"--model", filepath.Join(t.TempDir(), "none"), "--ids", "1"}, "none does not exist"},
		{"directory without config", []string{"--model", t.TempDir(), "--ids", "1"}, "config.json"},
		{"unknown flag", []string{"--bogus"}, "bogus"},
		{"negative threads", []string{"--model", dir, "--ids", "1", "--threads", "-2"}, "--threads -2: want 0 (GOMAXPROCS) to"},
		{"too many threads", []string{"--model", dir, "--ids", "1", "--threads", "100000"}, "--threads 100000: want 0 (GOMAXPROCS) to"},
		{"unknown device", []string{"--model", dir, "--ids", "1", "--device", "tpu"}, `logits: --device "tpu": want one of cpu, cuda`},
		{"unknown matmul", []string{"--model", dir, "--ids", "1", "--matmul", "fp16"}, `logits: --matmul "fp16": want f32 or bf16`},
		{"extra argument", []string{"--model", dir, "--ids", "1", "2"}, `unexpected argument "2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runLogits(context.Background(), tc.args, &out, &errb)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
