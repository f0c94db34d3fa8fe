package codec

import (
	"encoding/binary"
	"fmt"
)

// PackedLen returns the bytes PackBits uses for n codes of the given width.
func PackedLen(n, bits int) int { return (n*bits + 7) / 8 }

// PackBits appends codes (each < 1<<bits, bits in 1..8) to dst as one
// little-endian bit stream, least significant bit first, and returns the
// extended slice. Bits above the width are ignored.
func PackBits(dst []byte, codes []uint8, bits int) []byte {
	if bits == 8 {
		return append(dst, codes...)
	}
	mask := uint64(1)<<bits - 1
	var acc uint64
	nacc := 0
	for _, c := range codes {
		acc |= (uint64(c) & mask) << nacc
		nacc += bits
		if nacc >= 56 {
			for nacc >= 8 {
				dst = append(dst, byte(acc))
				acc >>= 8
				nacc -= 8
			}
		}
	}
	for nacc > 0 {
		dst = append(dst, byte(acc))
		acc >>= 8
		nacc -= 8
	}
	return dst
}

// UnpackBits reads len(dst) codes of the given width (1..8) from src, the
// inverse of PackBits. It fails when src is shorter than PackedLen.
func UnpackBits(dst []uint8, src []byte, bits int) error {
	if bits < 1 || bits > 8 {
		return fmt.Errorf("codec: unpack: width %d not in 1..8", bits)
	}
	if need := PackedLen(len(dst), bits); len(src) < need {
		return fmt.Errorf("codec: unpack: %d codes of %d bits need %d bytes, have %d", len(dst), bits, need, len(src))
	}
	if bits == 8 {
		copy(dst, src)
		return nil
	}
	mask := uint64(1)<<bits - 1
	// Eight codes take exactly bits bytes: unpack whole groups from one
	// 64-bit load, then finish the tail bit by bit.
	i, p := 0, 0
	for ; i+8 <= len(dst) && p+8 <= len(src); i, p = i+8, p+bits {
		w := binary.LittleEndian.Uint64(src[p:])
		g := (*[8]uint8)(dst[i : i+8])
		g[0] = uint8(w & mask)
		g[1] = uint8(w >> bits & mask)
		g[2] = uint8(w >> (2 * bits) & mask)
		g[3] = uint8(w >> (3 * bits) & mask)
		g[4] = uint8(w >> (4 * bits) & mask)
		g[5] = uint8(w >> (5 * bits) & mask)
		g[6] = uint8(w >> (6 * bits) & mask)
		g[7] = uint8(w >> (7 * bits) & mask)
	}
	var acc uint64
	nacc := 0
	for ; i < len(dst); i++ {
		if nacc < bits {
			// Refill whole bytes while they fit in the accumulator.
			for nacc <= 56 && p < len(src) {
				acc |= uint64(src[p]) << nacc
				p++
				nacc += 8
			}
		}
		dst[i] = uint8(acc & mask)
		acc >>= bits
		nacc -= bits
	}
	return nil
}

// unpackLookupAt sets dst[i] to table[c] for the codes c of the given width
// that start at bit off of src: cpu.UnpackLookup for a stream that does not
// start on a byte boundary.
func unpackLookupAt(dst []float32, src []byte, off, bits int, table *[16]float32) {
	mask := uint(1)<<bits - 1
	for i := range dst {
		k := off + i*bits
		w := uint(src[k/8])
		if k%8+bits > 8 {
			w |= uint(src[k/8+1]) << 8
		}
		dst[i] = table[w>>(k%8)&mask]
	}
}
