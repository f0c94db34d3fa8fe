package tensor

import (
	"encoding/binary"
	"fmt"
)

// An InterleavedFormat lays out groups of Rows rows of a quantized type
// (Base) side by side, block by block, for kernels that take the rows of
// a group at once: a group's block b holds the Rows rows' block b, in
// Bytes bytes, as the named Fields at fixed offsets. A group is its nb
// blocks in order (nb = cols / Block), groups one after another. It is a
// layout a backend makes at load from the stored rows (InterleaveRows),
// never one a file holds, and it goes back to them bit for bit
// (DeinterleaveRows).
type InterleavedFormat struct {
	Base  DType
	Name  string
	Rows  int // rows per group
	Block int // values per row and block (Base's)
	Bytes int // bytes per group and block
	// Fields are the group block's fields; see the format's comment for
	// the order of rows and values within each.
	Fields []QuantField
}

// Field returns the named field; it panics on a name the format lacks
// (a programming error).
func (f *InterleavedFormat) Field(name string) QuantField {
	for _, fl := range f.Fields {
		if fl.Name == name {
			return fl
		}
	}
	panic("tensor: format " + f.Name + " has no field " + name)
}

// Q4_Kx8 is Q4_K with eight rows interleaved, for the AVX2 kernels, which
// take one 256-bit vector of 4-bit codes as eight rows' four bytes each: a
// 32-bit lane a row. A group block (1,152 bytes, the rows' 8 x 144: the
// layout takes no more memory than the rows) holds, for rows r = 0..7 of
// the group:
//
//   - "d", "dmin": the rows' f16 scale and min scale, row r at element r;
//   - "scales": the rows' 6-bit sub-block scales and mins, 128 values v
//     in 96 bytes: scale j (0..7) of row r is v[8j + r], min 2k+i (k
//     0..3, i 0..1) of row r is v[64 + 16k + 2r + i] (a row's two mins of
//     a 64-value part in one 16-bit lane once widened); byte p (0..63)
//     holds v[p] in its low 6 bits and the low 2 bits of v[64 + p] in its
//     top 2, byte 64 + q (q 0..31) the top 4 bits of v[64 + q] in its low
//     nibble and those of v[96 + q] in its high one, so that a few vector
//     operations unpack the eight rows' scales and mins together;
//   - "qs": the codes, byte 32c + 4k + i of row r's qs (c 0..3, k 0..7,
//     i 0..3; its low nibbles are values 64c + 4k + i, its high ones
//     64c + 32 + 4k + i) at byte 256c + 32k + 4r + i.
var Q4_Kx8 = InterleavedFormat{
	Base: Q4_K, Name: "Q4_Kx8", Rows: 8, Block: 256, Bytes: 1152,
	Fields: []QuantField{{"d", FieldF16, 0, 8}, {"dmin", FieldF16, 16, 8}, {"scales", FieldU8, 32, 96}, {"qs", FieldU8, 128, 1024}},
}

// Q5_Kx8 is Q5_K with eight rows interleaved, for the same kernels as
// Q4_Kx8 with a fifth bit a code: a group block (1,408 bytes, the rows' 8
// x 176) holds "d", "dmin", "scales" and "qs" as Q4_Kx8 does (Q5_K's low 4
// bits of each code where Q4_K has its code), and
//
//   - "qh": the codes' fifth bits, byte 4k + i of row r's qh (k 0..7, i
//     0..3; its bit 2c the fifth bit of value 64c + 4k + i, bit 2c+1 that
//     of value 64c + 32 + 4k + i) at byte 32k + 4r + i: one vector holds
//     the fifth bits of the eight vectors of codes "qs" has at 32k.
var Q5_Kx8 = InterleavedFormat{
	Base: Q5_K, Name: "Q5_Kx8", Rows: 8, Block: 256, Bytes: 1408,
	Fields: []QuantField{{"d", FieldF16, 0, 8}, {"dmin", FieldF16, 16, 8}, {"scales", FieldU8, 32, 96}, {"qs", FieldU8, 128, 1024}, {"qh", FieldU8, 1152, 256}},
}

