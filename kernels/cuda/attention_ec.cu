// Attention's reader of kakeya_pc_ec blocks (format 9: kakeya-pc with
// ec=true, kvtc), included by all.cu after attention.cu, which declares
// kk_pcec_tile and whose basis product (kk_pc_finish) it shares. A block holds the means and scales of
// kakeya_pc, then its codes as one rANS stream of 8 interleaved lanes
// (codec/format.go's description; the constants below from formats.h).
// The lanes' state updates are independent but their refill words are
// one stream in decode order, so a group of 8 threads (one per lane)
// decodes a block: each step every lane decodes its symbol, the lanes
// that need a word vote (__ballot_sync over the group), and each takes
// the word at the stream's position plus 2 bytes for every lane before it
// that needs one. Nothing is decoded into a copy: the latents of the
// tile's rows go straight to the tile's first M columns, as kk_pc_tile's
// do, and are multiplied by the basis there.
//
// pcecParams (launch.go), 4-byte words:
//
//	[0..7]         M (stored components), C (coded), d, n, the blocks' tag,
//	               the options' count, the level words, the parameter byte
//	[8..9]         the device address of the rANS tables (one copy per
//	               quantizer family: for each option its 2^scale_bits-byte
//	               slot table, then a word per symbol, freq | start << 16)
//	[12+4t..15+4t] coded component t: its stored index, option, first level
//	               word, and its option's table at that byte offset
//	[12+4C..]      the options' levels, float32
//	[..+d]         the calibration mean, float32
//	[..+M*d]       the stored components' basis rows, float32
//
// Bounds: the host stores a block only after checking its header, CRC
// and that its length is the layout's for its code_bytes
// (checkEncoded), so the stream lies in the slot; even so every word is
// read only below code_bytes (a stream that ends early reads zeros), the
// loop runs a fixed C*n/8 steps, and a symbol comes from the slot table,
// always one of its option's: a corrupt stream decodes to wrong values,
// never to a read outside the block or the tables.

#define KK_EC_LANES ((int)kk_kakeya_pc_ec_lanes(0, 0, 0, 0, 0))
#define KK_EC_SCALE_BITS ((int)kk_kakeya_pc_ec_scale_bits(0, 0, 0, 0, 0))
#define KK_EC_WORD_BITS ((int)kk_kakeya_pc_ec_word_bits(0, 0, 0, 0, 0))

// kk_ec_u16 reads the little-endian 16-bit word at p (2-byte aligned: the
// codes section starts at an even offset of a 256-byte aligned slot).
KK_DEVICE kk_u32 kk_ec_u16(const kk_u8 *p) { return *(const kk_u16 *)p; }

// kk_pcec_tile decodes rows row0..row0+tn-1 (tn <= 32) of a kakeya_pc_ec
// part into tile (row j at tile + j*ld, ld > d) with its codec's
// pcecParams prm. The whole block calls it: it syncs.
KK_DEVICE void kk_pcec_tile(float *tile, int ld, const kk_u8 *part, const float *__restrict__ prm, int bs, int d,
                            int row0, int tn) {
	const int *pi = (const int *)prm;
	int M = pi[0], C = pi[1], lw = pi[6];
	long long cb = kk_kakeya_pc_ec_code_bytes(part);
	const kk_u8 *means = part + kk_kakeya_pc_ec_means_off(bs, d, M, C, cb);
	const kk_u8 *scales = part + kk_kakeya_pc_ec_scales_off(bs, d, M, C, cb);
	const kk_u8 *codes = part + kk_kakeya_pc_ec_codes_off(bs, d, M, C, cb);
	const int *info = pi + 12;
	const float *levels = prm + 12 + 4 * C, *mu = levels + lw, *basis = mu + d;
	// Every stored component's block mean first; the coded ones then add
	// their scale times their code's level.
	for (int i = threadIdx.x; i < tn * M; i += blockDim.x) {
		int j = i / M, k = i - j * M;
		tile[j * ld + k] = kk_f16_at(means + 2 * k);
	}
	__syncthreads();
	const int lanes = KK_EC_LANES;
	if ((int)threadIdx.x < lanes) {
		const int ln = threadIdx.x;
		const kk_u32 mask = (1u << KK_EC_SCALE_BITS) - 1, low = 1u << KK_EC_WORD_BITS;
		const unsigned group = (1u << lanes) - 1;
		const kk_u8 *tabs = (const kk_u8 *)*(const kk_u64 *)(pi + 8);
		// The lane's final state, where the encoder left it.
		kk_u32 x = 0;
		if (4 * lanes <= cb)
			x = kk_ec_u16(codes + 4 * ln) | kk_ec_u16(codes + 4 * ln + 2) << 16;
		long long pos = 4 * lanes;
		// Symbols past the tile's rows of the last component are not
		// needed: the loop stops at its last row.
		int end = (C - 1) * bs + row0 + tn;
		int tc = -1, col = 0;
		const kk_u8 *slot = tabs;
		const kk_u32 *fs = (const kk_u32 *)tabs;
		const float *lv = levels;
		float sc = 0.0f;
		for (int k0 = 0; k0 < end; k0 += lanes) {
			int k = k0 + ln;
			bool need = false;
			if (k < end) {
				int t = k / bs, i = k - t * bs;
				if (t != tc) { // a new component: its option's table and levels
					const int *e = info + 4 * t;
					tc = t;
					col = e[0];
					slot = tabs + e[3];
					fs = (const kk_u32 *)(slot + (1 << KK_EC_SCALE_BITS));
					lv = levels + e[2];
					sc = kk_f16_at(scales + 2 * t);
				}
				kk_u32 s = slot[x & mask], f = fs[s];
				if (i >= row0 && i < row0 + tn)
					tile[(i - row0) * ld + col] += sc * lv[s];
				x = (f & 0xffffu) * (x >> KK_EC_SCALE_BITS) + (x & mask) - (f >> 16);
				need = x < low;
			}
			unsigned want = __ballot_sync(group, need);
			if (need) {
				long long at = pos + 2 * __builtin_popcount(want & ((1u << ln) - 1));
				x = x << KK_EC_WORD_BITS | (at + 2 <= cb ? kk_ec_u16(codes + at) : 0u);
			}
			pos += 2 * __builtin_popcount(want);
		}
	}
	__syncthreads();
	kk_pc_finish(tile, ld, mu, basis, M, d, tn);
}
