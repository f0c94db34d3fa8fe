// Package shareddata locates the read-only shared data set (models,
// reference logits, tokenizer cases, text) that the tests read.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

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

// Available reports whether Path holds the data set, and why not.
func Available() (string, error) {
	dir := Path()
	for _, f := range []string{"models/stories260K/config.json", "reference/tokenizer_cases.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return dir, err
		}
	}
	return dir, nil
}

// Dir returns the data set's directory. Without it t fails, or is skipped
// when KAKEYA_ALLOW_NO_SHARED=1 says a missing data set is expected.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := Available()
	if err != nil {
		if os.Getenv("KAKEYA_ALLOW_NO_SHARED") == "1" {
			t.Skipf("shared data set not found at %s (KAKEYA_ALLOW_NO_SHARED=1): %v", dir, err)
		}
		t.Fatalf("shared data set not found at %s (set KAKEYA_SHARED, or KAKEYA_ALLOW_NO_SHARED=1 to skip): %v", dir, err)
	}
	return dir
}
