package cuda

import (
	"embed"
	"io/fs"
)

// files are the kernel sources and their PTX for sm_80 (PTX ISA 7.8),
// made by clang from all.cu (make ptx); the driver JIT-compiles the PTX
// for the device at load. make ptx-check, part of make test, fails when
// the PTX is not the output of the current sources. Embedding the sources
// also makes an edited kernel change this package's build ID, so packages
// that compile them (the emulator) are rebuilt.
//
//go:embed *.cu *.cuh emu.h formats.h qformats.h kernels_sm80.ptx
var files embed.FS

// PTX returns the PTX module of every kernel.
func PTX() []byte {
	b, err := files.ReadFile("kernels_sm80.ptx")
	if err != nil {
		panic("cuda: the embedded PTX is missing: " + err.Error())
	}
	return b
}

// Sources returns the kernels' CUDA C++ sources (*.cu, *.cuh, emu.h,
// formats.h, qformats.h).
func Sources() fs.FS { return files }
