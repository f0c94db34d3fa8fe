//go:build cgo && linux

package cudabackend

// The real driver: libcuda.so.1 opened with dlopen at run time, so the
// binary links nothing of CUDA and builds on machines without the toolkit.
// The prototypes below are the few the backend calls, declared here with
// the driver API's types reduced to C scalars and opaque pointers; every
// call goes through a function pointer resolved by dlsym (the _v2 symbols
// where cuda.h maps a name to one) and starts by making the backend's
// context current, since a Go call may run on any OS thread.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef unsigned long long CUdeviceptr;

typedef struct {
	void *lib;
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
		unsigned, CUstream, void **, void **);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	// CUDA graphs: optional (NULL in a driver without them).
	CUresult (*cuStreamBeginCapture)(CUstream, int);
	CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
	CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
	CUresult (*cuGraphExecDestroy)(CUgraphExec);
	CUresult (*cuGraphDestroy)(CUgraph);
	// Page-locked host memory and asynchronous copies from it: optional
	// (without them every copy in is synchronous).
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);

	// cuBLAS: optional, from its own library.
	void *blas;
	int (*cublasCreate)(void **);
	int (*cublasDestroy)(void *);
	int (*cublasSetStream)(void *, CUstream);
	int (*cublasGemmEx)(void *, int, int, int, int, int, const void *, const void *, int, int,
		const void *, int, int, const void *, void *, int, int, int, int);
	void *blasHandle;

	CUdevice dev;
	CUcontext ctx;
	CUstream stream;
	CUmodule mod;
} kk_drv;

// kk_open dlopens the library into d and resolves every symbol; on
// failure it returns a static message, and *missing names the symbol.
static const char *kk_open(kk_drv *d, const char *lib, const char **missing) {
	memset(d, 0, sizeof *d);
	d->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		return dlerror();
	}
#define SYM(field, name, required) \
	*(void **)(&d->field) = dlsym(d->lib, name); \
	if (!d->field && required) { *missing = name; return "missing symbol"; }
	SYM(cuInit, "cuInit", 1)
	SYM(cuDriverGetVersion, "cuDriverGetVersion", 1)
	SYM(cuDeviceGetCount, "cuDeviceGetCount", 1)
	SYM(cuDeviceGet, "cuDeviceGet", 1)
	SYM(cuDeviceGetName, "cuDeviceGetName", 1)
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute", 1)
	SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2", 1)
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1)
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1)
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent", 1)
	SYM(cuModuleLoadDataEx, "cuModuleLoadDataEx", 1)
	SYM(cuModuleUnload, "cuModuleUnload", 1)
	SYM(cuModuleGetFunction, "cuModuleGetFunction", 1)
	SYM(cuFuncSetAttribute, "cuFuncSetAttribute", 1)
	SYM(cuMemAlloc, "cuMemAlloc_v2", 1)
	SYM(cuMemFree, "cuMemFree_v2", 1)
	SYM(cuMemsetD8Async, "cuMemsetD8Async", 1)
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2", 1)
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 1)
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 1)
	SYM(cuStreamCreate, "cuStreamCreate", 1)
	SYM(cuStreamDestroy, "cuStreamDestroy_v2", 1)
	SYM(cuStreamSynchronize, "cuStreamSynchronize", 1)
	SYM(cuLaunchKernel, "cuLaunchKernel", 1)
	SYM(cuGetErrorName, "cuGetErrorName", 1)
	SYM(cuGetErrorString, "cuGetErrorString", 1)
	SYM(cuStreamBeginCapture, "cuStreamBeginCapture_v2", 0)
	SYM(cuStreamEndCapture, "cuStreamEndCapture", 0)
	SYM(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 0)
	SYM(cuGraphLaunch, "cuGraphLaunch", 0)
	SYM(cuGraphExecDestroy, "cuGraphExecDestroy", 0)
	SYM(cuGraphDestroy, "cuGraphDestroy", 0)
	SYM(cuMemHostAlloc, "cuMemHostAlloc", 0)
	SYM(cuMemFreeHost, "cuMemFreeHost", 0)
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 0)
#undef SYM
	return NULL;
}

