package cudabackend

// Launch descriptions: for every operation, the kernel (its extern "C" name
// in kernels/*.cu), the geometry and the packed arguments. The geometry is
// decided here, from the arguments alone, so the host side, the fake
// driver of the tests (which runs the CPU emulation of the same kernels)
// and a real device all launch exactly the same thing.
//
// Every integer argument is an int32 on the device. A value out of that
// range, or a shape the kernels do not handle, is a programming error of
// the caller and panics, like compute.Backend's shape mismatches.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

// Ptr is a device address.
type Ptr uint64

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Launch is one kernel launch: the kernel's extern "C" name, its geometry,
// its dynamic shared memory in bytes and its arguments. Args holds them in
// the layout of the kernel's .param space: in declaration order, each at an
// offset rounded up to its own size (4 for int32, uint32 and float32, 8
// for pointers), no padding after the last; Params holds each one's
// offset. The driver is handed a pointer to each (cuLaunchKernel's
// kernelParams), so it reads exactly the parameters the kernel declares.
type Launch struct {
	Kernel      string
	Grid, Block Dim3
	Shared      uint32
	Args        []byte
	Params      []uint32
}

// maxMatVecRows is the most input rows matVecLaunch takes: the decode
// kernel keeps one accumulator per input row in registers.
const maxMatVecRows = 8

// The geometry the kernels are written for.
const (
	elemThreads = 256 // element-wise kernels: threads per block
	rowThreads  = 256 // one block per row (embed, rmsnorm)
	matVecWarps = 8   // matvec: warps per block (1 to 8 output rows)
	// matvec: values of x (all input rows) staged in shared memory at a
	// time, 32 KiB: a chunk of columns of matVecStage/n, but at least
	// matVecChunk, so that a block stages x once for most weights and
	// meets at few barriers.
	matVecStage = 8192
	matVecChunk = 1024
	// matVecTargetBlocks is the fewest matvec blocks wanted before a row's
	// columns are split between warps: two per SM of the largest parts.
	// Every block stages x, so more blocks cost more of it: at 1056
	// (eight per SM) the H100 ran the 7B q_proj in 24.1 us against 13.5
	// and down_proj in 119.7 against 80.9 (docs/cuda.md).
	matVecTargetBlocks = 264
	matMulTile         = 64       // matmul: output tile (input rows x weight rows)
	attnThreads        = 256      // attention: 8 warps
	attnKeyTile        = 32       // attention: keys per shared-memory tile, one per lane
	attnMaxRows        = 32       // attention: query-head rows per block, at most 4 per warp
	attnSharedCap      = 48 << 10 // attention: dynamic shared memory, the most without opting in
	// attnTargetCTAs is how many blocks decode attention aims at by
	// splitting the context (flash-decoding): about two per SM on the
	// largest current parts, so short contexts still fill the device.
	attnTargetCTAs = 256
	// maxHeadDim is the widest head the attention kernels hold in
	// registers (8 values per lane).
	maxHeadDim = 256
)

// maxParams is the most arguments a kernel takes (attn_split_pc's 25),
// with room to spare: the C trampoline's array of parameter pointers.
const maxParams = 32

// args packs kernel arguments in the layout of a .param space (see
// Launch).
type args struct {
	b    []byte
	offs []uint32
}

// next aligns the buffer for a parameter of n bytes and records its offset.
func (a *args) next(n int) {
	for len(a.b)%n != 0 {
		a.b = append(a.b, 0)
	}
	a.offs = append(a.offs, uint32(len(a.b)))
	if len(a.offs) > maxParams {
		panic(fmt.Sprintf("cuda: more than %d kernel parameters", maxParams))
	}
}

// ptr appends a device pointer.
func (a *args) ptr(p Ptr) *args {
	a.next(8)
	a.b = binary.LittleEndian.AppendUint64(a.b, uint64(p))
	return a
}

// i32 appends an int, panicking outside the int32 range.
func (a *args) i32(what string, v int) *args {
	a.next(4)
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(int32Of(what, v)))
	return a
}

// f32 appends a float32.
func (a *args) f32(v float32) *args {
	a.next(4)
	a.b = binary.LittleEndian.AppendUint32(a.b, math.Float32bits(v))
	return a
}

func int32Of(what string, v int) int32 {
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %s = %d does not fit the kernels' int32", what, v))
	}
	return int32(v)
}

