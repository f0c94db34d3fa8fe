package cpu

import "fmt"

// RANSLanes is the lane count of the rANS streams RANSDecode2 reads
// (codec's stream layout 2).
const RANSLanes = 32

// RANSScaleBits is the frequency precision of RANSDecode2's tables: each
// table has 1 << RANSScaleBits packed entries.
const RANSScaleBits = 12

// RANSDecode2 decodes the whole groups of RANSLanes symbols of an
// interleaved rANS stream (codec's layout 2: 32-bit states in x, 16-bit
// words read after each group by the lanes below 2^16, in lane order)
// that it can decode without a bound check, from stream position pos,
// with the C kernels where this CPU runs them, and returns how many
// symbols it decoded and the stream position after them; without kernels
// it returns (0, pos), and the caller's loop decodes them.
//
// The symbols run component after component, per to a component (a
// multiple of RANSLanes), the first g0 symbols of the first component
// (a multiple of RANSLanes) already decoded: out[j] is symbol g0 + j,
// in component c = (g0 + j) / per, whose table is
// ent[entOff[c]:][:1<<RANSScaleBits], each entry symbol | freq<<8 |
// bias<<20 (the state becomes freq*(x>>RANSScaleBits) + bias), and
// out[j] = lv[levOff[c] + symbol] * scale[c]; nsym[c] bounds the symbols
// of component c's table (at most 256). The kernels stop before a group
// whose 64 bytes of words might run past src, and never read past it.
func RANSDecode2(out []float32, g0 int, src []byte, pos, per int, ent []uint32, entOff []int32, lv []float32, levOff, nsym []int32, scale []float32, x *[RANSLanes]uint32) (int, int) {
	if (!hasAVX512 && !hasAVX2C) || per <= 0 || per%RANSLanes != 0 || g0%RANSLanes != 0 || g0 < 0 || g0 >= per || len(out) == 0 {
		return 0, pos
	}
	c := (g0 + len(out)) / per
	if (g0+len(out))%per != 0 || len(entOff) < c || len(levOff) < c || len(nsym) < c || len(scale) < c || pos < 0 || pos > len(src) {
		panic(fmt.Sprintf("cpu: RANSDecode2: %d symbols from %d in components of %d with %d/%d/%d/%d tables, stream position %d of %d",
			len(out), g0, per, len(entOff), len(levOff), len(nsym), len(scale), pos, len(src)))
	}
	if len(src) >= 1<<31 || len(out) >= 1<<31 {
		return 0, pos // past what the kernels' packed return holds
	}
	for t := range c {
		if entOff[t] < 0 || int(entOff[t])+1<<RANSScaleBits > len(ent) || nsym[t] < 1 || nsym[t] > 256 || levOff[t] < 0 || int(levOff[t])+int(nsym[t]) > len(lv) {
			panic(fmt.Sprintf("cpu: RANSDecode2: component %d's table at %d (%d entries) or %d levels at %d (%d)", t, entOff[t], len(ent), nsym[t], levOff[t], len(lv)))
		}
	}
	return ransDecode2C(out, g0, src, pos, per, ent, entOff, lv, levOff, nsym, scale, x)
}

// RANSStreams holds the lanes, positions and lengths of up to
// RANSMaxStreams layout-2 streams that RANSDecode2Streams decodes side by
// side (off the caller's stack, for the kernel's pointers).
type RANSStreams struct {
	X   [RANSMaxStreams][RANSLanes]uint32
	Pos [RANSMaxStreams]int
	len [RANSMaxStreams]int
}

// RANSMaxStreams is the most streams RANSDecode2Streams decodes at once.
const RANSMaxStreams = 4

// RANSDecode2Streams is RANSDecode2 for 2 to RANSMaxStreams streams of the
// same tables and symbol count (blocks of one codec), decoded side by
// side so that their dependency chains overlap: stream j of src[j] from
// position st.Pos[j], lanes st.X[j], into out[j] with scales scale[j],
// from symbol g0 of the first component, as RANSDecode2. It decodes the
// same whole groups of every stream while each has a group's 64 bytes
// left, and returns how many symbols of each it decoded, leaving the
// streams' positions in st.Pos; without the kernels (AVX-512 or AVX2)
// it returns 0 and the caller decodes each with RANSDecode2.
func RANSDecode2Streams(out [][]float32, g0 int, src [][]byte, per int, ent []uint32, entOff []int32, lv []float32, levOff, nsym []int32, scale [][]float32, st *RANSStreams) int {
	ns, n := len(out), len(out[0])
	if (!hasAVX512 && !hasAVX2C) || ns < 2 || ns > RANSMaxStreams || len(src) != ns || len(scale) != ns || per <= 0 || per%RANSLanes != 0 || g0%RANSLanes != 0 || g0 < 0 || g0 >= per || n == 0 || (g0+n)%per != 0 {
		return 0
	}
	c := (g0 + n) / per
	for j := range ns {
		if len(out[j]) != n || len(scale[j]) < c || st.Pos[j] < 0 || st.Pos[j] > len(src[j]) {
			panic(fmt.Sprintf("cpu: RANSDecode2Streams: stream %d: %d symbols (want %d), %d scales for %d components, position %d of %d",
				j, len(out[j]), n, len(scale[j]), c, st.Pos[j], len(src[j])))
		}
		if len(src[j]) >= 1<<31 || len(src[j])-st.Pos[j] < 2*RANSLanes {
			return 0
		}
		st.len[j] = len(src[j])
	}
	if len(entOff) < c || len(levOff) < c || len(nsym) < c {
		panic(fmt.Sprintf("cpu: RANSDecode2Streams: %d components with %d/%d/%d tables", c, len(entOff), len(levOff), len(nsym)))
	}
	for t := range c {
		if entOff[t] < 0 || int(entOff[t])+1<<RANSScaleBits > len(ent) || nsym[t] < 1 || nsym[t] > 256 || levOff[t] < 0 || int(levOff[t])+int(nsym[t]) > len(lv) {
			panic(fmt.Sprintf("cpu: RANSDecode2Streams: component %d's table at %d (%d entries) or %d levels at %d (%d)", t, entOff[t], len(ent), nsym[t], levOff[t], len(lv)))
		}
	}
	return ransDecode2StreamsC(out, g0, src, per, ent, entOff, lv, levOff, nsym, scale, st)
}
