// Package cuda is the NVIDIA GPU backend: a compute.Backend whose buffers,
// weights and KV blocks live in device memory and whose operations are CUDA
// kernels (compiled to PTX by clang, embedded in the binary and JIT-compiled
// by the driver), driven through the CUDA driver API loaded at run time.
package cuda
