package kakeya_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Every test that needs the shared data set must skip (or, under
// KAKEYA_REQUIRE_SHARED=1, fail) on its own goroutine: shareddata's Skip
// or Fatal called on another goroutine ends that goroutine only, and the
// test then waits for what it never started (TestQueueFull and
// TestRequestTimeout of kakeya-serve each waited 20 s for a server this
// way). TestSharedDataOnTestGoroutine walks every package's test files and
// fails on a go statement that reaches a shareddata lookup: a call of
// shareddata.Dir or File, or of a function of the package that makes one,
// however indirectly.
func TestSharedDataOnTestGoroutine(t *testing.T) {
	pkgs := map[string][]*ast.File{} // test files by directory
	fset := token.NewFileSet()
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
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found the test files of %d packages only: not run from the module root?", len(pkgs))
	}
	for _, files := range pkgs {
		for _, bad := range goroutineLookups(fset, files) {
			t.Errorf("%s: a go statement reaches %s, which skips or fails the test from the wrong goroutine where the shared data set is missing: look the data up before the go statement", bad.pos, bad.call)
		}
	}
}

type lookupUse struct {
	pos  token.Position
	call string
}

// goroutineLookups returns the go statements of files (one package) that
// reach a shareddata lookup.
func goroutineLookups(fset *token.FileSet, files []*ast.File) []lookupUse {
	// The package's functions and methods by name, with their bodies.
	bodies := map[string]*ast.BlockStmt{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				bodies[fd.Name.Name] = fd.Body
			}
		}
	}
	// Those that look the data set up, directly or through another:
	// grown to a fixed point.
	looks := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, body := range bodies {
			if !looks[name] && callsLookup(body, looks) != "" {
				looks[name], changed = true, true
			}
		}
	}
	var out []lookupUse
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			g, ok := n.(*ast.GoStmt)
			if !ok {
				return true
			}
			if call := callsLookup(g.Call, looks); call != "" {
				out = append(out, lookupUse{fset.Position(g.Pos()), call})
			}
			return true
		})
	}
	return out
}

// callsLookup returns the name of the first call under n of
// shareddata.Dir or File or of a function in looks, or "".
func callsLookup(n ast.Node, looks map[string]bool) string {
	found := ""
	ast.Inspect(n, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || found != "" {
			return found == ""
		}
		switch fn := c.Fun.(type) {
		case *ast.Ident:
			if looks[fn.Name] {
				found = fn.Name
			}
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && x.Name == "shareddata" && (fn.Sel.Name == "Dir" || fn.Sel.Name == "File") {
				found = "shareddata." + fn.Sel.Name
			} else if looks[fn.Sel.Name] {
				found = fn.Sel.Name // a method of the package
			}
		}
		return found == ""
	})
	return found
}
