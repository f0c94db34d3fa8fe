//go:build cgo

// Decoding of codec's rANS stream layout 2 (cpu.RANSDecode2 and
// RANSDecode2Streams) with NEON, the arm64 counterpart of rans_amd64.c:
// 32 lanes of 32-bit states sharing one stream of 16-bit words, decoded a
// group of 32 symbols at a time, as eight q registers of 4 lanes, up to
// four streams (blocks of one codec) side by side. NEON has no gather: a
// lane's packed table entry (symbol | freq << 8 | bias << 20) is read by
// a scalar load, four to a register (kkn_load4). Tables of up to 4
// symbols whose lookup (kernels/cpu/rans.go's RANSLookup) is in the
// narrow mode skip those loads: a lane's symbol is the count of the
// table's starts at or below its slot, taken by 16-bit compares of 8
// lanes at a time, and its frequency and start come from the lookup's fs
// words by TBL (vqtbl4q_u8 over 64 bytes). Levels of tables of up to 32
// symbols are read by TBL from registers, larger ones by scalar loads.
// Each component's table picks one of these modes before its groups, so
// the group loop does not branch on it. The refill takes the lanes below
// 2^16 eight at a time: the next 16 bytes of words put in place by TBLs
// whose indices come from a table indexed by the 8 lanes' mask, the
// position advanced by that mask's word count.
//
// Each group reads at most 64 bytes of words; a kernel decodes a group
// only while 64 bytes remain, so it never reads past the stream, and
// returns where it stopped for the Go loop to finish. The arithmetic is
// integer and the levels are copied and scaled by one multiply, as the Go
// loop's l[symbol] * scale: the results are the Go decoder's bit for bit.

#include <stdint.h>
#include <arm_neon.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define KKN_INLINE static inline __attribute__((always_inline))

#define KKN_LANES 32
#define KKN_SCALE 12
#define KKN_WORD (1u << 16)
#define KKN_STREAMS 4

// The lookup's words (kernels/cpu/rans.go's ransAux*): each window
// symbol's freq | start << 16 from KKN_FS, the table's mode at KKN_MODE.
#define KKN_FS 128
#define KKN_MODE 194
#define KKN_WORDS 256
#define KKN_NARROW 1
// KKN_CMP_MAX is the most symbols a table may have for the compare lookup:
// past 4, its compares (one per symbol per 8 lanes) cost as many
// instructions as the loads of the entries (seven compares, for up to 8
// symbols, took 9.3 a symbol against the loads' 9.2; three take 7.5).
#define KKN_CMP_MAX 4

// kkn_rans2_expand[h][m] are the TBL indices that put the words of 16
// bytes (8 words) into lanes 4h to 4h+3 of the 8-lane mask m, the j-th
// lane set in m getting word j in its low half; every other byte is out
// of range, so zero. kkn_rans2_bytes[m] is the bytes the lanes of m take.
static uint8_t kkn_rans2_expand[2][256][16];
static uint8_t kkn_rans2_bytes[256];

__attribute__((constructor)) static void kkn_rans2_init(void) {
	for (int m = 0; m < 256; m++) {
		int j = 0;
		for (int lane = 0; lane < 8; lane++) {
			uint8_t *b = kkn_rans2_expand[lane / 4][m] + 4 * (lane % 4);
			b[0] = b[1] = b[2] = b[3] = 0xff;
			if (m >> lane & 1) {
				b[0] = (uint8_t)(2 * j), b[1] = (uint8_t)(2 * j + 1);
				j++;
			}
		}
		kkn_rans2_bytes[m] = (uint8_t)(2 * j);
	}
}

// kkn_load4 is a gather of t[i] for the 4 lanes of i (indices of a
// table's slots or symbols): two lanes a 64-bit move, four scalar loads.
KKN_INLINE uint32x4_t kkn_load4(const uint32_t *t, uint32x4_t i) {
	uint64_t a = vgetq_lane_u64(vreinterpretq_u64_u32(i), 0), b = vgetq_lane_u64(vreinterpretq_u64_u32(i), 1);
	uint64_t lo = (uint64_t)t[(uint32_t)a] | (uint64_t)t[a >> 32] << 32;
	uint64_t hi = (uint64_t)t[(uint32_t)b] | (uint64_t)t[b >> 32] << 32;
	return vcombine_u32(vcreate_u32(lo), vcreate_u32(hi));
}

