//go:build cgo

// The kernels of quant_neon_arm64.c for one way of taking int8 dot
// products: included there once per way, with KQN(name) naming this
// copy's functions, KQN_ATTR their target attribute and KQN(dot) the dot
// product (defined before the include). Every sum is the Go loops' of
// quant.go: the integer block dots exact, the f32 scaling of each block
// and the running sum in the same order, so the results are theirs bit
// for bit.

// KQN(k32) sets out[t*ldo] for the nt token rows of x (ldx apart, scales
// ldd apart) and one row of a 32-value type: per block the signed values
// unpacked once, then per token the integer dot, scaled by the block's
// two scales and added to the token's sum, as dotQ8_0 and its kin do.
KQN_INLINE KQN_ATTR void KQN(k32)(int type, int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx,
				   const float *xd, long ldd, long nb, float *out, long ldo) {
	float sum[KQN_T] = {0};
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQN_BYTES];
		kqn_prefetch(blk, off[KQN_BYTES]);
		int8x16_t q0, q1;
		kqn_unpack32(type, blk, off, &q0, &q1);
		float dw = kqn_f16(blk + off[KQN_D]);
		KQN_UNROLL
		for (int t = 0; t < nt; t++) {
			const int8_t *xs = x + t * ldx + 32 * b;
			int32x4_t a = KQN(dot)(vdupq_n_s32(0), q0, vld1q_s8(xs));
			a = KQN(dot)(a, q1, vld1q_s8(xs + 16));
			float s = dw * xd[t * ldd + b];
			float p = (float)vaddvq_s32(a) * s;
			sum[t] = sum[t] + p;
		}
	}
	KQN_UNROLL
	for (int t = 0; t < nt; t++)
		out[t * ldo] = sum[t];
}

// KQN(q45k) is KQN(k32) for Q4_K (five = 0) and Q5_K: per block and
// 64-value part the two 32-value runs unpacked once; per token each run's
// dot times its 6-bit scale gathered in one vector, reduced once per
// block; the mins against the activations' sums of 16; then dotQ45K's f32
// scaling.
KQN_INLINE KQN_ATTR void KQN(q45k)(int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx,
				    const float *xd, long ldd, const int32_t *bsums, long ldb, long nb, int five,
				    float *out, long ldo) {
	const uint8x16_t m4 = vdupq_n_u8(0x0f), b16 = vdupq_n_u8(16);
	float sum[KQN_T] = {0};
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQN_BYTES];
		kqn_prefetch(blk, off[KQN_BYTES]);
		const uint8_t *sc = blk + off[KQN_SCALES];
		uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
		if (five)
			qh0 = vld1q_u8(blk + off[KQN_QH]), qh1 = vld1q_u8(blk + off[KQN_QH] + 16);
		int32x4_t acc[KQN_T];
		int32_t mins[KQN_T];
		KQN_UNROLL
		for (int t = 0; t < nt; t++)
			acc[t] = vdupq_n_s32(0), mins[t] = 0;
		KQN_UNROLL
		for (int c = 0; c < 4; c++) {
			int32_t s0, m0, s1, m1;
			kqn_scale_min(2 * c, sc, &s0, &m0);
			kqn_scale_min(2 * c + 1, sc, &s1, &m1);
			uint8x16_t qa = vld1q_u8(blk + off[KQN_QS] + 32 * c), qb = vld1q_u8(blk + off[KQN_QS] + 32 * c + 16);
			uint8x16_t la = vandq_u8(qa, m4), lb = vandq_u8(qb, m4);
			uint8x16_t ha = vshrq_n_u8(qa, 4), hb = vshrq_n_u8(qb, 4);
			if (five) {
				uint8x16_t u0 = vdupq_n_u8((uint8_t)(1 << (2 * c))), u1 = vdupq_n_u8((uint8_t)(2 << (2 * c)));
				la = vorrq_u8(la, vandq_u8(vtstq_u8(qh0, u0), b16));
				lb = vorrq_u8(lb, vandq_u8(vtstq_u8(qh1, u0), b16));
				ha = vorrq_u8(ha, vandq_u8(vtstq_u8(qh0, u1), b16));
				hb = vorrq_u8(hb, vandq_u8(vtstq_u8(qh1, u1), b16));
			}
			// Values of at most 31: signed bytes as they are.
			int8x16_t l0 = vreinterpretq_s8_u8(la), l1 = vreinterpretq_s8_u8(lb);
			int8x16_t h0 = vreinterpretq_s8_u8(ha), h1 = vreinterpretq_s8_u8(hb);
			KQN_UNROLL
			for (int t = 0; t < nt; t++) {
				const int8_t *xs = x + t * ldx + 256 * b + 64 * c;
				const int32_t *bs = bsums + t * ldb + 16 * b + 4 * c;
				int32x4_t d0 = KQN(dot)(vdupq_n_s32(0), l0, vld1q_s8(xs));
				d0 = KQN(dot)(d0, l1, vld1q_s8(xs + 16));
				int32x4_t d1 = KQN(dot)(vdupq_n_s32(0), h0, vld1q_s8(xs + 32));
				d1 = KQN(dot)(d1, h1, vld1q_s8(xs + 48));
				acc[t] = vmlaq_n_s32(vmlaq_n_s32(acc[t], d0, s0), d1, s1);
				mins[t] += m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
			}
		}
		float dw = kqn_f16(blk + off[KQN_D]), dmw = kqn_f16(blk + off[KQN_DMIN]);
		KQN_UNROLL
		for (int t = 0; t < nt; t++) {
			float d = dw * xd[t * ldd + b];
			float dmin = dmw * xd[t * ldd + b];
			float a = d * (float)vaddvq_s32(acc[t]), m = dmin * (float)mins[t];
			sum[t] = sum[t] + (a - m);
		}
	}
	KQN_UNROLL
	for (int t = 0; t < nt; t++)
		out[t * ldo] = sum[t];
}

