// Package cpubackend is the CPU compute backend: the operations of compute.Backend
// on host memory, run by the SIMD kernels of kernels/cpu over a pool of
// worker threads, with attention over KV blocks stored in host memory
// (hot float32 or bf16 rows, or codec bytes decoded as attention reads
// them).
package cpubackend

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kakeya-ai/kakeya/attention"
	"github.com/kakeya-ai/kakeya/compute"
	kern "github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/tensor"
)

func init() {
	compute.RegisterBackend("cpu", func(o compute.OpenOptions) (compute.Backend, error) { return NewMatMul(o.Threads, o.MatMul) })
}

// Backend runs compute.Backend's operations on the CPU.
//
// Its arithmetic cannot fail; what can is attention over a KV block that
// does not decode (memory corrupted, or a codec's bug). Forward returns that
// failure and the backend records it for Err too, since it puts the
// backend's memory in doubt (see compute's contract): the steps after it
// fail rather than run over corrupted blocks.
type Backend struct {
	pool *kern.Pool
	// dtypes has bit 1<<DType set for each dtype of the weights uploaded,
	// so Describe names the matmuls that really run.
	dtypes atomic.Uint32

	mu  sync.Mutex
	err error // the first failure recorded, see Err
	// scratch holds the attention scratch of each shape, shared by every
	// sequence's attention (per worker, not per sequence).
	scratch map[compute.AttentionParams]*attention.Scratch
}

var (
	_ compute.Backend   = (*Backend)(nil)
	_ compute.Preparer  = (*Backend)(nil)
	_ compute.ArchOps   = (*Backend)(nil)
	_ compute.SlidingKV = (*Backend)(nil)
)

// SlidingKV marks that the host attention reads no block before a call's
// window (it starts at the first query's first key).
func (b *Backend) SlidingKV() {}

// New starts a CPU backend of threads worker threads counting the caller;
// threads <= 0 means runtime.GOMAXPROCS(0).
func New(threads int) *Backend { return &Backend{pool: kern.NewPool(threads)} }

// DefaultMatMul is the precision NewMatMul's "" stands for: bf16, the
// arithmetic of llama.cpp's BF16 matmul (fp32 accumulation) and the one
// fast enough to beat it in prefill; "f32" is exact.
const DefaultMatMul = "bf16"

// MaxThreads returns the most compute threads NewMatMul accepts: 64 per
// CPU core, at most 4096. More only costs memory (every thread has its own
// scratch) and scheduling.
func MaxThreads() int { return min(64*runtime.NumCPU(), 4096) }

// NewMatMul starts a CPU backend of threads worker threads (0 means
// GOMAXPROCS, at most MaxThreads) whose matrix products multiply bf16
// weights by activations of the precision matmul names: "" means
// DefaultMatMul; "bf16" rounds them to bf16 first, as llama.cpp's BF16
// matmul does, which on CPUs with AVX512_BF16 is about 1.5 times as fast in
// prefill and moves logits by bf16 rounding; "f32" uses them as they are
// (exact f32 products, what the reference comparisons pin). Products
// accumulate in f32 and results do not depend on the thread count either
// way; f32 and f16 weights always multiply f32 activations.
func NewMatMul(threads int, matmul string) (*Backend, error) {
	if threads < 0 || threads > MaxThreads() {
		return nil, fmt.Errorf("cpu: %d threads, want 0 (GOMAXPROCS) to %d (64 per CPU core, at most 4096)", threads, MaxThreads())
	}
	if err := kern.CheckEnv(); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if matmul == "" {
		matmul = DefaultMatMul
	}
	prec, err := kern.ParsePrecision(matmul)
	if err != nil {
		return nil, err
	}
	return &Backend{pool: kern.NewPoolPrecision(threads, prec)}, nil
}

// Threads returns the number of worker threads.
func (b *Backend) Threads() int { return b.pool.Threads() }

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Describe returns the kernels this process runs (see kern.Features) and
// the matrix products the weights uploaded so far get: "; matmuls: bf16
// weights x bf16 activations" (the default precision on bf16 weights),
// "f32 weights x f32 activations", ...
func (b *Backend) Describe() string {
	var mm []string
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16, tensor.F32, tensor.Q8_0, tensor.Q4_0, tensor.Q5_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		if b.dtypes.Load()&(1<<dt) == 0 {
			continue
		}
		acts := "f32"
		switch {
		case dt == tensor.BF16:
			acts = b.pool.Precision().String()
		case dt.Format() != nil && dt.Format().Block == 256:
			acts = "q8_K"
		case dt.Format() != nil:
			acts = "q8_0"
		}
		mm = append(mm, fmt.Sprintf("%s weights x %s activations", strings.ToLower(dt.String()), acts))
	}
	if len(mm) == 0 {
		return kern.Features()
	}
	return kern.Features() + "; matmuls: " + strings.Join(mm, ", ")
}

