//go:build linux || darwin

package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test when it takes longer than d: a write
// to a FIFO without a reader would otherwise hang the test.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// rdev returns the device number of the device node at path.
func rdev(t *testing.T, path string) (int, fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Rdev), fi.Mode()
}

// cloneDevice makes a character device node in dir with the device
// number of the system's node sys (/dev/null, /dev/full), so that the
// test never writes near the real one.
func cloneDevice(t *testing.T, sys, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("making a device node needs root (euid %d)", os.Geteuid())
	}
	if _, err := os.Stat(sys); err != nil {
		t.Skipf("no %s here: %v", sys, err)
	}
	dev, _ := rdev(t, sys)
	p := filepath.Join(dir, filepath.Base(sys))
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, dev); err != nil {
		t.Skipf("mknod %s: %v (no device nodes on this file system?)", p, err)
	}
	return p
}

// isDevice asserts the node at path is still the character device dev.
func isDevice(t *testing.T, path string, dev int) {
	t.Helper()
	got, mode := rdev(t, path)
	if mode&fs.ModeCharDevice == 0 || got != dev {
		t.Errorf("%s is now %v (device %#x), want character device %#x", path, mode, got, dev)
	}
}

func TestCharDevice(t *testing.T) {
	for _, tc := range []struct {
		sys     string
		wantErr error // from Write
	}{{"/dev/null", nil}, {"/dev/full", syscall.ENOSPC}} {
		t.Run(filepath.Base(tc.sys), func(t *testing.T) {
			dir := t.TempDir()
			node := cloneDevice(t, tc.sys, dir)
			dev, _ := rdev(t, node)
			symlink(t, filepath.Base(node), filepath.Join(dir, "link"))
			for _, p := range []string{node, filepath.Join(dir, "link")} {
				if err := Check(p); err != nil {
					t.Errorf("Check(%s): %v", p, err)
				}
				if !IsInPlace(p) {
					t.Errorf("IsInPlace(%s) = false, want true", p)
				}
				err := WriteFile(p, []byte("report\n"))
				if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
					t.Errorf("WriteFile(%s): %v, want %v", p, err, tc.wantErr)
				}
				if err != nil && !strings.Contains(err.Error(), p) {
					t.Errorf("error %q does not name %s", err, p)
				}
				isDevice(t, node, dev)
				isLink(t, filepath.Join(dir, "link"), filepath.Base(node))
				noTemp(t, dir)
			}
		})
	}
}

func TestFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	symlink(t, "fifo", filepath.Join(dir, "link"))
	for _, p := range []string{fifo, filepath.Join(dir, "link")} {
		// No reader yet: Check must not open the FIFO, which would block.
		if err := within(t, 5*time.Second, "Check", func() error { return Check(p) }); err != nil {
			t.Fatalf("Check(%s): %v", p, err)
		}
		got := make(chan string, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				got <- err.Error()
				return
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(b)
		}()
		want := strings.Repeat("line of the report\n", 10000) // more than a pipe holds
		if err := within(t, 10*time.Second, "WriteFile", func() error { return WriteFile(p, []byte(want)) }); err != nil {
			t.Fatalf("WriteFile(%s): %v", p, err)
		}
		select {
		case s := <-got:
			if s != want {
				t.Errorf("reader got %d bytes (%.40q...), want %d", len(s), s, len(want))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the reader did not finish")
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
			t.Errorf("%s is now %v (%v), want a FIFO", fifo, fi.Mode(), err)
		}
		isLink(t, filepath.Join(dir, "link"), "fifo")
		noTemp(t, dir)
	}
}

func TestSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "of") // short: socket paths are limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	symlink(t, "s", filepath.Join(dir, "link"))
	for _, tc := range []struct{ path, want string }{
		{sock, sock + ": it is a socket"},
		{filepath.Join(dir, "link"), "it leads to " + sock + ", which is a socket"},
	} {
		for name, err := range map[string]error{"Check": Check(tc.path), "WriteFile": WriteFile(tc.path, []byte("x"))} {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s(%s): %v, want an error with %q", name, tc.path, err, tc.want)
			}
		}
		if fi, err := os.Lstat(sock); err != nil || fi.Mode()&fs.ModeSocket == 0 {
			t.Errorf("%s is now %v (%v), want a socket", sock, fi.Mode(), err)
		}
		noTemp(t, dir)
	}
}

