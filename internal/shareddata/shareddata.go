// Package shareddata locates the read-only shared data set (models,
// reference logits, tokenizer cases, text) that the tests read.
//
// A test that needs the data set asks for it through Dir or File. Where it
// is missing the test is skipped with one line naming the missing path,
// so a checkout without the data set still runs everything else; where
// KAKEYA_REQUIRE_SHARED=1 (as CI sets it) a missing data set fails the test
// instead, so nothing can be skipped silently.
package shareddata

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// RequireEnv names the environment variable that, set to 1, turns a missing
// data set from a skip into a failure.
const RequireEnv = "KAKEYA_REQUIRE_SHARED"

// SkipPrefix opens the one line a test skipped for a missing data set logs.
const SkipPrefix = "shared data set not found: "

// markers are the files whose presence says Path holds the data set.
var markers = [][]string{
	{"models", "stories260K", "config.json"},
	{"reference", "tokenizer_cases.json"},
}

// Path returns where the data set should be: $KAKEYA_SHARED, else shared/
// beside the module root (the nearest directory above the working directory
// that holds go.mod), else ../shared.
func Path() string {
	if dir := os.Getenv("KAKEYA_SHARED"); dir != "" {
		return dir
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return filepath.Join(filepath.Dir(dir), "shared")
			}
			up := filepath.Dir(dir)
			if up == dir {
				break
			}
			dir = up
		}
	}
	return filepath.Join("..", "shared")
}

// Required reports whether the environment demands the data set
// (KAKEYA_REQUIRE_SHARED=1), so that its absence fails rather than skips.
func Required() bool {
	return os.Getenv(RequireEnv) == "1"
}

// Missing returns the first of the given paths under Path that does not
// exist, or "" when all do. Each path is a list of path elements.
func Missing(paths ...[]string) string {
	dir := Path()
	for _, p := range paths {
		name := filepath.Join(append([]string{dir}, p...)...)
		if _, err := os.Stat(name); err != nil {
			return name
		}
	}
	return ""
}

// Message is the one line that reports the data set missing at path.
func Message(path string) string {
	if Required() {
		return fmt.Sprintf("%s%s (%s=1 demands it; set KAKEYA_SHARED to its location)", SkipPrefix, path, RequireEnv)
	}
	return fmt.Sprintf("%s%s (set KAKEYA_SHARED to its location)", SkipPrefix, path)
}

// Dir returns the data set's directory. Without it t is skipped, or fails
// when Required, with one line naming the first missing file.
func Dir(t testing.TB) string {
	t.Helper()
	need(t, markers...)
	return Path()
}

// File returns the path of a file or directory of the data set, elem joined
// under Path, e.g. File(t, "models", "stories260K"). Without it t is skipped,
// or fails when Required, with one line naming that path.
func File(t testing.TB, elem ...string) string {
	t.Helper()
	need(t, elem)
	return filepath.Join(append([]string{Path()}, elem...)...)
}

// need skips or fails t, with Message, when one of paths is missing.
func need(t testing.TB, paths ...[]string) {
	t.Helper()
	name := Missing(paths...)
	if name == "" {
		return
	}
	if Required() {
		t.Fatal(Message(name))
	}
	t.Skip(Message(name))
}

// SkipExamples is for a TestMain, after flag.Parse: Examples cannot skip
// themselves, so where the data set lacks elem it makes go test skip the
// package's Examples (unless -test.skip is already set) and prints Message
// to stderr. When Required it prints Message and skips nothing, so the
// Examples fail. It reports whether it skipped them.
func SkipExamples(elem ...string) bool {
	name := Missing(elem)
	if name == "" {
		return false
	}
	if Required() {
		fmt.Fprintln(os.Stderr, Message(name))
		return false
	}
	f := flag.Lookup("test.skip")
	if f == nil || f.Value.String() != "" {
		return false
	}
	if err := f.Value.Set("^Example"); err != nil {
		return false
	}
	fmt.Fprintln(os.Stderr, Message(name)+": skipping the Examples")
	return true
}