// Q6_Kx8 is Q6_K with eight rows interleaved, for the AVX2 kernels, which
// take one 256-bit vector of 6-bit codes as eight rows' four values each
// (a 32-bit lane a row), three such vectors holding a fourth one's codes
// in their top bits. A group block (1,680 bytes, the rows' 8 x 210) holds,
// for rows r = 0..7 of the group:
//
//   - "d": the rows' f16 scales, row r at element r;
//   - "scales": the rows' signed 8-bit scales of their 16-value
//     sub-blocks, scale j (0..15) of row r at byte 16(j/2) + 2r + j%2 (a
//     row's scales of sub-blocks 2k and 2k+1 in one 16-bit lane once
//     widened);
//   - "qs": the 6-bit codes (0..63, the value plus 32), sub-block u
//     (values 16u..16u+15, u 0..15) in bytes 96u..96u+95: byte
//     96u + 32m + 4r + i (m 0..2, i 0..3) holds the code of row r's value
//     16u + 4m + i in its low 6 bits and bits 2m and 2m+1 of the code of
//     its value 16u + 12 + i in its top 2, so that one mask gives each of
//     three vectors' codes and three masks, shifts and two ORs the fourth's.
var Q6_Kx8 = InterleavedFormat{
	Base: Q6_K, Name: "Q6_Kx8", Rows: 8, Block: 256, Bytes: 1680,
	Fields: []QuantField{{"d", FieldF16, 0, 8}, {"scales", FieldI8, 16, 128}, {"qs", FieldU8, 144, 1536}},
}

// Q8_0x8 is Q8_0 with eight rows interleaved, for the AVX2 kernels, which
// widen 16 bytes of codes to one 256-bit vector of eight rows' two values
// each (a 32-bit lane a row, VPMADDWD's pair against one pair of
// activations broadcast). A group block (272 bytes, the rows' 8 x 34)
// holds, for rows r = 0..7 of the group:
//
//   - "d": the rows' f16 scales, row r at element r (one 16-byte load);
//   - "qs": the signed 8-bit codes, row r's values 2p and 2p+1 (p 0..15)
//     at bytes 16p + 2r and 16p + 2r + 1.
var Q8_0x8 = InterleavedFormat{
	Base: Q8_0, Name: "Q8_0x8", Rows: 8, Block: 32, Bytes: 272,
	Fields: []QuantField{{"d", FieldF16, 0, 8}, {"qs", FieldI8, 16, 256}},
}

// Q5_0x8 is Q5_0 with eight rows interleaved, for the AVX2 kernels, which
// take one 256-bit vector of 4-bit codes as eight rows' four bytes each (a
// 32-bit lane a row: its low nibbles four values, its high ones the four
// 16 on), and move each code's fifth bit to bit 4 from one vector of the
// rows' fifth bits that serves all four vectors of codes. A group block
// (176 bytes, the rows' 8 x 22) holds, for rows r = 0..7 of the group:
//
//   - "d": the rows' f16 scales, row r at element r;
//   - "qs": the codes' low 4 bits, byte 4k + i of row r's qs (k 0..3, i
//     0..3; its low nibble is value 4k + i, its high one value
//     16 + 4k + i) at byte 32k + 4r + i;
//   - "qh": the fifth bits, byte 4r + i holding at bit 2k that of row r's
//     value 4k + i and at bit 2k + 1 that of its value 16 + 4k + i (so
//     that, beside the codes at 32k, one 16-bit shift and a mask move
//     each byte's bits to bit 4).
var Q5_0x8 = InterleavedFormat{
	Base: Q5_0, Name: "Q5_0x8", Rows: 8, Block: 32, Bytes: 176,
	Fields: []QuantField{{"d", FieldF16, 0, 8}, {"qs", FieldU8, 16, 128}, {"qh", FieldU8, 144, 32}},
}

// Q4_0x8 is Q4_0 with eight rows interleaved as Q5_0x8 interleaves Q5_0,
// without the fifth bits: a group block (144 bytes, the rows' 8 x 18)
// holds "d" and "qs" as Q5_0x8 does.
var Q4_0x8 = InterleavedFormat{
	Base: Q4_0, Name: "Q4_0x8", Rows: 8, Block: 32, Bytes: 144,
	Fields: []QuantField{{"d", FieldF16, 0, 8}, {"qs", FieldU8, 16, 128}},
}

