package cudabackend

import (
	"fmt"
	"strings"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Quantized weights (tensor.Formats: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)
// are uploaded in their stored blocks and widened inside the kernels of
// kernels/cuda/quant.cu, whose block layouts are generated from
// tensor/quant.go (qformats.h). Decode's few rows, up to quantSplitRows,
// are quantized to 8 bits per group as the CPU backend's are (quant_x)
// and multiplied in integers by matvec_q8 (one warp per output row, a lane
// per 32-value unit, dp4a), 8 rows a launch: the CPU's arithmetic, which
// quantizes activations whatever Options.MatMul says. Prefill's many rows, with
// 16-bit GEMMs on (the default), widen the weight to bf16 in a scratch of
// at most quantWideBytes (dequant_q) and take the bf16 tensor-core path
// (gemm.go); with Options.MatMul "f32", or a weight larger than the
// scratch, matmul_q (64 x 64 float32 tiles). The fused decode kernels (norm_qkv, norm_swiglu,
// matvec_add, norm_matvec) take 16-bit and float32 weights only, so a
// quantized layer runs their steps unfused (see Backend.quantFused).

// quantSuffix names a quantized dtype in kernel names ("q4_k").
func quantSuffix(dt tensor.DType) string {
	f := dt.Format()
	if f == nil {
		panic(fmt.Sprintf("cuda: %v is not a quantized type", dt))
	}
	return strings.ToLower(f.Name)
}

// quantUnit is the values a quantized kernel widens at a time (a Q*_0
// block or a K super-block's sub-block); every format's block is a
// multiple of it.
const quantUnit = 32

// q8Group is the values the activations of dt's products share a scale
// over, as the CPU backend quantizes them (kernels/cpu/quant.go): 32
// (ggml's q8_0) for Q8_0, Q4_0 and Q5_0, 256 (q8_K, with the sum of each
// 16 codes) for the K types.
func q8Group(dt tensor.DType) int {
	if dt.Format().Block == 256 {
		return 256
	}
	return 32
}

// q8Layout is where the quantized activations of n rows of cols values lie
// in the scratch: n*cols int8 codes at 0, n*cols/group float32 scales at
// d, and for the K types n*cols/16 int32 sums at sums; bytes in all.
func q8Layout(dt tensor.DType, n, cols int) (d, sums, bytes int) {
	align := func(v int) int { return (v + 255) &^ 255 }
	d = align(n * cols)
	sums = d + align(4*n*cols/q8Group(dt))
	bytes = sums
	if q8Group(dt) == 256 {
		bytes += align(4 * n * cols / 16)
	}
	return d, sums, bytes
}

// quantXLaunch quantizes n rows of cols values at x into codes qs, scales d
// and (the K types) sums, a warp per group of 32 or 256 values.
// Kernel: quant_x_q8_0(int8 *qs, float *d, const float *x, int blocks).
// Kernel: quant_x_q8_k(int8 *qs, float *d, int *bsums, const float *x, int blocks).
func quantXLaunch(dt tensor.DType, qs, d, sums, x Ptr, n, cols int) Launch {
	positive("quant_x", n, cols)
	g := q8Group(dt)
	blocks := int(int32Of("quant_x blocks", n*cols/g))
	a := new(args).ptr(qs).ptr(d)
	name := "quant_x_q8_0"
	if g == 256 {
		a.ptr(sums)
		name = "quant_x_q8_k"
	}
	a.ptr(x).i32("blocks", blocks)
	return Launch{
		Kernel: name,
		Grid:   Dim3{u32("quant_x blocks", ceilDiv(blocks, elemThreads/32)), 1, 1},
		Block:  Dim3{elemThreads, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// quantMatVecLaunch sets out (n rows of rows values) to the quantized x
// (quantXLaunch's qs, d and sums for n rows of cols) times the quantized w
// (rows x cols of dt) transposed, in integers 4 codes at a time;
// 1 <= n <= maxMatVecRows.
// Kernel: matvec_q8_<t>(float *out, const int8 *qx, const float *dx, const int *bsums, const uint8 *w, int n, int rows, int cols).
func quantMatVecLaunch(dt tensor.DType, out, qs, d, sums, w Ptr, n, rows, cols int) Launch {
	if n < 1 || n > maxMatVecRows {
		panic(fmt.Sprintf("cuda: matvec_q8 of %d rows, want 1..%d", n, maxMatVecRows))
	}
	positive("matvec_q8", rows, cols)
	int32Of("matvec_q8 input", n*cols)
	int32Of("matvec_q8 output", n*rows)
	p := new(args).ptr(out).ptr(qs).ptr(d).ptr(sums).ptr(w).i32("n", n).i32("rows", rows).i32("cols", cols)
	return Launch{
		Kernel: "matvec_q8_" + quantSuffix(dt),
		Grid:   Dim3{u32("matvec_q8 blocks", ceilDiv(rows, matVecWarps)), 1, 1},
		Block:  Dim3{32 * matVecWarps, 1, 1},
		Args:   p.b, Params: p.offs,
	}
}

// quantMatVec sets out to x (n <= quantSplitRows rows) times the quantized
// w transposed as the CPU backend computes it: x quantized to 8 bits per
// group once (quant_x, into a scratch sized for quantSplitRows rows; not
// again for the next product of the same x while no launch or write came
// between), then matvec_q8 maxMatVecRows rows a launch, each reading the
// blocks once. Called with mu held.
func (b *Backend) quantMatVec(out, x Ptr, n int, w *weight) error {
	_, _, need := q8Layout(w.dt, quantSplitRows, w.cols)
	if err := b.growScratch(&b.qx, &b.qxBytes, need); err != nil {
		return fmt.Errorf("cuda: 8-bit activations of %d columns: %w", w.cols, err)
	}
	d, sums, _ := q8Layout(w.dt, n, w.cols)
	qs, dp, sp := b.qx, b.qx+Ptr(d), b.qx+Ptr(sums)
	g := q8Group(w.dt)
	key := qxKey{x: x, scratch: b.qx, n: n, cols: w.cols, group: g}
	// Products of one x (q, k and v; gate and up) share its
	// quantization while nothing has run or been written since.
	if b.qxOf != key || b.qxGen != b.gen || b.holding || len(b.writes) > 0 {
		b.enqueue(quantXLaunch(w.dt, qs, dp, sp, x, n, w.cols), false)
	}
	for i := 0; i < n; i += maxMatVecRows {
		k := min(maxMatVecRows, n-i)
		b.enqueue(quantMatVecLaunch(w.dt, out+Ptr(4*i*w.rows), qs+Ptr(i*w.cols), dp+Ptr(4*i*w.cols/g), sp+Ptr(4*i*w.cols/16), w.mem.ptr, k, w.rows, w.cols), false)
	}
	// matvec_q8 writes out alone, which MatMul's contract keeps apart
	// from x.
	b.qxOf, b.qxGen = key, b.gen
	return b.err
}

// qxKey names what the quantized-activation scratch holds: n rows of
// cols values at x, in groups of group, in the scratch at scratch.
type qxKey struct {
	x, scratch     Ptr
	n, cols, group int
}

// quantMatMulLaunch sets out (n rows of rows values) to x (n rows of
// cols) times the quantized w transposed in float32: matmul_q's tiles.
// Kernel: matmul_q_<t>(float *out, const float *x, const uint8 *w, int n, int rows, int cols).
func quantMatMulLaunch(dt tensor.DType, out, x, w Ptr, n, rows, cols int) Launch {
	l := matMulLaunch(tensor.F32, out, x, w, n, rows, cols)
	l.Kernel = "matmul_q_" + quantSuffix(dt)
	return l
}

// quantEmbedLaunch is embedLaunch for a quantized table.
// Kernel: embed_q_<t>(float *out, const uint8 *table, const int *ids, int n, int cols).
func quantEmbedLaunch(dt tensor.DType, out, table, ids Ptr, n, cols int) Launch {
	l := embedLaunch(tensor.F32, out, table, ids, n, cols)
	l.Kernel = "embed_q_" + quantSuffix(dt)
	return l
}

// quantSplitRows is the most rows MatMul multiplies by a quantized weight
// with matvec_q8, maxMatVecRows at a time: each launch reads the blocks
// once (0.56-1.06 bytes per weight), and up to 4 of them read less than
// the bf16 copy of the prefill path moves (about 4.6 bytes per weight), so
// a batched decode step of up to 32 sequences stays on the blocks.
const quantSplitRows = 4 * maxMatVecRows

// quantWideBytes bounds the bf16 scratch a quantized weight is widened
// into for prefill's 16-bit GEMMs: 256 MiB, every layer matrix of a 7B
// model (the largest, 18944 x 3584, is 136 MB) but not its output head,
// which prefill multiplies by one row per sequence.
const quantWideBytes = 256 << 20

// dequantLaunch widens rows x cols of the quantized w into out (bf16,
// row-major), a 32-value unit a thread.
// Kernel: dequant_q_<t>(uint16 *out, const uint8 *w, int cols, int units).
func dequantLaunch(dt tensor.DType, out, w Ptr, rows, cols int) Launch {
	positive("dequant_q", rows, cols)
	units := int32Of("dequant_q units", rows*cols/quantUnit)
	a := new(args).ptr(out).ptr(w).i32("cols", cols).i32("units", int(units))
	return Launch{
		Kernel: "dequant_q_" + quantSuffix(dt),
		Grid:   Dim3{u32("dequant_q blocks", ceilDiv(int(units), elemThreads)), 1, 1},
		Block:  Dim3{elemThreads, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// quantMatMul sets out to x (n > maxMatVecRows rows) times the quantized
// w transposed: through a bf16 copy in the scratch and the 16-bit GEMMs
// where they are on and the copy fits, else matmul_q. The copy costs a
// read of the blocks and a write and read of 2 bytes per weight, against
// 2n FLOPs per weight of the product. Called with mu held.
func (b *Backend) quantMatMul(out, x Ptr, n int, w *weight) error {
	bytes := 2 * w.rows * w.cols
	if b.g16.exact || bytes > quantWideBytes {
		b.enqueue(quantMatMulLaunch(w.dt, out, x, w.mem.ptr, n, w.rows, w.cols), false)
		return b.err
	}
	if err := b.growScratch(&b.qwide, &b.qwideBytes, bytes); err != nil {
		return fmt.Errorf("cuda: bf16 scratch for a %dx%d %v weight: %w", w.rows, w.cols, w.dt, err)
	}
	b.enqueue(dequantLaunch(w.dt, b.qwide, w.mem.ptr, w.rows, w.cols), false)
	return b.matMul16(out, x, n, &weight{mem: &memory{ptr: b.qwide, n: bytes / 4}, dt: tensor.BF16, rows: w.rows, cols: w.cols})
}
