package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Entropy coding of KakeyaPC's component codes: a static rANS coder
// (32-bit states, 8 interleaved lanes, 16-bit renormalization) over the probabilities
// of the cells of each code width's quantizer on N(0, 1). A coded
// component is its block's deviations from the mean divided by a scale
// near their RMS, so these probabilities hold for every component of
// every layer: the tables need no calibration data and no block carries
// one.

const (
	ransScaleBits = 14                   // frequencies sum to 1 << ransScaleBits
	ransMask      = 1<<ransScaleBits - 1 // a state's slot
)

// A ransTable codes the symbols of one quantizer (at most 256).
type ransTable struct {
	freq, start []uint32
	slot        []uint8   // symbol of each of the 1 << scale bits slots
	cost        []float32 // each symbol's code length in bits
	bits        float64   // expected code length per symbol on N(0, 1), in bits
	// ent, for layout 2's tables (12-bit scale), is each slot's packed
	// entry: symbol | freq<<8 | (slot - start)<<20 (rans2Entry).
	ent []uint32
}

// newRANSTable quantizes the cell probabilities p (summing to about 1) to
// frequencies of at least 1 summing to 1 << scale: layout 1's tables
// (ransScaleBits) or layout 2's (rans2ScaleBits, with packed entries).
func newRANSTable(p []float64, scale int) *ransTable {
	total := 1 << scale
	t := &ransTable{freq: make([]uint32, len(p)), start: make([]uint32, len(p)), slot: make([]uint8, total), cost: make([]float32, len(p))}
	if scale == rans2ScaleBits {
		rans2Freqs(t.freq, p, total)
	} else {
		ransFreqs(t.freq, p, total)
	}
	var c uint32
	for i, f := range t.freq {
		t.start[i] = c
		for s := c; s < c+f; s++ {
			t.slot[s] = uint8(i)
		}
		c += f
		l := float64(scale) - math.Log2(float64(f))
		t.cost[i] = float32(l)
		t.bits += p[i] * l
	}
	if scale == rans2ScaleBits {
		t.ent = make([]uint32, total)
		for x := range t.ent {
			s := t.slot[x]
			t.ent[x] = uint32(s) | t.freq[s]<<8 | (uint32(x)-t.start[s])<<20
		}
	}
	return t
}

// ransFreqs is layout 1's frequency rounding: each probability times total,
// rounded, at least 1, the sum's excess or shortfall taken by the likeliest
// symbol. Layout 1's streams depend on it bit for bit.
func ransFreqs(freq []uint32, p []float64, total int) {
	sum, big := 0, 0
	for i, v := range p {
		f := max(int(math.Round(v*float64(total))), 1)
		freq[i] = uint32(f)
		sum += f
		if freq[i] > freq[big] {
			big = i
		}
	}
	// The rounding's excess or shortfall goes to the likeliest symbol,
	// whose relative change is the smallest.
	freq[big] = uint32(int(freq[big]) + total - sum)
}

// rans2Freqs is layout 2's: at least 1 each, then the slots left (or
// missing) given (or taken) one at a time where they lower (or raise) the
// expected code length on p the least, which at 12 bits matters for the
// many thin tail cells of the widest quantizers.
func rans2Freqs(freq []uint32, p []float64, total int) {
	sum := 0
	for i, v := range p {
		freq[i] = uint32(max(int(v*float64(total)), 1))
		sum += int(freq[i])
	}
	for ; sum < total; sum++ {
		best, gain := 0, -1.0
		for i, f := range freq {
			if g := p[i] * math.Log2(float64(f+1)/float64(f)); g > gain {
				best, gain = i, g
			}
		}
		freq[best]++
	}
	for ; sum > total; sum-- {
		best, loss := -1, math.Inf(1)
		for i, f := range freq {
			if f > 1 {
				if l := p[i] * math.Log2(float64(f)/float64(f-1)); l < loss {
					best, loss = i, l
				}
			}
		}
		freq[best]--
	}
}

// The tables' accessors: what other files read of a ransTable, so that
// its in-memory layout can change in this file alone.

// symbols returns the number of symbols t codes.
func (t *ransTable) symbols() int { return len(t.freq) }

