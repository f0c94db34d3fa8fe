package codec

import (
	"math/rand/v2"
	"testing"
)

func TestPackBitsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for bits := 1; bits <= 8; bits++ {
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000} {
			codes := make([]uint8, n)
			for i := range codes {
				codes[i] = uint8(r.IntN(1 << bits))
			}
			p := PackBits([]byte{0xAA}, codes, bits)
			if len(p) != 1+PackedLen(n, bits) {
				t.Fatalf("b=%d n=%d: packed %d bytes, want %d", bits, n, len(p)-1, PackedLen(n, bits))
			}
			got := make([]uint8, n)
			if err := UnpackBits(got, p[1:], bits); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != codes[i] {
					t.Fatalf("b=%d n=%d: code %d = %d, want %d", bits, n, i, got[i], codes[i])
				}
			}
			if n > 0 {
				if err := UnpackBits(got, p[1:len(p)-1], bits); err == nil {
					t.Errorf("b=%d n=%d: short input accepted", bits, n)
				}
			}
		}
	}
	// Known layout: LSB first.
	if p := PackBits(nil, []uint8{1, 2, 3, 0}, 2); len(p) != 1 || p[0] != 0b00111001 {
		t.Errorf("PackBits 2-bit = %08b, want 00111001", p)
	}
	if err := UnpackBits(make([]uint8, 1), []byte{0}, 9); err == nil {
		t.Error("width 9 accepted")
	}
}
