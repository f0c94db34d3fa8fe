// Encoding of full KV blocks on the device: a hot part (float32 or bf16
// rows, kv_write's formats) becomes exactly the bytes of a codec's Encode,
// header and CRC included, in device memory, so the cache's full blocks
// never cross to the host. enc_int8 writes codec.Int8's blocks bit for bit;
// enc_pc writes codec.KakeyaPC's fixed-rate blocks (format kakeya_pc) by
// the same steps, its rotation into the basis summed in another order than
// the host's (so a code on a cell boundary may differ by one level). One
// block of threads encodes one part. An input the host encoders refuse
// (a non-finite value, or one too large for the fp16 fields) gives a block
// whose header has magic 0, which every decoder rejects: the kernels
// cannot return an error, and such a value only comes from a forward pass
// that failed already. The layouts are formats.h's (codec/format.go).

// kk_f16_bits rounds f to the nearest fp16 (ties to even), as
// tensor.F32ToF16 does: NaN to a quiet NaN, overflow to infinity,
// subnormals kept.
KK_DEVICE kk_u16 kk_f16_bits(float f) {
	kk_u32 u = kk_f32_bits(f);
	kk_u16 sign = (kk_u16)(u >> 16) & 0x8000;
	kk_u32 a = u & 0x7fffffff;
	if (a > 0x7f800000)
		return sign | 0x7e00;
	if (a >= 0x477ff000)
		return sign | 0x7c00;
	if (a >= 0x38800000) {
		kk_u32 r = a - 0x38000000;
		r += 0xfff + ((r >> 13) & 1);
		return sign | (kk_u16)(r >> 13);
	}
	if (a < 0x33000000)
		return sign;
	kk_u32 e = a >> 23, m = (a & 0x7fffff) | 0x800000;
	kk_u32 shift = 126 - e;
	kk_u32 r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (r & 1)))
		r++;
	return sign | (kk_u16)r;
}

// kk_round_f16 returns f rounded to fp16, as a float.
KK_DEVICE float kk_round_f16(float f) { return kk_f16(kk_f16_bits(f)); }

KK_DEVICE void kk_put_u16(kk_u8 *p, kk_u32 v) {
	p[0] = (kk_u8)v;
	p[1] = (kk_u8)(v >> 8);
}

KK_DEVICE void kk_put_u32(kk_u8 *p, kk_u32 v) {
	kk_put_u16(p, v);
	kk_put_u16(p + 2, v >> 16);
}

// kk_hot_value returns element i of a hot part (float32 or bf16 rows).
KK_DEVICE float kk_hot_value(const void *src, int bf16, long long i) {
	return bf16 ? kk_bf16(((const kk_u16 *)src)[i]) : ((const float *)src)[i];
}

// kk_header writes a block header (codec/header.go) with a zero CRC, or
// with magic 0 when the input was refused.
KK_DEVICE void kk_header(kk_u8 *b, int id, int param, int n, int d, int tag, bool ok) {
	b[0] = ok ? 0x4B : 0;
	b[1] = 1;
	b[2] = (kk_u8)id;
	b[3] = (kk_u8)param;
	kk_put_u32(b + 4, (kk_u32)n);
	kk_put_u16(b + 8, (kk_u32)d);
	kk_put_u16(b + 10, (kk_u32)tag);
	kk_put_u32(b + 12, 0);
}

#define KK_CRC32C 0x82f63b78u // the Castagnoli polynomial, reflected

// kk_crc_mul returns a*b modulo the CRC polynomial (reflected: bit 31 is
// x^0), as zlib's multmodp.
KK_DEVICE kk_u32 kk_crc_mul(kk_u32 a, kk_u32 b) {
	kk_u32 m = 1u << 31, p = 0;
	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ KK_CRC32C : b >> 1;
	}
	return p;
}

// kk_crc_combine returns the CRC-32C of A followed by B from theirs and
// the length of B (zlib's crc32_combine): crc(A) times x^(8 len) plus
// crc(B), x^(8 len) from x2n (x2n[k] = x^(2^k)).
KK_DEVICE kk_u32 kk_crc_combine(kk_u32 a, kk_u32 b, long long len, const kk_u32 *x2n) {
	kk_u32 p = 1u << 31; // x^0
	for (int k = 3; len; len >>= 1, k++)
		if (len & 1)
			p = kk_crc_mul(x2n[k & 31], p);
	return kk_crc_mul(p, a) ^ b;
}

// kk_seal writes the CRC-32C of the block of size bytes at b (header bytes
// 12..15 left out, codec/header.go's blockCRC) into those bytes. Each
// thread takes the CRC of its share of the bytes, bit by bit, then the
// shares are combined pairwise in log2(threads) rounds (blockDim.x a power
// of two). sm holds 2*blockDim.x + 32 words of shared memory. The whole
// block calls it, after the block's bytes are written; it syncs.
KK_DEVICE void kk_seal(kk_u8 *b, long long size, kk_u32 *sm) {
	kk_u32 *crc = sm, *x2n = sm + blockDim.x;
	int *len = (int *)(sm + blockDim.x + 32);
	int t = threadIdx.x;
	if (t == 0) {
		kk_u32 p = 1u << 30; // x^1
		x2n[0] = p;
		for (int k = 1; k < 32; k++)
			x2n[k] = p = kk_crc_mul(p, p);
	}
	__syncthreads(); // the block's bytes and x2n
	long long total = size - 4, per = (total + blockDim.x - 1) / blockDim.x;
	long long lo = t * per < total ? t * per : total, hi = lo + per < total ? lo + per : total;
	kk_u32 c = 0xffffffffu;
	for (long long i = lo; i < hi; i++) {
		c ^= b[i < 12 ? i : i + 4];
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ KK_CRC32C : c >> 1;
	}
	crc[t] = hi > lo ? ~c : 0; // the CRC of no bytes is 0
	len[t] = (int)(hi - lo);
	for (int s = 1; s < (int)blockDim.x; s <<= 1) {
		__syncthreads();
		if ((t & (2 * s - 1)) == 0) {
			crc[t] = kk_crc_combine(crc[t], crc[t + s], len[t + s], x2n);
			len[t] += len[t + s];
		}
	}
	if (t == 0)
		kk_put_u32(b + 12, crc[0]);
	__syncthreads();
}

// A batch of encodes (jobs set, one block each) reads each block's part
// from its job, an entry of four words (kk_enc_job): the encoded part's
// address (dst); the hot part's (src), whose bit 0 says its rows are bf16
// (a part's address is 16-byte aligned), so that one launch encodes bf16
// and float32 parts alike (a layer's whitened keys, float32 rows of
// enc_whiten's, beside its bf16 values); the encoder's argument (enc_pc's
// and enc_pcec's settings, enc_int4's cfg, enc_whiten's factor); and its
// scratch. The launch's own dst, src, bf16, argument and scratch are then
// not read.
struct kk_enc_job {
	void *dst;
	const void *src;
	int bf16;
	kk_u64 arg;
	void *scratch;
};

