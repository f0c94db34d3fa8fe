package cudabackend

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"

	"github.com/kakeya-ai/kakeya/compute"
)

// Batched attention (compute.BatchAttention): the attention of every
// sequence of a forward step in one attn_batch launch per layer (and one
// attn_combine when the context is split). Each sequence keeps its block
// tables resident, one per layer, updated entry by entry as blocks start
// or are encoded (attention.table). A layer's launch finds them through a
// per-layer directory (seqDir: one kk_attn_seq entry per pass, the
// tables' addresses), rewritten only when the step's sequences change;
// what moves every step (each pass's rows, position and first tile) is a
// kk_attn_pass record per pass in the step parameters (step.go), copied
// to the device with the step's other slots. So a steady batched decode
// step uploads its pass records once per flush and nothing else for
// attention, and its attention launches are the same from one step to the
// next while the step's shape (the passes' rows and the longest context's
// shape class) holds.

var _ compute.BatchAttention = (*Backend)(nil)

// seqDirEntry is the size of a kk_attn_seq entry: eight addresses.
const seqDirEntry = 64

// batchState is the backend's state for AttendBatch.
type batchState struct {
	dirs     []*seqDir // by layer
	scratch  Ptr       // split states
	scratchN int
	entries  []uint64 // a layer's directory being built
	recs     []byte   // the pass records on the host
	// The last records put in the step parameters, their slot and the
	// step parameters' generation then: a step's layers share them.
	lastRecs []byte
	lastSlot Ptr
	lastGen  uint64
	runs     []writeRun // queueWrites' runs
	slotBuf  []byte     // and their slots
	recDev   Ptr        // and on the device, without step parameters
	recCap   int        // passes recDev holds
}

// seqDir is one layer's directory of its passes' block tables, on the
// host and on the device.
type seqDir struct {
	host []uint64 // 8 per pass: kk_attn_seq
	dev  Ptr
	cap  int // passes dev holds
	// queued is the backend's epoch when a queued launch last read the
	// directory: while it is the current one, an update waits for the
	// queue.
	queued uint64
}

