package tensor

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Interleaving rows eight at a time and back gives the stored bytes bit
// for bit (every bit of a group block is one of the rows' bits), and each
// value lands where the format's description says (checkQ45Kx8,
// checkQ6Kx8, checkQ8_0x8, checkQ32x8).
func TestInterleaveRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 8))
	for _, f := range []*InterleavedFormat{&Q4_Kx8, &Q5_Kx8, &Q6_Kx8, &Q8_0x8, &Q4_0x8, &Q5_0x8} {
		bf := f.Base.Format()
		for _, tc := range []struct{ rows, cols int }{{8, 256}, {16, 256 * 3}, {24, 256 * 14}} {
			rb, _ := f.Base.RowBytes(tc.cols)
			src := make([]byte, tc.rows*rb)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			gb, ok := f.GroupBytes(tc.cols)
			if !ok {
				t.Fatalf("%s %d columns: no group size", f.Name, tc.cols)
			}
			groups := make([]byte, tc.rows/8*gb)
			if err := InterleaveRows(groups, f, src, tc.cols); err != nil {
				t.Fatal(err)
			}
			nb := tc.cols / f.Block
			// The load's loops (interleaveGroup) write what moving
			// each row's block alone (move, the loop RowBlock and
			// DeinterleaveRows run the other way) writes.
			ref := make([]byte, len(groups))
			for row := range tc.rows {
				for b := range nb {
					f.move(ref[((row/8)*nb+b)*f.Bytes:][:f.Bytes], src[row*rb+b*bf.Bytes:][:bf.Bytes], row%8, true)
				}
			}
			if !bytes.Equal(groups, ref) {
				t.Fatalf("%s %dx%d: InterleaveRows differs from the rows moved one block at a time", f.Name, tc.rows, tc.cols)
			}
			for row := range tc.rows {
				for b := range nb {
					g := groups[((row/8)*nb+b)*f.Bytes:][:f.Bytes]
					blk := src[row*rb+b*bf.Bytes:][:bf.Bytes]
					var err error
					switch f {
					case &Q6_Kx8:
						err = checkQ6Kx8(g, blk, row%8)
					case &Q8_0x8:
						err = checkQ8_0x8(g, blk, row%8)
					case &Q4_0x8, &Q5_0x8:
						err = checkQ32x8(f, g, blk, row%8)
					default:
						err = checkQ45Kx8(f, g, blk, row%8)
					}
					if err != nil {
						t.Fatalf("%s row %d block %d: %v", f.Name, row, b, err)
					}
				}
			}
			back := make([]byte, len(src))
			if err := DeinterleaveRows(back, f, groups, tc.cols); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, src) {
				t.Fatalf("%s %dx%d: the rows back differ from the stored ones", f.Name, tc.rows, tc.cols)
			}
			// A row's blocks read back one by one (RowBlock, as Embed
			// reads a table's row).
			one := make([]byte, bf.Bytes)
			for row := range tc.rows {
				for b := range nb {
					f.RowBlock(one, groups[((row/8)*nb+b)*f.Bytes:][:f.Bytes], row%8)
					if !bytes.Equal(one, src[row*rb+b*bf.Bytes:][:bf.Bytes]) {
						t.Fatalf("%s row %d block %d: RowBlock differs from the stored block", f.Name, row, b)
					}
				}
			}
		}
	}
}

