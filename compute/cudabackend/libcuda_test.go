//go:build cgo && linux

package cudabackend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
)

// stubLibcuda is a stand-in for libcuda.so.1, compiled by the test, so that
// the real driver's C trampolines, symbol lookup, error mapping, argument
// passing and graph capture run without a GPU. Its "device" is host
// memory; it implements one kernel, "add" (float *x, const float *y, int
// n: 20 bytes of parameters), and records graph captures. As the real
// driver does, it reads a launch's parameters through kernelParams, or
// from an extra buffer only of exactly the kernel's parameter size, and it
// fails a call that needs a context on a thread where none is current
// (the current context is per OS thread).
const stubLibcuda = `
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
static const char *names[] = {"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY"};
CUresult cuInit(unsigned f) {
#ifdef NO_DEVICE
	return 100;
#endif
	return 0;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
	if (r == 100) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }
	if (r < 0 || r > 2) return 1;
	*s = names[r]; return 0;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	*s = r == 100 ? "no CUDA-capable device is detected" : r == 2 ? "out of memory" : "stub error";
	return 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return o == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *b, int n, int d) { strncpy(b, "Stub GPU", n); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
	switch (a) {
#ifdef OLD_GPU
	case 75: *v = 7; return 0;
	case 76: *v = 5; return 0;
#else
	case 75: *v = 9; return 0;
	case 76: *v = 0; return 0;
#endif
	case 16: *v = 132; return 0;
	case 36: *v = 2619000; return 0;
	case 37: *v = 5120; return 0;
	}
	*v = 0; return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *n, int d) { *n = (size_t)80 << 30; return 0; }
static int ctx;
static __thread void *current;
#define NEED_CTX if (current != &ctx) return 201 // CUDA_ERROR_INVALID_CONTEXT
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = &ctx; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
CUresult cuCtxSetCurrent(void *c) { current = c; return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *opts, void **vals) {
	NEED_CTX;
	// The image must arrive NUL-terminated, as the JIT reads a C string.
	if (strstr((const char *)img, ".version") == NULL) {
		strcpy((char *)vals[0], "stub: no .version directive");
		return 218;
	}
	*m = &ctx; return 0;
}
CUresult cuModuleUnload(void *m) { NEED_CTX; return 0; }
static int maxShared = 48 * 1024;
CUresult cuFuncSetAttribute(void *f, int attr, int v) {
	NEED_CTX;
	if (attr != 8 || v > 227 * 1024) return 1;
	maxShared = v; return 0;
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	NEED_CTX;
	if (strcmp(name, "add") == 0) { *f = (void *)"add"; return 0; }
	if (strcmp(name, "to_bf16") == 0) { *f = (void *)"to_bf16"; return 0; }
	return 500;
}
#ifndef MISSING_ALLOC
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
	NEED_CTX;
	if (n > ((size_t)1 << 20)) return 2;
	*p = (uint64_t)(uintptr_t)calloc(1, n); return 0;
}
#endif
CUresult cuMemFree_v2(uint64_t p) { NEED_CTX; free((void *)(uintptr_t)p); return 0; }
CUresult cuMemsetD8Async(uint64_t p, unsigned char v, size_t n, void *s) { NEED_CTX; memset((void *)(uintptr_t)p, v, n); return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) { NEED_CTX; memcpy((void *)(uintptr_t)d, s, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *d, uint64_t s, size_t n, void *st) { NEED_CTX; memcpy(d, (void *)(uintptr_t)s, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(uint64_t d, uint64_t s, size_t n, void *st) { NEED_CTX; memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
#ifndef NO_PINNED
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { NEED_CTX; if (f != 1) return 1; *p = calloc(1, n); return 0; }
CUresult cuMemFreeHost(void *p) { NEED_CTX; free(p); return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *s, size_t n, void *st) { NEED_CTX; memcpy((void *)(uintptr_t)d, s, n); return 0; }
#endif
CUresult cuStreamCreate(void **s, unsigned f) { NEED_CTX; *s = &ctx; return 0; }
CUresult cuStreamDestroy_v2(void *s) { NEED_CTX; return 0; }
CUresult cuStreamSynchronize(void *s) { NEED_CTX; return 0; }

// Launches: the add kernel runs at once, or is recorded while capturing.
// Its parameters: x at 0, y at 8, n at 16; 20 bytes. to_bf16 has the
// same layout (out, x, n) and rounds x to bf16 at out, ties to even.
typedef struct { float *x, *y; int n, bf16; } add_args;
static add_args graph[64];
static int capturing, recorded;
static void run_add(add_args a) {
	if (a.bf16) {
		uint16_t *o = (uint16_t *)a.x;
		for (int i = 0; i < a.n; i++) {
			uint32_t u;
			memcpy(&u, &a.y[i], 4);
			o[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
		}
		return;
	}
	for (int i = 0; i < a.n; i++) a.x[i] += a.y[i];
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, void *s, void **params, void **extra) {
	NEED_CTX;
	add_args a;
	a.bf16 = strcmp((const char *)f, "to_bf16") == 0;
	if (params != NULL) {
		if (extra != NULL) return 1;
		a.x = *(float **)params[0];
		a.y = *(float **)params[1];
		a.n = *(int *)params[2];
	} else {
		// CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE: the
		// size must be the kernel's own.
		if (extra == NULL || extra[0] != (void *)1 || extra[2] != (void *)2 || extra[4] != NULL) return 1;
		if (*(size_t *)extra[3] != 20) return 1;
		const char *b = extra[1];
		memcpy(&a.x, b, 8);
		memcpy(&a.y, b + 8, 8);
		memcpy(&a.n, b + 16, 4);
	}
	if (gx * bx < 1 || shared > maxShared) return 1;
	if (capturing) {
		if (recorded == 64) return 900;
		graph[recorded++] = a;
		return 0;
	}
	run_add(a);
	return 0;
}
CUresult cuStreamBeginCapture_v2(void *s, int mode) { NEED_CTX; capturing = 1; recorded = 0; return 0; }
CUresult cuStreamEndCapture(void *s, void **g) { NEED_CTX; capturing = 0; *g = graph; return 0; }
CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long f) {
	NEED_CTX;
#ifdef NO_GRAPHS
	return 801;
#endif
	*e = g; return 0;
}
CUresult cuGraphLaunch(void *e, void *s) { NEED_CTX; for (int i = 0; i < recorded; i++) run_add(graph[i]); return 0; }
CUresult cuGraphExecDestroy(void *e) { NEED_CTX; return 0; }
CUresult cuGraphDestroy(void *g) { NEED_CTX; return 0; }
`