// freqStart returns symbol s's frequency and the first slot of its range.
func (t *ransTable) freqStart(s int) (freq, start uint32) { return t.freq[s], t.start[s] }

// symbolAt returns the symbol whose range holds slot x (x < 1 << ransScaleBits).
func (t *ransTable) symbolAt(x uint32) uint8 { return t.slot[x] }

// cellProbs returns the N(0, 1) mass of each cell of the quantizer with
// the given bounds.
func cellProbs(bounds []float32) []float64 {
	p := make([]float64, len(bounds)+1)
	for i := range p {
		lo, hi := math.Inf(-1), math.Inf(1)
		if i > 0 {
			lo = float64(bounds[i-1])
		}
		if i < len(bounds) {
			hi = float64(bounds[i])
		}
		p[i] = gaussMass(lo, hi)
	}
	return p
}

// The entropy-coded stream's layout 1: ransLanes independent rANS
// states with 16-bit renormalization (ryg_rans's rans_word: a state lives
// in [ransWordL, 2^32) and a symbol reads or writes at most one 16-bit
// word), symbol k coded by lane k mod ransLanes. The stream is the lanes'
// final states (ransLanes little-endian uint32, lane 0 first), then the
// words little-endian in the order the decoder reads them: symbol by
// symbol, each lane reading its word, when it needs one, right after its
// symbol. The lanes' state updates are independent, so a decoder works
// on all of them at once (8 lanes: one AVX2 register of 32-bit states).
const (
	ransLanes = 8
	ransWordL = 1 << 16
)

// formatKakeyaPCEC's description says 8 lanes.
var _ [ransLanes - 8]struct{}
var _ [8 - ransLanes]struct{}

// ransEncode codes syms, symbol k under tabs[k/per], and appends the
// stream (layout 1 above) to dst, using buf (grown as needed, returned)
// as scratch: rANS codes in reverse, so the stream is built from its end.
func ransEncode(dst, buf []byte, syms []uint8, tabs []*ransTable, per int) ([]byte, []byte) {
	need := 4*ransLanes + 2*len(syms)
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	p := need
	var x [ransLanes]uint32
	for i := range x {
		x[i] = ransWordL
	}
	for k := len(syms) - 1; k >= 0; k-- {
		t, s := tabs[k/per], syms[k]
		x[k%ransLanes], p = ransPut(x[k%ransLanes], t.freq[s], t.start[s], ransScaleBits, buf, p)
	}
	for i := ransLanes - 1; i >= 0; i-- {
		p -= 4
		binary.LittleEndian.PutUint32(buf[p:], x[i])
	}
	return append(dst, buf[p:]...), buf
}

