package cudabackend

// The decode fusions (compute.Fused): a decoder layer's decode step as
// five kernels, down from about twenty, and the final norm with the
// output head as one (norm_matvec). norm_qkv computes the attention
// input — RMSNorm, the q/k/v projections and biases, RoPE on q — and
// writes the new keys and values into the cache; attention follows
// (attn_split, and attn_combine when the context is split); matvec_add
// adds the output projection to the residual stream; norm_swiglu computes
// the feed-forward's RMSNorm, gate and up projections and silu(gate)*up;
// matvec_add adds the down projection. The kernels are those of
// kernels/cuda/fused.cu, the decode matvec with the operations around it
// in its prologue and epilogue.
//
// The cache asks for its writes after norm_qkv made the values (the model
// appends the new keys and values once they are projected), so the
// backend holds the norm_qkv launch back until its next device operation:
// by then the cache's writes of the layer's new rows are queued, and when
// they are exactly the keys and values norm_qkv makes (one sequence's
// rows, into one block), norm_qkv writes them itself and no kv_write runs.
// Any other writes go through kv_write as before.

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

var _ compute.Fused = (*Backend)(nil)

// qkvArgs are one norm_qkv launch: X (N rows of Cols) normalised by Norm
// and Eps, projected by WQ, WK and WV (of one dtype) plus biases BQ, BK,
// BV (0 for none) into Q, K and V (N rows of Heads, KVHeads and KVHeads
// heads of HeadDim values), Q rotated at positions Start.. (or row i at
// position Pos[i] when Pos is set: a device array of N int32) by Cos and
// Sin (HeadDim/2 values per position). When Tab is set, K and V are also
// written to rows Row.. of the hot parts whose addresses Tab holds (the
// KVHeads key parts, then the value parts), of format Format (partF32 or
// partBF16). When Step is set, the kernel reads Tab, Row and Start from
// that slot of the step parameters (see stepSlot) and the launch carries
// none of them: it is the same at every position. QN and KN, when set,
// are the per-head norms of q and k (HeadDim values each, Qwen3's),
// applied before RoPE and the cache write, and Cnt a device int32 at zero
// that the kernel's blocks count themselves on (see fused.cu).
type qkvArgs struct {
	Q, K, V, X, Norm     Ptr
	Eps                  float32
	WQ, WK, WV           Ptr
	BQ, BK, BV           Ptr
	N, Heads, KVHeads    int
	HeadDim, Cols, Start int
	Pos                  Ptr
	Cos, Sin             Ptr
	Tab                  Ptr
	Row                  int
	Format               int32
	Step                 Ptr
	QN, KN, Cnt          Ptr
	dt                   tensor.DType // the weights'
	// slotPos says the rows' positions (several sequences') wait in
	// Backend.heldPos for slots of the step parameters, taken when the
	// launch joins the queue (resolveHeld), which then sets Pos.
	slotPos bool
	// own and prm hold what the addresses above come from (q, k, v and
	// x; the layer's norm, weights, biases and RoPE tables) while the
	// launch is held back (Backend.held), past NormQKV's return: the
	// caller may drop them, and the operation that resolves the launch
	// may free collected memory before it queues it (see keep).
	own [4]compute.Memory
	prm *compute.QKV
}

// unitGeometry returns the staged chunk, the warps per unit and the
// blocks of a matvec-shaped kernel of units units (output rows, or pairs
// of weight rows) over cols columns of n input rows: a unit's columns are
// split between warps while blocks are few and each warp still gets at
// least one 256-column step.
func unitGeometry(what string, n, units, cols int) (chunk, wpr int, blocks uint32) {
	chunk = min(max(matVecChunk, matVecStage/n/8*8), ceilDiv(cols, 8)*8)
	wpr = 1
	for wpr < matVecWarps && ceilDiv(units*wpr, matVecWarps) < matVecTargetBlocks && 256*2*wpr <= cols {
		wpr *= 2
	}
	return chunk, wpr, u32(what+" blocks", ceilDiv(units*wpr, matVecWarps))
}

