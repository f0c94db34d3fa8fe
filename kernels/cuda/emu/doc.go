// Package emu runs the CUDA kernels of kernels/cuda on the CPU: emu.cc
// compiles the same translation unit (all.cu) for the host, where emu.h
// maps CUDA's names onto a fiber runtime, so the kernels are tested
// without a GPU.
//
// The emulator runs a launch's blocks one after another, in an order drawn
// from the launch's seed, and each block's threads as fibers: a thread
// runs until it reaches __syncthreads or a warp collective (shuffles,
// votes, __syncwarp), and the next thread to run is drawn from the seed
// too. So a kernel that reads shared memory another thread wrote without a
// barrier between them gets a wrong result under some seed, and warps do
// not run in lock step except at their collectives, as on Volta and later.
// Threads that diverge at a barrier, a collective that some lane of its
// mask never reaches, and a deadlock are errors of the launch. Memory from
// Alloc, and a launch's dynamic shared memory, end against an inaccessible
// page, so reading or writing past them faults. What it does not catch:
// races between barriers that a fiber's uninterrupted run hides (two
// threads' read-modify-writes of one shared word), and reads past the end
// of static __shared__ arrays.
//
// Without cgo on Linux the package still builds: Available reports false,
// Alloc and Run return errors, and CopyIn and CopyOut panic.
package emu
