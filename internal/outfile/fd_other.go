//go:build !linux

package outfile

import (
	"errors"
	"os"
)

// ownFD reports false: only Linux's /proc links stand for descriptors that
// must not be reopened (elsewhere opening /dev/fd/N duplicates N).
func ownFD(string) (int, bool) { return 0, false }

// fdWritable is never called where ownFD reports false.
func fdWritable(int) error { return errors.ErrUnsupported }

// dupFD is never called where ownFD reports false.
func dupFD(int, string) (*os.File, error) { return nil, errors.ErrUnsupported }