// matVecGeometry checks a launch shaped like matvec's (n input rows of
// cols values, rows outputs; 1 <= n <= maxMatVecRows) and returns its
// geometry, unitGeometry's over the output rows.
func matVecGeometry(what string, n, rows, cols int) (chunk, wpr int, blocks uint32) {
	if n < 1 || n > maxMatVecRows {
		panic(fmt.Sprintf("cuda: %s of %d rows, want 1..%d", what, n, maxMatVecRows))
	}
	positive(what, rows, cols)
	int32Of(what+" input", n*cols)
	int32Of(what+" output", n*rows)
	return unitGeometry(what, n, rows, cols)
}

// matVecShaped returns the launch of a kernel shaped like matvec's:
// blocks of matVecWarps warps, n input rows staged chunk columns at a
// time in shared memory.
func matVecShaped(kernel string, blocks uint32, n, chunk int, p *args) Launch {
	return Launch{
		Kernel: kernel,
		Grid:   Dim3{blocks, 1, 1},
		Block:  Dim3{32 * matVecWarps, 1, 1},
		Shared: uint32(4 * n * chunk),
		Args:   p.b, Params: p.offs,
	}
}

// normQKVLaunch returns the norm_qkv launch of a: a unit is a pair of
// rows (j, j+HeadDim/2) of one head, so RoPE's two values meet in one
// thread. 1 <= N <= maxMatVecRows.
// Kernel: norm_qkv_<dt>(float *q, float *k, float *v, const float *x, const float *g, float eps,
// const T *wq, const T *wk, const T *wv, const float *bq, const float *bk, const float *bv, int n,
// int heads, int kv_heads, int d, int cols, int start, const int *pos, const float *cos, const float *sin,
// const uint64 *tab, int row, int fmt, int chunk, int wpr, const uint64 *step, const float *qn,
// const float *kn, int *cnt).
func normQKVLaunch(a qkvArgs) Launch {
	a.check()
	if a.Step != 0 {
		a.Start, a.Tab, a.Row = 0, 0, 0 // read from the step's slot
	}
	units := (a.Heads + 2*a.KVHeads) * a.HeadDim / 2
	chunk, wpr, blocks := unitGeometry("norm_qkv", a.N, units, a.Cols)
	p := new(args).ptr(a.Q).ptr(a.K).ptr(a.V).ptr(a.X).ptr(a.Norm).f32(a.Eps).
		ptr(a.WQ).ptr(a.WK).ptr(a.WV).ptr(a.BQ).ptr(a.BK).ptr(a.BV).
		i32("n", a.N).i32("heads", a.Heads).i32("kv heads", a.KVHeads).i32("head dim", a.HeadDim).i32("cols", a.Cols).
		i32("start", a.Start).ptr(a.Pos).ptr(a.Cos).ptr(a.Sin).ptr(a.Tab).i32("row", a.Row).i32("format", int(a.Format)).
		i32("chunk", chunk).i32("wpr", wpr).ptr(a.Step).ptr(a.QN).ptr(a.KN).ptr(a.Cnt)
	return matVecShaped("norm_qkv_"+dtypeSuffix(a.dt), blocks, a.N, chunk, p)
}

// check panics unless the kernel takes a's sizes (see normQKVLaunch).
func (a *qkvArgs) check() {
	positive("norm_qkv", a.N, a.Heads, a.KVHeads, a.HeadDim, a.Cols)
	switch {
	case a.N > maxMatVecRows:
		panic(fmt.Sprintf("cuda: norm_qkv of %d rows, want 1..%d", a.N, maxMatVecRows))
	case a.HeadDim%2 != 0 || a.Start < 0 || a.Row < 0:
		panic(fmt.Sprintf("cuda: norm_qkv of head dim %d at position %d, cache row %d", a.HeadDim, a.Start, a.Row))
	case a.Format != partF32 && a.Format != partBF16:
		panic(fmt.Sprintf("cuda: norm_qkv into parts of format %d", a.Format))
	case (a.QN != 0) != (a.KN != 0) || a.QN != 0 && a.Cnt == 0:
		panic("cuda: norm_qkv with per-head norms needs both and a block counter")
	}
	int32Of("norm_qkv input", a.N*a.Cols)
	int32Of("norm_qkv weights", a.Heads*a.HeadDim*a.Cols)
	int32Of("norm_qkv positions", (a.Start+a.N)*a.HeadDim/2)
	int32Of("norm_qkv cache rows", (a.Row+a.N)*a.HeadDim)
	dtypeSuffix(a.dt)
}

