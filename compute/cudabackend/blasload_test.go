//go:build cgo && linux

package cudabackend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stubCublasLt stands in for libcublasLt, and stubCublasVersion adds to
// stubCublas a cublasGetVersion_v2 that asks it, so that the stub
// libcublas needs the stub libcublasLt as a wheel's does: by soname,
// without an RPATH.
const (
	stubCublasLt      = "#include <stddef.h>\nsize_t cublasLtGetVersion(void) { return 130101; }\n"
	stubCublasVersion = "\n#include <stddef.h>\nsize_t cublasLtGetVersion(void);\nint cublasGetVersion_v2(void *h, int *v) { *v = (int)cublasLtGetVersion(); return 0; }\n"
)

// install moves a library buildStub made to path, under root.
func install(t *testing.T, lib, root, path string) string {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(lib, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// wheelCublas installs a stub libcublas.so.<major> and, unless noLt, its
// libcublasLt.so.<major> in dir under root, the first needing the second.
func wheelCublas(t *testing.T, root, dir, major string, noLt bool) {
	t.Helper()
	lt := buildStub(t, stubCublasLt, "-Wl,-soname,libcublasLt.so."+major)
	blas := buildStub(t, stubCublas+stubCublasVersion, "-Wl,-soname,libcublas.so."+major, lt)
	install(t, blas, root, filepath.Join(dir, "libcublas.so."+major))
	if !noLt {
		install(t, lt, root, filepath.Join(dir, "libcublasLt.so."+major))
	}
}

// searchFiles searches the fake tree at root with env, keeping the files
// only: the bare names would find this machine's own cuBLAS, if any.
func searchFiles(t *testing.T, root string, env map[string]string) *blasSearch {
	t.Helper()
	s, err := searchCUBLAS(fakeHost(root, "amd64", env))
	if err != nil {
		t.Fatal(err)
	}
	var files []blasCandidate
	for _, c := range s.Candidates {
		if strings.ContainsRune(c.Path, '/') {
			files = append(files, c)
		}
	}
	s.Candidates = files
	return s
}

// A stub cuBLAS in a fake CUDA 13 wheel, with the libcublasLt it needs
// beside it, is found, loaded (its libcublasLt first) and named with its
// version in the backend's description; without that libcublasLt it does
// not load, and the description says why and that the built-in kernel
// runs. KAKEYA_CUBLAS picks a library, and fails New when it does not load.
func TestLibcudaCUBLASWheel(t *testing.T) {
	driver := buildStub(t, stubLibcuda)
	root := t.TempDir()
	const wheel = "/venv/lib/python3.12/site-packages/nvidia/cu13/lib"
	wheelCublas(t, root, wheel, "13", false)
	// CUDA 12's wheel, in ~/.local, lacks its libcublasLt.so.12.
	const broken = "/home/u/.local/lib/python3.12/site-packages/nvidia/cublas/lib"
	wheelCublas(t, root, broken, "12", true)
	lib := filepath.Join(root, wheel, "libcublas.so.13")

	t.Run("found", func(t *testing.T) {
		s := searchFiles(t, root, map[string]string{"VIRTUAL_ENV": "/venv", "HOME": "/home/u"})
		d, err := openSearched(driver, s, 0, stubPTX)
		if err != nil {
			t.Fatal(err)
		}
		b := newBackend(d, Options{})
		defer b.Close()
		if want := ", prefill GEMM cuBLAS 13.1.1 (bf16, TF32 for f32 weights) from " + lib + ", and the mma kernel where faster (9-256 rows)"; !strings.HasSuffix(b.Describe(), want) {
			t.Errorf("Describe() = %q, want it to end %q", b.Describe(), want)
		}
		search := b.CUBLASSearch()
		for _, want := range []string{
			"Python wheel: " + root + "/venv/lib/python3.12/site-packages/nvidia/{cu13,cublas,cu12}/lib",
			"candidate " + lib + " (Python wheel)",
			"loaded " + lib + " (cuBLAS 13.1.1) after " + filepath.Join(root, wheel, "libcublasLt.so.13"),
		} {
			if !strings.Contains(search, want) {
				t.Errorf("CUBLASSearch():\n%s\nlacks %q", search, want)
			}
		}
	})

	t.Run("libcublasLt missing", func(t *testing.T) {
		s := searchFiles(t, root, map[string]string{"HOME": "/home/u"})
		d, err := openSearched(driver, s, 0, stubPTX)
		if err != nil {
			t.Fatal(err)
		}
		b := newBackend(d, Options{})
		defer b.Close()
		got := b.Describe()
		for _, want := range []string{
			"f32 weights matmul kernel (cuda: no cuBLAS (libcublas.so.13 or libcublas.so.12): none loads: " + filepath.Join(root, broken, "libcublas.so.12") + ": libcublasLt.so.12: cannot open shared object file",
			"prefill uses the backend's built-in matmul kernel",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("Describe() = %q\nlacks %q", got, want)
			}
		}
		if search := b.CUBLASSearch(); !strings.Contains(search, "loaded none: prefill uses the built-in matmul kernel") {
			t.Errorf("CUBLASSearch():\n%s", search)
		}
	})

	t.Run("KAKEYA_CUBLAS", func(t *testing.T) {
		s := searchFiles(t, root, map[string]string{EnvCUBLAS: filepath.Join(wheel, "libcublas.so.13"), "HOME": "/home/u"})
		d, err := openSearched(driver, s, 0, stubPTX)
		if err != nil {
			t.Fatal(err)
		}
		b := newBackend(d, Options{ExactGEMM: true})
		defer b.Close()
		if want := ", prefill GEMM cuBLAS 13.1.1 (bf16, float32 for f32 weights) from " + lib + ", and the mma kernel where faster (9-256 rows)"; !strings.HasSuffix(b.Describe(), want) {
			t.Errorf("Describe() = %q, want it to end %q", b.Describe(), want)
		}
	})

	t.Run("KAKEYA_CUBLAS does not load", func(t *testing.T) {
		bad := filepath.Join(broken, "libcublas.so.12")
		s := searchFiles(t, root, map[string]string{EnvCUBLAS: bad, "VIRTUAL_ENV": "/venv"})
		d, err := openSearched(driver, s, 0, stubPTX)
		if err == nil {
			d.close()
			t.Fatal("opened")
		}
		for _, want := range []string{"cuda: " + EnvCUBLAS + "=" + bad + " does not load", "libcublasLt.so.12: cannot open shared object file"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	})
}

// A toolkit's cuBLAS without cublasGetVersion_v2 is named by the version
// in its file name, through the soname link.
func TestLibcudaCUBLASToolkit(t *testing.T) {
	driver := buildStub(t, stubLibcuda)
	root := t.TempDir()
	p := install(t, buildStub(t, stubCublas, "-Wl,-soname,libcublas.so.12"), root, "/usr/local/cuda-12.9/lib64/libcublas.so.12.9.1.4")
	if err := os.Symlink("libcublas.so.12.9.1.4", filepath.Join(filepath.Dir(p), "libcublas.so.12")); err != nil {
		t.Fatal(err)
	}
	d, err := openSearched(driver, searchFiles(t, root, nil), 0, stubPTX)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(d, Options{})
	defer b.Close()
	if want := ", prefill GEMM cuBLAS 12.9.1.4 (bf16, TF32 for f32 weights) from " + filepath.Join(root, "/usr/local/cuda-12.9/lib64/libcublas.so.12") + ", and the mma kernel where faster (9-256 rows)"; !strings.HasSuffix(b.Describe(), want) {
		t.Errorf("Describe() = %q, want it to end %q", b.Describe(), want)
	}
}