// Interleaved returns the interleaved format of rows of d, nil where there
// is none.
func (d DType) Interleaved() *InterleavedFormat {
	switch d {
	case Q8_0:
		return &Q8_0x8
	case Q4_0:
		return &Q4_0x8
	case Q5_0:
		return &Q5_0x8
	case Q4_K:
		return &Q4_Kx8
	case Q5_K:
		return &Q5_Kx8
	case Q6_K:
		return &Q6_Kx8
	}
	return nil
}

// GroupBytes returns the bytes of one group of f.Rows rows of cols values
// (a whole number of blocks), and false where cols is not.
func (f *InterleavedFormat) GroupBytes(cols int) (int, bool) {
	if cols <= 0 || cols%f.Block != 0 {
		return 0, false
	}
	return cols / f.Block * f.Bytes, true
}

// InterleaveRows writes the groups of f.Rows rows of cols values in src
// (rows of f.Base, one after another: a multiple of f.Rows of them) into
// dst, which must hold len(src) / rowBytes / f.Rows groups.
func InterleaveRows(dst []byte, f *InterleavedFormat, src []byte, cols int) error {
	return interleave(dst, f, src, cols, true)
}

// DeinterleaveRows is InterleaveRows' inverse: the rows of the groups in
// src, as f.Base stores them, into dst.
func DeinterleaveRows(dst []byte, f *InterleavedFormat, src []byte, cols int) error {
	return interleave(src, f, dst, cols, false)
}

// RowBlock writes row r's block (as f.Base stores it) of the group block
// g into dst (f.Base's block bytes).
func (f *InterleavedFormat) RowBlock(dst, g []byte, r int) {
	f.move(g, dst, r, false)
}

// move moves row r's block blk (as f.Base stores it) into (in) or out of
// the group block g.
func (f *InterleavedFormat) move(g, blk []byte, r int, in bool) {
	switch f.Base {
	case Q8_0:
		moveQ8_0(g, blk, r, in)
	case Q4_0:
		moveQ32(&q4_0Off, g, blk, r, in)
	case Q5_0:
		moveQ32(&q5_0Off, g, blk, r, in)
	case Q6_K:
		moveQ6K(g, blk, r, in)
	case Q5_K:
		moveQ45K(&q5kOff, g, blk, r, in)
	default:
		moveQ45K(&q4kOff, g, blk, r, in)
	}
}

// interleave moves the rows in rows to and from the groups in groups (to
// them where in is set).
func interleave(groups []byte, f *InterleavedFormat, rows []byte, cols int, in bool) error {
	bf := f.Base.Format()
	gb, ok := f.GroupBytes(cols)
	if f.Base.Interleaved() != f {
		return fmt.Errorf("tensor: %s: no interleaving of %v rows", f.Name, f.Base)
	}
	if !ok || bf.Block != f.Block {
		return fmt.Errorf("tensor: %s: rows of %d values are not whole blocks of %d", f.Name, cols, f.Block)
	}
	rb := cols / bf.Block * bf.Bytes
	if len(rows)%(rb*f.Rows) != 0 {
		return fmt.Errorf("tensor: %s: %d bytes are not whole groups of %d rows of %d bytes", f.Name, len(rows), f.Rows, rb)
	}
	ng := len(rows) / (rb * f.Rows)
	if len(groups) < ng*gb {
		return fmt.Errorf("tensor: %s: %d groups need %d bytes, have %d", f.Name, ng, ng*gb, len(groups))
	}
	nb := cols / f.Block
	if in {
		for g := range ng {
			interleaveGroup(f, groups[g*gb:(g+1)*gb], rows[g*f.Rows*rb:(g+1)*f.Rows*rb], nb, rb)
		}
		return nil
	}
	for g := range ng {
		for b := range nb {
			gblk := groups[(g*nb+b)*f.Bytes : (g*nb+b+1)*f.Bytes]
			for r := range f.Rows {
				row := rows[(g*f.Rows+r)*rb+b*bf.Bytes : (g*f.Rows+r)*rb+(b+1)*bf.Bytes]
				f.move(gblk, row, r, false)
			}
		}
	}
	return nil
}

