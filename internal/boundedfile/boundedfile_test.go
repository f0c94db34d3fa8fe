package boundedfile

import (
	"strings"
	"testing"
)

// A file past the limit is an error naming it and the limit, read no
// further than the limit (/dev/zero grew memory without bound before); a
// small file reads whole.
func TestRead(t *testing.T) {
	if _, err := Read("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "/dev/zero") || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("/dev/zero: %v", err)
	}
	b, err := Read("boundedfile.go", 1<<20)
	if err != nil || len(b) == 0 {
		t.Errorf("a small file: %d bytes, %v", len(b), err)
	}
}