// ransDecode decodes a stream ransEncode wrote of len(out) symbols,
// symbol k under tabs[k/per], into out[k] = lv[levOff[k/per] + symbol]:
// each coded component's level times its scale. It reads no byte outside
// src and fails on a stream that ends early, holds bytes past its last
// symbol, or leaves a lane's state other than where the encoder started
// (which an altered stream almost never does).
func ransDecode(out []float32, src []byte, per int, tabs []*ransTable, lv []float32, levOff []int32) error {
	if len(src) < 4*ransLanes {
		return fmt.Errorf("code stream of %d bytes, shorter than its %d lanes' 4-byte states", len(src), ransLanes)
	}
	if len(src)%2 != 0 {
		return fmt.Errorf("code stream of %d bytes: not whole 16-bit words", len(src))
	}
	var x [ransLanes]uint32
	for i := range x {
		x[i] = binary.LittleEndian.Uint32(src[4*i:])
		if x[i] < ransWordL {
			return fmt.Errorf("code stream lane %d state %#x below the coder's bound %#x", i, x[i], ransWordL)
		}
	}
	pos := 4 * ransLanes
	k := 0
	if per%ransLanes == 0 {
		// Every group of ransLanes symbols lies in one component: one
		// table, and the lanes' updates written out for the compiler to
		// schedule side by side.
		x0, x1, x2, x3, x4, x5, x6, x7 := x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
		for c := 0; c < len(out)/per; c++ {
			t, l := tabs[c], lv[levOff[c]:]
			slot, freq, start := t.slot[:1<<ransScaleBits], t.freq, t.start
			for end := k + per; k < end; k += ransLanes {
				o := out[k : k+ransLanes]
				if pos+2*ransLanes > len(src) {
					// Too few words left for a group that needs all of
					// them: the careful loop below decides.
					x = [ransLanes]uint32{x0, x1, x2, x3, x4, x5, x6, x7}
					goto careful
				}
				s0, s1, s2, s3 := slot[x0&ransMask], slot[x1&ransMask], slot[x2&ransMask], slot[x3&ransMask]
				s4, s5, s6, s7 := slot[x4&ransMask], slot[x5&ransMask], slot[x6&ransMask], slot[x7&ransMask]
				o[0], o[1], o[2], o[3] = l[s0], l[s1], l[s2], l[s3]
				o[4], o[5], o[6], o[7] = l[s4], l[s5], l[s6], l[s7]
				x0 = freq[s0]*(x0>>ransScaleBits) + x0&ransMask - start[s0]
				x1 = freq[s1]*(x1>>ransScaleBits) + x1&ransMask - start[s1]
				x2 = freq[s2]*(x2>>ransScaleBits) + x2&ransMask - start[s2]
				x3 = freq[s3]*(x3>>ransScaleBits) + x3&ransMask - start[s3]
				x4 = freq[s4]*(x4>>ransScaleBits) + x4&ransMask - start[s4]
				x5 = freq[s5]*(x5>>ransScaleBits) + x5&ransMask - start[s5]
				x6 = freq[s6]*(x6>>ransScaleBits) + x6&ransMask - start[s6]
				x7 = freq[s7]*(x7>>ransScaleBits) + x7&ransMask - start[s7]
				x0, pos = ransRefill(x0, src, pos)
				x1, pos = ransRefill(x1, src, pos)
				x2, pos = ransRefill(x2, src, pos)
				x3, pos = ransRefill(x3, src, pos)
				x4, pos = ransRefill(x4, src, pos)
				x5, pos = ransRefill(x5, src, pos)
				x6, pos = ransRefill(x6, src, pos)
				x7, pos = ransRefill(x7, src, pos)
			}
		}
		x = [ransLanes]uint32{x0, x1, x2, x3, x4, x5, x6, x7}
	}
careful:
	for ; k < len(out); k++ {
		c := k / per
		t, xs := tabs[c], x[k%ransLanes]
		sym := t.slot[xs&ransMask]
		out[k] = lv[int(levOff[c])+int(sym)]
		xs = t.freq[sym]*(xs>>ransScaleBits) + xs&ransMask - t.start[sym]
		if xs < ransWordL {
			if pos+2 > len(src) {
				return fmt.Errorf("code stream of %d bytes ends at symbol %d of %d", len(src), k, len(out))
			}
			xs = xs<<16 | uint32(binary.LittleEndian.Uint16(src[pos:]))
			pos += 2
		}
		x[k%ransLanes] = xs
	}
	if pos != len(src) {
		return fmt.Errorf("code stream of %d bytes: %d unread after the last symbol: corrupt", len(src), len(src)-pos)
	}
	for i, xs := range x {
		if xs != ransWordL {
			return fmt.Errorf("code stream lane %d ends in state %#x, not %#x: corrupt", i, xs, ransWordL)
		}
	}
	return nil
}

// ransPut codes one symbol of frequency f and cumulative start in a table
// of scale bits into the lane state x, first moving x's low 16 bits to the
// word before buf[p] when the state would pass the coder's bound (rANS
// writes its stream from the end), and returns the new state and p. The
// encoding step of both stream layouts.
func ransPut(x, f, start, scale uint32, buf []byte, p int) (uint32, int) {
	if x >= f<<(32-scale) { // ((ransWordL >> scale) << 16) * f
		p -= 2
		binary.LittleEndian.PutUint16(buf[p:], uint16(x))
		x >>= 16
	}
	return (x/f)<<scale + x%f + start, p
}

// ransRefill reads the next 16-bit word into x when x is below the
// coder's bound; the caller has checked that src holds it.
func ransRefill(x uint32, src []byte, pos int) (uint32, int) {
	if x < ransWordL {
		x = x<<16 | uint32(src[pos]) | uint32(src[pos+1])<<8
		pos += 2
	}
	return x, pos
}