// interleaveGroup writes the group g (nb blocks of f) of the f.Rows rows
// in rows (rb bytes each): the loop a load runs over every byte of an
// interleaved type's matrices, so each format has one of its own, moving
// whole words with the offsets looked up once (a copy call per field, as
// move makes, took seconds for a 7B model).
func interleaveGroup(f *InterleavedFormat, g, rows []byte, nb, rb int) {
	switch f.Base {
	case Q8_0:
		if q8_0Const {
			interleaveQ8_0(g, rows, nb, rb)
			return
		}
	case Q4_0:
		interleaveQ32(&q4_0Off, f.Bytes, g, rows, nb, rb)
		return
	case Q5_0:
		interleaveQ32(&q5_0Off, f.Bytes, g, rows, nb, rb)
		return
	case Q6_K:
		interleaveQ6K(g, rows, nb, rb)
		return
	case Q5_K:
		interleaveQ45K(&q5kOff, f.Bytes, g, rows, nb, rb)
		return
	case Q4_K:
		interleaveQ45K(&q4kOff, f.Bytes, g, rows, nb, rb)
		return
	}
	bb := f.Base.Format().Bytes
	for b := range nb {
		for r := range f.Rows {
			f.move(g[b*f.Bytes:(b+1)*f.Bytes], rows[r*rb+b*bb:r*rb+(b+1)*bb], r, true)
		}
	}
}

// q45kOffsets are the field offsets moveQ45K reads: a group block's
// (Q4_Kx8, Q5_Kx8) and a row block's (Q4_K, Q5_K), looked up once; the qh
// offsets are -1 for Q4_K.
type q45kOffsets struct{ d, dmin, scales, qs, qh, bd, bdmin, bsc, bqs, bqh int }

var q4kOff, q5kOff = q45kOff(&Q4_Kx8), q45kOff(&Q5_Kx8)

func q45kOff(f *InterleavedFormat) q45kOffsets {
	bf := f.Base.Format()
	o := q45kOffsets{f.Field("d").Offset, f.Field("dmin").Offset, f.Field("scales").Offset, f.Field("qs").Offset, -1,
		bf.Field("d").Offset, bf.Field("dmin").Offset, bf.Field("scales").Offset, bf.Field("qs").Offset, -1}
	if f.Base == Q5_K {
		o.qh, o.bqh = f.Field("qh").Offset, bf.Field("qh").Offset
	}
	return o
}

// moveQ45K moves row r's Q4_K or Q5_K block blk into (in) or out of the
// group block g of Q4_Kx8 or Q5_Kx8 (o's).
func moveQ45K(o *q45kOffsets, g, blk []byte, r int, in bool) {
	if in {
		copy(g[o.d+2*r:o.d+2*r+2], blk[o.bd:o.bd+2])
		copy(g[o.dmin+2*r:o.dmin+2*r+2], blk[o.bdmin:o.bdmin+2])
		for j := range 8 {
			sc, m := ScaleMinK4(j, blk[o.bsc:o.bsc+12])
			setX8Value(g[o.scales:o.scales+96], 8*j+r, sc)
			setX8Value(g[o.scales:o.scales+96], 64+16*(j/2)+2*r+j%2, m)
		}
	} else {
		copy(blk[o.bd:o.bd+2], g[o.d+2*r:o.d+2*r+2])
		copy(blk[o.bdmin:o.bdmin+2], g[o.dmin+2*r:o.dmin+2*r+2])
		var sc, m [8]uint8
		for j := range 8 {
			sc[j], m[j] = x8Value(g[o.scales:o.scales+96], 8*j+r), x8Value(g[o.scales:o.scales+96], 64+16*(j/2)+2*r+j%2)
		}
		packScaleMinK4(blk[o.bsc:o.bsc+12], &sc, &m)
	}
	for k := range 8 {
		for c := range 4 {
			gq := g[o.qs+256*c+32*k+4*r : o.qs+256*c+32*k+4*r+4]
			bq := blk[o.bqs+32*c+4*k : o.bqs+32*c+4*k+4]
			moveBytes(gq, bq, in)
		}
		if o.qh < 0 {
			continue
		}
		gh := g[o.qh+32*k+4*r : o.qh+32*k+4*r+4]
		bh := blk[o.bqh+4*k : o.bqh+4*k+4]
		moveBytes(gh, bh, in)
	}
}

