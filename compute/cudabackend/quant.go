package cudabackend

import (
	"fmt"
	"strings"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Quantized weights (tensor.Formats: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)
// are uploaded in their stored blocks and widened inside the kernels of
// kernels/cuda/quant.cu, whose block layouts are generated from
// tensor/quant.go (qformats.h). Decode's few rows take matvec_q (one warp
// per output row, a lane per 32-value unit), up to quantSplitRows rows 8
// at a time. Prefill's many rows, with
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

// quantStage is the shared memory, in float32, matvec_q stages x in: 44
// KiB, under the 48 KiB a block may take without opting in.
const quantStage = 11264

// quantMatVecGeometry returns matvec_q's chunk of columns staged at a time
// (a multiple of the format's block, so that no unit straddles two
// chunks) and its blocks (matVecWarps output rows each).
func quantMatVecGeometry(dt tensor.DType, n, rows, cols int) (chunk int, blocks uint32) {
	if n < 1 || n > maxMatVecRows {
		panic(fmt.Sprintf("cuda: matvec_q of %d rows, want 1..%d", n, maxMatVecRows))
	}
	positive("matvec_q", rows, cols)
	int32Of("matvec_q input", n*cols)
	int32Of("matvec_q output", n*rows)
	bl := dt.Format().Block
	// A chunk of c columns takes n*(c + c/32) floats.
	chunk = max(bl, quantStage*quantUnit/(quantUnit+1)/n/bl*bl)
	chunk = min(chunk, cols)
	return chunk, u32("matvec_q blocks", ceilDiv(rows, matVecWarps))
}

// quantMatVecLaunch sets out (n rows of rows values) to x (n rows of cols)
// times the quantized w (rows x cols of dt) transposed; 1 <= n <=
// maxMatVecRows.
// Kernel: matvec_q_<t>(float *out, const float *x, const uint8 *w, int n, int rows, int cols, int chunk).
func quantMatVecLaunch(dt tensor.DType, out, x, w Ptr, n, rows, cols int) Launch {
	chunk, blocks := quantMatVecGeometry(dt, n, rows, cols)
	p := new(args).ptr(out).ptr(x).ptr(w).i32("n", n).i32("rows", rows).i32("cols", cols).i32("chunk", chunk)
	return Launch{
		Kernel: "matvec_q_" + quantSuffix(dt),
		Grid:   Dim3{blocks, 1, 1},
		Block:  Dim3{32 * matVecWarps, 1, 1},
		Shared: uint32(4 * n * (chunk + chunk/quantUnit)),
		Args:   p.b, Params: p.offs,
	}
}

// quantMatMulLaunch is quantMatVecLaunch for any n: matmul_q's tiles.
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
// with matvec_q, maxMatVecRows at a time: each launch reads the blocks
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
	if b.qwideBytes < bytes {
		if b.qwide != 0 {
			b.freeLater(b.qwide) // queued work may still read it
		}
		b.qwide, b.qwideBytes = 0, 0
		p, err := b.allocRaw(bytes)
		if err != nil {
			return fmt.Errorf("cuda: bf16 scratch for a %dx%d %v weight: %w", w.rows, w.cols, w.dt, err)
		}
		b.qwide, b.qwideBytes = p, bytes
	}
	b.enqueue(dequantLaunch(w.dt, b.qwide, w.mem.ptr, w.rows, w.cols), false)
	return b.matMul16(out, x, n, &weight{mem: &memory{ptr: b.qwide, n: bytes / 4}, dt: tensor.BF16, rows: w.rows, cols: w.cols})
}
