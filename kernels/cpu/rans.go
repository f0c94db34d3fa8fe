package cpu

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// hasRANSKernels reports whether RANSDecode2 and RANSDecode2Streams have
// C kernels to run, as far as $KAKEYA_CPU allows: rans_amd64.c's at AVX2
// and up, rans_neon_arm64.c's at NEON.
var hasRANSKernels = hasAVX512 || hasAVX2C || hasNEON

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
// with the C kernels where this CPU runs them (AVX-512 or AVX2 on amd64,
// NEON on arm64), and returns how many
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
// of component c's table (its symbol count, at most 256). The kernels
// stop before a group whose 64 bytes of words might run past src, and
// never read past it.
//
// lk, when not nil, is NewRANSLookup(ent)'s or NewRANSLookupLevels's
// (every entOff then a multiple of 1 << RANSScaleBits): where the CPU has
// AVX512_VBMI and AVX512_VPOPCNTDQ the kernels look most symbols up in
// registers instead of gathering their entries, at AVX2 those of tables
// of up to 16 symbols (and read the larger tables' entries and levels
// with one load a lane where lk holds this decode's levels) and at NEON
// up to 4, with the same results bit for bit.
func RANSDecode2(out []float32, g0 int, src []byte, pos, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale []float32, x *[RANSLanes]uint32) (int, int) {
	if !hasRANSKernels || per <= 0 || per%RANSLanes != 0 || g0%RANSLanes != 0 || g0 < 0 || g0 >= per || len(out) == 0 {
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
	checkLookup("RANSDecode2", ent, lk, entOff[:c])
	el := lk != nil && lk.levelsMatch(lv, entOff[:c], levOff[:c])
	return ransDecode2C(out, g0, src, pos, per, ent, lk, entOff, lv, levOff, nsym, scale, x, el)
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
// streams' positions in st.Pos; without the kernels (AVX-512, AVX2 or
// NEON) it returns 0 and the caller decodes each with RANSDecode2.
func RANSDecode2Streams(out [][]float32, g0 int, src [][]byte, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale [][]float32, st *RANSStreams) int {
	ns, n := len(out), len(out[0])
	if !hasRANSKernels || ns < 2 || ns > RANSMaxStreams || len(src) != ns || len(scale) != ns || per <= 0 || per%RANSLanes != 0 || g0%RANSLanes != 0 || g0 < 0 || g0 >= per || n == 0 || (g0+n)%per != 0 {
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
	checkLookup("RANSDecode2Streams", ent, lk, entOff[:c])
	el := lk != nil && lk.levelsMatch(lv, entOff[:c], levOff[:c])
	return ransDecode2StreamsC(out, g0, src, per, ent, lk, entOff, lv, levOff, nsym, scale, st, el)
}

// A RANSTables holds the tables of a decode's components (one codec's:
// component c's packed entries at entOff[c] in ent, its nsym[c] levels at
// levOff[c] in lv, and the lookup lk of ent or nil), checked once where
// RANSDecode2 and RANSDecode2Streams check every component's on every
// call. It is read only once made, and may be shared.
type RANSTables struct {
	ent                  []uint32
	lk                   *RANSLookup
	entOff, levOff, nsym []int32
	lv                   []float32
	el                   bool // lk's slot entries hold these levels
}

// NewRANSTables checks the tables of every component as RANSDecode2 does
// and returns them, or an error naming the first component whose table
// or levels fall outside ent or lv, or whose table is not one of lk's.
func NewRANSTables(ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32) (*RANSTables, error) {
	if len(levOff) != len(entOff) || len(nsym) != len(entOff) {
		return nil, fmt.Errorf("cpu: rANS tables: %d table offsets, %d level offsets and %d symbol counts", len(entOff), len(levOff), len(nsym))
	}
	for c := range entOff {
		if entOff[c] < 0 || int(entOff[c])+1<<RANSScaleBits > len(ent) || nsym[c] < 1 || nsym[c] > 256 || levOff[c] < 0 || int(levOff[c])+int(nsym[c]) > len(lv) {
			return nil, fmt.Errorf("cpu: rANS tables: component %d's table at %d (%d entries) or %d levels at %d (%d)", c, entOff[c], len(ent), nsym[c], levOff[c], len(lv))
		}
		if lk != nil && entOff[c]%(1<<RANSScaleBits) != 0 {
			return nil, fmt.Errorf("cpu: rANS tables: component %d's table at %d, inside a table of the lookup's", c, entOff[c])
		}
	}
	if lk != nil && (len(lk.ent) != len(ent) || &lk.ent[0] != &ent[0]) {
		return nil, fmt.Errorf("cpu: rANS tables: a lookup of %d entries made from other tables than these %d", len(lk.ent), len(ent))
	}
	return &RANSTables{ent: ent, lk: lk, entOff: entOff, levOff: levOff, nsym: nsym, lv: lv,
		el: lk != nil && len(entOff) > 0 && lk.levelsMatch(lv, entOff, levOff)}, nil
}

// Decode2 is RANSDecode2 from component c0 of t on: out[j] is symbol g0
// + j from component c0's first, under the tables of components c0,
// c0+1, ...
func (t *RANSTables) Decode2(out []float32, g0 int, src []byte, pos, per, c0 int, scale []float32, x *[RANSLanes]uint32) (int, int) {
	if !hasRANSKernels || per <= 0 || per%RANSLanes != 0 || g0%RANSLanes != 0 || g0 < 0 || g0 >= per || len(out) == 0 {
		return 0, pos
	}
	c := (g0 + len(out)) / per
	if (g0+len(out))%per != 0 || c0 < 0 || c0+c > len(t.entOff) || len(scale) < c || pos < 0 || pos > len(src) {
		panic(fmt.Sprintf("cpu: RANSTables.Decode2: %d symbols from %d in components of %d from component %d of %d with %d scales, stream position %d of %d",
			len(out), g0, per, c0, len(t.entOff), len(scale), pos, len(src)))
	}
	if len(src) >= 1<<31 || len(out) >= 1<<31 {
		return 0, pos // past what the kernels' packed return holds
	}
	return ransDecode2C(out, g0, src, pos, per, t.ent, t.lk, t.entOff[c0:], t.lv, t.levOff[c0:], t.nsym[c0:], scale, x, t.el)
}

// Decode2Streams is RANSDecode2Streams from component c0 of t on.
func (t *RANSTables) Decode2Streams(out [][]float32, g0 int, src [][]byte, per, c0 int, scale [][]float32, st *RANSStreams) int {
	ns, n := len(out), len(out[0])
	if !hasRANSKernels || ns < 2 || ns > RANSMaxStreams || len(src) != ns || len(scale) != ns || per <= 0 || per%RANSLanes != 0 || g0%RANSLanes != 0 || g0 < 0 || g0 >= per || n == 0 || (g0+n)%per != 0 {
		return 0
	}
	c := (g0 + n) / per
	if c0 < 0 || c0+c > len(t.entOff) {
		panic(fmt.Sprintf("cpu: RANSTables.Decode2Streams: %d components from component %d of %d", c, c0, len(t.entOff)))
	}
	for j := range ns {
		if len(out[j]) != n || len(scale[j]) < c || st.Pos[j] < 0 || st.Pos[j] > len(src[j]) {
			panic(fmt.Sprintf("cpu: RANSTables.Decode2Streams: stream %d: %d symbols (want %d), %d scales for %d components, position %d of %d",
				j, len(out[j]), n, len(scale[j]), c, st.Pos[j], len(src[j])))
		}
		if len(src[j]) >= 1<<31 || len(src[j])-st.Pos[j] < 2*RANSLanes {
			return 0
		}
		st.len[j] = len(src[j])
	}
	return ransDecode2StreamsC(out, g0, src, per, t.ent, t.lk, t.entOff[c0:], t.lv, t.levOff[c0:], t.nsym[c0:], scale, st, t.el)
}

// The gather-free slot lookup. A layout-2 table maps each of its 4,096
// slots to a packed entry; the AVX-512 kernels' first form reads it with
// a gather per 16 lanes, which some CPUs (AMD Zen) run slowly. The second
// form, for CPUs with AVX512_VBMI and AVX512_VPOPCNTDQ, finds a lane's
// symbol, frequency and start in registers. The slots fall in 128 buckets
// of 32; for a window of at most 64 consecutive symbols from base (all of
// a table's symbols, up to 64),
//
//	r = first[bucket] + popcount(bound[link[bucket]] & bits 0..slot%32)
//
// is the symbol less base, modulo 256: first[bucket] is that of the
// bucket's first slot (a byte), link[bucket] names one of 64 bitmaps of
// the starts of symbols in the bucket (bit i: slot 32*bucket + i starts
// one; bitmap 0 is empty, for buckets of one symbol). first and link are
// byte tables the kernel permutes with VPERMI2B, the bitmaps and each
// window symbol's frequency and start (fs: freq | start<<16) dword tables
// it permutes with VPERMI2D. A lane whose r has bit 6 or 7 set (in 64 to
// 255, or 256 and up) lies outside the window; a bucket with no slot in
// the window has first = ransOutside. A vector of 16 lanes with one lane
// outside takes the gather. The frequencies and starts are those of the
// packed entries, so the lanes' states, symbols and levels are the
// gather's bit for bit, on any stream, corrupt or not.
const (
	ransBuckets     = 128 // slots >> ransBucketShift
	ransBucketShift = 5
	ransWindow      = 64 // symbols a lookup holds
	ransLinks       = 64 // bitmaps a lookup holds, the empty one first
	ransOutside     = 0xc0
	// One table's lookup, in uint32 words: first (128 bytes), link (128
	// bytes), 64 bitmaps, 64 fs words, then base, the window's symbols and
	// the table's mode.
	ransAuxFirst = 0
	ransAuxLink  = 32
	ransAuxBound = 64
	ransAuxFS    = 128
	ransAuxBase  = 192
	ransAuxCount = 193
	ransAuxMode  = 194
	ransAuxOut   = 195 // the slots the kernels gather (not read by them)
	ransAuxEL    = 196 // the table's block of el + 1, or 0 for none
	// The compares' window of up to ransCmpMax symbols from symbol
	// ransAuxCmpBase (a table's all, up to ransCmpMax symbols): each
	// window symbol's frequency, then each one's start, for the AVX2
	// kernel, which counts a lane's symbol by compares and permutes these
	// from one register each; ransAuxCmp is 1 where the window holds all
	// but at most ransCmpOutside of a table of up to 2*ransCmpMax symbols
	// (the lanes outside take the slot entries), else 0.
	ransAuxCmp     = 197
	ransAuxCmpBase = 198
	ransAuxFreq    = 208
	ransAuxStart   = 224
	ransAuxWords   = 256
)

// ransCmpMax is the most symbols of the compares' window, whose
// frequencies and starts the lookup holds apart (ransAuxFreq,
// ransAuxStart): one AVX2 register's.
const ransCmpMax = 8

// ransCmpOutside is the most slots of a table of more than ransCmpMax
// symbols that may lie outside its compares' window (0.4% of the lanes:
// about one vector of 32 in eight falls back to the slot entries).
const ransCmpOutside = 16

// The modes of a table's lookup: how the kernels decode its symbols.
const (
	ransModeGather = 0 // the gather: too many lanes fall outside the window
	ransModeNarrow = 1 // at most 32 symbols, none outside the window: one permute per table
	ransModeWide   = 2 // a window of up to 64, lanes outside it gathered
)

// ransMaxOutside is the most of a table's 4,096 slots that may lie
// outside its window for the kernels to look its symbols up in registers:
// 1%, about one vector of 16 lanes in seven gathered.
const ransMaxOutside = 41

// A RANSLookup holds the gather-free lookups of every table of one array
// of layout-2 packed entries (each 1 << RANSScaleBits entries, symbol |
// freq<<8 | (slot-start)<<20), for RANSDecode2 and RANSDecode2Streams.
// It is read only once made, and may be shared.
type RANSLookup struct {
	ent []uint32
	aux []uint32
	// With levels (NewRANSLookupLevels): lv and each table's levels'
	// offset in it (-1 for a table without slot entries), and el the slot
	// entries of the tables of more than ransElMin symbols, 1 <<
	// RANSScaleBits each: slot x's packed entry, then the bits of its
	// symbol's level, which the AVX2 kernels read with one load.
	lv     []float32
	levOff []int32
	el     []uint64
}

// ransElMin is the most symbols of a table that gets no slot entries:
// the AVX2 kernel counts its symbols by compares (2 instructions a symbol
// per 16 lanes), which beats the loads up to 8 symbols (the AVX-512
// kernels look them up in registers); the tables of 10 and 16 symbols
// decode 4-5% faster from slot entries than by compares
// (BenchmarkRANS2DecodeStreams/narrow/4/levels, load 3-4), and 14-16%
// (mid/4/levels, load 5-10).
const ransElMin = ransCmpMax

// NewRANSLookupLevels is NewRANSLookup with the tables' levels: table t's
// symbol s has level lv[levOff[t]+s] (levOff holding one offset per
// table). The AVX2 kernels then read a slot's entry and level with one
// load, for tables of more than 16 symbols, when a decode's levels are
// these (the same lv, and each component's levels at its table's
// offset); otherwise, as NewRANSLookup's, they read the level after the
// entry. The slot entries take 32 KiB per table.
func NewRANSLookupLevels(ent []uint32, lv []float32, levOff []int32) (*RANSLookup, error) {
	const slots = 1 << RANSScaleBits
	lk, err := NewRANSLookup(ent)
	if err != nil {
		return nil, err
	}
	nt := len(ent) / slots
	if len(levOff) != nt {
		return nil, fmt.Errorf("cpu: rANS lookup: %d level offsets for %d tables", len(levOff), nt)
	}
	lk.lv, lk.levOff = lv, make([]int32, nt)
	blocks := 0
	for t := range nt {
		lk.levOff[t] = -1
		tab := ent[t*slots:][:slots]
		n := int(tab[slots-1]&0xff) + 1 // the symbol count: the last slot's symbol + 1
		if tab[slots-1] == 0 || n <= ransElMin {
			continue // an unused option, or counted by compares
		}
		if o := levOff[t]; o < 0 || int(o)+n > len(lv) {
			return nil, fmt.Errorf("cpu: rANS lookup: table %d's %d levels at %d, past %d levels", t, n, o, len(lv))
		}
		lk.levOff[t] = levOff[t]
		blocks++
		lk.aux[t*ransAuxWords+ransAuxEL] = uint32(blocks)
	}
	lk.el = make([]uint64, blocks*slots)
	for t := range nt {
		b := int(lk.aux[t*ransAuxWords+ransAuxEL])
		if b == 0 {
			continue
		}
		l, w := lv[levOff[t]:], lk.el[(b-1)*slots:][:slots]
		for x, e := range ent[t*slots:][:slots] {
			w[x] = uint64(e) | uint64(math.Float32bits(l[e&0xff]))<<32
		}
	}
	return lk, nil
}

// levelsMatch reports whether lk holds slot entries and the levels of
// the components whose tables are at entOff are those of lv from levOff,
// every component with slot entries at its table's offset.
func (lk *RANSLookup) levelsMatch(lv []float32, entOff, levOff []int32) bool {
	if len(lk.el) == 0 || len(lv) != len(lk.lv) || &lv[0] != &lk.lv[0] {
		return false
	}
	for c, o := range entOff {
		if t := o >> RANSScaleBits; lk.levOff[t] >= 0 && lk.levOff[t] != levOff[c] {
			return false
		}
	}
	return true
}

// NewRANSLookup makes the lookups of ent's tables. It fails on a table
// that is not a layout-2 table: entries whose symbols do not run in order
// over consecutive slots, or whose frequency or bias disagree with them.
// A table of zeros (an unused option) is read by the gather.
func NewRANSLookup(ent []uint32) (*RANSLookup, error) {
	const slots = 1 << RANSScaleBits
	if len(ent)%slots != 0 {
		return nil, fmt.Errorf("cpu: rANS lookup: %d entries, not whole tables of %d", len(ent), slots)
	}
	lk := &RANSLookup{ent: ent, aux: make([]uint32, len(ent)/slots*ransAuxWords)}
	for t := range len(ent) / slots {
		if err := ransAux(lk.aux[t*ransAuxWords:][:ransAuxWords], ent[t*slots:][:slots]); err != nil {
			return nil, fmt.Errorf("cpu: rANS lookup: table %d: %w", t, err)
		}
	}
	return lk, nil
}

// ransAux fills one table's lookup.
func ransAux(aux, ent []uint32) error {
	const slots = 1 << RANSScaleBits
	if !slices.ContainsFunc(ent, func(e uint32) bool { return e != 0 }) {
		aux[ransAuxMode], aux[ransAuxOut] = ransModeGather, slots
		return nil
	}
	// The symbols' starts and frequencies, checked against every entry.
	var start, freq [257]uint32
	n := 0
	for x, e := range ent {
		s, f, bias := int(e&0xff), e>>8&(slots-1), e>>20
		if s != n-1 && !(s == n && start[max(n-1, 0)]+freq[max(n-1, 0)] == uint32(x)) {
			return fmt.Errorf("slot %d's symbol %d does not follow slot %d's", x, s, x-1)
		}
		if s == n {
			start[s], freq[s] = uint32(x), f
			n++
		}
		if f == 0 || f != freq[s] || bias != uint32(x)-start[s] {
			return fmt.Errorf("slot %d's entry %#x disagrees with symbol %d's start %d and frequency %d", x, e, s, start[s], freq[s])
		}
	}
	if start[n-1]+freq[n-1] != slots {
		return fmt.Errorf("symbol %d's frequency %d ends at slot %d, not %d", n-1, freq[n-1], start[n-1]+freq[n-1], slots)
	}
	// The window: the ransWindow consecutive symbols of most slots.
	base, w := 0, min(n, ransWindow)
	best := uint32(0)
	for b := 0; b+w <= n; b++ {
		if m := start[b+w-1] + freq[b+w-1] - start[b]; m > best {
			best, base = m, b
		}
	}
	in := func(s uint32) bool { return int(s) >= base && int(s) < base+w }
	var first, link [ransBuckets]byte
	bound := aux[ransAuxBound:][:ransLinks]
	links := 1
	for bk := range ransBuckets {
		lo := bk << ransBucketShift
		s0, s1 := ent[lo]&0xff, ent[lo+1<<ransBucketShift-1]&0xff
		if s1 < uint32(base) || s0 >= uint32(base+w) || (s0 != s1 && links == ransLinks) {
			first[bk] = ransOutside // no slot in the window, or no bitmap left
			continue
		}
		first[bk] = byte(int(s0) - base)
		if s0 == s1 {
			continue // link 0, the empty bitmap
		}
		var m uint32
		for i := 1; i < 1<<ransBucketShift; i++ {
			if start[ent[lo+i]&0xff] == uint32(lo+i) {
				m |= 1 << i
			}
		}
		link[bk] = byte(links)
		bound[links] = m
		links++
	}
	outside := 0
	for x, e := range ent {
		if first[x>>ransBucketShift] == ransOutside || !in(e&0xff) {
			outside++
		}
	}
	for i := range w {
		aux[ransAuxFS+i] = freq[base+i] | start[base+i]<<16
	}
	// The compares' window: the ransCmpMax consecutive symbols of most
	// slots (all of a table of up to ransCmpMax).
	if n <= 2*ransCmpMax {
		cw, cb, most := min(n, ransCmpMax), 0, uint32(0)
		for b := 0; b+cw <= n; b++ {
			if m := start[b+cw-1] + freq[b+cw-1] - start[b]; m > most {
				most, cb = m, b
			}
		}
		limit := uint32(0)
		if n > ransCmpMax {
			limit = ransCmpOutside
		}
		if slots-most <= limit {
			aux[ransAuxCmp], aux[ransAuxCmpBase] = 1, uint32(cb)
			for i := range cw {
				aux[ransAuxFreq+i], aux[ransAuxStart+i] = freq[cb+i], start[cb+i]
			}
		}
	}
	for i := range ransBuckets / 4 {
		aux[ransAuxFirst+i] = uint32(first[4*i]) | uint32(first[4*i+1])<<8 | uint32(first[4*i+2])<<16 | uint32(first[4*i+3])<<24
		aux[ransAuxLink+i] = uint32(link[4*i]) | uint32(link[4*i+1])<<8 | uint32(link[4*i+2])<<16 | uint32(link[4*i+3])<<24
	}
	aux[ransAuxBase], aux[ransAuxCount], aux[ransAuxOut] = uint32(base), uint32(w), uint32(outside)
	switch {
	case outside == 0 && n <= 32:
		aux[ransAuxMode] = ransModeNarrow
	case outside <= ransMaxOutside:
		aux[ransAuxMode] = ransModeWide
	default:
		aux[ransAuxMode], aux[ransAuxOut] = ransModeGather, slots
	}
	return nil
}

// Gathered returns how many of table t's slots the gather-free kernels
// leave to the gather: 0 for a table looked up in registers alone, 1 <<
// RANSScaleBits for one they always gather.
func (lk *RANSLookup) Gathered(t int) int { return int(lk.aux[t*ransAuxWords+ransAuxOut]) }

// ransAuxLookup is what the kernels compute from one table's lookup for
// slot x: the symbol, its frequency and start, or ok false for a slot
// they leave to the gather.
func ransAuxLookup(aux []uint32, x uint32) (sym, freq, start uint32, ok bool) {
	bk := x >> ransBucketShift
	first := aux[ransAuxFirst+bk/4] >> (8 * (bk % 4)) & 0xff
	link := aux[ransAuxLink+bk/4] >> (8 * (bk % 4)) & 0xff
	lowBits := ^uint32(0) >> (31 - x&31)
	r := first + uint32(bits.OnesCount32(aux[ransAuxBound+link&63]&lowBits))
	if r&0xc0 != 0 {
		return 0, 0, 0, false
	}
	fs := aux[ransAuxFS+r&63]
	return aux[ransAuxBase] + r&63, fs & 0xffff, fs >> 16, true
}

// checkLookup panics unless lk is nil or made from ent, with every
// table in entOff at a whole table's offset.
func checkLookup(fn string, ent []uint32, lk *RANSLookup, entOff []int32) {
	if lk == nil {
		return
	}
	if len(lk.ent) != len(ent) || &lk.ent[0] != &ent[0] {
		panic(fmt.Sprintf("cpu: %s: a lookup of %d entries made from other tables than these %d", fn, len(lk.ent), len(ent)))
	}
	for t, o := range entOff {
		if o%(1<<RANSScaleBits) != 0 {
			panic(fmt.Sprintf("cpu: %s: component %d's table at %d, inside a table of the lookup's", fn, t, o))
		}
	}
}
