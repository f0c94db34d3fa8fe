package codec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/tensor"
)

// Every encoded block starts with a 16-byte header:
//
//	[0]     magic 0x4B ('K')
//	[1]     format version (1)
//	[2]     format id (FormatIdentity, ...: the layouts of format.go)
//	[3]     codec parameter byte (bits, mode flags)
//	[4:8]   n, uint32 little-endian
//	[8:10]  d, uint16 little-endian
//	[10:12] configuration tag (a hash of settings the payload does not carry)
//	[12:16] CRC-32C of the whole block with these four bytes left out
//
// Decode checks every field against the codec and the requested shape, so a
// block decoded with the wrong codec, shape or bytes fails instead of
// producing garbage.
const (
	headerLen     = 16
	headerMagic   = 0x4B
	formatVersion = 1
	maxDim        = 1 << 15
	maxRows       = 1 << 24
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// checkShape validates an Encode or Decode call's shape and buffer length.
func checkShape(name string, n, d, have int, what string) error {
	if n <= 0 || d <= 0 || n > maxRows || d > maxDim {
		return fmt.Errorf("codec: %s: shape n=%d d=%d outside 1..%d x 1..%d", name, n, d, maxRows, maxDim)
	}
	if have < n*d {
		return fmt.Errorf("codec: %s: %s has %d values, want n*d = %d", name, what, have, n*d)
	}
	return nil
}

// appendHeader appends a header with a zero CRC; seal fills the CRC in once
// the payload is complete.
func appendHeader(dst []byte, id FormatID, param byte, n, d int, tag uint16) []byte {
	var h [headerLen]byte
	h[0], h[1], h[2], h[3] = headerMagic, formatVersion, byte(id), param
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	binary.LittleEndian.PutUint16(h[8:], uint16(d))
	binary.LittleEndian.PutUint16(h[10:], tag)
	return append(dst, h[:]...)
}

func blockCRC(block []byte) uint32 {
	c := crc32.Checksum(block[:12], crcTable)
	return crc32.Update(c, crcTable, block[headerLen:])
}

// seal writes the CRC of block, which starts with its header.
func seal(block []byte) {
	binary.LittleEndian.PutUint32(block[12:], blockCRC(block))
}

// checkHeader validates src's header against the decoding codec and shape and
// the CRC against the whole block, and returns the payload.
func checkHeader(name string, src []byte, id FormatID, param byte, n, d int, tag uint16) ([]byte, error) {
	if len(src) < headerLen {
		return nil, fmt.Errorf("codec: %s: block of %d bytes is shorter than the %d-byte header", name, len(src), headerLen)
	}
	switch {
	case src[0] != headerMagic:
		return nil, fmt.Errorf("codec: %s: bad magic byte %#x, want %#x", name, src[0], headerMagic)
	case src[1] != formatVersion:
		return nil, fmt.Errorf("codec: %s: format version %d, want %d", name, src[1], formatVersion)
	case src[2] != byte(id):
		return nil, fmt.Errorf("codec: %s: block holds codec id %d, want %d", name, src[2], id)
	case src[3] != param:
		return nil, fmt.Errorf("codec: %s: block parameter byte %#x, want %#x (encoded with other settings)", name, src[3], param)
	}
	if bn := binary.LittleEndian.Uint32(src[4:]); bn != uint32(n) {
		return nil, fmt.Errorf("codec: %s: block holds n=%d, want %d", name, bn, n)
	}
	if bd := binary.LittleEndian.Uint16(src[8:]); int(bd) != d {
		return nil, fmt.Errorf("codec: %s: block holds d=%d, want %d", name, bd, d)
	}
	if bt := binary.LittleEndian.Uint16(src[10:]); bt != tag {
		return nil, fmt.Errorf("codec: %s: block configuration tag %#04x, want %#04x (encoded with other settings)", name, bt, tag)
	}
	if got, want := binary.LittleEndian.Uint32(src[12:]), blockCRC(src); got != want {
		return nil, fmt.Errorf("codec: %s: block checksum %#08x, computed %#08x: block corrupt", name, got, want)
	}
	return src[headerLen:], nil
}

// checkCombine checks the arguments of an AddWeighted call.
func checkCombine(name string, dst []float32, m int, w []float32, wStride, n, d, lo, hi int) error {
	switch {
	case n <= 0 || d <= 0:
		return fmt.Errorf("codec: %s: block of %d x %d", name, n, d)
	case lo < 0 || hi > n || lo > hi:
		return fmt.Errorf("codec: %s: rows [%d, %d) outside a block of %d", name, lo, hi, n)
	case m < 0 || len(dst) < m*d:
		return fmt.Errorf("codec: %s: %d weight rows need %d destination values, have %d", name, m, m*d, len(dst))
	case m > 0 && (wStride < 0 || len(w) < (m-1)*wStride+hi):
		return fmt.Errorf("codec: %s: %d weight rows of stride %d reaching row %d need %d weights, have %d", name, m, wStride, hi, (m-1)*wStride+hi, len(w))
	}
	return nil
}

// checkInput checks an encoder's input block (n rows of d values, all
// finite) and returns max |x| over its n*d values.
func checkInput(name string, x []float32, n, d int) (float32, error) {
	if err := checkShape(name, n, d, len(x), "input"); err != nil {
		return 0, err
	}
	am, ok := absMaxFinite(x[:n*d])
	if !ok {
		return 0, nonFiniteErr(name, x[:n*d], d)
	}
	return am, nil
}

// absMaxFinite returns max |x| and whether every value is finite.
func absMaxFinite(x []float32) (float32, bool) {
	var m float32
	for _, v := range x {
		a := float32(math.Abs(float64(v)))
		if !(a <= math.MaxFloat32) {
			return 0, false
		}
		m = max(m, a)
	}
	return m, true
}

// nonFiniteErr names the first non-finite value of x.
func nonFiniteErr(name string, x []float32, d int) error {
	if i := pick.FirstNonFinite(x); i >= 0 {
		return fmt.Errorf("codec: %s: value at row %d col %d is %v", name, i/d, i%d, x[i])
	}
	return fmt.Errorf("codec: %s: non-finite input", name)
}

func putF16(b []byte, v float32) { binary.LittleEndian.PutUint16(b, tensor.F32ToF16(v)) }
func getF16(b []byte) float32    { return tensor.F16ToF32(binary.LittleEndian.Uint16(b)) }

// roundF16 returns v rounded through half precision.
func roundF16(v float32) float32 { return tensor.F16ToF32(tensor.F32ToF16(v)) }

// maxF16 is the largest finite half-precision value.
const maxF16 = 65504

// f16Floor returns the largest half-precision value <= v (|v| in range), so
// an asymmetric quantizer's minimum never rounds above the data.
func f16Floor(v float32) float32 {
	h := tensor.F32ToF16(v)
	if tensor.F16ToF32(h) <= v {
		return tensor.F16ToF32(h)
	}
	switch {
	case h == 0: // +0 above a tiny negative v
		h = 0x8001
	case h&0x8000 == 0:
		h--
	default:
		h++
	}
	return tensor.F16ToF32(h)
}
