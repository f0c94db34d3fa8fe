package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/boundedfile"
)

// A tokenizer.json or tokenizer_config.json past what the format can need
// is an error naming it, read no further than the limit: /dev/zero grew
// memory without bound before.
func TestLoadSizeCap(t *testing.T) {
	if _, err := boundedfile.Read("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("/dev/zero: %v", err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tok := filepath.Join(dir, "tokenizer.json")
			if err := os.WriteFile(tok, []byte(`{}`), 0o644); err != nil {
				t.Fatal(err)
			}
			// A sparse file: its size, not its bytes, is past the cap.
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(maxTokenizerBytes + 1); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if _, err := Load(tok); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "larger than") {
				t.Errorf("Load: %v, want an error naming %s as too large", err, name)
			}
		})
	}
}
