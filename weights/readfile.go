package weights

import (
	"fmt"
	"io"
	"os"
)

// The most bytes the JSON files of a model directory are read to: far past
// what the formats need (config.json and generation_config.json are a few
// KiB, a shard index a few MiB for the largest checkpoints), so that a
// wrong path (/dev/zero, a named pipe, a checkpoint misnamed) is an error
// rather than memory grown without bound.
const (
	MaxConfigBytes = 16 << 20 // config.json, generation_config.json
	MaxIndexBytes  = 64 << 20 // model.safetensors.index.json
	maxRefBytes    = 4 << 10  // a hub cache's refs/REV: one commit hash
)

// ReadFileMax reads the file at path as os.ReadFile does, but fails with an
// error naming the file and the limit when it holds more than limit bytes,
// having read at most limit+1 of them.
func ReadFileMax(path string, limit int64) ([]byte, error) {
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