// q8_0Off are the field offsets moveQ8_0 reads: a group block's (Q8_0x8)
// and a row block's (Q8_0), looked up once.
var q8_0Off = struct{ d, qs, bd, bqs int }{Q8_0x8.Field("d").Offset, Q8_0x8.Field("qs").Offset,
	Q8_0.Format().Field("d").Offset, Q8_0.Format().Field("qs").Offset}

// q8_0Const reports whether q8_0Off holds the offsets interleaveQ8_0 has
// as constants (the scales first, then the codes, in both layouts).
var q8_0Const = q8_0Off == struct{ d, qs, bd, bqs int }{0, 16, 0, 2} && Q8_0x8.Bytes == 272 && Q8_0.Format().Bytes == 34

// interleaveQ8_0 is interleaveGroup for Q8_0 rows into Q8_0x8 (what a
// load runs over every Q8_0 matrix): per block, the eight rows' scales as
// two words, and their codes four pairs a row at a time, a 4x4 transpose
// of 16-bit pairs in 64-bit words making each 8-byte half of a group
// line (four rows' pair p).
func interleaveQ8_0(g, rows []byte, nb, rb int) {
	le := binary.LittleEndian
	var x [8]*[34]byte
	for b := range nb {
		gb := (*[272]byte)(g[b*272:])
		for r := range x {
			x[r] = (*[34]byte)(rows[r*rb+b*34:])
		}
		for h := range 2 {
			y := x[4*h : 4*h+4 : 4*h+4]
			le.PutUint64(gb[8*h:], uint64(le.Uint16(y[0][0:]))|uint64(le.Uint16(y[1][0:]))<<16|
				uint64(le.Uint16(y[2][0:]))<<32|uint64(le.Uint16(y[3][0:]))<<48)
			for k := range 4 {
				o0, o1, o2, o3 := transpose16(le.Uint64(y[0][2+8*k:]), le.Uint64(y[1][2+8*k:]), le.Uint64(y[2][2+8*k:]), le.Uint64(y[3][2+8*k:]))
				le.PutUint64(gb[16+16*(4*k)+8*h:], o0)
				le.PutUint64(gb[16+16*(4*k+1)+8*h:], o1)
				le.PutUint64(gb[16+16*(4*k+2)+8*h:], o2)
				le.PutUint64(gb[16+16*(4*k+3)+8*h:], o3)
			}
		}
	}
}

// transpose16 transposes four words of four 16-bit lanes (lane 0 the low
// bits): word j of the result holds lane j of a, b, c and d, in order.
func transpose16(a, b, c, d uint64) (o0, o1, o2, o3 uint64) {
	const m = 0x0000FFFF0000FFFF
	abLo, abHi := a&m|(b&m)<<16, a>>16&m|b&^m // a0 b0 a2 b2, a1 b1 a3 b3
	cdLo, cdHi := c&m|(d&m)<<16, c>>16&m|d&^m
	const lo = 0x00000000FFFFFFFF
	return abLo&lo | cdLo<<32, abHi&lo | cdHi<<32, abLo>>32 | cdLo&^lo, abHi>>32 | cdHi&^lo
}

// interleaveQ45K is interleaveGroup for Q4_K or Q5_K rows into Q4_Kx8 or
// Q5_Kx8 (o's; gbytes a group block's bytes): per block, each row's d,
// dmin and codes (and fifth bits) moved four bytes at a time, its scales
// and mins unpacked into the 128 values, which are then packed into the
// 96 bytes once for the eight rows.
func interleaveQ45K(o *q45kOffsets, gbytes int, g, rows []byte, nb, rb int) {
	le := binary.LittleEndian
	bb := rb / nb
	var v [128]uint8
	for b := range nb {
		gblk := g[b*gbytes : (b+1)*gbytes]
		gq := (*[1024]byte)(gblk[o.qs:])
		for r := range 8 {
			blk := rows[r*rb+b*bb : r*rb+(b+1)*bb]
			le.PutUint16(gblk[o.d+2*r:], le.Uint16(blk[o.bd:]))
			le.PutUint16(gblk[o.dmin+2*r:], le.Uint16(blk[o.bdmin:]))
			sc := blk[o.bsc : o.bsc+12]
			for j := range 8 {
				s, m := scaleMin(j, sc)
				v[8*j+r], v[64+16*(j/2)+2*r+j%2] = s, m
			}
			qs := (*[128]byte)(blk[o.bqs:])
			for c := range 4 {
				for k := range 8 {
					le.PutUint32(gq[256*c+32*k+4*r:], le.Uint32(qs[32*c+4*k:]))
				}
			}
			if o.qh >= 0 {
				gh, qh := (*[256]byte)(gblk[o.qh:]), (*[32]byte)(blk[o.bqh:])
				for k := range 8 {
					le.PutUint32(gh[32*k+4*r:], le.Uint32(qh[4*k:]))
				}
			}
		}
		sm := (*[96]byte)(gblk[o.scales:])
		for p := range 64 {
			sm[p] = v[p]&63 | v[64+p]<<6
		}
		for q := range 32 {
			sm[64+q] = v[64+q]>>2&0xF | v[96+q]>>2<<4
		}
	}
}

