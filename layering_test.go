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
// below the codec; tensor (element types) is at the bottom. Nothing
// reaches back up: model names no backend, the engine no kernel, and
// kernels and codecs no seam. A new package or edge is a decision: add it
// here.
var allowed = map[string][]string{
	// The bottom: element types, then the kernels over them.
	"tensor":           {},
	"kernels/cpu":      {"tensor"},
	"kernels/cuda":     {},
	"kernels/cuda/emu": {"kernels/cuda"},

	// Codecs: pure Go, fast paths in kernels/cpu.
	"codec": {"tensor", "kernels/cpu"},

	// The seam and its backends; attention is the host attention the CPU
	// backend runs.
	"compute":             {"tensor"},
	"attention":           {"compute", "tensor", "codec", "kernels/cpu"},
	"compute/cpubackend":  {"compute", "tensor", "attention", "kernels/cpu"},
	"compute/cudabackend": {"compute", "tensor", "codec", "kernels/cuda"},
	"compute/reference":   {"compute", "tensor"},

	// Above the seam.
	"kvcache":   {"compute", "codec"},
	"weights":   {"tensor", "internal/term", "internal/outfile"},
	"tokenizer": {},
	"model":     {"compute", "kvcache", "weights", "compute/cpubackend"}, // the default backend: to go (issue 23)
	"calibrate": {"model", "codec", "weights", "kvcache", "compute"},
	"eval":      {"kvcache", "internal/outfile"},
	"":          {"model", "calibrate", "tokenizer", "weights", "kvcache", "codec", "compute"},

	"internal/shareddata": {},
	"internal/term":       {},
	"internal/outfile":    {},
	"internal/device":     {"compute", "compute/cudabackend"},
	"internal/testmodel":  {"tensor"},
	"internal/leveltest":  {"kernels/cpu"},
	"internal/cli":        {"kernels/cpu"}, // --version names the CPU kernels
	"internal/clitest":    {},

	// The commands.
	"cmd/kakeya-run":   {"internal/cli", "", "model", "kvcache", "tokenizer", "weights", "compute", "internal/device", "internal/term"},
	"cmd/kakeya-bench": {"internal/cli", "model", "kvcache", "kernels/cpu", "internal/testmodel"},
	"cmd/kakeya-eval":  {"internal/cli", "", "model", "calibrate", "codec", "eval", "kvcache", "tokenizer", "weights", "compute", "internal/device", "internal/term", "internal/outfile"},

	// Developer tools: the GPU report's checkpoint writer.
	"internal/cmd/kakeya-testmodel": {"internal/cli", "internal/testmodel"},
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
		pkg, err := build.ImportDir(path, 0)
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