static void kk_close_lib(kk_drv *d) {
	if (d->lib) dlclose(d->lib);
	d->lib = NULL;
}

static int kk_graphs(kk_drv *d) {
	return d->cuStreamBeginCapture && d->cuStreamEndCapture && d->cuGraphInstantiateWithFlags &&
		d->cuGraphLaunch && d->cuGraphExecDestroy && d->cuGraphDestroy;
}

static CUresult kk_error_text(kk_drv *d, CUresult r, const char **name, const char **msg) {
	*name = NULL;
	*msg = NULL;
	d->cuGetErrorName(r, name);
	return d->cuGetErrorString(r, msg);
}

// Device setup, in one call so that the context is current on this thread.
static CUresult kk_init(kk_drv *d, int ordinal, int *step) {
	CUresult r;
	*step = 0; if ((r = d->cuInit(0))) return r;
	*step = 1; if ((r = d->cuDeviceGet(&d->dev, ordinal))) return r;
	*step = 2; if ((r = d->cuDevicePrimaryCtxRetain(&d->ctx, d->dev))) return r;
	*step = 3; if ((r = d->cuCtxSetCurrent(d->ctx))) return r;
	*step = 4; return d->cuStreamCreate(&d->stream, 0);
}

static CUresult kk_attr(kk_drv *d, int attr, int *v) { return d->cuDeviceGetAttribute(v, attr, d->dev); }
static CUresult kk_count(kk_drv *d, int *n) { return d->cuDeviceGetCount(n); }
static CUresult kk_version(kk_drv *d, int *v) { return d->cuDriverGetVersion(v); }
static CUresult kk_name(kk_drv *d, char *buf, int n) { return d->cuDeviceGetName(buf, n, d->dev); }
static CUresult kk_total(kk_drv *d, size_t *n) { return d->cuDeviceTotalMem(n, d->dev); }

// kk_load JIT-compiles the PTX image, keeping the compiler's error log.
static CUresult kk_load(kk_drv *d, const void *image, char *log, unsigned logSize) {
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)(uintptr_t)logSize};
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	if (r) return r;
	return d->cuModuleLoadDataEx(&d->mod, image, 2, opts, vals);
}

static CUresult kk_function(kk_drv *d, const char *name, uint64_t *fn) {
	CUfunction f = NULL;
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	if (!r) r = d->cuModuleGetFunction(&f, d->mod, name);
	*fn = (uint64_t)(uintptr_t)f;
	return r;
}

// kk_max_shared lets a kernel take bytes of dynamic shared memory, past
// the 48 KiB every kernel gets without asking.
static CUresult kk_max_shared(kk_drv *d, uint64_t fn, int bytes) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuFuncSetAttribute((CUfunction)(uintptr_t)fn, 8, bytes); // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
}

static CUresult kk_alloc(kk_drv *d, size_t n, uint64_t *p) {
	CUdeviceptr q = 0;
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	if (!r) r = d->cuMemAlloc(&q, n);
	*p = q;
	return r;
}

static CUresult kk_free(kk_drv *d, uint64_t p) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemFree(p);
}

static CUresult kk_zero(kk_drv *d, uint64_t p, size_t n) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemsetD8Async(p, 0, n, d->stream);
}

// Host memory is the Go caller's (pageable). The synchronous copy is the
// one documented to have consumed such a buffer when it returns (the
// asynchronous one only "might be synchronous"); it runs on the legacy
// stream, with which the backend's stream (created blocking) is ordered
// both ways, so it follows the queued work and precedes what comes next.
// Nearly every upload follows a read-back anyway, so the wait costs
// little.
static CUresult kk_htod(kk_drv *d, uint64_t dst, const void *src, size_t n) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemcpyHtoD(dst, src, n);
}

// kk_host_alloc returns n bytes of page-locked host memory (portable, so
// any context may copy from it), or NULL where the driver lacks the
// calls; kk_htod_async copies from such memory in stream order without
// waiting.
static CUresult kk_host_alloc(kk_drv *d, void **p, size_t n) {
	*p = NULL;
	if (!d->cuMemHostAlloc || !d->cuMemFreeHost || !d->cuMemcpyHtoDAsync) return 801; // CUDA_ERROR_NOT_SUPPORTED
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemHostAlloc(p, n, 1); // CU_MEMHOSTALLOC_PORTABLE
}