// checkQ45Kx8 reports where the group block g of f (Q4_Kx8 or Q5_Kx8)
// lacks row rr's block blk: the rows' d, dmin, 6-bit scales and mins,
// codes and (Q5_K) fifth bits.
func checkQ45Kx8(f *InterleavedFormat, g, blk []byte, rr int) error {
	bf := f.Base.Format()
	if !bytes.Equal(g[f.Field("d").Offset+2*rr:][:2], blk[bf.Field("d").Offset:][:2]) ||
		!bytes.Equal(g[f.Field("dmin").Offset+2*rr:][:2], blk[bf.Field("dmin").Offset:][:2]) {
		return fmt.Errorf("d or dmin moved wrong")
	}
	for j := range 8 {
		sc, m := ScaleMinK4(j, blk[bf.Field("scales").Offset:])
		sm := g[f.Field("scales").Offset:][:96]
		if x8Value(sm, 8*j+rr) != sc || x8Value(sm, 64+16*(j/2)+2*rr+j%2) != m {
			return fmt.Errorf("scale or min %d moved wrong", j)
		}
	}
	for v := range 128 { // qs byte v: c = v/32, k = v%32/4, i = v%4
		c, k, i := v/32, v%32/4, v%4
		if g[f.Field("qs").Offset+256*c+32*k+4*rr+i] != blk[bf.Field("qs").Offset+v] {
			return fmt.Errorf("code byte %d moved wrong", v)
		}
	}
	if f.Base != Q5_K {
		return nil
	}
	for v := range 256 { // the fifth bit of value v
		c, hi, k, i := v/64, v%64/32, v%32/4, v%4
		want := blk[bf.Field("qh").Offset+4*k+i] >> (2*c + hi) & 1
		if got := g[f.Field("qh").Offset+32*k+4*rr+i] >> (2*c + hi) & 1; got != want {
			return fmt.Errorf("fifth bit of value %d moved wrong", v)
		}
	}
	return nil
}

// checkQ8_0x8 reports where Q8_0x8's group block g lacks row rr's Q8_0
// block blk: its d and each of its 32 codes where Q8_0x8 says.
func checkQ8_0x8(g, blk []byte, rr int) error {
	f, bf := &Q8_0x8, Q8_0.Format()
	if !bytes.Equal(g[f.Field("d").Offset+2*rr:][:2], blk[bf.Field("d").Offset:][:2]) {
		return fmt.Errorf("d moved wrong")
	}
	for v := range 32 {
		if got, want := g[f.Field("qs").Offset+16*(v/2)+2*rr+v%2], blk[bf.Field("qs").Offset+v]; got != want {
			return fmt.Errorf("code of value %d: %d, want %d", v, int8(got), int8(want))
		}
	}
	return nil
}

// checkQ32x8 reports where the group block g of f (Q4_0x8 or Q5_0x8)
// lacks row rr's block blk: its d, and each of its 32 codes (Q5_0's with
// the fifth bit), read from the block as DequantizeRow reads it and from
// the group as the format describes.
func checkQ32x8(f *InterleavedFormat, g, blk []byte, rr int) error {
	bf := f.Base.Format()
	if !bytes.Equal(g[f.Field("d").Offset+2*rr:][:2], blk[bf.Field("d").Offset:][:2]) {
		return fmt.Errorf("d moved wrong")
	}
	qs, gq := blk[bf.Field("qs").Offset:], g[f.Field("qs").Offset:]
	for v := range 32 {
		j, hi := v%16, v/16
		want := qs[j] >> (4 * hi) & 0xF
		k, i := j/4, j%4
		got := gq[32*k+4*rr+i] >> (4 * hi) & 0xF
		if f.Base == Q5_0 {
			qh := uint32(blk[bf.Field("qh").Offset]) | uint32(blk[bf.Field("qh").Offset+1])<<8 |
				uint32(blk[bf.Field("qh").Offset+2])<<16 | uint32(blk[bf.Field("qh").Offset+3])<<24
			want |= uint8(qh>>v&1) << 4
			got |= (g[f.Field("qh").Offset+4*rr+i] >> (2*k + hi) & 1) << 4
		}
		if got != want {
			return fmt.Errorf("code of value %d: %d, want %d", v, got, want)
		}
	}
	return nil
}

