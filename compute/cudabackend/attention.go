package cudabackend

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
)

// attention is one sequence's attention on the device. The kernels find a
// layer's blocks through a block table in device memory: per KV head and
// block the address and format of the K and V parts. Each layer has its
// own table, uploaded only when it changed (a new block, a block encoded),
// so most decode steps upload nothing. Preconditioned keys add the
// address of their inverse factor to their entry (attnArgs.LTab), and
// kakeya_pc parts the address of their codec's pcParams (KPTab, VPTab).
type attention struct {
	b         *Backend
	p         compute.AttentionParams
	maxBlocks int
	tables    map[compute.KVLayer]*blockTable
	scratch   Ptr
	scratchN  int
	// mem lists the device memory above, freed once the attention is
	// garbage collected (a closed sequence drops it).
	mem *devList
}

// devList is device memory owned by a value the garbage collector frees.
type devList struct{ ps []Ptr }

// freeList hands a collected owner's device memory to freeLater.
func (b *Backend) freeList(l *devList) {
	for _, p := range l.ps {
		b.freeLater(p)
	}
}

// blockTable is one layer's block table, on the host and on the device,
// indexed [block*KVHeads+head] as the kernels read it.
type blockTable struct {
	k, v []uint64 // part addresses
	l    []uint64 // the K part's inverse factor, 0 unless preconditioned
	// The K and V parts' pcParams (pcecParams), 0 unless the part is
	// partKakeyaPC (partKakeyaPCEC).
	kp, vp []uint64
	fmts   []int32 // formats of an entry's K and V parts (attnFormat)
	dev    Ptr     // k, then v, l, kp, vp, then fmts
	// host holds the six arrays above as dev lays them out, so that an
	// update is one copy of the span that changed.
	host []uint64
	// The kakeyaParams of the layer's Kakeya key and value parts (0 when
	// it has none): the kernels take one codec per side and layer.
	kprm, vprm Ptr
	// pre says whether some of the blocks read hold preconditioned keys,
	// which only attn_split_pre and attn_split_pc un-whiten; pc whether
	// some hold kakeya_pc parts (formats 8 and 9), which attn_split_pc
	// reads, and the tensor-core prefill's pc kernels too unless pcec
	// (some hold format 9, kakeya_pc_ec).
	pre, pc, pcec bool
	// The store's generation and the blocks when last checked: while
	// neither moved, no entry can have changed.
	gen    uint64
	blocks int
	// queued is the backend's epoch when a queued launch last read the
	// table: while it is the current one, an update waits for the queue.
	queued uint64
}

// NewAttention returns the attention of one sequence.
func (b *Backend) NewAttention(p compute.AttentionParams) (compute.Attention, error) {
	switch {
	case p.Heads <= 0 || p.KVHeads <= 0 || p.Heads%p.KVHeads != 0:
		return nil, fmt.Errorf("attention: %d query heads cannot share %d KV heads", p.Heads, p.KVHeads)
	case p.HeadDim <= 0 || p.HeadDim%2 != 0:
		return nil, fmt.Errorf("attention: head dim %d must be even and positive", p.HeadDim)
	case p.HeadDim > maxHeadDim:
		return nil, fmt.Errorf("attention: head dim %d exceeds the CUDA kernels' %d", p.HeadDim, maxHeadDim)
	case p.BlockSize <= 0 || p.MaxContext <= 0:
		return nil, fmt.Errorf("attention: block size %d and context %d must be positive", p.BlockSize, p.MaxContext)
	case p.Window < 0:
		return nil, fmt.Errorf("attention: window %d is negative", p.Window)
	case !(p.Scale >= 0 && p.Scale <= math.MaxFloat32) || !(p.Softcap >= 0 && p.Softcap <= math.MaxFloat32):
		return nil, fmt.Errorf("attention: scale %g and softcap %g must be finite and not negative", p.Scale, p.Softcap)
	}
	if err := b.Err(); err != nil {
		return nil, err
	}
	a := &attention{b: b, p: p, maxBlocks: (p.MaxContext + p.BlockSize - 1) / p.BlockSize, tables: map[compute.KVLayer]*blockTable{}, mem: &devList{}}
	runtime.AddCleanup(a, b.freeList, a.mem)
	return a, nil
}

