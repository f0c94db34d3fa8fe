package cudabackend

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
	kcuda "github.com/kakeya-ai/kakeya/kernels/cuda"
	"github.com/kakeya-ai/kakeya/tensor"
)

func init() {
	compute.RegisterBackend("cuda", func(o compute.OpenOptions) (compute.Backend, error) {
		return New(Options{Device: o.Device, MatMul: o.MatMul})
	})
}

// Options configure New.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// NoGraphs launches every kernel on its own instead of replaying
	// repeated launch sequences as CUDA graphs.
	NoGraphs bool
	// NoCUBLAS computes prefill's matrix products with the backend's own
	// kernel even where cuBLAS (libcublas.so.13 or .12) is installed.
	NoCUBLAS bool
	// ExactGEMM makes cuBLAS compute float32 weights' products in float32
	// throughout; by default its tensor cores round the inputs to TF32
	// (10-bit mantissa), several times faster.
	ExactGEMM bool
	// MatMul is the precision of the activations that prefill's products
	// (more than 8 rows) multiply bf16 and f16 weights by: "" or "bf16"
	// rounds them to the weight's 16-bit type and runs the tensor cores
	// (the mma kernel or cuBLAS GemmEx, see gemm.go), as the CPU backend's
	// default --matmul bf16 rounds them; "f32" multiplies them as they are
	// in float32 (cuBLAS on widened weight rows, or the matmul kernel).
	MatMul string
	// Sync waits for the device after every kernel and cuBLAS call, and an
	// error names the first that failed with its grid, block and argument
	// sizes: slow, for finding a failing kernel. KAKEYA_CUDA_SYNC=1 in the
	// environment sets it for New.
	Sync bool
	// NoFusion runs every operation of the forward pass as its own
	// kernels, as before the decode fusions (compute.Fused), whose methods
	// then decline: for comparisons.
	NoFusion bool
	// NoStepGraph launches the kernels whose arguments move with the
	// position (norm_qkv, attention) on their own with those arguments,
	// as before a decode step became one graph (see step.go), rather than
	// reading them from the step parameters: for comparisons.
	NoStepGraph bool

	// drawParts, when above 0, makes Draw spread every row over that many
	// blocks (draw_split), whatever its shape: for this package's tests.
	drawParts int
}

// EnvSync names the environment variable that sets Options.Sync for New.
const EnvSync = "KAKEYA_CUDA_SYNC"