// normSwiGLULaunch sets out (n rows of rows values) to silu(xn wg^T + bg)
// * (xn wu^T + bu), xn the RMSNorm of x (n rows of cols) by g and eps;
// bg and bu may be 0; with gelu, gelu_tanh in place of silu (GeGLU). A
// unit is one output row, its gate and up rows read by the same warps.
// 1 <= n <= maxMatVecRows.
// Kernel: norm_swiglu_<dt>(float *out, const float *x, const float *g, float eps, const T *wg,
// const T *wu, const float *bg, const float *bu, int n, int rows, int cols, int chunk, int wpr, int act).
func normSwiGLULaunch(dt tensor.DType, out, x, g Ptr, eps float32, wg, wu, bg, bu Ptr, n, rows, cols int, gelu bool) Launch {
	chunk, wpr, blocks := matVecGeometry("norm_swiglu", n, rows, cols)
	act := 0
	if gelu {
		act = 1
	}
	p := new(args).ptr(out).ptr(x).ptr(g).f32(eps).ptr(wg).ptr(wu).ptr(bg).ptr(bu).
		i32("n", n).i32("rows", rows).i32("cols", cols).i32("chunk", chunk).i32("wpr", wpr).i32("act", act)
	return matVecShaped("norm_swiglu_"+dtypeSuffix(dt), blocks, n, chunk, p)
}

// matVecAddLaunch adds x (n rows of cols) times w (rows x cols of dt)
// transposed, plus bias (0 for none), to acc (n rows of rows values).
// 1 <= n <= maxMatVecRows.
// Kernel: matvec_add_<dt>(float *acc, const float *x, const T *w, const float *bias, int n, int rows,
// int cols, int chunk, int wpr).
func matVecAddLaunch(dt tensor.DType, acc, x, w, bias Ptr, n, rows, cols int) Launch {
	chunk, wpr, blocks := matVecGeometry("matvec_add", n, rows, cols)
	p := new(args).ptr(acc).ptr(x).ptr(w).ptr(bias).i32("n", n).i32("rows", rows).i32("cols", cols).i32("chunk", chunk).i32("wpr", wpr)
	return matVecShaped("matvec_add_"+dtypeSuffix(dt), blocks, n, chunk, p)
}

// normMatVecLaunch sets out (n rows of rows values) to xn times w (rows
// x cols of dt) transposed, xn the RMSNorm of x (n rows of cols) by g and
// eps. 1 <= n <= maxMatVecRows.
// Kernel: norm_matvec_<dt>(float *out, const float *x, const float *g, float eps, const T *w, int n,
// int rows, int cols, int chunk, int wpr).
func normMatVecLaunch(dt tensor.DType, out, x, g Ptr, eps float32, w Ptr, n, rows, cols int) Launch {
	chunk, wpr, blocks := matVecGeometry("norm_matvec", n, rows, cols)
	p := new(args).ptr(out).ptr(x).ptr(g).f32(eps).ptr(w).i32("n", n).i32("rows", rows).i32("cols", cols).i32("chunk", chunk).i32("wpr", wpr)
	return matVecShaped("norm_matvec_"+dtypeSuffix(dt), blocks, n, chunk, p)
}

// vecPtr returns the device address of a bias or norm weight, 0 for an
// empty Buffer (none).
func vecPtr(buf compute.Buffer) Ptr {
	if buf.Len == 0 {
		return 0
	}
	return ptr(buf)
}

// fuses reports whether the fused kernels take n input rows.
func (b *Backend) fuses(n int) bool { return !b.noFusion && n >= 1 && n <= maxMatVecRows }

