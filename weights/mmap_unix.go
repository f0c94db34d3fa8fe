//go:build linux || darwin || freebsd || netbsd || openbsd

package weights

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the whole file read-only; the pages are shared with the page
// cache, so a checkpoint costs no heap and loads lazily.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("file too short for a safetensors header (%d bytes)", size)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	adviseHugePages(data)
	return data, nil
}

func unmapFile(data []byte) error {
	if data == nil {
		return nil
	}
	return syscall.Munmap(data)
}