// kk_enc_job_of returns the part block blockIdx.x encodes: job blockIdx.x
// of the table jobs, or without one the launch's own dst, src, bf16, arg
// and scratch.
KK_DEVICE kk_enc_job kk_enc_job_of(const kk_u64 *__restrict__ jobs, void *dst, const void *src, int bf16, kk_u64 arg,
                                   void *scratch) {
	kk_enc_job j;
	if (!jobs) {
		j.dst = dst, j.src = src, j.bf16 = bf16, j.arg = arg, j.scratch = scratch;
		return j;
	}
	const kk_u64 *e = jobs + 4 * (long long)blockIdx.x;
	j.dst = (void *)e[0];
	j.src = (const void *)(e[1] & ~(kk_u64)1);
	j.bf16 = (int)(e[1] & 1);
	j.arg = e[2];
	j.scratch = (void *)e[3];
	return j;
}

// enc_int8: block 0 encodes a hot part of n rows of d values (bf16 or
// float32) at src as codec.Int8 does into dst (kk_int8_size(n, d) bytes):
// per row and group of 32 values the fp16 scale absmax/127, then each
// value times the scale's inverse, rounded half to even, within -127..127.
// Dynamic shared memory: 2*blockDim.x + 33 words (kk_seal's, then a flag).
KK_KERNEL void __launch_bounds__(256) enc_int8(kk_u8 *__restrict__ dst, const void *__restrict__ src, int bf16, int n, int d,
                                               const kk_u64 *__restrict__ jobs) {
	kk_enc_job job = kk_enc_job_of(jobs, dst, src, bf16, 0, 0);
	dst = (kk_u8 *)job.dst, src = job.src, bf16 = job.bf16;
	KK_DYN_SHARED(float, smf);
	kk_u32 *sm = (kk_u32 *)smf, *bad = sm + 2 * blockDim.x + 32;
	if (threadIdx.x == 0)
		*bad = 0;
	__syncthreads();
	int g = (d + 31) >> 5;
	kk_u8 *scales = dst + kk_int8_scales_off(n, d), *codes = dst + kk_int8_codes_off(n, d);
	for (int k = threadIdx.x; k < n * g; k += blockDim.x) {
		int i = k / g, c0 = (k - i * g) * 32, c1 = c0 + 32 < d ? c0 + 32 : d;
		float m = 0.0f;
		bool finite = true;
		for (int c = c0; c < c1; c++) {
			float a = __builtin_fabsf(kk_hot_value(src, bf16, (long long)i * d + c));
			finite = finite && a <= 3.40282347e38f;
			m = a > m ? a : m;
		}
		kk_u16 h = kk_f16_bits(m / 127.0f);
		if (!finite || !(m / 127.0f <= 65504.0f))
			atomicAdd((int *)bad, 1);
		kk_put_u16(scales + 2 * k, h);
		float s = kk_f16(h), inv = 1.0f / s;
		for (int c = c0; c < c1; c++) {
			int q = 0;
			if (s != 0.0f) {
				float v = __builtin_rintf(kk_hot_value(src, bf16, (long long)i * d + c) * inv);
				q = v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v;
			}
			codes[(long long)i * d + c] = (kk_u8)(kk_i8)q;
		}
	}
	__syncthreads();
	if (threadIdx.x == 0)
		kk_header(dst, KK_FORMAT_INT8, 8, n, d, 32, *bad == 0);
	kk_seal(dst, kk_int8_size(n, d), sm);
}

// kk_whiten_rows is enc_whiten's sum for hot rows of one format (BF16:
// bf16, else float32), so that the format's test is not in the loop: the
// loop over k is unrolled by eight, so that eight terms' loads are in
// flight at once (rolled, each multiply-add waited for its own two loads,
// an L1 hit's latency a term), the sum's order unchanged. Output y[i][j]
// sums d - j terms: a thread's outputs alternate from one pass of the
// block to the next between column c and d - 1 - c of their rows, so that
// where d divides the block (each thread then keeping one c) no thread
// chains d terms an output while another chains one.
template <bool BF16>
KK_DEVICE void kk_whiten_rows(float *__restrict__ dst, const void *__restrict__ src, int n, int d,
                              const float *__restrict__ L) {
	for (int o = threadIdx.x, pass = 0; o < n * d; o += blockDim.x, pass++) {
		int i = o / d, j = o - i * d;
		if (pass & 1)
			j = d - 1 - j;
		long long row = (long long)i * d;
		float acc = 0.0f;
#pragma unroll 8
		for (int k = j; k < d; k++) {
			float x = BF16 ? kk_bf16(((const kk_u16 *)src)[row + k]) : ((const float *)src)[row + k];
			acc = __builtin_fmaf(x, L[(long long)k * d + j], acc);
		}
		dst[(long long)i * d + j] = acc;
	}
}

// enc_whiten: block 0 whitens a hot part of n rows of d values (bf16 or
// float32) at src by the lower-triangular factor L (d x d, row-major) of a
// preconditioned codec (codec.Preconditioned.Encode's y = x L) into dst, n
// x d floats of device scratch, which enc_int8, enc_int4, enc_pc or
// enc_pcec then encodes as a float32 part. Each output y[i][j] is one thread's sum over k of
// x[i][k] L[k][j], one fused multiply-add a term from a zero sum, k in
// increasing order as the host's MixBlock (AVX-512 and AVX2) sums: the
// terms k < j, zero products on a zero sum, are left out without changing
// the sum, so y is the host's bit for bit. With jobs set, block b whitens
// job b: dst, src (and its format) and L the words 0, 1 and 2 of its
// entry (kk_enc_job_of). No shared memory.
KK_KERNEL void __launch_bounds__(256) enc_whiten(float *__restrict__ dst, const void *__restrict__ src, int bf16, int n, int d,
                                                 const float *__restrict__ L, const kk_u64 *__restrict__ jobs) {
	kk_enc_job job = kk_enc_job_of(jobs, dst, src, bf16, (kk_u64)L, 0);
	dst = (float *)job.dst, src = job.src, bf16 = job.bf16, L = (const float *)job.arg;
	if (bf16)
		kk_whiten_rows<true>(dst, src, n, d, L);
	else
		kk_whiten_rows<false>(dst, src, n, d, L);
}