// Forward implements compute.Attention.
func (a *attention) Forward(out, q compute.Buffer, n, start int, kv compute.KVLayer, cos, sin compute.Buffer) error {
	p := a.p
	d := p.HeadDim
	row := p.Heads * d
	switch {
	case n <= 0:
		return a.b.Err()
	case q.Len < n*row || out.Len < n*row:
		return fmt.Errorf("attention: %d queries need %d values of q and out, got %d and %d", n, n*row, q.Len, out.Len)
	case start+n > p.MaxContext:
		return fmt.Errorf("attention: positions up to %d exceed the context of %d", start+n, p.MaxContext)
	case kv.Len() < start+n:
		return fmt.Errorf("attention: the cache holds %d tokens, queries reach position %d", kv.Len(), start+n-1)
	case cos.Len < (start+n)*d/2 || sin.Len < (start+n)*d/2:
		return fmt.Errorf("attention: RoPE tables of %d and %d values do not reach position %d", cos.Len, sin.Len, start+n-1)
	}
	blocks := (start + n + p.BlockSize - 1) / p.BlockSize
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	// The scratch, table and step slot allocations below may free
	// collected memory after the addresses are taken (see keep).
	defer keep(out, q, cos, sin)
	defer runtime.KeepAlive(a) // its tables and scratch
	if b.err != nil {
		return b.err
	}
	t, err := a.table(kv, a.firstBlock(start), blocks)
	if err != nil {
		return err
	}
	args := attnArgs{
		Scale: float32(p.Scale), Softcap: float32(p.Softcap),
		Out: ptr(out), Q: ptr(q), N: n, Start: start,
		Heads: p.Heads, KVHeads: p.KVHeads, HeadDim: d, Window: p.Window, BlockSize: p.BlockSize,
		KTab: t.dev, VTab: t.dev + Ptr(8*len(t.k)), Fmts: t.dev + Ptr(40*len(t.k)), Blocks: blocks,
		Cos: ptr(cos), Sin: ptr(sin), KParams: t.kprm, VParams: t.vprm,
	}
	if t.pre {
		args.LTab = t.dev + Ptr(16*len(t.k))
	}
	if t.pc {
		args.KPTab, args.VPTab = t.dev+Ptr(24*len(t.k)), t.dev+Ptr(32*len(t.k))
	}
	// Prefill on the tensor cores where the kernel reads every part, once
	// kakeya_pc parts are decoded for the call where that pays and
	// kakeya_pc_ec parts always (pconce.go): no tensor-core kernel reads
	// those.
	if prefillAttention(n, d, b.g16.exact, t.kprm != 0 || t.vprm != 0, t.pre, false) {
		unpacked := t.pc && b.unpackPC(&args, t, a.firstBlock(start), blocks, t.pcec)
		if b.err != nil {
			return b.err
		}
		if unpacked || !t.pcec {
			b.enqueue(prefillLaunch(args), true)
			return b.err
		}
	}
	if need := attentionScratch(args); need > a.scratchN {
		if a.scratch != 0 {
			// Queued launches may still use it: free at the next idle point.
			b.freeLater(a.scratch)
			a.mem.ps = slices.DeleteFunc(a.mem.ps, func(p Ptr) bool { return p == a.scratch })
		}
		a.scratch, a.scratchN = 0, 0
		sp, err := b.allocRaw(need)
		if err != nil {
			err = fmt.Errorf("cuda: attention scratch for %d queries over %d blocks: %w", n, blocks, err)
			b.fail(err)
			return err
		}
		a.scratch, a.scratchN = sp, need
		a.mem.ps = append(a.mem.ps, sp)
	}
	args.Scratch = a.scratch
	// A decode step's attention reads its position from the step
	// parameters and joins the queue (see step.go); prefill's, or one
	// without a slot, is launched on its own.
	if n <= maxMatVecRows {
		// What must go first goes now: a slot is taken just before its
		// launch joins the queue, with no flush between (a flush starts
		// the next step's slots).
		if b.holding {
			b.resolveHeld()
		}
		if len(b.writes) > 0 {
			b.flush()
		}
		if slot := b.stepSlot(0, 0, start); slot != 0 {
			args.Step = stepStart(slot)
			t.queued = b.epoch
		}
	}
	for _, l := range attentionLaunches(args) {
		b.enqueue(l, args.Step == 0)
	}
	return b.err
}

// firstBlock returns the first KV block a call whose first query is at
// position start reads: the block of the first key the query's window
// sees (0 without a window). A sliding layer's cache may have released
// the blocks before it (compute.SlidingKV).
func (a *attention) firstBlock(start int) int {
	if w := a.p.Window; w > 0 && start-w+1 > 0 {
		return (start - w + 1) / a.p.BlockSize
	}
	return 0
}