// positive panics unless every value is > 0 and within int32. Products
// the kernels index with int32 are checked by the callers.
func positive(what string, vs ...int) {
	for _, v := range vs {
		if v <= 0 {
			panic(fmt.Sprintf("cuda: %s: sizes %v must be positive", what, vs))
		}
		int32Of(what, v)
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func u32(what string, v int) uint32 {
	if v <= 0 || v > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %s = %d out of range for a launch", what, v))
	}
	return uint32(v)
}

// dtypeSuffix names a weight dtype in kernel names.
func dtypeSuffix(dt tensor.DType) string {
	switch dt {
	case tensor.F32:
		return "f32"
	case tensor.BF16:
		return "bf16"
	case tensor.F16:
		return "f16"
	}
	panic(fmt.Sprintf("cuda: no kernels for weights of %v", dt))
}

// elementwise returns a launch of one thread per element. The kernels
// compute a thread's index in int32, so the grid must not pass MaxInt32.
func elementwise(kernel string, n int, a *args) Launch {
	if n > math.MaxInt32-elemThreads {
		panic(fmt.Sprintf("cuda: %s of %d elements overflows the kernels' int32 indexes", kernel, n))
	}
	return Launch{
		Kernel: kernel,
		Grid:   Dim3{u32(kernel+" blocks", ceilDiv(n, elemThreads)), 1, 1},
		Block:  Dim3{elemThreads, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// embedLaunch sets row i of out (n rows of cols float32) to row ids[i] of
// table (rows of cols values of dt); ids are n int32 on the device, each
// already checked to be a row of the table.
// Kernel: embed_<dt>(float *out, const T *table, const int *ids, int n, int cols).
func embedLaunch(dt tensor.DType, out, table, ids Ptr, n, cols int) Launch {
	positive("embed", n, cols)
	k := "embed_" + dtypeSuffix(dt)
	a := new(args).ptr(out).ptr(table).ptr(ids).i32("n", n).i32("cols", cols)
	return Launch{Kernel: k, Grid: Dim3{u32("embed rows", n), 1, 1}, Block: Dim3{rowThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// rmsNormLaunch sets each of rows rows of out to the row of x divided by
// its root mean square plus eps, times w (cols float32). out may equal x.
// Kernel: rmsnorm(float *out, const float *x, const float *w, int rows, int cols, float eps).
func rmsNormLaunch(out, x, w Ptr, rows, cols int, eps float32) Launch {
	positive("rmsnorm", rows, cols)
	a := new(args).ptr(out).ptr(x).ptr(w).i32("rows", rows).i32("cols", cols).f32(eps)
	return Launch{Kernel: "rmsnorm", Grid: Dim3{u32("rmsnorm rows", rows), 1, 1}, Block: Dim3{rowThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// rmsNormAddLaunch adds to each of rows rows of acc the row of x
// normalised as rmsNormLaunch normalises it (weight w, cols float32).
// Kernel: rmsnorm_add(float *acc, const float *x, const float *w, int rows, int cols, float eps).
func rmsNormAddLaunch(acc, x, w Ptr, rows, cols int, eps float32) Launch {
	positive("rmsnorm_add", rows, cols)
	a := new(args).ptr(acc).ptr(x).ptr(w).i32("rows", rows).i32("cols", cols).f32(eps)
	return Launch{Kernel: "rmsnorm_add", Grid: Dim3{u32("rmsnorm_add rows", rows), 1, 1}, Block: Dim3{rowThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// addRowsLaunch adds bias (cols values) to each of rows rows of x.
// Kernel: add_rows(float *x, const float *bias, int rows, int cols).
func addRowsLaunch(x, bias Ptr, rows, cols int) Launch {
	positive("add_rows", rows, cols)
	int32Of("add_rows elements", rows*cols)
	return elementwise("add_rows", rows*cols, new(args).ptr(x).ptr(bias).i32("rows", rows).i32("cols", cols))
}

// addLaunch adds y to x, n values. Kernel: add(float *x, const float *y, int n).
func addLaunch(x, y Ptr, n int) Launch {
	positive("add", n)
	return elementwise("add", n, new(args).ptr(x).ptr(y).i32("n", n))
}

// siluMulLaunch sets gate to silu(gate) * up, n values.
// Kernel: silu_mul(float *gate, const float *up, int n).
func siluMulLaunch(gate, up Ptr, n int) Launch {
	positive("silu_mul", n)
	return elementwise("silu_mul", n, new(args).ptr(gate).ptr(up).i32("n", n))
}

// geluTanhMulLaunch sets gate to gelu_tanh(gate) * up, n values.
// Kernel: gelu_tanh_mul(float *gate, const float *up, int n).
func geluTanhMulLaunch(gate, up Ptr, n int) Launch {
	positive("gelu_tanh_mul", n)
	return elementwise("gelu_tanh_mul", n, new(args).ptr(gate).ptr(up).i32("n", n))
}

// scalarMulLaunch multiplies x by s, n values.
// Kernel: scalar_mul(float *x, float s, int n).
func scalarMulLaunch(x Ptr, s float32, n int) Launch {
	positive("scalar_mul", n)
	return elementwise("scalar_mul", n, new(args).ptr(x).f32(s).i32("n", n))
}

// softcapLaunch sets each of n values v of x to c*tanh(v/c).
// Kernel: softcap(float *x, float c, int n).
func softcapLaunch(x Ptr, c float32, n int) Launch {
	positive("softcap", n)
	if !(c > 0) {
		panic(fmt.Sprintf("cuda: softcap %g, want > 0", c))
	}
	return elementwise("softcap", n, new(args).ptr(x).f32(c).i32("n", n))
}

// ropeLaunch rotates the heads vectors of width d of each of rows rows of
// x by the angles of positions start.., cos and sin holding d/2 values per
// position (compute/reference's RoPE: rotate-half pairing).
// Kernel: rope(float *x, int rows, int heads, int d, int start, const float *cos, const float *sin).
func ropeLaunch(x Ptr, rows, heads, d, start int, cos, sin Ptr) Launch {
	positive("rope", rows, heads, d)
	if d%2 != 0 || start < 0 {
		panic(fmt.Sprintf("cuda: rope of width %d from position %d", d, start))
	}
	int32Of("rope positions", (start+rows)*d/2)
	int32Of("rope elements", rows*heads*d)
	a := new(args).ptr(x).i32("rows", rows).i32("heads", heads).i32("d", d).i32("start", start).ptr(cos).ptr(sin)
	return elementwise("rope", rows*heads*d/2, a)
}

// maxKVWrites is the most parts one kvWriteLaunch writes: its grid's y
// dimension.
const maxKVWrites = 65535

// kvWriteLaunch copies rows rows of d float32 values into rows row.. of n
// hot parts, all of one format: partF32, or partBF16 (rounded to nearest
// even as tensor.F32ToBF16 does). tab is a device table of n part addresses
// then n source addresses; part e's row r comes from its source at
// offset r*stride values. The table holds no row, so it stays the same
// while a layer's rows fill a block.
// Kernel: kv_write(const uint64 *tab, int n, int row, int rows, int d, int stride, int fmt).
func kvWriteLaunch(tab Ptr, n, row, rows, d, stride int, format int32) Launch {
	positive("kv_write", n, rows, d, stride)
	switch {
	case n > maxKVWrites:
		panic(fmt.Sprintf("cuda: kv_write of %d parts, at most %d", n, maxKVWrites))
	case row < 0 || format != partF32 && format != partBF16:
		panic(fmt.Sprintf("cuda: kv_write at row %d into parts of format %d", row, format))
	}
	int32Of("kv_write part values", (row+rows)*d)
	int32Of("kv_write source values", (rows-1)*stride+d)
	a := new(args).ptr(tab).i32("n", n).i32("row", row).i32("rows", rows).i32("d", d).i32("stride", stride).i32("format", int(format))
	return Launch{
		Kernel: "kv_write",
		Grid:   Dim3{u32("kv_write blocks", ceilDiv(rows*d, elemThreads)), uint32(n), 1},
		Block:  Dim3{elemThreads, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// kvWriteRunsLaunch is kvWriteLaunch for runs runs of writes of n parts
// and rows rows each, every run's table and row read from its slot of the
// step parameters (slots: runs consecutive 16-byte slots, the table's
// address then the row): one launch for a step's sequences, the same at
// every step.
// Kernel: kv_write_runs(const uint64 *slots, int n, int rows, int d, int stride, int fmt).
func kvWriteRunsLaunch(slots Ptr, runs, n, rows, d, stride int, format int32) Launch {
	positive("kv_write_runs", runs, n, rows, d, stride)
	switch {
	case n > maxKVWrites || runs > maxKVWrites:
		panic(fmt.Sprintf("cuda: kv_write_runs of %d runs of %d parts, at most %d", runs, n, maxKVWrites))
	case format != partF32 && format != partBF16:
		panic(fmt.Sprintf("cuda: kv_write_runs into parts of format %d", format))
	}
	int32Of("kv_write source values", (rows-1)*stride+d)
	a := new(args).ptr(slots).i32("n", n).i32("rows", rows).i32("d", d).i32("stride", stride).i32("format", int(format))
	return Launch{
		Kernel: "kv_write_runs",
		Grid:   Dim3{u32("kv_write blocks", ceilDiv(rows*d, elemThreads)), uint32(n), uint32(runs)},
		Block:  Dim3{elemThreads, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// copyRunsLaunch copies n runs of 32-bit words described by the 16-byte
// records at runs (each its destination, then its word count and the
// offset of its words from runs, in words; see stageCopies): a block a
// run.
// Kernel: copy_runs(const uint64 *runs, int n).
func copyRunsLaunch(runs Ptr, n int) Launch {
	positive("copy_runs", n)
	a := new(args).ptr(runs).i32("n", n)
	return Launch{Kernel: "copy_runs", Grid: Dim3{u32("copy_runs runs", n), 1, 1}, Block: Dim3{elemThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// matVecLaunch sets out (n rows of rows values) to x (n rows of cols)
// times w (rows x cols of dt) transposed, for decode's few rows: wpr warps
// share one output row and read it once, with 16-byte loads, for all n
// input rows, which are staged in shared memory unitGeometry's chunk of columns at a
// time. wpr is 1 for large matrices and grows (to 8) until there are
// about matVecTargetBlocks blocks, so a small matrix still has enough
// warps reading. 1 <= n <= maxMatVecRows.
// Kernel: matvec_<dt>(float *out, const float *x, const T *w, int n, int rows, int cols, int chunk, int wpr).
func matVecLaunch(dt tensor.DType, out, x, w Ptr, n, rows, cols int) Launch {
	chunk, wpr, blocks := matVecGeometry("matvec", n, rows, cols)
	p := new(args).ptr(out).ptr(x).ptr(w).i32("n", n).i32("rows", rows).i32("cols", cols).i32("chunk", chunk).i32("wpr", wpr)
	return matVecShaped("matvec_"+dtypeSuffix(dt), blocks, n, chunk, p)
}

// matMulLaunch sets out (n rows of rows values) to x (n rows of cols)
// times w (rows x cols of dt) transposed, any n: a shared-memory tiled
// GEMM of matMulTile x matMulTile output tiles, the fallback for prefill
// without cuBLAS.
// Kernel: matmul_<dt>(float *out, const float *x, const T *w, int n, int rows, int cols).
func matMulLaunch(dt tensor.DType, out, x, w Ptr, n, rows, cols int) Launch {
	positive("matmul", n, rows, cols)
	int32Of("matmul input", n*cols)
	int32Of("matmul output", n*rows)
	k := "matmul_" + dtypeSuffix(dt)
	a := new(args).ptr(out).ptr(x).ptr(w).i32("n", n).i32("rows", rows).i32("cols", cols)
	return Launch{
		Kernel: k,
		Grid:   Dim3{u32("matmul column tiles", ceilDiv(rows, matMulTile)), u32("matmul row tiles", ceilDiv(n, matMulTile)), 1},
		Block:  Dim3{256, 1, 1},
		Args:   a.b, Params: a.offs,
	}
}

// Formats of the KV parts attention reads: hot parts hold BlockSize x
// HeadDim values row-major (partF32, partBF16: kv_write's formats);
// encoded parts hold exactly the bytes the codec's Encode produced for
// BlockSize x HeadDim values (header included), and their format is
// partEncoded plus the block format's id (codec.FormatID), whose layout
// the kernels take from formats.h. The int codecs are those of codec.Int4
// without rotation and with a power-of-two group (32 by default): per
// token ("int4", "int2") or per channel ("int4-k", "int2-k", KIVI's layout
// for keys), which the kernel reads from the block's header.
const (
	partF32     = 0  // float32 hot part
	partBF16    = 1  // bf16 hot part
	partEncoded = 16 // plus a codec.FormatID: an encoded part
	partInt8    = partEncoded + int32(codec.FormatInt8)
	partInt4    = partEncoded + int32(codec.FormatInt4) // int4 and int2, per token or per channel
	// partKakeya is a block of the kakeya format: attention reads it
	// with the codec's settings, kakeyaParams, given as attnArgs.KParams
	// or VParams.
	partKakeya = partEncoded + int32(codec.FormatKakeya)
	// partKakeyaPC is a block of the kakeya_pc format (codec.KakeyaPC
	// without entropy coding): attention reads it with its codec's
	// calibrated basis, mean and allocation, pcParams, whose device
	// address is the part's entry of attnArgs.KPTab or VPTab (keys have a
	// codec per layer and KV head).
	partKakeyaPC = partEncoded + int32(codec.FormatKakeyaPC)
	// partKakeyaPCEC is a block of the kakeya_pc_ec format (codec.KakeyaPC
	// with entropy coding: kakeya-pc ec=true, kvtc), read like
	// partKakeyaPC with its codec's pcecParams, which also point at the
	// rANS tables of its quantizer family (ransTables).
	partKakeyaPCEC = partEncoded + int32(codec.FormatKakeyaPCEC)
)

// A key part of any encoded format may hold the bytes of a whitened codec
// (codec.Whitened, e.g. codec.Preconditioned): the inner codec's encoding
// of the keys whitened by the head's factor L (y = k L). Its attnArgs.LTab entry holds the device address of
// the factor's inverse (codec.Whitened.InverseFactor, in unwhitenLayout's
// order), and the kernel multiplies each decoded row by it (k = y Linv)
// before RoPE. That is d(d+1)/2 multiply-adds per key row and block of
// attn_split (at d = 128, about 8K, against d per query-head row to score
// it), and the factor's lower triangle read through the cache once per
// tile of 32 keys: the whitening cannot move to the queries, since RoPE,
// applied after it, differs from key to key.

// attnSplitFormats marks a Fmts entry whose key and value parts have
// different formats (see attnFormat).
const attnSplitFormats = 1 << 16

// attnFormat returns the Fmts entry of a block whose keys are stored in
// format k and values in format v: the format itself when they agree (so
// an entry may always be a plain part format), else k | v<<8 |
// attnSplitFormats.
func attnFormat(k, v int32) int32 {
	if k == v {
		return k
	}
	return k | v<<8 | attnSplitFormats
}

// encodedFormat reports the part format of blocks encoded by dec for
// parts of head dim d, and false when attention cannot read that codec's
// bytes (the cache then keeps such blocks hot, holding their decoded
// values). It dispatches on the block format the codec declares
// (codec.Described) and its settings, not on the codec's Go type: the
// kernels read the built-in formats kakeya, int4 (no rotation, a
// power-of-two group) and int8, from the layouts of formats.h. A Kakeya
// block is read with its codec's settings, which its bytes lack: a store
// that keeps such blocks encoded also holds the layer's kakeyaParams on
// the device for attnArgs.KParams and VParams. A whitened codec
// (codec.Whitened, e.g. codec.Preconditioned) is read as its inner
// codec's format (see preconditioner), the kernel un-whitening the keys
// with the LTab entry.
func encodedFormat(dec compute.Decoder, d int) (int32, bool) {
	if w, ok := dec.(codec.Whitened); ok {
		inner, linv := preconditioner(w, d)
		if linv == nil {
			return 0, false
		}
		return encodedFormat(inner, d)
	}
	c, f, ok := builtinFormat(dec)
	if !ok {
		return 0, false
	}
	switch f.ID {
	case codec.FormatKakeya:
		return partKakeya, d <= maxHeadDim
	case codec.FormatInt4:
		// Any group of a power of two (the kernel reads it from the
		// block's header), no rotation.
		st := c.Settings()
		if st.Rotated || st.Group&(st.Group-1) != 0 || st.Bits != 2 && st.Bits != 4 {
			return 0, false
		}
		return partInt4, true
	case codec.FormatInt8:
		return partInt8, true
	case codec.FormatKakeyaPC:
		pc := c.Settings().PC
		return partKakeyaPC, pc != nil && len(pc.Mean) == d && d <= maxHeadDim
	case codec.FormatKakeyaPCEC:
		pc := c.Settings().PC
		return partKakeyaPCEC, pc != nil && pc.Entropy && len(pc.Mean) == d && d <= maxHeadDim
	}
	return 0, false
}

// builtinFormat returns dec as a codec.Described and its format, and
// false unless that format is one of package codec's, which formats.h
// describes: a format of another package may reuse an id, but no kernel
// reads it.
func builtinFormat(dec compute.Decoder) (codec.Described, *codec.Format, bool) {
	c, ok := dec.(codec.Described)
	if !ok {
		return nil, nil, false
	}
	f := c.Format()
	if b, ok := codec.BuiltinFormat(f.ID); !ok || b != f {
		return nil, nil, false
	}
	return c, f, true
}

// preconditioner returns the codec w wraps and the inverse factor its
// Decode applies, or a nil factor when the kernels cannot undo w: a
// factor not of d x d values or d past maxHeadDim, or an inner codec that
// is itself whitened (the kernel applies one factor).
func preconditioner(w codec.Whitened, d int) (compute.Decoder, []float32) {
	inner, linv := w.Unwrap(), w.InverseFactor()
	if _, nested := inner.(codec.Whitened); nested || inner == nil || d > maxHeadDim || len(linv) != d*d {
		return nil, nil
	}
	return inner, linv
}

// attnWarps is the number of warps of an attention block.
const attnWarps = attnThreads / 32

// unwhitenLayout returns the inverse factor linv (d x d, row-major, lower
// triangular) in the order the attention kernel reads it: lane j of warp
// w computes columns w, w+8, ... of key row j, so for each row i and warp
// w the M = ceil(d/8) values linv[i][w+8m] are stored together, padded
// with zeros to a multiple of 4 values (each 4 one 16-byte load), and so
// are the values past the diagonal, which the kernel does not read.
func unwhitenLayout(linv []float32, d int) []float32 {
	m4 := (ceilDiv(d, attnWarps) + 3) &^ 3
	out := make([]float32, d*attnWarps*m4)
	for i := range d {
		for w := range attnWarps {
			for m := range m4 {
				if c := w + attnWarps*m; c <= i {
					out[(i*attnWarps+w)*m4+m] = linv[i*d+c]
				}
			}
		}
	}
	return out
}

// kakeyaParamsLen is the size of kakeyaParams' block: the code width and
// 3 words of padding, 16 codebook levels and maxHeadDim rotation signs, all
// 4-byte words.
const kakeyaParamsLen = 4 * (4 + 16 + maxHeadDim)

// kakeyaParams returns the device form of what attention needs to read
// blocks of dec, a codec of the kakeya format, beyond their bytes: the
// residual's code width, its codebook levels and the randomized Hadamard
// rotation's signs (the codec's Settings). It reports false for any other
// decoder and for head dims past maxHeadDim.
func kakeyaParams(dec compute.Decoder, d int) ([]byte, bool) {
	c, f, ok := builtinFormat(dec)
	if !ok || f.ID != codec.FormatKakeya || d > maxHeadDim {
		return nil, false
	}
	st := c.Settings()
	if len(st.Levels) > 16 {
		return nil, false
	}
	b := make([]byte, kakeyaParamsLen)
	binary.LittleEndian.PutUint32(b, uint32(st.Bits))
	for i, l := range st.Levels {
		binary.LittleEndian.PutUint32(b[16+4*i:], math.Float32bits(l))
	}
	for i, sign := range st.Signs(maxHeadDim) {
		binary.LittleEndian.PutUint32(b[80+4*i:], math.Float32bits(sign))
	}
	return b, true
}

// pcParams returns the device form of what the kernels need to read
// (attention) and write (enc_pc) kakeya_pc blocks of n rows of d values
// encoded by dec beyond their bytes (codec.PCSettings), all 4-byte words:
//
//	[0..7]         M (stored components), C (coded), d, n, the blocks'
//	               tag, code bits per row, ||mean|| (float32), the
//	               header's parameter byte, then the codes' bytes (the
//	               format's code_bytes)
//	[8+4k..11+4k]  stored component k: code width (0: mean only), first
//	               code bit and bits between rows' codes (CodeBit), and
//	               its index among the coded components (-1 if none)
//	[8+4M..]       the quantizers' levels, width b's 2^b at 2^b - 2
//	               (pcLevelWords of them), then their bounds, width b's
//	               2^b - 1 at 2^b - 2 (pcLevelWords)
//	[..+8]         the scale steps (pcStepWords, unused ones 0)
//	[..+d]         the calibration mean, float32
//	[..+M*d]       the stored components' basis rows, float32
//	[..]           where d is a multiple of 8, the same basis in the
//	               tensor-core product's fragment order (pcBasisFrags),
//	               from an even word (a zero word before it if needed)
//
// It reports false for any other decoder, for head dims past maxHeadDim
// and for settings that do not fit these words.
func pcParams(dec compute.Decoder, n, d int) ([]byte, bool) {
	c, f, ok := builtinFormat(dec)
	if !ok || f.ID != codec.FormatKakeyaPC || d > maxHeadDim {
		return nil, false
	}
	pc := c.Settings().PC
	if pc == nil || len(pc.Mean) != d || len(pc.Basis) != len(pc.Stored)*d {
		return nil, false
	}
	m := len(pc.Stored)
	b := make([]byte, 0, 4*(8+4*m+2*pcLevelWords+pcStepWords+d+m*d))
	put := func(ws ...uint32) {
		for _, w := range ws {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
	}
	if len(pc.ScaleSteps) > pcStepWords {
		return nil, false
	}
	rowBits := 0
	for _, w := range pc.Coded() {
		rowBits += w
	}
	var mn float64
	for _, v := range pc.Mean {
		mn += float64(v) * float64(v)
	}
	put(uint32(m), uint32(len(pc.Coded())), uint32(d), uint32(n), uint32(pc.Tag), uint32(rowBits),
		math.Float32bits(float32(math.Sqrt(mn))), uint32(pc.Param)|uint32(pc.CodeBytes(n))<<8)
	t := 0
	for _, w := range pc.Widths {
		if w < 0 || 1<<w-2+1<<w > pcLevelWords {
			return nil, false // no room for its levels
		}
		if w == 0 {
			put(0, 0, 0, math.MaxUint32) // -1: not coded
			continue
		}
		base := pc.CodeBit(t, 0, n)
		stride := 0
		if n > 1 {
			stride = pc.CodeBit(t, 1, n) - base
		}
		put(uint32(w), uint32(base), uint32(stride), uint32(t))
		t++
	}
	var lv, bd [pcLevelWords]uint32
	for w, l := range pc.Levels {
		if w == 0 || 1<<w-2+1<<w > pcLevelWords {
			continue
		}
		if len(l) != 1<<w || len(pc.Bounds[w]) != 1<<w-1 {
			return nil, false
		}
		for i, v := range l {
			lv[1<<w-2+i] = math.Float32bits(v)
		}
		for i, v := range pc.Bounds[w] {
			bd[1<<w-2+i] = math.Float32bits(v)
		}
	}
	put(lv[:]...)
	put(bd[:]...)
	var st [pcStepWords]uint32
	for i, v := range pc.ScaleSteps {
		st[i] = math.Float32bits(v)
	}
	put(st[:]...)
	for _, v := range pc.Mean {
		put(math.Float32bits(v))
	}
	for _, v := range pc.Basis {
		put(math.Float32bits(v))
	}
	return pcBasisFrags(b, pc.Basis, m, d), true
}

// pcBasisFrags appends to b (4-byte words) the basis (m rows of d,
// row-major) in the order kk_pc_mix_tc (kernels/cuda/attention.cu) loads
// it, where d is a multiple of 8, after a zero word if b holds an odd
// number of words: for each group of 64 rows q, k-step s = 0..7 of the
// group, column tile n = 0..d/8-1 and lane l (g = l/4, t = l%4), the two
// values the lane's B fragment of mma m16n8k8 holds, B[q+s+8t][8n+g] and
// B[q+s+8t+32][8n+g] (0 past m): one 8-byte load a lane, 256 bytes a
// warp, where the row-major basis takes four 32-byte pieces of four
// rows for each of the two.
func pcBasisFrags(b []byte, basis []float32, m, d int) []byte {
	if d%8 != 0 || m == 0 {
		return b
	}
	if len(b)/4%2 == 1 {
		b = binary.LittleEndian.AppendUint32(b, 0)
	}
	at := func(k, c int) uint32 {
		if k >= m {
			return 0
		}
		return math.Float32bits(basis[k*d+c])
	}
	for q := 0; q < m; q += 64 {
		for st := range 8 {
			for n := range d / 8 {
				for l := range 32 {
					k, c := q+st+8*(l%4), 8*n+l/4
					b = binary.LittleEndian.AppendUint32(b, at(k, c))
					b = binary.LittleEndian.AppendUint32(b, at(k+32, c))
				}
			}
		}
	}
	return b
}

// ransTables returns the device form of the rANS tables of an entropy-
// coded kakeya-pc codec's quantizer family, which every codec of the
// family shares: for each option b = 1, 2, ... stream layout 1's slot
// table (codec.PCSettings.RANS: a byte per slot, the slot's symbol), then
// a word per symbol, its frequency | its first slot << 16; then for each
// option layout 2's packed entries as the codec holds them
// (codec.PCSettings.RANS2: a word per slot); then for each option a word
// per symbol of layout 2's tables, its frequency | its first slot << 16,
// read from the packed entries (what enc_pcec codes layout 2 with); and
// off[b], off2[b], off3[b], the byte offsets of option b's. It reports
// false for tables that do not fit those words (frequencies and starts
// of 16 bits, symbols of 8), layout 2 tables of another size than the
// format's, or a layout 2 of other than 32 lanes (attention_ec.cu decodes
// it with one warp).
func ransTables(pc *codec.PCSettings) (b []byte, off, off2, off3 []int, ok bool) {
	off, off2, off3 = make([]int, len(pc.RANS)), make([]int, len(pc.RANS)), make([]int, len(pc.RANS))
	for o, t := range pc.RANS {
		if o == 0 {
			continue
		}
		if len(t.Slot) > 1<<16 || len(t.Slot)%4 != 0 || len(t.Freq) != len(t.Start) || len(t.Freq) > 256 {
			return nil, nil, nil, nil, false
		}
		off[o] = len(b)
		b = append(b, t.Slot...)
		for s, f := range t.Freq {
			b = binary.LittleEndian.AppendUint32(b, f|t.Start[s]<<16)
		}
	}
	if len(pc.RANS2) != len(pc.RANS)<<rans2ScaleBits || rans2Lanes != 32 { // a lane per thread of a warp
		return nil, nil, nil, nil, false
	}
	for o := 1; o < len(pc.RANS); o++ {
		off2[o] = len(b)
		for _, e := range pc.RANS2[o<<rans2ScaleBits : (o+1)<<rans2ScaleBits] {
			b = binary.LittleEndian.AppendUint32(b, e)
		}
	}
	mask := uint32(1)<<rans2ScaleBits - 1
	for o := 1; o < len(pc.RANS); o++ {
		off3[o] = len(b)
		sym := make([]uint32, len(pc.RANS[o].Freq))
		for x, e := range pc.RANS2[o<<rans2ScaleBits : (o+1)<<rans2ScaleBits] {
			s := int(e & 0xff)
			if s >= len(sym) {
				return nil, nil, nil, nil, false
			}
			sym[s] = e>>8&mask | (uint32(x)-e>>20)<<16
		}
		for _, w := range sym {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
	}
	return b, off, off2, off3, true
}

// rans2ScaleBits and rans2Lanes are stream layout 2's frequency bits and
// lanes, from the format's description (formats.h's
// kk_kakeya_pc_ec_scale_bits2 and _lanes2 for the kernel).
var rans2ScaleBits, rans2Lanes = pcecQuantity("scale_bits2"), pcecQuantity("lanes2")

// pcecQuantity returns the kakeya_pc_ec format's derived quantity name, a
// constant.
func pcecQuantity(name string) int {
	f, _ := codec.BuiltinFormat(codec.FormatKakeyaPCEC)
	for _, q := range f.Derived {
		if q.Name == name {
			return q.Value.Eval(&codec.Vars{})
		}
	}
	panic("cuda: kakeya_pc_ec describes no " + name)
}

// pcecParams returns the device form of what attention needs to read
// kakeya_pc_ec blocks of n rows of d values encoded by dec beyond their
// bytes, and what enc_pcec needs to write them, with the family's
// ransTables at tabs (off, off2 and off3 their offsets), all 4-byte words
// (kernels/cuda/attention_ec.cu and encode.cu read them):
//
//	[0..7]         M (stored components), C (coded), d, n, the blocks'
//	               tag, the options' count, the level words L, the
//	               header's parameter byte
//	[8..9]         tabs, [10] E, the encoder's words' first, [11] 0
//	[12+4t..15+4t] coded component t: its stored index, the word of its
//	               option's first level (from 12+4C), and the byte
//	               offsets from tabs of its option's layout-1 tables
//	               (off) and layout-2 entries (off2)
//	[12+4C..+L]    every option's levels, float32, option after option
//	[..+d]         the calibration mean, float32
//	[..+M*d]       the stored components' basis rows, float32
//	[..]           where d is a multiple of 8, the same basis in the
//	               tensor-core product's fragment order (pcBasisFrags)
//	[E..E+3]       the scale steps S, the scale rule (1: entropy-
//	               constrained, codec.PCSettings.Constrained; 0: least
//	               error), ||mean|| (float32), the slot's bytes
//	               (pcecSlot: the most a block may take)
//	[E+4+8t..]     coded component t: the word of its option's bounds
//	               (from E), their count, the word of its option's code
//	               costs (from E, CodeCost), its option's
//	               symbols, its expected bits per symbol (float64, two
//	               words), and the byte offsets from tabs of its
//	               option's symbol words (freq | start << 16) of layout
//	               1 and of layout 2 (off3)
//	[E+4+8C..+S]   the scale steps, float32
//	[..]           every option's bounds, then every option's code
//	               costs, float32, option after option
//
// It reports false for any other decoder and for head dims past
// maxHeadDim.
func pcecParams(dec compute.Decoder, n, d int, tabs Ptr, off, off2, off3 []int) ([]byte, bool) {
	c, f, ok := builtinFormat(dec)
	if !ok || f.ID != codec.FormatKakeyaPCEC || d > maxHeadDim {
		return nil, false
	}
	pc := c.Settings().PC
	if pc == nil || !pc.Entropy || len(pc.Mean) != d || len(pc.Basis) != len(pc.Stored)*d || len(off) != len(pc.Levels) ||
		len(off2) != len(off) || len(off3) != len(off) || len(pc.Bounds) != len(pc.Levels) {
		return nil, false
	}
	rule := pc.Constrained
	if len(pc.CodeCost) != len(pc.Levels) || len(pc.CodeBits) != len(pc.Levels) {
		return nil, false
	}
	lvOff := make([]int, len(pc.Levels))
	words := 0
	for o, l := range pc.Levels {
		lvOff[o] = words
		words += len(l)
	}
	var coded [][2]int // stored index, option
	for k, w := range pc.Widths {
		if w > 0 {
			if w >= len(pc.Levels) || len(pc.Levels[w]) != len(pc.RANS[w].Freq) || len(pc.Bounds[w]) != len(pc.Levels[w])-1 ||
				len(pc.CodeCost[w]) != len(pc.Levels[w]) {
				return nil, false
			}
			coded = append(coded, [2]int{k, w})
		}
	}
	m := len(pc.Stored)
	b := make([]byte, 0, 4*(12+4*len(coded)+words+d+m*d))
	put := func(ws ...uint32) {
		for _, w := range ws {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
	}
	put(uint32(m), uint32(len(coded)), uint32(d), uint32(n), uint32(pc.Tag), uint32(len(pc.Levels)-1), uint32(words), uint32(pc.Param))
	put(uint32(tabs), uint32(uint64(tabs)>>32), 0, 0)
	for _, e := range coded {
		put(uint32(e[0]), uint32(lvOff[e[1]]), uint32(off[e[1]]), uint32(off2[e[1]]))
	}
	for _, l := range pc.Levels {
		for _, v := range l {
			put(math.Float32bits(v))
		}
	}
	for _, v := range pc.Mean {
		put(math.Float32bits(v))
	}
	for _, v := range pc.Basis {
		put(math.Float32bits(v))
	}
	b = pcBasisFrags(b, pc.Basis, m, d)
	// The encoder's words.
	e := len(b) / 4
	binary.LittleEndian.PutUint32(b[40:], uint32(e))
	var mn float64
	for _, v := range pc.Mean {
		mn += float64(v) * float64(v)
	}
	steps := len(pc.ScaleSteps)
	put(uint32(steps), uint32(b2i(rule)), math.Float32bits(float32(math.Sqrt(mn))), uint32(pcecSlot(pc, n, d)))
	bdOff, costOff := make([]int, len(pc.Levels)), make([]int, len(pc.Levels))
	at := 4 + 8*len(coded) + steps
	for o := range pc.Levels {
		bdOff[o] = at
		at += len(pc.Bounds[o])
	}
	for o := range pc.Levels {
		costOff[o] = at
		at += len(pc.CodeCost[o])
	}
	for _, c := range coded {
		o := c[1]
		bits := math.Float64bits(pc.CodeBits[o])
		put(uint32(bdOff[o]), uint32(len(pc.Bounds[o])), uint32(costOff[o]), uint32(len(pc.Levels[o])),
			uint32(bits), uint32(bits>>32), uint32(off[o]+len(pc.RANS[o].Slot)), uint32(off3[o]))
	}
	for _, v := range pc.ScaleSteps {
		put(math.Float32bits(v))
	}
	for _, bd := range pc.Bounds {
		for _, v := range bd {
			put(math.Float32bits(v))
		}
	}
	for _, cs := range pc.CodeCost {
		for _, v := range cs {
			put(math.Float32bits(v))
		}
	}
	return b, true
}

// pcecLanes returns the rANS lanes of the stream layout param (1 or 2).
func pcecLanes(param byte) int {
	if param == 2 {
		return rans2Lanes
	}
	return pcecQuantity("lanes")
}

// pcecSlot returns the bytes of a slot of a kakeya_pc_ec block of n rows
// of d values that enc_pcec writes: its fields (header, counts, the means
// the lanes do not carry, the scales), the lanes' final states (4 bytes
// each, and layout 2's mask), the codes' expected length (n times each
// coded component's option's expected bits, codec.PCSettings.CodeBits:
// what the encoder's budget charges them, whatever the allocation's
// block) and a sixteenth of that plus 16 bytes for blocks longer than
// expected, rounded up to pcecAlign. The host's blocks of Gaussian
// rows fit it with 26 bytes to spare or more before the rounding
// (kakeya-pc and kvtc, 300 blocks each at head dims 64 and 128, blocks
// of 16 and 64 rows, codecs allocated for 16 or 64, rates 1 to 4, both
// layouts; kvtc, whose scales do not look at lengths, is the closer):
// 7B's 64 x 128 blocks at rate 2.5 take 2,816-byte slots (5.8x below bf16;
// their blocks ≈ 2,590 bytes). A stream
// longer than its slot is coded again under a smaller budget (enc_pcec).
func pcecSlot(pc *codec.PCSettings, n, d int) int {
	lanes := pcecLanes(pc.Param)
	m := len(pc.Stored)
	h := 0
	if pc.Param == 2 {
		h = min(m, lanes)
	}
	var bits float64
	c := 0
	for _, w := range pc.Widths {
		if w > 0 {
			c++
			if w < len(pc.CodeBits) {
				bits += pc.CodeBits[w]
			}
		}
	}
	codes := int(math.Ceil(float64(n) * bits / 8))
	return roundUp(24+2*(m-h)+2*c+4+4*lanes+codes+codes/16+16, pcecAlign)
}

// pcecAlign is what enc_pcec's slots are rounded up to: the codecs of a
// cache, each allocating its bits a little differently, then share a few
// size classes (a slab each) rather than one per 16 bytes.
const pcecAlign = 64

// pcLevelWords is the room pcParams gives the quantizers' levels (and
// their bounds): widths 1..6, 2^b levels each at 2^b - 2; pcStepWords
// the room for the scale steps.
const (
	pcLevelWords = 128
	pcStepWords  = 8
)

// argMaxLaunch sets out (2*rows int32) to each row's arg max and the
// index of its first non-finite value, x being rows rows of cols float32.
// Kernel: argmax(int *out, const float *x, int cols).
func argMaxLaunch(out, x Ptr, rows, cols int) Launch {
	positive("argmax", rows, cols)
	int32Of("argmax input", rows*cols)
	p := new(args).ptr(out).ptr(x).i32("cols", cols)
	return Launch{Kernel: "argmax", Grid: Dim3{u32("argmax rows", rows), 1, 1}, Block: Dim3{256, 1, 1}, Args: p.b, Params: p.offs}
}

// drawLaunch sets out (2*rows int32) to each row's drawn token and the
// index of its first non-finite value, x being rows rows of cols float32
// and params rows 32-byte draw parameters (compute.DrawRow).
// Kernel: draw_rows(int *out, float *x, const kk_draw_row *rows, int cols).
func drawLaunch(out, x, params Ptr, rows, cols int) Launch {
	positive("draw_rows", rows, cols)
	int32Of("draw_rows input", rows*cols)
	p := new(args).ptr(out).ptr(x).ptr(params).i32("cols", cols)
	return Launch{Kernel: "draw_rows", Grid: Dim3{u32("draw_rows rows", rows), 1, 1}, Block: Dim3{256, 1, 1}, Args: p.b, Params: p.offs}
}

// drawSplitLaunches are Draw's pair for rows spread over parts blocks of
// ps tokens each (see drawSplit), kmax the largest top-k below cols the
// rows may have: draw_split_max, then draw_split, with scratch
// splitStride(parts, kmax) bytes a row and counts two int32 a row, 0
// before and after the pair.
// Kernels: draw_split_max(const float *x, int cols, int ps, char *scratch, int stride, int *counts),
// draw_split(int *out, float *x, const kk_draw_row *rows, int cols, int ps, char *scratch, int stride, int *counts).
func drawSplitLaunches(out, x, params, scratch, counts Ptr, rows, cols, parts, ps, kmax int) []Launch {
	positive("draw_split", rows, cols, parts, ps)
	int32Of("draw_split input", rows*cols)
	stride := splitStride(parts, kmax)
	grid := Dim3{u32("draw_split parts", parts), u32("draw_split rows", rows), 1}
	m := new(args).ptr(x).i32("cols", cols).i32("part", ps).ptr(scratch).i32("stride", stride).ptr(counts)
	d := new(args).ptr(out).ptr(x).ptr(params).i32("cols", cols).i32("part", ps).ptr(scratch).i32("stride", stride).ptr(counts)
	return []Launch{
		{Kernel: "draw_split_max", Grid: grid, Block: Dim3{256, 1, 1}, Args: m.b, Params: m.offs},
		{Kernel: "draw_split", Grid: grid, Block: Dim3{256, 1, 1}, Args: d.b, Params: d.offs},
	}
}

// splitStride is the bytes of draw_split's scratch per row of parts
// parts and a top-k of at most kmax: a 32-byte kk_split_head, a 24-byte
// kk_split_part per part, then each part's top-k candidates and all of
// them gathered (a key and a token each).
func splitStride(parts, kmax int) int { return 32 + 24*parts + 16*parts*kmax }

// attnArgs are one attention call over a paged KV layer.
//
// KTab and VTab are device arrays of uint64 part addresses indexed
// [block*KVHeads+kvHead], Fmts a device array of int32 part formats with
// the same index (partF32..., one format for both parts, or attnFormat's
// pair when keys and values differ), Blocks the number of blocks the tables
// hold (at least ceil((Start+N)/BlockSize)). Keys are stored before RoPE
// and rotated in the kernel with Cos and Sin (HeadDim/2 values per
// position, reaching position Start+N-1). Q and Out are N rows of
// Heads*HeadDim float32; Scratch is attentionScratch(a) bytes of device
// memory (0 bytes, any pointer, when it says 0). KParams and VParams are
// device copies of kakeyaParams for the layer's key and value codecs when
// some of its parts are partKakeya (0 otherwise). LTab, indexed like
// KTab, holds the device addresses of the inverse factors of the keys of
// preconditioned parts (0 for other parts), or is 0 when no part is: the
// call then launches the kernel that does not read it. KPTab and VPTab,
// indexed like KTab, hold the device addresses of the pcParams of the
// partKakeyaPC key and value parts (pcecParams of partKakeyaPCEC's; 0
// for other parts), or are both 0
// when no part is: only attn_split_pc reads them. Step, when set, is
// the device address of an int32 the kernel reads Start from (a slot of
// the backend's step parameters): the launch then carries neither Start
// nor Blocks, and is the same at every position of its shape class (see
// plan).
type attnArgs struct {
	Out, Q                                     Ptr
	N, Start                                   int
	Heads, KVHeads, HeadDim, Window, BlockSize int
	KTab, VTab, Fmts                           Ptr
	Blocks                                     int
	Cos, Sin                                   Ptr
	Scratch                                    Ptr
	KParams, VParams                           Ptr
	LTab                                       Ptr
	KPTab, VPTab                               Ptr
	Step                                       Ptr
	// Scale multiplies the scores q·k (0: 1/sqrt(HeadDim), computed by
	// the kernel); Softcap, when not 0, bounds each scaled score s to
	// Softcap*tanh(s/Softcap) (compute.AttentionParams').
	Scale, Softcap float32
}

// attnPlan is the geometry of one attention call.
type attnPlan struct {
	rows   int // query-head rows per block (a multiple of 8)
	tiles  int // row tiles per KV head
	cap    int // KV blocks the splits cover: the context's shape class
	splits int // context splits
	per    int // keys per split: whole key tiles, or whole KV blocks
	shared int // dynamic shared bytes of the split kernel
}

// plan checks a and decides the geometry. Every query-head row of a KV
// head's group (query i, head g*group+j is row i*group+j) is one row of a
// tile of p.rows rows; each block of the split kernel takes one tile, one
// KV head and one range of p.per keys, so a KV head's keys and values
// are read once for all the heads sharing them. The context is split
// (flash-decoding) until there are about attnTargetCTAs blocks, in units
// of a key tile (32 keys) where KV blocks hold whole tiles, else of a KV
// block: at the 7B shape and context 512 (64-token blocks), 16 splits of
// 32 keys, 64 blocks of the kernel, each one tile deep.
//
// The splits cover the power of two of KV blocks at or above the
// context's (its shape class), not the context itself: the geometry, and
// so a decode step's launches, stay the same while the context grows
// within its class, and a captured step graph replays them; the splits
// past the context see no key and leave empty states that attn_combine
// skips. Every path plans so, so that a graph's results are bit for bit
// those of launching its kernels one by one.
func (a attnArgs) plan() attnPlan {
	positive("attention", a.N, a.Heads, a.KVHeads, a.HeadDim, a.BlockSize, a.Blocks)
	switch {
	case a.Heads%a.KVHeads != 0:
		panic(fmt.Sprintf("cuda: attention: %d heads do not share %d KV heads", a.Heads, a.KVHeads))
	case a.HeadDim%2 != 0 || a.HeadDim > maxHeadDim:
		panic(fmt.Sprintf("cuda: attention: head dim %d must be even and at most %d", a.HeadDim, maxHeadDim))
	case a.Start < 0 || a.Window < 0:
		panic(fmt.Sprintf("cuda: attention from position %d with window %d", a.Start, a.Window))
	case a.Blocks*a.BlockSize < a.Start+a.N:
		panic(fmt.Sprintf("cuda: attention: %d blocks of %d tokens do not hold position %d", a.Blocks, a.BlockSize, a.Start+a.N-1))
	}
	int32Of("attention table", a.Blocks*a.KVHeads)
	int32Of("attention rows", a.N*a.Heads*(a.HeadDim+2))
	int32Of("attention positions", (a.Start+a.N)*a.HeadDim/2)
	d := a.HeadDim
	group := a.Heads / a.KVHeads
	// A tile row holds NextPow2(d) values plus one (the odd stride that
	// spreads lanes over banks): a Kakeya row is rotated at that width.
	tileBytes := 4 * attnKeyTile * (codec.NextPow2(d) + 1)
	probBytes := 4 * attnMaxRows * attnKeyTile
	rows := (attnSharedCap - tileBytes - probBytes) / (4 * d) / 8 * 8
	rows = min(rows, attnMaxRows, ceilDiv(a.N*group, 8)*8)
	p := attnPlan{rows: rows, tiles: ceilDiv(a.N*group, rows)}
	p.shared = 4*rows*d + tileBytes + probBytes
	p.cap = codec.NextPow2(attnSpan(a.Start, a.N, a.Window, a.BlockSize))
	p.split(a.KVHeads, a.BlockSize)
	if a.KVHeads > 65535 || p.tiles > 65535 {
		panic(fmt.Sprintf("cuda: attention grid of %d KV heads x %d row tiles exceeds 65535", a.KVHeads, p.tiles))
	}
	return p
}

// attnSpan returns the most KV blocks the keys of n queries from position
// start reach, counted from the block of the first key the first query
// sees (as the split kernels count them): every block up to the last
// query's, or, through a window w, at most the blocks of w+n-1 keys
// starting anywhere in a block. A sliding layer's splits so cover its
// window, not the context: its decode steps keep one geometry (and one
// graph) however long the context grows past the window.
func attnSpan(start, n, w, bs int) int {
	span := ceilDiv(start+n, bs)
	if w > 0 {
		span = min(span, (w+n-2)/bs+2)
	}
	return span
}

// split sets p's splits and keys per split for p.cap KV blocks of bs
// tokens and p.tiles row tiles of kvHeads KV heads: about attnTargetCTAs
// blocks, at most one per unit of keys (a key tile where blocks hold
// whole tiles and the context spans several, else a KV block).
func (p *attnPlan) split(kvHeads, bs int) {
	unit := bs
	if bs%attnKeyTile == 0 && p.cap > 1 {
		unit = attnKeyTile // a context within one block keeps one split
	}
	units := p.cap * (bs / unit)
	p.splits = min(units, max(1, ceilDiv(attnTargetCTAs, kvHeads*p.tiles)))
	per := ceilDiv(units, p.splits)
	p.splits = ceilDiv(units, per)
	p.per = per * unit
}

// attentionScratch returns the bytes of device scratch attentionLaunches
// needs: each split's running maximum, sum and unnormalised output per
// query-head row, or 0 when the context is not split.
func attentionScratch(a attnArgs) int {
	p := a.plan()
	if p.splits == 1 {
		return 0
	}
	return 4 * p.splits * a.N * a.Heads * (a.HeadDim + 2)
}

// attentionLaunches returns the launches of one attention call: the split
// pass (attn_split; attn_split_pre when LTab is set: the same kernel
// with the un-whitening, whose registers the other is spared;
// attn_split_pc, which also reads kakeya_pc parts, when KPTab or VPTab is
// set), which
// writes Out itself when the context is not split, else partial softmax
// states to Scratch, then the combine pass (attn_combine) that merges them
// into Out.
//
// Kernels:
//
//	attn_split[_pre](float *out, const float *q, float *scratch, int n, int start, int heads, int kv_heads,
//	           int d, int window, int block_size, const uint64 *ktab, const uint64 *vtab, const int *fmts,
//	           int blocks, const float *cos, const float *sin, int rows, int per, int splits,
//	           const float *kparams, const float *vparams, const uint64 *ltab,
//	           const uint64 *kptab, const uint64 *vptab, const int *startp, float scale, float softcap)
//	attn_combine(float *out, const float *scratch, int n, int heads, int d, int splits)
func attentionLaunches(a attnArgs) []Launch {
	p := a.plan()
	start, blocks := a.Start, a.Blocks
	if a.Step != 0 {
		start, blocks = 0, p.cap // the kernel reads start at Step; it does not read blocks
	}
	split := new(args).ptr(a.Out).ptr(a.Q).ptr(a.Scratch).
		i32("n", a.N).i32("start", start).i32("heads", a.Heads).i32("kv heads", a.KVHeads).
		i32("head dim", a.HeadDim).i32("window", a.Window).i32("block size", a.BlockSize).
		ptr(a.KTab).ptr(a.VTab).ptr(a.Fmts).i32("blocks", blocks).ptr(a.Cos).ptr(a.Sin).
		i32("rows", p.rows).i32("per", p.per).i32("splits", p.splits).ptr(a.KParams).ptr(a.VParams).ptr(a.LTab).
		ptr(a.KPTab).ptr(a.VPTab).ptr(a.Step).f32(a.Scale).f32(a.Softcap)
	kernel := "attn_split"
	switch {
	case a.KPTab != 0 || a.VPTab != 0:
		kernel = "attn_split_pc"
	case a.LTab != 0:
		kernel = "attn_split_pre"
	}
	return splitLaunches(kernel, p, split, a.Out, a.Scratch, a.N, a.Heads, a.KVHeads, a.HeadDim)
}

// attnBatchArgs are one batched attention call (attn_batch): the split
// pass of every sequence of a forward step in one launch. Passes is the
// device address of NPasses kk_attn_pass records (row0, n, start, tile0:
// int32 each) and Seqs of as many kk_attn_seq entries (the ktab, vtab,
// fmts, ltab, kptab, vptab, kparams and vparams of attnArgs, one pass's
// each); N is the step's rows, MaxN the most rows of one pass, Tiles the
// row tiles of every pass (the last pass's tile0 plus its tiles), Context
// the furthest position any pass reaches plus one. Pre and PC pick the
// variant, as LTab and KPTab/VPTab do for attnArgs.
type attnBatchArgs struct {
	Out, Q, Scratch                            Ptr
	Passes, Seqs                               Ptr
	NPasses, N, MaxN, Context                  int
	Heads, KVHeads, HeadDim, Window, BlockSize int
	Cos, Sin                                   Ptr
	Pre, PC                                    bool
	// Rotate says Q holds the queries before RoPE, which the kernel
	// rotates as it loads them.
	Rotate bool
	// Scale and Softcap are attnArgs'.
	Scale, Softcap float32
}

// attnBatchRows returns the query-head rows per block of a batched call
// whose passes hold at most maxN rows: attnArgs.plan's for one sequence of
// maxN rows, so a pass's tiles are laid out as its own call would lay them.
func attnBatchRows(heads, kvHeads, d, maxN int) int {
	return attnArgs{N: maxN, Heads: heads, KVHeads: kvHeads, HeadDim: d, BlockSize: 1, Blocks: maxN}.plan().rows
}

// plan decides a batched call's geometry: attnArgs.plan's rows for the
// longest pass, tiles as given, and splits for the longest context's shape
// class until the launch has about attnTargetCTAs blocks.
func (a attnBatchArgs) plan(tiles int) attnPlan {
	positive("batched attention", a.NPasses, a.N, a.MaxN, a.Context, a.Heads, a.KVHeads, a.HeadDim, a.BlockSize, tiles)
	one := attnArgs{N: a.MaxN, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim, BlockSize: a.BlockSize,
		Start: a.Context - a.MaxN, Blocks: ceilDiv(a.Context, a.BlockSize), Window: a.Window}
	p := one.plan()
	int32Of("attention rows", a.N*a.Heads*(a.HeadDim+2))
	p.tiles = tiles
	p.split(a.KVHeads, a.BlockSize)
	if p.tiles > 65535 {
		panic(fmt.Sprintf("cuda: batched attention grid of %d row tiles exceeds 65535", p.tiles))
	}
	int32Of("attention scratch", p.splits*a.N*a.Heads*(a.HeadDim+2))
	return p
}

// attnBatchScratch returns the bytes of device scratch a batched call of
// plan p needs: attentionScratch's for one sequence of a.N rows.
func attnBatchScratch(a attnBatchArgs, p attnPlan) int {
	if p.splits == 1 {
		return 0
	}
	return 4 * p.splits * a.N * a.Heads * (a.HeadDim + 2)
}

// attnBatchLaunches returns the launches of a batched attention call of
// plan p: attn_batch (attn_batch_pre, attn_batch_pc), then attn_combine
// over the step's rows when the context is split.
//
// Kernels:
//
//	attn_batch[_pre|_pc](float *out, const float *q, float *scratch, const kk_attn_pass *passes,
//	           const kk_attn_seq *seqs, int npasses, int ntot, int heads, int kv_heads, int d, int window,
//	           int block_size, const float *cos, const float *sin, int rows, int per, int splits, int rot,
//	           float scale, float softcap)
func attnBatchLaunches(a attnBatchArgs, p attnPlan) []Launch {
	rot := 0
	if a.Rotate {
		rot = 1
	}
	split := new(args).ptr(a.Out).ptr(a.Q).ptr(a.Scratch).ptr(a.Passes).ptr(a.Seqs).
		i32("passes", a.NPasses).i32("rows", a.N).i32("heads", a.Heads).i32("kv heads", a.KVHeads).
		i32("head dim", a.HeadDim).i32("window", a.Window).i32("block size", a.BlockSize).
		ptr(a.Cos).ptr(a.Sin).i32("rows", p.rows).i32("per", p.per).i32("splits", p.splits).i32("rotate", rot).
		f32(a.Scale).f32(a.Softcap)
	kernel := "attn_batch"
	switch {
	case a.PC:
		kernel = "attn_batch_pc"
	case a.Pre:
		kernel = "attn_batch_pre"
	}
	return splitLaunches(kernel, p, split, a.Out, a.Scratch, a.N, a.Heads, a.KVHeads, a.HeadDim)
}

// splitLaunches returns an attention split kernel's launch over p's grid
// (splits x KV heads x tiles) with its packed arguments, followed, when
// the context is split, by attn_combine's over the n x heads rows of out:
// the tail the single-sequence and batched attention launches share.
func splitLaunches(kernel string, p attnPlan, split *args, out, scratch Ptr, n, heads, kvHeads, headDim int) []Launch {
	ls := []Launch{{
		Kernel: kernel,
		Grid:   Dim3{uint32(p.splits), uint32(kvHeads), uint32(p.tiles)},
		Block:  Dim3{attnThreads, 1, 1},
		Shared: uint32(p.shared),
		Args:   split.b, Params: split.offs,
	}}
	if p.splits > 1 {
		comb := new(args).ptr(out).ptr(scratch).i32("n", n).i32("heads", heads).i32("head dim", headDim).i32("splits", p.splits)
		ls = append(ls, Launch{
			Kernel: "attn_combine",
			Grid:   Dim3{u32("combine rows", n*heads), 1, 1},
			Block:  Dim3{128, 1, 1},
			Args:   comb.b, Params: comb.offs,
		})
	}
	return ls
}

// prefillRows is the query-head rows per block of the tensor-core prefill
// attention (attn_prefill_d64, _d128 in kernels/cuda/prefill.cu): 4 warps
// of 16 rows.
const (
	prefillRows    = 64
	prefillThreads = 128
)

// prefillAttention reports whether the tensor-core prefill kernel takes
// an attention call of n queries per pass (the most of any pass) at head
// dim d over parts whose tables say kakeya (Kakeya parts: their shared
// params), pre (preconditioned keys) or pcec (entropy-coded kakeya-pc
// parts, format 9): a call of more than maxMatVecRows queries, with
// 16-bit matrix products (exact false), over parts it reads (hot, int8,
// int4, int2, and fixed-rate kakeya-pc, format 8, in its _pc kernels), at
// d 64 or 128.
func prefillAttention(n, d int, exact, kakeya, pre, pcec bool) bool {
	return n > maxMatVecRows && !exact && !kakeya && !pre && !pcec && (d == 64 || d == 128)
}

// prefillLaunch returns the launch of one sequence's call (a, which
// prefillAttention admits) on the tensor cores: block (tile, KV head).
// A layer holding kakeya_pc parts (a.KPTab set) takes attn_prefill_pc_d<D>,
// which also reads the kptab and vptab tables.
//
// Kernel: attn_prefill_d<D>(float *out, const float *q, int n, int start, int heads, int kv_heads,
// int window, int block_size, const uint64 *ktab, const uint64 *vtab, const int *fmts,
// const float *cos, const float *sin, int rot, float scale, float softcap
// [, const uint64 *kptab, const uint64 *vptab])
func prefillLaunch(a attnArgs) Launch {
	a.plan() // the same checks
	tiles := ceilDiv(a.N*(a.Heads/a.KVHeads), prefillRows)
	p := new(args).ptr(a.Out).ptr(a.Q).i32("n", a.N).i32("start", a.Start).i32("heads", a.Heads).
		i32("kv heads", a.KVHeads).i32("window", a.Window).i32("block size", a.BlockSize).
		ptr(a.KTab).ptr(a.VTab).ptr(a.Fmts).ptr(a.Cos).ptr(a.Sin).i32("rotate", 0).f32(a.Scale).f32(a.Softcap)
	kernel := fmt.Sprintf("attn_prefill_d%d", a.HeadDim)
	if a.KPTab != 0 {
		p = p.ptr(a.KPTab).ptr(a.VPTab)
		kernel = fmt.Sprintf("attn_prefill_pc_d%d", a.HeadDim)
	}
	return Launch{
		Kernel: kernel,
		Grid:   Dim3{u32("prefill attention tiles", tiles), u32("KV heads", a.KVHeads), 1},
		Block:  Dim3{prefillThreads, 1, 1},
		Args:   p.b, Params: p.offs,
	}
}

// prefillBatchLaunch returns the launch of a batched call on the tensor
// cores over tiles row tiles of prefillRows (the passes' tile0 counted in
// them): block (tile, KV head). A.PC (some pass holds kakeya_pc parts)
// takes attn_prefill_batch_pc_d<D>, the same parameters.
//
// Kernel: attn_prefill_batch_d<D>(float *out, const float *q, const kk_attn_pass *passes,
// const kk_attn_seq *seqs, int npasses, int heads, int kv_heads, int window, int block_size,
// const float *cos, const float *sin, int rot, float scale, float softcap)
func prefillBatchLaunch(a attnBatchArgs, tiles int) Launch {
	positive("batched prefill attention", a.NPasses, a.N, a.Heads, a.KVHeads, a.HeadDim, a.BlockSize, tiles)
	rot := 0
	if a.Rotate {
		rot = 1
	}
	p := new(args).ptr(a.Out).ptr(a.Q).ptr(a.Passes).ptr(a.Seqs).i32("passes", a.NPasses).
		i32("heads", a.Heads).i32("kv heads", a.KVHeads).i32("window", a.Window).i32("block size", a.BlockSize).
		ptr(a.Cos).ptr(a.Sin).i32("rotate", rot).f32(a.Scale).f32(a.Softcap)
	kernel := fmt.Sprintf("attn_prefill_batch_d%d", a.HeadDim)
	if a.PC {
		kernel = fmt.Sprintf("attn_prefill_batch_pc_d%d", a.HeadDim)
	}
	return Launch{
		Kernel: kernel,
		Grid:   Dim3{u32("prefill attention tiles", tiles), u32("KV heads", a.KVHeads), 1},
		Block:  Dim3{prefillThreads, 1, 1},
		Args:   p.b, Params: p.offs,
	}
}