// kk_quantize returns the number of the k bounds below x, by binary
// search, as codec's quantizeBounds.
KK_DEVICE int kk_quantize(const float *bounds, int k, float x) {
	int lo = 0, hi = k;
	while (lo < hi) {
		int mid = (lo + hi) >> 1;
		if (x > bounds[mid])
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

// KK_PC_XS is enc_pc's most floats of staged rows (16 KiB of its
// dynamic shared memory).
#define KK_PC_XS 4096

// kk_pc_chunk returns the rows enc_pc stages at a time for n rows of d
// values and M stored components over threads threads: at most 32 a
// thread (G = threads / M threads per component, each 1 in G of the
// rows) and KK_PC_XS floats. pcChunk in encode.go is the same.
KK_DEVICE int kk_pc_chunk(int n, int d, int M, int threads) {
	int g = M > 0 && M <= threads ? threads / M : 1, r = 32 * g, cap = KK_PC_XS / d;
	r = r < cap ? r : cap;
	r = r < n ? r : n;
	return r > 0 ? r : 1;
}

// kk_pc_project computes y = B(x - mu) for rows c0..c0+rn-1 of the
// staged xs (rn x d, x - mu, row-major): thread t < G*M takes component
// k = t % M for the rows t / M + G*j (j < 32). Each sum runs over the
// columns in increasing order, one fused multiply-add a column, as the
// one-thread-an-output loop it replaces summed: y is bit for bit the
// same, with each basis value read once per chunk rather than once per
// row (V4: 16-byte loads of the basis and of the broadcast staged rows).
template <bool V4>
KK_DEVICE void kk_pc_project(float *__restrict__ y, const float *__restrict__ xs, const float *__restrict__ basis,
                             int M, int d, int c0, int rn) {
	int G = blockDim.x / M;
	if ((int)threadIdx.x >= G * M)
		return;
	int k = threadIdx.x % M, sub = threadIdx.x / M;
	int cnt = sub < rn ? (rn - sub + G - 1) / G : 0;
	const float *bk = basis + (long long)k * d;
	float acc[32];
#pragma unroll
	for (int j = 0; j < 32; j++)
		acc[j] = 0.0f;
	if (V4) {
		for (int a = 0; a < d; a += 4) {
			kk_f32x4 b = *(const kk_f32x4 *)(bk + a);
#pragma unroll
			for (int j = 0; j < 32; j++) {
				if (j < cnt) {
					kk_f32x4 x = *(const kk_f32x4 *)(xs + (sub + G * j) * d + a);
					acc[j] += b[0] * x[0];
					acc[j] += b[1] * x[1];
					acc[j] += b[2] * x[2];
					acc[j] += b[3] * x[3];
				}
			}
		}
	} else {
		for (int a = 0; a < d; a++) {
			float b = bk[a];
#pragma unroll
			for (int j = 0; j < 32; j++)
				if (j < cnt)
					acc[j] += b * xs[(sub + G * j) * d + a];
		}
	}
#pragma unroll
	for (int j = 0; j < 32; j++)
		if (j < cnt)
			y[(long long)(c0 + sub + G * j) * M + k] = acc[j];
}

// kk_pc_rotate checks a hot part's values (finite, and small enough for
// fp16 means and scales: |y_j| <= sqrt(d) max|x| + ||mu||, a scale at
// most 1.6 times a component's RMS; *bad counts a refusal) and sets y =
// B(x - mu), row-major n x M, staging x - mu in xs R rows at a time
// (kk_pc_chunk) for kk_pc_project. enc_pc's and enc_pcec's first step.
KK_DEVICE void kk_pc_rotate(float *__restrict__ y, float *__restrict__ xs, const void *__restrict__ src, int bf16, int n,
                            int d, int M, int R, float meanNorm, const float *__restrict__ mu,
                            const float *__restrict__ basis, kk_u32 *bad) {
	float am = 0.0f;
	for (int i = threadIdx.x; i < n * d; i += blockDim.x) {
		float a = __builtin_fabsf(kk_hot_value(src, bf16, i));
		if (!(a <= 3.40282347e38f))
			a = __builtin_inff();
		am = a > am ? a : am;
	}
	if (2.0f * (am * __builtin_sqrtf((float)d) + meanNorm) > 65504.0f)
		atomicAdd((int *)bad, 1);
	if (M > 0 && M <= (int)blockDim.x) {
		for (int c0 = 0; c0 < n; c0 += R) {
			int rn = n - c0 < R ? n - c0 : R;
			__syncthreads(); // the previous chunk is read
			for (int i = threadIdx.x; i < rn * d; i += blockDim.x) {
				int a = i % d;
				xs[i] = kk_hot_value(src, bf16, (long long)c0 * d + i) - mu[a];
			}
			__syncthreads();
			if ((d & 3) == 0)
				kk_pc_project<true>(y, xs, basis, M, d, c0, rn);
			else
				kk_pc_project<false>(y, xs, basis, M, d, c0, rn);
		}
	} else {
		for (int i = threadIdx.x; i < n * M; i += blockDim.x) {
			int r = i / M, k = i - r * M;
			const float *bk = basis + (long long)k * d;
			float s = 0.0f;
			for (int a = 0; a < d; a++)
				s += bk[a] * (kk_hot_value(src, bf16, (long long)r * d + a) - mu[a]);
			y[i] = s;
		}
	}
}

// enc_pc: block 0 encodes a hot part of n rows of d values (bf16 or
// float32) at src as codec.KakeyaPC.Encode does (fixed-rate format
// kakeya_pc) into dst, with the codec's pcParams prm (launch.go) and y, n
// x M floats of device scratch: y = B(x - mu) for the M stored components
// (x - mu staged in shared memory kk_pc_chunk rows at a time, each thread
// a component for up to 32 rows, summed in increasing column order: the
// host sums in its SIMD kernel's order, so y differs by float rounding);
// each component's block mean (summed in float64 in row order, rounded to
// fp16) and RMS; then, a thread per component and scale step, the
// squared error of each of the step's candidate scales (its RMS times the
// step, summed over the rows in order in float64), and a thread per
// component keeps the first of least error; and each row's code of its
// quantizer. The codes are gathered in shared memory (each added at its
// bit, CodeBit's, by an atomic add: the bits of two codes never overlap)
// and copied out, then the block is sealed. Dynamic shared memory (words):
// the staged rows (max(kk_pc_chunk * d, 16 M), rounded up to 4; the
// errors' M x KK_PC_STEPS float64 after), M means, M RMS, C scales,
// ceil(codes/4), then kk_seal's 2*blockDim.x + 32 and a flag.
KK_KERNEL void __launch_bounds__(256) enc_pc(kk_u8 *__restrict__ dst, const void *__restrict__ src, int bf16, int n,
                                             int d, const float *__restrict__ prm, float *__restrict__ y,
                                             const kk_u64 *__restrict__ jobs) {
	kk_enc_job job = kk_enc_job_of(jobs, dst, src, bf16, (kk_u64)prm, y);
	dst = (kk_u8 *)job.dst, src = job.src, bf16 = job.bf16, prm = (const float *)job.arg, y = (float *)job.scratch;
	KK_DYN_SHARED(float, smp);
	const int *pi = (const int *)prm;
	int M = pi[0], C = pi[1], rb = pi[5], param = pi[7] & 0xff, cbytes = pi[7] >> 8;
	const int *info = pi + 8;
	const float *levels = prm + 8 + 4 * M, *bounds = levels + KK_PC_LEVELS, *steps = bounds + KK_PC_LEVELS;
	const float *mu = steps + KK_PC_STEPS, *basis = mu + d;
	long long codesLen = kk_kakeya_pc_codes_len(n, d, M, C, cbytes);
	int words = (int)((codesLen + 3) >> 2);
	int R = kk_pc_chunk(n, d, M, blockDim.x), xsn = R * d > 16 * M ? R * d : 16 * M;
	xsn = (xsn + 3) & ~3;
	float *xs = smp, *means = smp + xsn, *rmsv = means + M, *scales = rmsv + M;
	double *errs = (double *)xs; // after the projection: M x KK_PC_STEPS
	kk_u32 *stage = (kk_u32 *)(scales + C), *seal = stage + words, *bad = seal + 2 * blockDim.x + 32;
	for (int i = threadIdx.x; i < words; i += blockDim.x)
		stage[i] = 0;
	if (threadIdx.x == 0)
		*bad = 0;
	__syncthreads();
	kk_pc_rotate(y, xs, src, bf16, n, d, M, R, kk_bits_f32((kk_u32)pi[6]), mu, basis, bad);
	__syncthreads();
	kk_u8 *mb = dst + kk_kakeya_pc_means_off(n, d, M, C, cbytes), *sb = dst + kk_kakeya_pc_scales_off(n, d, M, C, cbytes);
	for (int k = threadIdx.x; k < M; k += blockDim.x) {
		double s = 0.0;
		for (int r = 0; r < n; r++)
			s += (double)y[r * M + k];
		kk_u16 h = kk_f16_bits((float)(s / (double)n));
		float m = kk_f16(h);
		means[k] = m;
		kk_put_u16(mb + 2 * k, h);
		double ss = 0.0;
		for (int r = 0; r < n; r++) {
			double v = (double)(y[r * M + k] - m);
			ss += v * v;
		}
		rmsv[k] = (float)__builtin_sqrt(ss / (double)n);
	}
	__syncthreads();
	// Each coded component's candidate scales, a thread each: step f's
	// error, or -1 where the search stops before it (a zero step, or a
	// scale that rounds to 0 at or before f).
	for (int p = threadIdx.x; p < M * KK_PC_STEPS; p += blockDim.x) {
		int k = p % M, f = p / M, w = info[4 * k];
		if (w == 0)
			continue;
		float rms = rmsv[k], s = 0.0f;
		bool on = true;
		for (int f2 = 0; f2 <= f && on; f2++) {
			on = steps[f2] > 0.0f;
			if (on) {
				s = kk_round_f16(rms * steps[f2]);
				on = s > 0.0f;
			}
		}
		double e = -1.0;
		if (on) {
			const float *lv = levels + (1 << w) - 2, *bd = bounds + (1 << w) - 2;
			int nb = (1 << w) - 1;
			float m = means[k], inv = 1.0f / s;
			e = 0.0;
			for (int r = 0; r < n; r++) {
				float v = y[r * M + k] - m;
				float q = lv[kk_quantize(bd, nb, v * inv)] * s;
				double dq = (double)(v - q);
				e += dq * dq;
			}
		}
		errs[f * M + k] = e;
	}
	__syncthreads();
	for (int k = threadIdx.x; k < M; k += blockDim.x) {
		int w = info[4 * k];
		if (w == 0)
			continue;
		int t = info[4 * k + 3];
		long long base = info[4 * k + 1], stride = info[4 * k + 2];
		const float *bd = bounds + (1 << w) - 2;
		int nb = (1 << w) - 1;
		float m = means[k], rms = rmsv[k];
		float best = 0.0f;
		double bestErr = __builtin_inf();
		for (int f = 0; f < KK_PC_STEPS; f++) {
			double e = errs[f * M + k];
			if (e == -1.0)
				break;
			if (e < bestErr) {
				best = kk_round_f16(rms * steps[f]);
				bestErr = e;
			}
		}
		kk_put_u16(sb + 2 * t, kk_f16_bits(best));
		float inv = 1.0f / best;
		for (int r = 0; r < n; r++) {
			int code = best == 0.0f ? (1 << w) / 2 : kk_quantize(bd, nb, (y[r * M + k] - m) * inv);
			long long bit = base + r * stride;
			kk_u32 v = (kk_u32)code << (bit & 31);
			atomicAdd((int *)&stage[bit >> 5], (int)v);
			if ((bit & 31) + w > 32)
				atomicAdd((int *)&stage[(bit >> 5) + 1], (int)((kk_u32)code >> (32 - (bit & 31))));
		}
	}
	__syncthreads();
	kk_u8 *cb = dst + kk_kakeya_pc_codes_off(n, d, M, C, cbytes);
	for (long long i = threadIdx.x; i < codesLen; i += blockDim.x)
		cb[i] = (kk_u8)(stage[i >> 2] >> (8 * (i & 3)));
	if (threadIdx.x == 0) {
		kk_header(dst, KK_FORMAT_KAKEYA_PC, param, n, d, pi[4], *bad == 0);
		kk_put_u16(dst + 16, (kk_u32)M);
		kk_put_u16(dst + 18, (kk_u32)C);
		kk_put_u16(dst + 20, (kk_u32)rb);
	}
	kk_seal(dst, kk_kakeya_pc_size(n, d, M, C, cbytes), seal);
}

// Go's min and max of two floats: -0 below +0 (as package codec's
// encoders compare), which fminf and fmaxf leave unspecified.
KK_DEVICE float kk_go_min(float a, float b) {
	return a < b || (a == b && (kk_f32_bits(a) >> 31)) ? a : b;
}
KK_DEVICE float kk_go_max(float a, float b) {
	return a > b || (a == b && !(kk_f32_bits(a) >> 31)) ? a : b;
}

// kk_f16_floor returns the largest fp16 value <= v (codec's f16Floor).
KK_DEVICE float kk_f16_floor(float v) {
	kk_u16 h = kk_f16_bits(v);
	if (kk_f16(h) <= v)
		return kk_f16(h);
	if (h == 0)
		h = 0x8001; // +0 above a tiny negative v
	else if (!(h & 0x8000))
		h--;
	else
		h++;
	return kk_f16(h);
}

// kk_step_code returns min(255, floor(16 log2 q)) for q >= 1 (+Inf
// included), codec.Int4's first step code e0, exactly and without a
// logarithm: q's binary exponent, then the largest r with 2^(r/16) <= q's
// mantissa. No float32 lies within 5e-9 (relative) of an irrational
// 2^(r/16), so the comparison decides as Go's math.Log2 (within 1e-16)
// does.
KK_DEVICE int kk_step_code(float q) {
	const double t[16] = {
	    1.0,                1.0442737824274138, 1.0905077326652577, 1.1387886347566916,
	    1.189207115002721,  1.241857812073484,  1.2968395546510096, 1.3542555469368927,
	    1.4142135623730951, 1.4768261459394993, 1.5422108254079407, 1.6104903319492543,
	    1.681792830507429,  1.7562521603732995, 1.8340080864093424, 1.9152065613971474,
	};
	kk_u32 u = kk_f32_bits(q);
	int ex = (int)(u >> 23) - 127;
	if (ex >= 16)
		return 255; // 16 * 16 > 255, +Inf included
	double m = (double)kk_bits_f32((u & 0x7fffffu) | 0x3f800000u);
	int r = 0;
	while (r < 15 && m >= t[r + 1])
		r++;
	int e = 16 * ex + r;
	return e > 255 ? 255 : e;
}

// kk_mul_rn returns a*b rounded, never fused into an add: clang compiles
// CUDA with fp-contract=fast, which ignores the contract pragma (and
// turns __nvvm_mul_rn_f into a plain multiply), while an explicit mul.rn
// is never contracted by ptxas. The emulator's g++ targets no FMA.
#ifdef KK_EMU
KK_DEVICE float kk_mul_rn(float a, float b) { return a * b; }
KK_DEVICE double kk_dmul_rn(double a, double b) { return a * b; }
#else
KK_DEVICE float kk_mul_rn(float a, float b) {
	float r;
	asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
	return r;
}
KK_DEVICE double kk_dmul_rn(double a, double b) {
	double r;
	asm("mul.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(a), "d"(b));
	return r;
}
#endif

// kk_quant_error is cpu.QuantError without its early exit (a sum of
// non-negative terms only grows, so a search keeping the least result
// picks the same): value i of the group (first, stride, count) in lane
// i%8, the lanes added pairwise. Each term v^2 (v - (m + q s))^2 is
// rounded at every operation, as Go's is: no fused multiply-add
// (kk_mul_rn).
KK_DEVICE float kk_quant_error(const void *src, int bf16, long long first, long long stride, int count, float m, float s,
                               float top) {
	float inv = s > 0.0f ? 1.0f / s : 0.0f;
	float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
	for (int k = 0; k < 8; k++)
		for (int i = k; i < count; i += 8) {
			float v = kk_hot_value(src, bf16, first + i * stride);
			float x = (v - m) * inv;
			x = x < 0.0f ? 0.0f : x > top ? top : x;
			float q = __builtin_rintf(x);
			float qs = kk_mul_rn(q, s);
			float dd = v - (m + qs);
			float vv = v * v;
			float vd = vv * dd;
			l[k] += kk_mul_rn(vd, dd);
		}
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

// kk_int4_group returns group k of an int4 block of n rows of d values
// (codec.Int4's group): its first flat index, stride and count.
KK_DEVICE void kk_int4_group_at(int k, int n, int d, int g, int perChannel, long long *first, long long *stride,
                                int *count) {
	if (perChannel) {
		int per = (n + g - 1) / g, ch = k / per, t = (k - ch * per) * g;
		*first = (long long)t * d + ch;
		*stride = d;
		*count = g < n - t ? g : n - t;
	} else {
		int per = (d + g - 1) / g, row = k / per, j = (k - row * per) * g;
		*first = (long long)row * d + j;
		*stride = 1;
		*count = g < d - j ? g : d - j;
	}
}

// kk_int4_group_range returns the least and greatest of a group's count
// values from first by stride, by Go's min and max (codec.Int4's range scan).
KK_DEVICE void kk_int4_group_range(const void *src, int bf16, long long first, long long stride, int count,
                                   float *mn, float *mx) {
	float lo = __builtin_inff(), hi = -__builtin_inff();
	for (int t = 0; t < count; t++) {
		float v = kk_hot_value(src, bf16, first + t * stride);
		lo = kk_go_min(lo, v);
		hi = kk_go_max(hi, v);
	}
	*mn = lo;
	*mx = hi;
}

// enc_int4: block 0 encodes a hot part of n rows of d values (bf16 or
// float32) at src as codec.Int4.Encode does, without rotation, into dst,
// header and CRC included. cfg is the block's header parameter byte (the
// code width 2 or 4, 0x10 per channel, 0x40 8-bit group parameters; no
// rotation) plus the group size times 256; with jobs set the job's third
// word holds it. Each thread takes whole groups. 8-bit parameters: the
// block step S (the largest group's need, rounded up to fp16), then per
// group of the five step codes around its need and the two zero points at
// or above its minimum the pair of least weighted squared error
// (kk_quant_error, the first of equal ones, in codec's order); fp16
// parameters: the minimum rounded down and the step rounded. A value's
// code is the nearest level, ties to even, clamped. The codes are
// gathered in shared memory (bits added at their place by atomic adds,
// never overlapping) and copied out, then the block is sealed. Dynamic
// shared memory: ceil(codes/4) words, kk_seal's 2*blockDim.x + 32, then
// two (the flag and S).
KK_KERNEL void __launch_bounds__(256) enc_int4(kk_u8 *__restrict__ dst, const void *__restrict__ src, int bf16, int n, int d,
                                               int cfg, const kk_u64 *__restrict__ jobs) {
	kk_enc_job job = kk_enc_job_of(jobs, dst, src, bf16, (kk_u64)cfg, 0);
	dst = (kk_u8 *)job.dst, src = job.src, bf16 = job.bf16, cfg = (int)job.arg;
	int param = cfg & 0xff, g = cfg >> 8, bits = param & 15, perChannel = (param >> 4) & 1, byteParams = (param >> 6) & 1;
	int top = (1 << bits) - 1;
	float tf = (float)top;
	long long codesLen = kk_int4_codes_len(n, d, bits, g, perChannel, 0, byteParams);
	int words = (int)((codesLen + 3) >> 2);
	int groups = (int)kk_int4_groups(n, d, bits, g, perChannel, 0, byteParams);
	KK_DYN_SHARED(float, smi);
	kk_u32 *stage = (kk_u32 *)smi, *seal = stage + words, *bad = seal + 2 * blockDim.x + 32, *Sbits = bad + 1;
	for (int i = threadIdx.x; i < words; i += blockDim.x)
		stage[i] = 0;
	if (threadIdx.x == 0)
		*bad = 0, *Sbits = 0;
	__syncthreads();
	// The input's check (codec's checkInput and the fp16 parameter
	// range), and with 8-bit parameters each group's need, the block's
	// step S their largest (atomicMax on the bits of a float >= +0).
	float am = 0.0f;
	for (long long i = threadIdx.x; i < (long long)n * d; i += blockDim.x) {
		float a = __builtin_fabsf(kk_hot_value(src, bf16, i));
		if (!(a <= 3.40282347e38f))
			a = __builtin_inff();
		am = a > am ? a : am;
	}
	if (am > 32752.0f) // maxF16/2
		atomicAdd((int *)bad, 1);
	if (byteParams)
		for (int k = threadIdx.x; k < groups; k += blockDim.x) {
			long long first, stride;
			int count;
			kk_int4_group_at(k, n, d, g, perChannel, &first, &stride, &count);
			float mn, mx;
			kk_int4_group_range(src, bf16, first, stride, count, &mn, &mx);
			float need = kk_go_max(kk_go_max((mx - mn) / tf, -mn / 128.0f), mn / 127.0f);
			atomicMax((int *)Sbits, (int)kk_f32_bits(need));
		}
	__syncthreads();
	float S = 0.0f;
	kk_u8 *prm = dst + kk_int4_groups_off(n, d, bits, g, perChannel, 0, byteParams);
	if (byteParams) {
		S = kk_bits_f32(*Sbits);
		kk_u16 s16 = kk_f16_bits(S);
		if (kk_f16(s16) < S)
			s16++;
		S = kk_f16(s16);
		if (threadIdx.x == 0)
			kk_put_u16(dst + kk_int4_step_off(n, d, bits, g, perChannel, 0, byteParams), s16);
	}
	for (int k = threadIdx.x; k < groups; k += blockDim.x) {
		long long first, stride;
		int count;
		kk_int4_group_at(k, n, d, g, perChannel, &first, &stride, &count);
		float mn, mx;
		kk_int4_group_range(src, bf16, first, stride, count, &mn, &mx);
		float m, s;
		if (byteParams) {
			float need = kk_go_max(kk_go_max((mx - mn) / tf, -mn / 128.0f), mn / 127.0f);
			int e = 0, zp = 0;
			if (need > 0.0f) {
				int e0 = kk_step_code(S / need);
				float best = __builtin_inff();
				int elo = e0 - 2 > 0 ? e0 - 2 : 0, ehi = e0 + 2 < 255 ? e0 + 2 : 255;
				for (int ec = elo; ec <= ehi; ec++) {
					float sc = S * kk_step_scale(ec);
					float fq = __builtin_floorf(mn / sc);
					int fl = fq < -1e9f ? -1000000000 : fq > 1e9f ? 1000000000 : (int)fq;
					int zlo = fl > -128 ? fl : -128, zhi = fl + 1 < 127 ? fl + 1 : 127;
					for (int zc = zlo; zc <= zhi; zc++) {
						float sse = kk_quant_error(src, bf16, first, stride, count, (float)zc * sc, sc, tf);
						if (sse < best)
							best = sse, e = ec, zp = zc;
					}
				}
			}
			prm[2 * k] = (kk_u8)e;
			prm[2 * k + 1] = (kk_u8)(kk_i8)zp;
			s = S * kk_step_scale(e);
			m = (float)zp * s;
		} else {
			m = kk_f16_floor(mn);
			s = kk_round_f16(kk_go_max(0.0f, (mx - m) / tf));
			kk_put_u16(prm + 4 * k, kk_f16_bits(m));
			kk_put_u16(prm + 4 * k + 2, kk_f16_bits(s));
		}
		float inv = s > 0.0f ? 1.0f / s : 0.0f;
		for (int t = 0; t < count; t++) {
			long long j = first + t * stride;
			float x = (kk_hot_value(src, bf16, j) - m) * inv;
			x = x < 0.0f ? 0.0f : x > tf ? tf : x;
			kk_u32 code = (kk_u32)__builtin_rintf(x);
			long long bit = j * bits; // a code never straddles a word
			atomicAdd((int *)&stage[bit >> 5], (int)(code << (bit & 31)));
		}
	}
	__syncthreads();
	kk_u8 *cb = dst + kk_int4_codes_off(n, d, bits, g, perChannel, 0, byteParams);
	for (long long i = threadIdx.x; i < codesLen; i += blockDim.x)
		cb[i] = (kk_u8)(stage[i >> 2] >> (8 * (i & 3)));
	if (threadIdx.x == 0)
		kk_header(dst, KK_FORMAT_INT4, param, n, d, g, *bad == 0);
	kk_seal(dst, kk_int4_size(n, d, bits, g, perChannel, 0, byteParams), seal);
}

// KK_EC_ATTEMPTS is how many codings enc_pcec tries before it gives up on
// fitting a block in its slot: the host's rule, then four smaller
// budgets (kk_ec_factor), then every coded component at scale 0.
#define KK_EC_ATTEMPTS 6

// kk_ec_factor returns the share of the entropy-constrained budget
// enc_pcec's attempt a charges: all of it (the host's rule), then less.
KK_DEVICE double kk_ec_factor(int a) { return a <= 0 ? 1.0 : a == 1 ? 0.875 : a == 2 ? 0.75 : a == 3 ? 0.5 : 0.25; }

// KK_ENC_SHARED_CAP is the most dynamic shared memory an encoder takes
// (attnSharedCap in launch.go: the most without opting in).
#define KK_ENC_SHARED_CAP 49152

// kk_pcec_staged returns the floats enc_pcec stages rows in (R rows of
// d), where the C x S trials' errors and lengths (float64) then lie if
// the kernel's shared memory holds them within KK_ENC_SHARED_CAP (else
// they lie in the scratch): pcecStaged in encode.go is the same.
KK_DEVICE int kk_pcec_staged(int R, int d, int M, int C, int S, int threads) {
	int rows = (R * d + 3) & ~3, trials = 4 * C * S;
	long long with = 4LL * ((trials > rows ? trials : rows) + 2 * M + C) + 4LL * (2 * threads + 32) + 8;
	return with <= KK_ENC_SHARED_CAP && trials > rows ? trials : rows;
}

// kk_shfl_f64 returns lane src's v.
KK_DEVICE double kk_shfl_f64(double v, int src) {
	kk_u64 u = __builtin_bit_cast(kk_u64, v);
	int lo = __shfl_sync(0xffffffffu, (int)(kk_u32)u, src), hi = __shfl_sync(0xffffffffu, (int)(kk_u32)(u >> 32), src);
	return __builtin_bit_cast(double, (kk_u64)(kk_u32)lo | (kk_u64)(kk_u32)hi << 32);
}

// kk_ec_pick returns, to every lane of the warp, the index of the least
// (key, index) pair over its lanes: the first lane of least key.
KK_DEVICE int kk_ec_pick(double key, int idx) {
	for (int o = 16; o > 0; o >>= 1) {
		kk_u64 u = __builtin_bit_cast(kk_u64, key);
		int lo = __shfl_xor_sync(0xffffffffu, (int)(kk_u32)u, o), hi = __shfl_xor_sync(0xffffffffu, (int)(kk_u32)(u >> 32), o);
		double k2 = __builtin_bit_cast(double, (kk_u64)(kk_u32)lo | (kk_u64)(kk_u32)hi << 32);
		int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
		if (k2 < key || (k2 == key && i2 < idx))
			key = k2, idx = i2;
	}
	return idx;
}

// kk_ec_round16 rounds n up to a multiple of 16.
KK_DEVICE long long kk_ec_round16(long long n) { return (n + 15) & ~15LL; }

// enc_pcec: block 0 encodes a hot part of n rows of d values (bf16 or
// float32) at src as codec.KakeyaPC.Encode does with entropy coding
// (format kakeya_pc_ec, kakeya-pc with ec=true and kvtc), in the stream
// layout of the codec's parameter byte (1 or 2), into dst, a slot of the
// bytes pcecParams' encoder words give, with the codec's pcecParams prm
// (launch.go) and scratch (pcecScratch in encode.go: y, n x M floats;
// each trial's squared error and code length, C x S float64 each; a
// symbol word per code, C x n; the stream's buffer, 4 + 4 lanes + 2 C n
// bytes). The steps are enc_pc's and the host's: y = B(x - mu)
// (kk_pc_rotate, summed in another order than the host's SIMD dot
// products, so y differs by float rounding); each stored component's
// block mean (float64 in row order, rounded to fp16), written to the
// means section unless layout 2's lanes carry it (the first min(M, 32))
// and its RMS; a thread per coded component and scale step, the step's
// scale (its RMS times the step, rounded to fp16; none where that is not
// positive), its squared error and, for the entropy-constrained rule,
// its codes' length under the layout-1 costs, each summed over the rows
// in order in float64, products rounded (kk_dmul_rn, kk_mul_rn: no fused
// multiply-add, as Go's arithmetic), in shared memory where it holds them
// (kk_pcec_staged); warp 0 then walks the coded components in order, a
// lane per scale step, each component taking the host's scale: the least
// error (kvtc), or the least error among the scales whose codes fit n
// times the option's expected bits plus what the components before left
// unspent, else the cheapest (the first of equal ones: a warp reduction
// of (key, step), kk_ec_pick); a thread per code, its
// cell (the middle one at scale 0) and its symbol's frequency and first
// slot. Then the lanes (warp 0 for layout 2's 32, threads 0..7 for
// layout 1's 8; each lane's next symbol word loaded a step ahead) code
// the symbols from the last group to the first, as
// the host's ransPut: each lane whose state would pass the bound hands
// out its low 16 bits, the lanes that do vote (__ballot_sync) and each
// writes its word below the group's others in lane order (a prefix count
// of the vote), so the words lie in the order a decoder reads them; then
// the final states (layout 2: the mask of 4-byte ones and each state in
// 3 or 4 bytes; layout 1: 4 bytes each) before them. A stream that does
// not fit the slot is coded again (the selection, codes and lanes) under
// a smaller budget (kk_ec_factor; kvtc, whose rule looks at no budget,
// first takes the entropy-constrained rule at its whole budget), last
// with every scale 0; one that still does not (which no
// calibration of the rate makes) gives an empty stream and magic 0, as
// does input the host refuses. The stream is copied behind the fields,
// code_bytes set to its length, and the block sealed over that length.
// Dynamic shared memory (words): the staged rows (kk_pcec_staged: the
// trials' results after them where they fit), M means, M RMS, C scales, kk_seal's 2*blockDim.x +
// 32, a flag and the stream's length.
KK_KERNEL void __launch_bounds__(256) enc_pcec(kk_u8 *__restrict__ dst, const void *__restrict__ src, int bf16, int n,
                                               int d, const float *__restrict__ prm, kk_u8 *__restrict__ scratch,
                                               const kk_u64 *__restrict__ jobs) {
	kk_enc_job job = kk_enc_job_of(jobs, dst, src, bf16, (kk_u64)prm, scratch);
	dst = (kk_u8 *)job.dst, src = job.src, bf16 = job.bf16, prm = (const float *)job.arg, scratch = (kk_u8 *)job.scratch;
	KK_DYN_SHARED(float, sme);
	const int *pi = (const int *)prm;
	int M = pi[0], C = pi[1], lw = pi[6], param = pi[7] & 0xff, E = pi[10];
	const int *info = pi + 12;
	const float *levels = prm + 12 + 4 * C, *mu = levels + lw, *basis = mu + d;
	const kk_u8 *tabs = (const kk_u8 *)*(const kk_u64 *)(pi + 8);
	const int *ew = pi + E, *einfo = ew + 4;
	int S = ew[0], rule = ew[1];
	long long cap = ew[3];
	const float *steps = (const float *)(ew + 4 + 8 * C);
	bool two = param == 2;
	int lanes = two ? KK_EC2_LANES : KK_EC_LANES, sbits = two ? KK_EC2_SCALE_BITS : KK_EC_SCALE_BITS;
	int h = two ? (M < lanes ? M : lanes) : 0, total = C * n;
	float *y = (float *)scratch;
	double *errs = (double *)(scratch + kk_ec_round16(4LL * n * M)), *lens = errs + (long long)C * S;
	kk_u32 *sym = (kk_u32 *)(lens + (long long)C * S);
	kk_u8 *buf = (kk_u8 *)(sym + total);
	long long bufLen = 4 + 4 * lanes + 2LL * total;
	int R = kk_pc_chunk(n, d, M, blockDim.x), xsn = kk_pcec_staged(R, d, M, C, S, blockDim.x);
	float *xs = sme, *means = xs + xsn, *rmsv = means + M, *scales = rmsv + M;
	if (xsn >= 4 * C * S) { // the trials' results fit where the rows were staged
		errs = (double *)xs;
		lens = errs + C * S;
	}
	kk_u32 *seal = (kk_u32 *)(scales + C), *bad = seal + 2 * blockDim.x + 32, *slen = bad + 1;
	if (threadIdx.x == 0)
		*bad = 0, *slen = 0;
	__syncthreads();
	kk_pc_rotate(y, xs, src, bf16, n, d, M, R, kk_bits_f32((kk_u32)ew[2]), mu, basis, bad);
	__syncthreads();
	kk_u8 *mb = dst + kk_kakeya_pc_ec_means_off(n, d, M - h, C, 0), *sb = dst + kk_kakeya_pc_ec_scales_off(n, d, M - h, C, 0);
	long long codesOff = kk_kakeya_pc_ec_codes_off(n, d, M - h, C, 0);
	for (int k = threadIdx.x; k < M; k += blockDim.x) {
		double s = 0.0;
		for (int r = 0; r < n; r++)
			s += (double)y[r * M + k];
		kk_u16 hb = kk_f16_bits((float)(s / (double)n));
		float m = kk_f16(hb);
		means[k] = m;
		if (k >= h)
			kk_put_u16(mb + 2 * (k - h), hb);
		double ss = 0.0;
		for (int r = 0; r < n; r++) {
			double v = (double)(y[r * M + k] - m);
			ss += kk_dmul_rn(v, v);
		}
		rmsv[k] = (float)__builtin_sqrt(ss / (double)n);
	}
	__syncthreads();
	// Every coded component's trial scales, a thread each: the squared
	// error and the codes' cost, or -1 where the step's scale is not
	// positive (the host skips it).
	for (int p = threadIdx.x; p < C * S; p += blockDim.x) {
		int t = p / S, f = p - t * S, k = info[4 * t];
		const int *ei = einfo + 8 * t;
		float s = kk_round_f16(rmsv[k] * steps[f]);
		double e = -1.0, l = 0.0;
		if (s > 0.0f) {
			const float *lv = levels + info[4 * t + 1], *bd = (const float *)(ew + ei[0]);
			const float *cost = (const float *)(ew + ei[2]);
			int nb = ei[1];
			float m = means[k], inv = 1.0f / s;
			e = 0.0;
			for (int r = 0; r < n; r++) {
				float v = y[r * M + k] - m;
				int q = kk_quantize(bd, nb, v * inv);
				double dq = (double)(v - kk_mul_rn(lv[q], s));
				e += kk_dmul_rn(dq, dq);
				if (ei[2])
					l += (double)cost[q];
			}
		}
		errs[p] = e;
		lens[p] = l;
	}
	__syncthreads();
	long long len = 0;
	for (int attempt = 0;; attempt++) {
		if (threadIdx.x < 32) {
			// The scales, component after component, lane f trying step
			// f: the budget of each takes what the ones before left
			// unspent. The host keeps the first scale of least error among
			// those that fit (or, for kvtc, among all), and where none
			// fits the first of least length: the least (key, step) over
			// the candidates (kk_ec_pick).
			const int f = threadIdx.x;
			bool constrained = rule || attempt > 0, zero = attempt == KK_EC_ATTEMPTS - 1;
			double slack = 0.0;
			for (int t = 0; t < C; t++) {
				int k = info[4 * t];
				const int *ei = einfo + 8 * t;
				double bits = __builtin_bit_cast(double, (kk_u64)(kk_u32)ei[4] | (kk_u64)(kk_u32)ei[5] << 32);
				double budget = kk_dmul_rn((double)n, bits);
				if (attempt > 0) // kvtc's first retry: its whole budget
					budget = kk_dmul_rn(budget, kk_ec_factor(rule ? attempt : attempt - 1));
				budget += slack;
				double e = -1.0, l = 0.0;
				if (f < S && !zero)
					e = errs[t * S + f], l = lens[t * S + f];
				bool valid = e >= 0.0, fits = valid && l <= budget;
				unsigned vm = __ballot_sync(0xffffffffu, valid), fm = __ballot_sync(0xffffffffu, fits);
				bool cand = constrained && fm ? fits : valid;
				int w = kk_ec_pick(cand ? (constrained && !fm ? l : e) : __builtin_inf(), cand ? f : 32);
				float best = 0.0f;
				if (vm) {
					best = kk_round_f16(rmsv[k] * steps[w]);
					double bestLen = kk_shfl_f64(l, w);
					if (constrained && best != 0.0f)
						slack = budget - bestLen;
				}
				if (f == 0)
					scales[t] = best;
			}
		}
		__syncthreads();
		// Each code's symbol word of its layout's table.
		for (int p = threadIdx.x; p < total; p += blockDim.x) {
			int t = p / n, r = p - t * n, k = info[4 * t];
			const int *ei = einfo + 8 * t;
			float s = scales[t];
			int q = ei[3] / 2; // a constant component: the middle code
			if (s != 0.0f)
				q = kk_quantize((const float *)(ew + ei[0]), ei[1], (y[r * M + k] - means[k]) * (1.0f / s));
			sym[p] = ((const kk_u32 *)(tabs + (two ? ei[7] : ei[6])))[q];
		}
		__syncthreads();
		if ((int)threadIdx.x < lanes) {
			const int ln = threadIdx.x;
			const unsigned grp = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1, below = (1u << ln) - 1;
			kk_u32 x = 1u << 16;
			if (ln < h)
				x += kk_f16_bits(means[ln]); // layout 2: lane ln carries stored mean ln
			long long p = bufLen;
			int G = (total + lanes - 1) / lanes;
			kk_u32 next = G > 0 && (G - 1) * lanes + ln < total ? sym[(G - 1) * lanes + ln] : 0u;
			for (int g = G - 1; g >= 0; g--) {
				int k = g * lanes + ln;
				kk_u32 w = next; // loaded a step ahead: off the lanes' chain
				if (g > 0)
					next = sym[k - lanes];
				bool emit = false;
				kk_u32 wd = 0;
				if (k < total) {
					kk_u32 f = w & 0xffffu, st = w >> 16;
					if (x >= f << (32 - sbits)) {
						emit = true;
						wd = x & 0xffffu;
						x >>= 16;
					}
					x = ((x / f) << sbits) + x % f + st;
				}
				unsigned want = __ballot_sync(grp, emit);
				if (emit) {
					long long at = p - 2 * __builtin_popcount(want) + 2 * __builtin_popcount(want & below);
					buf[at] = (kk_u8)wd;
					buf[at + 1] = (kk_u8)(wd >> 8);
				}
				p -= 2 * __builtin_popcount(want);
			}
			long long start;
			if (two) {
				unsigned longs = __ballot_sync(grp, x >= (1u << 24));
				start = p - 4 - 3 * lanes - __builtin_popcount(longs);
				if (ln == 0)
					kk_put_u32(buf + start, longs);
				long long at = start + 4 + 3 * ln + __builtin_popcount(longs & below);
				int nb = 3 + (int)(longs >> ln & 1);
				for (int i = 0; i < nb; i++)
					buf[at + i] = (kk_u8)(x >> (8 * i));
			} else {
				start = p - 4 * lanes;
				kk_put_u32(buf + start + 4 * ln, x);
			}
			if (ln == 0)
				*slen = (kk_u32)(bufLen - start);
		}
		__syncthreads();
		len = *slen;
		if (codesOff + len <= cap || attempt == KK_EC_ATTEMPTS - 1)
			break;
		__syncthreads(); // every thread read the length before the next attempt
	}
	bool fits = codesOff + len <= cap;
	if (!fits)
		len = 0;
	for (long long i = threadIdx.x; i < len; i += blockDim.x)
		dst[codesOff + i] = buf[bufLen - len + i];
	for (int t = threadIdx.x; t < C; t += blockDim.x)
		kk_put_u16(sb + 2 * t, kk_f16_bits(scales[t]));
	__syncthreads(); // the refusals counted
	if (threadIdx.x == 0) {
		kk_header(dst, KK_FORMAT_KAKEYA_PC_EC, param, n, d, pi[4], *bad == 0 && fits);
		kk_put_u16(dst + 16, (kk_u32)(M - h));
		kk_put_u16(dst + 18, (kk_u32)C);
		kk_put_u32(dst + 20, (kk_u32)len);
	}
	kk_seal(dst, codesOff + len, seal);
}

// enc_bf16: block 0 rounds a hot part of n rows of d float32 values at src
// to bfloat16 into dst, n x d bf16 values row-major: the payload of
// codec.BF16's block (its bytes past the header), which attention and the
// store's Read then take as a bf16 hot part. This is how a side kept
// uncompressed (a boundary layer, a plan's "none") is encoded over float32
// hot rows; over bf16 rows the hot slot is that payload already and
// nothing is launched. Each value is rounded as codec.BF16.Encode rounds
// it (tensor.F32ToBF16, kk_f32_to_bf16): to nearest, ties to even,
// subnormals and infinities alike, a NaN kept a quiet NaN of its sign.
// Rows already bf16 (the job's flag) are copied as they are. Four values
// a thread and step where the rows are 16-byte aligned and the output
// 8-byte aligned (16 bytes read, 8 written), the rest one at a time. With
// jobs set, block b converts job b: dst and src (and its format) the
// words 0 and 1 of its entry (kk_enc_job_of). No shared memory.
KK_KERNEL void __launch_bounds__(256) enc_bf16(kk_u16 *__restrict__ dst, const void *__restrict__ src, int bf16, int n, int d,
                                               const kk_u64 *__restrict__ jobs) {
	kk_enc_job job = kk_enc_job_of(jobs, dst, src, bf16, 0, 0);
	kk_u16 *o = (kk_u16 *)job.dst;
	long long total = (long long)n * d;
	if (job.bf16) {
		const kk_u16 *x = (const kk_u16 *)job.src;
		for (long long i = threadIdx.x; i < total; i += blockDim.x)
			o[i] = x[i];
		return;
	}
	const float *x = (const float *)job.src;
	long long quads = ((unsigned long long)x & 15) == 0 && ((unsigned long long)o & 7) == 0 ? total >> 2 : 0;
	for (long long q = threadIdx.x; q < quads; q += blockDim.x) {
		kk_f32x4 v = kk_ldg4(x + 4 * q);
		((kk_u64 *)o)[q] = (kk_u64)kk_f32_to_bf16(v[0]) | (kk_u64)kk_f32_to_bf16(v[1]) << 16 |
		                   (kk_u64)kk_f32_to_bf16(v[2]) << 32 | (kk_u64)kk_f32_to_bf16(v[3]) << 48;
	}
	for (long long i = 4 * quads + threadIdx.x; i < total; i += blockDim.x)
		o[i] = kk_f32_to_bf16(x[i]);
}