// interleaveQ6K is interleaveGroup for Q6_K rows into Q6_Kx8: per row,
// half (h) and four-byte word j of ql's and qh's 32-byte lines, the codes
// of values 128h + 32k + 4j + i (i 0..3) for the four k at once (ql's
// low or high nibbles, qh's bits 2k), which are sub-block 8h + 2k + j/4's
// word j%4; then per sub-block three words written, each with two bits
// of the fourth's codes on top.
func interleaveQ6K(g, rows []byte, nb, rb int) {
	le := binary.LittleEndian
	o := &q6kOff
	gbytes := Q6_Kx8.Bytes
	const m4, m2 = 0x0F0F0F0F, 0x03030303
	for b := range nb {
		gblk := g[b*gbytes : (b+1)*gbytes]
		qs := (*[1536]byte)(gblk[o.qs:])
		for r := range 8 {
			blk := rows[r*rb+b*210 : r*rb+(b+1)*210]
			le.PutUint16(gblk[o.d+2*r:], le.Uint16(blk[o.bd:]))
			for j := range 8 {
				le.PutUint16(gblk[o.scales+16*j+2*r:], le.Uint16(blk[o.bsc+2*j:]))
			}
			ql, qh := (*[128]byte)(blk[o.bql:]), (*[64]byte)(blk[o.bqh:])
			put := func(u int, c *[4]uint32) {
				q := qs[96*u : 96*u+96 : 96*u+96]
				le.PutUint32(q[4*r:], c[0]|(c[3]&m2)<<6)
				le.PutUint32(q[32+4*r:], c[1]|(c[3]>>2&m2)<<6)
				le.PutUint32(q[64+4*r:], c[2]|(c[3]>>4&m2)<<6)
			}
			for h := range 2 {
				for jj := range 2 {
					var c0, c1, c2, c3 [4]uint32
					for m := range 4 {
						j := 4*jj + m
						a, b, q := le.Uint32(ql[64*h+4*j:]), le.Uint32(ql[64*h+32+4*j:]), le.Uint32(qh[32*h+4*j:])
						c0[m] = a&m4 | (q&m2)<<4
						c1[m] = b&m4 | (q>>2&m2)<<4
						c2[m] = a>>4&m4 | (q>>4&m2)<<4
						c3[m] = b>>4&m4 | (q>>6&m2)<<4
					}
					put(8*h+jj, &c0)
					put(8*h+2+jj, &c1)
					put(8*h+4+jj, &c2)
					put(8*h+6+jj, &c3)
				}
			}
		}
	}
}

// moveQ8_0 moves row r's Q8_0 block blk into (in) or out of the group
// block g of Q8_0x8.
func moveQ8_0(g, blk []byte, r int, in bool) {
	o := &q8_0Off
	gd, bd := g[o.d+2*r:o.d+2*r+2], blk[o.bd:o.bd+2]
	moveBytes(gd, bd, in)
	for p := range 16 {
		gq, bq := g[o.qs+16*p+2*r:o.qs+16*p+2*r+2], blk[o.bqs+2*p:o.bqs+2*p+2]
		moveBytes(gq, bq, in)
	}
}

// q6kOffsets are the field offsets moveQ6K reads: a group block's
// (Q6_Kx8) and a row block's (Q6_K), looked up once.
type q6kOffsets struct{ d, scales, qs, bd, bsc, bql, bqh int }

