package cudabackend

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTree makes the files (and, for "link -> target", symbolic links) of
// a fake filesystem under a temporary root, which it returns.
func fakeTree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		name, target, link := strings.Cut(f, " -> ")
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case link:
			err = os.Symlink(target, p)
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		default:
			err = os.WriteFile(p, []byte("not really a library"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// fakeHost is a host of the environment env over the tree at root.
func fakeHost(root, arch string, env map[string]string) blasHost {
	return blasHost{getenv: func(k string) string { return env[k] }, root: root, arch: arch}
}

// relative returns the candidates' paths with the fake root taken off.
func relative(root string, s *blasSearch) []string {
	var ps []string
	for _, c := range s.Candidates {
		ps = append(ps, strings.TrimPrefix(c.Path, root))
	}
	return ps
}

const (
	site313 = "/venv/lib/python3.13/site-packages/nvidia"
	loader  = "libcublas.so.13|libcublas.so.12" // the bare names, for the loader's search
)

// The search lists the libraries that exist, in the documented order:
// CUDA_HOME, CUDA_PATH, LD_LIBRARY_PATH, the loader by name, the toolkits
// (/usr/local/cuda, then newest first), the system directories, conda,
// then the Python wheels; .13 before .12 within a place; each file once.
func TestSearchCUBLASOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		arch  string
		files []string
		env   map[string]string
		want  string // "|"-separated paths
	}{
		{name: "nothing", want: loader},
		{
			name: "CUDA 13 wheel in a venv, .13 before .12",
			files: []string{
				site313 + "/cublas/lib/libcublas.so.12", site313 + "/cublas/lib/libcublasLt.so.12",
				site313 + "/cu13/lib/libcublas.so.13", site313 + "/cu13/lib/libcublasLt.so.13",
				"/venv/lib64 -> lib", // a venv's lib64 link: the same files, listed once
			},
			env:  map[string]string{"VIRTUAL_ENV": "/venv"},
			want: loader + "|" + site313 + "/cu13/lib/libcublas.so.13|" + site313 + "/cublas/lib/libcublas.so.12",
		},
		{
			name: "CUDA 12 wheels: venv, PYTHONPATH, ~/.local, /usr/local, /usr; newest Python first",
			files: []string{
				"/usr/lib/python3/dist-packages/nvidia/cublas/lib/libcublas.so.12",
				"/usr/local/lib/python3.11/dist-packages/nvidia/cublas/lib/libcublas.so.12",
				"/home/u/.local/lib/python3.9/site-packages/nvidia/cublas/lib/libcublas.so.12",
				"/home/u/.local/lib/python3.12/site-packages/nvidia/cu12/lib/libcublas.so.12",
				"/pp/nvidia/cublas/lib/libcublas.so.12",
				"/venv/lib/python3.10/site-packages/nvidia/cublas/lib/libcublas.so.12",
			},
			env: map[string]string{"VIRTUAL_ENV": "/venv", "HOME": "/home/u", "PYTHONPATH": "/pp:/missing"},
			want: loader + "|/venv/lib/python3.10/site-packages/nvidia/cublas/lib/libcublas.so.12" +
				"|/pp/nvidia/cublas/lib/libcublas.so.12" +
				"|/home/u/.local/lib/python3.12/site-packages/nvidia/cu12/lib/libcublas.so.12" +
				"|/home/u/.local/lib/python3.9/site-packages/nvidia/cublas/lib/libcublas.so.12" +
				"|/usr/local/lib/python3.11/dist-packages/nvidia/cublas/lib/libcublas.so.12" +
				"|/usr/lib/python3/dist-packages/nvidia/cublas/lib/libcublas.so.12",
		},
		{
			name: "conda: its lib, then its site-packages",
			files: []string{
				"/conda/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
				"/conda/lib/libcublas.so.12",
			},
			env:  map[string]string{"CONDA_PREFIX": "/conda"},
			want: loader + "|/conda/lib/libcublas.so.12|/conda/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
		},
		{
			name: "toolkits: /usr/local/cuda, then newest version first, then the system's",
			files: []string{
				"/usr/local/cuda-12.4/lib64/libcublas.so.12.4.5.8", "/usr/local/cuda-12.4/lib64/libcublas.so.12 -> libcublas.so.12.4.5.8",
				"/usr/local/cuda -> cuda-12.4", // the same files, listed once
				"/usr/local/cuda-12.10/targets/x86_64-linux/lib/libcublas.so.12",
				"/usr/local/cuda-12.10/targets/sbsa-linux/lib/libcublas.so.12", // another architecture's
				"/usr/local/cuda-13.0/lib64/libcublas.so.13",
				"/usr/local/cuda-13.0/lib64/libcublas.so.12", // after .13
				"/usr/lib/x86_64-linux-gnu/libcublas.so.12",
				"/usr/lib64/libcublas.so.13",
				"/usr/lib/aarch64-linux-gnu/libcublas.so.13",
			},
			want: loader + "|/usr/local/cuda/lib64/libcublas.so.12|/usr/local/cuda-13.0/lib64/libcublas.so.13|/usr/local/cuda-13.0/lib64/libcublas.so.12" +
				"|/usr/local/cuda-12.10/targets/x86_64-linux/lib/libcublas.so.12|/usr/lib64/libcublas.so.13|/usr/lib/x86_64-linux-gnu/libcublas.so.12",
		},
		{
			name: "arm64 toolkit and system directories",
			arch: "arm64",
			files: []string{
				"/usr/local/cuda-13.0/targets/sbsa-linux/lib/libcublas.so.13",
				"/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcublas.so.13",
				"/usr/lib/aarch64-linux-gnu/libcublas.so.12",
				"/usr/lib/x86_64-linux-gnu/libcublas.so.12",
			},
			want: loader + "|/usr/local/cuda-13.0/targets/sbsa-linux/lib/libcublas.so.13|/usr/lib/aarch64-linux-gnu/libcublas.so.12",
		},
		{
			name: "CUDA_HOME, CUDA_PATH and LD_LIBRARY_PATH come before the loader and the rest",
			files: []string{
				"/opt/ld/libcublas.so.12", "/opt/ld2/libcublas.so.13",
				"/opt/home/lib64/libcublas.so.12", "/opt/home/targets/x86_64-linux/lib/libcublas.so.13",
				"/opt/path/lib/libcublas.so.13",
				"/usr/local/cuda/lib64/libcublas.so.13",
				site313 + "/cu13/lib/libcublas.so.13",
			},
			env: map[string]string{"CUDA_HOME": "/opt/home", "CUDA_PATH": "/opt/path", "LD_LIBRARY_PATH": "/opt/ld::/opt/ld2", "VIRTUAL_ENV": "/venv"},
			want: "/opt/home/targets/x86_64-linux/lib/libcublas.so.13|/opt/home/lib64/libcublas.so.12|/opt/path/lib/libcublas.so.13" +
				"|/opt/ld/libcublas.so.12|/opt/ld2/libcublas.so.13|" + loader +
				"|/usr/local/cuda/lib64/libcublas.so.13|" + site313 + "/cu13/lib/libcublas.so.13",
		},
		{
			name: "KAKEYA_CUBLAS alone, over everything else",
			files: []string{
				"/opt/mine/libcublas.so.12",
				"/usr/local/cuda/lib64/libcublas.so.13",
			},
			env:  map[string]string{EnvCUBLAS: "/opt/mine/libcublas.so.12", "CUDA_HOME": "/usr/local/cuda"},
			want: "/opt/mine/libcublas.so.12",
		},
		{
			name:  "KAKEYA_CUBLAS a directory: its .13",
			files: []string{"/opt/mine/libcublas.so.12", "/opt/mine/libcublas.so.13", "/opt/mine/libcublas.so -> libcublas.so.12"},
			env:   map[string]string{EnvCUBLAS: "/opt/mine"},
			want:  "/opt/mine/libcublas.so.13",
		},
		{
			name:  "KAKEYA_CUBLAS a directory with only the development link",
			files: []string{"/opt/mine/libcublas.so.12.1", "/opt/mine/libcublas.so -> libcublas.so.12.1"},
			env:   map[string]string{EnvCUBLAS: "/opt/mine"},
			want:  "/opt/mine/libcublas.so",
		},
		{
			name: "KAKEYA_CUBLAS a file name, for the loader",
			env:  map[string]string{EnvCUBLAS: "libcublas.so.12"},
			want: "libcublas.so.12",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arch := tc.arch
			if arch == "" {
				arch = "amd64"
			}
			root := fakeTree(t, tc.files...)
			s, err := searchCUBLAS(fakeHost(root, arch, tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(relative(root, s), "|"); got != tc.want {
				t.Errorf("candidates\n%s\nwant\n%s\nlooked in:\n%s", strings.ReplaceAll(got, "|", "\n"), strings.ReplaceAll(tc.want, "|", "\n"), strings.Join(s.Looked, "\n"))
			}
			for i, l := range s.Looked {
				if slices.Contains(s.Looked[i+1:], l) {
					t.Errorf("looked in %s twice", l)
				}
			}
			if (tc.env[EnvCUBLAS] != "") != (s.Explicit != "") {
				t.Errorf("Explicit = %q", s.Explicit)
			}
		})
	}
}

// KAKEYA_CUBLAS naming nothing loadable is an error naming the variable
// and the path, not a search elsewhere.
func TestSearchCUBLASExplicitMissing(t *testing.T) {
	root := fakeTree(t, "/usr/local/cuda/lib64/libcublas.so.13", "/opt/empty/")
	for _, tc := range []struct{ value, want string }{
		{"/nope/libcublas.so.13", "cuda: KAKEYA_CUBLAS=/nope/libcublas.so.13: no such file"},
		{"/opt/empty", "cuda: KAKEYA_CUBLAS=/opt/empty: the directory holds no libcublas.so.13, libcublas.so.12 or libcublas.so"},
	} {
		s, err := searchCUBLAS(fakeHost(root, "amd64", map[string]string{EnvCUBLAS: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("KAKEYA_CUBLAS=%s: error %v, want %q", tc.value, err, tc.want)
		}
		if len(s.Candidates) != 0 {
			t.Errorf("KAKEYA_CUBLAS=%s: candidates %v", tc.value, s.Candidates)
		}
	}
}

// With no library anywhere, the failure says so, lists the places in
// brief and that prefill runs on the built-in kernel; files that were
// found but failed are named with their errors instead.
func TestSearchCUBLASNotFound(t *testing.T) {
	root := fakeTree(t)
	s, err := searchCUBLAS(fakeHost(root, "amd64", map[string]string{"HOME": "/home/u"}))
	if err != nil {
		t.Fatal(err)
	}
	tried := []blasTry{
		{Path: "libcublas.so.13", Err: "libcublas.so.13: libcublas.so.13: cannot open shared object file"},
		{Path: "libcublas.so.12", Err: "libcublas.so.12: libcublas.so.12: cannot open shared object file"},
	}
	got := s.notFound(tried).Error()
	for _, want := range []string{
		"cuda: no cuBLAS (libcublas.so.13 or libcublas.so.12): none in CUDA_HOME, CUDA_PATH, LD_LIBRARY_PATH, the dynamic loader's path, /usr/local/cuda*, /usr/lib/x86_64-linux-gnu, /usr/lib64 or Python wheels (nvidia/{cu13,cublas,cu12}/lib)",
		"prefill uses the backend's built-in matmul kernel",
		"KAKEYA_CUBLAS names the library to use",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("%s\nlacks %q", got, want)
		}
	}
	if strings.Contains(got, "cannot open") {
		t.Errorf("%s: the loader's misses are noise", got)
	}
	tried = append(tried, blasTry{Path: "/w/libcublas.so.13", Err: "/w/libcublas.so.13: libcublasLt.so.13: cannot open shared object file"})
	if got := s.notFound(tried).Error(); !strings.Contains(got, "none loads: /w/libcublas.so.13: libcublasLt.so.13: cannot open") {
		t.Errorf("a file that failed: %s", got)
	}
	report := (&cublasLoad{Search: s, Tried: tried}).report()
	for _, want := range []string{
		"KAKEYA_CUBLAS: unset", "CUDA_HOME: unset", "LD_LIBRARY_PATH: unset", "dynamic loader: libcublas.so.13, libcublas.so.12 by name",
		"CUDA toolkit: " + root + "/usr/local/cuda (absent)", "Python wheel: no site-packages",
		"candidate libcublas.so.13 (dynamic loader)", "failed /w/libcublas.so.13: libcublasLt", "loaded none: prefill uses the built-in matmul kernel",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report\n%s\nlacks %q", report, want)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	got := []string{"12.4", "13.0", "12.10", "12.9", "rc", "12", ".3.12"}
	slices.SortFunc(got, func(a, b string) int { return -compareVersions(a, b) })
	if want := []string{"13.0", "12.10", "12.9", "12.4", "12", ".3.12", "rc"}; !slices.Equal(got, want) {
		t.Errorf("newest first: %q, want %q", got, want)
	}
}

// The version comes from cublasGetVersion_v2's number, else the name of
// the file the library's link leads to; libcublasLt from the directory of
// a libcublas given by path.
func TestCUBLASVersionAndLt(t *testing.T) {
	if got := cublasVersion(130002); got != "13.0.2" {
		t.Errorf("cublasVersion(130002) = %q", got)
	}
	if got := cublasVersion(12345); got != "1.23.45" {
		t.Errorf("cublasVersion(12345) = %q", got)
	}
	root := fakeTree(t, "/tk/libcublas.so.12.9.1.4", "/tk/libcublas.so.12 -> libcublas.so.12.9.1.4", "/tk/libcublasLt.so.12",
		"/w/libcublas.so.13", "/w/libcublasLt.so.12", "/x/libcublas.so.13")
	for _, tc := range []struct{ path, version, lt string }{
		{"/tk/libcublas.so.12", "12.9.1.4", "/tk/libcublasLt.so.12"},
		{"/w/libcublas.so.13", "13", "/w/libcublasLt.so.12"}, // not its own, but the directory's
		{"/x/libcublas.so.13", "13", ""},
	} {
		p := filepath.Join(root, tc.path)
		if got := fileVersion(p); got != tc.version {
			t.Errorf("fileVersion(%s) = %q, want %q", tc.path, got, tc.version)
		}
		want := ""
		if tc.lt != "" {
			want = filepath.Join(root, tc.lt)
		}
		if got := ltFor(p); got != want {
			t.Errorf("ltFor(%s) = %q, want %q", tc.path, got, want)
		}
	}
	if got := ltFor("libcublas.so.13"); got != "" {
		t.Errorf("ltFor of a bare name = %q", got)
	}
}

// namedFake is a fake driver that reports the cuBLAS it "loaded".
type namedFake struct {
	*fakeDriver
	lib cublasLoad
}

func (n *namedFake) cublasLib() *cublasLoad { return &n.lib }

// Describe names cuBLAS's version and file when it runs prefill's
// products; CUBLASSearch gives the search.
func TestDescribeCUBLAS(t *testing.T) {
	f := newFake()
	f.cublas = true
	d := &namedFake{fakeDriver: f, lib: cublasLoad{Path: "/w/nvidia/cu13/lib/libcublas.so.13", Version: "13.1.1",
		Search: &blasSearch{Looked: []string{"KAKEYA_CUBLAS: unset"}}}}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, ", prefill GEMM cuBLAS 13.1.1 (bf16, TF32 for f32 weights) from /w/nvidia/cu13/lib/libcublas.so.13, and the mma kernel where faster (9-256 rows)"},
		{Options{ExactGEMM: true}, ", prefill GEMM cuBLAS 13.1.1 (bf16, float32 for f32 weights) from /w/nvidia/cu13/lib/libcublas.so.13, and the mma kernel where faster (9-256 rows)"},
		{Options{MatMul: "f32"}, ", prefill GEMM cuBLAS 13.1.1 (TF32) from /w/nvidia/cu13/lib/libcublas.so.13"},
		{Options{MatMul: "f32", ExactGEMM: true}, ", prefill GEMM cuBLAS 13.1.1 (float32) from /w/nvidia/cu13/lib/libcublas.so.13"},
		{Options{NoCUBLAS: true}, ", prefill GEMM mma kernel (bf16/f16 tensor cores), f32 weights matmul kernel (cuda: cuBLAS off (Options.NoCUBLAS))"},
		{Options{NoCUBLAS: true, MatMul: "f32"}, ", prefill GEMM matmul kernel (cuda: cuBLAS off (Options.NoCUBLAS))"},
	} {
		b := newBackend(d, tc.opts)
		if got := b.Describe(); !strings.HasPrefix(got, "CUDA fake (sm_80") || !strings.HasSuffix(got, tc.want) {
			t.Errorf("%+v: Describe() = %q, want it to end %q", tc.opts, got, tc.want)
		}
		if got := b.CUBLASSearch(); !strings.Contains(got, "KAKEYA_CUBLAS: unset") || !strings.Contains(got, "loaded /w/nvidia/cu13/lib/libcublas.so.13 (cuBLAS 13.1.1)") {
			t.Errorf("CUBLASSearch() = %q", got)
		}
	}
	d.lib.Version = ""
	if got := newBackend(d, Options{}).Describe(); !strings.HasSuffix(got, ", prefill GEMM cuBLAS (bf16, TF32 for f32 weights) from /w/nvidia/cu13/lib/libcublas.so.13, and the mma kernel where faster (9-256 rows)") {
		t.Errorf("no version: Describe() = %q", got)
	}
	if got := newBackend(f, Options{}).CUBLASSearch(); got != "" {
		t.Errorf("a driver that did not search: CUBLASSearch() = %q", got)
	}
}
