package outfile

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// noTemp fails the test when dir holds a file Check or Write left behind:
// their temporary files are the only names starting with a dot.
func noTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("%s was left in %s", e.Name(), dir)
		}
	}
}

// symlink makes a symbolic link, skipping the test where the platform or
// the user may not.
func symlink(t *testing.T, dest, link string) {
	t.Helper()
	if err := os.Symlink(dest, link); err != nil {
		if runtime.GOOS == "windows" {
			t.Skipf("symlinks not available: %v", err)
		}
		t.Fatal(err)
	}
}

// isLink asserts link is still a symbolic link to dest.
func isLink(t *testing.T, link, dest string) {
	t.Helper()
	fi, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("%s is now %v, want a symbolic link", link, fi.Mode())
	}
	if got, err := os.Readlink(link); err != nil || got != dest {
		t.Errorf("%s points to %q (%v), want %q", link, got, err, dest)
	}
}

// hasContents asserts the file at path holds want, with permission perm
// (not checked where permission bits mean little).
func hasContents(t *testing.T, path, want string, perm fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s holds %q, want %q", path, b, want)
	}
	if runtime.GOOS == "windows" {
		return
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != perm {
		t.Errorf("%s has mode %v (%v), want %v", path, fi.Mode().Perm(), err, perm)
	}
}

func TestWrite(t *testing.T) {
	const data = "new contents\n"
	for _, tc := range []struct {
		name string
		// setup prepares dir and returns the path to write.
		setup func(t *testing.T, dir string) string
		// wantErr, when set, is part of the error Check and Write must
		// both return; the error must also match is, when set.
		wantErr string
		is      error
		// verify checks what is in dir afterwards.
		verify func(t *testing.T, dir string)
	}{{
		name:  "new file",
		setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "r.json") },
		verify: func(t *testing.T, dir string) {
			hasContents(t, filepath.Join(dir, "r.json"), data, 0o644)
		},
	}, {
		name: "existing file keeps its mode",
		setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "r.json")
			if err := os.WriteFile(p, []byte("old contents that are longer than the new"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		},
		verify: func(t *testing.T, dir string) {
			hasContents(t, filepath.Join(dir, "r.json"), data, 0o600)
		},
	}, {
		name: "symlink",
		setup: func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "real.json"), []byte("old"), 0o644)
			symlink(t, "real.json", filepath.Join(dir, "link.json"))
			return filepath.Join(dir, "link.json")
		},
		verify: func(t *testing.T, dir string) {
			isLink(t, filepath.Join(dir, "link.json"), "real.json")
			hasContents(t, filepath.Join(dir, "real.json"), data, 0o644)
		},
	}, {
		name: "chain of symlinks into another directory",
		setup: func(t *testing.T, dir string) string {
			sub := filepath.Join(dir, "sub")
			os.Mkdir(sub, 0o755)
			os.WriteFile(filepath.Join(sub, "real.json"), []byte("old"), 0o640)
			symlink(t, filepath.Join(sub, "real.json"), filepath.Join(dir, "a"))
			symlink(t, "a", filepath.Join(dir, "b"))
			return filepath.Join(dir, "b")
		},
		verify: func(t *testing.T, dir string) {
			isLink(t, filepath.Join(dir, "b"), "a")
			isLink(t, filepath.Join(dir, "a"), filepath.Join(dir, "sub", "real.json"))
			hasContents(t, filepath.Join(dir, "sub", "real.json"), data, 0o640)
			noTemp(t, filepath.Join(dir, "sub"))
		},
	}, {
		name: "dangling symlink",
		setup: func(t *testing.T, dir string) string {
			symlink(t, "made.json", filepath.Join(dir, "link.json"))
			return filepath.Join(dir, "link.json")
		},
		verify: func(t *testing.T, dir string) {
			isLink(t, filepath.Join(dir, "link.json"), "made.json")
			hasContents(t, filepath.Join(dir, "made.json"), data, 0o644)
		},
	}, {
		name: "dangling symlink into a missing directory",
		setup: func(t *testing.T, dir string) string {
			symlink(t, filepath.Join("nodir", "x.json"), filepath.Join(dir, "link.json"))
			return filepath.Join(dir, "link.json")
		},
		wantErr: "directory " + "DIR" + string(filepath.Separator) + "nodir",
		is:      fs.ErrNotExist,
		verify: func(t *testing.T, dir string) {
			isLink(t, filepath.Join(dir, "link.json"), filepath.Join("nodir", "x.json"))
		},
	}, {
		name: "directory",
		setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "out")
			os.Mkdir(p, 0o755)
			return p
		},
		wantErr: "it is a directory",
		verify: func(t *testing.T, dir string) {
			entries, err := os.ReadDir(filepath.Join(dir, "out"))
			if err != nil || len(entries) != 0 {
				t.Errorf("directory holds %v (%v), want it empty", entries, err)
			}
		},
	}, {
		name: "symlink to a directory",
		setup: func(t *testing.T, dir string) string {
			os.Mkdir(filepath.Join(dir, "out"), 0o755)
			symlink(t, "out", filepath.Join(dir, "link"))
			return filepath.Join(dir, "link")
		},
		wantErr: "which is a directory",
		verify: func(t *testing.T, dir string) {
			isLink(t, filepath.Join(dir, "link"), "out")
		},
	}, {
		name:    "missing parent directory",
		setup:   func(t *testing.T, dir string) string { return filepath.Join(dir, "no", "such", "r.json") },
		wantErr: "directory " + "DIR" + string(filepath.Separator) + filepath.Join("no", "such"),
		is:      fs.ErrNotExist,
		verify: func(t *testing.T, dir string) {
			if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the missing directory was made: %v", err)
			}
		},
	}, {
		name: "symlink loop",
		setup: func(t *testing.T, dir string) string {
			symlink(t, "b", filepath.Join(dir, "a"))
			symlink(t, "a", filepath.Join(dir, "b"))
			return filepath.Join(dir, "a")
		},
		wantErr: "symbolic links",
		verify: func(t *testing.T, dir string) {
			isLink(t, filepath.Join(dir, "a"), "b")
		},
	}, {
		name:    "empty path",
		setup:   func(*testing.T, string) string { return "" },
		wantErr: "no output path",
		verify:  func(*testing.T, string) {},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.setup(t, dir)
			want := strings.ReplaceAll(tc.wantErr, "DIR", dir)
			for _, op := range []struct {
				name string
				do   func() error
			}{
				{"Check", func() error { return Check(path) }},
				{"WriteFile", func() error { return WriteFile(path, []byte(data)) }},
			} {
				err := op.do()
				switch {
				case want == "" && err != nil:
					t.Fatalf("%s: %v", op.name, err)
				case want != "" && err == nil:
					t.Fatalf("%s: no error, want one with %q", op.name, want)
				case want != "" && !strings.Contains(err.Error(), want):
					t.Errorf("%s: %v, want an error with %q", op.name, err, want)
				case want != "" && path != "" && !strings.Contains(err.Error(), path):
					t.Errorf("%s: %v does not name %s", op.name, err, path)
				case tc.is != nil && !errors.Is(err, tc.is):
					t.Errorf("%s: %v is not %v", op.name, err, tc.is)
				}
				noTemp(t, dir)
			}
			tc.verify(t, dir)
		})
	}
}