// Backend runs compute.Backend's operations on one CUDA device: buffers,
// weights and KV blocks live in device memory and every operation is a
// kernel launch on one stream, so the host waits only where it reads
// results back.
//
// As compute's contract asks, the first failure of the driver (an
// allocation the device cannot hold, a failed launch, a kernel's fault) is
// recorded: later operations do nothing, Read fills its destination with
// NaN, and the error is returned by Err and by every method that can
// return one (attention, the block store, Upload, Close).
type Backend struct {
	mu     sync.Mutex
	drv    driver
	dev    deviceInfo
	err    error
	closed bool

	gemm     gemmer // cuBLAS, nil when absent or off
	g16      gemm16 // 16-bit GEMMs (gemm.go)
	gemmWhy  error  // why gemm is nil
	tf32     bool
	sync     bool // Options.Sync
	noFusion bool // Options.NoFusion
	noStep   bool // Options.NoStepGraph
	wide     Ptr  // float32 rows of a weight widened for cuBLAS
	wideN    int  // floats wide holds
	wideMax  int  // floats wide may hold (wideFloats; less in tests)
	ident    Ptr  // int32 ids 0, 1, ..., identN-1
	identN   int
	// qwide holds a quantized weight widened to bf16 for prefill's
	// 16-bit GEMMs (quant.go), qwideBytes bytes.
	qwide      Ptr
	qwideBytes int
	// qx holds decode's activations quantized to 8 bits for matvec_q8
	// (quant.go), qxBytes bytes; qxOf says which, valid while gen is
	// qxGen. gen changes with every launch queued or made and every
	// write of device memory from the host, so that an unchanged gen
	// means no buffer has changed.
	qx      Ptr
	qxBytes int
	qxOf    qxKey
	qxGen   uint64
	gen     uint64

	queue  []Launch  // launches not yet given to the driver
	writes []kvWrite // block-store writes not yet launched
	// kvLaunches, kvTabs and kvRetire are kvWrites' scratch: the kv_write
	// launches of a flush not yet launched, their tables, and the writes
	// leading runs that fill their parts.
	kvLaunches []Launch
	kvTabs     []*writeTable
	kvRetire   []kvWrite
	// held is a norm_qkv launch kept back until the next device
	// operation (while holding), to make the cache writes that follow it
	// (see fused.go); fold is foldWrites' scratch.
	held    qkvArgs
	holding bool
	fold    []kvWrite
	graphs  *graphCache
	step    stepParams // the queued launches' step parameters
	epoch   uint64     // queues given to the driver so far
	// busy says that work went to the driver since the backend last
	// waited for the device (a copy back, a sync): a synchronous copy in
	// would wait for it, so tables rewritten then go through the step
	// parameters (stageCopies). Cleared only at the main waits; a stale
	// true costs a staged copy, never correctness.
	busy bool
	// stage is the page-locked memory copies in that must not wait go
	// through (copyInNoWait).
	stage hostStage

	live       map[Ptr]int // device allocations and their sizes in bytes
	used, peak int64       // bytes of live, and its high-water mark

	// freed holds allocations whose Go owners the garbage collector
	// reclaimed; they are freed at the next point where the stream is idle,
	// since queued work may still read them.
	freedMu sync.Mutex
	freed   []Ptr

	ids    []int32 // Embed's ids on the host
	idsDev Ptr     // and on the device
	idsCap int     // ids idsDev holds

	qkCnt Ptr // norm_qkv's block counter for per-head norms (an int32 at zero)

	picks   []int32 // ArgMax's and Draw's results on the host
	pickDev Ptr     // and on the device
	pickCap int     // rows pickDev holds
	drawDev Ptr     // Draw's rows where the step's slots lack room
	drawCap int     // rows drawDev holds
	// splitDev is draw_split's scratch (splitCap bytes), splitCounts its
	// counters (splitRows rows, zeroed when allocated), drawParts
	// Options.drawParts.
	splitDev    Ptr
	splitCap    int
	splitCounts Ptr
	splitRows   int
	drawParts   int

	batch batchState // AttendBatch's directories and scratch
	enc   encBatch   // EncodeParts' jobs and their device tables
	// unpack is pc_unpack's scratch (pconce.go); pcOnce chooses when
	// prefill decodes kakeya_pc parts once (pcOnceModel, or in tests
	// pcOnceAlways or pcOnceNever).
	unpack pcUnpack
	pcOnce int

	heldPos  []int  // the held norm_qkv's positions of several sequences' rows
	posBytes []byte // and as step parameter slots

	posHost []int32 // NormQKV's last positions of several sequences' rows
	posDev  Ptr     // and on the device
	posCap  int     // positions posDev holds
}

var (
	_ compute.Backend   = (*Backend)(nil)
	_ compute.Describer = (*Backend)(nil)
)

// New opens CUDA device opts.Device through the driver library found at
// run time (libcuda.so.1) and returns its backend. Without the library, a
// device or a driver that can JIT-compile the kernels it fails, saying
// which.
func New(opts Options) (*Backend, error) {
	if os.Getenv(EnvSync) == "1" {
		opts.Sync = true
	}
	if err := checkMatMul(opts.MatMul); err != nil {
		return nil, err
	}
	d, err := openDriver(opts.Device, kcuda.PTX())
	if err != nil {
		return nil, err
	}
	return newBackend(d, opts), nil
}

// newBackend returns a backend on an opened driver.
func newBackend(d driver, opts Options) *Backend {
	b := &Backend{drv: d, dev: d.info(), live: map[Ptr]int{}, tf32: !opts.ExactGEMM, wideMax: wideFloats, sync: opts.Sync, noFusion: opts.NoFusion, noStep: opts.NoStepGraph, drawParts: opts.drawParts}
	if !opts.NoGraphs && !opts.Sync {
		b.graphs = newGraphCache()
	}
	b.g16.exact = opts.MatMul == "f32"
	start := time.Now()
	b.g16.clock = func() time.Duration { return time.Since(start) }
	g, ok := d.(gemmer)
	switch {
	case opts.NoCUBLAS:
		b.gemmWhy = errors.New("cuda: cuBLAS off (Options.NoCUBLAS)")
	case !ok:
		b.gemmWhy = errors.New("cuda: the driver has no cuBLAS")
	default:
		if b.gemmWhy = g.blas(); b.gemmWhy == nil {
			b.gemm = g
		}
	}
	return b
}

// GEMM says how prefill's matrix products run. By default (Options.MatMul
// bf16): "cuBLAS (bf16, TF32 for f32 weights), and the mma kernel where
// faster (9-256 rows)", or without cuBLAS "mma kernel (bf16/f16 tensor
// cores), f32 weights matmul kernel (why)". With Options.MatMul f32:
// "cuBLAS (TF32)", "cuBLAS (float32)", or "matmul kernel (why)".
func (b *Backend) GEMM() string {
	blas, rest := b.gemmParts()
	return blas + rest
}

