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