// TestWriteFailureLeavesOldFile checks that a fill that fails or is
// cancelled halfway leaves the old file (and the link to it) as it was and
// no temporary file behind.
func TestWriteFailureLeavesOldFile(t *testing.T) {
	for _, fail := range []error{errors.New("disk on fire"), context.Canceled} {
		dir := t.TempDir()
		real := filepath.Join(dir, "real.json")
		os.WriteFile(real, []byte("old"), 0o644)
		paths := []string{real}
		if err := os.Symlink("real.json", filepath.Join(dir, "link.json")); err == nil {
			paths = append(paths, filepath.Join(dir, "link.json"))
		}
		for _, p := range paths {
			err := Write(p, func(w io.Writer) error {
				io.WriteString(w, strings.Repeat("partial ", 20000)) // past the buffer
				return fail
			})
			if !errors.Is(err, fail) || !strings.Contains(err.Error(), p) {
				t.Errorf("Write(%s): %v, want %v naming the path", p, err, fail)
			}
			hasContents(t, real, "old", 0o644)
			noTemp(t, dir)
		}
	}
}

// TestWriteLarge checks a write of several buffers' worth arrives whole.
func TestWriteLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	want := strings.Repeat("0123456789abcdef", 50000)
	err := Write(p, func(w io.Writer) error {
		for i := 0; i < len(want); i += 999 {
			if _, err := io.WriteString(w, want[i:min(i+999, len(want))]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	hasContents(t, p, want, 0o644)
}