static CUresult kk_host_free(kk_drv *d, void *p) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemFreeHost(p);
}

static CUresult kk_htod_async(kk_drv *d, uint64_t dst, const void *src, size_t n) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemcpyHtoDAsync(dst, src, n, d->stream);
}

static CUresult kk_dtoh(kk_drv *d, void *dst, uint64_t src, size_t n) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	if (!r) r = d->cuMemcpyDtoHAsync(dst, src, n, d->stream);
	return r ? r : d->cuStreamSynchronize(d->stream);
}

static CUresult kk_dtod(kk_drv *d, uint64_t dst, uint64_t src, size_t n) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuMemcpyDtoDAsync(dst, src, n, d->stream);
}

static CUresult kk_sync(kk_drv *d) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuStreamSynchronize(d->stream);
}

// KK_MAX_PARAMS is the most parameters a kernel takes (maxParams).
#define KK_MAX_PARAMS 32

// One launch of a batch. Its arguments live at args+argOff in one buffer
// shared by the batch, each at the offset offs[paramOff+i] from there, so
// the Go side passes no pointers inside Go memory.
typedef struct {
	uint64_t fn;
	uint32_t grid[3], block[3];
	uint32_t shared, argOff, paramOff, nparams;
} kk_launch;

// kk_launch_raw launches through kernelParams, an array of pointers to each
// argument: the driver reads each parameter the kernel declares at its
// size, so the arguments' layout cannot disagree with the kernel's.
static CUresult kk_launch_raw(kk_drv *d, const kk_launch *ls, int n, const unsigned char *args,
		const uint32_t *offs, int *failed) {
	CUresult r;
	void *params[KK_MAX_PARAMS];
	*failed = -1;
	for (int i = 0; i < n; i++) {
		const kk_launch *l = &ls[i];
		for (uint32_t j = 0; j < l->nparams && j < KK_MAX_PARAMS; j++)
			params[j] = (void *)(args + l->argOff + offs[l->paramOff + j]);
		r = d->cuLaunchKernel((CUfunction)(uintptr_t)l->fn, l->grid[0], l->grid[1], l->grid[2],
			l->block[0], l->block[1], l->block[2], l->shared, d->stream, params, NULL);
		if (r) { *failed = i; return r; }
	}
	return 0;
}

static CUresult kk_launch_all(kk_drv *d, const kk_launch *ls, int n, const unsigned char *args,
		const uint32_t *offs, int *failed) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	*failed = -1;
	return r ? r : kk_launch_raw(d, ls, n, args, offs, failed);
}

// kk_capture records a batch into an executable graph. Begin, launches, end
// and instantiation happen in this one call, so they share an OS thread.
static CUresult kk_capture(kk_drv *d, const kk_launch *ls, int n, const unsigned char *args,
		const uint32_t *offs, uint64_t *exec, int *step) {
	CUgraph g = NULL;
	CUgraphExec e = NULL;
	int failed;
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	*exec = 0;
	*step = 0;
	if (r) return r;
	// Thread-local mode: other threads' calls are not disturbed.
	if ((r = d->cuStreamBeginCapture(d->stream, 1))) return r;
	*step = 1;
	CUresult lr = kk_launch_raw(d, ls, n, args, offs, &failed);
	r = d->cuStreamEndCapture(d->stream, &g);
	if (lr) { if (g) d->cuGraphDestroy(g); return lr; }
	if (r) { if (g) d->cuGraphDestroy(g); return r; }
	*step = 2;
	r = d->cuGraphInstantiateWithFlags(&e, g, 0);
	d->cuGraphDestroy(g);
	if (r) return r;
	*exec = (uint64_t)(uintptr_t)e;
	return 0;
}

static CUresult kk_graph_launch(kk_drv *d, uint64_t e) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuGraphLaunch((CUgraphExec)(uintptr_t)e, d->stream);
}

static CUresult kk_graph_destroy(kk_drv *d, uint64_t e) {
	CUresult r = d->cuCtxSetCurrent(d->ctx);
	return r ? r : d->cuGraphExecDestroy((CUgraphExec)(uintptr_t)e);
}