// gemmParts is GEMM in two: what cuBLAS does ("" without it) and the rest,
// so that gemmDescription can name cuBLAS's file after the first.
func (b *Backend) gemmParts() (blas, rest string) {
	f32 := "TF32"
	if !b.tf32 {
		f32 = "float32"
	}
	switch {
	case b.g16.exact && b.gemm == nil:
		return "", fmt.Sprintf("matmul kernel (%v)", b.gemmWhy)
	case b.g16.exact:
		return "cuBLAS (" + f32 + ")", ""
	case b.gemm == nil:
		return "", fmt.Sprintf("mma kernel (bf16/f16 tensor cores), f32 weights matmul kernel (%v)", b.gemmWhy)
	}
	return "cuBLAS (bf16, " + f32 + " for f32 weights)", ", and the mma kernel where faster (9-256 rows)"
}

// Name returns "cuda".
func (b *Backend) Name() string { return "cuda" }

// Describe names the device and how prefill's matrix products run, for run
// statistics (compute.Describer): "CUDA <Device>, prefill GEMM <GEMM>",
// with cuBLAS's version and file when it runs them.
func (b *Backend) Describe() string {
	b.mu.Lock()
	tuned := b.gemmSummary()
	b.mu.Unlock()
	return fmt.Sprintf("CUDA %s, prefill GEMM %s%s", b.Device(), b.gemmDescription(), tuned)
}

// Device describes the device: its name, compute capability, memory and
// peak bandwidth, for logs.
func (b *Backend) Device() string {
	d := b.dev
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB, %.0f GB/s)", d.Name, d.Major, d.Minor, d.SMs,
		float64(d.TotalMem)/(1<<30), d.Bandwidth()/1e9)
}

// Bandwidth returns the device's peak memory bandwidth in bytes per
// second, from its memory clock and bus width (0 if the driver does not
// report them).
func (b *Backend) Bandwidth() float64 { return b.dev.Bandwidth() }

// MemoryStats returns the device memory the backend holds now and at most
// so far, in bytes.
func (b *Backend) MemoryStats() (used, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

// Err returns the first error the backend met, nil if none: a driver
// call's *Error, matching its Result with errors.Is.
func (b *Backend) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// fail keeps the first error. It is called with mu held.
func (b *Backend) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

// errClosed is the sticky error of a closed backend.
var errClosed = errors.New("cuda: backend closed")

// Close waits for the device, frees every allocation and releases the
// context. It returns the first error the backend met.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.flush()
	b.fail(b.drv.sync())
	if b.err == nil {
		b.waited()
	}
	if b.graphs != nil {
		b.fail(b.graphs.destroy(b.drv))
	}
	for p := range b.live {
		b.fail(b.drv.free(p))
	}
	b.live, b.used = nil, 0
	b.fail(b.drv.close())
	b.closed = true
	err := b.err
	if err == nil {
		b.err = errClosed
	}
	return err
}

// memory is one device allocation.
type memory struct {
	ptr Ptr
	n   int // float32 values
}

func (m *memory) Floats() int { return m.n }

// ptr returns the device address of a buffer of this backend.
func ptr(buf compute.Buffer) Ptr {
	if buf.Mem == nil {
		return 0
	}
	m, ok := buf.Mem.(*memory)
	if !ok {
		panic(fmt.Sprintf("cuda: a buffer in %T memory is not the CUDA backend's", buf.Mem))
	}
	return m.ptr + Ptr(4*buf.Off)
}

