// prelude.cuh: what the kernels use of CUDA, without the CUDA SDK.
//
// The kernels are compiled two ways: to PTX by clang (-nocudainc
// -nocudalib, so no SDK header is seen and everything CUDA's headers would
// give is spelled here over clang's NVPTX builtins), and for the host by
// g++ with KK_EMU defined, where emu.h supplies the same names over the
// fiber emulator. Kernel code uses only what this file declares.
//
// Conventions: kernels are KK_KERNEL (extern "C" __global__ on the device,
// internal to the emulator's translation unit on the host); helpers are
// KK_DEVICE; dynamic shared memory is KK_DYN_SHARED; bf16 and f16 are raw
// uint16 bit patterns widened by kk_bf16 and kk_f16.
#ifndef KK_PRELUDE_CUH
#define KK_PRELUDE_CUH

typedef unsigned char kk_u8;
typedef signed char kk_i8;
typedef unsigned short kk_u16;
typedef unsigned int kk_u32;
typedef unsigned long long kk_u64;
// 16 bytes loaded at once: one ld.global.v4.u32 on the device.
typedef unsigned int kk_u32x4 __attribute__((vector_size(16)));
typedef float kk_f32x4 __attribute__((vector_size(16)));

#ifdef KK_EMU
#include "emu.h"
#else

#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))

#define KK_KERNEL extern "C" __global__
#define KK_DEVICE static __device__ __forceinline__
#define KK_DYN_SHARED(type, name) extern __shared__ __attribute__((aligned(16))) type name[]

KK_DEVICE void __syncthreads_() { __nvvm_barrier_sync(0); }
#define __syncthreads() __syncthreads_()
KK_DEVICE void __syncwarp(unsigned mask = 0xffffffffu) { __nvvm_bar_warp_sync(mask); }

KK_DEVICE float __shfl_xor_sync(unsigned mask, float v, int lane, int width = 32) {
	return __nvvm_shfl_sync_bfly_f32(mask, v, lane, ((32 - width) << 8) | 0x1f);
}
KK_DEVICE int __shfl_xor_sync(unsigned mask, int v, int lane, int width = 32) {
	return __nvvm_shfl_sync_bfly_i32(mask, v, lane, ((32 - width) << 8) | 0x1f);
}
KK_DEVICE float __shfl_down_sync(unsigned mask, float v, unsigned delta, int width = 32) {
	return __nvvm_shfl_sync_down_f32(mask, v, delta, ((32 - width) << 8) | 0x1f);
}
KK_DEVICE int __shfl_down_sync(unsigned mask, int v, unsigned delta, int width = 32) {
	return __nvvm_shfl_sync_down_i32(mask, v, delta, ((32 - width) << 8) | 0x1f);
}
KK_DEVICE float __shfl_sync(unsigned mask, float v, int src, int width = 32) {
	return __nvvm_shfl_sync_idx_f32(mask, v, src, ((32 - width) << 8) | 0x1f);
}
KK_DEVICE int __shfl_sync(unsigned mask, int v, int src, int width = 32) {
	return __nvvm_shfl_sync_idx_i32(mask, v, src, ((32 - width) << 8) | 0x1f);
}
KK_DEVICE unsigned __ballot_sync(unsigned mask, int pred) { return __nvvm_vote_ballot_sync(mask, pred != 0); }
KK_DEVICE int __any_sync(unsigned mask, int pred) { return __nvvm_vote_any_sync(mask, pred != 0); }
KK_DEVICE int __all_sync(unsigned mask, int pred) { return __nvvm_vote_all_sync(mask, pred != 0); }

