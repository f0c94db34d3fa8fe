// Package outfile writes the files the tools produce without destroying
// what is at their paths.
//
// A regular file, new or old, is replaced atomically: the data goes to a
// synced temporary file in the same directory, which is then renamed over
// it, so readers see the old file or the whole new one and a failed write
// leaves the old file untouched. A symbolic link is followed and the file
// it points to is replaced (or created, when the link dangles); the link
// stays a link. A character device or a FIFO, such as a terminal or a
// named pipe, is written in place, and so is a descriptor of the process
// reached through /proc, such as /dev/stdout (at its offset, where the
// process's own next write goes). A directory, a socket, a block device or
// anything else is refused.
//
// Check tells before a long run whether its output can be written, so that
// a bad path fails at the start rather than at the end.
package outfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxLinks bounds the symbolic links followed to a target, as the
// kernel's ELOOP limit does.
const maxLinks = 40

// newPerm is the permission of a file that did not exist before.
const newPerm fs.FileMode = 0o644

// target is where Write puts the data for a path.
type target struct {
	path    string      // the file to replace or create, or to write in place
	inPlace bool        // open path and write into it, no rename
	flag    int         // extra open flags when in place
	perm    fs.FileMode // permission of the replacement file
	dup     bool        // in place: write into a duplicate of descriptor fd
	fd      int         // the process's descriptor that path stands for
}

// Check reports whether Write could write path, without writing or
// leaving anything there. A file to be replaced or created needs a
// directory that accepts a new file, which Check tests by creating and
// removing an empty one; a device or FIFO needs write permission, which it
// tests with access(2), without opening it (opening a FIFO waits for a
// reader); a descriptor such as /dev/stdout must be open for writing.
func Check(path string) error {
	t, err := resolve(path)
	if err != nil {
		return err
	}
	switch {
	case t.dup:
		if err := fdWritable(t.fd); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		return nil
	case t.inPlace:
		if err := writable(t.path); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		return nil
	}
	dir := filepath.Dir(t.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(t.path)+".check*")
	if err != nil {
		return dirError(path, dir, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// IsInPlace reports whether Write writes path in place, as it does a
// character device, a FIFO or an open file reached through /proc (such as
// /dev/stdout), rather than creating or replacing a file there. Files that
// belong beside the output, like a plot beside a report, make sense only
// when it is false.
func IsInPlace(path string) bool {
	t, err := resolve(path)
	return err == nil && t.inPlace
}

// WriteFile writes data to path as Write does.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes what fill writes to path. A regular file (or the one a
// symbolic link points to) is replaced atomically and synced, keeping its
// permission bits; a new file gets mode 0644. When fill or anything after
// it fails, the temporary file is removed and the old file is left as it
// was. A device or FIFO is written in place, so what fill wrote before an
// error has gone out.
func Write(path string, fill func(io.Writer) error) error {
	t, err := resolve(path)
	if err != nil {
		return err
	}
	if t.inPlace {
		return writeInPlace(path, t, fill)
	}
	return replace(path, t, fill)
}

// resolve follows the symbolic links at path and says what Write does
// there.
func resolve(path string) (target, error) {
	if path == "" {
		return target{}, errors.New("no output path given")
	}
	p := path
	for range maxLinks {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) && inProc(p):
			// /dev/stdout with stdout closed: not a file to create.
			return target{}, fmt.Errorf("cannot write %s: %w", path, err)
		case errors.Is(err, fs.ErrNotExist):
			return target{path: p, perm: newPerm}, nil
		case err != nil:
			return target{}, fmt.Errorf("cannot write %s: %w", path, err)
		case fi.Mode()&fs.ModeSymlink == 0:
			return classify(path, p, fi)
		case inProc(p):
			return resolveProc(path, p)
		}
		dest, err := os.Readlink(p)
		if err != nil {
			return target{}, fmt.Errorf("cannot write %s: %w", path, err)
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(p), dest)
		}
		p = dest
	}
	return target{}, fmt.Errorf("cannot write %s: more than %d symbolic links", path, maxLinks)
}

// resolveProc says what Write does with p, a symbolic link in /proc that
// path leads to. Such a link (/dev/stdout is /proc/self/fd/1) stands for
// an open file, which its text may not name: only the kernel can follow
// it, and what it reaches is written in place.
func resolveProc(path, p string) (target, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return target{}, fmt.Errorf("cannot write %s: %w", path, err)
	}
	t, err := classify(path, p, fi)
	if fd, ok := ownFD(p); ok && (err == nil || fi.Mode()&fs.ModeSocket != 0) {
		// A descriptor of this process, such as stdout: write into it,
		// at its offset, as its owner would (and as /dev/fd does on
		// other systems); reopening a regular file would write over
		// what the process has written there.
		return target{path: p, inPlace: true, dup: true, fd: fd}, nil
	}
	if err != nil || t.inPlace {
		return t, err
	}
	// Another process's open file: add to it rather than replace it.
	return target{path: p, inPlace: true, flag: os.O_APPEND}, nil
}

// classify says what Write does with the existing file p that path leads
// to.
func classify(path, p string, fi fs.FileInfo) (target, error) {
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return target{path: p, perm: m.Perm()}, nil
	case m&fs.ModeCharDevice != 0, m&fs.ModeNamedPipe != 0:
		return target{path: p, inPlace: true}, nil
	}
	what := "not a regular file, character device or FIFO"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a block device"
	}
	if p != path {
		return target{}, fmt.Errorf("cannot write %s: it leads to %s, which is %s", path, p, what)
	}
	return target{}, fmt.Errorf("cannot write %s: it is %s", path, what)
}

// inProc reports whether p lies in /proc, whose symbolic links stand for
// open files rather than paths.
func inProc(p string) bool {
	dir, err := filepath.Abs(filepath.Dir(p))
	if err != nil {
		return false
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return dir == "/proc" || strings.HasPrefix(dir, "/proc/")
}

// replace writes a temporary file beside t.path with fill, syncs it and
// renames it over t.path.
func replace(path string, t target, fill func(io.Writer) error) (err error) {
	dir := filepath.Dir(t.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(t.path)+".tmp*")
	if err != nil {
		return dirError(path, dir, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 64<<10)
	if err = fill(w); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Chmod(t.perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp, t.path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}

// writeInPlace opens the existing t.path for writing and writes into it
// with fill.
func writeInPlace(path string, t target, fill func(io.Writer) error) error {
	var f *os.File
	var err error
	if t.dup {
		f, err = dupFD(t.fd, t.path)
	} else {
		f, err = os.OpenFile(t.path, os.O_WRONLY|t.flag, 0)
	}
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// dirError explains a failure to create a file in dir, the directory of
// path; the temporary file's name would mean nothing to the user.
func dirError(path, dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cannot write %s: directory %s: %w", path, dir, err)
}

// syncDir makes a rename durable where the platform allows; failure only
// weakens durability, never correctness, so it is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
