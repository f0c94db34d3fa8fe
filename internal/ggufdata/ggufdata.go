// Package ggufdata converts the shared data set's models to GGUF for the
// tests, with ../shared/tools/st2gguf.py and llama.cpp's gguf-py (which
// make gguf-py, a prerequisite of make test, puts in bin/gguf-py): the
// files come from llama.cpp's own writer, not from ours.
//
// Where python3, numpy or gguf-py is missing the test is skipped with one
// line naming what is missing, or fails where KAKEYA_REQUIRE_SHARED=1 (as
// CI sets it), like a missing data set.
package ggufdata

import (
	"bytes"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// Python is the interpreter st2gguf.py runs on (Debian's, with numpy).
const Python = "/usr/bin/python3"

// PyPath returns the gguf-py directory: $KAKEYA_GGUF_PY, else bin/gguf-py
// of the module.
func PyPath() string {
	if dir := os.Getenv("KAKEYA_GGUF_PY"); dir != "" {
		return dir
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return filepath.Join(dir, "bin", "gguf-py")
			}
			up := filepath.Dir(dir)
			if up == dir {
				break
			}
			dir = up
		}
	}
	return filepath.Join("bin", "gguf-py")
}

// unavailable skips or fails t for a missing tool.
func unavailable(t testing.TB, what string) {
	t.Helper()
	msg := "GGUF converter not available: " + what + " (make gguf-py installs it)"
	if shareddata.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Convert writes the shared model (a directory under models/) as GGUF with
// st2gguf.py's outtype ("native" keeps BF16/F32, "f16" converts BF16 to
// F16) into a temporary directory of t and returns the file's path.
func Convert(t testing.TB, model, outtype string) string {
	t.Helper()
	src := shareddata.File(t, "models", model)
	tool := shareddata.File(t, "tools", "st2gguf.py")
	py := PyPath()
	if _, err := os.Stat(filepath.Join(py, "gguf", "__init__.py")); err != nil {
		unavailable(t, "gguf-py at "+py)
	}
	if err := exec.Command(Python, "-c", "import numpy").Run(); err != nil {
		unavailable(t, Python+" with numpy")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, model+"-"+outtype+".gguf")
	run(t, py, tool, src, out, outtype)
	// As convert_hf_to_gguf.py does, the chat template of
	// tokenizer_config.json goes into tokenizer.chat_template.
	cfg := filepath.Join(src, "tokenizer_config.json")
	if b, err := os.ReadFile(cfg); err == nil && bytes.Contains(b, []byte(`"chat_template"`)) {
		tmp := filepath.Join(dir, "no-template.gguf")
		if err := os.Rename(out, tmp); err != nil {
			t.Fatal(err)
		}
		run(t, py, filepath.Join(py, "gguf", "scripts", "gguf_new_metadata.py"), tmp, out, "--chat-template-config", cfg, "--force")
		os.Remove(tmp)
	}
	return out
}

// run runs a Python script of gguf-py or st2gguf.py.
func run(t testing.TB, py string, args ...string) {
	t.Helper()
	cmd := exec.Command(Python, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+py)
	if b, err := cmd.CombinedOutput(); err != nil {
		name := filepath.Base(args[0])
		if args[0] == "-c" {
			name = "quantize.py"
		}
		t.Fatalf("%s: %v\n%s", name, err, b)
	}
}

//go:embed quantize.py
var quantizePy string

// Quantize writes src (a GGUF) again with its 2-D weight matrices
// quantized to typ ("Q8_0" or "Q4_0") by gguf-py's quantizer, into a
// temporary directory of t, and returns the new file's path.
func Quantize(t testing.TB, src, typ string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), typ+".gguf")
	run(t, PyPath(), "-c", quantizePy, src, out, typ)
	return out
}

