//go:build cgo && linux

package emu

/*
#cgo CXXFLAGS: -std=c++17 -O2 -fno-strict-aliasing -Wall -Wno-unused-function -Wno-unknown-pragmas
#include <stdint.h>
#include <stdlib.h>

int kk_emu_run(const char *name, const uint32_t *grid, const uint32_t *block, uint32_t shared, const void *args,
               size_t nargs, uint64_t seed, char *err, size_t errlen);
int kk_emu_count(void);
const char *kk_emu_name(int i);
uint64_t kk_emu_alloc(size_t bytes);
void kk_emu_free(uint64_t p);
void kk_emu_copy_in(uint64_t dst, const void *src, size_t n);
void kk_emu_copy_out(void *dst, uint64_t src, size_t n);
*/
import "C"

import (
	"fmt"
	"unsafe"

	// Go hashes the C++ files of a package but not what they include from
	// elsewhere: kernels/cuda embeds the kernel sources emu.cc includes, so
	// depending on it makes an edited kernel rebuild the emulator instead
	// of running the stale kernel.
	_ "github.com/kakeya-ai/kakeya/kernels/cuda"
)

// Available reports whether this build has the emulator (cgo on Linux):
// without it every call fails, and tests that need it skip.
func Available() bool { return true }

// Alloc returns bytes of zeroed emulated device memory, 256-byte aligned
// and followed by an inaccessible page: a kernel that runs past the end
// of an allocation (rounded up to 256 bytes) faults.
func Alloc(bytes int) (uint64, error) {
	if bytes < 0 {
		return 0, fmt.Errorf("emu: allocation of %d bytes", bytes)
	}
	p := uint64(C.kk_emu_alloc(C.size_t(bytes)))
	if p == 0 {
		return 0, fmt.Errorf("emu: emulated allocation of %d bytes failed", bytes)
	}
	return p, nil
}

// Free releases memory from Alloc; 0 is ignored.
func Free(p uint64) { C.kk_emu_free(C.uint64_t(p)) }

// CopyIn copies src to emulated device memory at dst.
func CopyIn(dst uint64, src []byte) {
	if len(src) > 0 {
		C.kk_emu_copy_in(C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	}
}

// CopyOut copies emulated device memory at src to dst.
func CopyOut(dst []byte, src uint64) {
	if len(dst) > 0 {
		C.kk_emu_copy_out(unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst)))
	}
}

// Run runs one launch of kernel on the CPU: every block of grid in turn,
// the threads of a block as fibers scheduled in an order drawn from seed.
// args are laid out as the kernel's .param space (each at an offset
// rounded up to its size, nothing after the last), and pointers in them
// are addresses from Alloc. An unknown kernel, arguments
// of the wrong size, a geometry the device would refuse, and a kernel that
// breaks the execution model (threads that diverge at __syncthreads, a
// warp collective some lane of its mask never reaches, a deadlock) are
// errors. Run may be called from several goroutines for disjoint memory.
func Run(kernel string, grid, block [3]uint32, shared uint32, args []byte, seed uint64) error {
	name := C.CString(kernel)
	defer C.free(unsafe.Pointer(name))
	var a unsafe.Pointer
	if len(args) > 0 {
		// The C side keeps no reference past the call.
		a = C.CBytes(args)
		defer C.free(a)
	}
	var msg [512]C.char
	if C.kk_emu_run(name, (*C.uint32_t)(unsafe.Pointer(&grid[0])), (*C.uint32_t)(unsafe.Pointer(&block[0])),
		C.uint32_t(shared), a, C.size_t(len(args)), C.uint64_t(seed), &msg[0], C.size_t(len(msg))) != 0 {
		return fmt.Errorf("emu: %s", C.GoString(&msg[0]))
	}
	return nil
}

// Kernels returns the names of the kernels the emulator runs, which are
// the entries of the PTX module.
func Kernels() []string {
	n := int(C.kk_emu_count())
	names := make([]string, n)
	for i := range names {
		names[i] = C.GoString(C.kk_emu_name(C.int(i)))
	}
	return names
}