// kkn_byte_index turns 4 lanes' symbols s (below 64) into the TBL indices
// of their 32-bit table words: bytes 4s, 4s+1, 4s+2, 4s+3.
KKN_INLINE uint8x16_t kkn_byte_index(uint32x4_t s) {
	return vreinterpretq_u8_u32(vorrq_u32(vmulq_n_u32(s, 0x04040404u), vdupq_n_u32(0x03020100u)));
}

// kkn_table32 reads the 32-bit words of a table of up to 16 (wide 0) or
// 32 (wide 1) in t (t[w] its words 16w to 16w+15, 64 bytes) at the byte
// indices idx (kkn_byte_index). Past 32 the TBLs cost more than loads.
KKN_INLINE uint32x4_t kkn_table32(const uint8x16x4_t *t, uint8x16_t idx, const int wide) {
	uint8x16_t v = vqtbl4q_u8(t[0], idx);
	if (wide) v = vqtbx4q_u8(v, t[1], vsubq_u8(idx, vdupq_n_u8(64)));
	return vreinterpretq_u32_u8(v);
}

// kkn_refill8 gives the lanes of x0 (lanes 0-3) and x1 (4-7) below 2^16
// the next words of src at *p, in lane order.
KKN_INLINE void kkn_refill8(uint32x4_t *x0, uint32x4_t *x1, const uint8_t *src, long *p) {
	static const uint16_t bit[8] = {1, 2, 4, 8, 16, 32, 64, 128};
	const uint32x4_t word = vdupq_n_u32(KKN_WORD);
	uint32x4_t r0 = vcltq_u32(*x0, word), r1 = vcltq_u32(*x1, word);
	uint16x8_t r = vuzp1q_u16(vreinterpretq_u16_u32(r0), vreinterpretq_u16_u32(r1));
	unsigned m = vaddvq_u16(vandq_u16(r, vld1q_u16(bit)));
	uint8x16_t w = vld1q_u8(src + *p);
	uint32x4_t w0 = vreinterpretq_u32_u8(vqtbl1q_u8(w, vld1q_u8(kkn_rans2_expand[0][m])));
	uint32x4_t w1 = vreinterpretq_u32_u8(vqtbl1q_u8(w, vld1q_u8(kkn_rans2_expand[1][m])));
	*x0 = vbslq_u32(r0, vsliq_n_u32(w0, *x0, 16), *x0);
	*x1 = vbslq_u32(r1, vsliq_n_u32(w1, *x1, 16), *x1);
	*p += kkn_rans2_bytes[m];
}

// A component's decode: how it finds its lanes' symbols and levels.
enum {
	KKN_CMP,   // the compare lookup (narrow mode, up to KKN_CMP_MAX symbols), levels by TBL
	KKN_TBL16, // entries loaded, levels by TBL from up to 16 in registers
	KKN_TBL32, // ... up to 32
	KKN_LOAD,  // entries and levels loaded
};

// A kkn_tab holds what a component's decode keeps in registers: the
// levels of up to 32 symbols, zeros past the table's end, and for the
// compare lookup the fs words and the starts less 1.
typedef struct {
	uint8x16x4_t lv[2], fs;
	uint16x8_t bnd[KKN_CMP_MAX - 1];
} kkn_tab;

