// testkernels.cuh: kernels that exercise the emulator itself, some broken
// on purpose. They are compiled only into this test package's emulator,
// never into the PTX or the kernels package.

// reverse writes in reversed through shared memory; without the barrier
// (sync 0) a thread may read its partner's slot before it is written.
KK_KERNEL void reverse(float *out, const float *in, int sync) {
	__shared__ float s[256];
	int t = threadIdx.x, n = blockDim.x;
	s[t] = in[blockIdx.x * n + t];
	if (sync)
		__syncthreads();
	out[blockIdx.x * n + t] = s[n - 1 - t];
}

// skip_barrier lets the first warp skip the barrier.
KK_KERNEL void skip_barrier(int *out) {
	if (threadIdx.x >= 32)
		__syncthreads();
	out[threadIdx.x] = 1;
}

// two_barriers sends odd and even threads to different barriers.
KK_KERNEL void two_barriers(int *out) {
	if (threadIdx.x & 1)
		__syncthreads();
	else
		__syncthreads();
	out[threadIdx.x] = 1;
}

// collectives records, per thread, what each warp operation returned.
KK_KERNEL void collectives(int *out) {
	int t = threadIdx.x, lane = t & 31;
	int *o = out + t * 12;
	unsigned full = 0xffffffffu;
	o[0] = __shfl_xor_sync(full, t, 5);
	o[1] = __shfl_down_sync(full, t, 3);
	o[2] = __shfl_up_sync(full, t, 3);
	o[3] = __shfl_sync(full, t, 7);
	o[4] = (int)__ballot_sync(full, lane % 3 == 0);
	o[5] = __any_sync(full, lane == 31);
	o[6] = __all_sync(full, lane < 31);
	o[7] = __shfl_down_sync(full, t, 3, 8);
	o[8] = __shfl_sync(full, t, 9, 8);
	o[9] = __shfl_xor_sync(full, t, 4, 8);
	// Half a warp: only the even lanes take part.
	o[10] = -1;
	if (!(lane & 1))
		o[10] = __shfl_xor_sync(0x55555555u, t, 2);
	o[11] = (int)kk_warp_sum((float)t);
}

// lane_exits leaves lane 0 out of a shuffle that names it.
KK_KERNEL void lane_exits(int *out) {
	if (threadIdx.x == 0)
		return;
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

// warp_race exchanges values between lanes through shared memory with or
// without __syncwarp: lanes do not run in lock step.
KK_KERNEL void warp_race(int *out, int sync) {
	__shared__ int s[32];
	int lane = threadIdx.x;
	s[lane] = lane * 10;
	if (sync)
		__syncwarp();
	out[lane] = s[lane ^ 1];
}

// count adds 1 per thread of the grid to out[0] and tracks the largest
// thread index in out[1].
KK_KERNEL void count(int *out) {
	atomicAdd(&out[0], 1);
	atomicMax(&out[1], (int)(blockIdx.x * blockDim.x + threadIdx.x));
	float *f = (float *)&out[2];
	atomicAdd(f, 0.5f);
}

// overrun reads dynamic shared memory (shared != 0) or writes global
// memory at index i, past the end the test gave it: the emulator must
// fault.
KK_KERNEL void overrun(float *g, int i, int shared) {
	KK_DYN_SHARED(float, dyn);
	if (threadIdx.x != 0)
		return;
	if (shared)
		g[0] = dyn[i];
	else
		g[i] = 1.0f;
}

// mma_probe runs one tensor-core product: lane l passes the fragments
// a[4l..4l+3] and b[2l..2l+1] and accumulators d[4l..4l+3], and gets its
// part of D back in d. kind 0 is m16n8k16 with bf16 operands, 1 with f16,
// 2 m16n8k8 with tf32.
KK_KERNEL void mma_probe(float *d, const unsigned *a, const unsigned *b, int kind) {
	int l = threadIdx.x;
	float acc[4] = {d[4 * l], d[4 * l + 1], d[4 * l + 2], d[4 * l + 3]};
	kk_u32 af[4] = {a[4 * l], a[4 * l + 1], a[4 * l + 2], a[4 * l + 3]}, bf[2] = {b[2 * l], b[2 * l + 1]};
	if (kind == 2)
		kk_mma_tf32(acc, af, bf);
	else if (kind == 1)
		kk_mma_f16(acc, af, bf);
	else
		kk_mma_bf16(acc, af, bf);
	for (int i = 0; i < 4; i++)
		d[4 * l + i] = acc[i];
}

namespace kkemu {
namespace {
const Entry kernels[] = {
    KK_ENTRY(reverse), KK_ENTRY(skip_barrier), KK_ENTRY(two_barriers), KK_ENTRY(collectives),
    KK_ENTRY(lane_exits), KK_ENTRY(warp_race), KK_ENTRY(count), KK_ENTRY(overrun),
    KK_ENTRY(mma_probe),
};
} // namespace
} // namespace kkemu