// kk_blas_open loads cuBLAS and makes a handle on the backend's stream.
// It returns a static message on failure, or NULL; *status is cuBLAS's.
static const char *kk_blas_open(kk_drv *d, const char *lib, int *status) {
	*status = 0;
	d->blas = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!d->blas) return dlerror();
	*(void **)(&d->cublasCreate) = dlsym(d->blas, "cublasCreate_v2");
	*(void **)(&d->cublasDestroy) = dlsym(d->blas, "cublasDestroy_v2");
	*(void **)(&d->cublasSetStream) = dlsym(d->blas, "cublasSetStream_v2");
	*(void **)(&d->cublasGemmEx) = dlsym(d->blas, "cublasGemmEx");
	if (!d->cublasCreate || !d->cublasDestroy || !d->cublasSetStream || !d->cublasGemmEx) {
		dlclose(d->blas);
		d->blas = NULL;
		return "missing cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2 or cublasGemmEx";
	}
	if (d->cuCtxSetCurrent(d->ctx) || (*status = d->cublasCreate(&d->blasHandle))) {
		d->blasHandle = NULL;
		return "cublasCreate_v2 failed";
	}
	if ((*status = d->cublasSetStream(d->blasHandle, d->stream))) {
		d->cublasDestroy(d->blasHandle);
		d->blasHandle = NULL;
		return "cublasSetStream_v2 failed";
	}
	return NULL;
}

// kk_sgemm sets C (m x n, column-major, leading dimension ldc) to A^T B
// with A k x m (lda = k) and B k x n (ldb = k), all float32: row-major
// out[n][ldc] = x[n][k] times w[m][k] transposed.
static int kk_sgemm(kk_drv *d, uint64_t c, uint64_t a, uint64_t b, int m, int n, int k, int ldc, int compute) {
	float alpha = 1, beta = 0;
	if (d->cuCtxSetCurrent(d->ctx)) return 1; // CUBLAS_STATUS_NOT_INITIALIZED
	return d->cublasGemmEx(d->blasHandle, 1, 0, m, n, k, &alpha, (const void *)(uintptr_t)a, 0, k,
		(const void *)(uintptr_t)b, 0, k, &beta, (void *)(uintptr_t)c, 0, ldc, compute, -1);
}

// kk_gemm16 is kk_sgemm with A and B of the 16-bit type dtype
// (CUDA_R_16BF or CUDA_R_16F), C float32 and float32 compute.
static int kk_gemm16(kk_drv *d, uint64_t c, uint64_t a, uint64_t b, int m, int n, int k, int ldc, int dtype) {
	float alpha = 1, beta = 0;
	if (d->cuCtxSetCurrent(d->ctx)) return 1; // CUBLAS_STATUS_NOT_INITIALIZED
	return d->cublasGemmEx(d->blasHandle, 1, 0, m, n, k, &alpha, (const void *)(uintptr_t)a, dtype, k,
		(const void *)(uintptr_t)b, dtype, k, &beta, (void *)(uintptr_t)c, 0, ldc, 68, -1);
}

static CUresult kk_shutdown(kk_drv *d) {
	CUresult r = 0, r2;
	if (d->blasHandle) {
		d->cuCtxSetCurrent(d->ctx);
		d->cublasDestroy(d->blasHandle);
		d->blasHandle = NULL;
	}
	if (d->ctx) {
		r = d->cuCtxSetCurrent(d->ctx);
		if (d->stream) { r2 = d->cuStreamSynchronize(d->stream); if (!r) r = r2; r2 = d->cuStreamDestroy(d->stream); if (!r) r = r2; }
		if (d->mod) { r2 = d->cuModuleUnload(d->mod); if (!r) r = r2; }
		d->cuCtxSetCurrent(NULL);
		r2 = d->cuDevicePrimaryCtxRelease(d->dev);
		if (!r) r = r2;
	}
	d->ctx = d->stream = d->mod = NULL;
	return r;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/kakeya-ai/kakeya/tensor"
)

// libName is the driver library the backend opens: the NVIDIA driver
// installs it (libcuda.so is the toolkit's development link, absent on a
// machine with only the driver).
const libName = "libcuda.so.1"

