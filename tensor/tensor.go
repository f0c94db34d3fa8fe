package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a stored tensor.
type DType uint8

// Element types a checkpoint may store.
const (
	F32 DType = iota + 1
	F16
	BF16
)

// Size returns the width of one element in bytes.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	}
	if f := d.Format(); f != nil {
		return f.Name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Mat is a row-major matrix of Rows x Cols elements in its stored dtype,
// laid out like a Hugging Face Linear weight ([out_features, in_features]).
// Exactly one of F32, U16 and Q is set: U16 holds F16 or BF16 bits, Q the
// blocks of a quantized type (Rows rows of DType.RowBytes(Cols) bytes).
type Mat struct {
	DType      DType
	Rows, Cols int
	F32        []float32
	U16        []uint16
	Q          []byte
}

// BF16ToF32 widens a bfloat16 bit pattern.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to the nearest bfloat16 (ties to even), keeping NaN a NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToF32 widens an IEEE 754 half-precision bit pattern.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: normalise the mantissa.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// F32ToF16 rounds to the nearest half-precision value (ties to even),
// saturating to infinity and keeping NaN a NaN.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return sign | 0x7e00
	case a >= 0x477ff000: // rounds to >= 65520: overflow
		return sign | 0x7c00
	case a >= 0x38800000: // normal half
		r := a - 0x38000000
		r += 0xfff + (r>>13)&1
		return sign | uint16(r>>13)
	case a < 0x33000000: // below half of the smallest subnormal
		return sign
	}
	// Subnormal half.
	e := a >> 23
	m := a&0x7fffff | 0x800000
	shift := 126 - e
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}
