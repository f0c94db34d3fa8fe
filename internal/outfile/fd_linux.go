package outfile

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownFD reports whether p, a symbolic link in /proc, is one of this
// process's descriptors (/proc/self/fd/N, as /dev/stdout and /dev/fd/N
// lead to), and which.
func ownFD(p string) (int, bool) {
	dir, err := filepath.Abs(filepath.Dir(p))
	if err != nil {
		return 0, false
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return 0, false
	}
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/"
	own := dir == self+"fd" || strings.HasPrefix(dir, self+"task/") && strings.HasSuffix(dir, "/fd")
	fd, err := strconv.Atoi(filepath.Base(p))
	if !own || err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// fdWritable reports whether descriptor fd was opened for writing.
func fdWritable(fd int) error {
	fl, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if errno != 0 {
		return errno
	}
	if fl&syscall.O_ACCMODE == syscall.O_RDONLY {
		return syscall.EBADF
	}
	return nil
}

// dupFD returns a duplicate of descriptor fd as a file named name; closing
// it leaves fd open.
func dupFD(fd int, name string) (*os.File, error) {
	if err := fdWritable(fd); err != nil {
		return nil, err
	}
	nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, errno
	}
	return os.NewFile(nfd, name), nil
}
