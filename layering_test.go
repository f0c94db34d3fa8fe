package kakeya_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kakeya-ai/kakeya"

// allowed lists, for every package of the module (by its path below the
// module, "" for the root), the packages of the module it may import. Data
// flows one way: the commands → the engine (the root package) → model →
// compute, the seam, which the backends implement; the kv cache and the
// codecs sit below model, and a codec's fast paths in a kernel package
// below the codec; the cache's configuration sits beside the codecs,
// knowing no model, and its planning above the cache; tensor (element
// types) is at the bottom. Nothing
// reaches back up: model names no backend, the engine no kernel, and
// kernels and codecs no seam. A new package or edge is a decision: add it
// here.
var allowed = map[string][]string{
	// The bottom: element types, then the kernels over them.
	"tensor": {},
	// The picks every device agrees on over a row of logits (arg max,
	// first non-finite value, the sampled draw): a leaf any package may
	// use.
	"pick":             {"internal/mathx"},
	"kernels/cpu":      {"tensor", "internal/mathx"},
	"kernels/cuda":     {},
	"kernels/cuda/emu": {"kernels/cuda"},

	// Codecs: pure Go, fast paths in kernels/cpu.
	"codec": {"tensor", "kernels/cpu", "pick"},

	// The seam and its backends; attention is the host attention the CPU
	// backend runs.
	"compute":             {"tensor"},
	"attention":           {"compute", "tensor", "codec", "kernels/cpu"},
	"compute/cpubackend":  {"compute", "tensor", "attention", "kernels/cpu"},
	"compute/cudabackend": {"compute", "tensor", "codec", "kernels/cuda"},
	"compute/reference":   {"compute", "tensor"},
	// The conformance suite every backend runs (like testing/fstest): the
	// seam, the codecs whose blocks it encodes and the picks, but no
	// backend (each backend's test calls it).
	"compute/computetest": {"compute", "codec", "tensor", "pick"},

	// The cache's configuration: a value and its grammar, which names
	// codecs and checks their specs, and nothing else.
	"kvcache/kvconfig": {"codec"},

	// Above the seam.
	"kvcache":   {"compute", "codec"},
	"weights":   {"tensor", "internal/term", "internal/outfile", "internal/boundedfile"},
	"tokenizer": {"tokenizer/chattmpl", "internal/boundedfile"},
	// Chat templates: a Jinja engine in transformers' environment.
	"tokenizer/chattmpl": {},
	"model":              {"compute", "kvcache", "weights", "pick", "model/arch", "tensor"}, // tensor: the interleaved layout a backend names for quantize-on-load (compute.Interleaver)
	// The architectures: one file per decoder family, read by the forward pass.
	"model/arch": {"weights"},
	"calibrate":  {"model", "codec", "weights", "kvcache", "compute", "compute/cpubackend"},
	"eval":       {"kvcache/kvconfig", "internal/outfile", "internal/mathx", "pick"},
	// Structured output: JSON Schema compiled to a byte automaton and the
	// token masks it makes over a vocabulary (standard library only).
	"grammar": {},
	// The serving scheduler: continuous batching of many requests over
	// one model and its shared block pool.
	"scheduler": {"model", "kvcache"},
	"":          {"scheduler", "grammar", "model", "pick", "internal/mathx", "internal/boundedfile", "calibrate", "tokenizer", "weights", "kvcache", "kvcache/kvconfig", "kvcache/kvplan", "codec", "compute", "compute/cpubackend"},

	// The cache's planning: a configuration, a model's shape and a
	// calibration make the runtime's policy.
	"kvcache/kvplan": {"kvcache", "kvcache/kvconfig", "codec"},

	"internal/shareddata":  {},
	"internal/ggufdata":    {"internal/shareddata"},
	"internal/llamaparity": {},
	// Tests only: our tokenizer against an independent implementation.
	"internal/tokref": {},
	// The process's CPU time, for benchmarks' per-CPU-second figures.
	"internal/cputime": {},
	// Medians and the like over repeated measurements (the bench tools).
	"internal/stats":   {},
	"internal/term":    {},
	"internal/outfile": {},
	// Exp for hot host loops: math.Exp is slow in a simd build (mathx doc).
	"internal/mathx": {},
	// Reading a small file no further than a limit (the model loaders).
	"internal/boundedfile": {},
	"internal/device":      {"compute", "compute/cpubackend", "compute/cudabackend", "compute/reference", "tensor"}, // the backends imported for their registration (compute.RegisterBackend); tensor for compute.Interleaver's signature
	"internal/testmodel":   {"tensor"},
	"internal/leveltest":   {"kernels/cpu"},
	"internal/cli":         {"kernels/cpu"}, // --version names the CPU kernels
	"internal/clitest":     {},
	// Tests only: the small calibrations the commands' tests write.
	"internal/calibtest": {"calibrate", "codec", "weights"},

	// The cache flags the commands share.
	"internal/kvflags": {"kvcache/kvconfig"},

	// The commands.
	"cmd/kakeya-run":   {"internal/cli", "", "model", "kvcache/kvconfig", "internal/kvflags", "tokenizer", "weights", "compute", "internal/device", "internal/term"},
	"cmd/kakeya-serve": {"internal/cli", "", "model", "scheduler", "kvcache/kvconfig", "internal/kvflags", "tokenizer", "weights", "compute", "internal/device"},
	"cmd/kakeya-bench": {"internal/cli", "", "pick", "scheduler", "codec", "calibrate", "model", "kvcache/kvconfig", "kvcache/kvplan", "internal/kvflags", "compute", "compute/cpubackend", "internal/device", "kernels/cpu", "internal/testmodel", "internal/stats"},
	"cmd/kakeya-eval":  {"internal/cli", "", "model", "calibrate", "codec", "eval", "kvcache", "kvcache/kvconfig", "kvcache/kvplan", "internal/kvflags", "tokenizer", "weights", "compute", "internal/device", "internal/term", "internal/outfile"},

	// Developer tools: the GPU report's checkpoint writer.
	"internal/cmd/kakeya-testmodel": {"internal/cli", "internal/testmodel"},
	// The generator of kernels/cuda/formats.h from the codecs' formats.
	"internal/cmd/kakeya-formats": {"codec", "tensor"},
	// The third evaluation domain's corpus builder (standard library only).
	"internal/cmd/kakeya-godocs": {},
	// The token-id writer for training scripts (internal/gemmatrain).
	"internal/cmd/kakeya-tokids": {"tokenizer"},
}

