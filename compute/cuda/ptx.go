package cuda

import _ "embed"

// kernelsPTX is the PTX of every kernel in kernels/*.cu for sm_80 (PTX ISA
// 7.8), made by clang (make ptx); the driver JIT-compiles it for the
// device at load. make ptx-check, part of make test, fails when it is not
// the output of the current sources.
//
//go:embed kernels_sm80.ptx
var kernelsPTX []byte

// ptxImage returns the embedded PTX module.
func ptxImage() []byte { return kernelsPTX }