// AttendBatch runs the attention of every pass in one launch
// (compute.BatchAttention). Every pass's attention must be this backend's,
// of one geometry.
func (b *Backend) AttendBatch(out, q compute.Buffer, rotate bool, layer int, passes []compute.AttentionPass, cos, sin compute.Buffer) error {
	if len(passes) == 0 {
		return b.Err()
	}
	if layer < 0 {
		return fmt.Errorf("attention: layer %d is negative", layer)
	}
	a0, ok := passes[0].Attention.(*attention)
	if !ok || a0.b != b {
		return fmt.Errorf("attention: batch pass 0: the attention was not made by this CUDA backend")
	}
	p := a0.p
	d := p.HeadDim
	group := p.Heads / p.KVHeads
	rowLen := p.Heads * d
	rows := 0
	maxN, ctx := 0, 0
	for i := range passes {
		ps := &passes[i]
		a, ok := ps.Attention.(*attention)
		switch {
		case !ok || a.b != b:
			return fmt.Errorf("attention: batch pass %d: the attention was not made by this CUDA backend", i)
		case a.p.Heads != p.Heads || a.p.KVHeads != p.KVHeads || a.p.HeadDim != d || a.p.Window != p.Window || a.p.BlockSize != p.BlockSize ||
			a.p.Scale != p.Scale || a.p.Softcap != p.Softcap:
			return fmt.Errorf("attention: batch pass %d: geometry %+v differs from pass 0's %+v", i, a.p, p)
		case ps.N <= 0 || ps.Start < 0:
			return fmt.Errorf("attention: batch pass %d: %d queries from position %d", i, ps.N, ps.Start)
		case ps.Start+ps.N > a.p.MaxContext:
			return fmt.Errorf("attention: batch pass %d: positions up to %d exceed the context of %d", i, ps.Start+ps.N, a.p.MaxContext)
		case ps.KV.Len() < ps.Start+ps.N:
			return fmt.Errorf("attention: batch pass %d: the cache holds %d tokens, queries reach position %d", i, ps.KV.Len(), ps.Start+ps.N-1)
		}
		rows += ps.N
		maxN, ctx = max(maxN, ps.N), max(ctx, ps.Start+ps.N)
	}
	switch {
	case q.Len < rows*rowLen || out.Len < rows*rowLen:
		return fmt.Errorf("attention: %d queries need %d values of q and out, got %d and %d", rows, rows*rowLen, q.Len, out.Len)
	case cos.Len < ctx*d/2 || sin.Len < ctx*d/2:
		return fmt.Errorf("attention: RoPE tables of %d and %d values do not reach position %d", cos.Len, sin.Len, ctx-1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// The tables, directory and scratch allocations below may free
	// collected memory after the addresses are taken (see keep); the
	// passes hold the attentions whose tables the launch reads.
	defer keep(out, q, cos, sin)
	defer runtime.KeepAlive(&passes[0])
	if b.err != nil {
		return b.err
	}
	st := &b.batch
	for len(st.dirs) <= layer {
		st.dirs = append(st.dirs, nil)
	}
	dir := st.dirs[layer]
	if dir == nil {
		dir = &seqDir{}
		st.dirs[layer] = dir
	}

	// The tables, each sequence's own, then the layer's directory of them.
	rowsPer := attnBatchRows(p.Heads, p.KVHeads, d, maxN)
	args := attnBatchArgs{
		Out: ptr(out), Q: ptr(q), NPasses: len(passes), N: rows, MaxN: maxN, Context: ctx,
		Heads: p.Heads, KVHeads: p.KVHeads, HeadDim: d, Window: p.Window, BlockSize: p.BlockSize,
		Cos: ptr(cos), Sin: ptr(sin), Rotate: rotate, Scale: float32(p.Scale), Softcap: float32(p.Softcap),
	}
	// A step with a prefill chunk runs on the tensor cores where the
	// kernel reads every pass's parts (checked below, once the tables are
	// known): its tiles are then prefillRows rows.
	tc := prefillAttention(maxN, d, b.g16.exact, false, false, false)
	for i := 0; tc && i < len(passes); i++ {
		ps := &passes[i]
		a := ps.Attention.(*attention)
		t, err := a.table(ps.KV, a.firstBlock(ps.Start), ceilDiv(ps.Start+ps.N, p.BlockSize))
		if err != nil {
			return fmt.Errorf("batch pass %d: %w", i, err)
		}
		// Format 9 parts only pc_unpack reads for the tensor cores.
		tc = prefillAttention(maxN, d, b.g16.exact, t.kprm != 0 || t.vprm != 0, t.pre, t.pcec && b.pcOnce == pcOnceNever)
	}
	var ctabs []Ptr
	var unpacks []Launch
	if tc {
		rowsPer = prefillRows
		// Prefill passes' kakeya_pc parts decoded once where that pays
		// (pconce.go): their entries then point at the call tables.
		var err error
		if ctabs, unpacks, err = b.batchUnpack(passes); err != nil {
			b.fail(err)
			return err
		}
	}
	entries := slices.Grow(st.entries[:0], 8*len(passes))[:8*len(passes)]
	st.entries = entries
	st.recs = st.recs[:0]
	row, tile := 0, 0
	for i := range passes {
		ps := &passes[i]
		a := ps.Attention.(*attention)
		t, err := a.table(ps.KV, a.firstBlock(ps.Start), ceilDiv(ps.Start+ps.N, p.BlockSize))
		if err != nil {
			return fmt.Errorf("batch pass %d: %w", i, err)
		}
		n := len(t.k)
		e := entries[8*i : 8*i+8]
		e[0], e[1], e[2] = uint64(t.dev), uint64(t.dev)+uint64(8*n), uint64(t.dev)+uint64(40*n)
		e[3], e[4], e[5] = 0, 0, 0
		if t.pre {
			e[3] = uint64(t.dev) + uint64(16*n)
		}
		if t.pc {
			e[4], e[5] = uint64(t.dev)+uint64(24*n), uint64(t.dev)+uint64(32*n)
		}
		e[6], e[7] = uint64(t.kprm), uint64(t.vprm)
		pc := t.pc
		if ctabs != nil && ctabs[i] != 0 {
			c := ctabs[i]
			e[0], e[1], e[2], e[4], e[5] = uint64(c), uint64(c)+uint64(8*n), uint64(c)+uint64(16*n), 0, 0
			pc = false
		}
		args.Pre = args.Pre || t.pre
		args.PC = args.PC || pc
		st.recs = binary.LittleEndian.AppendUint32(st.recs, uint32(int32Of("attention rows", row)))
		st.recs = binary.LittleEndian.AppendUint32(st.recs, uint32(int32(ps.N)))
		st.recs = binary.LittleEndian.AppendUint32(st.recs, uint32(int32(ps.Start)))
		st.recs = binary.LittleEndian.AppendUint32(st.recs, uint32(int32Of("attention tiles", tile)))
		row += ps.N
		tile += ceilDiv(ps.N*group, rowsPer)
	}
	var plan attnPlan
	if !tc {
		plan = args.plan(tile)
	}
	if err := b.seqDirUpdate(dir, entries); err != nil {
		b.fail(err)
		return err
	}
	args.Seqs = dir.dev

	if need := attnBatchScratch(args, plan); !tc && need > st.scratchN {
		if st.scratch != 0 {
			b.freeLater(st.scratch) // queued launches may still use it
		}
		st.scratch, st.scratchN = 0, 0
		sp, err := b.allocRaw(need)
		if err != nil {
			err = fmt.Errorf("cuda: batched attention scratch for %d queries: %w", rows, err)
			b.fail(err)
			return err
		}
		st.scratch, st.scratchN = sp, need
	}
	args.Scratch = st.scratch

	// What must go first goes now, then the pass records: in slots of the
	// step parameters (the launch then joins the queue, the same at every
	// step of this shape), or without them copied in on their own.
	if b.holding {
		b.resolveHeld()
	}
	if len(b.writes) > 0 {
		if b.noStep {
			b.flush()
		} else {
			b.queueWrites()
		}
	}
	if b.err != nil {
		return b.err
	}
	// The decodes go before the attention launch, which reads their
	// tables (appended as they are: no flush between the records' slot
	// and the launch).
	for _, l := range unpacks {
		b.gen++
		b.queue = append(b.queue, l)
	}
	dynamic := false
	if st.lastSlot != 0 && st.lastGen == b.step.gen && string(st.lastRecs) == string(st.recs) {
		args.Passes = st.lastSlot // an earlier layer's records, this step's
	} else if args.Passes = b.stepSlots(st.recs); args.Passes == 0 {
		if b.err != nil {
			return b.err
		}
		b.flush()
		if args.Passes = b.stepSlots(st.recs); args.Passes == 0 {
			var err error
			if args.Passes, err = b.passRecords(st); err != nil {
				b.fail(err)
				return err
			}
			dynamic = true
		}
	}
	if !dynamic {
		st.lastRecs, st.lastSlot, st.lastGen = append(st.lastRecs[:0], st.recs...), args.Passes, b.step.gen
	}
	epoch := b.epoch
	for i := range passes {
		passes[i].Attention.(*attention).tables[passes[i].KV].queued = epoch
	}
	dir.queued = epoch
	if tc {
		b.enqueue(prefillBatchLaunch(args, tile), dynamic)
		return b.err
	}
	for _, l := range attnBatchLaunches(args, plan) {
		b.enqueue(l, dynamic)
	}
	return b.err
}

// seqDirUpdate makes dir hold entries on the device, copying in the
// entries that differ from dir.host (what the device holds) after the
// queued launches that read them. Called with mu held.
func (b *Backend) seqDirUpdate(dir *seqDir, entries []uint64) error {
	old := dir.host
	passes := len(entries) / 8
	lo, hi := len(entries), 0
	if dir.cap < passes {
		p, err := b.allocRaw(seqDirEntry * max(passes, 16))
		if err != nil {
			return fmt.Errorf("cuda: batched attention directory of %d sequences: %w", passes, err)
		}
		if dir.dev != 0 {
			b.freeLater(dir.dev) // queued launches may still read it
		}
		dir.dev, dir.cap = p, max(passes, 16)
		lo, hi = 0, len(entries)
	} else {
		for i := range entries {
			if i >= len(old) || old[i] != entries[i] {
				lo, hi = min(lo, i), i+1
			}
		}
	}
	dir.host = append(dir.host[:0], entries...)
	if lo >= hi {
		return nil
	}
	if dir.queued == b.epoch && len(b.queue) > 0 {
		b.flush() // a queued launch reads the entries as they are
	}
	return b.copyInNoWait(dir.dev+Ptr(8*lo), bytesOf(entries[lo:hi]))
}

// passRecords copies the pass records to a device array of their own (the
// path without step parameters) and returns its address. Called with mu
// held and the queue flushed.
func (b *Backend) passRecords(st *batchState) (Ptr, error) {
	n := len(st.recs) / 16
	if st.recCap < n {
		p, err := b.allocRaw(16 * max(n, 16))
		if err != nil {
			return 0, fmt.Errorf("cuda: batched attention records of %d sequences: %w", n, err)
		}
		if st.recDev != 0 {
			b.freeLater(st.recDev)
		}
		st.recDev, st.recCap = p, max(n, 16)
	}
	return st.recDev, b.copyInNoWait(st.recDev, st.recs)
}

// writeRun is one run of block-store writes for queueWrites: n parts
// written at the same rows through the write table tab.
type writeRun struct {
	tab                     Ptr
	row, n, rows, d, stride int
	format                  int32
	// The store whose table lead leads, to retire once the run's launch
	// is queued (the run fills its parts); nil if none.
	retire *store
	lead   *part
}

// queueWrites queues the deferred block-store writes, as kvWrites makes
// them but without leaving the queue: each run's table and row go to a
// slot of the step parameters, and consecutive runs of one shape (a
// step's sequences, each at its own row) are one kv_write_runs launch, the
// same from one step to the next. Where the step parameters lack the room
// it launches them as kvWrites does, after the queue. Called with mu held.
func (b *Backend) queueWrites() {
	ws := b.writes
	b.writes = nil
	defer func() {
		clear(ws) // hold no store or part
		b.writes = ws[:0]
	}()
	st := &b.batch
	st.runs = st.runs[:0]
	// Every table first: a table's update may give the queue to the
	// driver, which starts the step parameters over. A table whose run
	// fills its parts is retired only after the run's launch is queued,
	// with its slot: a later update of it (another part's, reusing it)
	// then finds the slot and gives the queue to the driver first.
	for rest := ws; len(rest) > 0; {
		w, n := rest[0], 1
		for n < len(rest) && n < maxKVWrites && rest[n].s == w.s && rest[n].row == w.row && rest[n].rows == w.rows && rest[n].stride == w.stride {
			n++
		}
		tab, full, err := w.s.table(rest[:n])
		if err != nil {
			b.fail(err)
			return
		}
		format := int32(partF32)
		if w.s.bf16 {
			format = partBF16
		}
		st.runs = append(st.runs, writeRun{tab: tab, row: w.row, n: n, rows: w.rows, d: w.s.d, stride: w.stride, format: format})
		if full {
			// Retired once its launch is queued (below): until then
			// no other run may take the table.
			st.runs[len(st.runs)-1].retire = w.s
			st.runs[len(st.runs)-1].lead = w.pt
		}
		rest = rest[n:]
	}
	for i := 0; i < len(st.runs) && b.err == nil; {
		r, j := st.runs[i], i+1
		for j < len(st.runs) && j-i < maxKVWrites {
			o := st.runs[j]
			if o.n != r.n || o.rows != r.rows || o.d != r.d || o.stride != r.stride || o.format != r.format {
				break
			}
			j++
		}
		recs := st.slotBuf[:0]
		for _, o := range st.runs[i:j] {
			recs = binary.LittleEndian.AppendUint64(recs, uint64(o.tab))
			recs = binary.LittleEndian.AppendUint32(recs, uint32(int32Of("cache row", o.row)))
			recs = binary.LittleEndian.AppendUint32(recs, 0)
		}
		st.slotBuf = recs
		if slots := b.stepSlots(recs); slots != 0 {
			b.queue = append(b.queue, kvWriteRunsLaunch(slots, j-i, r.n, r.rows, r.d, r.stride, r.format))
		} else {
			b.flushQueue()
			for _, o := range st.runs[i:j] {
				b.fail(b.launch([]Launch{kvWriteLaunch(o.tab, o.n, o.row, o.rows, o.d, o.stride, o.format)}, false))
			}
		}
		for _, o := range st.runs[i:j] {
			if o.retire != nil {
				o.retire.retire(o.lead)
			}
		}
		i = j
	}
	clear(st.runs) // hold no store or part
}
