//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package weights

import (
	"fmt"
	"os"
)

// mapFile reads the whole file where we do not use mmap.
func mapFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 8 {
		return nil, fmt.Errorf("file too short for a safetensors header (%d bytes)", len(data))
	}
	return data, nil
}

func unmapFile(data []byte) error { return nil }