// buildStub compiles the stub library with the given -D flags.
func buildStub(t *testing.T, source string, defines ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the stub driver: %v", cc, err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libcuda-stub.so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", lib, src}, defines...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return lib
}

var stubPTX = []byte(".version 7.8\n.target sm_80\n")

// The real driver's failures name the call, the CUresult by the driver's
// own name and message, and what was asked.
func TestLibcudaErrors(t *testing.T) {
	if _, err := openLibrary("/nonexistent/libcuda.so.1", nil, 0, stubPTX); err == nil ||
		!strings.Contains(err.Error(), `dlopen("/nonexistent/libcuda.so.1")`) || !strings.Contains(err.Error(), "the CPU backend runs without it") {
		t.Errorf("missing library: %v", err)
	}
	for _, tc := range []struct {
		name    string
		defines []string
		ordinal int
		ptx     []byte
		want    []string
		code    Result
	}{
		{"no device", []string{"-DNO_DEVICE"}, 0, stubPTX, []string{"cuda: cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"}, ErrNoDevice},
		{"missing symbol", []string{"-DMISSING_ALLOC"}, 0, stubPTX, []string{"has no cuMemAlloc_v2", "too old"}, 0},
		{"bad ordinal", nil, 3, stubPTX, []string{"cuDeviceGet(3) of 1 devices", "(101)"}, 101},
		{"old GPU", []string{"-DOLD_GPU"}, 0, stubPTX, []string{"Stub GPU is sm_75", "compute capability 8.0 (Ampere) or newer"}, 0},
		{"bad PTX", nil, 0, []byte("garbage"), []string{"cuModuleLoadDataEx (JIT of the embedded PTX for sm_90)", "(218)", "JIT log: stub: no .version directive"}, 218},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := openLibrary(buildStub(t, stubLibcuda, tc.defines...), nil, tc.ordinal, tc.ptx)
			if err == nil {
				t.Fatal("opened")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.code != 0 && !errors.Is(err, tc.code) {
				t.Errorf("error %q does not match %v", err, tc.code)
			}
		})
	}
}

