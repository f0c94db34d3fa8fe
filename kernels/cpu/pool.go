// Package cpu holds the CPU's kernels: matrix products that read weights in
// their stored dtype (F32, F16, BF16) and the element-wise ops of a decoder
// layer. With GOEXPERIMENT=simd on amd64 the hot loops use AVX2+FMA through
// simd/archsimd when the CPU has them; otherwise scalar code runs. Matrix
// products of bf16 and f16 weights run C kernels (cgo) where the CPU has
// AVX2/FMA/F16C (avx2_amd64.c) or AVX-512 (avx512_amd64.c, bf16), on
// weights packed once into panels (Matrix); every path is pure Go
// otherwise. The level is chosen at run time, and $KAKEYA_CPU can cap it
// (EnvCPU) so the slower paths run on a faster CPU.
//
// Every kernel computes a value by one arithmetic wherever it sits: a
// token's matmul outputs do not depend on the other tokens of the call,
// nor an element-wise result on its offset in a multi-token buffer, so a
// prefill, a decode step and any batch agree bit for bit.
//
// The kernels are internal hot paths: shape errors are programmer errors
// (the model validates shapes when it loads) and panic with a message that
// names the kernel and the offending lengths.
package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Task is a unit of parallel work over an index range. Callers that keep a
// Task value (a pointer to a preallocated struct) run it through Pool.Run
// without allocating.
type Task interface {
	Run(lo, hi int)
}

// workerTask is Task with the index of the worker running it, so a kernel can
// use that worker's scratch memory.
type workerTask interface {
	runWorker(worker, lo, hi int)
}

// Pool is a fixed set of worker goroutines that split index ranges. Its
// methods may be called from several goroutines; a call made while the pool
// is busy (including a nested call from inside a running fn or Task) runs
// inline on the calling goroutine instead of waiting, so nesting never
// deadlocks. A panic inside work run on a worker goroutine is not recovered
// and ends the program, like any goroutine's.
type Pool struct {
	threads int
	k       *kernelSet
	prec    Precision
	scratch [][]float32 // per worker (index 0 is the caller), GEMM weight tiles
	acts    activations // MatMul's converted activations

	mu     sync.Mutex // held by the caller whose job is in flight
	wake   []chan struct{}
	wg     sync.WaitGroup
	closed bool

	// The job in flight; written under mu before the workers are woken.
	n, chunks int
	next      atomic.Int64
	fn        func(lo, hi int)
	task      Task
	wtask     workerTask
	mm        matmulTask // MatMul's job, kept here so dispatching it does not allocate
	silu      siluTask   // SiLUMul's job, likewise
}

// NewPool starts a pool of threads workers counting the calling goroutine,
// so threads-1 goroutines are started. threads <= 0 means runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool {
	return newPool(threads, bestKernels(), PrecisionF32)
}

// NewPoolPrecision is NewPool with MatMul's treatment of the activations
// that multiply bf16 weights.
func NewPoolPrecision(threads int, prec Precision) *Pool {
	return newPool(threads, bestKernels(), prec)
}

func newPool(threads int, k *kernelSet, prec Precision) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, k: k, prec: prec}
	p.scratch = make([][]float32, threads)
	for i := range p.scratch {
		p.scratch[i] = make([]float32, scratchLen)
	}
	p.wake = make([]chan struct{}, threads-1)
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		go p.worker(i+1, p.wake[i])
	}
	return p
}

// Precision returns MatMul's treatment of activations (see Precision).
func (p *Pool) Precision() Precision { return p.prec }

// Threads reports how many goroutines, the caller included, share the work.
func (p *Pool) Threads() int { return p.threads }

// Close stops the worker goroutines. Later calls still work but run inline on
// the calling goroutine.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, c := range p.wake {
		close(c)
	}
}

func (p *Pool) worker(id int, wake <-chan struct{}) {
	for range wake {
		p.work(id)
		p.wg.Done()
	}
}

// work claims chunks of the job in flight until none are left.
func (p *Pool) work(id int) {
	for {
		c := int(p.next.Add(1) - 1)
		if c >= p.chunks {
			return
		}
		lo, hi := c*p.n/p.chunks, (c+1)*p.n/p.chunks
		switch {
		case p.wtask != nil:
			p.wtask.runWorker(id, lo, hi)
		case p.task != nil:
			p.task.Run(lo, hi)
		default:
			p.fn(lo, hi)
		}
	}
}

// For calls fn on contiguous, disjoint ranges that together cover [0, n),
// concurrently across the pool, and returns when all calls have returned.
// fn may be called more than once per goroutine and must not assume one call
// per worker. A closure passed as fn may allocate; Run does not.
func (p *Pool) For(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if !p.acquire(n) {
		fn(0, n)
		return
	}
	p.fn = fn
	p.dispatch(n, min(n, p.threads))
}

// Run is For with a Task: t.Run is called on contiguous, disjoint ranges that
// cover [0, n), several per thread and claimed in order as threads come
// free, so units of uneven cost balance best when the costly ones come
// first. It does not allocate.
func (p *Pool) Run(n int, t Task) {
	if n <= 0 {
		return
	}
	if !p.acquire(n) {
		t.Run(0, n)
		return
	}
	p.task = t
	p.dispatch(n, min(n, p.threads*chunksPerThread))
}

// acquire takes the pool for one job; false means run inline.
func (p *Pool) acquire(n int) bool {
	if p.threads == 1 || n == 1 || !p.mu.TryLock() {
		return false
	}
	if p.closed {
		p.mu.Unlock()
		return false
	}
	return true
}

// dispatch runs the job set in p by acquire's caller, then releases the pool.
func (p *Pool) dispatch(n, chunks int) {
	p.n, p.chunks = n, chunks
	p.next.Store(0)
	helpers := min(len(p.wake), chunks-1)
	p.wg.Add(helpers)
	for _, c := range p.wake[:helpers] {
		c <- struct{}{}
	}
	p.work(0)
	p.wg.Wait()
	p.fn, p.task, p.wtask, p.mm, p.silu = nil, nil, nil, matmulTask{}, siluTask{}
	p.mu.Unlock()
}

// siluChunk is how many values one unit of a parallel SiLUMul covers, and
// minParallelSiLU the fewest values worth waking workers for (a prefill's
// tokens; a decode step's 4864 stay on the caller).
const (
	siluChunk       = 4096
	minParallelSiLU = 1 << 16
)

// siluTask is SiLUMul over units of siluChunk values.
type siluTask struct{ gate, up []float32 }

func (t *siluTask) Run(lo, hi int) {
	a, b := lo*siluChunk, min(hi*siluChunk, len(t.gate))
	siluMul(t.gate[a:b], t.up[a:b])
}

// SiLUMul is the package's SiLUMul split across the pool when gate is long
// enough to pay for it; every value is computed as SiLUMul computes it. It
// does not allocate.
func (p *Pool) SiLUMul(gate, up []float32) {
	if len(gate) != len(up) {
		panic(fmt.Sprintf("cpu: Pool.SiLUMul: lengths %d and %d", len(gate), len(up)))
	}
	n := (len(gate) + siluChunk - 1) / siluChunk
	if len(gate) < minParallelSiLU || !p.acquire(n) {
		siluMul(gate, up)
		return
	}
	p.silu = siluTask{gate: gate, up: up}
	p.task = &p.silu
	p.dispatch(n, min(n, p.threads*chunksPerThread))
}
