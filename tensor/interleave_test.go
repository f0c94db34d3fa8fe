package tensor

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Interleaving Q4_K rows eight at a time and back gives the stored bytes
// bit for bit (every bit of the packed scales is a scale's or a min's),
// and each value lands where Q4_Kx8's description says: the group's
// fields read back the rows' d, dmin, 6-bit scales and mins and codes.
func TestInterleaveRoundTrip(t *testing.T) {
	f := &Q4_Kx8
	bf := f.Base.Format()
	r := rand.New(rand.NewPCG(4, 8))
	for _, tc := range []struct{ rows, cols int }{{8, 256}, {16, 256 * 3}, {24, 256 * 14}} {
		rb, _ := Q4_K.RowBytes(tc.cols)
		src := make([]byte, tc.rows*rb)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		gb, ok := f.GroupBytes(tc.cols)
		if !ok {
			t.Fatalf("%d columns: no group size", tc.cols)
		}
		groups := make([]byte, tc.rows/8*gb)
		if err := InterleaveRows(groups, f, src, tc.cols); err != nil {
			t.Fatal(err)
		}
		nb := tc.cols / 256
		for row := range tc.rows {
			for b := range nb {
				g := groups[((row/8)*nb+b)*f.Bytes:]
				blk := src[row*rb+b*bf.Bytes:]
				rr := row % 8
				if !bytes.Equal(g[f.Field("d").Offset+2*rr:][:2], blk[bf.Field("d").Offset:][:2]) ||
					!bytes.Equal(g[f.Field("dmin").Offset+2*rr:][:2], blk[bf.Field("dmin").Offset:][:2]) {
					t.Fatalf("row %d block %d: d or dmin moved wrong", row, b)
				}
				for j := range 8 {
					sc, m := ScaleMinK4(j, blk[bf.Field("scales").Offset:])
					sm := g[f.Field("scales").Offset:][:96]
					if x8Value(sm, 8*j+rr) != sc || x8Value(sm, 64+16*(j/2)+2*rr+j%2) != m {
						t.Fatalf("row %d block %d: scale or min %d moved wrong", row, b, j)
					}
				}
				for v := range 128 { // qs byte v: c = v/32, k = v%32/4, i = v%4
					c, k, i := v/32, v%32/4, v%4
					if g[f.Field("qs").Offset+256*c+32*k+4*rr+i] != blk[bf.Field("qs").Offset+v] {
						t.Fatalf("row %d block %d: code byte %d moved wrong", row, b, v)
					}
				}
			}
		}
		back := make([]byte, len(src))
		if err := DeinterleaveRows(back, f, groups, tc.cols); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("%dx%d: the rows back differ from the stored ones", tc.rows, tc.cols)
		}
	}
}

// The packed scales and mins of Q4_Kx8 hold 128 independent 6-bit values
// in its 96 bytes: setting each in turn to a random value reads back
// every value set, none disturbing another.
func TestX8Values(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 6))
	sm := make([]byte, 96)
	for i := range sm {
		sm[i] = byte(r.Uint32())
	}
	var want [128]uint8
	for i := range want {
		want[i] = uint8(r.IntN(64))
		setX8Value(sm, i, want[i])
	}
	for i, w := range want {
		if g := x8Value(sm, i); g != w {
			t.Fatalf("value %d: %d, want %d", i, g, w)
		}
	}
}

// Shapes that are not whole groups or blocks are refused with the sizes.
func TestInterleaveBadShapes(t *testing.T) {
	f := &Q4_Kx8
	rb, _ := Q4_K.RowBytes(512)
	for _, tc := range []struct {
		name     string
		dst, src int
		cols     int
	}{
		{"cols", 1152, 144 * 8, 100},
		{"rows", 2 * 1152, 7 * rb, 512},
		{"short dst", 1152, 8 * rb, 512},
	} {
		if err := InterleaveRows(make([]byte, tc.dst), f, make([]byte, tc.src), tc.cols); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if Q4_K.Interleaved() != f || Q6_K.Interleaved() != nil {
		t.Error("Interleaved: wrong formats")
	}
}
