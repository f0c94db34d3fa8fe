// Package compute is the seam between the forward pass and the devices that
// run it. It holds what every backend shares: element types and the host
// device memory (Buffer, Weight), the
// storage of KV-cache blocks (BlockStore), and the Backend interface: the
// dozen operations one decoder family needs. The model names no device; a
// backend (compute/cpubackend, the reference in compute/reference, the GPU's
// in compute/cudabackend) implements the interface.
//
// # Failures
//
// A backend's operations fail in two ways, and the contract is the same
// for every backend:
//
//   - An operation with an error result (Upload, NewAttention,
//     Attention.Forward, BlockStore's NewPart, Read and SetEncoded) returns
//     its failure.
//   - An operation without one (Alloc, Write, Read, Embed, MatMul, RMSNorm,
//     AddRows, Add, SiLUMul, RoPE, BlockStore's Write and Release) records
//     its failure, as does a device's queued work that fails after the call
//     that queued it returned. Backend.Err returns the first failure
//     recorded since the backend was made. It is sticky: the memory of
//     the backend is in doubt after it, so the operations that follow may
//     do nothing, and a Backend.Read may leave garbage in its destination.
//     A backend may also record a failure it returned that puts its memory
//     in doubt, so that the steps after it fail too: the CUDA backend
//     records every driver failure, the CPU's the failure of attention
//     over a KV block that no longer decodes.
//
// A backend never panics on a failure and never lets one pass for a
// result: values read back after a failure are not results, and Err says
// so. Shape mismatches are the caller's bugs and may panic.
//
// The caller checks Err once per forward step (a prefill chunk or a decode
// step), after the step's results were read back and before it uses them:
// a GPU's work is known done only then. The model does so for every
// chunk of Sequence.Forward and returns the failure wrapped with context,
// so errors.Is matches the backend's own error at the engine's API and in
// the tools.
//
// Optional capabilities are separate interfaces a backend or its block
// store may implement, discovered by type assertion (see EncodedAttention).
package compute

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Memory is one allocation in a backend's memory. Only the backend that
// made it looks inside.
type Memory interface {
	// Floats returns the allocation's size in float32 values.
	Floats() int
}

// A Buffer is Len float32 values at offset Off of a backend allocation.
// Buffers are plain values: slicing one allocates nothing.
type Buffer struct {
	Mem      Memory
	Off, Len int
}

// Slice returns the values [lo, hi) of b.
func (b Buffer) Slice(lo, hi int) Buffer {
	if lo < 0 || hi < lo || hi > b.Len {
		panic(fmt.Sprintf("compute: slice [%d:%d] of a buffer of %d values", lo, hi, b.Len))
	}
	return Buffer{Mem: b.Mem, Off: b.Off + lo, Len: hi - lo}
}

// A Weight is a matrix uploaded to a backend, kept in its stored dtype:
// Rows (output features) x Cols (input features), like a Hugging Face
// Linear weight.
type Weight interface {
	Shape() (rows, cols int)
}

// AttentionParams are the geometry of one sequence's attention.
type AttentionParams struct {
	Heads, KVHeads, HeadDim int
	// Window limits each query to the Window newest keys up to its own
	// position (Mistral's sliding window); 0 attends to every earlier key.
	Window int
	// Scale multiplies the scores q·k; 0 means 1/sqrt(HeadDim). Softcap,
	// when not 0, bounds each scaled score s to Softcap*tanh(s/Softcap)
	// before the softmax (Gemma 2). Only a backend that implements ArchOps
	// honours them: a caller gives other backends zeros.
	Scale, Softcap float64
	// BlockSize is tokens per KV block; MaxContext the most positions.
	BlockSize, MaxContext int
}

// Attention computes causal grouped-query attention for one sequence with
// scratch memory of its own; it is used by one goroutine at a time.
type Attention interface {
	// Forward sets out (n rows of Heads*HeadDim) to the attention of the n
	// queries q (same shape, RoPE applied) at positions start..start+n-1
	// over the keys and values of kv, which holds positions 0..start+n-1.
	// Keys are stored before RoPE and rotated at their positions with cos
	// and sin (HeadDim/2 values per position). Results do not depend on the
	// block size or the thread count.
	Forward(out, q Buffer, n, start int, kv KVLayer, cos, sin Buffer) error
}

