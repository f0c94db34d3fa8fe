package cudabackend

// Prefill's matrix products in 16 bits on the tensor cores. A product of
// more than maxMatVecRows rows by a bf16 or f16 weight rounds the
// activations to the weight's type (to_bf16 as the CPU backend's default
// --matmul bf16 rounds them; to_f16_rows with a power-of-two scale per row
// for f16, so that activations beyond f16's range do not overflow) and
// multiplies them by the weight as stored, summing in float32: no widened
// copy of a weight is made. Two GEMMs can do it: the backend's mma kernel
// (gemm_bf16, gemm_f16 in kernels/cuda/gemm.cu) and cuBLAS's GemmEx on 16-bit
// operands with float32 compute. Above skinnyMaxRows rows cuBLAS runs them
// where it is loaded; from 9 to skinnyMaxRows rows, where cuBLAS is weak and
// the product is bound by reading the weight, the tuner times both once per
// row bucket and weight shape and keeps the faster. Without cuBLAS the mma
// kernel runs them all. Options.MatMul "f32" keeps the float32 path (float32
// weights always take it).

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/tensor"
)

const (
	gemmTile      = 64  // gemm_bf16, gemm_f16: output tile (activation rows x weight rows)
	gemmThreads   = 128 // and threads per block (4 warps)
	skinnyMaxRows = 256 // the most rows the tuner weighs the mma kernel against cuBLAS
)

// gemmPath is a GEMM that multiplies 16-bit activations by a 16-bit weight.
type gemmPath int

const (
	gemmMMA    gemmPath = iota // the backend's mma kernel
	gemmCUBLAS                 // cuBLAS GemmEx
)

func (p gemmPath) String() string {
	if p == gemmCUBLAS {
		return "cuBLAS"
	}
	return "mma"
}

// gemmKey is what the tuner chooses by: the rows rounded up to a power of
// two (16 to 256) and the weight's shape and dtype.
type gemmKey struct {
	bucket, rows, cols int
	dt                 tensor.DType
}

// gemmTrial is the tuner's measurement of one key: each path's time and
// the one kept.
type gemmTrial struct {
	key   gemmKey
	times [2]time.Duration // by gemmPath
	best  gemmPath
}

// gemm16 is the backend's state for 16-bit GEMMs. Guarded by Backend.mu.
type gemm16 struct {
	exact    bool // Options.MatMul "f32": the float32 path for every weight
	act      Ptr  // activations rounded to 16 bits
	actBytes int
	scale    Ptr // to_f16_rows's per-row scales
	scaleN   int
	trials   []gemmTrial // in the order tuned
	// force, when not 0, runs every 16-bit product by path force-1
	// untimed: the GPU report's GEMM rows time each path alone.
	force int
	// clock reads a monotonic time after the device is idle: the host's
	// clock on a GPU (cuCtxSynchronize, then time), a fake driver's
	// simulated time in tests.
	clock func() time.Duration
}

// rowBucket rounds n (9 to skinnyMaxRows) up to a power of two.
func rowBucket(n int) int { return 1 << bits.Len(uint(n-1)) }

// toBF16Launch rounds n float32 values at x to bf16 at out.
// Kernel: to_bf16(kk_u16 *out, const float *x, int n).
func toBF16Launch(out, x Ptr, n int) Launch {
	positive("to_bf16", n)
	return elementwise("to_bf16", n, new(args).ptr(out).ptr(x).i32("n", n))
}