// TestProcLinks checks paths that lead through /proc, as /dev/stdout does:
// one of the process's descriptors is written into at its offset (a
// regular file is neither replaced nor written over), a pipe as a FIFO; a
// descriptor open only for reading or a closed one is refused.
func TestProcLinks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc links are Linux's")
	}
	dir := t.TempDir()
	// A file open for writing as a shell's > opens stdout: no O_APPEND.
	file := filepath.Join(dir, "stdout.txt")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	io.WriteString(f, "table\n")
	before, _ := os.Stat(file)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ro, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()

	forms := []string{"/proc/self/fd/%d", "/proc/thread-self/fd/%d"}
	if _, err := os.Lstat("/dev/fd"); err == nil {
		forms = append(forms, "/dev/fd/%d")
	}
	// A link of our own to a descriptor, as /dev/stdout is.
	symlink(t, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), filepath.Join(dir, "stdout"))
	symlink(t, fmt.Sprintf("/proc/self/fd/%d", w.Fd()), filepath.Join(dir, "pipe"))
	type paths struct{ file, pipe, ro string }
	var cases []paths
	for _, form := range forms {
		cases = append(cases, paths{fmt.Sprintf(form, f.Fd()), fmt.Sprintf(form, w.Fd()), fmt.Sprintf(form, ro.Fd())})
	}
	cases = append(cases, paths{file: filepath.Join(dir, "stdout"), pipe: filepath.Join(dir, "pipe")})
	var want, wantPipe strings.Builder
	want.WriteString("table\n")
	for _, c := range cases {
		p := c.file
		if !IsInPlace(p) {
			t.Errorf("IsInPlace(%s) = false, want true", p)
		}
		if err := Check(p); err != nil {
			t.Errorf("Check(%s): %v", p, err)
		}
		if err := WriteFile(p, []byte("json via "+p+"\n")); err != nil {
			t.Errorf("WriteFile(%s): %v", p, err)
		}
		io.WriteString(f, "after\n") // the process's own next write follows
		want.WriteString("json via " + p + "\nafter\n")

		p = c.pipe
		if err := Check(p); err != nil {
			t.Errorf("Check(%s): %v", p, err)
		}
		if err := within(t, 5*time.Second, "WriteFile", func() error { return WriteFile(p, []byte(p+"\n")) }); err != nil {
			t.Errorf("WriteFile(%s): %v", p, err)
		}
		wantPipe.WriteString(p + "\n")

		if p = c.ro; p == "" {
			continue
		}
		for name, err := range map[string]error{"Check": Check(p), "WriteFile": WriteFile(p, []byte("x"))} {
			if !errors.Is(err, syscall.EBADF) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s(%s), a read-only descriptor: %v, want EBADF naming it", name, p, err)
			}
		}
	}
	w.Close()
	if b, _ := io.ReadAll(r); string(b) != wantPipe.String() {
		t.Errorf("pipe got %q, want %q", b, wantPipe.String())
	}
	hasContents(t, file, want.String(), 0o644)
	if after, err := os.Stat(file); err != nil || !os.SameFile(before, after) {
		t.Errorf("%s was replaced, want it written in place", file)
	}
	noTemp(t, dir)

	// A closed descriptor, directly or through a link.
	symlink(t, "/proc/self/fd/999999", filepath.Join(dir, "closed"))
	for _, p := range []string{"/proc/self/fd/999999", filepath.Join(dir, "closed")} {
		for name, err := range map[string]error{"Check": Check(p), "WriteFile": WriteFile(p, []byte("x"))} {
			if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "cannot write "+p+": lstat /proc/self/fd/999999: no such file or directory") {
				t.Errorf("%s(%s), a closed descriptor: %v", name, p, err)
			}
		}
	}
}

// noPermDir, in the environment, tells TestNoPermission that it runs as
// the unprivileged child of a root test, and where the directory is.
const noPermDir = "OUTFILE_TEST_NOPERM_DIR"

// TestNoPermission checks that a directory, file or FIFO the user may not
// write is refused by Check and Write alike. Root may write anything, so
// when the test runs as root it makes the files and then runs the checks
// in a copy of the test binary as the user nobody.
func TestNoPermission(t *testing.T) {
	if base := os.Getenv(noPermDir); base != "" {
		checkNoPermission(t, base)
		return
	}
	base, err := os.MkdirTemp("", "outfile-perm")
	if err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(base, "ro")
	t.Cleanup(func() {
		os.Chmod(ro, 0o755)
		os.RemoveAll(base)
	})
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "old.json"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ro, "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, c := range []struct {
		p    string
		mode fs.FileMode
	}{{filepath.Join(ro, "fifo"), 0o444}, {ro, 0o555}, {base, 0o755}} {
		if err := os.Chmod(c.p, c.mode); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() != 0 {
		checkNoPermission(t, base)
		return
	}

	// Root bypasses permission checks: run them as nobody.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(base, "outfile.test")
	if err := os.WriteFile(child, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(child)
	cmd := exec.Command(child, "-test.run=^TestNoPermission$", "-test.count=1", "-test.v")
	cmd.Dir = base
	cmd.Env = append(os.Environ(), noPermDir+"="+base)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Skipf("running as root, and cannot run the checks as nobody (uid 65534): %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNoPermission") {
		t.Fatalf("checks as nobody: %v\n%s", err, out)
	}
	t.Logf("ran as nobody (uid 65534):\n%s", out)
	// What the child could not write is as it was.
	entries, _ := os.ReadDir(ro)
	if len(entries) != 2 {
		t.Errorf("%s holds %v, want only fifo and old.json", ro, entries)
	}
	hasContents(t, filepath.Join(ro, "old.json"), "old", 0o644)
}

// checkNoPermission runs the checks of TestNoPermission on base, as a user
// who may not write in base/ro nor to base/ro/fifo.
func checkNoPermission(t *testing.T, base string) {
	if os.Geteuid() == 0 {
		t.Fatal("running as root, which may write anywhere")
	}
	ro := filepath.Join(base, "ro")
	for _, p := range []string{filepath.Join(ro, "new.json"), filepath.Join(ro, "old.json"), filepath.Join(ro, "fifo")} {
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"Check", func() error { return Check(p) }},
			{"WriteFile", func() error { return WriteFile(p, []byte("new")) }},
		} {
			// Neither may open the FIFO for long: it has no reader.
			err := within(t, 5*time.Second, op.name, op.do)
			if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s(%s): %v, want a permission error naming it", op.name, p, err)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(ro, "old.json")); err != nil || string(b) != "old" {
		t.Errorf("old.json holds %q (%v), want %q", b, err, "old")
	}
	noTemp(t, ro)
}
