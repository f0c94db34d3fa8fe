package cudabackend

// Where cuBLAS is looked for. Installed by the CUDA toolkit it lives in
// /usr/local/cuda*/lib64; installed from Python wheels (nvidia-cublas,
// nvidia-cublas-cu12) in site-packages/nvidia/{cu13,cublas,cu12}/lib. The
// dynamic loader searches neither, so the backend searches them itself:
// searchCUBLAS lists the candidate files, in order, and the cgo side
// (blasload.go) opens the first that loads, with the libcublasLt of its
// directory opened first, since a wheel's libcublas finds its libcublasLt
// through an RPATH it may not have. The search is plain Go over a getenv
// function and a filesystem root, so tests run it on fake trees.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// EnvCUBLAS names the environment variable that tells New which cuBLAS to
// load: a library's path, a directory holding one, or a file name for the
// dynamic loader. Set, it is the only library tried, and New fails when it
// does not load, rather than running prefill on the built-in kernel.
const EnvCUBLAS = "KAKEYA_CUBLAS"

// cublasLibs are the cuBLAS libraries the backend uses, newest first:
// CUDA 13's and 12's. In any one place the search finds, .13 is preferred.
var cublasLibs = []string{"libcublas.so.13", "libcublas.so.12"}

// wheelDirs are where the NVIDIA wheels put cuBLAS under a site-packages
// (or dist-packages) directory: CUDA 13's nvidia-cublas, then CUDA 12's
// nvidia-cublas-cu12, then the cu12 layout of the newer wheels.
var wheelDirs = []string{"nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cu12/lib"}

// blasHost is what the search reads: the environment, the filesystem
// (absolute paths are taken under root, "/" but in tests) and the
// architecture, which names the toolkit's target directory and the
// distribution's library directory.
type blasHost struct {
	getenv func(string) string
	root   string
	arch   string // a GOARCH
}

// thisHost is the machine the binary runs on.
func thisHost() blasHost { return blasHost{getenv: os.Getenv, root: "/", arch: runtime.GOARCH} }

// path returns where p lies: under the root when absolute, else p as
// given (relative to the working directory).
func (h blasHost) path(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Join(h.root, p)
	}
	return p
}

// isFile and isDir follow symbolic links.
func isFile(p string) bool { fi, err := os.Stat(p); return err == nil && fi.Mode().IsRegular() }
func isDir(p string) bool  { fi, err := os.Stat(p); return err == nil && fi.IsDir() }

// subdirs returns the directories in dir whose names start with prefix,
// the highest version first (cuda-13.0, cuda-12.10, cuda-12.9; python3.13
// before python3.9).
func subdirs(dir, prefix string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, prefix) && isDir(filepath.Join(dir, n)) {
			names = append(names, n)
		}
	}
	slices.SortStableFunc(names, func(a, b string) int {
		return -compareVersions(strings.TrimPrefix(a, prefix), strings.TrimPrefix(b, prefix))
	})
	return names
}

// compareVersions orders dotted versions numerically ("12.10" after
// "12.9"); non-numeric parts compare as text, after numbers.
func compareVersions(a, b string) int {
	pa, pb := strings.FieldsFunc(a, isDot), strings.FieldsFunc(b, isDot)
	for i := range max(len(pa), len(pb)) {
		if i >= len(pa) {
			return -1
		}
		if i >= len(pb) {
			return 1
		}
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		switch {
		case ea == nil && eb == nil && na != nb:
			if na < nb {
				return -1
			}
			return 1
		case ea == nil && eb != nil:
			return 1
		case ea != nil && eb == nil:
			return -1
		case ea != nil && eb != nil && pa[i] != pb[i]:
			return strings.Compare(pa[i], pb[i])
		}
	}
	return 0
}

func isDot(r rune) bool { return r == '.' || r == '-' }

// blasCandidate is a library the search found.
type blasCandidate struct {
	Path string // a file, or a file name for the dynamic loader's own search
	From string // where it was found: "KAKEYA_CUBLAS", "CUDA_HOME", "Python wheel", ...
}

// blasSearch is the outcome of a search: the libraries to try, in order,
// and the places looked in, for kakeya-run --verbose.
type blasSearch struct {
	// Explicit is KAKEYA_CUBLAS's value when set: Candidates is then its
	// library alone, and failing to load it is an error.
	Explicit   string
	Candidates []blasCandidate
	Looked     []string // "CUDA_HOME: unset", "CUDA toolkit: /usr/local/cuda/lib64 (absent)", ...
	arch       string
	seen       map[string]bool // candidates' resolved paths
}