// KVLayer is one layer of a sequence's KV cache as attention reads it: a
// block table whose entries are parts of the backend's BlockStore.
type KVLayer interface {
	// Len returns the tokens the layer holds.
	Len() int
	// Part returns the keys (kv 0, before RoPE) or values (kv 1) of one
	// block and KV head.
	Part(head, block, kv int) Part
}

// A Part is the storage of one block's keys or values for one KV head:
// BlockSize rows of HeadDim values, hot (float32 or bf16) or encoded by a
// codec, in the memory of the store that made it.
type Part interface {
	// Encoded reports whether the part holds encoded bytes.
	Encoded() bool
}

// A Decoder turns encoded block bytes back into n rows of d values; every
// codec.Codec is one.
type Decoder interface {
	Name() string
	Decode(dst []float32, src []byte, n, d int) error
}

// A BlockStore allocates and writes KV-cache parts of BlockSize x HeadDim
// values in a backend's memory, reusing the memory of released parts. A
// store is used by one goroutine at a time; a store shared by many
// sequences (a server's block pool) would lock, and may refuse parts past
// a byte budget.
type BlockStore interface {
	// NewPart returns hot storage for one part (float32 or bf16, as the
	// store was made), or an error when the store has no room.
	NewPart() (Part, error)
	// Write stores rows rows of HeadDim values at rows row.. of the hot part
	// p; row i comes from src at offset i*stride. A failure is recorded
	// for the backend's Err, like its other operations without an error.
	Write(p Part, row int, src Buffer, stride, rows int)
	// Read copies p's values to dst on the host (BlockSize*HeadDim values),
	// decoding an encoded part.
	Read(dst []float32, p Part) error
	// SetEncoded replaces p's hot storage by enc, which dec can decode; the
	// hot memory is reused.
	SetEncoded(p Part, enc []byte, dec Decoder) error
	// Release returns p's memory to the store; p must not be used again.
	Release(p Part)
}

// EncodedAttention is implemented by a BlockStore whose backend's attention
// reads blocks encoded by some codecs. The cache encodes a full block that
// left the hot window only when its store implements this interface and
// AttendsEncoded reports true for the block's codec: it then reads the
// block back, encodes it on the host and hands the bytes to SetEncoded.
// Otherwise the block stays hot with the values it was written with, not
// those the codec would decode to: the codec is not applied to it, its
// attention is that of an uncompressed cache, and the cache's Stats count
// it hot.
//
// A store that accepts a codec must give attention the values the codec
// decodes the block to. It may keep the encoded bytes (the CPU's store) or,
// for a codec its kernels cannot read, the decoded values in the block's
// hot storage (the CUDA store); a part kept so implements HotDecoded, and
// the cache counts it hot.
type EncodedAttention interface {
	AttendsEncoded(dec Decoder) bool
}

// PartEncoder is implemented by a BlockStore that encodes full parts by
// some codecs itself, in its backend's memory (the CUDA store, on the
// device): the cache then encodes a block that left the hot window with
// EncodePart instead of reading it back, encoding it on the host and
// handing the bytes to SetEncoded, so the block never crosses to the
// host.
type PartEncoder interface {
	// EncodedLen returns the length of dec's encoding of a part, and
	// false when the store cannot encode dec's blocks itself.
	EncodedLen(dec Decoder) (int, bool)
	// EncodePart replaces p's hot rows by dec's encoding of them, of
	// EncodedLen bytes, as SetEncoded does with the bytes dec's Encode
	// makes (the store documents how exactly its bytes match them).
	EncodePart(p Part, dec Decoder) error
}

// PartsEncoder is implemented by a PartEncoder that encodes several parts
// at once (the CUDA store: one launch for all of them): EncodeParts is
// EncodePart for each of ps with the decoder of the same index, in order;
// on an error the parts before the failing one may be encoded.
type PartsEncoder interface {
	EncodeParts(ps []Part, decs []Decoder) error
}

// HotDecoded is implemented by a Part that SetEncoded may leave in hot
// storage holding its codec's decoded values rather than the codec's
// bytes, as the CUDA store does for codecs its kernels cannot read.
// HotDecoded reports whether the part is so held: it takes the memory of
// a hot part, and the cache counts it so.
type HotDecoded interface {
	HotDecoded() bool
}

