//go:build cgo && linux

package cudabackend

// Loading the cuBLAS that searchCUBLAS found: libcublasLt first, from the
// same directory, and afterwards which file the loader used and its
// version. The calls of cuBLAS itself are in libcuda.go (kk_blas_open).

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

// kkb_open_lt opens a libcublasLt, so that the libcublas of its directory
// that needs it finds it loaded (by its soname) without an RPATH; *err is
// dlerror's message on failure.
static void *kkb_open_lt(const char *path, const char **err) {
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	*err = h ? NULL : dlerror();
	return h;
}

static void kkb_close(void *h) {
	if (h) dlclose(h);
}

// kkb_version sets *v to cublasGetVersion_v2's number; nonzero when the
// library has none or it fails.
static int kkb_version(void *blas, void *handle, int *v) {
	int (*get)(void *, int *);
	*v = 0;
	*(void **)(&get) = dlsym(blas, "cublasGetVersion_v2");
	return get ? get(handle, v) : -1;
}

// kkb_file returns the file the loader opened for blas, NULL if unknown.
static const char *kkb_file(void *blas) {
	Dl_info info;
	void *sym = dlsym(blas, "cublasCreate_v2");
	if (!sym || !dladdr(sym, &info)) return NULL;
	return info.dli_fname;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// openDriver loads libcuda.so.1, opens device ordinal with its primary
// context and a stream of its own, and JIT-compiles ptx, a PTX image;
// cuBLAS is the first library of searchCUBLAS that loads. KAKEYA_CUBLAS
// naming a library that does not load is an error.
func openDriver(ordinal int, ptx []byte) (driver, error) {
	s, err := searchCUBLAS(thisHost())
	if err != nil {
		return nil, err
	}
	return openSearched(libName, s, ordinal, ptx)
}

// openSearched is openDriver with the driver library and the search given
// (tests load stubs).
func openSearched(lib string, s *blasSearch, ordinal int, ptx []byte) (driver, error) {
	d, err := openLibrary(lib, s.paths(), ordinal, ptx)
	if err != nil {
		return nil, err
	}
	l := d.(*libcuda)
	l.cublas.Search = s
	switch {
	case l.blasErr == nil:
	case s.Explicit != "":
		l.close()
		var why []string
		for _, t := range l.cublas.Tried {
			why = append(why, t.Err)
		}
		return nil, fmt.Errorf("cuda: %s=%s does not load: %s (unset it to search the usual places)", EnvCUBLAS, s.Explicit, strings.Join(why, "; "))
	default:
		l.blasErr = s.notFound(l.cublas.Tried)
	}
	return l, nil
}

// cublasLib implements cublasNamer.
func (l *libcuda) cublasLib() *cublasLoad { return &l.cublas }

// ltLib is a libcublasLt opened before its libcublas.
type ltLib struct {
	h    unsafe.Pointer
	path string
	err  string // why it did not open
}

// openCublasLt opens the libcublasLt of lib's directory (ltFor), if any.
func openCublasLt(lib string) ltLib {
	p := ltFor(lib)
	if p == "" {
		return ltLib{}
	}
	cp := C.CString(p)
	defer C.free(unsafe.Pointer(cp))
	var msg *C.char
	h := C.kkb_open_lt(cp, &msg)
	if h == nil {
		return ltLib{path: p, err: C.GoString(msg)}
	}
	return ltLib{h: h, path: p}
}

// loaded records the cuBLAS that loaded from lib, blas its dlopen handle
// and handle its cublasHandle_t; lt stays open.
func (c *cublasLoad) loaded(lib string, lt ltLib, blas, handle unsafe.Pointer) {
	c.Path, c.Lt = lib, lt.path
	if f := C.kkb_file(blas); f != nil {
		c.Path = C.GoString(f)
	}
	var v C.int
	if C.kkb_version(blas, handle, &v) == 0 && v > 0 {
		c.Version = cublasVersion(int(v))
	} else {
		c.Version = fileVersion(c.Path)
	}
}

// failed records that lib did not load (why: e, opened: its dlopen
// succeeded) and closes lt; it returns e with lt's own failure.
func (c *cublasLoad) failed(lib, e string, lt ltLib, opened bool) string {
	C.kkb_close(lt.h)
	if lt.err != "" {
		e += fmt.Sprintf(" (after %s failed: %s)", lt.path, lt.err)
	}
	c.Tried = append(c.Tried, blasTry{Path: lib, Err: e, Opened: opened})
	return e
}
