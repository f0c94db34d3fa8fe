package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file is the one description of the quantized weight formats Kakeya
// reads (llama.cpp's block types, as ggml-common.h defines them): each
// QuantFormat lays out one block of Block values in Bytes bytes as named
// fields at fixed offsets. DequantizeRow, the CPU kernels and any other
// backend read their offsets from Formats rather than restating them.

// The quantized element types: a row is a run of blocks, each Block values
// in Bytes bytes (see QuantFormat).
const (
	Q8_0 DType = iota + 16 // 32 values: f16 scale, 32 int8
	Q4_0                   // 32 values: f16 scale, 32 4-bit (offset 8)
	Q4_K                   // 256 values: f16 scale and min, 8 6-bit scale/min pairs, 256 4-bit
	Q5_K                   // 256 values: as Q4_K with a fifth bit plane
	Q6_K                   // 256 values: 256 6-bit (offset 32), 16 int8 scales, f16 scale
	Q5_0                   // 32 values: f16 scale, 32 fifth bits, 32 4-bit (5-bit offset 16)
)

// A FieldKind is the element type of a block field.
type FieldKind uint8

// Field element types.
const (
	FieldF16 FieldKind = iota + 1 // IEEE half
	FieldU8                       // bytes (packed codes or scales)
	FieldI8                       // signed bytes
)

// A QuantField is one field of a block: Count elements of Kind at byte
// Offset.
type QuantField struct {
	Name   string
	Kind   FieldKind
	Offset int
	Count  int
}

// A QuantFormat describes one quantized type's block.
type QuantFormat struct {
	DType  DType
	Name   string // as llama.cpp names it, e.g. "Q4_K"
	Block  int    // values per block
	Bytes  int    // bytes per block
	Fields []QuantField
}

// Field returns the named field; it panics on a name the format lacks
// (a programming error).
func (f *QuantFormat) Field(name string) QuantField {
	for _, fl := range f.Fields {
		if fl.Name == name {
			return fl
		}
	}
	panic("tensor: format " + f.Name + " has no field " + name)
}

// Formats lists the quantized formats, the only place their layouts are
// written down.
var Formats = []QuantFormat{
	{Q8_0, "Q8_0", 32, 34, []QuantField{{"d", FieldF16, 0, 1}, {"qs", FieldI8, 2, 32}}},
	{Q4_0, "Q4_0", 32, 18, []QuantField{{"d", FieldF16, 0, 1}, {"qs", FieldU8, 2, 16}}},
	{Q4_K, "Q4_K", 256, 144, []QuantField{{"d", FieldF16, 0, 1}, {"dmin", FieldF16, 2, 1}, {"scales", FieldU8, 4, 12}, {"qs", FieldU8, 16, 128}}},
	{Q5_K, "Q5_K", 256, 176, []QuantField{{"d", FieldF16, 0, 1}, {"dmin", FieldF16, 2, 1}, {"scales", FieldU8, 4, 12}, {"qh", FieldU8, 16, 32}, {"qs", FieldU8, 48, 128}}},
	{Q5_0, "Q5_0", 32, 22, []QuantField{{"d", FieldF16, 0, 1}, {"qh", FieldU8, 2, 4}, {"qs", FieldU8, 6, 16}}},
	{Q6_K, "Q6_K", 256, 210, []QuantField{{"ql", FieldU8, 0, 128}, {"qh", FieldU8, 128, 64}, {"scales", FieldI8, 192, 16}, {"d", FieldF16, 208, 1}}},
}

// Format returns the block format of a quantized dtype, nil for others.
func (d DType) Format() *QuantFormat {
	for i := range Formats {
		if Formats[i].DType == d {
			return &Formats[i]
		}
	}
	return nil
}

// Quantized reports whether d is a block-quantized type.
func (d DType) Quantized() bool { return d.Format() != nil }

// RowBytes returns the bytes of a row of cols values of d, and false when
// cols does not fill whole blocks or d is unknown.
func (d DType) RowBytes(cols int) (int, bool) {
	if f := d.Format(); f != nil {
		if cols%f.Block != 0 {
			return 0, false
		}
		return cols / f.Block * f.Bytes, true
	}
	if d.Size() == 0 {
		return 0, false
	}
	return cols * d.Size(), true
}

// Q4_K and Q5_K pack 8 pairs of 6-bit scale and min into 12 bytes; scaleMin
// returns pair j (ggml's get_scale_min_k4).
func scaleMin(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// ScaleMinK4 returns the j-th 6-bit scale and min of a Q4_K or Q5_K
// block's 12 scale bytes.
func ScaleMinK4(j int, scales []byte) (sc, m uint8) { return scaleMin(j, scales) }

func f16at(b []byte, off int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[off:])) }

// DequantizeRow widens len(dst) values (a multiple of the block size) from
// the blocks in src, exactly as llama.cpp's dequantize_row_* do: each
// product and difference rounded to float32 in the same order.
func DequantizeRow(dst []float32, d DType, src []byte) error {
	f := d.Format()
	if f == nil {
		return fmt.Errorf("tensor: %v is not a quantized type", d)
	}
	if len(dst)%f.Block != 0 || len(src) < len(dst)/f.Block*f.Bytes {
		return fmt.Errorf("tensor: %s row of %d values from %d bytes", f.Name, len(dst), len(src))
	}
	for i := 0; i < len(dst)/f.Block; i++ {
		dequantBlock(f, dst[i*f.Block:(i+1)*f.Block], src[i*f.Bytes:(i+1)*f.Bytes])
	}
	return nil
}