// defaultShared is the dynamic shared memory a kernel may use without
// cuFuncSetAttribute.
const defaultShared = 48 << 10

// minMajor is the oldest compute capability the embedded PTX runs on: it
// is compiled for sm_80, and the driver JIT-compiles PTX only for its
// target or newer.
const minMajor = 8

// Device attributes (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock   = 1
	attrMultiprocessorCount  = 16
	attrMemoryClockRate      = 36
	attrGlobalMemoryBusWidth = 37
	attrComputeMajor         = 75
	attrComputeMinor         = 76
	attrMaxSharedOptin       = 97
)

// libcuda is the driver of a real device.
type libcuda struct {
	d       *C.kk_drv // C memory: it holds C pointers only
	dev     deviceInfo
	blasErr error             // why cuBLAS is not used, nil when it is
	cublas  cublasLoad        // the cuBLAS loaded and what was tried (blasload.go)
	fns     map[string]uint64 // CUfunction by kernel name, resolved once
	shared  map[uint64]uint32 // dynamic shared memory each function was allowed past 48 KiB
	batch   []C.kk_launch
	args    []byte
	offs    []uint32         // parameter offsets of the batch's launches
	hosts   []unsafe.Pointer // hostStage's page-locked memory, freed by close
}

// openLibrary is openDriver with the libraries named (tests load stubs).
func openLibrary(lib string, blasLibs []string, ordinal int, ptx []byte) (driver, error) {
	d := (*C.kk_drv)(C.calloc(1, C.sizeof_kk_drv))
	var missing *C.char
	cname := C.CString(lib)
	defer C.free(unsafe.Pointer(cname))
	if msg := C.kk_open(d, cname, &missing); msg != nil {
		err := fmt.Errorf("cuda: dlopen(%q): %s (the CUDA backend needs the NVIDIA driver installed; the CPU backend runs without it)", lib, C.GoString(msg))
		if missing != nil {
			err = fmt.Errorf("cuda: %s has no %s: the NVIDIA driver is too old for the CUDA backend", lib, C.GoString(missing))
		}
		C.kk_close_lib(d)
		C.free(unsafe.Pointer(d))
		return nil, err
	}
	l := &libcuda{d: d, fns: map[string]uint64{}, shared: map[uint64]uint32{}}
	if err := l.init(ordinal, ptx); err != nil {
		l.close()
		return nil, err
	}
	l.blasErr = l.openBLAS(blasLibs)
	return l, nil
}

// openBLAS loads cuBLAS for prefill GEMMs; without it the backend uses its
// own matrix kernel.
func (l *libcuda) openBLAS(libs []string) error {
	var errs []string
	for _, lib := range libs {
		lt := openCublasLt(lib) // a wheel's or toolkit's libcublas needs it, maybe without RPATH
		cname := C.CString(lib)
		var status C.int
		msg := C.kk_blas_open(l.d, cname, &status)
		C.free(unsafe.Pointer(cname))
		if msg == nil {
			l.cublas.loaded(lib, lt, unsafe.Pointer(l.d.blas), unsafe.Pointer(l.d.blasHandle))
			return nil
		}
		e := fmt.Sprintf("%s: %s", lib, C.GoString(msg))
		if status != 0 {
			e += fmt.Sprintf(" (cublasStatus %d)", int(status))
		}
		errs = append(errs, l.cublas.failed(lib, e, lt, l.d.blas != nil))
		if l.d.blas != nil {
			break // loaded, but unusable: a later version would not do better
		}
	}
	return fmt.Errorf("cuda: no cuBLAS: %s", strings.Join(errs, "; "))
}

// blas returns why cuBLAS is unavailable, nil when sgemm works.
func (l *libcuda) blas() error { return l.blasErr }

// sgemm implements gemmer: cublasGemmEx on float32 operands, in stream
// order.
func (l *libcuda) sgemm(out, x, w Ptr, n, rows, cols, ldc int, tf32 bool) error {
	compute := C.int(cublasCompute32F)
	if tf32 {
		compute = cublasCompute32FFastTF32
	}
	if st := C.kk_sgemm(l.d, C.uint64_t(out), C.uint64_t(w), C.uint64_t(x), C.int(rows), C.int(n), C.int(cols), C.int(ldc), compute); st != 0 {
		return fmt.Errorf("cuda: cublasGemmEx(%d x %d times %d x %d transposed): %s", n, cols, rows, cols, cublasStatus(int(st)))
	}
	return nil
}