// allocRaw returns bytes of device memory, tracked for Close and the
// memory statistics. A device out of memory first gets back what the
// garbage collector has reclaimed; the error names the size and what the
// backend holds. Called with mu held.
func (b *Backend) allocRaw(bytes int) (Ptr, error) {
	if b.err != nil {
		return 0, b.err
	}
	bytes = max(bytes, 4)
	p, err := b.drv.alloc(bytes)
	if errors.Is(err, ErrOutOfMemory) {
		// Buffers dropped by their owners are freed only once the GC has
		// run their cleanups, which run on a goroutine of their own after
		// the collection: runtime.GC does not wait for them. Wait for the
		// stream, collect, and retry while giving the cleanups a few
		// growing pauses (about 60 ms in all) to queue what they free.
		b.flush()
		if b.fail(b.drv.sync()); b.err != nil {
			return 0, b.err
		}
		b.waited()
		runtime.GC()
		for pause := time.Millisecond; ; pause *= 2 {
			b.freePending()
			if p, err = b.drv.alloc(bytes); !errors.Is(err, ErrOutOfMemory) || pause > 32*time.Millisecond {
				break
			}
			time.Sleep(pause)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%w (the backend holds %s of the device's %s)", err, mib(int(b.used)), mib(int(b.dev.TotalMem)))
	}
	b.live[p] = bytes
	b.used += int64(bytes)
	b.peak = max(b.peak, b.used)
	return p, nil
}

// freeRaw frees an allocation at once. Called with mu held, the stream
// idle or not using p.
func (b *Backend) freeRaw(p Ptr) {
	n, ok := b.live[p]
	if !ok {
		return
	}
	delete(b.live, p)
	b.used -= int64(n)
	b.fail(b.drv.free(p))
}

// freeLater queues p to be freed at the next idle point; the garbage
// collector's cleanups call it from their own goroutine.
func (b *Backend) freeLater(p Ptr) {
	b.freedMu.Lock()
	b.freed = append(b.freed, p)
	b.freedMu.Unlock()
}

// growScratch makes the scratch buffer *p, of *size bytes, hold at
// least need bytes: a smaller one is replaced by a new allocation of
// need bytes, the old one freed at the next idle point (queued work may
// still read it). On an allocation error *p and *size are 0. Called with
// mu held.
func (b *Backend) growScratch(p *Ptr, size *int, need int) error {
	if *size >= need {
		return nil
	}
	if *p != 0 {
		b.freeLater(*p)
	}
	*p, *size = 0, 0
	q, err := b.allocRaw(need)
	if err != nil {
		return err
	}
	*p, *size = q, need
	return nil
}

// freePending frees what freeLater queued. Called with mu held and the
// stream idle.
func (b *Backend) freePending() {
	b.freedMu.Lock()
	ps := b.freed
	b.freed = nil
	b.freedMu.Unlock()
	if b.closed {
		return
	}
	for _, p := range ps {
		b.freeRaw(p)
	}
}

// newMemory allocates n zeroed float32 values whose device memory is freed
// when the garbage collector reclaims the returned value. Called with mu
// held.
func (b *Backend) newMemory(bytes, floats int) (*memory, error) {
	p, err := b.allocRaw(bytes)
	if err != nil {
		return &memory{n: floats}, err
	}
	m := &memory{ptr: p, n: floats}
	runtime.AddCleanup(m, b.freeLater, p)
	return m, nil
}

// Alloc returns a zeroed buffer of n values in device memory, freed once
// nothing refers to it. An allocation the device cannot hold makes the
// backend fail (see Err) and returns a buffer that operations ignore.
func (b *Backend) Alloc(n int) compute.Buffer {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, err := b.newMemory(4*n, n)
	if err != nil {
		b.fail(fmt.Errorf("cuda: Alloc of %d values: %w", n, err))
		return compute.Buffer{Mem: m, Len: n}
	}
	b.flush()
	b.gen++
	b.fail(b.drv.zero(m.ptr, max(4*n, 4)))
	return compute.Buffer{Mem: m, Len: n}
}

// weight is a matrix in device memory in its stored dtype.
type weight struct {
	mem        *memory
	dt         tensor.DType
	rows, cols int
}

func (w *weight) Shape() (rows, cols int) { return w.rows, w.cols }

// own returns w as a weight of this backend.
func ownWeight(w compute.Weight) *weight {
	x, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("cuda: a %T is not a weight of the CUDA backend", w))
	}
	return x
}