// KQN(q6k) is KQN(q45k) for Q6_K: per 32-value run the 6-bit values less
// 32 unpacked once; per token each 16 values' dot times its int8 scale.
KQN_INLINE KQN_ATTR void KQN(q6k)(int nt, const uint8_t *w, const long *off, const int8_t *x, long ldx,
				   const float *xd, long ldd, long nb, float *out, long ldo) {
	const uint8x16_t m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(3);
	const int8x16_t e32 = vdupq_n_s8(32);
	float sum[KQN_T] = {0};
	for (long b = 0; b < nb; b++) {
		const uint8_t *blk = w + b * off[KQN_BYTES];
		kqn_prefetch(blk, off[KQN_BYTES]);
		const int8_t *sc = (const int8_t *)(blk + off[KQN_SCALES]);
		int32x4_t acc[KQN_T];
		KQN_UNROLL
		for (int t = 0; t < nt; t++)
			acc[t] = vdupq_n_s32(0);
		KQN_UNROLL
		for (int h = 0; h < 2; h++) {
			const uint8_t *ql = blk + off[KQN_QL] + 64 * h, *qhp = blk + off[KQN_QH] + 32 * h;
			uint8x16_t qh[2] = {vld1q_u8(qhp), vld1q_u8(qhp + 16)};
			uint8x16_t l[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32), vld1q_u8(ql + 48)};
			KQN_UNROLL
			for (int k = 0; k < 4; k++) {
				// Run k: ql's low nibbles (k < 2) or high ones, of bytes 0-31
				// (k even) or 32-63, with bits 2k and 2k+1 of qh.
				int8x16_t q[2];
				KQN_UNROLL
				for (int i = 0; i < 2; i++) {
					uint8x16_t lo = l[2 * (k & 1) + i];
					lo = k < 2 ? vandq_u8(lo, m4) : vshrq_n_u8(lo, 4);
					uint8x16_t hi = vshlq_n_u8(vandq_u8(vshlq_u8(qh[i], vdupq_n_s8((int8_t)(-2 * k))), m2), 4);
					q[i] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), e32);
				}
				int i0 = 8 * h + 2 * k;
				KQN_UNROLL
				for (int t = 0; t < nt; t++) {
					const int8_t *xs = x + t * ldx + 256 * b + 128 * h + 32 * k;
					int32x4_t p0 = KQN(dot)(vdupq_n_s32(0), q[0], vld1q_s8(xs));
					int32x4_t p1 = KQN(dot)(vdupq_n_s32(0), q[1], vld1q_s8(xs + 16));
					acc[t] = vmlaq_n_s32(vmlaq_n_s32(acc[t], p0, sc[i0]), p1, sc[i0 + 1]);
				}
			}
		}
		float dw = kqn_f16(blk + off[KQN_D]);
		KQN_UNROLL
		for (int t = 0; t < nt; t++) {
			float d = dw * xd[t * ldd + b];
			float p = d * (float)vaddvq_s32(acc[t]);
			sum[t] = sum[t] + p;
		}
	}
	KQN_UNROLL
	for (int t = 0; t < nt; t++)
		out[t * ldo] = sum[t];
}

