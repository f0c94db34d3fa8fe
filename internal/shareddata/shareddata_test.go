package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPath(t *testing.T) {
	t.Setenv("KAKEYA_SHARED", "/data/set")
	if got := Path(); got != "/data/set" {
		t.Errorf("with KAKEYA_SHARED: %q", got)
	}
	t.Setenv("KAKEYA_SHARED", "")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// This package sits two levels below the module root.
	want := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(wd))), "shared")
	if got := Path(); got != want {
		t.Errorf("Path() = %q, want %q beside the module root", got, want)
	}
}

func TestAvailableNames(t *testing.T) {
	t.Setenv("KAKEYA_SHARED", t.TempDir())
	if _, err := Available(); err == nil || !os.IsNotExist(err) {
		t.Errorf("empty directory: err = %v, want a missing file", err)
	}
}
