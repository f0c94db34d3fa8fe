package cudabackend

// Prefill over fixed-rate kakeya-pc blocks, decoded once. The tensor-core
// prefill kernel's _pc variant (attn_prefill_pc_d<D>) decodes a key or
// value tile of a kakeya_pc part in every CTA that walks it: a call of n
// query rows over a KV head has about n x group / 64 row tiles, each of
// which decodes every encoded tile it sees, so the decodes grow as rows
// times keys. pc_unpack instead decodes each of the call's kakeya_pc parts
// once, as bf16 rows (keys before RoPE, as a hot part holds them) into a
// scratch area, and writes a table for the call in which those parts are
// hot bf16 blocks at their scratch slots; the plain kernel
// (attn_prefill_d<D>) then reads every part. pcUnpackPays decides between
// the two by that count. Entropy-coded kakeya-pc parts (format 9), which
// no tensor-core kernel reads, are always decoded once by pc_unpack (by
// the format-9 decoder, kk_pcec_tile): the call then runs on the tensor
// cores rather than on attn_split_pc, the float32 split kernel that
// decodes every key tile's stream in each split.

import "fmt"

// Settings of Backend.pcOnce, which chooses how prefill reads kakeya_pc
// parts: by pcUnpackPays (the default), or always or never by pc_unpack
// (for tests that compare the paths).
const (
	pcOnceModel  = 0
	pcOnceAlways = 1
	pcOnceNever  = -1
)

// pcUnpack is the backend's pc_unpack scratch: the decoded rows and the
// call's table. Guarded by Backend.mu; one for every call, since the
// stream runs the calls one after another.
type pcUnpack struct {
	rows, tab   Ptr
	rowsN, tabN int    // bytes
	pcBlock     []bool // unpackPC's scratch
}

// pcUnpackPays reports whether decoding a prefill call's kakeya_pc parts
// once (pc_unpack) costs fewer tile decodes than the _pc kernel's decode
// in every row tile, by 2x at least: the extra launch, and the scratch's
// writes and reads, cost about as much as a tile decode or two (see
// docs/cuda.md). pcBlock[b] says whether block first+b holds a kakeya_pc
// part of some KV head; the call has n queries from position start, a
// group of group query heads per KV head and a window (0: none) over
// blocks of bs rows.
func pcUnpackPays(pcBlock []bool, first, n, start, group, window, bs int) bool {
	once := 0
	for _, pc := range pcBlock {
		if pc {
			once++
		}
	}
	if once == 0 {
		return false
	}
	walked := 0 // decodes of encoded blocks by the row tiles, each tile of a block alike
	rows := n * group
	for r0 := 0; r0 < rows; r0 += prefillRows {
		lo, hi := start+r0/group, start+min(rows-1, r0+prefillRows-1)/group // the tile's first and last query
		for b, pc := range pcBlock {
			k0, k1 := (first+b)*bs, (first+b+1)*bs // the block's keys
			if pc && k0 <= hi && (window == 0 || k1 > lo-window+1) {
				walked++
			}
		}
	}
	return walked >= 2*once
}

// unpackPC runs pc_unpack for the prefill call a over blocks first..
// blocks-1 of table t (which holds kakeya_pc or kakeya_pc_ec parts) where
// the model (or Backend.pcOnce) says it pays, or always for ec (t holds
// kakeya_pc_ec parts, which only attn_split_pc reads otherwise), and
// points a at the call's table with every part hot or read by the plain
// kernel. It reports whether it did. Called with mu held.
func (b *Backend) unpackPC(a *attnArgs, t *blockTable, first, blocks int, ec bool) bool {
	if b.pcOnce == pcOnceNever {
		return false
	}
	if ec {
		return b.runUnpack(a, t, first, blocks)
	}
	kv := a.KVHeads
	e0, e1 := first*kv, blocks*kv
	if b.pcOnce == pcOnceModel {
		pcBlock := grow(b.unpack.pcBlock, blocks-first)
		b.unpack.pcBlock = pcBlock
		clear(pcBlock)
		for e := e0; e < e1; e++ {
			if t.kp[e] != 0 || t.vp[e] != 0 {
				pcBlock[e/kv-first] = true
			}
		}
		if !pcUnpackPays(pcBlock, first, a.N, a.Start, a.Heads/kv, a.Window, a.BlockSize) {
			return false
		}
	}
	return b.runUnpack(a, t, first, blocks)
}

// runUnpack queues pc_unpack for unpackPC. Called with mu held.
func (b *Backend) runUnpack(a *attnArgs, t *blockTable, first, blocks int) bool {
	kv := a.KVHeads
	e0, e1, n := first*kv, blocks*kv, len(t.k)
	u := &b.unpack
	if err := b.growScratch(&u.rows, &u.rowsN, (e1-e0)*2*a.BlockSize*a.HeadDim*2); err != nil {
		b.fail(fmt.Errorf("cuda: kakeya-pc prefill scratch of %d blocks: %w", blocks-first, err))
		return false
	}
	if err := b.growScratch(&u.tab, &u.tabN, n*(8+8+4)); err != nil {
		b.fail(fmt.Errorf("cuda: kakeya-pc prefill table of %d entries: %w", n, err))
		return false
	}
	b.enqueue(pcUnpackLaunch(u.tab, a.KTab, a.VTab, a.Fmts, a.KPTab, a.VPTab, u.rows, e0, e1-e0, n, a.BlockSize, a.HeadDim), false)
	a.KTab, a.VTab, a.Fmts = u.tab, u.tab+Ptr(8*n), u.tab+Ptr(16*n)
	a.KPTab, a.VPTab = 0, 0
	return b.err == nil
}

// pcUnpackLaunch decodes the kakeya_pc and kakeya_pc_ec parts of entries e0..e0+entries-1
// of a layer's block table (n entries: ktab, vtab, fmts, kptab, vptab) into
// bf16 rows at scratch (entry e0+i's keys at 2i x bs x d values, its values
// after them) and writes the call's table at ctab (n key addresses, n
// value addresses, n formats), each such part replaced by its scratch
// rows as a bf16 hot part: a block per 32 rows of a part.
// Kernel: pc_unpack(uint64 *ctab, const uint64 *ktab, const uint64 *vtab, const int *fmts,
// const uint64 *kptab, const uint64 *vptab, uint16 *scratch, int e0, int n, int bs, int d).
func pcUnpackLaunch(ctab, ktab, vtab, fmts, kptab, vptab, scratch Ptr, e0, entries, n, bs, d int) Launch {
	positive("pc_unpack", entries, n, bs, d)
	if e0 < 0 || e0+entries > n || d > maxHeadDim {
		panic(fmt.Sprintf("cuda: pc_unpack of entries %d..%d of %d, head dim %d", e0, e0+entries, n, d))
	}
	int32Of("pc_unpack scratch values", entries*2*bs*d)
	a := new(args).ptr(ctab).ptr(ktab).ptr(vtab).ptr(fmts).ptr(kptab).ptr(vptab).ptr(scratch).
		i32("e0", e0).i32("n", n).i32("block size", bs).i32("d", d)
	return Launch{
		Kernel: "pc_unpack",
		Grid:   Dim3{u32("pc_unpack row tiles", ceilDiv(bs, 32)), u32("pc_unpack entries", entries), 2},
		Block:  Dim3{encThreads, 1, 1},
		Shared: uint32(4 * 32 * (d + 1)),
		Args:   a.b, Params: a.offs,
	}
}
