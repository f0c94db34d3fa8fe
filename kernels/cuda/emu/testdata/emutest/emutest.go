//go:build cgo && linux

package emutest

/*
#cgo CXXFLAGS: -std=c++17 -O2 -fno-strict-aliasing -Wall -Wno-unused-function -Wno-unknown-pragmas -I${SRCDIR}
#include <stdint.h>
#include <stdlib.h>

int kk_emutest_run(const char *name, const uint32_t *grid, const uint32_t *block, uint32_t shared, const void *args,
                   size_t nargs, uint64_t seed, char *err, size_t errlen);
*/
import "C"

import (
	"embed"
	"fmt"
	"unsafe"

	// The emulator's sources live in the kernels package, which embeds
	// them; importing it makes an edit there rebuild this package too.
	_ "github.com/kakeya-ai/kakeya/kernels/cuda/emu"
)

//go:embed testkernels.cuh
var sources embed.FS

// Run runs a test kernel like emu.Run; memory comes from emu.Alloc.
func Run(kernel string, grid, block [3]uint32, shared uint32, args []byte, seed uint64) error {
	name := C.CString(kernel)
	defer C.free(unsafe.Pointer(name))
	var a unsafe.Pointer
	if len(args) > 0 {
		a = C.CBytes(args)
		defer C.free(a)
	}
	var msg [512]C.char
	if C.kk_emutest_run(name, (*C.uint32_t)(unsafe.Pointer(&grid[0])), (*C.uint32_t)(unsafe.Pointer(&block[0])),
		C.uint32_t(shared), a, C.size_t(len(args)), C.uint64_t(seed), &msg[0], C.size_t(len(msg))) != 0 {
		return fmt.Errorf("emutest: %s", C.GoString(&msg[0]))
	}
	return nil
}