// Err returns the first failure the backend recorded, nil if none.
func (b *Backend) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// fail records err if it is the first failure.
func (b *Backend) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
}

// Close stops the worker threads.
func (b *Backend) Close() error {
	b.pool.Close()
	return nil
}

// Alloc returns a zeroed buffer of n values.
func (b *Backend) Alloc(n int) compute.Buffer { return compute.Wrap(make([]float32, n)) }

// weight is a matrix in its stored dtype, read where it lies (usually
// mapped from the checkpoint) by Embed and, where the kernels read weights
// in panels, packed into them on first use by MatMul.
type weight struct {
	m  tensor.Mat
	mm *kern.Matrix
}

func (w *weight) Shape() (rows, cols int) { return w.m.Rows, w.m.Cols }

// Upload returns a Weight over m's memory: the CPU reads it in place.
func (b *Backend) Upload(m tensor.Mat) (compute.Weight, error) {
	switch {
	case m.Rows <= 0 || m.Cols <= 0:
		return nil, fmt.Errorf("cpu: weight of %dx%d", m.Rows, m.Cols)
	case m.DType == tensor.F32 && len(m.F32) < m.Rows*m.Cols,
		(m.DType == tensor.F16 || m.DType == tensor.BF16) && len(m.U16) < m.Rows*m.Cols:
		return nil, fmt.Errorf("cpu: %v weight of %dx%d holds too few values", m.DType, m.Rows, m.Cols)
	case m.DType.Quantized():
		rb, ok := m.DType.RowBytes(m.Cols)
		if !ok || len(m.Q) < m.Rows*rb {
			return nil, fmt.Errorf("cpu: %v weight of %dx%d: rows of %d values are not whole blocks, or %d bytes are too few", m.DType, m.Rows, m.Cols, m.Cols, len(m.Q))
		}
		m.F32, m.U16, m.Q = nil, nil, m.Q[:m.Rows*rb:m.Rows*rb]
		b.dtypes.Or(1 << m.DType)
		return &weight{m: m, mm: kern.NewMatrix(m)}, nil
	case m.DType.Size() == 0:
		return nil, fmt.Errorf("cpu: weight dtype %v", m.DType)
	}
	// The kernels take storage of exactly the matrix's size.
	if size := m.Rows * m.Cols; m.DType == tensor.F32 {
		m.F32, m.U16 = m.F32[:size:size], nil
	} else {
		m.F32, m.U16 = nil, m.U16[:size:size]
	}
	b.dtypes.Or(1 << m.DType)
	return &weight{m: m, mm: kern.NewMatrix(m)}, nil
}

// Interleaved returns the interleaved layout in which the CPU's kernels
// read a quantized matrix of d (kern.InterleavedLayout), nil where they
// read its rows as stored (compute.Interleaver).
func (b *Backend) Interleaved(d tensor.DType, rows, cols int) *tensor.InterleavedFormat {
	return kern.InterleavedLayout(d, rows, cols)
}

// UploadInterleaved returns a Weight over m's bytes, which hold its rows
// in f (compute.Interleaver): the kernels read them in place, as they read
// the copy Prepare makes of stored rows.
func (b *Backend) UploadInterleaved(m tensor.Mat, f *tensor.InterleavedFormat) (compute.Weight, error) {
	mm, err := kern.NewInterleavedMatrix(m, f)
	if err != nil {
		return nil, err
	}
	b.dtypes.Or(1 << m.DType)
	return &weight{m: mm.Mat(), mm: mm}, nil
}

// Prepare packs w into the panels the kernels read, where they read any,
// or interleaves a quantized w's rows where the kernels read them so (see
// kern.Pool.Prepare), and reports whether it did. An interleaved w's
// stored rows are let go of (Embed reads its rows from the interleaved
// copy), so that a matrix quantized at load is not held twice; the caller
// gives a mapped file's pages back.
func (b *Backend) Prepare(w compute.Weight) bool {
	wt := w.(*weight)
	if !b.pool.Prepare(wt.mm) {
		return false
	}
	if wt.m.DType.Quantized() {
		wt.m.Q = nil
	}
	return true
}

// Write copies src into dst.
func (b *Backend) Write(dst compute.Buffer, src []float32) { copy(compute.Host(dst), src) }

// Read copies src to dst.
func (b *Backend) Read(dst []float32, src compute.Buffer) { copy(dst, compute.Host(src)) }