// Upload copies m to the device once, in its stored dtype.
func (b *Backend) Upload(m tensor.Mat) (compute.Weight, error) {
	var src []byte
	n := m.Rows * m.Cols
	switch {
	case m.Rows <= 0 || m.Cols <= 0:
		return nil, fmt.Errorf("cuda: weight of %dx%d", m.Rows, m.Cols)
	case m.DType == tensor.F32 && len(m.F32) >= n:
		src = bytesOf(m.F32[:n])
	case (m.DType == tensor.F16 || m.DType == tensor.BF16) && len(m.U16) >= n:
		src = bytesOf(m.U16[:n])
	case m.DType.Quantized():
		// In the stored blocks (quant.go): never widened in memory.
		rb, ok := m.DType.RowBytes(m.Cols)
		if !ok {
			return nil, fmt.Errorf("cuda: %v weight of %dx%d: rows of %d values are not whole blocks of %d",
				m.DType, m.Rows, m.Cols, m.Cols, m.DType.Format().Block)
		}
		if len(m.Q) < m.Rows*rb {
			return nil, fmt.Errorf("cuda: %v weight of %dx%d holds %d bytes, want %d", m.DType, m.Rows, m.Cols, len(m.Q), m.Rows*rb)
		}
		src = m.Q[:m.Rows*rb]
	case m.DType.Size() == 0:
		return nil, fmt.Errorf("cuda: weight dtype %v", m.DType)
	default:
		return nil, fmt.Errorf("cuda: %v weight of %dx%d holds too few values", m.DType, m.Rows, m.Cols)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	mem, err := b.newMemory(len(src), len(src)/4)
	if err != nil {
		return nil, fmt.Errorf("cuda: upload of a %dx%d %v weight: %w", m.Rows, m.Cols, m.DType, err)
	}
	b.flush()
	if err := b.drv.copyIn(mem.ptr, src); err != nil {
		b.fail(err)
		return nil, err
	}
	return &weight{mem: mem, dt: m.DType, rows: m.Rows, cols: m.Cols}, nil
}

// bytesOf returns the memory of a slice of float32 or uint16 values as
// bytes.
func bytesOf[T float32 | uint16 | int32 | uint64](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))
}

// Write copies host values into dst.
func (b *Backend) Write(dst compute.Buffer, src []float32) {
	if len(src) > dst.Len {
		panic(fmt.Sprintf("cuda: write of %d values into a buffer of %d", len(src), dst.Len))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return
	}
	b.flush()
	b.gen++
	b.fail(b.drv.copyIn(ptr(dst), bytesOf(src)))
}

