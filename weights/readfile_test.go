package weights

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config.json past what the format can need is an error naming the file,
// read no further than the limit (/dev/zero grew memory without bound
// before).
func TestConfigSizeCap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.Symlink("/dev/zero", path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadConfig of /dev/zero: %v", err)
	}
}