var q6kOff = func() q6kOffsets {
	f, bf := &Q6_Kx8, Q6_K.Format()
	return q6kOffsets{f.Field("d").Offset, f.Field("scales").Offset, f.Field("qs").Offset,
		bf.Field("d").Offset, bf.Field("scales").Offset, bf.Field("ql").Offset, bf.Field("qh").Offset}
}()

// moveQ6K moves row r's Q6_K block blk into (in) or out of the group
// block g of Q6_Kx8: the 256 6-bit codes through an array, in Q6_K's
// order (value 128h + 32k + l: its low 4 bits in ql byte 64h + 32(k%2) +
// l, low nibble for k < 2, high for the others; its top 2 at bits 2k of
// qh byte 32h + l).
func moveQ6K(g, blk []byte, r int, in bool) {
	o := &q6kOff
	var c [256]uint8
	ql, qh := blk[o.bql:o.bql+128], blk[o.bqh:o.bqh+64]
	qs := g[o.qs : o.qs+1536]
	if in {
		copy(g[o.d+2*r:o.d+2*r+2], blk[o.bd:o.bd+2])
		for j := range 16 {
			g[o.scales+16*(j/2)+2*r+j%2] = blk[o.bsc+j]
		}
		for h := range 2 {
			for l := range 32 {
				a, b, hb := ql[64*h+l], ql[64*h+32+l], qh[32*h+l]
				v := c[128*h+l:]
				v[0] = a&0xF | hb&3<<4
				v[32] = b&0xF | hb>>2&3<<4
				v[64] = a>>4 | hb>>4&3<<4
				v[96] = b>>4 | hb>>6&3<<4
			}
		}
		for u := range 16 {
			for i := range 4 {
				top := c[16*u+12+i]
				for m := range 3 {
					qs[96*u+32*m+4*r+i] = c[16*u+4*m+i] | (top>>(2*m)&3)<<6
				}
			}
		}
		return
	}
	copy(blk[o.bd:o.bd+2], g[o.d+2*r:o.d+2*r+2])
	for j := range 16 {
		blk[o.bsc+j] = g[o.scales+16*(j/2)+2*r+j%2]
	}
	for u := range 16 {
		for i := range 4 {
			var top uint8
			for m := range 3 {
				q := qs[96*u+32*m+4*r+i]
				c[16*u+4*m+i] = q & 63
				top |= q >> 6 << (2 * m)
			}
			c[16*u+12+i] = top
		}
	}
	for h := range 2 {
		for l := range 32 {
			v := c[128*h+l:]
			ql[64*h+l] = v[0]&0xF | v[64]<<4
			ql[64*h+32+l] = v[32]&0xF | v[96]<<4
			qh[32*h+l] = v[0]>>4 | v[32]>>4<<2 | v[64]>>4<<4 | v[96]>>4<<6
		}
	}
}

// x8Value returns value i (0..127) of a Q4_Kx8 group block's 96 bytes of
// packed scales and mins (see Q4_Kx8).
func x8Value(sm []byte, i int) uint8 {
	if i < 64 {
		return sm[i] & 63
	}
	if q := i - 64; q < 32 {
		return sm[q]>>6 | (sm[64+q]&0xF)<<2
	}
	q := i - 96
	return sm[32+q]>>6 | (sm[64+q]>>4)<<2
}

// setX8Value sets value i (0..127, 6 bits) of a Q4_Kx8 group block's
// packed scales and mins, leaving the others.
func setX8Value(sm []byte, i int, v uint8) {
	if i < 64 {
		sm[i] = sm[i]&0xC0 | v&63
		return
	}
	if q := i - 64; q < 32 {
		sm[q] = sm[q]&63 | (v&3)<<6
		sm[64+q] = sm[64+q]&0xF0 | v>>2&0xF
		return
	}
	q := i - 96
	sm[32+q] = sm[32+q]&63 | (v&3)<<6
	sm[64+q] = sm[64+q]&0x0F | (v>>2&0xF)<<4
}

