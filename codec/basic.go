package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Identity stores raw float32 values: lossless, 32 bits per value plus the
// header. It proves that a cache path through a codec is bit-exact.
type Identity struct{}

// Name returns "f32".
func (Identity) Name() string { return "f32" }

// Encode appends header + n*d little-endian float32 bit patterns.
func (Identity) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	if err := checkShape("f32", n, d, len(x), "input"); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = appendHeader(dst, idIdentity, 32, n, d, 0)
	dst = grow(dst, 4*n*d)
	p := dst[len(dst)-4*n*d:]
	for i, v := range x[:n*d] {
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(v))
	}
	seal(dst[start:])
	return dst, nil
}

// Decode restores the exact float32 bit patterns.
func (Identity) Decode(dst []float32, src []byte, n, d int) error {
	if err := checkShape("f32", n, d, len(dst), "destination"); err != nil {
		return err
	}
	p, err := checkHeader("f32", src, idIdentity, 32, n, d, 0)
	if err != nil {
		return err
	}
	if len(p) != 4*n*d {
		return fmt.Errorf("codec: f32: payload is %d bytes, want %d", len(p), 4*n*d)
	}
	for i := range dst[:n*d] {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
	}
	return nil
}

// BF16 stores each value as bfloat16 (round to nearest even): 16 bits per
// value plus the header.
type BF16 struct{}

// Name returns "bf16".
func (BF16) Name() string { return "bf16" }

// Encode appends header + n*d little-endian bfloat16 values.
func (BF16) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	if err := checkShape("bf16", n, d, len(x), "input"); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = appendHeader(dst, idBF16, 16, n, d, 0)
	dst = grow(dst, 2*n*d)
	p := dst[len(dst)-2*n*d:]
	for i, v := range x[:n*d] {
		binary.LittleEndian.PutUint16(p[2*i:], tensor.F32ToBF16(v))
	}
	seal(dst[start:])
	return dst, nil
}

// Decode widens the stored bfloat16 values.
func (BF16) Decode(dst []float32, src []byte, n, d int) error {
	if err := checkShape("bf16", n, d, len(dst), "destination"); err != nil {
		return err
	}
	p, err := checkHeader("bf16", src, idBF16, 16, n, d, 0)
	if err != nil {
		return err
	}
	if len(p) != 2*n*d {
		return fmt.Errorf("codec: bf16: payload is %d bytes, want %d", len(p), 2*n*d)
	}
	for i := range dst[:n*d] {
		dst[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(p[2*i:]))
	}
	return nil
}

// grow extends dst by k bytes (contents unspecified) without a second copy.
func grow(dst []byte, k int) []byte {
	if cap(dst)-len(dst) < k {
		nd := make([]byte, len(dst), len(dst)+k+len(dst)/4)
		copy(nd, dst)
		dst = nd
	}
	return dst[:len(dst)+k]
}