// NormQKV runs a layer's attention input as one norm_qkv kernel
// (compute.Fused), held back until the next device operation so that it
// also makes the cache writes of k and v that follow it (see the file's
// comment) when its rows are one sequence's. Rows of several sequences
// take their positions from a device copy of pos, uploaded when they
// change (once per step), and their cache writes go through kv_write.
// Qwen3's per-head norms of q and k run inside it too (its last block
// normalises every head). It declines prefill's many rows, per-head norms
// of another width than a head or of one side only, and projections of
// different dtypes.
func (b *Backend) NormQKV(q, k, v, x compute.Buffer, pos []int, p *compute.QKV) bool {
	n := len(pos)
	headNorms := p.QNorm.Len > 0 || p.KNorm.Len > 0
	if !b.fuses(n) || p.HeadDim%2 != 0 || headNorms && (p.QNorm.Len != p.HeadDim || p.KNorm.Len != p.HeadDim) {
		return false
	}
	wq, wk, wv := ownWeight(p.Q), ownWeight(p.K), ownWeight(p.V)
	qRows, kvRows := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	cols := p.Norm.Len
	switch {
	case wk.dt != wq.dt || wv.dt != wq.dt || wq.dt.Quantized(): // quant.go
		return false
	case wq.rows != qRows || wk.rows != kvRows || wv.rows != kvRows || wq.cols != cols || wk.cols != cols || wv.cols != cols:
		panic(fmt.Sprintf("cuda: NormQKV: weights of %dx%d, %dx%d and %dx%d for %d heads and %d KV heads of %d over %d columns",
			wq.rows, wq.cols, wk.rows, wk.cols, wv.rows, wv.cols, p.Heads, p.KVHeads, p.HeadDim, cols))
	case q.Len < n*qRows || k.Len < n*kvRows || v.Len < n*kvRows || x.Len < n*cols:
		panic(fmt.Sprintf("cuda: NormQKV of %d rows into buffers of %d, %d and %d values from %d", n, q.Len, k.Len, v.Len, x.Len))
	}
	consecutive, last := true, 0
	for i, at := range pos {
		if at < 0 || (at+1)*p.HeadDim/2 > min(p.Cos.Len, p.Sin.Len) {
			panic(fmt.Sprintf("cuda: NormQKV at position %d with RoPE tables of %d and %d values", at, p.Cos.Len, p.Sin.Len))
		}
		consecutive = consecutive && at == pos[0]+i
		last = max(last, at)
	}
	a := qkvArgs{
		Q: ptr(q), K: ptr(k), V: ptr(v), X: ptr(x), Norm: ptr(p.Norm), Eps: p.Eps,
		WQ: wq.mem.ptr, WK: wk.mem.ptr, WV: wv.mem.ptr, BQ: vecPtr(p.QBias), BK: vecPtr(p.KBias), BV: vecPtr(p.VBias),
		N: n, Heads: p.Heads, KVHeads: p.KVHeads, HeadDim: p.HeadDim, Cols: cols, Start: pos[0],
		Cos: ptr(p.Cos), Sin: ptr(p.Sin), dt: wq.dt,
		own: [4]compute.Memory{q.Mem, k.Mem, v.Mem, x.Mem}, prm: p,
	}
	if !consecutive {
		a.Start = last + 1 - n // only checked: the kernel reads Pos
	}
	a.check() // now, in the caller's frame, rather than when it launches
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return true
	}
	// Several sequences' positions go to the step parameters with the
	// launch (resolveHeld), or without them to a device copy of their own.
	slotPos := !consecutive && !b.noStep
	if !consecutive && !slotPos || b.noStep || b.holding || len(b.writes) > 0 {
		// What was queued runs first: the positions' copy must follow
		// it, and only the cache writes that follow this call are its.
		// Rows with step parameters join the queue instead (see
		// resolveHeld).
		b.flush()
	}
	switch {
	case slotPos:
		b.heldPos = append(b.heldPos[:0], pos...)
		a.slotPos = true
	case !consecutive:
		var err error
		if a.Pos, err = b.positions(pos); err != nil {
			b.fail(err)
			return true
		}
	}
	if headNorms {
		if b.qkCnt == 0 {
			c, err := b.allocRaw(4)
			if err != nil {
				b.fail(fmt.Errorf("cuda: NormQKV's block counter: %w", err))
				return true
			}
			b.flush() // zeroed in stream order, after what is queued
			if err := b.drv.zero(c, 4); err != nil {
				b.fail(err)
				return true
			}
			b.qkCnt = c
		}
		a.QN, a.KN, a.Cnt = ptr(p.QNorm), ptr(p.KNorm), b.qkCnt
	}
	b.held, b.holding = a, true
	return true
}

// posSlots returns heldPos as int32 padded to whole step parameter
// slots. Called with mu held.
func (b *Backend) posSlots() []byte {
	out := b.posBytes[:0]
	for _, at := range b.heldPos {
		out = binary.LittleEndian.AppendUint32(out, uint32(int32Of("position", at)))
	}
	for len(out)%stepSlotBytes != 0 {
		out = append(out, 0)
	}
	b.posBytes = out
	return out
}