// paths returns the candidates' paths, in order.
func (s *blasSearch) paths() []string {
	var ps []string
	for _, c := range s.Candidates {
		ps = append(ps, c.Path)
	}
	return ps
}

// add appends a candidate unless the same file came earlier (through a
// symbolic link: /usr/local/cuda and /usr/local/cuda-13.0, lib64 and lib).
func (s *blasSearch) add(c blasCandidate) {
	key := c.Path
	if r, err := filepath.EvalSymlinks(c.Path); err == nil {
		key = r
	}
	if !s.seen[key] {
		s.seen[key] = true
		s.Candidates = append(s.Candidates, c)
	}
}

// place looks in the directories of one place (a toolkit, a site-packages
// directory) for each name in turn, so that within a place .13 comes
// before .12, and records what it looked at.
func (s *blasSearch) place(from string, dirs []string, names ...string) {
	var seen []string
	for _, d := range dirs {
		if isDir(d) {
			seen = append(seen, d)
		} else {
			seen = append(seen, d+" (absent)")
		}
	}
	s.Looked = append(s.Looked, from+": "+strings.Join(seen, ", "))
	s.find(from, dirs, names...)
}

// find adds the files of the names in the directories, name by name.
func (s *blasSearch) find(from string, dirs []string, names ...string) {
	for _, n := range names {
		for _, d := range dirs {
			if p := filepath.Join(d, n); isFile(p) {
				s.add(blasCandidate{Path: p, From: from})
			}
		}
	}
}

// toolkitDirs are the library directories of a CUDA toolkit installed at
// root: lib64 and the target's targets/<triple>/lib.
func (h blasHost) toolkitDirs(root string) []string {
	dirs := []string{filepath.Join(root, "lib64")}
	for _, t := range map[string][]string{"amd64": {"x86_64-linux"}, "arm64": {"sbsa-linux", "aarch64-linux"}}[h.arch] {
		dirs = append(dirs, filepath.Join(root, "targets", t, "lib"))
	}
	return dirs
}

// multiarch is the distribution's library directory for the architecture.
func multiarch(arch string) string {
	if t, ok := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "powerpc64le"}[arch]; ok {
		return "/usr/lib/" + t + "-linux-gnu"
	}
	return "/usr/lib"
}

