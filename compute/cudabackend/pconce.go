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

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
)

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
	rowsN, tabN int // bytes
	// unpackPays' and batchUnpack's scratch.
	pcBlock  []bool
	ctabs    []Ptr
	launches []Launch
	regions  []int
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
	p := compute.AttentionParams{Heads: a.Heads, KVHeads: a.KVHeads, Window: a.Window, BlockSize: a.BlockSize}
	if b.pcOnce == pcOnceModel && !b.unpackPays(t, first, blocks, a.N, a.Start, p) {
		return false
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

// batchUnpack plans pc_unpack for a batched step on the tensor cores: a
// pass whose table holds kakeya_pc parts and whose rows make decoding
// them once pay (pcUnpackPays, or Backend.pcOnce), or that holds
// kakeya_pc_ec parts (which no tensor-core kernel reads: decoded once
// whatever its rows, as attn_batch_pc would decode each of their tiles
// for a decode row), gets a region of the scratch and a call table. It returns each pass's call table (0:
// the pass reads its own table) and the pc_unpack launches, which must
// run before the attention launch. Called with mu held, the passes'
// tables up to date.
func (b *Backend) batchUnpack(passes []compute.AttentionPass) ([]Ptr, []Launch, error) {
	u := &b.unpack
	u.ctabs = grow(u.ctabs, len(passes))
	clear(u.ctabs)
	u.launches = u.launches[:0]
	if b.pcOnce == pcOnceNever {
		return u.ctabs, nil, nil
	}
	type region struct{ rows, tab int } // byte offsets
	at := region{}
	regions := u.regions[:0]
	for i := range passes {
		ps := &passes[i]
		a := ps.Attention.(*attention)
		t := a.tables[ps.KV]
		p := a.p
		first, blocks := a.firstBlock(ps.Start), ceilDiv(ps.Start+ps.N, p.BlockSize)
		if t == nil || !t.pc || !t.pcec && !b.unpackPays(t, first, blocks, ps.N, ps.Start, p) {
			regions = append(regions, -1, -1)
			continue
		}
		regions = append(regions, at.rows, at.tab)
		at.rows += roundUp((blocks-first)*p.KVHeads*2*p.BlockSize*p.HeadDim*2, encAlign)
		at.tab += roundUp(len(t.k)*(8+8+4), 16)
	}
	u.regions = regions
	if at.rows == 0 {
		return u.ctabs, nil, nil
	}
	if err := b.growScratch(&u.rows, &u.rowsN, at.rows); err != nil {
		return nil, nil, fmt.Errorf("cuda: kakeya-pc batched prefill scratch: %w", err)
	}
	if err := b.growScratch(&u.tab, &u.tabN, at.tab); err != nil {
		return nil, nil, fmt.Errorf("cuda: kakeya-pc batched prefill tables: %w", err)
	}
	for i := range passes {
		if regions[2*i] < 0 {
			continue
		}
		ps := &passes[i]
		a := ps.Attention.(*attention)
		t, p := a.tables[ps.KV], a.p
		n := len(t.k)
		e0, e1 := a.firstBlock(ps.Start)*p.KVHeads, ceilDiv(ps.Start+ps.N, p.BlockSize)*p.KVHeads
		ctab := u.tab + Ptr(regions[2*i+1])
		u.ctabs[i] = ctab
		u.launches = append(u.launches, pcUnpackLaunch(ctab, t.dev, t.dev+Ptr(8*n), t.dev+Ptr(40*n), t.dev+Ptr(24*n), t.dev+Ptr(32*n),
			u.rows+Ptr(regions[2*i]), e0, e1-e0, n, p.BlockSize, p.HeadDim))
	}
	return u.ctabs, u.launches, nil
}

// unpackPays reports whether a call of n queries from position start over
// blocks first..blocks-1 of t decodes its kakeya_pc parts once: always
// under pcOnceAlways, else where pcUnpackPays says so. Called with mu
// held.
func (b *Backend) unpackPays(t *blockTable, first, blocks, n, start int, p compute.AttentionParams) bool {
	if b.pcOnce == pcOnceAlways {
		return true
	}
	kv := p.KVHeads
	pcBlock := grow(b.unpack.pcBlock, blocks-first)
	b.unpack.pcBlock = pcBlock
	clear(pcBlock)
	for e := first * kv; e < blocks*kv; e++ {
		if t.kp[e] != 0 || t.vp[e] != 0 {
			pcBlock[e/kv-first] = true
		}
	}
	return pcUnpackPays(pcBlock, first, n, start, p.Heads/kv, p.Window, p.BlockSize)
}
