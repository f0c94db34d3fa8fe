// Package llamaparity runs llama.cpp on Kakeya's seeded test checkpoints,
// for tests that compare logits and greedy tokens with an independent
// implementation: Convert turns a checkpoint into GGUF with llama.cpp's
// own convert_hf_to_gguf.py (convert.py), Run evaluates it with
// llama-logits (logits.c, linked against llama.cpp's libllama).
//
// llama.cpp is found at $KAKEYA_LLAMA_CPP, else bin/llama.cpp/llama.cpp of
// the module (where make llama-quantize builds it); llama-logits at
// bin/llama-logits (make llama-logits). Where either, or Debian's
// python3-torch and python3-sentencepiece, is missing, the test is skipped
// with one line naming what and the make target: building llama.cpp takes
// many minutes, so make test does not.
package llamaparity

import (
	"bufio"
	"bytes"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Python is the interpreter convert.py runs on (Debian's, with torch,
// numpy and sentencepiece).
const Python = "/usr/bin/python3"

// root returns the module's directory.
func root() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return wd
		}
		dir = up
	}
}

// LlamaCpp returns llama.cpp's source directory.
func LlamaCpp() string {
	if d := os.Getenv("KAKEYA_LLAMA_CPP"); d != "" {
		return d
	}
	return filepath.Join(root(), "bin", "llama.cpp", "llama.cpp")
}

// Need skips t unless llama.cpp's converter, llama-logits and the Python
// modules are there, and returns llama-logits' path.
func Need(t testing.TB) string {
	t.Helper()
	conv := filepath.Join(LlamaCpp(), "convert_hf_to_gguf.py")
	if _, err := os.Stat(conv); err != nil {
		t.Skipf("llama.cpp parity: %s not found (make llama-quantize fetches and builds llama.cpp; KAKEYA_LLAMA_CPP names another)", conv)
	}
	bin := filepath.Join(root(), "bin", "llama-logits")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("llama.cpp parity: %s not found (make llama-logits builds it)", bin)
	}
	if err := exec.Command(Python, "-c", "import torch, numpy, sentencepiece").Run(); err != nil {
		t.Skipf("llama.cpp parity: %s lacks torch, numpy or sentencepiece (apt install python3-torch python3-sentencepiece)", Python)
	}
	return bin
}

//go:embed convert.py
var convertPy []byte

// Convert writes the checkpoint in dir as an F32 GGUF with llama.cpp's
// convert_hf_to_gguf.py, after training a tokenizer for it on text (see
// convert.py), and returns the file's path.
func Convert(t testing.TB, dir, text string) string {
	t.Helper()
	tmp := t.TempDir()
	script := filepath.Join(tmp, "convert.py")
	if err := os.WriteFile(script, convertPy, 0o644); err != nil {
		t.Fatal(err)
	}
	stub := filepath.Join(root(), "internal", "llamaparity", "pystub")
	out := filepath.Join(tmp, filepath.Base(dir)+".gguf")
	cmd := exec.Command(Python, script, LlamaCpp(), dir, text, out)
	cmd.Env = append(os.Environ(), "KAKEYA_PYSTUB="+stub)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("convert_hf_to_gguf.py %s: %v\n%s", dir, err, b)
	}
	return out
}

// Run evaluates ids with llama.cpp (the llama-logits at bin) and returns
// every position's logits, greedy tokens following the prompt, and the
// logits after feeding back each greedy token (decode steps).
func Run(t testing.TB, bin, gguf string, ids []int, greedy int) (logits [][]float32, toks []int, steps [][]float32) {
	t.Helper()
	return RunEvery(t, bin, gguf, ids, greedy, 1, len(ids))
}

// RunEvery is Run with only every every-th position's logits (and the
// last's, and every position's from from on) read from llama.cpp: the
// other rows of logits are nil. A long prompt over a large vocabulary
// would otherwise be gigabytes of text.
func RunEvery(t testing.TB, bin, gguf string, ids []int, greedy, every, from int) (logits [][]float32, toks []int, steps [][]float32) {
	t.Helper()
	args := []string{gguf, strconv.Itoa(greedy)}
	for _, id := range ids {
		args = append(args, strconv.Itoa(id))
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LLAMA_LOGITS_EVERY="+strconv.Itoa(every), "LLAMA_LOGITS_FROM="+strconv.Itoa(from))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama-logits: %v\n%s", err, stderr.Bytes())
	}
	logits = make([][]float32, len(ids))
	rows := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "logits", "step":
			row := make([]float32, len(f)-2)
			for i, s := range f[2:] {
				v, err := strconv.ParseFloat(s, 32)
				if err != nil {
					t.Fatalf("llama-logits: %v", err)
				}
				row[i] = float32(v)
			}
			if f[0] == "logits" {
				i, err := strconv.Atoi(f[1])
				if err != nil || i < 0 || i >= len(ids) || logits[i] != nil {
					t.Fatalf("llama-logits: a row for position %q", f[1])
				}
				logits[i] = row
				rows++
			} else {
				steps = append(steps, row)
			}
		case "greedy":
			for _, s := range f[1:] {
				id, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("llama-logits: %v", err)
				}
				toks = append(toks, id)
			}
		}
	}
	want := 0
	for i := range ids {
		if i%every == 0 || i == len(ids)-1 || i >= from {
			want++
		}
	}
	if rows != want || len(toks) != greedy || len(steps) != greedy {
		t.Fatalf("llama-logits gave %d rows of logits, %d greedy tokens and %d steps, want %d, %d and %d", rows, len(toks), len(steps), want, greedy, greedy)
	}
	return logits, toks, steps
}
