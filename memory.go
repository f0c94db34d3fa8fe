package kakeya

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// fallbackKVMemory is the KV budget where the available memory cannot be
// read (no /proc/meminfo).
const fallbackKVMemory = 4 << 30

// DefaultKVMemory returns the KV memory Load gives the block pool when
// Options.KVMemory is 0: half of the memory the system reports available
// (MemAvailable of /proc/meminfo), or 4 GiB where it reports none. The
// budget is a ceiling: blocks take memory only as sequences fill them.
func DefaultKVMemory() int64 {
	if n := memAvailable("/proc/meminfo"); n > 0 {
		return n / 2
	}
	return fallbackKVMemory
}

// memAvailable returns MemAvailable of a meminfo file in bytes, 0 if it
// cannot be read.
func memAvailable(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 3 && string(f[0]) == "MemAvailable:" && string(f[2]) == "kB" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil || kb <= 0 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
