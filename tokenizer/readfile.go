package tokenizer

import (
	"fmt"
	"io"
	"os"
)

// The most bytes Load reads of tokenizer.json and tokenizer_config.json:
// several times the largest tokenizers' (a 256k vocabulary with its merges
// is ~35 MB; a config with chat templates well under 1 MB), so that a wrong
// path (/dev/zero, a named pipe) is an error, not memory grown without
// bound.
const (
	maxTokenizerBytes = 256 << 20
	maxConfigBytes    = 32 << 20
)

// readFileMax reads the file at path, failing with an error naming it and
// limit when it holds more than limit bytes (having read limit+1).
func readFileMax(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, larger than %d, more than the format can need (not the file it should be?)", path, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes, more than a tokenizer file can need (not the file it should be?)", path, limit)
	}
	return b, nil
}
