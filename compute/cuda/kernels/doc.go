// Package kernels holds the CUDA C++ sources of the GPU backend's kernels
// and, with cgo, their emulation on the CPU: the same sources compiled for
// the host against a runtime that runs a grid's threads as fibers, so the
// kernels are tested without a GPU.
package kernels