// kkn_group decodes one group of a stream: the 32 lanes x, their values
// into out (the group's 32), times sc, words from src at *p, in mode
// (a constant once inlined), from the table's entries e, levels l (ns of
// them) and t.
KKN_INLINE void kkn_group(const int mode, uint32x4_t *x, float *out, float32_t sc, const uint8_t *src, long *p,
			  const uint32_t *e, const float *l, int ns, const kkn_tab *t) {
	const uint32x4_t m12 = vdupq_n_u32((1 << KKN_SCALE) - 1), m8 = vdupq_n_u32(255), m16 = vdupq_n_u32(0xffff);
#pragma GCC unroll 4
	for (int h = 0; h < 4; h++) {
		uint32x4_t *xq = x + 2 * h;
		if (mode == KKN_CMP) {
			// The 8 lanes' slots as 16-bit words; the symbol is the
			// number of starts past the first at or below the slot.
			uint32x4_t s0 = vandq_u32(xq[0], m12), s1 = vandq_u32(xq[1], m12);
			uint16x8_t w = vuzp1q_u16(vreinterpretq_u16_u32(s0), vreinterpretq_u16_u32(s1)), n = vdupq_n_u16(0);
#pragma GCC unroll 4
			for (int i = 0; i < KKN_CMP_MAX - 1; i++) n = vsubq_u16(n, vcgtq_u16(w, t->bnd[i]));
			uint32x4_t sy[2] = {vmovl_u16(vget_low_u16(n)), vmovl_high_u16(n)}, sl[2] = {s0, s1};
#pragma GCC unroll 2
			for (int q = 0; q < 2; q++) {
				uint8x16_t ix = kkn_byte_index(sy[q]);
				uint32x4_t fs = kkn_table32(&t->fs, ix, 0);
				float32x4_t v = vreinterpretq_f32_u32(kkn_table32(t->lv, ix, 0));
				// x = freq * (x >> 12) + slot - start.
				xq[q] = vaddq_u32(vmulq_u32(vandq_u32(fs, m16), vshrq_n_u32(xq[q], KKN_SCALE)), vsubq_u32(sl[q], vshrq_n_u32(fs, 16)));
				vst1q_f32(out + 8 * h + 4 * q, vmulq_n_f32(v, sc));
			}
		} else {
#pragma GCC unroll 2
			for (int q = 0; q < 2; q++) {
				uint32x4_t en = kkn_load4(e, vandq_u32(xq[q], m12));
				uint32x4_t s = vandq_u32(en, m8);
				// x = freq * (x >> 12) + offset.
				xq[q] = vsraq_n_u32(vmulq_u32(vandq_u32(vshrq_n_u32(en, 8), m12), vshrq_n_u32(xq[q], KKN_SCALE)), en, 20);
				float32x4_t v;
				if (mode == KKN_LOAD)
					v = vreinterpretq_f32_u32(kkn_load4((const uint32_t *)l, s));
				else
					v = vreinterpretq_f32_u32(kkn_table32(t->lv, kkn_byte_index(s), mode - KKN_TBL16));
				vst1q_f32(out + 8 * h + 4 * q, vmulq_n_f32(v, sc));
			}
		}
		kkn_refill8(&xq[0], &xq[1], src, p);
	}
}

// kkn_groups decodes the groups of a component of ns streams from g0 to
// per in mode, while each stream has 64 bytes left, and returns where it
// stopped.
KKN_INLINE long kkn_groups(const int ns, const int mode, uint32x4_t (*x)[8], long *p, float *const *out, long at, long g0,
			   long per, const uint8_t *const *src, const long *len, const float32_t *sc, const uint32_t *e,
			   const float *l, int nsy, const kkn_tab *t) {
	long g = g0;
	for (; g < per; g += KKN_LANES) {
		int room = 1;
#pragma GCC unroll 4
		for (int j = 0; j < ns; j++) room &= p[j] + 2 * KKN_LANES <= len[j];
		if (!room) break;
#pragma GCC unroll 4
		for (int j = 0; j < ns; j++) kkn_group(mode, x[j], out[j] + at + g, sc[j], src[j], &p[j], e, l, nsy, t);
	}
	return g;
}