// Read copies src to dst, waiting for the work queued before. After a
// failure it fills dst with NaN, so that a result never passes for valid.
func (b *Backend) Read(dst []float32, src compute.Buffer) {
	if len(dst) > src.Len {
		dst = dst[:src.Len]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.read(dst, ptr(src)) // flushes, which may free: src held till the copy
	keep(src)
}

// read copies len(dst) values at p to dst. Called with mu held.
func (b *Backend) read(dst []float32, p Ptr) {
	if b.err == nil {
		b.flush()
		b.fail(b.drv.copyOut(bytesOf(dst), p))
		if b.err == nil {
			b.waited()
		}
		if b.err == nil {
			b.freePending() // the stream is idle
		}
	}
	if b.err != nil {
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
	}
}

// enqueue adds a launch to the queue. dynamic marks a launch whose
// arguments change from one decode step to the next (positions, cache
// blocks): it ends the run of launches a graph may replay. Called with mu
// held.
func (b *Backend) enqueue(l Launch, dynamic bool) {
	b.gen++
	if b.err != nil {
		return
	}
	if b.holding {
		b.resolveHeld() // a held launch goes before l
	}
	if dynamic || len(b.writes) > 0 {
		// Deferred cache writes read their sources first: l may
		// overwrite them.
		b.flush()
	}
	if b.err != nil {
		return
	}
	if dynamic {
		b.fail(b.launch([]Launch{l}, false))
		return
	}
	b.queue = append(b.queue, l)
}

// launch gives ls to the driver now, in order; a queued run (graphs true)
// as a replayed graph where the cache allows (see graphCache). With
// Options.Sync each launch goes alone and is waited for, and a failure
// names the kernel. Called with mu held.
func (b *Backend) launch(ls []Launch, graphs bool) error {
	if !graphs {
		b.gen++ // a launch not queued (a queued run counted at enqueue)
	}
	b.busy = true
	switch {
	case !b.sync && graphs && b.graphs != nil:
		return b.graphs.run(b.drv, ls)
	case !b.sync:
		return b.drv.launch(ls)
	}
	for _, l := range ls {
		err := b.drv.launch([]Launch{l})
		if err == nil {
			err = b.drv.sync()
		}
		if err != nil {
			return fmt.Errorf("cuda: kernel %s (grid %v, block %v, %d bytes of dynamic shared memory, %d parameters in %d bytes) failed: %w",
				l.Kernel, l.Grid, l.Block, l.Shared, len(l.Params), len(l.Args), err)
		}
	}
	return nil
}

// sgemm runs cuBLAS's GEMM (see gemmer.sgemm), waited for with
// Options.Sync. Called with mu held.
func (b *Backend) sgemm(out, x, w Ptr, n, rows, cols, ldc int) error {
	b.gen++ // out changes outside the launch queue
	b.busy = true
	err := b.gemm.sgemm(out, x, w, n, rows, cols, ldc, b.tf32)
	if err == nil && b.sync {
		if err = b.drv.sync(); err != nil {
			err = fmt.Errorf("cuda: cuBLAS GEMM of %d x %d x %d failed: %w", n, rows, cols, err)
		}
	}
	return err
}

// flush gives the queued launches to the driver, as a replayed graph where
// the same run was seen before, ending with the held norm_qkv launch and
// the cache writes it makes, then does the other deferred cache writes.
// Called with mu held before every other use of the driver.
func (b *Backend) flush() {
	if b.holding {
		b.resolveHeld()
	}
	b.flushQueue()
	if len(b.writes) > 0 {
		b.kvWrites()
	}
}

// kvWrite is a block-store write waiting for the next device operation:
// rows rows of float32 values at src, stride apart, to rows row.. of the
// hot part pt of store s, whose rows start at dst.
type kvWrite struct {
	s                 *store
	pt                *part
	dst, src          Ptr
	row, rows, stride int
	// own is src's buffer's memory, held until the write is launched or
	// queued: Write returns with the write deferred, and the operation
	// that launches it may free collected memory first (see keep).
	own compute.Memory
}

// kvWrites launches the deferred block-store writes. The cache writes a
// layer's new rows part by part, each KV head's keys and values, all at
// the same rows of their parts; such a run is one kv_write launch over a
// table of its parts that the store uploads only when the parts or the
// sources changed (a new block), so a decode step's writes cost one
// launch per layer and no wait. Called by flush, the launch queue empty.
func (b *Backend) kvWrites() {
	ws := b.writes
	b.writes = nil
	defer func() {
		clear(ws) // hold no store or part
		b.writes = ws[:0]
	}()
	// Every run's table first, then the launches: the tables' copies
	// (where a run's parts or sources changed: a prefill's layers) follow
	// one another, so that only the first can wait for launched work.
	for rest := ws; len(rest) > 0 && b.err == nil; {
		w, n := rest[0], 1
		for n < len(rest) && n < maxKVWrites && rest[n].s == w.s && rest[n].row == w.row && rest[n].rows == w.rows && rest[n].stride == w.stride {
			n++
		}
		if t := w.pt.wtab; t != nil && slices.Contains(b.kvTabs, t) {
			// Its table is an earlier run's, not launched yet: that
			// goes first, before the table is rewritten.
			b.launchKVWrites()
		}
		// A run that fills its parts retires its table once launched,
		// not before: a later run could take it up and rewrite it.
		tab, full, err := w.s.table(rest[:n])
		if err != nil {
			b.fail(err)
			break
		}
		format := int32(partF32)
		if w.s.bf16 {
			format = partBF16
		}
		b.kvLaunches = append(b.kvLaunches, kvWriteLaunch(tab, n, w.row, w.rows, w.s.d, w.stride, format))
		b.kvTabs = append(b.kvTabs, w.pt.wtab)
		if full {
			b.kvRetire = append(b.kvRetire, w)
		}
		rest = rest[n:]
	}
	b.launchKVWrites()
}

// launchKVWrites launches the kv_write launches kvWrites gathered, then
// retires the tables of the runs that filled their parts. Called with mu
// held.
func (b *Backend) launchKVWrites() {
	if b.err == nil && len(b.kvLaunches) > 0 {
		b.fail(b.launch(b.kvLaunches, false))
	}
	for _, w := range b.kvRetire {
		w.s.retire(w.pt)
	}
	clear(b.kvLaunches)
	clear(b.kvTabs)
	clear(b.kvRetire)
	b.kvLaunches, b.kvTabs, b.kvRetire = b.kvLaunches[:0], b.kvTabs[:0], b.kvRetire[:0]
}

// op queues one launch of an operation, unless an earlier failure stopped
// the backend.
func (b *Backend) op(l Launch, dynamic bool) {
	b.mu.Lock()
	b.enqueue(l, dynamic)
	b.mu.Unlock()
}

// keep marks where an operation's hold on its buffers ends: once the
// launches that read them are queued (b.queue) or made. A device address
// taken from a buffer (ptr) is no reference the garbage collector sees,
// and until its launch is queued, a caller's buffer it no longer holds
// may be collected, its memory freed at an idle point the operation
// itself reaches: a device out of memory makes allocRaw flush, collect
// and free what the cleanups queued, and enqueue may flush deferred cache
// writes that allocate. Once queued, the launch is safe: memory is freed
// only where the stream is idle, after the queue went to the driver. See
// docs/cuda.md, "Lifetimes".
func keep(bufs ...compute.Buffer) {
	for i := range bufs {
		runtime.KeepAlive(bufs[i].Mem)
	}
}

// Embed sets row i of out to row ids[i] of table; the ids go to the device
// as int32.
func (b *Backend) Embed(out compute.Buffer, table compute.Weight, ids []int) {
	w := ownWeight(table)
	if len(ids) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return
	}
	b.ids = b.ids[:0]
	for _, id := range ids {
		if id < 0 || id >= w.rows {
			panic(fmt.Sprintf("cuda: token id %d outside the table of %d rows", id, w.rows))
		}
		b.ids = append(b.ids, int32(id))
	}
	b.flush()
	if b.idsCap < len(ids) {
		if b.idsDev != 0 {
			// Queued work may still read the old ids: free at idle.
			b.freeLater(b.idsDev)
		}
		p, err := b.allocRaw(4 * max(len(ids), 64))
		if err != nil {
			b.fail(fmt.Errorf("cuda: Embed of %d ids: %w", len(ids), err))
			return
		}
		b.idsDev, b.idsCap = p, max(len(ids), 64)
	}
	if err := b.copyInNoWait(b.idsDev, bytesOf(b.ids)); err != nil {
		b.fail(err)
		return
	}
	// Static: a decode step embeds from the same ids buffer every time.
	if w.dt.Quantized() {
		b.enqueue(quantEmbedLaunch(w.dt, ptr(out), w.mem.ptr, b.idsDev, len(ids), w.cols), false)
	} else {
		b.enqueue(embedLaunch(w.dt, ptr(out), w.mem.ptr, b.idsDev, len(ids), w.cols), false)
	}
	keep(out)
	runtime.KeepAlive(w)
}