// table returns kv's block table with its blocks first..blocks-1 up to
// date on the device; the entries before first (blocks the call does not
// read, perhaps released) are left as they are. Called with the backend's
// mu held.
func (a *attention) table(kv compute.KVLayer, first, blocks int) (*blockTable, error) {
	b, p := a.b, a.p
	t := a.tables[kv]
	n := p.KVHeads * a.maxBlocks
	if t == nil {
		dev, err := b.allocRaw(n * (5*8 + 4))
		if err != nil {
			err = fmt.Errorf("cuda: attention block table of %d blocks: %w", a.maxBlocks, err)
			b.fail(err)
			return nil, err
		}
		a.mem.ps = append(a.mem.ps, dev)
		host := make([]uint64, 5*n+(n+1)/2)
		t = &blockTable{k: host[:n:n], v: host[n : 2*n : 2*n], l: host[2*n : 3*n : 3*n],
			kp: host[3*n : 4*n : 4*n], vp: host[4*n : 5*n : 5*n],
			fmts: unsafe.Slice((*int32)(unsafe.Pointer(&host[5*n])), n), dev: dev, host: host}
		for i := range t.fmts {
			t.fmts[i] = -1 // no entry matches until written
		}
		a.tables[kv] = t
	}
	var st *store
	if pt, ok := kv.Part(0, first, 0).(*part); ok {
		st = pt.s
		if st.gen == t.gen && blocks <= t.blocks {
			return t, nil
		}
	}
	lo, hi := n, 0 // the entries that changed
	var prm [2]Ptr // the Kakeya keys' and values' params
	pre, pc, pcec := false, false, false
	for blk := first; blk < blocks; blk++ {
		for g := range p.KVHeads {
			i := blk*p.KVHeads + g
			kp, ok1 := kv.Part(g, blk, 0).(*part)
			vp, ok2 := kv.Part(g, blk, 1).(*part)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("attention: block %d head %d is not stored by a CUDA block store", blk, g)
			}
			var pp [2]uint64 // the parts' pcParams
			for side, pt := range [2]*part{kp, vp} {
				if pt.format == partKakeyaPC || pt.format == partKakeyaPCEC {
					pp[side], pc = uint64(pt.prm), true
					pcec = pcec || pt.format == partKakeyaPCEC
				}
				if pt.format != partKakeya {
					continue
				}
				if prm[side] != 0 && prm[side] != pt.prm {
					return nil, fmt.Errorf("attention: block %d head %d %s: a layer's Kakeya blocks must share one codec's settings (%s)", blk, g, [2]string{"keys", "values"}[side], pt.dec.Name())
				}
				prm[side] = pt.prm
			}
			if vp.linv != 0 {
				// The kernel un-whitens keys only: values are never
				// preconditioned (kvcache preconditions keys alone).
				return nil, fmt.Errorf("attention: block %d head %d: values encoded by %s; the kernels un-whiten keys only", blk, g, vp.dec.Name())
			}
			pre = pre || kp.linv != 0
			f := attnFormat(kp.format, vp.format)
			if t.k[i] != uint64(kp.addr) || t.v[i] != uint64(vp.addr) || t.l[i] != uint64(kp.linv) ||
				t.kp[i] != pp[0] || t.vp[i] != pp[1] || t.fmts[i] != f {
				t.k[i], t.v[i], t.l[i], t.kp[i], t.vp[i], t.fmts[i] = uint64(kp.addr), uint64(vp.addr), uint64(kp.linv), pp[0], pp[1], f
				lo, hi = min(lo, i), i+1
			}
		}
	}
	t.kprm, t.vprm, t.pre, t.pc, t.pcec = prm[0], prm[1], pre, pc, pcec
	if st != nil {
		t.gen, t.blocks = st.gen, blocks
	}
	if lo >= hi {
		return t, nil
	}
	all := bytesOf(t.host)[:40*n+4*n]
	if b.busy && !b.asyncCopies() {
		// The device may still run launched work, which a synchronous
		// copy would wait for (a prefill's layers, a decode step that
		// encodes a block): the changed entries of each array go
		// through the step parameters instead, after the launches
		// queued before (which read the entries as they were).
		if b.holding {
			b.resolveHeld()
		}
		if len(b.writes) > 0 {
			b.flush()
		}
		var spans [6]copySpan
		for i := range 5 {
			spans[i] = copySpan{t.dev + Ptr(8*(i*n+lo)), all[8*(i*n+lo) : 8*(i*n+hi)]}
		}
		spans[5] = copySpan{t.dev + Ptr(40*n+4*lo), all[40*n+4*lo : 40*n+4*hi]}
		if b.stageCopies(spans[:]) {
			return t, b.err
		}
	}
	if t.queued == b.epoch && len(b.queue) > 0 {
		b.flush() // a queued launch reads the entries as they are
	}
	// One copy from the first changed address to the last changed
	// format: a copy costs the driver call more than its bytes. Where
	// nothing was launched since the last host wait (a decode step's
	// first tables), it waits for nothing.
	if err := b.copyInNoWait(t.dev+Ptr(8*lo), all[8*lo:40*n+4*hi]); err != nil {
		b.fail(err)
		return nil, err
	}
	return t, nil
}
