package codec

import (
	"encoding/binary"
	"fmt"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// The entropy-coded stream's layout 2: rans2Lanes rANS lanes (32-bit
// states, 16-bit renormalization as layout 1) sharing one word stream,
// with frequencies of rans2ScaleBits bits, so that one packed 32-bit
// entry per slot (rans2Entry) gives a symbol, its frequency and the
// state's offset in one lookup, and a decoder's lanes fill two AVX-512
// (four AVX2) registers whose dependency chains overlap. Symbol k is
// lane k mod rans2Lanes's; after decoding a group of rans2Lanes symbols,
// the lanes below 2^16 read the next word in lane order, as layout 1's.
//
// Thirty-two 32-bit states would cost four times layout 1's eight; what
// pays for them is that a lane's encoder starts at 2^16 plus a payload
// instead of 2^16: lane i < min(M, rans2Lanes) carries the fp16 bits of
// stored component mean i, which its decoder finds in its final state
// (2^16 + bits), so the means section holds only the means past them.
// The other lanes start, and must end, at 2^16.
//
// The stream starts with the lanes' final states: a 32-bit little-endian
// mask whose bit i is set when lane i's state needs 4 bytes (it is 2^24 or
// more), then each lane's state, lane 0 first, little-endian in 3 or 4
// bytes (a state in [2^16, 2^32) is about as likely in either half of its
// bits, so this saves about 3 bits a lane over 4 bytes each); then the
// 16-bit words, little-endian, in decode order.
const (
	rans2Lanes     = 32
	rans2ScaleBits = 12
	rans2Mask      = 1<<rans2ScaleBits - 1
)

// rans2Hidden returns how many of m stored means the lanes carry.
func rans2Hidden(m int) int { return min(m, rans2Lanes) }

// rans2Encode codes syms, symbol k under tabs[k/per] (layout 2's tables),
// with lane i starting at 2^16 + hide[i], and appends the stream to dst,
// using buf (grown as needed, returned) as scratch.
func rans2Encode(dst, buf []byte, syms []uint8, tabs []*ransTable, per int, hide []uint16) ([]byte, []byte) {
	need := 4 + 4*rans2Lanes + 2*len(syms)
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	p := need
	var x [rans2Lanes]uint32
	for i := range x {
		x[i] = ransWordL
		if i < len(hide) {
			x[i] += uint32(hide[i])
		}
	}
	for k := len(syms) - 1; k >= 0; k-- {
		t, s := tabs[k/per], syms[k]
		x[k%rans2Lanes], p = ransPut(x[k%rans2Lanes], t.freq[s], t.start[s], rans2ScaleBits, buf, p)
	}
	var long uint32
	for i := rans2Lanes - 1; i >= 0; i-- {
		if x[i] >= 1<<24 {
			long |= 1 << i
			p--
			buf[p] = byte(x[i] >> 24)
		}
		p -= 3
		buf[p], buf[p+1], buf[p+2] = byte(x[i]), byte(x[i]>>8), byte(x[i]>>16)
	}
	p -= 4
	binary.LittleEndian.PutUint32(buf[p:], long)
	return append(dst, buf[p:]...), buf
}

// A rans2Plan is what a layout-2 decode reads beyond the stream: per
// coded component its table's offset in the family's entries (ent), its
// levels' offset in the family's levels (lv) and its symbol count.
type rans2Plan struct {
	ent    []uint32        // the family's packed entries, option after option, 1 << rans2ScaleBits each
	lk     *cpu.RANSLookup // the gather-free lookups of ent's tables, or nil
	lv     []float32       // the family's levels, option after option
	entOff []int32
	levOff []int32
	nsym   []int32
	// tabs is the above checked once (a codec's plan), for the kernels'
	// calls without their per-call checks; nil for a plan made otherwise.
	tabs *cpu.RANSTables
}

// decode2 is cpu.RANSDecode2 of pl from component c0 on.
func (pl *rans2Plan) decode2(out []float32, g0 int, src []byte, pos, per, c0 int, scale []float32, x *[rans2Lanes]uint32) (int, int) {
	if pl.tabs != nil {
		return pl.tabs.Decode2(out, g0, src, pos, per, c0, scale, x)
	}
	return cpu.RANSDecode2(out, g0, src, pos, per, pl.ent, pl.lk, pl.entOff[c0:], pl.lv, pl.levOff[c0:], pl.nsym[c0:], scale, x)
}

// decode2Streams is cpu.RANSDecode2Streams of pl from component c0 on.
func (pl *rans2Plan) decode2Streams(out [][]float32, g0 int, src [][]byte, per, c0 int, scale [][]float32, st *cpu.RANSStreams) int {
	if pl.tabs != nil {
		return pl.tabs.Decode2Streams(out, g0, src, per, c0, scale, st)
	}
	return cpu.RANSDecode2Streams(out, g0, src, per, pl.ent, pl.lk, pl.entOff[c0:], pl.lv, pl.levOff[c0:], pl.nsym[c0:], scale, st)
}

// A rans2Scratch holds a layout-2 decode's lanes and the stream's padded
// tail, off the stack, since the kernels take pointers to them.
type rans2Scratch struct {
	x    [rans2Lanes]uint32
	tail [4 * rans2Lanes]byte
}

// rans2Decode decodes a layout-2 stream of len(out) symbols, symbol k
// under component c = k/per's table, into out[k] = lv[levOff[c] +
// symbol] * scale[c], and returns in hide the payloads of the first
// len(hide) lanes. It reads no byte outside src and fails on a stream
// that ends early, holds bytes past its last symbol, or leaves a lane's
// state outside what the encoder could have started from.
func rans2Decode(out []float32, src []byte, per int, pl *rans2Plan, scale []float32, hide []uint16, sc *rans2Scratch) error {
	if err := rans2Check(len(out), per, pl, scale); err != nil {
		return err
	}
	pos, err := rans2Start(src, &sc.x)
	if err != nil {
		return err
	}
	return rans2Rest(out, 0, src, pos, per, pl, scale, hide, sc)
}

// rans2Check checks a decode's symbol count and scales against its plan.
func rans2Check(n, per int, pl *rans2Plan, scale []float32) error {
	if per <= 0 || n%per != 0 || n/per != len(pl.entOff) || len(scale) < len(pl.entOff) {
		return fmt.Errorf("code stream of %d symbols in components of %d, for %d components", n, per, len(pl.entOff))
	}
	return nil
}

// The kernel decodes as many streams as KakeyaPC's calls take blocks.
var _ [cpu.RANSMaxStreams - MaxBlocks]struct{}

// rans2DecodeStreams is rans2Decode of 2 to cpu.RANSMaxStreams streams
// of the same plan and symbol count, src[j] into out[j] with scale[j] and
// hide[j], sc[j] its scratch, whole groups decoded side by side where a
// kernel does that: several blocks' dependency chains overlap where one
// block's leave the core idle. A stream with less than a group's 64 bytes
// left goes on from a copy of its last bytes followed by 64 zeros, as
// rans2Decode's does, so all run side by side to their ends. The results
// are rans2Decode's bit for bit. It returns which stream an error is in.
func rans2DecodeStreams(out [][]float32, src [][]byte, per int, pl *rans2Plan, scale [][]float32, hide [][]uint16, sc []*rans2Scratch, st *cpu.RANSStreams) (int, error) {
	ns := len(out)
	for j := range ns {
		if err := rans2Check(len(out[j]), per, pl, scale[j]); err != nil {
			return j, err
		}
		pos, err := rans2Start(src[j], &st.X[j])
		if err != nil {
			return j, err
		}
		st.Pos[j] = pos
	}
	n, k := len(out[0]), 0
	// cur[j] is what stream j decodes from: src[j], or once fewer than 64
	// bytes are left, the copy of them from at[j] on with zeros after.
	var (
		cur    [cpu.RANSMaxStreams][]byte
		at     [cpu.RANSMaxStreams]int
		outK   [cpu.RANSMaxStreams][]float32
		scaleC [cpu.RANSMaxStreams][]float32
	)
	copy(cur[:], src)
	for per%rans2Lanes == 0 && k < n {
		c := k / per
		for j := range ns {
			outK[j], scaleC[j] = out[j][k:], scale[j][c:]
		}
		k += pl.decode2Streams(outK[:ns], k%per, cur[:ns], per, c, scaleC[:ns], st)
		moved := false
		for j := range ns {
			if at[j] == 0 && len(src[j])-st.Pos[j] < 2*rans2Lanes {
				rem := len(src[j]) - st.Pos[j]
				tail := sc[j].tail[:rem+2*rans2Lanes]
				copy(tail, src[j][st.Pos[j]:])
				clear(tail[rem:])
				cur[j], at[j], st.Pos[j] = tail, st.Pos[j], 0
				moved = true
			}
		}
		if !moved {
			break // all decode from their copies, or there is no kernel
		}
	}
	for j := range ns {
		sc[j].x = st.X[j]
		pos := st.Pos[j]
		if at[j] > 0 {
			// On the copy: a position past the stream's bytes is a
			// stream that ended early, as in rans2Rest.
			if pos > len(src[j])-at[j] {
				return j, fmt.Errorf("code stream of %d bytes ends before symbol %d of %d", len(src[j]), k, n)
			}
			pos += at[j]
		}
		if err := rans2Rest(out[j], k, src[j], pos, per, pl, scale[j], hide[j], sc[j]); err != nil {
			return j, err
		}
	}
	return 0, nil
}

// rans2Rest decodes a layout-2 stream from symbol k (a multiple of
// rans2Lanes where per is one) at position pos with the lanes in sc.x,
// and checks its end.
func rans2Rest(out []float32, k int, src []byte, pos, per int, pl *rans2Plan, scale []float32, hide []uint16, sc *rans2Scratch) error {
	x := &sc.x
	if per%rans2Lanes == 0 {
		// Whole groups in one component, while a group's most words (64
		// bytes) remain; then the rest from a copy of the stream's last
		// bytes followed by 64 zeros, which a valid stream never reaches:
		// a position past its true end is a stream that ended early.
		k, pos = rans2Groups(out, k, src, pos, per, pl, scale, x)
		if k < len(out) {
			rem := len(src) - pos
			tail := sc.tail[:rem+2*rans2Lanes]
			copy(tail, src[pos:])
			clear(tail[rem:])
			var p int
			k, p = rans2Groups(out, k, tail, 0, per, pl, scale, x)
			if k < len(out) || p > rem {
				return fmt.Errorf("code stream of %d bytes ends before symbol %d of %d", len(src), k, len(out))
			}
			pos += p
		}
	}
	for ; k < len(out); k++ { // components of other lengths: symbol by symbol
		c := k / per
		i := k % rans2Lanes
		xs := x[i]
		e := pl.ent[int(pl.entOff[c])+int(xs&rans2Mask)]
		sym := int32(e & 0xff)
		if sym >= pl.nsym[c] {
			return fmt.Errorf("code stream symbol %d of %d outside its table of %d", k, len(out), pl.nsym[c])
		}
		out[k] = pl.lv[pl.levOff[c]+sym] * scale[c]
		xs = (e>>8&rans2Mask)*(xs>>rans2ScaleBits) + e>>20
		if xs < ransWordL {
			if pos+2 > len(src) {
				return fmt.Errorf("code stream of %d bytes ends at symbol %d of %d", len(src), k, len(out))
			}
			xs = xs<<16 | uint32(binary.LittleEndian.Uint16(src[pos:]))
			pos += 2
		}
		x[i] = xs
	}
	return rans2Finish(src, pos, x, hide)
}

// rans2Start reads a layout-2 stream's lane states into x (a bit mask of
// the lanes stored in 4 bytes, then each lane's state in 3 or 4) and
// returns where the 16-bit words start. It fails on a stream too short
// for its states, a state an encoder cannot end in, or words that are not
// whole.
func rans2Start(src []byte, x *[rans2Lanes]uint32) (int, error) {
	if len(src) >= 4+4*rans2Lanes {
		// Without a branch per lane: each state read as 4 bytes and cut
		// to 3 where its bit is clear (4+4*rans2Lanes bytes cover every
		// read), its bound checked into bad; rans2StartSlow's loop names
		// what is wrong.
		long := binary.LittleEndian.Uint32(src)
		pos, bad := 4, uint64(0)
		for i := range x {
			b := long >> i & 1
			v := binary.LittleEndian.Uint32(src[pos:]) & (0xffffff | -b<<24)
			bound := int64(ransWordL) << (8 * b) // 2^16, or 2^24 for 4 bytes
			bad |= uint64(int64(v)-bound) >> 63
			x[i] = v
			pos += 3 + int(b)
		}
		if bad == 0 && (len(src)-pos)%2 == 0 {
			return pos, nil
		}
	}
	return rans2StartSlow(src, x)
}

// rans2StartSlow is rans2Start lane by lane, for any stream, naming what
// is wrong.
func rans2StartSlow(src []byte, x *[rans2Lanes]uint32) (int, error) {
	if len(src) < 4+3*rans2Lanes {
		return 0, fmt.Errorf("code stream of %d bytes, shorter than its %d lanes' states", len(src), rans2Lanes)
	}
	long := binary.LittleEndian.Uint32(src)
	pos := 4
	for i := range x {
		// 3*rans2Lanes bytes were checked; each 4-byte state needs one more.
		if long>>i&1 != 0 {
			if len(src) < pos+4+3*(rans2Lanes-1-i) {
				return 0, fmt.Errorf("code stream of %d bytes ends in lane %d's state", len(src), i)
			}
			x[i] = binary.LittleEndian.Uint32(src[pos:])
			pos += 4
			if x[i] < 1<<24 {
				return 0, fmt.Errorf("code stream lane %d's 4-byte state %#x fits 3 bytes: corrupt", i, x[i])
			}
		} else {
			x[i] = uint32(src[pos]) | uint32(src[pos+1])<<8 | uint32(src[pos+2])<<16
			pos += 3
			if x[i] < ransWordL {
				return 0, fmt.Errorf("code stream lane %d state %#x below the coder's bound %#x", i, x[i], ransWordL)
			}
		}
	}
	if (len(src)-pos)%2 != 0 {
		return 0, fmt.Errorf("code stream of %d bytes: %d after the lanes' states, not whole 16-bit words", len(src), len(src)-pos)
	}
	return pos, nil
}

// rans2Finish checks a layout-2 stream's end once every symbol is decoded
// (all of src read, from pos on, and each lane back at an encoder's
// start state, whose payload the first len(hide) lanes carry into hide).
func rans2Finish(src []byte, pos int, x *[rans2Lanes]uint32, hide []uint16) error {
	if pos != len(src) {
		return fmt.Errorf("code stream of %d bytes: %d unread after the last symbol: corrupt", len(src), len(src)-pos)
	}
	for i, xs := range x {
		switch {
		case i < len(hide) && xs-ransWordL < 1<<16:
			hide[i] = uint16(xs - ransWordL)
		case i >= len(hide) && xs == ransWordL:
		default:
			return fmt.Errorf("code stream lane %d ends in state %#x, outside what an encoder starts from: corrupt", i, xs)
		}
	}
	return nil
}

// rans2Groups decodes the whole groups of rans2Lanes symbols from symbol
// k (a multiple of rans2Lanes; per one too) while 64 bytes of src remain
// from pos, with the SIMD kernel where there is one, and returns where it
// stopped.
func rans2Groups(out []float32, k int, src []byte, pos, per int, pl *rans2Plan, scale []float32, x *[rans2Lanes]uint32) (int, int) {
	if k < len(out) {
		var n int
		n, pos = pl.decode2(out[k:], k%per, src, pos, per, k/per, scale[k/per:], x)
		k += n
	}
	for c := k / per; c < len(out)/per; c++ {
		ent := pl.ent[pl.entOff[c]:][:1<<rans2ScaleBits]
		l, s := pl.lv[pl.levOff[c]:][:pl.nsym[c]], scale[c]
		for end := (c + 1) * per; k < end; k += rans2Lanes {
			if pos+2*rans2Lanes > len(src) {
				return k, pos
			}
			// Eight lanes at a time in locals, for the compiler to
			// schedule side by side; each lane's word follows its
			// symbol, which keeps the lanes' refills in lane order.
			for q := 0; q < rans2Lanes; q += 8 {
				o := (*[8]float32)(out[k+q : k+q+8])
				xq := (*[8]uint32)(x[q : q+8])
				x0, x1, x2, x3, x4, x5, x6, x7 := xq[0], xq[1], xq[2], xq[3], xq[4], xq[5], xq[6], xq[7]
				e0, e1, e2, e3 := ent[x0&rans2Mask], ent[x1&rans2Mask], ent[x2&rans2Mask], ent[x3&rans2Mask]
				e4, e5, e6, e7 := ent[x4&rans2Mask], ent[x5&rans2Mask], ent[x6&rans2Mask], ent[x7&rans2Mask]
				o[0], o[1], o[2], o[3] = l[e0&0xff]*s, l[e1&0xff]*s, l[e2&0xff]*s, l[e3&0xff]*s
				o[4], o[5], o[6], o[7] = l[e4&0xff]*s, l[e5&0xff]*s, l[e6&0xff]*s, l[e7&0xff]*s
				x0 = (e0>>8&rans2Mask)*(x0>>rans2ScaleBits) + e0>>20
				x1 = (e1>>8&rans2Mask)*(x1>>rans2ScaleBits) + e1>>20
				x2 = (e2>>8&rans2Mask)*(x2>>rans2ScaleBits) + e2>>20
				x3 = (e3>>8&rans2Mask)*(x3>>rans2ScaleBits) + e3>>20
				x4 = (e4>>8&rans2Mask)*(x4>>rans2ScaleBits) + e4>>20
				x5 = (e5>>8&rans2Mask)*(x5>>rans2ScaleBits) + e5>>20
				x6 = (e6>>8&rans2Mask)*(x6>>rans2ScaleBits) + e6>>20
				x7 = (e7>>8&rans2Mask)*(x7>>rans2ScaleBits) + e7>>20
				x0, pos = ransRefill(x0, src, pos)
				x1, pos = ransRefill(x1, src, pos)
				x2, pos = ransRefill(x2, src, pos)
				x3, pos = ransRefill(x3, src, pos)
				x4, pos = ransRefill(x4, src, pos)
				x5, pos = ransRefill(x5, src, pos)
				x6, pos = ransRefill(x6, src, pos)
				x7, pos = ransRefill(x7, src, pos)
				xq[0], xq[1], xq[2], xq[3], xq[4], xq[5], xq[6], xq[7] = x0, x1, x2, x3, x4, x5, x6, x7
			}
		}
	}
	return k, pos
}
