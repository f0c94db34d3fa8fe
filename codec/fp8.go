package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

func init() {
	Register(Registration{Name: "fp8", Formats: []FormatID{FormatFP8}, New: func(Spec, *Args) (Codec, error) { return FP8{}, nil }})
}

// FP8 stores every value as an OCP FP8 E4M3 ("e4m3fn") number times one
// float32 scale per block, absmax/448: the format production engines use
// for an 8-bit KV cache (vLLM's fp8 cache keeps a scale per tensor; a
// block's own scale is that scale fitted to the block). E4M3 has a sign,
// 4 exponent bits (bias 7) and 3 mantissa bits; its largest finite value
// is 448, its smallest subnormal 2^-9, and it has no infinities. Cost: 8
// bits per value plus 32 per block. Encoded length: 16 + 4 + n*d bytes.
type FP8 struct{}

// fp8Max is E4M3's largest finite value, 1.75 * 2^8.
const fp8Max = 448

// The sections of formatFP8.
const (
	fp8Scale = iota
	fp8Codes
)

// fp8Values holds the value of every E4M3 code; the two NaN codes (0x7f,
// 0xff), never written, hold NaN. It is computed once and never written.
var fp8Values = func() (t [256]float32) {
	for c := range t {
		t[c] = fp8Value(byte(c))
	}
	return t
}()

// fp8Value returns the value of code c by E4M3's definition.
func fp8Value(c byte) float32 {
	e, m := int(c>>3)&0xf, int(c&7)
	var v float64
	switch {
	case e == 0xf && m == 7:
		return float32(math.NaN())
	case e == 0:
		v = math.Ldexp(float64(m), -9) // subnormal: m/8 * 2^-6
	default:
		v = math.Ldexp(float64(8+m), e-10) // (1 + m/8) * 2^(e-7)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// fp8Encode returns the E4M3 code nearest to v (|v| <= 448, finite),
// ties to the even code, as IEEE round-to-nearest-even does.
func fp8Encode(v float32) byte {
	var sign byte
	a := float64(v)
	if math.Signbit(a) {
		sign, a = 0x80, -a
	}
	if a >= fp8Max {
		return sign | 0x7e
	}
	// The codes below 2^-6 (subnormals) and the first binade above it are
	// evenly spaced by 2^-9, so one rounding covers both: the result m is
	// the code itself (m = 8 is 2^-6, code 0x08).
	if a < 0x1p-6 {
		return sign | byte(math.RoundToEven(a*0x1p9))
	}
	frac, exp := math.Frexp(a) // a = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1               // a = (2*frac) * 2^e, 2*frac in [1, 2)
	m := int(math.RoundToEven((2*frac - 1) * 8))
	if m == 8 {
		e, m = e+1, 0
	}
	code := (e+7)<<3 | m
	if code > 0x7e {
		code = 0x7e
	}
	return sign | byte(code)
}

// Format returns the fp8 format.
func (FP8) Format() *Format { return formatFP8 }

// Settings returns the code width, 8.
func (FP8) Settings() Settings { return Settings{Bits: 8} }

// Name returns "fp8".
func (FP8) Name() string { return "fp8" }

// Encode appends the header, the block's float32 scale absmax/448 and the
// n*d E4M3 codes of x/scale.
func (FP8) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	am, err := checkInput("fp8", x, n, d)
	if err != nil {
		return dst, err
	}
	x = x[:n*d]
	start := len(dst)
	l := formatFP8.Layout(&Vars{VarN: n, VarD: d})
	dst = appendHeader(dst, FormatFP8, 8, n, d, 0)
	dst = grow(dst, l.Size()-headerLen)
	scale := am / fp8Max
	binary.LittleEndian.PutUint32(dst[start+l.Off(fp8Scale):], math.Float32bits(scale))
	codes := dst[start+l.Off(fp8Codes):]
	if scale == 0 {
		clear(codes[:n*d])
	} else {
		inv := 1 / scale
		for i, v := range x {
			codes[i] = fp8Encode(v * inv)
		}
	}
	seal(dst[start:])
	return dst, nil
}

// Decode multiplies every code's value by the block's scale.
func (FP8) Decode(dst []float32, src []byte, n, d int) error {
	if err := checkShape("fp8", n, d, len(dst), "destination"); err != nil {
		return err
	}
	p, err := checkHeader("fp8", src, FormatFP8, 8, n, d, 0)
	if err != nil {
		return err
	}
	l := formatFP8.Layout(&Vars{VarN: n, VarD: d})
	if len(src) != l.Size() {
		return fmt.Errorf("codec: fp8: payload is %d bytes, want %d", len(p), l.Size()-headerLen)
	}
	scale := math.Float32frombits(binary.LittleEndian.Uint32(src[l.Off(fp8Scale):]))
	if !finite32(scale) || scale < 0 {
		return fmt.Errorf("codec: fp8: block scale %v is not a finite value >= 0", scale)
	}
	codes := src[l.Off(fp8Codes):][:n*d]
	for i, c := range codes {
		if c&0x7f == 0x7f {
			return fmt.Errorf("codec: fp8: NaN code %#02x at row %d col %d", c, i/d, i%d)
		}
		dst[i] = fp8Values[c] * scale
	}
	return nil
}