// checkQ6Kx8 reports where Q6_Kx8's group block g lacks row rr's Q6_K
// block blk: its d, its 16 scales and its 256 codes, each read from the
// block as DequantizeRow reads it and from the group as Q6_Kx8 describes.
func checkQ6Kx8(g, blk []byte, rr int) error {
	f, bf := &Q6_Kx8, Q6_K.Format()
	if !bytes.Equal(g[f.Field("d").Offset+2*rr:][:2], blk[bf.Field("d").Offset:][:2]) {
		return fmt.Errorf("d moved wrong")
	}
	for j := range 16 {
		if g[f.Field("scales").Offset+16*(j/2)+2*rr+j%2] != blk[bf.Field("scales").Offset+j] {
			return fmt.Errorf("scale %d moved wrong", j)
		}
	}
	ql, qh, qs := blk[bf.Field("ql").Offset:], blk[bf.Field("qh").Offset:], g[f.Field("qs").Offset:]
	for v := range 256 {
		h, k, l := v/128, v%128/32, v%32
		want := ql[64*h+32*(k%2)+l]>>(4*(k/2))&0xF | (qh[32*h+l]>>(2*k)&3)<<4
		u, m, i := v/16, v%16/4, v%4
		var got uint8
		if m < 3 {
			got = qs[96*u+32*m+4*rr+i] & 63
		} else {
			for n := range 3 {
				got |= qs[96*u+32*n+4*rr+i] >> 6 << (2 * n)
			}
		}
		if got != want {
			return fmt.Errorf("code of value %d: %d, want %d", v, got, want)
		}
	}
	return nil
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
	for _, f := range []*InterleavedFormat{&Q4_Kx8, &Q5_Kx8, &Q6_Kx8, &Q8_0x8, &Q4_0x8, &Q5_0x8} {
		bb := f.Base.Format().Bytes
		rb, _ := f.Base.RowBytes(512)
		for _, tc := range []struct {
			name     string
			dst, src int
			cols     int
		}{
			{"cols", f.Bytes, bb * 8, 100},
			{"rows", 2 * f.Bytes, 7 * rb, 512},
			{"short dst", f.Bytes, 8 * rb, 512},
		} {
			if err := InterleaveRows(make([]byte, tc.dst), f, make([]byte, tc.src), tc.cols); err == nil {
				t.Errorf("%s %s: no error", f.Name, tc.name)
			}
		}
		if f.Base.Interleaved() != f || f.Bytes != 8*bb {
			t.Errorf("%s: Interleaved or size wrong", f.Name)
		}
	}
	// A format over another type's rows.
	bad := Q6_Kx8
	bad.Base = Q4_K
	if err := InterleaveRows(make([]byte, 1680), &bad, make([]byte, 144*8), 256); err == nil {
		t.Error("Q6_Kx8 over Q4_K rows: no error")
	}
	bad = Q8_0x8
	bad.Base = Q4_0
	if err := InterleaveRows(make([]byte, 272), &bad, make([]byte, 18*8), 32); err == nil {
		t.Error("Q8_0x8 over Q4_0 rows: no error")
	}
	bad = Q5_0x8
	bad.Base = Q4_0
	if err := InterleaveRows(make([]byte, 176), &bad, make([]byte, 18*8), 32); err == nil {
		t.Error("Q5_0x8 over Q4_0 rows: no error")
	}
	for _, d := range []DType{F32, BF16} {
		if d.Interleaved() != nil {
			t.Errorf("%v: an interleaved format", d)
		}
	}
}

// BenchmarkInterleaveRows moves 64 rows of a 7B model's width (3,584
// values) into groups, as a load does for every matrix of an
// interleaved type; bytes/s are the rows' bytes.
func BenchmarkInterleaveRows(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range []*InterleavedFormat{&Q4_Kx8, &Q5_Kx8, &Q6_Kx8, &Q8_0x8, &Q4_0x8, &Q5_0x8} {
		const rows, cols = 64, 3584
		rb, _ := f.Base.RowBytes(cols)
		gb, _ := f.GroupBytes(cols)
		src := make([]byte, rows*rb)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst := make([]byte, rows/f.Rows*gb)
		b.Run(f.Name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if err := InterleaveRows(dst, f, src, cols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