// packScaleMinK4 packs eight 6-bit scales and mins into a Q4_K/Q5_K
// block's 12 scale bytes, as ScaleMinK4 reads them (every bit of the 12
// bytes is one of theirs, so packing what ScaleMinK4 read gives the bytes
// back).
func packScaleMinK4(q []byte, sc, m *[8]uint8) {
	for j := range 4 {
		q[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		q[j+4] = m[j]&63 | (m[j+4]>>4)<<6
		q[j+8] = sc[j+4]&0xF | (m[j+4]&0xF)<<4
	}
}

// q32Offsets are the field offsets moveQ32 and interleaveQ32 read: a group
// block's (Q4_0x8, Q5_0x8) and a row block's (Q4_0, Q5_0), looked up once;
// the qh offsets are -1 for Q4_0.
type q32Offsets struct{ d, qs, qh, bd, bqs, bqh int }

var q4_0Off, q5_0Off = q32Off(&Q4_0x8), q32Off(&Q5_0x8)

func q32Off(f *InterleavedFormat) q32Offsets {
	bf := f.Base.Format()
	o := q32Offsets{f.Field("d").Offset, f.Field("qs").Offset, -1, bf.Field("d").Offset, bf.Field("qs").Offset, -1}
	if f.Base == Q5_0 {
		o.qh, o.bqh = f.Field("qh").Offset, bf.Field("qh").Offset
	}
	return o
}

// q5_0Planes returns a Q5_0 block's fifth bits (qh as a little-endian
// word: bit j that of value j) as Q5_0x8 lays out a row's four bytes of
// them: bit 2k of byte i that of value 4k + i, bit 2k + 1 that of value
// 16 + 4k + i.
func q5_0Planes(h uint32) uint32 {
	var v uint32
	for j := range 16 {
		at := 8*(j%4) + 2*(j/4)
		v |= (h>>j&1)<<at | (h>>(16+j)&1)<<(at+1)
	}
	return v
}

// q5_0Bits is q5_0Planes' inverse.
func q5_0Bits(v uint32) uint32 {
	var h uint32
	for j := range 16 {
		at := 8*(j%4) + 2*(j/4)
		h |= (v>>at&1)<<j | (v>>(at+1)&1)<<(16+j)
	}
	return h
}

// moveQ32 moves row r's Q4_0 or Q5_0 block blk into (in) or out of the
// group block g of Q4_0x8 or Q5_0x8 (o's).
func moveQ32(o *q32Offsets, g, blk []byte, r int, in bool) {
	le := binary.LittleEndian
	gd, bd := g[o.d+2*r:o.d+2*r+2], blk[o.bd:o.bd+2]
	moveBytes(gd, bd, in)
	for k := range 4 {
		gq, bq := g[o.qs+32*k+4*r:o.qs+32*k+4*r+4], blk[o.bqs+4*k:o.bqs+4*k+4]
		moveBytes(gq, bq, in)
	}
	if o.qh < 0 {
		return
	}
	if in {
		le.PutUint32(g[o.qh+4*r:], q5_0Planes(le.Uint32(blk[o.bqh:])))
	} else {
		le.PutUint32(blk[o.bqh:], q5_0Bits(le.Uint32(g[o.qh+4*r:])))
	}
}

// interleaveQ32 is interleaveGroup for Q4_0 or Q5_0 rows into Q4_0x8 or
// Q5_0x8 (o's; gbytes a group block's bytes): per block and row, the
// scale and codes moved as words, the fifth bits spread once.
func interleaveQ32(o *q32Offsets, gbytes int, g, rows []byte, nb, rb int) {
	le := binary.LittleEndian
	bb := rb / nb
	for b := range nb {
		gblk := g[b*gbytes : (b+1)*gbytes]
		for r := range 8 {
			blk := rows[r*rb+b*bb : r*rb+(b+1)*bb]
			le.PutUint16(gblk[o.d+2*r:], le.Uint16(blk[o.bd:]))
			qs := (*[16]byte)(blk[o.bqs:])
			for k := range 4 {
				le.PutUint32(gblk[o.qs+32*k+4*r:], le.Uint32(qs[4*k:]))
			}
			if o.qh >= 0 {
				le.PutUint32(gblk[o.qh+4*r:], q5_0Planes(le.Uint32(blk[o.bqh:])))
			}
		}
	}
}

// moveBytes copies a row's bytes b into their place g in a group block
// (in), or back out of it: the one step every move* function repeats.
func moveBytes(g, b []byte, in bool) {
	if in {
		copy(g, b)
	} else {
		copy(b, g)
	}
}