// KQN(tile) runs one row against nt tokens, nt a constant.
KQN_INLINE KQN_ATTR void KQN(tile)(int type, int nt, const uint8_t *wr, const long *off, const int8_t *xi,
				    long cols, const float *di, const int32_t *bi, long nb, float *o, long ldo) {
	switch (type) {
	case KQN_Q8_0:
		KQN(k32)(KQN_Q8_0, nt, wr, off, xi, cols, di, nb, nb, o, ldo);
		break;
	case KQN_Q4_0:
		KQN(k32)(KQN_Q4_0, nt, wr, off, xi, cols, di, nb, nb, o, ldo);
		break;
	case KQN_Q5_0:
		KQN(k32)(KQN_Q5_0, nt, wr, off, xi, cols, di, nb, nb, o, ldo);
		break;
	case KQN_Q4_K:
		KQN(q45k)(nt, wr, off, xi, cols, di, nb, bi, cols / 16, nb, 0, o, ldo);
		break;
	case KQN_Q5_K:
		KQN(q45k)(nt, wr, off, xi, cols, di, nb, bi, cols / 16, nb, 1, o, ldo);
		break;
	case KQN_Q6_K:
		KQN(q6k)(nt, wr, off, xi, cols, di, nb, nb, o, ldo);
		break;
	}
}

// KQN(rows) is kqn_rows for this way of taking dot products.
static KQN_ATTR void KQN(rows)(int type, const uint8_t *w, long rowb, long r0, long r1, const long *off,
			       const int8_t *x, const float *xd, const int32_t *bsums, long n, long cols, float *out,
			       long ldo) {
	long group = (type == KQN_Q8_0 || type == KQN_Q4_0 || type == KQN_Q5_0) ? 32 : 256;
	long nb = cols / group;
	// Tokens in blocks of about 256 KiB of activations, which stay in the
	// L2 cache while the rows pass over them.
	long tb = 256 * 1024 / cols;
	tb = tb < KQN_T ? KQN_T : tb - tb % KQN_T;
	for (long t0 = 0; t0 < n; t0 += tb)
		for (long r = r0; r < r1; r++) {
			const uint8_t *wr = w + r * rowb;
			for (long i = t0; i < n && i < t0 + tb; i += KQN_T) {
				const int8_t *xi = x + i * cols;
				const float *di = xd + i * nb;
				const int32_t *bi = bsums + i * (cols / 16);
				float *o = out + i * ldo + r;
				switch (n - i < KQN_T ? n - i : KQN_T) {
				case 1:
					KQN(tile)(type, 1, wr, off, xi, cols, di, bi, nb, o, ldo);
					break;
				case 2:
					KQN(tile)(type, 2, wr, off, xi, cols, di, bi, nb, o, ldo);
					break;
				case 3:
					KQN(tile)(type, 3, wr, off, xi, cols, di, bi, nb, o, ldo);
					break;
				default:
					KQN(tile)(type, 4, wr, off, xi, cols, di, bi, nb, o, ldo);
					break;
				}
			}
		}
}