// Through the real driver's trampolines, hostStage gets page-locked
// memory (cuMemHostAlloc, portable) that copyInAsync copies from
// (cuMemcpyHtoDAsync on the backend's stream), freed by close; a driver
// without those calls refuses hostStage, and the backend copies in
// synchronously.
func TestLibcudaHostStage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		defines []string
	}{{"pinned", nil}, {"none", []string{"-DNO_PINNED"}}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := openLibrary(buildStub(t, stubLibcuda, tc.defines...), nil, 0, stubPTX)
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			buf, err := d.hostStage(64)
			if tc.defines != nil {
				if err == nil || !strings.Contains(err.Error(), "cuMemHostAlloc(64 bytes)") {
					t.Fatalf("hostStage without the calls: %v", err)
				}
				b := newBackend(d, Options{})
				if b.asyncCopies() {
					t.Error("the backend copies asynchronously without page-locked memory")
				}
				return
			}
			if err != nil || len(buf) != 64 {
				t.Fatalf("hostStage: %d bytes, %v", len(buf), err)
			}
			p, err := d.alloc(64)
			if err != nil {
				t.Fatal(err)
			}
			for i := range buf {
				buf[i] = byte(3 * i)
			}
			if err := d.copyInAsync(p+8, buf[:40]); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 40)
			if err := d.copyOut(got, p+8); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, buf[:40]) {
				t.Fatalf("copied %v, want %v", got, buf[:40])
			}
		})
	}
}

