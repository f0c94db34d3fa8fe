// Package compute is the seam between the forward pass and the devices that
// run it. It holds what every backend shares: element types and the host
// device memory (Buffer, Weight), the
// storage of KV-cache blocks (BlockStore), and the Backend interface: the
// dozen operations one decoder family needs. The model names no device; a
// backend (compute/cpu, the reference in compute/reference, a GPU later)
// implements the interface.
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
	// p; row i comes from src at offset i*stride.
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
// reads blocks encoded by some codecs directly. The cache encodes a block
// into the store only when AttendsEncoded says so; a store without this
// interface, or a codec it declines, keeps the block hot, holding the
// codec's decoded values so the results are the same.
type EncodedAttention interface {
	AttendsEncoded(dec Decoder) bool
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

// Checker is implemented by a backend whose operations can fail after
// they return, as a GPU's queued work does: Err returns the first failure,
// nil if none. The model checks it after every forward step, so a failure
// surfaces as an error, never as NaN logits.
type Checker interface {
	Err() error
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
type Backend interface {
	// Name names the device, e.g. "cpu".
	Name() string
	// Alloc returns a zeroed buffer of n values.
	Alloc(n int) Buffer
	// Upload makes a weight matrix available to the backend in its stored
	// dtype (the backend may keep the host view rather than copy it).
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
	// NewAttention returns the attention of one sequence.
	NewAttention(p AttentionParams) (Attention, error)
	// NewBlockStore returns a store of parts of rows x d values, bf16 or
	// float32.
	NewBlockStore(rows, d int, bf16 bool) BlockStore
	// Close releases the backend's workers and memory.
	Close() error
}
