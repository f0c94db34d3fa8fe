// Attention's reader of kakeya_pc_ec blocks (format 9: kakeya-pc with
// ec=true, kvtc), included by all.cu after attention.cu, which declares
// kk_pcec_tile and whose basis product (kk_pc_finish) it shares. A block
// holds the means and scales of kakeya_pc, then its codes as one rANS
// stream of interleaved lanes (codec/format.go's description; the
// constants below from formats.h), in the stream layout its parameter
// byte names: 1 (8 lanes, 14-bit tables, 4-byte final states) or 2, what
// the codecs write by default (32 lanes, 12-bit tables with one packed
// entry per slot, final states in 3 or 4 bytes, the first min(M, 32)
// stored means carried in the lanes' start states). The kernel reads
// either as stored: nothing is converted on the host, nothing decoded
// into a copy.
//
// The lanes' state updates are independent but their refill words are
// one stream in decode order, so a group of threads, one per lane (a
// whole warp for layout 2), decodes a block: each step every lane decodes
// its symbol, the lanes that need a word vote (__ballot_sync), and each
// takes the word at the stream's position plus 2 bytes for every lane
// before it that needs one (a warp prefix count, popc of the ballot below
// the lane). The latents of the tile's rows go straight to the tile's
// first M columns, as kk_pc_tile's do, and are multiplied by the basis
// there. Layout 2's carried means are known only once a lane is back at
// its start state, so its warp decodes every symbol of the block; layout
// 1's stops at the tile's last row.
//
// pcecParams (launch.go), 4-byte words:
//
//	[0..7]         M (stored components), C (coded), d, n, the blocks' tag,
//	               the options' count, the level words, the parameter byte
//	[8..9]         the device address of the rANS tables (one copy per
//	               quantizer family: for each option its layout-1
//	               2^scale_bits-byte slot table, then a word per symbol,
//	               freq | start << 16; then for each option its layout-2
//	               2^scale_bits2 packed entries, symbol | freq << 8 |
//	               (slot - start) << 20, the codec's own words)
//	[12+4t..15+4t] coded component t: its stored index, first level word,
//	               and its option's layout-1 and layout-2 tables at those
//	               byte offsets
//	[12+4C..]      the options' levels, float32
//	[..+d]         the calibration mean, float32
//	[..+M*d]       the stored components' basis rows, float32
//
// Bounds: the host stores a block only after checking its header, CRC,
// layout byte and that its length is the layout's for its code_bytes
// (checkPCEC), so the stream lies in the slot; even so every state and
// word is read only below code_bytes (a stream that ends early reads
// zeros), the loop runs a fixed number of steps (C*n/lanes, rounded up),
// a slot index is the state's low scale bits and a symbol comes from the
// option's table, always one of its option's: a corrupt stream decodes to
// wrong values (and a layout-2 block to wrong carried means), never to a
// read outside the block or the tables.

#define KK_EC_LANES ((int)kk_kakeya_pc_ec_lanes(0, 0, 0, 0, 0))
#define KK_EC_SCALE_BITS ((int)kk_kakeya_pc_ec_scale_bits(0, 0, 0, 0, 0))
#define KK_EC_WORD_BITS ((int)kk_kakeya_pc_ec_word_bits(0, 0, 0, 0, 0))
#define KK_EC2_LANES ((int)kk_kakeya_pc_ec_lanes2(0, 0, 0, 0, 0))
#define KK_EC2_SCALE_BITS ((int)kk_kakeya_pc_ec_scale_bits2(0, 0, 0, 0, 0))

// kk_ec_u16 reads the little-endian 16-bit word at p (2-byte aligned: the
// codes section starts at an even offset of a 256-byte aligned slot).
KK_DEVICE kk_u32 kk_ec_u16(const kk_u8 *p) { return *(const kk_u16 *)p; }

