//go:build !(cgo && linux)

package emu

import "errors"

// errNoEmulation is returned by every emulation call in a build without
// cgo on Linux, where the emulator (C++ run through cgo) is not compiled.
var errNoEmulation = errors.New("emu: the CPU emulation needs cgo on Linux")

// Available reports whether this build has the emulator (cgo on Linux).
func Available() bool { return false }

// Alloc returns bytes of zeroed emulated device memory.
func Alloc(bytes int) (uint64, error) { return 0, errNoEmulation }

// Free releases memory from Alloc.
func Free(p uint64) {}

// CopyIn copies src to emulated device memory at dst.
func CopyIn(dst uint64, src []byte) { panic(errNoEmulation) }

// CopyOut copies emulated device memory at src to dst.
func CopyOut(dst []byte, src uint64) { panic(errNoEmulation) }

// Run runs one launch of a kernel on the CPU.
func Run(kernel string, grid, block [3]uint32, shared uint32, args []byte, seed uint64) error {
	return errNoEmulation
}

// Kernels returns the names of the kernels the emulator runs.
func Kernels() []string { return nil }
