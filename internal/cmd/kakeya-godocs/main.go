// Command kakeya-godocs writes an evaluation text the calibrations and
// ref-qwen2-6m never saw: the package documentation of the Go standard
// library on this machine (the doc comment of each package under
// $(go env GOROOT)/src, outside cmd/, internal/, vendor/ and testdata/), as
// plain prose, one package a paragraph group, packages in import-path
// order:
//
//	go run ./internal/cmd/kakeya-godocs -o /tmp/godocs.txt
//
// (make godocs-corpus). Go's documentation is under Go's BSD-style licence
// ($(go env GOROOT)/LICENSE), which allows this use; the text is built
// into a temporary file for kakeya-eval ppl and never committed. Its
// SHA-256 depends on the Go release, which the summary line names.
package main

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

func main() {
	out := flag.String("o", "", "the text file to write (required)")
	root := flag.String("goroot", runtime.GOROOT(), "the Go tree whose src/ is read")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: kakeya-godocs -o FILE [-goroot DIR]")
		os.Exit(2)
	}
	text, pkgs, err := corpus(filepath.Join(*root, "src"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kakeya-godocs: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, text, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "kakeya-godocs: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d packages, %d bytes, sha256 %x (%s)\n", *out, pkgs, len(text), sha256.Sum256(text), runtime.Version())
}

// corpus returns the package doc comments of the standard library under
// src and how many packages have one.
func corpus(src string) ([]byte, int, error) {
	var dirs []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(src, path)
		switch base := d.Name(); {
		case rel == "cmd", base == "internal", base == "vendor", base == "testdata", strings.HasPrefix(base, "."), strings.HasPrefix(base, "_"):
			return filepath.SkipDir
		}
		if rel != "." {
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", src, err)
	}
	slices.Sort(dirs)
	var buf bytes.Buffer
	n := 0
	for _, dir := range dirs {
		doc, err := packageDoc(filepath.Join(src, dir))
		if err != nil {
			return nil, 0, err
		}
		if doc == "" {
			continue
		}
		buf.WriteString(doc)
		buf.WriteString("\n\n")
		n++
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("%s: no package documentation found (is it a Go tree's src?)", src)
	}
	return buf.Bytes(), n, nil
}

// packageDoc returns the doc comment of the package in dir, from doc.go
// when it has one, else from the first file (by name) with one; "" when
// none has.
func packageDoc(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, name)
		}
	}
	slices.SortFunc(files, func(a, b string) int {
		if (a == "doc.go") != (b == "doc.go") {
			if a == "doc.go" {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		if doc := docText(f); doc != "" {
			return doc, nil
		}
	}
	return "", nil
}

// docText is the package's doc comment as text, trimmed; "" for a main
// package or none.
func docText(f *ast.File) string {
	if f.Doc == nil || f.Name.Name == "main" {
		return ""
	}
	return strings.TrimSpace(f.Doc.Text())
}