// forbidden are edges the design rules out, some of which the code once
// had: the model naming a backend, the engine or a codec reaching the seam
// or a kernel it should reach through a backend, kernels above the bottom.
// TestForbiddenEdges keeps them out of allowed.
var forbidden = [][2]string{
	{"model", "compute/cpubackend"},
	{"model", "compute/cudabackend"},
	{"model", "kernels/cpu"},
	{"", "kernels/cpu"},
	{"codec", "compute"},
	{"kernels/cpu", "compute"},
	{"kernels/cuda", "compute"},
	{"kvcache", "model"},
	{"compute", "codec"},
	{"compute", "kvcache"},
	// The scheduler is mechanism over the model and its pool, ordered by
	// a Policy: it reaches no backend, no codec and no calibration.
	{"scheduler", "compute"},
	{"scheduler", "codec"},
	{"scheduler", "calibrate"},
	// The pool's ledger owns the bytes and the scheduler asks it: never
	// the reverse.
	{"kvcache", "scheduler"},
	{"kvcache", "kvcache/kvplan"},
}

// TestBackendEdges: a backend imports no other backend (each registers
// itself with compute and stands alone), and the conformance suite none:
// it checks a backend through the seam only.
func TestBackendEdges(t *testing.T) {
	for _, pkg := range append([]string{"compute/computetest", "compute"}, backends...) {
		for _, b := range backends {
			if pkg != b && slices.Contains(allowed[pkg], b) {
				t.Errorf("layering table lets %q import the backend %q", pkg, b)
			}
		}
	}
}

// backends are the packages that implement compute.Backend; only those
// that choose a device (the engine, calibration, the tools and their
// helpers) may import one.
var backends = []string{"compute/cpubackend", "compute/cudabackend", "compute/reference"}

func TestForbiddenEdges(t *testing.T) {
	for _, e := range forbidden {
		if slices.Contains(allowed[e[0]], e[1]) {
			t.Errorf("layering table allows %q -> %q, which the design rules out", e[0], e[1])
		}
	}
	choosers := []string{"", "calibrate", "internal/device"}
	for pkg, deps := range allowed {
		if strings.HasPrefix(pkg, "cmd/") || slices.Contains(choosers, pkg) {
			continue
		}
		for _, b := range backends {
			if slices.Contains(deps, b) && !strings.HasPrefix(pkg, "compute/") {
				t.Errorf("layering table lets %q import the backend %q: only the engine, calibration and the commands choose a backend", pkg, b)
			}
		}
	}
}

// TestImportLayering checks every package's imports (tests aside) against
// allowed, so that the layering stays as designed.
func TestImportLayering(t *testing.T) {
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
			return filepath.SkipDir
		}
		// Every file counts, whatever its build tags (gpu, arm64, !cgo):
		// an edge in any build is an edge.
		ctx := build.Default
		ctx.UseAllFiles = true
		pkg, err := ctx.ImportDir(path, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(path)
		if rel == "." {
			rel = ""
		}
		seen[rel] = true
		ok, known := allowed[rel]
		if !known {
			t.Errorf("package %q is not in the layering table (layering_test.go): decide what it may import", rel)
			return nil
		}
		for _, imp := range pkg.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if !slices.Contains(ok, dep) {
				t.Errorf("package %q imports %q, which the layering does not allow (layering_test.go)", rel, dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range allowed {
		if !seen[pkg] {
			if _, err := os.Stat(filepath.FromSlash(pkg)); err != nil && pkg != "" {
				t.Errorf("layering table names %q, which does not exist", pkg)
			}
		}
	}
}