// Preparer is implemented by a backend that lays weights out for its
// kernels ahead of use (the CPU's packed panels): Prepare does now what the
// first MatMul with w would otherwise do, so a model pays for it at load
// rather than in its first request. It reports whether MatMul now reads a
// copy of its own, so the host memory of the Mat that was uploaded is read
// only by Embed, if at all.
type Preparer interface {
	Prepare(w Weight) (copied bool)
}

// Interleaver is implemented by a backend whose kernels read some
// quantized types' rows interleaved (a tensor.InterleavedFormat), a layout
// its Prepare would otherwise make from the stored rows, in a second copy.
// A loader that writes a matrix's rows itself (quantizing on load) asks
// Interleaved for the layout of each matrix, writes the rows in it at
// once, and uploads them with UploadInterleaved: one pass, one buffer.
type Interleaver interface {
	// Interleaved returns the layout in which the backend reads a matrix
	// of rows x cols values of d, nil where it reads the rows as stored.
	Interleaved(d tensor.DType, rows, cols int) *tensor.InterleavedFormat
	// UploadInterleaved is Upload for a quantized m whose bytes hold its
	// rows in f, the layout Interleaved named for it (its first rows, a
	// multiple of f.Rows, in f's groups, then the rows after them as
	// stored).
	UploadInterleaved(m tensor.Mat, f *tensor.InterleavedFormat) (Weight, error)
}

// Describer is implemented by a backend that describes itself for logs
// and run statistics: the device and the kernels it runs, e.g. "avx2+fma
// (GOEXPERIMENT=simd)" for the CPU or a GPU's name and its GEMM path.
type Describer interface {
	Describe() string
}

// Backend runs the operations of a decoder's forward pass on one device.
// Shapes are the caller's contract: a mismatch is a programming error and
// may panic. Its methods may be called from several goroutines for
// different buffers.
//
// Failures follow the package's contract (see Failures in the package
// documentation): operations with an error result return it, the others
// record it for Err, and the caller checks Err once per forward step,
// before it uses what the step read back.
type Backend interface {
	// Name names the device, e.g. "cpu".
	Name() string
	// Err returns the first failure recorded since the backend was made,
	// nil if none. It is sticky: once set, it stays.
	Err() error
	// Alloc returns a zeroed buffer of n values. When the memory cannot be
	// had it records the failure and returns a buffer of n values that the
	// operations ignore.
	Alloc(n int) Buffer
	// Upload makes a weight matrix available to the backend in its stored
	// dtype (the backend may keep the host view rather than copy it). It
	// returns an error for a matrix the backend cannot hold.
	Upload(m tensor.Mat) (Weight, error)
	// Write copies host values into dst; Read copies src back to the host.
	Write(dst Buffer, src []float32)
	Read(dst []float32, src Buffer)
	// Embed sets row i of out to row ids[i] of table, widened to float32.
	Embed(out Buffer, table Weight, ids []int)
	// MatMul sets out (n rows of w's Rows) to x (n rows of w's Cols) times
	// w transposed, accumulating in float32.
	MatMul(out, x Buffer, n int, w Weight)
	// RMSNorm sets each of the rows rows of out (width w.Len) to the
	// corresponding row of x divided by its root mean square plus eps,
	// times w. out may be x.
	RMSNorm(out, x, w Buffer, rows int, eps float32)
	// AddRows adds bias to each of the rows rows of x (width bias.Len).
	AddRows(x, bias Buffer, rows int)
	// Add adds y to x element by element.
	Add(x, y Buffer)
	// SiLUMul sets gate to silu(gate) * up element by element.
	SiLUMul(gate, up Buffer)
	// RoPE rotates the heads vectors of width d in each of the rows rows
	// of x by the angles of positions start.., with cos and sin holding
	// d/2 values per position (rotate-half pairing, as Hugging Face).
	RoPE(x Buffer, rows, heads, d, start int, cos, sin Buffer)
	// NewAttention returns the attention of one sequence, or an error for
	// geometry the backend cannot run or after a recorded failure.
	NewAttention(p AttentionParams) (Attention, error)
	// NewBlockStore returns a store of parts of rows x d values, bf16 or
	// float32. It allocates nothing yet: the store's methods report their
	// failures (see BlockStore).
	NewBlockStore(rows, d int, bf16 bool) BlockStore
	// Close releases the backend's workers and memory.
	Close() error
}
