// Package kernels holds the CUDA C++ sources of the GPU backend's kernels
// and, with cgo, their emulation on the CPU: the same sources compiled for
// the host against a runtime that runs a grid's threads as fibers, so the
// kernels are tested without a GPU.
//
// The sources are one translation unit, all.cu: elementwise.cu (embed,
// rmsnorm, add_rows, add, silu_mul, rope, and kv_write, the KV cache's
// writes of float32 rows into float32 or bf16 parts), matvec.cu
// (decode's matvec and the tiled matmul, for f32, bf16 and f16 weights)
// and attention.cu (attn_split and attn_combine over paged, possibly
// encoded, KV blocks; attn_split_pre also un-whitens preconditioned keys).
// They use only what prelude.cuh declares. For the device, clang compiles
// them to PTX without the CUDA SDK (make ptx; the PTX is committed as
// compute/cuda/kernels_sm80.ptx and embedded by package cuda, whose
// launch.go describes every launch). For the host, emu.h maps the same
// names onto the emulator of emu.cc.
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
package kernels