// toF16RowsLaunch rounds rows rows of cols float32 values at x to f16 at
// out, each scaled by a power of two into f16's range; scale gets the
// rows' factors back.
// Kernel: to_f16_rows(kk_u16 *out, float *scale, const float *x, int rows, int cols).
func toF16RowsLaunch(out, scale, x Ptr, rows, cols int) Launch {
	positive("to_f16_rows", rows, cols)
	int32Of("to_f16_rows elements", rows*cols)
	a := new(args).ptr(out).ptr(scale).ptr(x).i32("rows", rows).i32("cols", cols)
	return Launch{Kernel: "to_f16_rows", Grid: Dim3{u32("to_f16_rows rows", rows), 1, 1}, Block: Dim3{rowThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// scaleRowsLaunch multiplies each of rows rows of x (cols values) by its
// scale. Kernel: scale_rows(float *x, const float *scale, int rows, int cols).
func scaleRowsLaunch(x, scale Ptr, rows, cols int) Launch {
	positive("scale_rows", rows, cols)
	return elementwise("scale_rows", rows*cols, new(args).ptr(x).ptr(scale).i32("rows", rows).i32("cols", cols))
}

// gemmLaunch sets out (n rows of rows float32) to x (n rows of cols,
// 16-bit of dt) times w (rows x cols of dt) transposed, row i times
// scale[i] when scale is not 0 (f16): the mma kernel, one block of
// gemmThreads per gemmTile x gemmTile output tile.
// Kernel: gemm_<dt>(float *out, const kk_u16 *x, const kk_u16 *w, const float *scale, int n, int rows, int cols, int vec).
func gemmLaunch(dt tensor.DType, out, x, w, scale Ptr, n, rows, cols int) Launch {
	positive("gemm", n, rows, cols)
	int32Of("gemm input", n*cols)
	int32Of("gemm output", n*rows)
	if dt != tensor.BF16 && dt != tensor.F16 {
		panic(fmt.Sprintf("cuda: gemm of a %v weight", dt))
	}
	vec := 0
	if cols%8 == 0 {
		vec = 1 // rows of x and w start 16-byte aligned: 8 values a load
	}
	a := new(args).ptr(out).ptr(x).ptr(w).ptr(scale).i32("n", n).i32("rows", rows).i32("cols", cols).i32("vec", vec)
	return Launch{
		Kernel: "gemm_" + dtypeSuffix(dt),
		Grid:   Dim3{u32("gemm column tiles", ceilDiv(rows, gemmTile)), u32("gemm row tiles", ceilDiv(n, gemmTile)), 1},
		Block:  Dim3{gemmThreads, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// matMul16 computes out = x times w transposed for a bf16 or f16 weight
// and n > maxMatVecRows rows, as the file's comment says. Called with mu
// held.
func (b *Backend) matMul16(out, x Ptr, n int, w *weight) error {
	if b.err != nil {
		return b.err
	}
	g := &b.g16
	if err := b.growScratch(&g.act, &g.actBytes, 2*n*w.cols); err != nil {
		return fmt.Errorf("cuda: 16-bit activations of %d x %d: %w", n, w.cols, err)
	}
	var scale Ptr
	if w.dt == tensor.F16 {
		if g.scaleN < n {
			if g.scale != 0 {
				b.freeLater(g.scale)
			}
			g.scale, g.scaleN = 0, 0
			p, err := b.allocRaw(4 * n)
			if err != nil {
				return fmt.Errorf("cuda: f16 row scales: %w", err)
			}
			g.scale, g.scaleN = p, n
		}
		scale = g.scale
		b.enqueue(toF16RowsLaunch(g.act, scale, x, n, w.cols), false)
	} else {
		b.enqueue(toBF16Launch(g.act, x, n*w.cols), false)
	}
	run := func(p gemmPath) error {
		if p == gemmMMA {
			b.enqueue(gemmLaunch(w.dt, out, g.act, w.mem.ptr, scale, n, w.rows, w.cols), false)
			return b.err
		}
		b.flush()
		if b.err != nil {
			return b.err
		}
		b.gen++ // out changes outside the launch queue
		b.busy = true
		err := b.gemm.gemmEx(out, g.act, w.mem.ptr, n, w.rows, w.cols, w.rows, w.dt)
		if err == nil && b.sync {
			if err = b.drv.sync(); err != nil {
				err = fmt.Errorf("cuda: cuBLAS %v GEMM of %d x %d x %d failed: %w", w.dt, n, w.rows, w.cols, err)
			}
		}
		if err == nil && scale != 0 {
			b.enqueue(scaleRowsLaunch(out, scale, n, w.rows), false)
		}
		return err
	}
	switch {
	case g.force == 1+int(gemmMMA) || g.force == 1+int(gemmCUBLAS) && b.gemm != nil:
		return run(gemmPath(g.force - 1))
	case g.force != 0:
		return fmt.Errorf("cuda: GEMM path %d forced without cuBLAS", g.force-1)
	case b.gemm == nil:
		return run(gemmMMA)
	case n > skinnyMaxRows:
		return run(gemmCUBLAS)
	}
	key := gemmKey{rowBucket(n), w.rows, w.cols, w.dt}
	for _, t := range g.trials {
		if t.key == key {
			return run(t.best)
		}
	}
	return b.tune(key, run)
}

// tuneReps is how many timed runs of each path the tuner takes the best
// of, after one to warm up; mmaMargin how much faster than cuBLAS the mma
// kernel must be to be kept: the H100 ran it 2-7x slower than cuBLAS at
// the 7B shapes from 16 rows on (docs/cuda.md), so a noisy near-tie must
// not pick it.
const (
	tuneReps  = 3
	mmaMargin = 0.8
)

// tune times both paths on this product, each run once to warm up and
// tuneReps times between waits for the device (the best kept), keeps the
// mma kernel for key when it takes at most mmaMargin of cuBLAS's time,
// else cuBLAS, and leaves the product computed. Called with mu held.
func (b *Backend) tune(key gemmKey, run func(gemmPath) error) error {
	tr := gemmTrial{key: key}
	for _, p := range []gemmPath{gemmMMA, gemmCUBLAS} {
		var last time.Duration
		for i := range 1 + tuneReps {
			if err := run(p); err != nil {
				return err
			}
			b.flush()
			b.fail(b.drv.sync())
			if b.err != nil {
				return b.err
			}
			now := b.g16.clock()
			if d := now - last; i == 1 || i > 1 && d < tr.times[p] {
				tr.times[p] = d
			}
			last = now
		}
	}
	tr.best = gemmCUBLAS
	if float64(tr.times[gemmMMA]) <= mmaMargin*float64(tr.times[gemmCUBLAS]) {
		tr.best = gemmMMA
	}
	b.g16.trials = append(b.g16.trials, tr)
	return nil
}

// GEMMTrials describes the tuner's choices so far, one per row bucket and
// weight shape in the order tuned: "16 x 896 x 896 bf16: mma 41µs, cuBLAS
// 63µs -> mma".
func (b *Backend) GEMMTrials() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, t := range b.g16.trials {
		out = append(out, fmt.Sprintf("%d x %d x %d %s: mma %v, cuBLAS %v -> %v", t.key.bucket, t.key.rows, t.key.cols,
			strings.ToLower(t.key.dt.String()), t.times[gemmMMA], t.times[gemmCUBLAS], t.best))
	}
	return out
}

// gemmSummary counts the tuner's choices: "tuned 5 shapes: mma 3, cuBLAS
// 2"; "" before any.
func (b *Backend) gemmSummary() string {
	if len(b.g16.trials) == 0 {
		return ""
	}
	var mma int
	for _, t := range b.g16.trials {
		if t.best == gemmMMA {
			mma++
		}
	}
	return fmt.Sprintf("; tuned %d shapes: mma %d, cuBLAS %d", len(b.g16.trials), mma, len(b.g16.trials)-mma)
}

// validMatMul lists Options.MatMul's values.
var validMatMul = []string{"", "bf16", "f32"}

// checkMatMul checks Options.MatMul.
func checkMatMul(m string) error {
	if !slices.Contains(validMatMul, m) {
		return fmt.Errorf("cuda: matmul precision %q: want bf16 (16-bit activations on the tensor cores, the default) or f32 (exact float32 products)", m)
	}
	return nil
}
