package kakeya_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExampleImports: an example is what a program would write, so the
// files holding Example functions import no internal package (which a
// program outside the module cannot), and the engine's examples nothing
// of the module but the engine and the cache configuration it takes.
func TestExampleImports(t *testing.T) {
	rootAllowed := map[string]bool{module: true, module + "/kvcache/kvconfig": true}
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		examples := false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
				examples = true
			}
		}
		if !examples {
			return nil
		}
		found++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal") {
				t.Errorf("%s: an example imports the internal package %s", path, p)
			}
			if filepath.Dir(path) == "." && strings.HasPrefix(p, module) && !rootAllowed[p] {
				t.Errorf("%s: an engine example imports %s: a program needs only the kakeya package (and kvconfig for its cache)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 2 {
		t.Errorf("found %d files of examples, want at least the engine's and the model's", found)
	}
}