// kkn_rans2_streams decodes whole groups of component-major symbols of ns
// (1 to 4, a constant once inlined) streams of the same tables side by
// side (per symbols per component, a multiple of 32; out[j][i] is symbol
// g0 + i of stream j, the first g0 of the first component decoded
// before), stream j from its bytes src[j][:len[j]] at position pos[j]
// with lanes xs[32*j:] and scales scale[j], while each stream has 64
// bytes left. It returns how many symbols of each it decoded, leaving
// each stream's position in pos and lanes in xs. aux, when not null, is
// the tables' lookups (RANSLookup.aux), one per table of ent.
KKN_INLINE long kkn_rans2_streams(const int ns, float *const *out, long total, long g0, const uint8_t *const *src,
				  const long *len, long *pos, long per, const uint32_t *ent, const int32_t *ent_off,
				  const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *const *scale,
				  const uint32_t *aux, uint32_t *xs) {
	uint32x4_t x[KKN_STREAMS][8];
	long p[KKN_STREAMS];
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) {
		for (int q = 0; q < 8; q++) x[j][q] = vld1q_u32(xs + KKN_LANES * j + 4 * q);
		p[j] = pos[j];
	}
	long k = 0;
	const long nc = (g0 + total) / per;
	for (long c = 0, at = -g0; c < nc; c++, at += per, g0 = 0) {
		const uint32_t *e = ent + ent_off[c];
		const float *l = lv + lev_off[c];
		const int nsy = nsym[c];
		kkn_tab t;
		const uint32_t *a = aux ? aux + (long)KKN_WORDS * (ent_off[c] >> KKN_SCALE) : 0;
		int mode = nsy <= 16 ? KKN_TBL16 : nsy <= 32 ? KKN_TBL32 : KKN_LOAD;
		if (mode != KKN_LOAD) {
			// The levels of up to 32 symbols in registers, read from a
			// copy with zeros past the table's end unless whole.
			const int w = nsy <= 16 ? 16 : 32;
			const float *lr = l;
			float lw[32];
			if (nsy < w) {
				for (int i = 0; i < 32; i++) lw[i] = 0;
				__builtin_memcpy(lw, l, (unsigned long)nsy * sizeof(float));
				lr = lw;
			}
			t.lv[0] = vld1q_u8_x4((const uint8_t *)lr);
			if (w == 32) t.lv[1] = vld1q_u8_x4((const uint8_t *)(lr + 16));
		}
		if (a && a[KKN_MODE] == KKN_NARROW && nsy <= KKN_CMP_MAX) {
			// The narrow mode's window starts at symbol 0; the starts
			// past the table's symbols are 2^16, which no slot reaches.
			mode = KKN_CMP;
			t.fs = vld1q_u8_x4((const uint8_t *)(a + KKN_FS));
			for (int i = 1; i < KKN_CMP_MAX; i++) t.bnd[i - 1] = vdupq_n_u16(i < nsy ? (uint16_t)((a[KKN_FS + i] >> 16) - 1) : 0xffff);
		}
		float32_t sc[KKN_STREAMS];
#pragma GCC unroll 4
		for (int j = 0; j < ns; j++) sc[j] = scale[j][c];
		long g;
		switch (mode) {
		case KKN_CMP:
			g = kkn_groups(ns, KKN_CMP, x, p, out, at, g0, per, src, len, sc, e, l, nsy, &t);
			break;
		case KKN_TBL16:
			g = kkn_groups(ns, KKN_TBL16, x, p, out, at, g0, per, src, len, sc, e, l, nsy, &t);
			break;
		case KKN_TBL32:
			g = kkn_groups(ns, KKN_TBL32, x, p, out, at, g0, per, src, len, sc, e, l, nsy, &t);
			break;
		default:
			g = kkn_groups(ns, KKN_LOAD, x, p, out, at, g0, per, src, len, sc, e, l, nsy, &t);
		}
		k += g - g0;
		if (g < per) break;
	}
#pragma GCC unroll 4
	for (int j = 0; j < ns; j++) {
		for (int q = 0; q < 8; q++) vst1q_u32(xs + KKN_LANES * j + 4 * q, x[j][q]);
		pos[j] = p[j];
	}
	return k;
}

// kkn_rans2_decode is kkn_rans2_streams for ns = 2, 3 or 4 streams, the
// unused ones' pointers null; aux may be null (every table by loads).
long kkn_rans2_decode(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
		      const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
		      const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
		      const float *scale0, const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux,
		      uint32_t *xs) {
	float *const out[KKN_STREAMS] = {out0, out1, out2, out3};
	const uint8_t *const src[KKN_STREAMS] = {src0, src1, src2, src3};
	const float *const scale[KKN_STREAMS] = {scale0, scale1, scale2, scale3};
	switch (ns) {
	case 2:
		return kkn_rans2_streams(2, out, total, g0, src, len, pos, per, ent, ent_off, lv, lev_off, nsym, scale, aux, xs);
	case 3:
		return kkn_rans2_streams(3, out, total, g0, src, len, pos, per, ent, ent_off, lv, lev_off, nsym, scale, aux, xs);
	default:
		return kkn_rans2_streams(4, out, total, g0, src, len, pos, per, ent, ent_off, lv, lev_off, nsym, scale, aux, xs);
	}
}

// kkn_rans2_decode1 is kkn_rans2_streams of one stream: it returns the
// symbols decoded and, shifted left by 32, the position after them (one
// return value, so that the Go side passes no pointer to a local).
long kkn_rans2_decode1(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
		       const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale,
		       const uint32_t *aux, uint32_t *xs) {
	float *const o[1] = {out};
	const uint8_t *const s[1] = {src};
	const float *const sc[1] = {scale};
	long k = kkn_rans2_streams(1, o, total, g0, s, &len, &pos, per, ent, ent_off, lv, lev_off, nsym, sc, aux, xs);
	return pos << 32 | k;
}