// searchCUBLAS lists the cuBLAS libraries to try, in this order:
//
//  1. KAKEYA_CUBLAS, when set, alone: a file, a directory holding
//     libcublas.so.13, .12 or libcublas.so, or a bare file name for the
//     dynamic loader. A path that does not exist is an error naming it.
//  2. $CUDA_HOME, then $CUDA_PATH: their lib64, targets/<triple>/lib and
//     lib.
//  3. Each directory of $LD_LIBRARY_PATH, then libcublas.so.13 and .12 by
//     name, for the dynamic loader's own search (its cache, RUNPATH, the
//     default directories).
//  4. The CUDA toolkits: /usr/local/cuda, then /usr/local/cuda-* newest
//     version first (each lib64 and targets/<triple>/lib), then
//     /usr/lib/<multiarch> and /usr/lib64.
//  5. Python: $CONDA_PREFIX/lib (conda's libcublas package), then the
//     site-packages and dist-packages directories of $VIRTUAL_ENV,
//     $CONDA_PREFIX, $PYTHONPATH, ~/.local, /usr/local and /usr
//     (lib/python3* and lib64/python3*, newest first), each looked into
//     for nvidia/cu13/lib, nvidia/cublas/lib and nvidia/cu12/lib.
//
// Within each directory (each site-packages), libcublas.so.13 comes before
// .12. Only files that exist are listed, each once; the first that loads is
// used. Nothing here runs a process: Python's own sys.path is not asked for.
func searchCUBLAS(h blasHost) (*blasSearch, error) {
	s := &blasSearch{arch: h.arch, seen: map[string]bool{}}
	if v := h.getenv(EnvCUBLAS); v != "" {
		s.Explicit = v
		return s, s.explicit(h, v)
	}
	s.Looked = append(s.Looked, EnvCUBLAS+": unset")
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := h.getenv(env); v != "" {
			root := h.path(v)
			s.place(env, append(h.toolkitDirs(root), filepath.Join(root, "lib")), cublasLibs...)
		} else {
			s.Looked = append(s.Looked, env+": unset")
		}
	}
	if v := h.getenv("LD_LIBRARY_PATH"); v != "" {
		for _, d := range filepath.SplitList(v) {
			if d != "" {
				s.place("LD_LIBRARY_PATH", []string{h.path(d)}, cublasLibs...)
			}
		}
	} else {
		s.Looked = append(s.Looked, "LD_LIBRARY_PATH: unset")
	}
	for _, n := range cublasLibs {
		s.add(blasCandidate{Path: n, From: "dynamic loader"})
	}
	s.Looked = append(s.Looked, "dynamic loader: "+strings.Join(cublasLibs, ", ")+" by name")

	local := h.path("/usr/local")
	toolkits := []string{filepath.Join(local, "cuda")}
	for _, d := range subdirs(local, "cuda-") {
		toolkits = append(toolkits, filepath.Join(local, d))
	}
	for _, t := range toolkits {
		if isDir(t) {
			s.place("CUDA toolkit", h.toolkitDirs(t), cublasLibs...)
		} else {
			s.Looked = append(s.Looked, "CUDA toolkit: "+t+" (absent)")
		}
	}
	s.place("system", []string{h.path(multiarch(h.arch)), h.path("/usr/lib64")}, cublasLibs...)

	if v := h.getenv("CONDA_PREFIX"); v != "" {
		s.place("conda", []string{filepath.Join(h.path(v), "lib")}, cublasLibs...)
	}
	var sites []string
	prefix := func(p string) {
		for _, lib := range []string{"lib", "lib64"} {
			dir := filepath.Join(p, lib)
			for _, py := range subdirs(dir, "python3") {
				for _, sp := range []string{"site-packages", "dist-packages"} {
					sites = append(sites, filepath.Join(dir, py, sp))
				}
			}
		}
	}
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := h.getenv(env); v != "" {
			prefix(h.path(v))
		}
	}
	for _, d := range filepath.SplitList(h.getenv("PYTHONPATH")) {
		if d != "" {
			sites = append(sites, h.path(d))
		}
	}
	if home := h.getenv("HOME"); home != "" {
		prefix(filepath.Join(h.path(home), ".local"))
	}
	prefix(h.path("/usr/local"))
	prefix(h.path("/usr"))
	found := map[string]bool{} // sites' resolved paths: a venv's lib64 is a link to lib
	for _, site := range sites {
		r, err := filepath.EvalSymlinks(site)
		if err != nil || !isDir(r) || found[r] {
			continue
		}
		found[r] = true
		var dirs []string
		for _, w := range wheelDirs {
			dirs = append(dirs, filepath.Join(site, w))
		}
		s.Looked = append(s.Looked, "Python wheel: "+filepath.Join(site, "nvidia/{cu13,cublas,cu12}/lib"))
		s.find("Python wheel", dirs, cublasLibs...)
	}
	if len(found) == 0 {
		s.Looked = append(s.Looked, "Python wheel: no site-packages or dist-packages directory")
	}
	return s, nil
}

// explicit resolves KAKEYA_CUBLAS's value v.
func (s *blasSearch) explicit(h blasHost, v string) error {
	if !strings.ContainsRune(v, '/') {
		s.Looked = append(s.Looked, EnvCUBLAS+"="+v+": by name, through the dynamic loader")
		s.Candidates = []blasCandidate{{Path: v, From: EnvCUBLAS}}
		return nil
	}
	p := h.path(v)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cuda: %s=%s: no such file (it names the cuBLAS library to load, such as .../site-packages/nvidia/cu13/lib/libcublas.so.13; unset it to search the usual places)", EnvCUBLAS, v)
	case err != nil:
		return fmt.Errorf("cuda: %s=%s: %v", EnvCUBLAS, v, err)
	case fi.IsDir():
		s.place(EnvCUBLAS, []string{p}, append(slices.Clone(cublasLibs), "libcublas.so")...)
		if len(s.Candidates) == 0 {
			return fmt.Errorf("cuda: %s=%s: the directory holds no %s or libcublas.so", EnvCUBLAS, v, strings.Join(cublasLibs, ", "))
		}
		s.Candidates = s.Candidates[:1]
		return nil
	}
	s.Looked = append(s.Looked, EnvCUBLAS+": "+p)
	s.Candidates = []blasCandidate{{Path: p, From: EnvCUBLAS}}
	return nil
}

// notFound says that no cuBLAS loaded: the candidate files that failed
// and why, or, when there were none, the places searched, in brief.
func (s *blasSearch) notFound(tried []blasTry) error {
	var files []string
	for _, t := range tried {
		if strings.ContainsRune(t.Path, '/') || t.Opened {
			files = append(files, t.Err)
		}
	}
	where := fmt.Sprintf("none in CUDA_HOME, CUDA_PATH, LD_LIBRARY_PATH, the dynamic loader's path, /usr/local/cuda*, %s, /usr/lib64 or Python wheels (nvidia/{cu13,cublas,cu12}/lib)", multiarch(s.arch))
	if len(files) > 0 {
		where = "none loads: " + strings.Join(files, "; ")
	}
	return fmt.Errorf("cuda: no cuBLAS (%s): %s; prefill uses the backend's built-in matmul kernel (%s names the library to use; kakeya-run --verbose shows the search)",
		strings.Join(cublasLibs, " or "), where, EnvCUBLAS)
}

