package codec

import (
	"bytes"
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

func init() {
	Register(Registration{Name: "int8", Formats: []FormatID{FormatInt8}, New: func(Spec, *Args) (Codec, error) { return Int8{}, nil }})
}

// Int8 is the llama.cpp q8_0 scheme applied per vector: each row is cut into
// groups of 32 values that share one fp16 scale absmax/127, and every value is
// a signed byte in -127..127. Cost: 8 + 16/32 = 8.5 bits per value when d is a
// multiple of 32. Encoded length: 16 + 2*n*ceil(d/32) + n*d bytes.
type Int8 struct{}

const int8Group = 32

// The sections of formatInt8.
const (
	int8Scales = iota
	int8Codes
)

// Format returns the int8 format.
func (Int8) Format() *Format { return formatInt8 }

// Settings returns the code width, 8, and the group, 32.
func (Int8) Settings() Settings { return Settings{Bits: 8, Group: int8Group} }

// Name returns "int8".
func (Int8) Name() string { return "int8" }

// Encode appends the header, the n*ceil(d/32) fp16 scales and n*d int8 codes.
func (Int8) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	am, err := checkInput("int8", x, n, d)
	if err != nil {
		return dst, err
	}
	x = x[:n*d]
	if am/127 > maxF16 {
		return dst, fmt.Errorf("codec: int8: |value| %v exceeds the fp16 scale range", am)
	}
	g := (d + int8Group - 1) / int8Group
	start := len(dst)
	l := formatInt8.Layout(&Vars{VarN: n, VarD: d})
	dst = appendHeader(dst, FormatInt8, 8, n, d, int8Group)
	dst = grow(dst, l.Size()-headerLen)
	scales, codes := dst[start+l.Off(int8Scales):], dst[start+l.Off(int8Codes):]
	for i := 0; i < n; i++ {
		row := x[i*d : (i+1)*d]
		for k := 0; k < g; k++ {
			grp := row[k*int8Group : min((k+1)*int8Group, d)]
			var m float32
			for _, v := range grp {
				m = max(m, float32(math.Abs(float64(v))))
			}
			s := roundF16(m / 127)
			putF16(scales[2*(i*g+k):], s)
			out := codes[i*d+k*int8Group:]
			if s == 0 {
				clear(out[:len(grp)])
				continue
			}
			inv := 1 / s
			for j, v := range grp {
				q := math.RoundToEven(float64(v * inv))
				out[j] = byte(int8(max(-127, min(127, q))))
			}
		}
	}
	seal(dst[start:])
	return dst, nil
}

// Decode multiplies every code by its group's scale.
func (Int8) Decode(dst []float32, src []byte, n, d int) error {
	if err := checkShape("int8", n, d, len(dst), "destination"); err != nil {
		return err
	}
	p, err := checkHeader("int8", src, FormatInt8, 8, n, d, int8Group)
	if err != nil {
		return err
	}
	g := (d + int8Group - 1) / int8Group
	l := formatInt8.Layout(&Vars{VarN: n, VarD: d})
	if len(src) != l.Size() {
		return fmt.Errorf("codec: int8: payload is %d bytes, want %d", len(p), l.Size()-headerLen)
	}
	p, codes := src[l.Off(int8Scales):], src[l.Off(int8Codes):]
	// -128 is never written (codes are symmetric); one vectorised scan
	// finds it, leaving the conversion loop free of branches.
	if j := bytes.IndexByte(codes, 0x80); j >= 0 {
		return fmt.Errorf("codec: int8: code -128 at row %d col %d outside -127..127", j/d, j%d)
	}
	if d%int8Group == 0 {
		// Whole groups: widen a batch of scales at a time, then dequantize
		// their groups in one call.
		var scales [64]float32
		for k0 := 0; k0 < n*g; k0 += len(scales) {
			sc := scales[:min(len(scales), n*g-k0)]
			if !cpu.WidenF16(sc, p[2*k0:]) {
				for k, s := range sc {
					if !finite32(s) {
						return fmt.Errorf("codec: int8: scale of row %d group %d is %v", (k0+k)/g, (k0+k)%g, s)
					}
				}
			}
			cpu.DequantInt8(dst[k0*int8Group:], codes[k0*int8Group:], int8Group, sc)
		}
		return nil
	}
	for i := 0; i < n; i++ {
		for k := 0; k < g; k++ {
			s := getF16(p[2*(i*g+k):])
			if !finite32(s) {
				return fmt.Errorf("codec: int8: scale of row %d group %d is %v", i, k, s)
			}
			lo, hi := i*d+k*int8Group, i*d+min((k+1)*int8Group, d)
			out, in := dst[lo:hi], codes[lo:hi]
			for j, c := range in {
				out[j] = float32(int8(c)) * s
			}
		}
	}
	return nil
}
