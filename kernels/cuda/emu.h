// emu.h: the CUDA names the kernels use, for the host (g++, KK_EMU), over
// the fiber emulator of emu.cc. prelude.cuh includes it in place of its
// device definitions; emu.cc includes it first and then the kernels, one
// translation unit, so everything here has internal linkage: two
// emulators (the package's and the test kernels') link into one binary.
//
// Each thread of a block is a fiber that runs until it reaches a barrier
// or a warp collective (shuffle, vote, __syncwarp) and then yields; the
// scheduler resumes the runnable fibers in an order drawn from the launch's
// seed. Shared memory written by one thread is therefore seen by another
// only across a barrier that orders them in every schedule, which is what
// CUDA promises and what a missing __syncthreads breaks.
#ifndef KK_EMU_H
#define KK_EMU_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kkemu {
namespace {

struct dim3 {
	unsigned x, y, z;
};

// BlockDims is the kernel-visible part of one emulated block.
struct BlockDims {
	dim3 bidx, bdim, gdim;
	unsigned char *dyn; // dynamic shared memory
};

// Thread is the kernel-visible part of one emulated thread.
struct Thread {
	dim3 idx;
	BlockDims *d;
};

// cur is the thread whose fiber runs on this OS thread (emulations on
// different OS threads are independent).
__thread Thread *cur;

// Implemented in emu.cc.
void syncthreads(const char *file, int line);
enum Op { opSync, opIdx, opXor, opDown, opUp, opBallot, opMma };
uint32_t collective(Op op, unsigned mask, uint32_t v, int arg, int width, const char *what);
// mma is one lane's part in a warp's tensor-core product (kind 0
// m16n8k16 with bf16 operands, 1 with f16, 2 m16n8k8 with tf32; see
// kk_mma_bf16 and kk_mma_tf32 in prelude.cuh): d += A B.
void mma(int kind, float d[4], const uint32_t a[4], const uint32_t b[2]);

template <class T> T shfl(Op op, unsigned mask, T v, int arg, int width, const char *what) {
	static_assert(sizeof(T) == 4, "the emulator shuffles 32-bit values");
	uint32_t b;
	std::memcpy(&b, &v, 4);
	b = collective(op, mask, b, arg, width, what);
	std::memcpy(&v, &b, 4);
	return v;
}

} // namespace
} // namespace kkemu

#define threadIdx (::kkemu::cur->idx)
#define blockIdx (::kkemu::cur->d->bidx)
#define blockDim (::kkemu::cur->d->bdim)
#define gridDim (::kkemu::cur->d->gdim)
#define warpSize 32

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
// Static shared memory is per OS thread: the blocks of one launch run one
// after another on it, concurrent launches on other OS threads.
#define __shared__ static __thread
#define KK_KERNEL static
#define KK_DEVICE static inline
#define KK_DYN_SHARED(type, name) type *name = (type *)::kkemu::cur->d->dyn

#define __syncthreads() ::kkemu::syncthreads(__FILE__, __LINE__)

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane, int width = 32) {
	return ::kkemu::shfl(::kkemu::opXor, mask, v, lane, width, "__shfl_xor_sync");
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
	return ::kkemu::shfl(::kkemu::opDown, mask, v, (int)delta, width, "__shfl_down_sync");
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
	return ::kkemu::shfl(::kkemu::opUp, mask, v, (int)delta, width, "__shfl_up_sync");
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
	return ::kkemu::shfl(::kkemu::opIdx, mask, v, src, width, "__shfl_sync");
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
	return ::kkemu::collective(::kkemu::opBallot, mask, pred != 0, 0, 32, "__ballot_sync");
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
	::kkemu::collective(::kkemu::opSync, mask, 0, 0, 32, "__syncwarp");
}

// Atomics: fibers of a block never run at once and blocks run one after
// another, so plain read-modify-writes are atomic here.
static inline float atomicAdd(float *p, float v) {
	float o = *p;
	*p = o + v;
	return o;
}
static inline int atomicAdd(int *p, int v) {
	int o = *p;
	*p = o + v;
	return o;
}
static inline int atomicMax(int *p, int v) {
	int o = *p;
	*p = o > v ? o : v;
	return o;
}
static inline int atomicCAS(int *p, int cmp, int v) {
	int o = *p;
	if (o == cmp)
		*p = v;
	return o;
}
// Blocks run one after another: every write is seen by the blocks after.
static inline void __threadfence() {}

// The device's exp is ex2.approx of x*log2(e); the same formula here.
static inline float kk_exp(float x) { return exp2f(x * 1.4426950408889634f); }

// Global memory is host memory: the read-only cache is a plain load.
static inline kk_f32x4 kk_ldg4(const float *p) {
	kk_f32x4 v;
	std::memcpy(&v, p, 16);
	return v;
}
static inline kk_u32x4 kk_ldw16(const void *p) { return *(const kk_u32x4 *)p; }
static inline float kk_ldg(const float *p) { return *p; }
static inline void kk_ldg2(const float *p, float &a, float &b) {
	a = p[0];
	b = p[1];
}

#endif // KK_EMU_H