// blasTry is a library the driver failed to load or to use.
type blasTry struct {
	Path   string
	Err    string // "path: why"
	Opened bool   // dlopen succeeded (its cuBLAS could not make a handle)
}

// cublasLoad is what the driver did with cuBLAS: the library it loaded
// and what it tried before.
type cublasLoad struct {
	Path    string // the library loaded; "" when none
	Version string // "13.0.2": cublasGetVersion_v2's, else the file name's; "" if neither says
	Lt      string // the libcublasLt opened beforehand from Path's directory, if any
	Tried   []blasTry
	Search  *blasSearch // nil when the libraries were named (tests)
}

// cublasNamer is a driver that says which cuBLAS it loaded.
type cublasNamer interface {
	cublasLib() *cublasLoad
}

// cublasVersion formats cublasGetVersion_v2's number: major*10000 +
// minor*100 + patch since cuBLAS 11.
func cublasVersion(v int) string {
	if v < 10000 {
		return strconv.Itoa(v)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// fileVersion is the version in a library's file name, after following
// symbolic links: "12.9.1.4" for libcublas.so.12 -> libcublas.so.12.9.1.4,
// "13" for a libcublas.so.13 that is no link; "" without one.
func fileVersion(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		path = r
	}
	_, v, ok := strings.Cut(filepath.Base(path), ".so.")
	if !ok {
		return ""
	}
	return v
}

// ltFor returns the libcublasLt to open before lib: the file of the
// matching name (libcublasLt.so.13 for libcublas.so.13) in lib's
// directory, else any libcublasLt.so.* there; "" when lib is a bare name
// (the loader finds its dependencies as it found it) or there is none.
func ltFor(lib string) string {
	if !strings.ContainsRune(lib, '/') {
		return ""
	}
	dir, base := filepath.Split(lib)
	if rest, ok := strings.CutPrefix(base, "libcublas.so"); ok {
		if p := filepath.Join(dir, "libcublasLt.so"+rest); isFile(p) {
			return p
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "libcublasLt.so.") && isFile(filepath.Join(dir, e.Name())) {
			return filepath.Join(dir, e.Name())
		}
	}
	return ""
}

// report is the search and its outcome, one item a line, for kakeya-run
// --verbose.
func (c *cublasLoad) report() string {
	var b strings.Builder
	b.WriteString("cuBLAS search (the first library that loads is used):\n")
	if c.Search != nil {
		for _, l := range c.Search.Looked {
			fmt.Fprintf(&b, "  %s\n", l)
		}
		for _, k := range c.Search.Candidates {
			fmt.Fprintf(&b, "  candidate %s (%s)\n", k.Path, k.From)
		}
	}
	for _, t := range c.Tried {
		fmt.Fprintf(&b, "  failed %s\n", t.Err)
	}
	switch {
	case c.Path == "":
		b.WriteString("  loaded none: prefill uses the built-in matmul kernel\n")
	default:
		fmt.Fprintf(&b, "  loaded %s", c.Path)
		if c.Version != "" {
			fmt.Fprintf(&b, " (cuBLAS %s)", c.Version)
		}
		if c.Lt != "" {
			fmt.Fprintf(&b, " after %s", c.Lt)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// gemmDescription is GEMM with the cuBLAS library named: "cuBLAS 13.0.2
// (TF32) from /usr/local/cuda-13.0/lib64/libcublas.so.13".
func (b *Backend) gemmDescription() string {
	blas, rest := b.gemmParts()
	n, ok := b.drv.(cublasNamer)
	if b.gemm == nil || !ok || n.cublasLib().Path == "" {
		return blas + rest
	}
	c := n.cublasLib()
	if c.Version != "" {
		blas = strings.Replace(blas, "cuBLAS", "cuBLAS "+c.Version, 1)
	}
	return blas + " from " + c.Path + rest
}

// CUBLASSearch describes how New looked for cuBLAS: the places searched,
// the libraries found, those that failed and the one loaded, one item a
// line. It is empty for a driver that did not search.
func (b *Backend) CUBLASSearch() string {
	if n, ok := b.drv.(cublasNamer); ok {
		return n.cublasLib().report()
	}
	return ""
}