// EnvLlamaBin names the directory of llama.cpp's binaries (llama-quantize,
// llama-simple, llama-perplexity, llama-bench) the side-by-side tests run,
// e.g. /work/llamacpp/llama.cpp/build/bin; unset, the tests look where make
// llama-quantize builds them (LlamaBinDefault).
const EnvLlamaBin = "KAKEYA_LLAMA_BIN"

// LlamaBinDefault is where make llama-quantize builds llama.cpp's binaries
// (../shared/tools/llama-cpp.sh into bin/llama.cpp), relative to the
// module root.
const LlamaBinDefault = "bin/llama.cpp/llama.cpp/build/bin"

// LlamaTool returns the path of one of llama.cpp's binaries: in
// $KAKEYA_LLAMA_BIN, else in LlamaBinDefault under the module root.
// $KAKEYA_LLAMA_QUANTIZE, where set, names llama-quantize itself.
func LlamaTool(name string) string {
	if p := os.Getenv("KAKEYA_LLAMA_QUANTIZE"); p != "" && name == "llama-quantize" {
		return p
	}
	if dir := os.Getenv(EnvLlamaBin); dir != "" {
		return filepath.Join(dir, name)
	}
	return filepath.Join(filepath.Dir(PyPath()), "..", LlamaBinDefault, name)
}

// LlamaQuantizePath returns llama.cpp's llama-quantize (see LlamaTool).
func LlamaQuantizePath() string { return LlamaTool("llama-quantize") }

// LlamaQuantize quantizes src (a GGUF) with llama.cpp's own llama-quantize
// to typ (its names: "Q8_0", "Q4_K_M", "Q5_K_M", ...), into a temporary
// directory of t. Building llama.cpp takes many minutes, so make test does
// not: where llama-quantize is missing the test is skipped, saying so
// (make llama-quantize builds it).
// Flags (e.g. "--pure") go before the file names.
func LlamaQuantize(t testing.TB, src, typ string, flags ...string) string {
	t.Helper()
	bin := NeedLlamaTool(t, "llama-quantize")
	out := filepath.Join(t.TempDir(), typ+".gguf")
	if b, err := exec.Command(bin, append(flags, src, out, typ)...).CombinedOutput(); err != nil {
		t.Fatalf("llama-quantize %s: %v\n%s", typ, err, b)
	}
	return out
}

// NeedLlamaQuantize returns llama-quantize's path, or skips t saying it is
// missing.
func NeedLlamaQuantize(t testing.TB) string {
	t.Helper()
	return NeedLlamaTool(t, "llama-quantize")
}

// NeedLlamaTool returns the path of llama.cpp's binary name (LlamaTool), or
// skips t saying where it looked: llama.cpp takes many minutes to build, so
// make test does not build it, and CI need not have it.
func NeedLlamaTool(t testing.TB, name string) string {
	t.Helper()
	bin := LlamaTool(name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not found at %s (make llama-quantize builds llama.cpp's tools there; $%s names a directory of them)", name, bin, EnvLlamaBin)
	}
	return bin
}

// SetSpecialIDs writes src (a GGUF) again with the special token ids given
// (gguf-py's names: "bos", "eos", ...), by gguf-py's gguf_new_metadata.py,
// into a temporary directory of t, and returns the new file's path.
// st2gguf.py writes Qwen2's ids of the full-size vocabulary (151643) into
// ref-qwen2-6m's 4096-token file: Kakeya then finds the end token by its
// text, llama.cpp falls back to another token, so the side-by-side tests
// set them first.
func SetSpecialIDs(t testing.TB, src string, ids map[string]int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "special-"+filepath.Base(src))
	args := []string{filepath.Join(PyPath(), "gguf", "scripts", "gguf_new_metadata.py"), src, out}
	for _, name := range []string{"bos", "eos", "eot", "padding", "unknown"} {
		if id, ok := ids[name]; ok {
			args = append(args, "--special-token-by-id", name, strconv.Itoa(id))
		}
	}
	run(t, PyPath(), append(args, "--force")...)
	return out
}
