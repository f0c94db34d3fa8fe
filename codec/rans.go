package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Entropy coding of KakeyaPC's component codes: a static rANS coder (byte
// renormalization, 32-bit state, as in ryg_rans) over the probabilities
// of the cells of each code width's quantizer on N(0, 1). A coded
// component is its block's deviations from the mean divided by a scale
// near their RMS, so these probabilities hold for every component of
// every layer: the tables need no calibration data and no block carries
// one.

const (
	ransScaleBits = 14                   // frequencies sum to 1 << ransScaleBits
	ransL         = 1 << 23              // the state's lower bound after renormalization
	ransMask      = 1<<ransScaleBits - 1 // a state's slot
)

// A ransTable codes the 2^b symbols of one width.
type ransTable struct {
	freq, start []uint32
	slot        []uint8   // symbol of each of the 1 << ransScaleBits slots
	cost        []float32 // each symbol's code length in bits
	bits        float64   // expected code length per symbol on N(0, 1), in bits
}

// newRANSTable quantizes the cell probabilities p (summing to about 1) to
// frequencies of at least 1 summing to 1 << ransScaleBits.
func newRANSTable(p []float64) *ransTable {
	const total = 1 << ransScaleBits
	t := &ransTable{freq: make([]uint32, len(p)), start: make([]uint32, len(p)), slot: make([]uint8, total), cost: make([]float32, len(p))}
	sum, big := 0, 0
	for i, v := range p {
		f := max(int(math.Round(v*total)), 1)
		t.freq[i] = uint32(f)
		sum += f
		if t.freq[i] > t.freq[big] {
			big = i
		}
	}
	// The rounding's excess or shortfall goes to the likeliest symbol,
	// whose relative change is the smallest.
	t.freq[big] = uint32(int(t.freq[big]) + total - sum)
	var c uint32
	for i, f := range t.freq {
		t.start[i] = c
		for s := c; s < c+f; s++ {
			t.slot[s] = uint8(i)
		}
		c += f
		l := ransScaleBits - math.Log2(float64(f))
		t.cost[i] = float32(l)
		t.bits += p[i] * l
	}
	return t
}

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

// ransEncode codes syms (symbol i with table tabs[i % len(tabs)]) and
// appends the stream to dst, using buf (grown as needed, returned) as
// scratch: rANS codes in reverse, so the stream is built from its end.
func ransEncode(dst, buf []byte, syms []uint8, tabs []*ransTable) ([]byte, []byte) {
	// A symbol emits at most ransScaleBits bits, under 2 bytes; the state
	// flushes 4.
	need := 2*len(syms) + 4
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	p := need
	x := uint32(ransL)
	k := len(tabs)
	for i := len(syms) - 1; i >= 0; i-- {
		t := tabs[i%k]
		s := syms[i]
		f := t.freq[s]
		xmax := ((ransL >> ransScaleBits) << 8) * f
		for x >= xmax {
			p--
			buf[p] = byte(x)
			x >>= 8
		}
		x = (x/f)<<ransScaleBits + x%f + t.start[s]
	}
	p -= 4
	binary.LittleEndian.PutUint32(buf[p:], x)
	return append(dst, buf[p:]...), buf
}

// A ransDecoder reads a stream ransEncode wrote.
type ransDecoder struct {
	x   uint32
	src []byte
	pos int
}

func (r *ransDecoder) init(src []byte) error {
	if len(src) < 4 {
		return fmt.Errorf("code stream of %d bytes, shorter than its 4-byte state", len(src))
	}
	r.x, r.src, r.pos = binary.LittleEndian.Uint32(src), src, 4
	if r.x < ransL {
		return fmt.Errorf("code stream state %#x below the coder's bound %#x", r.x, ransL)
	}
	return nil
}

// next decodes one symbol with t; false when the stream ends early.
func (r *ransDecoder) next(t *ransTable) (uint8, bool) {
	s := r.x & ransMask
	sym := t.slot[s]
	r.x = t.freq[sym]*(r.x>>ransScaleBits) + s - t.start[sym]
	for r.x < ransL {
		if r.pos >= len(r.src) {
			return 0, false
		}
		r.x = r.x<<8 | uint32(r.src[r.pos])
		r.pos++
	}
	return sym, true
}

// done reports whether the whole stream was read and the state is back
// where the encoder started: a stream that was altered almost never is.
func (r *ransDecoder) done() bool { return r.pos == len(r.src) && r.x == ransL }