// positions returns a device copy of pos as int32, uploading it only when
// it differs from the last one (a step's layers share it). Called with mu
// held and the launch queue flushed.
func (b *Backend) positions(pos []int) (Ptr, error) {
	same := len(pos) == len(b.posHost)
	for i := 0; same && i < len(pos); i++ {
		same = int(b.posHost[i]) == pos[i]
	}
	if same && b.posDev != 0 {
		return b.posDev, nil
	}
	if b.posCap < len(pos) {
		if b.posDev != 0 {
			b.freeLater(b.posDev) // queued work may still read it
		}
		b.posDev, b.posCap = 0, 0
		p, err := b.allocRaw(4 * max(len(pos), 64))
		if err != nil {
			return 0, fmt.Errorf("cuda: NormQKV positions of %d rows: %w", len(pos), err)
		}
		b.posDev, b.posCap = p, max(len(pos), 64)
	}
	b.posHost = b.posHost[:0]
	for _, at := range pos {
		b.posHost = append(b.posHost, int32(at))
	}
	if err := b.copyInNoWait(b.posDev, bytesOf(b.posHost)); err != nil {
		b.posHost = b.posHost[:0]
		return 0, err
	}
	return b.posDev, nil
}

// NormSwiGLU runs a layer's feed-forward up to its down projection as one
// norm_swiglu kernel (compute.Fused). It declines prefill's many rows and
// gate and up projections of different dtypes.
func (b *Backend) NormSwiGLU(gate, x compute.Buffer, n int, p *compute.SwiGLU) bool {
	if !b.fuses(n) {
		return false
	}
	wg, wu := ownWeight(p.Gate), ownWeight(p.Up)
	if wg.dt != wu.dt || wg.dt.Quantized() { // quant.go
		return false
	}
	if wg.rows != wu.rows || wg.cols != p.Norm.Len || wu.cols != p.Norm.Len || gate.Len < n*wg.rows || x.Len < n*wg.cols {
		panic(fmt.Sprintf("cuda: NormSwiGLU of %d rows: weights of %dx%d and %dx%d, norm of %d, buffers of %d and %d values",
			n, wg.rows, wg.cols, wu.rows, wu.cols, p.Norm.Len, gate.Len, x.Len))
	}
	b.op(normSwiGLULaunch(wg.dt, ptr(gate), ptr(x), ptr(p.Norm), p.Eps, wg.mem.ptr, wu.mem.ptr,
		vecPtr(p.GateBias), vecPtr(p.UpBias), n, wg.rows, wg.cols, p.GELUTanh), false)
	keep(gate, x)
	runtime.KeepAlive(p) // its norm, weights and biases
	return true
}

// MatMulAdd adds a projection to the residual stream as one matvec_add
// kernel (compute.Fused). It declines prefill's many rows.
func (b *Backend) MatMulAdd(acc, x compute.Buffer, n int, w compute.Weight, bias compute.Buffer) bool {
	if !b.fuses(n) {
		return false
	}
	wt := ownWeight(w)
	if wt.dt.Quantized() { // quant.go
		return false
	}
	if acc.Len < n*wt.rows || x.Len < n*wt.cols || bias.Len != 0 && bias.Len != wt.rows {
		panic(fmt.Sprintf("cuda: MatMulAdd of %d rows by a %dx%d weight: buffers of %d and %d values, bias of %d",
			n, wt.rows, wt.cols, acc.Len, x.Len, bias.Len))
	}
	b.op(matVecAddLaunch(wt.dt, ptr(acc), ptr(x), wt.mem.ptr, vecPtr(bias), n, wt.rows, wt.cols), false)
	keep(acc, x, bias)
	runtime.KeepAlive(wt)
	return true
}

// NormMatMul runs the final norm and the output head as one norm_matvec
// kernel (compute.Fused). It declines prefill's many rows.
func (b *Backend) NormMatMul(out, x, norm compute.Buffer, eps float32, n int, w compute.Weight) bool {
	if !b.fuses(n) {
		return false
	}
	wt := ownWeight(w)
	if wt.dt.Quantized() { // quant.go
		return false
	}
	if out.Len < n*wt.rows || x.Len < n*wt.cols || norm.Len != wt.cols {
		panic(fmt.Sprintf("cuda: NormMatMul of %d rows by a %dx%d weight: buffers of %d and %d values, norm of %d",
			n, wt.rows, wt.cols, out.Len, x.Len, norm.Len))
	}
	b.op(normMatVecLaunch(wt.dt, ptr(out), ptr(x), ptr(norm), eps, wt.mem.ptr, n, wt.rows, wt.cols), false)
	keep(out, x, norm)
	runtime.KeepAlive(wt)
	return true
}