func dequantBlock(f *QuantFormat, y []float32, b []byte) {
	switch f.DType {
	case Q8_0:
		d := f16at(b, f.Field("d").Offset)
		qs := b[f.Field("qs").Offset:]
		for j := range 32 {
			y[j] = float32(int8(qs[j])) * d
		}
	case Q4_0:
		d := f16at(b, f.Field("d").Offset)
		qs := b[f.Field("qs").Offset:]
		for j := range 16 {
			y[j] = float32(int(qs[j]&0xF)-8) * d
			y[j+16] = float32(int(qs[j]>>4)-8) * d
		}
	case Q5_0:
		d := f16at(b, f.Field("d").Offset)
		qh := binary.LittleEndian.Uint32(b[f.Field("qh").Offset:])
		qs := b[f.Field("qs").Offset:]
		for j := range 16 {
			h0 := (qh >> j << 4) & 0x10
			h1 := (qh >> (j + 12)) & 0x10
			y[j] = float32(int(uint32(qs[j]&0xF)|h0)-16) * d
			y[j+16] = float32(int(uint32(qs[j]>>4)|h1)-16) * d
		}
	case Q4_K, Q5_K:
		d := f16at(b, f.Field("d").Offset)
		dmin := f16at(b, f.Field("dmin").Offset)
		sc := b[f.Field("scales").Offset:]
		ql := b[f.Field("qs").Offset:]
		var qh []byte
		if f.DType == Q5_K {
			qh = b[f.Field("qh").Offset:]
		}
		u1, u2 := uint8(1), uint8(2)
		for j, is := 0, 0; j < 256; j, is = j+64, is+2 {
			s, m := scaleMin(is, sc)
			d1, m1 := d*float32(s), dmin*float32(m)
			s, m = scaleMin(is+1, sc)
			d2, m2 := d*float32(s), dmin*float32(m)
			for l := range 32 {
				lo, hi := int(ql[l]&0xF), int(ql[l]>>4)
				if qh != nil {
					if qh[l]&u1 != 0 {
						lo += 16
					}
					if qh[l]&u2 != 0 {
						hi += 16
					}
				}
				// The conversions round each product, as C without
				// contraction does: no fused multiply-add.
				y[j+l] = float32(d1*float32(lo)) - m1
				y[j+32+l] = float32(d2*float32(hi)) - m2
			}
			ql = ql[32:]
			u1, u2 = u1<<2, u2<<2
		}
	case Q6_K:
		d := f16at(b, f.Field("d").Offset)
		ql := b[f.Field("ql").Offset:]
		qh := b[f.Field("qh").Offset:]
		sc := b[f.Field("scales").Offset:]
		for n := 0; n < 256; n += 128 {
			for l := range 32 {
				is := l / 16
				q1 := int(ql[l]&0xF|(qh[l]>>0&3)<<4) - 32
				q2 := int(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				y[n+l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				y[n+l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				y[n+l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				y[n+l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
			ql, qh, sc = ql[64:], qh[32:], sc[8:]
		}
	}
}

// QuantizeRow quantizes src (a multiple of the block size) into dst's
// blocks of d, as llama.cpp's quantize_row_*_ref do (what llama-quantize
// writes without an importance matrix): Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and
// Q6_K (kquant.go).
func QuantizeRow(dst []byte, d DType, src []float32) error {
	f := d.Format()
	if f == nil {
		return fmt.Errorf("tensor: quantizing to %v is not supported (supported: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)", d)
	}
	if len(src)%f.Block != 0 || len(dst) < len(src)/f.Block*f.Bytes {
		return fmt.Errorf("tensor: %s: %d values into %d bytes", f.Name, len(src), len(dst))
	}
	if d != Q8_0 && d != Q4_0 {
		for i := range len(src) / f.Block {
			b, x := dst[i*f.Bytes:(i+1)*f.Bytes], src[i*f.Block:(i+1)*f.Block]
			switch d {
			case Q5_0:
				quantizeQ5_0(f, b, x)
			case Q4_K, Q5_K:
				quantizeK45(f, b, x, d == Q5_K)
			case Q6_K:
				quantizeQ6K(f, b, x)
			}
		}
		return nil
	}
	for i := range len(src) / 32 {
		x := src[i*32 : i*32+32]
		b := dst[i*f.Bytes : (i+1)*f.Bytes]
		var amax, mx float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, mx = a, v
			}
		}
		var s float32
		if d == Q8_0 {
			s = amax / 127
		} else {
			s = mx / -8
		}
		var id float32
		if s != 0 {
			id = 1 / s
		}
		binary.LittleEndian.PutUint16(b[f.Field("d").Offset:], F32ToF16(s))
		qs := b[f.Field("qs").Offset:]
		if d == Q8_0 {
			for j, v := range x {
				qs[j] = byte(int8(math.Round(float64(v * id))))
			}
			continue
		}
		for j := range 16 {
			x0 := min(15, int8(x[j]*id+8.5))
			x1 := min(15, int8(x[j+16]*id+8.5))
			qs[j] = byte(x0) | byte(x1)<<4
		}
	}
	return nil
}
