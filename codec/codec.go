// Package codec holds the block codecs of the compressed KV cache and the
// calibration artifacts they use.
package codec

// A Codec compresses one block of vectors: n rows of dimension d, row-major
// float32. A Codec holds no per-call mutable state, so one value may encode
// and decode from many goroutines at once.
type Codec interface {
	// Name identifies the codec and its settings, e.g. "kakeya-b3".
	Name() string
	// Encode appends the encoded form of x (n*d values) to dst and returns
	// the extended slice. Its length is exactly the bytes the block costs.
	Encode(dst []byte, x []float32, n, d int) ([]byte, error)
	// Decode reconstructs n*d values from src into dst. It returns an error
	// when src is truncated, corrupt or was encoded for another shape.
	Decode(dst []float32, src []byte, n, d int) error
}

// A RotaryDecoder is a Codec that rotates the rows it decodes by RoPE in
// the same pass: attention caches keys before RoPE and rotates each block
// as it reads it.
type RotaryDecoder interface {
	Codec
	// DecodeRotated is Decode followed by cpu.RoPEBlock(dst, dst, cos,
	// sin, n, d), bit for bit: row i is rotated by cos and sin
	// [i*d/2, (i+1)*d/2).
	DecodeRotated(dst []float32, src []byte, n, d int, cos, sin []float32) error
}

// A BlocksDecoder is a RotaryDecoder and RowCombiner that does the work
// of up to MaxBlocks blocks in one call, which lets it interleave their
// decodes: an entropy-coded stream is a chain of dependent steps that one
// block alone leaves the core waiting on. Each block's result is its
// one-block call's bit for bit, the blocks' sums added to dst in their
// order. An error leaves AddWeightedBlocks's dst as it was, and need not
// say which block it is in: the one-block calls do.
type BlocksDecoder interface {
	RotaryDecoder
	RowCombiner
	// DecodeRotatedBlocks is DecodeRotated of src[j] into dst[j] with
	// cos[j] and sin[j], for each j < len(src).
	DecodeRotatedBlocks(dst [][]float32, src [][]byte, n, d int, cos, sin [][]float32) error
	// AddWeightedBlocks is AddWeighted of src[j] with weights w[j] over
	// rows [lo[j], hi[j]), for j = 0, 1, ... in turn.
	AddWeightedBlocks(dst []float32, m int, w [][]float32, wStride int, src [][]byte, n, d int, lo, hi []int) error
}

// MaxBlocks is the most blocks a BlocksDecoder call takes.
const MaxBlocks = 4

// A RowCombiner is a Codec that adds weighted sums of an encoded block's
// rows without decoding each row: attention's probability-weighted sum of
// values is such a sum.
type RowCombiner interface {
	Codec
	// AddWeighted adds, for j < m, the sum over rows lo <= i < hi of
	// w[j*wStride+i] times row i of the block src decodes to (n rows of d)
	// to dst[j*d:(j+1)*d]. Errors are those of Decode, or bad arguments.
	AddWeighted(dst []float32, m int, w []float32, wStride int, src []byte, n, d, lo, hi int) error
}