// MatMul sets out to x times w transposed: a matrix-vector kernel for a
// few rows (decode); for more (prefill), 16-bit activations on the tensor
// cores for bf16 and f16 weights (gemm.go), else cuBLAS or the tiled
// matrix kernel in float32; quantized weights take quant.go's kernels.
func (b *Backend) MatMul(out, x compute.Buffer, n int, w compute.Weight) {
	wt := ownWeight(w)
	if n <= 0 {
		return
	}
	defer keep(out, x) // the paths below allocate scratch
	defer runtime.KeepAlive(wt)
	if wt.dt.Quantized() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if n <= quantSplitRows {
			b.fail(b.quantMatVec(ptr(out), ptr(x), n, wt))
			return
		}
		b.fail(b.quantMatMul(ptr(out), ptr(x), n, wt))
		return
	}
	if n <= maxMatVecRows {
		b.op(matVecLaunch(wt.dt, ptr(out), ptr(x), wt.mem.ptr, n, wt.rows, wt.cols), false)
		return
	}
	if wt.dt != tensor.F32 && !b.g16.exact {
		b.mu.Lock()
		b.fail(b.matMul16(ptr(out), ptr(x), n, wt))
		b.mu.Unlock()
		return
	}
	if b.gemm != nil {
		b.mu.Lock()
		b.fail(b.matMulBLAS(ptr(out), ptr(x), n, wt))
		b.mu.Unlock()
		return
	}
	b.op(matMulLaunch(wt.dt, ptr(out), ptr(x), wt.mem.ptr, n, wt.rows, wt.cols), false)
}

// wideFloats bounds the scratch of weights widened for cuBLAS: 64 MiB.
const wideFloats = 16 << 20

// matMulBLAS computes out = x times w transposed with cuBLAS. cuBLAS
// multiplies operands of one type, and x is float32, so a bf16 or f16
// weight is widened to float32 first (the embedding kernel copies its
// rows), a chunk of rows at a time through a bounded scratch: prefill is
// compute-bound, and widening costs a few bytes per weight per chunk of up
// to 512 tokens. Called with mu held.
func (b *Backend) matMulBLAS(out, x Ptr, n int, w *weight) error {
	if b.err != nil {
		return b.err
	}
	if w.dt == tensor.F32 {
		b.flush()
		return b.sgemm(out, x, w.mem.ptr, n, w.rows, w.cols, w.rows)
	}
	chunk := max(1, min(w.rows, b.wideMax/w.cols))
	if b.wideN < chunk*w.cols {
		if b.wide != 0 {
			b.freeLater(b.wide) // queued work may still read it
		}
		b.wide, b.wideN = 0, 0
		p, err := b.allocRaw(4 * chunk * w.cols)
		if err != nil {
			return fmt.Errorf("cuda: cuBLAS scratch for a %dx%d weight: %w", w.rows, w.cols, err)
		}
		b.wide, b.wideN = p, chunk*w.cols
	}
	if b.identN < chunk {
		ids := make([]int32, chunk)
		for i := range ids {
			ids[i] = int32(i)
		}
		p, err := b.allocRaw(4 * chunk)
		if err != nil {
			return fmt.Errorf("cuda: cuBLAS row ids: %w", err)
		}
		b.flush()
		if err := b.drv.copyIn(p, bytesOf(ids)); err != nil {
			return err
		}
		if b.ident != 0 {
			b.freeLater(b.ident)
		}
		b.ident, b.identN = p, chunk
	}
	es := w.dt.Size()
	for r0 := 0; r0 < w.rows; r0 += chunk {
		rc := min(chunk, w.rows-r0)
		b.enqueue(embedLaunch(w.dt, b.wide, w.mem.ptr+Ptr(r0*w.cols*es), b.ident, rc, w.cols), true)
		if err := b.sgemm(out+Ptr(4*r0), x, b.wide, n, rc, w.cols, w.rows); err != nil {
			return err
		}
	}
	return nil
}