// resolveHeld queues the held norm_qkv, making the cache writes of its
// keys and values that lead the queued writes (see foldWrites). One
// sequence's rows take their position, cache row and table from a slot
// of the step parameters and join the queue like any static launch, so
// that the decode step stays one run; otherwise (several sequences' rows,
// Options.NoStepGraph, no slot left) the launch goes to the driver now,
// after the queue. Called with mu held.
func (b *Backend) resolveHeld() {
	a := b.held
	b.held, b.holding = qkvArgs{}, false
	defer a.keepOwners() // till its launch is queued or made
	if b.err != nil {
		return
	}
	// Rows of several sequences (Pos set, or slotPos) have their writes
	// made by kv_write.
	if a.slotPos {
		// The kernel reads the positions at Pos: Start, which moves,
		// would make every step's launch another.
		a.Start = 0
		if a.Pos = b.stepSlots(b.posSlots()); a.Pos != 0 {
			b.queue = append(b.queue, normQKVLaunch(a))
			return
		}
		if b.err != nil {
			return
		}
		b.flushQueue()
		var err error
		if a.Pos, err = b.positions(b.heldPos); err != nil {
			b.fail(err)
			return
		}
		b.fail(b.launch([]Launch{normQKVLaunch(a)}, false))
		return
	}
	if a.Pos == 0 {
		n := b.foldWrites(&a)
		rest := copy(b.writes, b.writes[n:])
		clear(b.writes[rest:]) // hold no store or part
		b.writes = b.writes[:rest]
		a.Step = b.stepSlot(a.Tab, a.Row, a.Start)
	}
	if b.err != nil {
		return
	}
	if a.Step != 0 {
		b.queue = append(b.queue, normQKVLaunch(a))
		return
	}
	b.flushQueue()
	b.fail(b.launch([]Launch{normQKVLaunch(a)}, false))
}

// keepOwners marks where a's hold on its operands (own, prm) ends.
func (a *qkvArgs) keepOwners() {
	for _, m := range a.own {
		runtime.KeepAlive(m)
	}
	runtime.KeepAlive(a.prm)
}

// foldWrites sets a's cache table when the queued writes begin with the
// writes of exactly the keys and values a makes, each KV head's once, all
// into the same rows of hot parts of one store, and returns how many
// writes a now makes (0 when it makes none). Called with mu held.
func (b *Backend) foldWrites(a *qkvArgs) int {
	m := 2 * a.KVHeads
	if len(b.writes) < m {
		return 0
	}
	ws := b.writes[:m]
	s, d, kvd := ws[0].s, a.HeadDim, a.KVHeads*a.HeadDim
	if s.d != d || s.rows < ws[0].row+a.N {
		return 0
	}
	if cap(b.fold) < m {
		b.fold = make([]kvWrite, m)
	}
	b.fold = b.fold[:m]
	clear(b.fold)
	defer clear(b.fold) // hold no store or part
	for _, w := range ws {
		if w.s != s || w.row != ws[0].row || w.rows != a.N || a.N > 1 && w.stride != kvd {
			return 0
		}
		var e int
		switch off := int64(w.src) - int64(a.K); {
		case off >= 0 && off < int64(4*kvd) && off%int64(4*d) == 0:
			e = int(off / int64(4*d))
		default:
			off = int64(w.src) - int64(a.V)
			if off < 0 || off >= int64(4*kvd) || off%int64(4*d) != 0 {
				return 0
			}
			e = a.KVHeads + int(off/int64(4*d))
		}
		if b.fold[e].pt != nil {
			return 0
		}
		b.fold[e] = w
	}
	tab, err := s.writeTable(b.fold)
	if err != nil {
		b.fail(err)
		return 0
	}
	a.Tab, a.Row, a.Format = tab, ws[0].row, partF32
	if s.bf16 {
		a.Format = partBF16
	}
	return m
}