// gemmEx implements gemmer: cublasGemmEx on bf16 or f16 operands with a
// float32 result and float32 compute, in stream order.
func (l *libcuda) gemmEx(out, x, w Ptr, n, rows, cols, ldc int, dt tensor.DType) error {
	typ := C.int(cudaR16BF)
	if dt == tensor.F16 {
		typ = cudaR16F
	}
	if st := C.kk_gemm16(l.d, C.uint64_t(out), C.uint64_t(w), C.uint64_t(x), C.int(rows), C.int(n), C.int(cols), C.int(ldc), typ); st != 0 {
		return fmt.Errorf("cuda: cublasGemmEx(%v: %d x %d times %d x %d transposed): %s", dt, n, cols, rows, cols, cublasStatus(int(st)))
	}
	return nil
}

// cudaDataType_t values.
const (
	cudaR16F  = 2
	cudaR16BF = 14
)

// cuBLAS compute types.
const (
	cublasCompute32F         = 68
	cublasCompute32FFastTF32 = 77
)

// err turns a CUresult into an *Error naming the call, in the driver's own
// words when it has them.
func (l *libcuda) err(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	e := newError(call, Result(r))
	var name, msg *C.char
	C.kk_error_text(l.d, r, &name, &msg)
	if name != nil {
		e.Name = C.GoString(name)
	}
	if msg != nil {
		e.Msg = C.GoString(msg)
	}
	return e
}

func (l *libcuda) init(ordinal int, ptx []byte) error {
	var step C.int
	if r := C.kk_init(l.d, C.int(ordinal), &step); r != 0 {
		call := [...]string{"cuInit", fmt.Sprintf("cuDeviceGet(%d)", ordinal), "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuStreamCreate"}[step]
		if step == 1 {
			var n C.int
			C.kk_count(l.d, &n)
			call = fmt.Sprintf("cuDeviceGet(%d) of %d devices", ordinal, int(n))
		}
		return l.err(call, r)
	}
	l.dev.Ordinal = ordinal
	buf := make([]byte, 256)
	if r := C.kk_name(l.d, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf))); r != 0 {
		return l.err("cuDeviceGetName", r)
	}
	l.dev.Name = C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
	var total C.size_t
	if r := C.kk_total(l.d, &total); r != 0 {
		return l.err("cuDeviceTotalMem", r)
	}
	l.dev.TotalMem = uint64(total)
	var v C.int
	C.kk_version(l.d, &v)
	l.dev.DriverVersion = int(v)
	for _, a := range []struct {
		attr int
		dst  *int
	}{
		{attrComputeMajor, &l.dev.Major}, {attrComputeMinor, &l.dev.Minor},
		{attrMultiprocessorCount, &l.dev.SMs}, {attrMaxThreadsPerBlock, &l.dev.MaxThreadsPerBlock},
		{attrMemoryClockRate, &l.dev.MemClockKHz}, {attrGlobalMemoryBusWidth, &l.dev.BusWidth},
		{attrMaxSharedOptin, &l.dev.MaxSharedPerBlockOptin},
	} {
		// An attribute a driver no longer reports (the memory clock is
		// deprecated) leaves zero: only the bandwidth bound needs it.
		if r := C.kk_attr(l.d, C.int(a.attr), &v); r == 0 {
			*a.dst = int(v)
		}
	}
	if l.dev.Major < minMajor {
		return fmt.Errorf("cuda: %s is sm_%d%d; the CUDA backend's kernels need compute capability %d.0 (Ampere) or newer", l.dev.Name, l.dev.Major, l.dev.Minor, minMajor)
	}
	if len(ptx) == 0 || ptx[len(ptx)-1] != 0 {
		ptx = append(ptx[:len(ptx):len(ptx)], 0)
	}
	cptx := C.CBytes(ptx)
	defer C.free(cptx)
	const logSize = 16 << 10
	log := (*C.char)(C.calloc(1, logSize))
	defer C.free(unsafe.Pointer(log))
	if r := C.kk_load(l.d, cptx, log, logSize); r != 0 {
		err := l.err(fmt.Sprintf("cuModuleLoadDataEx (JIT of the embedded PTX for sm_%d%d)", l.dev.Major, l.dev.Minor), r)
		if s := C.GoString(log); s != "" {
			err = fmt.Errorf("%w; JIT log: %s", err, s)
		}
		return err
	}
	return nil
}