// RMSNorm normalizes each row of x into out.
func (b *Backend) RMSNorm(out, x, w compute.Buffer, rows int, eps float32) {
	if rows <= 0 {
		return
	}
	b.op(rmsNormLaunch(ptr(out), ptr(x), ptr(w), rows, w.Len, eps), false)
	keep(out, x, w)
}

// AddRows adds bias to each row of x.
func (b *Backend) AddRows(x, bias compute.Buffer, rows int) {
	if rows <= 0 {
		return
	}
	b.op(addRowsLaunch(ptr(x), ptr(bias), rows, bias.Len), false)
	keep(x, bias)
}

// Add adds y to x.
func (b *Backend) Add(x, y compute.Buffer) {
	if x.Len == 0 {
		return
	}
	b.op(addLaunch(ptr(x), ptr(y), x.Len), false)
	keep(x, y)
}

// SiLUMul sets gate to silu(gate) * up.
func (b *Backend) SiLUMul(gate, up compute.Buffer) {
	if gate.Len == 0 {
		return
	}
	b.op(siluMulLaunch(ptr(gate), ptr(up), gate.Len), false)
	keep(gate, up)
}

// GELUTanhMul sets gate to gelu_tanh(gate) * up (compute.ArchOps).
func (b *Backend) GELUTanhMul(gate, up compute.Buffer) {
	if gate.Len == 0 {
		return
	}
	b.op(geluTanhMulLaunch(ptr(gate), ptr(up), gate.Len), false)
	keep(gate, up)
}

// Scale multiplies x by s (compute.ArchOps).
func (b *Backend) Scale(x compute.Buffer, s float32) {
	if x.Len == 0 {
		return
	}
	b.op(scalarMulLaunch(ptr(x), s, x.Len), false)
	keep(x)
}

// Softcap sets each value v of x to c*tanh(v/c) (compute.ArchOps).
func (b *Backend) Softcap(x compute.Buffer, c float32) {
	if x.Len == 0 {
		return
	}
	b.op(softcapLaunch(ptr(x), c, x.Len), false)
	keep(x)
}

// NormAdd adds the n rows of x normalised by RMSNorm (weight norm, eps)
// to acc as one rmsnorm_add kernel (compute.NormAdder): Gemma's sandwich
// norms and their residual adds. Under Options.NoFusion it runs rmsnorm
// (in place on x) and add, as the model would.
func (b *Backend) NormAdd(acc, x, norm compute.Buffer, n int, eps float32) {
	if n <= 0 {
		return
	}
	if acc.Len < n*norm.Len || x.Len < n*norm.Len {
		panic(fmt.Sprintf("cuda: NormAdd of %d rows of %d: buffers of %d and %d values", n, norm.Len, acc.Len, x.Len))
	}
	if b.noFusion {
		b.RMSNorm(x, x, norm, n, eps)
		b.Add(acc.Slice(0, n*norm.Len), x.Slice(0, n*norm.Len))
		return
	}
	b.op(rmsNormAddLaunch(ptr(acc), ptr(x), ptr(norm), n, norm.Len, eps), false)
	keep(acc, x, norm)
}

// SlidingKV marks the backend's attention as reading no KV block before
// its window (compute.SlidingKV): a call's block table starts at the
// block of its first query's first key, so a sliding layer's cache may
// release the blocks before it.
func (b *Backend) SlidingKV() {}

// RoPE rotates every head of every row at its position. Its start moves
// with every decode step, so it is launched on its own, outside graphs.
func (b *Backend) RoPE(x compute.Buffer, rows, heads, d, start int, cos, sin compute.Buffer) {
	if rows <= 0 {
		return
	}
	b.op(ropeLaunch(ptr(x), rows, heads, d, start, ptr(cos), ptr(sin)), true)
	keep(x, cos, sin)
}