// Through the stub, the backend's buffers, copies and launches reach the
// driver as they would a GPU: Add computes, a failed allocation says its
// size, and a repeated run of launches is captured once and replayed.
func TestLibcudaBackend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		defines []string
		graphs  bool
	}{{"graphs", nil, true}, {"no graphs", []string{"-DNO_GRAPHS"}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := openLibrary(buildStub(t, stubLibcuda, tc.defines...), []string{"/nonexistent/libcublas.so.13"}, 0, stubPTX)
			if err != nil {
				t.Fatal(err)
			}
			b := newBackend(d, Options{})
			if got := b.GEMM(); !strings.Contains(got, `matmul kernel (cuda: no cuBLAS: /nonexistent/libcublas.so.13: /nonexistent/libcublas.so.13: cannot open`) {
				t.Errorf("GEMM() = %q", got)
			}
			if got := b.Device(); !strings.Contains(got, "Stub GPU (sm_90, 132 SMs, 80.0 GiB, 3352 GB/s)") {
				t.Errorf("Device() = %q", got)
			}
			x, y := b.Alloc(5), b.Alloc(5)
			b.Write(x, []float32{1, 2, 3, 4, 5})
			b.Write(y, []float32{10, 20, 30, 40, 50})
			for range 4 {
				// A run of minGraphRun launches, repeated: launched, then
				// captured and replayed.
				for range minGraphRun {
					b.Add(x, y)
				}
				b.Read(make([]float32, 1), x)
			}
			got := make([]float32, 5)
			b.Read(got, x)
			for i, v := range got {
				if want := float32(i+1) * (1 + 10*4*minGraphRun); v != want {
					t.Fatalf("x[%d] = %v, want %v", i, v, want)
				}
			}
			captures, replays, direct, off := b.GraphStats()
			if tc.graphs && (captures != 1 || replays != 3 || direct != minGraphRun || off != nil) {
				t.Errorf("graphs: %d captures, %d replays, %d direct, off %v; want 1, 3, %d, nil", captures, replays, direct, off, minGraphRun)
			}
			if !tc.graphs && (captures != 0 || off == nil || !strings.Contains(off.Error(), "CUDA_ERROR_NOT_SUPPORTED") && !strings.Contains(off.Error(), "(801)")) {
				t.Errorf("refused graphs: %d captures, off %v", captures, off)
			}
			if _, err := b.Upload(tensor.Mat{DType: tensor.F32, Rows: 1024, Cols: 1024, F32: make([]float32, 1<<20)}); err == nil ||
				!strings.Contains(err.Error(), "cuMemAlloc of 4 MiB (4194304 bytes): CUDA_ERROR_OUT_OF_MEMORY (2): out of memory") || !errors.Is(err, ErrOutOfMemory) {
				t.Errorf("oversized upload: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// stubCublas stands in for libcublas: cublasGemmEx computes on the host,
// checking that it is asked for the product the backend means (A
// transposed, B not; A and B both float32 with float32 or TF32 compute,
// or both bf16 (CUDA_R_16BF, 14) or f16 (CUDA_R_16F, 2) with float32
// compute; C float32) with consistent leading dimensions.
const stubCublas = `
#include <stdint.h>
#include <string.h>
int cublasCreate_v2(void **h) { static int x; *h = &x; return 0; }
int cublasDestroy_v2(void *h) { return 0; }
int cublasSetStream_v2(void *h, void *s) { return 0; }
static double half(uint16_t h) {
	int e = (h >> 10) & 31, m = h & 1023;
	double v = e ? (1024 + m) / 1024.0 : m / 1024.0;
	for (e = e ? e - 15 : -14; e > 0; e--) v *= 2;
	for (; e < 0; e++) v /= 2;
	return h & 0x8000 ? -v : v;
}
static double elem(const void *p, int type, long i) {
	if (type == 0) return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	if (type == 2) return half(h);
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
		const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
	if (ta != 1 || tb != 0 || at != bt || ct != 0 || lda < k || ldb < k || ldc < m) return 7;
	if (!(at == 0 && (compute == 68 || compute == 77)) && !((at == 14 || at == 2) && compute == 68)) return 7;
	if (*(const float *)alpha != 1 || *(const float *)beta != 0) return 7;
	float *c = C;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;
			for (int l = 0; l < k; l++) s += elem(A, at, (long)i * lda + l) * elem(B, bt, (long)j * ldb + l);
			c[j * ldc + i] = (float)s;
		}
	return 0;
}
`

// Through the stub driver and a stub cuBLAS, a prefill product reaches
// cublasGemmEx with the operands, transposes, types and leading
// dimensions that give x times w transposed: float32 operands for a
// float32 weight (and for every weight with Options.MatMul f32, bf16 and
// f16 weights widened), bf16 or f16 operands for a bf16 or f16 weight
// (the activations rounded by to_bf16 or to_f16_rows, which the stub
// driver does not run: the stub cuBLAS then reads zeroed activations, so
// the 16-bit case checks that the call is accepted and the output
// written). Above 256 rows cuBLAS runs untuned.
func TestLibcudaCUBLAS(t *testing.T) {
	d, err := openLibrary(buildStub(t, stubLibcuda), []string{"/nonexistent/libcublas.so.13", buildStub(t, stubCublas)}, 0, stubPTX)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(d, Options{ExactGEMM: true, MatMul: "f32"})
	if got := b.GEMM(); got != "cuBLAS (float32)" {
		t.Fatalf("GEMM() = %q", got)
	}
	const n, rows, cols = 10, 3, 4
	w := tensor.Mat{DType: tensor.F32, Rows: rows, Cols: cols, F32: make([]float32, rows*cols)}
	x := make([]float32, n*cols)
	for i := range w.F32 {
		w.F32[i] = float32(i%5) - 2
	}
	for i := range x {
		x[i] = float32(i%7) * 0.5
	}
	wt, err := b.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	out := b.Alloc(n * rows)
	b.MatMul(out, upload(b, x), n, wt)
	got := read(b, out)
	for i := range n {
		for r := range rows {
			var want float32
			for c := range cols {
				want += x[i*cols+c] * w.F32[r*cols+c]
			}
			if got[i*rows+r] != want {
				t.Fatalf("out[%d][%d] = %v, want %v", i, r, got[i*rows+r], want)
			}
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}

	// A bf16 weight: to_bf16 (run by the stub driver) rounds the
	// activations and cublasGemmEx multiplies bf16 operands; the stub
	// cuBLAS rejects a wrong type, transpose or compute type with
	// CUBLAS_STATUS_INVALID_VALUE, which would fail the backend. Values
	// exact in bf16 give the exact product.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = openLibrary(buildStub(t, stubLibcuda), []string{buildStub(t, stubCublas)}, 0, stubPTX)
	if err != nil {
		t.Fatal(err)
	}
	b16 := newBackend(d, Options{})
	defer b16.Close()
	const n16 = 300 // above 256 rows: cuBLAS, untuned
	m := tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, U16: make([]uint16, rows*cols)}
	for i := range m.U16 {
		m.U16[i] = tensor.F32ToBF16(float32(i%5) - 2)
	}
	x16 := make([]float32, n16*cols)
	for i := range x16 {
		x16[i] = float32(i%7) * 0.5
	}
	wt16, err := b16.Upload(m)
	if err != nil {
		t.Fatal(err)
	}
	out16 := b16.Alloc(n16 * rows)
	b16.MatMul(out16, upload(b16, x16), n16, wt16)
	got16 := read(b16, out16)
	if err := b16.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n16 {
		for r := range rows {
			var want float32
			for c := range cols {
				want += x16[i*cols+c] * tensor.BF16ToF32(m.U16[r*cols+c])
			}
			if got16[i*rows+r] != want {
				t.Fatalf("bf16: out[%d][%d] = %v, want %v", i, r, got16[i*rows+r], want)
			}
		}
	}
}

// A launch asking for more than 48 KiB of dynamic shared memory first
// raises its kernel's limit; past the device's, it fails naming the call.
func TestLibcudaSharedMemory(t *testing.T) {
	d, err := openLibrary(buildStub(t, stubLibcuda), nil, 0, stubPTX)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	x, err := d.alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	l := addLaunch(x, x, 4)
	l.Shared = 100 << 10
	if err := d.launch([]Launch{l}); err != nil {
		t.Errorf("launch with 100 KiB of shared memory: %v", err)
	}
	l.Shared = 300 << 10
	if err := d.launch([]Launch{l}); err == nil || !strings.Contains(err.Error(), "cuFuncSetAttribute(add, max dynamic shared memory, 307200 bytes)") {
		t.Errorf("launch past the device's shared memory: %v", err)
	}
}

// The current context is per OS thread, and a goroutine may run on any:
// every driver call must make the backend's context current itself. Each
// call here runs on a fresh OS thread (a goroutine that locks its thread
// and exits without unlocking ends the thread), on which the stub, as the
// real driver, has no context unless the call sets it.
func TestLibcudaAnyThread(t *testing.T) {
	d, err := openLibrary(buildStub(t, stubLibcuda), nil, 0, stubPTX)
	if err != nil {
		t.Fatal(err)
	}
	onFreshThread := func(f func()) {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			defer close(done)
			f()
		}()
		<-done
	}
	var x, y Ptr
	call := func(what string, f func() error) {
		t.Helper()
		onFreshThread(func() {
			if err := f(); err != nil {
				t.Errorf("%s on a fresh thread: %v", what, err)
			}
		})
	}
	call("alloc", func() (err error) { x, err = d.alloc(20); return err })
	call("alloc", func() (err error) { y, err = d.alloc(20); return err })
	call("zero", func() error { return d.zero(x, 20) })
	ones := make([]byte, 20)
	for i := 0; i < 20; i += 4 {
		binary.LittleEndian.PutUint32(ones[i:], math.Float32bits(1))
	}
	call("copyIn", func() error { return d.copyIn(y, ones) })
	add := addLaunch(x, y, 5)
	call("launch", func() error { return d.launch([]Launch{add, add}) })
	var g graphExec
	call("capture", func() (err error) { g, err = d.capture([]Launch{add}); return err })
	call("launchGraph", func() error { return d.launchGraph(g) })
	call("sync", d.sync)
	call("copyDevice", func() error { return d.copyDevice(y, x, 20) })
	out := make([]byte, 20)
	call("copyOut", func() error { return d.copyOut(out, y) })
	if v := math.Float32frombits(binary.LittleEndian.Uint32(out)); v != 3 {
		t.Errorf("x[0] = %v after three adds of 1, want 3", v)
	}
	call("destroyGraph", func() error { return d.destroyGraph(g) })
	call("free", func() error { return d.free(x) })
	call("free", func() error { return d.free(y) })
	call("close", d.close)
}