func (l *libcuda) info() deviceInfo { return l.dev }

func (l *libcuda) alloc(bytes int) (Ptr, error) {
	var p C.uint64_t
	if r := C.kk_alloc(l.d, C.size_t(bytes), &p); r != 0 {
		return 0, l.err("cuMemAlloc of "+mib(bytes), r)
	}
	return Ptr(p), nil
}

func (l *libcuda) free(p Ptr) error {
	return l.err(fmt.Sprintf("cuMemFree(%#x)", uint64(p)), C.kk_free(l.d, C.uint64_t(p)))
}

func (l *libcuda) zero(p Ptr, bytes int) error {
	return l.err(fmt.Sprintf("cuMemsetD8Async(%#x, %d bytes)", uint64(p), bytes), C.kk_zero(l.d, C.uint64_t(p), C.size_t(bytes)))
}

func (l *libcuda) copyIn(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	r := C.kk_htod(l.d, C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	return l.err(fmt.Sprintf("cuMemcpyHtoD(%#x, %d bytes)", uint64(dst), len(src)), r)
}

// hostStage returns bytes bytes of page-locked host memory, for
// copyInAsync, freed by close (cuMemHostAlloc; a driver without it
// returns an error and the backend copies synchronously).
func (l *libcuda) hostStage(bytes int) ([]byte, error) {
	var p unsafe.Pointer
	if err := l.err(fmt.Sprintf("cuMemHostAlloc(%d bytes)", bytes), C.kk_host_alloc(l.d, &p, C.size_t(bytes))); err != nil {
		return nil, err
	}
	l.hosts = append(l.hosts, p)
	return unsafe.Slice((*byte)(p), bytes), nil
}

// copyInAsync copies src, which lies in hostStage's memory, to dst in
// stream order without waiting (cuMemcpyHtoDAsync): the caller leaves src
// unchanged until the stream has passed the copy.
func (l *libcuda) copyInAsync(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	r := C.kk_htod_async(l.d, C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	return l.err(fmt.Sprintf("cuMemcpyHtoDAsync(%#x, %d bytes)", uint64(dst), len(src)), r)
}

func (l *libcuda) copyOut(dst []byte, src Ptr) error {
	if len(dst) == 0 {
		return l.sync()
	}
	r := C.kk_dtoh(l.d, unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst)))
	return l.err(fmt.Sprintf("cuMemcpyDtoHAsync(%#x, %d bytes)", uint64(src), len(dst)), r)
}

func (l *libcuda) copyDevice(dst, src Ptr, bytes int) error {
	r := C.kk_dtod(l.d, C.uint64_t(dst), C.uint64_t(src), C.size_t(bytes))
	return l.err(fmt.Sprintf("cuMemcpyDtoDAsync(%#x, %#x, %d bytes)", uint64(dst), uint64(src), bytes), r)
}

func (l *libcuda) sync() error { return l.err("cuStreamSynchronize", C.kk_sync(l.d)) }

