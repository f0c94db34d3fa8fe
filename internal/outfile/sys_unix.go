//go:build unix

package outfile

import "syscall"

// wOK is access(2)'s W_OK, the same on every Unix.
const wOK = 2

// writable reports whether the file at path may be opened for writing,
// without opening it.
func writable(path string) error {
	return syscall.Access(path, wOK)
}
