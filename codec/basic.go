package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/tensor"
)

func init() {
	Register(Registration{Name: "f32", Aliases: []string{"identity"}, Formats: []FormatID{FormatIdentity}, New: func(Spec, *Args) (Codec, error) { return Identity{}, nil }})
	Register(Registration{Name: "bf16", Formats: []FormatID{FormatBF16}, New: func(Spec, *Args) (Codec, error) { return BF16{}, nil }})
}

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
	l := formatIdentity.Layout(&Vars{VarN: n, VarD: d})
	dst = appendHeader(dst, FormatIdentity, 32, n, d, 0)
	dst = grow(dst, l.Len(0))
	p := dst[start+l.Off(0):]
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
	p, err := checkHeader("f32", src, FormatIdentity, 32, n, d, 0)
	if err != nil {
		return err
	}
	l := formatIdentity.Layout(&Vars{VarN: n, VarD: d})
	if len(src) != l.Size() {
		return fmt.Errorf("codec: f32: payload is %d bytes, want %d", len(p), l.Size()-headerLen)
	}
	p = src[l.Off(0):]
	for i := range dst[:n*d] {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
	}
	return nil
}

// Format returns the f32 format.
func (Identity) Format() *Format { return formatIdentity }

// Settings returns the zero Settings: the format has none.
func (Identity) Settings() Settings { return Settings{} }

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
	l := formatBF16.Layout(&Vars{VarN: n, VarD: d})
	dst = appendHeader(dst, FormatBF16, 16, n, d, 0)
	dst = grow(dst, l.Len(0))
	p := dst[start+l.Off(0):]
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
	p, err := checkHeader("bf16", src, FormatBF16, 16, n, d, 0)
	if err != nil {
		return err
	}
	l := formatBF16.Layout(&Vars{VarN: n, VarD: d})
	if len(src) != l.Size() {
		return fmt.Errorf("codec: bf16: payload is %d bytes, want %d", len(p), l.Size()-headerLen)
	}
	p = src[l.Off(0):]
	for i := range dst[:n*d] {
		dst[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(p[2*i:]))
	}
	return nil
}

// Format returns the bf16 format.
func (BF16) Format() *Format { return formatBF16 }

// Settings returns the zero Settings: the format has none.
func (BF16) Settings() Settings { return Settings{} }

// grow extends dst by k bytes (contents unspecified) without a second copy.
func grow(dst []byte, k int) []byte {
	if cap(dst)-len(dst) < k {
		nd := make([]byte, len(dst), len(dst)+k+len(dst)/4)
		copy(nd, dst)
		dst = nd
	}
	return dst[:len(dst)+k]
}
