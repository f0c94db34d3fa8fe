//go:build linux || darwin

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mknodNull makes in dir a character device node with /dev/null's device
// number, skipping the test where that is not allowed.
func mknodNull(t *testing.T, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("making a device node needs root (euid %d)", os.Geteuid())
	}
	fi, err := os.Stat("/dev/null")
	if err != nil {
		t.Skip(err)
	}
	null := filepath.Join(dir, "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, int(fi.Sys().(*syscall.Stat_t).Rdev)); err != nil {
		t.Skipf("mknod %s: %v", null, err)
	}
	return null
}
