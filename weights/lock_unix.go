//go:build linux || darwin || freebsd || netbsd || openbsd

package weights

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on path (created if needed) so
// two processes never append to the same partial download; it blocks until
// the other holder is done.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