// prepare resolves the kernels of ls and packs their arguments into one
// buffer, each at a 16-byte aligned offset (the parameter buffer's
// alignment is that of its widest member).
func (l *libcuda) prepare(ls []Launch) error {
	l.batch, l.args, l.offs = l.batch[:0], l.args[:0], l.offs[:0]
	for _, x := range ls {
		fn, ok := l.fns[x.Kernel]
		if !ok {
			name := C.CString(x.Kernel)
			var f C.uint64_t
			r := C.kk_function(l.d, name, &f)
			C.free(unsafe.Pointer(name))
			if r != 0 {
				return l.err(fmt.Sprintf("cuModuleGetFunction(%q)", x.Kernel), r)
			}
			fn = uint64(f)
			l.fns[x.Kernel] = fn
		}
		if x.Shared > defaultShared && x.Shared > l.shared[fn] {
			if r := C.kk_max_shared(l.d, C.uint64_t(fn), C.int(x.Shared)); r != 0 {
				return l.err(fmt.Sprintf("cuFuncSetAttribute(%s, max dynamic shared memory, %d bytes)", x.Kernel, x.Shared), r)
			}
			l.shared[fn] = x.Shared
		}
		for len(l.args)%16 != 0 {
			l.args = append(l.args, 0)
		}
		if len(x.Params) > maxParams {
			return fmt.Errorf("cuda: %s: %d parameters, more than %d", x.Kernel, len(x.Params), maxParams)
		}
		l.batch = append(l.batch, C.kk_launch{
			fn:     C.uint64_t(fn),
			grid:   [3]C.uint32_t{C.uint32_t(x.Grid.X), C.uint32_t(x.Grid.Y), C.uint32_t(x.Grid.Z)},
			block:  [3]C.uint32_t{C.uint32_t(x.Block.X), C.uint32_t(x.Block.Y), C.uint32_t(x.Block.Z)},
			shared: C.uint32_t(x.Shared), argOff: C.uint32_t(len(l.args)),
			paramOff: C.uint32_t(len(l.offs)), nparams: C.uint32_t(len(x.Params)),
		})
		l.args = append(l.args, x.Args...)
		l.offs = append(l.offs, x.Params...)
	}
	if len(l.args) == 0 {
		l.args = append(l.args, 0) // a valid address for the empty case
	}
	if len(l.offs) == 0 {
		l.offs = append(l.offs, 0)
	}
	return nil
}

func (l *libcuda) launch(ls []Launch) error {
	if len(ls) == 0 {
		return nil
	}
	if err := l.prepare(ls); err != nil {
		return err
	}
	var failed C.int
	r := C.kk_launch_all(l.d, &l.batch[0], C.int(len(ls)), (*C.uchar)(unsafe.Pointer(&l.args[0])), (*C.uint32_t)(&l.offs[0]), &failed)
	if r != 0 {
		x := ls[max(int(failed), 0)]
		return l.err(fmt.Sprintf("cuLaunchKernel(%s, grid %v, block %v, %d bytes shared)", x.Kernel, x.Grid, x.Block, x.Shared), r)
	}
	return nil
}

func (l *libcuda) capture(ls []Launch) (graphExec, error) {
	if C.kk_graphs(l.d) == 0 {
		return 0, fmt.Errorf("cuda: %s lacks cuStreamBeginCapture_v2 or cuGraphInstantiateWithFlags: %w", libName, errGraphsUnsupported)
	}
	if err := l.prepare(ls); err != nil {
		return 0, err
	}
	var e C.uint64_t
	var step C.int
	r := C.kk_capture(l.d, &l.batch[0], C.int(len(ls)), (*C.uchar)(unsafe.Pointer(&l.args[0])), (*C.uint32_t)(&l.offs[0]), &e, &step)
	if r != 0 {
		call := [...]string{"cuStreamBeginCapture", "capture of launches", "cuGraphInstantiateWithFlags"}[step]
		return 0, l.err(fmt.Sprintf("%s (%d launches)", call, len(ls)), r)
	}
	return graphExec(e), nil
}

func (l *libcuda) launchGraph(g graphExec) error {
	return l.err("cuGraphLaunch", C.kk_graph_launch(l.d, C.uint64_t(g)))
}

func (l *libcuda) destroyGraph(g graphExec) error {
	return l.err("cuGraphExecDestroy", C.kk_graph_destroy(l.d, C.uint64_t(g)))
}

func (l *libcuda) close() error {
	if l.d == nil {
		return nil
	}
	var err error
	for _, p := range l.hosts {
		if e := l.err("cuMemFreeHost", C.kk_host_free(l.d, p)); err == nil {
			err = e
		}
	}
	l.hosts = nil
	if e := l.err("release of the stream, module and context", C.kk_shutdown(l.d)); err == nil {
		err = e
	}
	// The library stays loaded: unloading libcuda while the driver's own
	// threads may still run is not safe, and a process loads it once.
	C.free(unsafe.Pointer(l.d))
	l.d = nil
	return err
}
