package weights

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config.json and the other JSON files of a model directory past what the
// format can need are an error naming the file, read no further than the
// limit (/dev/zero grew memory without bound before).
func TestReadFileMax(t *testing.T) {
	if _, err := ReadFileMax("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("/dev/zero: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.Symlink("/dev/zero", path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadConfig of /dev/zero: %v", err)
	}
	b, err := ReadFileMax("readfile.go", 1<<20)
	if err != nil || len(b) == 0 {
		t.Errorf("a small file: %d bytes, %v", len(b), err)
	}
}
