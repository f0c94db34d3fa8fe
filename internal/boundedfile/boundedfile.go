// Package boundedfile reads a file no further than a limit, so that a
// wrong path (/dev/zero, a named pipe, a misnamed file) given where a
// small file of a known format belongs is an error naming it, not memory
// grown without bound. The model loaders (weights, tokenizer) read every
// JSON file through it.
package boundedfile

import (
	"fmt"
	"io"
	"os"
)

// Read reads the file at path as os.ReadFile does, but fails with an
// error naming the file and the limit when it holds more than limit bytes,
// having read at most limit+1 of them.
func Read(path string, limit int64) ([]byte, error) {
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
		return nil, fmt.Errorf("%s: larger than %d bytes, more than the format can need (not the file it should be?)", path, limit)
	}
	return b, nil
}