// Embed widens row ids[i] of table into row i of out.
func (b *Backend) Embed(out compute.Buffer, table compute.Weight, ids []int) {
	t := table.(*weight)
	o := compute.Host(out)
	for i, id := range ids {
		t.mm.Row(o[i*t.m.Cols:(i+1)*t.m.Cols], id)
	}
}

// MatMul sets out to x times w transposed, split across the threads.
func (b *Backend) MatMul(out, x compute.Buffer, n int, w compute.Weight) {
	b.pool.MatMul(compute.Host(out), compute.Host(x), n, w.(*weight).mm)
}

// RMSNorm normalizes each row of x into out.
func (b *Backend) RMSNorm(out, x, w compute.Buffer, rows int, eps float32) {
	o, xs, ws := compute.Host(out), compute.Host(x), compute.Host(w)
	d := len(ws)
	for r := range rows {
		kern.RMSNorm(o[r*d:(r+1)*d], xs[r*d:(r+1)*d], ws, eps)
	}
}

// AddRows adds bias to each row of x.
func (b *Backend) AddRows(x, bias compute.Buffer, rows int) {
	xs, bs := compute.Host(x), compute.Host(bias)
	d := len(bs)
	for r := range rows {
		kern.Add(xs[r*d:(r+1)*d], bs)
	}
}

// Add adds y to x.
func (b *Backend) Add(x, y compute.Buffer) { kern.Add(compute.Host(x), compute.Host(y)) }

// SiLUMul sets gate to silu(gate) * up.
func (b *Backend) SiLUMul(gate, up compute.Buffer) {
	b.pool.SiLUMul(compute.Host(gate), compute.Host(up))
}

// Scale multiplies x by s.
func (b *Backend) Scale(x compute.Buffer, s float32) { kern.Scale(compute.Host(x), s) }

// GELUTanhMul sets gate to gelu_tanh(gate) * up.
func (b *Backend) GELUTanhMul(gate, up compute.Buffer) {
	kern.GELUTanhMul(compute.Host(gate), compute.Host(up))
}

// Softcap sets x to c*tanh(x/c).
func (b *Backend) Softcap(x compute.Buffer, c float32) { kern.Softcap(compute.Host(x), c) }

// RoPE rotates every head of every row at its position.
func (b *Backend) RoPE(x compute.Buffer, rows, heads, d, start int, cos, sin compute.Buffer) {
	xs, cs, sn := compute.Host(x), compute.Host(cos), compute.Host(sin)
	half, row := d/2, heads*d
	for i := range rows {
		p := start + i
		c, s := cs[p*half:(p+1)*half], sn[p*half:(p+1)*half]
		for h := range heads {
			kern.RoPE(xs[i*row+h*d:i*row+(h+1)*d], c, s)
		}
	}
}

// NewAttention returns the host attention of one sequence, run on the
// backend's threads, whose failures the backend records. After a recorded
// failure it returns that failure.
func (b *Backend) NewAttention(p compute.AttentionParams) (compute.Attention, error) {
	if err := b.Err(); err != nil {
		return nil, err
	}
	// The scratch depends on the shape only: the rest of p is zeroed in
	// the key.
	key := compute.AttentionParams{Heads: p.Heads, KVHeads: p.KVHeads, HeadDim: p.HeadDim, BlockSize: p.BlockSize, MaxContext: p.MaxContext}
	b.mu.Lock()
	sc := b.scratch[key]
	if sc == nil && p.Heads > 0 && p.KVHeads > 0 && p.Heads%p.KVHeads == 0 && p.HeadDim > 0 && p.BlockSize > 0 && p.MaxContext > 0 {
		if b.scratch == nil {
			b.scratch = map[compute.AttentionParams]*attention.Scratch{}
		}
		sc = attention.NewScratch(b.pool, p)
		b.scratch[key] = sc
	}
	b.mu.Unlock()
	a, err := attention.NewShared(b.pool, p, sc)
	if err != nil {
		return nil, err
	}
	return &recorded{Attention: a, b: b}, nil
}

// recorded is an attention whose failures its backend records.
type recorded struct {
	compute.Attention
	b *Backend
}

// Forward runs the attention and records its failure.
func (a *recorded) Forward(out, q compute.Buffer, n, start int, kv compute.KVLayer, cos, sin compute.Buffer) error {
	err := a.Attention.Forward(out, q, n, start, kv, cos, sin)
	if err != nil {
		a.b.fail(err)
	}
	return err
}

// NewBlockStore returns a store of parts of rows x d values in host memory.
func (b *Backend) NewBlockStore(rows, d int, bf16 bool) compute.BlockStore {
	return attention.NewStore(rows, d, bf16)
}
