package weights

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedDir locates the read-only shared data set: $KAKEYA_SHARED, else
// ../../shared from this package. A missing data set fails the test unless
// KAKEYA_ALLOW_NO_SHARED=1 asks to skip.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KAKEYA_SHARED")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared")
	}
	if _, err := os.Stat(filepath.Join(dir, "models", "stories260K", "config.json")); err != nil {
		if os.Getenv("KAKEYA_ALLOW_NO_SHARED") == "1" {
			t.Skipf("shared data set not found at %s (KAKEYA_ALLOW_NO_SHARED=1): %v", dir, err)
		}
		t.Fatalf("shared data set not found at %s (set KAKEYA_SHARED, or KAKEYA_ALLOW_NO_SHARED=1 to skip): %v", dir, err)
	}
	return dir
}