// kk_ec_le reads the nb-byte (nb <= 4) little-endian integer at p, of any
// alignment: layout 2's states and words start at odd offsets as often
// as at even ones.
KK_DEVICE kk_u32 kk_ec_le(const kk_u8 *p, int nb) {
	kk_u32 v = 0;
	for (int i = nb - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

// kk_pcec1 decodes the tile's latents from a layout-1 stream: threads
// 0..7, one lane each, up to the tile's last row of the last component.
KK_DEVICE void kk_pcec1(float *tile, int ld, const kk_u8 *codes, long long cb, const kk_u8 *scales, const int *info,
                        const float *levels, const kk_u8 *tabs, int C, int bs, int row0, int tn) {
	const int lanes = KK_EC_LANES;
	if ((int)threadIdx.x >= lanes)
		return;
	const int ln = threadIdx.x;
	const kk_u32 mask = (1u << KK_EC_SCALE_BITS) - 1, low = 1u << KK_EC_WORD_BITS;
	const unsigned group = (1u << lanes) - 1;
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
				lv = levels + e[1];
				slot = tabs + e[2];
				fs = (const kk_u32 *)(slot + (1 << KK_EC_SCALE_BITS));
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

// kk_pcec2 decodes the tile's latents from a layout-2 stream: warp 0, one
// lane a thread (layout 2 has 32 lanes; ransTables refuses other counts), every symbol of the block (the carried means come out of
// the lanes' last states), then lane i < h adds stored mean i, carried
// in its state, to column i of the tile's rows (the tile holds 0 there).
KK_DEVICE void kk_pcec2(float *tile, int ld, const kk_u8 *codes, long long cb, const kk_u8 *scales, const int *info,
                        const float *levels, const kk_u8 *tabs, int C, int bs, int h, int row0, int tn) {
	const int lanes = KK_EC2_LANES;
	if ((int)threadIdx.x >= lanes)
		return;
	const int ln = threadIdx.x;
	const kk_u32 mask = (1u << KK_EC2_SCALE_BITS) - 1, low = 1u << KK_EC_WORD_BITS;
	const unsigned below = (1u << ln) - 1;
	// The lanes' final states: a mask of the 4-byte ones, then each in 3
	// or 4 bytes, lane 0 first.
	kk_u32 longs = cb >= 4 ? kk_ec_le(codes, 4) : 0u;
	long long at = 4 + 3 * ln + __builtin_popcount(longs & below);
	int nb = 3 + (int)(longs >> ln & 1);
	kk_u32 x = at + nb <= cb ? kk_ec_le(codes + at, nb) : 0u;
	long long pos = 4 + 3 * lanes + __builtin_popcount(longs);
	const int total = C * bs;
	int tc = -1, col = 0, t = 0, i = ln;
	const kk_u32 *ent = (const kk_u32 *)tabs;
	const float *lv = levels;
	float sc = 0.0f;
	for (int k0 = 0; k0 < total; k0 += lanes) {
		bool need = false;
		if (k0 + ln < total) {
			// Symbol k0 + ln is row i of component t: i moves by 32 a
			// step, so no division past the first.
			while (i >= bs)
				i -= bs, t++;
			if (t != tc) { // a new component: its option's entries and levels
				const int *e = info + 4 * t;
				tc = t;
				col = e[0];
				lv = levels + e[1];
				ent = (const kk_u32 *)(tabs + e[3]);
				sc = kk_f16_at(scales + 2 * t);
			}
			kk_u32 en = ent[x & mask];
			if (i >= row0 && i < row0 + tn)
				tile[(i - row0) * ld + col] += sc * lv[en & 0xffu];
			x = (en >> 8 & mask) * (x >> KK_EC2_SCALE_BITS) + (en >> 20);
			need = x < low;
		}
		unsigned want = __ballot_sync(0xffffffffu, need);
		if (need) {
			long long w = pos + 2 * __builtin_popcount(want & below);
			x = x << KK_EC_WORD_BITS | (w + 2 <= cb ? kk_ec_le(codes + w, 2) : 0u);
		}
		pos += 2 * __builtin_popcount(want);
		i += lanes;
	}
	__syncwarp(); // every lane's latents are in before the means join them
	if (ln < h) {
		float m = kk_f16((kk_u16)(x - low));
		for (int j = 0; j < tn; j++)
			tile[j * ld + ln] += m;
	}
}

// kk_pcec_tile decodes rows row0..row0+tn-1 (tn <= 32) of a kakeya_pc_ec
// part into tile (row j at tile + j*ld, ld > d) with its codec's
// pcecParams prm. The whole block calls it: it syncs.
KK_DEVICE void kk_pcec_tile(float *tile, int ld, const kk_u8 *part, const float *__restrict__ prm, int bs, int d,
                            int row0, int tn) {
	const int *pi = (const int *)prm;
	int M = pi[0], C = pi[1], lw = pi[6];
	// Layout 2's first h means ride in its lanes; the means section holds
	// the rest (the host checked the block's layout byte and counts).
	bool two = part[3] == 2;
	int h = two ? (M < KK_EC2_LANES ? M : KK_EC2_LANES) : 0;
	long long cb = kk_kakeya_pc_ec_code_bytes(part);
	const kk_u8 *means = part + kk_kakeya_pc_ec_means_off(bs, d, M - h, C, cb);
	const kk_u8 *scales = part + kk_kakeya_pc_ec_scales_off(bs, d, M - h, C, cb);
	const kk_u8 *codes = part + kk_kakeya_pc_ec_codes_off(bs, d, M - h, C, cb);
	const int *info = pi + 12;
	const float *levels = prm + 12 + 4 * C, *mu = levels + lw, *basis = mu + d;
	const kk_u8 *tabs = (const kk_u8 *)*(const kk_u64 *)(pi + 8);
	// Every stored component's block mean first (0 for the carried ones,
	// added after the decode); the coded ones then add their scale times
	// their code's level.
	for (int i = threadIdx.x; i < tn * M; i += blockDim.x) {
		int j = i / M, k = i - j * M;
		tile[j * ld + k] = k < h ? 0.0f : kk_f16_at(means + 2 * (k - h));
	}
	__syncthreads();
	if (two)
		kk_pcec2(tile, ld, codes, cb, scales, info, levels, tabs, C, bs, h, row0, tn);
	else
		kk_pcec1(tile, ld, codes, cb, scales, info, levels, tabs, C, bs, row0, tn);
	__syncthreads();
	kk_pc_finish(tile, ld, mu, basis, M, d, tn);
}