KK_DEVICE float atomicAdd(float *p, float v) { return __nvvm_atom_add_gen_f(p, v); }
KK_DEVICE int atomicAdd(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
KK_DEVICE int atomicMax(int *p, int v) { return __nvvm_atom_max_gen_i(p, v); }
KK_DEVICE int atomicCAS(int *p, int cmp, int v) { return __nvvm_atom_cas_gen_i(p, cmp, v); }
// __threadfence orders a thread's global writes before its later ones as
// every thread of the device sees them (membar.gl).
KK_DEVICE void __threadfence() { __nvvm_membar_gl(); }

// exp through the hardware's ex2.approx (2 ulp), as CUDA's __expf; the
// emulator computes the same formula with exp2f.
KK_DEVICE float kk_exp(float x) { return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }

// kk_ldg4 reads 16 bytes of global memory (16-byte aligned) that no
// thread writes during the launch through the read-only data cache
// (ld.global.nc.v4.f32; kk_ldg 4 bytes, ld.global.nc.f32; kk_ldg2 8
// bytes, 8-byte aligned, into a and b), for data reached through an address the compiler
// cannot prove global. The builtin takes clang's vector type; kernels use
// the GCC-style one the emulator also knows.
typedef float kk_ldg_v4 __attribute__((ext_vector_type(4)));
KK_DEVICE float kk_ldg(const float *p) { return __nvvm_ldg_f(p); }
typedef float kk_ldg_v2 __attribute__((ext_vector_type(2)));
KK_DEVICE void kk_ldg2(const float *p, float &a, float &b) {
	kk_ldg_v2 v = __nvvm_ldg_f2((const kk_ldg_v2 *)p);
	a = v.x;
	b = v.y;
}
KK_DEVICE kk_f32x4 kk_ldg4(const float *p) {
	kk_ldg_v4 v = __nvvm_ldg_f4((const kk_ldg_v4 *)p);
	kk_f32x4 r = {v.x, v.y, v.z, v.w};
	return r;
}

// kk_ldw16 reads 16 bytes of a weight (global, read-only, 16-byte
// aligned) with ld.global.nc.v4.u32 as a volatile asm statement: the
// compiler keeps the loads where the source puts them, so that a loop
// that issues several steps' loads before using any keeps them in flight
// together (LLVM otherwise sinks each load to its first use).
KK_DEVICE kk_u32x4 kk_ldw16(const void *p) {
	kk_u32 a, b, c, d;
	asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
	kk_u32x4 r = {a, b, c, d};
	return r;
}

#endif // KK_EMU

KK_DEVICE float kk_bits_f32(kk_u32 u) { return __builtin_bit_cast(float, u); }
KK_DEVICE kk_u32 kk_f32_bits(float f) { return __builtin_bit_cast(kk_u32, f); }

// kk_bf16 widens a bfloat16 bit pattern.
KK_DEVICE float kk_bf16(kk_u16 h) { return kk_bits_f32((kk_u32)h << 16); }

// kk_f16 widens an IEEE half bit pattern exactly: the exponent is rebased
// by one multiplication by 2^112, which also normalises subnormal halves;
// infinities and NaNs keep an all-ones exponent.
KK_DEVICE float kk_f16(kk_u16 h) {
	kk_u32 u = ((kk_u32)h & 0x7fffu) << 13;
	float f = kk_bits_f32(u) * 5.192296858534828e33f; // 0x1p112
	if ((h & 0x7c00u) == 0x7c00u)
		f = kk_bits_f32(u | 0x7f800000u);
	return kk_bits_f32(kk_f32_bits(f) | ((kk_u32)(h & 0x8000u) << 16));
}

// kk_gelu_tanh returns GELU's tanh approximation of g, 0.5 g (1 +
// tanh(u)) with u = sqrt(2/pi) (g + 0.044715 g^3), as g / (1 + e^(-2u))
// (the same value; kernels/cpu's GELUTanhMul computes it so).
KK_DEVICE float kk_gelu_tanh(float g) {
	float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
	return g / (1.0f + kk_exp(-2.0f * u));
}

// kk_softcap returns c tanh(x/c) as c (1 - 2/(e^(2x/c) + 1)), which
// saturates to +-c where the exponential overflows or vanishes (Gemma's
// softcaps; kernels/cpu's Softcap computes it so).
KK_DEVICE float kk_softcap(float x, float c) { return c * (1.0f - 2.0f / (kk_exp(2.0f * x / c) + 1.0f)); }

// Warp reductions over all 32 lanes, by butterfly so every lane holds the
// result.
KK_DEVICE float kk_warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
KK_DEVICE float kk_warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1)
		v = __builtin_fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// kk_mma_bf16 and kk_mma_f16 are one warp-wide tensor-core product
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: d (16 x 8, float32)
// += a (16 x 16, row-major) times b (16 x 8, column-major), every lane of
// the warp taking part with its fragments in the PTX ISA's layout
// (groupID = lane >> 2, tig = lane & 3; two 16-bit values a register, the
// lower column or row in the low half): a[0] holds A[groupID][2 tig, +1],
// a[1] A[groupID+8][2 tig, +1], a[2] and a[3] the same rows at columns 8
// on; b[0] holds B[2 tig, +1][groupID], b[1] rows 8 on; d[0..1] are
// D[groupID][2 tig, +1], d[2..3] row groupID+8. The emulator computes the
// same product as a warp collective over the same layout (emu.cc).
// kk_mma_tf32 is mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: d
// (16 x 8, float32) += a (16 x 8) times b (8 x 8), one tf32 value (a
// float32 whose low 13 bits the tensor cores ignore: kk_tf32 rounds to
// one) a register: a[0] holds A[groupID][tig], a[1] A[groupID+8][tig],
// a[2] and a[3] the same rows at column tig+4; b[0] holds B[tig][groupID],
// b[1] B[tig+4][groupID]; d as kk_mma_bf16's.
#ifdef KK_EMU
KK_DEVICE void kk_mma_bf16(float d[4], const kk_u32 a[4], const kk_u32 b[2]) { ::kkemu::mma(0, d, a, b); }
KK_DEVICE void kk_mma_f16(float d[4], const kk_u32 a[4], const kk_u32 b[2]) { ::kkemu::mma(1, d, a, b); }
KK_DEVICE void kk_mma_tf32(float d[4], const kk_u32 a[4], const kk_u32 b[2]) { ::kkemu::mma(2, d, a, b); }
#else
KK_DEVICE void kk_mma_bf16(float d[4], const kk_u32 a[4], const kk_u32 b[2]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
KK_DEVICE void kk_mma_f16(float d[4], const kk_u32 a[4], const kk_u32 b[2]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
KK_DEVICE void kk_mma_tf32(float d[4], const kk_u32 a[4], const kk_u32 b[2]) {
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// kk_dp4a returns c plus the dot product of a's and b's four signed bytes
// (dp4a.s32.s32: one instruction on sm_61 and later; clang-16 without the
// CUDA headers has no __dp4a, so it is inline PTX), and the same integer
// sum in the emulator.
#ifdef KK_EMU
KK_DEVICE int kk_dp4a(int a, int b, int c) {
	for (int k = 0; k < 32; k += 8)
		c += (int)(signed char)(a >> k) * (int)(signed char)(b >> k);
	return c;
}
#else
KK_DEVICE int kk_dp4a(int a, int b, int c) {
	int d;
	asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}
#endif

// kk_f16_cvt widens an IEEE half exactly, as kk_f16 does, in one
// instruction on the device (cvt.f32.f16) and by kk_f16 in the emulator.
#ifdef KK_EMU
#define kk_f16_cvt(h) kk_f16(h)
#else
KK_DEVICE float kk_f16_cvt(kk_u16 h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}
#endif

// kk_tf32 returns the bits of x rounded to tf32 (10 fraction bits, to
// nearest, ties away from zero, as cvt.rna.tf32.f32), the low 13 zero:
// an integer add and mask, the same on the device and in the emulator.
// x of magnitude below 2^128 - 2^116 stays finite.
KK_DEVICE kk_u32 kk_tf32(float x) { return (kk_f32_bits(x) + 0x1000u) & 0xffffe000u; }

#endif // KK_PRELUDE_CUH
