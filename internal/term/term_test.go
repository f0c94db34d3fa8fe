package term

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) || IsTerminal(nil) {
		t.Error("a file, a buffer or nil taken for a terminal")
	}
}
