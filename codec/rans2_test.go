package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cputime"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// rans2Case builds comps components of per symbols drawn from their
// layout-2 tables' probabilities, options taken in turn from opts of
// family tab, with level j of component c at 1000*c + j and scales
// that round (1 + (c mod 5)/3).
func rans2Case(rng *rand.Rand, tab *pcTables, opts []int, comps, per int) (syms []uint8, tabs []*ransTable, pl *rans2Plan, scale []float32) {
	pl = &rans2Plan{ent: tab.ent2, lk: tab.lk2}
	for c := range comps {
		o := opts[c%len(opts)]
		tabs = append(tabs, tab.ans2[o])
		pl.entOff = append(pl.entOff, int32(o)<<rans2ScaleBits)
		pl.levOff = append(pl.levOff, int32(len(pl.lv)))
		pl.nsym = append(pl.nsym, int32(len(tab.levels[o])))
		for j := range tab.levels[o] {
			pl.lv = append(pl.lv, float32(1000*c+j))
		}
		scale = append(scale, 1+float32(c%5)/3)
	}
	syms = make([]uint8, comps*per)
	for k := range syms {
		syms[k] = tabs[k/per].slot[rng.IntN(1<<rans2ScaleBits)]
	}
	return syms, tabs, pl, scale
}

// rans2Reference decodes a layout-2 stream as the format describes it,
// from the tables' frequencies and starts (not the packed entries), one
// symbol at a time: the Go and SIMD decoders are checked against it.
func rans2Reference(src []byte, syms, per int, tabs []*ransTable) (out []uint8, final [rans2Lanes]uint32, err error) {
	if len(src) < 4 {
		return nil, final, fmt.Errorf("short")
	}
	long := binary.LittleEndian.Uint32(src)
	pos := 4
	x := final[:]
	for i := range x {
		nb := 3 + int(long>>i&1)
		if pos+nb > len(src) {
			return nil, final, fmt.Errorf("short")
		}
		for b := range nb {
			x[i] |= uint32(src[pos+b]) << (8 * b)
		}
		pos += nb
	}
	for k0 := 0; k0 < syms; k0 += rans2Lanes {
		for i := range rans2Lanes {
			k := k0 + i
			if k >= syms {
				break
			}
			t := tabs[k/per]
			slot := x[i] % (1 << rans2ScaleBits)
			s := t.slot[slot]
			out = append(out, s)
			x[i] = t.freq[s]*(x[i]>>rans2ScaleBits) + slot - t.start[s]
		}
		for i := range rans2Lanes {
			if k0+i < syms && x[i] < 1<<16 {
				if pos+2 > len(src) {
					return nil, final, fmt.Errorf("ends early")
				}
				x[i] = x[i]<<16 | uint32(binary.LittleEndian.Uint16(src[pos:]))
				pos += 2
			}
		}
	}
	if pos != len(src) {
		return nil, final, fmt.Errorf("%d bytes unread", len(src)-pos)
	}
	return out, final, nil
}

// ecFamilies are every quantizer family format 9 codes: pcFamilies and
// the entropy-constrained one.
var ecFamilies = append(slices.Clone(pcFamilies), struct {
	name string
	tab  func() (*pcTables, error)
}{"ecsq", ecsqTables})

// TestRANS2RoundTrip: layout 2 streams of every family's tables, whole
// and partial groups, components of 32 and not, decode to their symbols
// (this process's kernel level; TestKernelLevels reruns it at each),
// equal the format's reference decoder, carry their lanes' payloads, and
// cost at most their information plus the lanes' states; cut, extended
// and altered streams are errors.
func TestRANS2RoundTrip(t *testing.T) {
	for _, fam := range ecFamilies {
		tab, err := fam.tab()
		if err != nil {
			t.Fatal(err)
		}
		var opts []int
		for o := 1; o <= tab.n; o++ {
			opts = append(opts, o)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for _, tc := range []struct{ comps, per, hide int }{{0, 32, 0}, {1, 1, 0}, {1, 4, 1}, {2, 7, 3}, {5, 64, 32}, {5, 13, 5}, {3, 800, 32}, {44, 64, 32}, {13, 96, 7}, {2, 32, 0}} {
			name := fmt.Sprintf("%s/%d comps of %d/%d hidden", fam.name, tc.comps, tc.per, tc.hide)
			// Every option appears: the components start at a rotating one.
			o0 := rng.IntN(len(opts))
			syms, tabs, pl, scale := rans2Case(rng, tab, append(slices.Clone(opts[o0:]), opts[:o0]...), tc.comps, tc.per)
			var info float64
			for k, s := range syms {
				info += rans2ScaleBits - math.Log2(float64(tabs[k/tc.per].freq[s]))
			}
			hide := make([]uint16, tc.hide)
			for i := range hide {
				hide[i] = uint16(rng.Uint32())
			}
			stream, _ := rans2Encode([]byte("prefix"), nil, syms, tabs, tc.per, hide)
			if string(stream[:6]) != "prefix" {
				t.Fatalf("%s: the prefix was overwritten", name)
			}
			stream = stream[6:]
			if got := float64(8 * len(stream)); got > info+16*float64(tc.hide)+16*rans2Lanes+8*(4+4*rans2Lanes) {
				t.Errorf("%s: %v bits, their information is %v", name, got, info)
			}
			ref, final, err := rans2Reference(stream, len(syms), tc.per, tabs)
			if err != nil || !slices.Equal(ref, syms) {
				t.Fatalf("%s: the reference decoder: %v (symbols equal: %v)", name, err, slices.Equal(ref, syms))
			}
			for i, x := range final {
				want := uint32(ransWordL)
				if i < tc.hide {
					want += uint32(hide[i])
				}
				if x != want {
					t.Fatalf("%s: lane %d ends at %#x, want %#x", name, i, x, want)
				}
			}
			if tc.comps == 0 {
				continue
			}
			out := make([]float32, len(syms))
			got := make([]uint16, tc.hide)
			if err := rans2Decode(out, stream, tc.per, pl, scale, got, new(rans2Scratch)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for k, s := range syms {
				if w := float32(1000*(k/tc.per)+int(s)) * scale[k/tc.per]; out[k] != w {
					t.Fatalf("%s: symbol %d decoded as level %v, want %v", name, k, out[k], w)
				}
			}
			if !slices.Equal(got, hide) {
				t.Fatalf("%s: payloads %v, want %v", name, got, hide)
			}
			for _, bad := range []struct {
				name   string
				stream []byte
				hidden int
			}{
				{"cut", stream[:len(stream)-2], tc.hide},
				{"extended", append(slices.Clone(stream), 0, 0), tc.hide},
				{"odd", stream[:len(stream)-1], tc.hide},
				{"no states", stream[:3*rans2Lanes], tc.hide},
				{"lengths' mask altered", flip(stream, 0), tc.hide},
				{"first state's high byte altered", flip(stream, 6), tc.hide},
				{"read with one lane fewer carrying a payload", stream, max(tc.hide-1, 0)},
			} {
				if bad.name == "read with one lane fewer carrying a payload" && (tc.hide == 0 || hide[tc.hide-1] == 0) {
					continue
				}
				if err := rans2Decode(out, slices.Clone(bad.stream), tc.per, pl, scale, got[:bad.hidden], new(rans2Scratch)); err == nil {
					t.Errorf("%s: stream %s: decoded without error", name, bad.name)
				}
			}
		}
	}
}

// FuzzRANS2Decode: any layout-2 stream decodes or fails, never panics or
// reads outside it (the decoder runs on an exact-length copy), whole
// groups included, which the kernels decode.
func FuzzRANS2Decode(f *testing.F) {
	tab, err := ecsqTables()
	if err != nil {
		f.Fatal(err)
	}
	// Options of one and of two registers' windows (2, 1; 6), of a window
	// with lanes outside it (9) and gathered (12).
	syms, tabs, pl, scale := rans2Case(rand.New(rand.NewPCG(1, 2)), tab, []int{2, 12, 1, 9, 6}, 5, 64)
	good, _ := rans2Encode(nil, nil, syms, tabs, 64, []uint16{1, 2, 3})
	gather := *pl
	gather.lk = nil
	f.Add(good, uint8(63), uint8(3))
	f.Add(good, uint8(4), uint8(0))
	f.Add(good[:len(good)-20], uint8(63), uint8(3))
	f.Add(make([]byte, 4+4*rans2Lanes), uint8(0), uint8(0))
	f.Add(append([]byte{0xff, 0xff, 0xff, 0xff}, make([]byte, 4*rans2Lanes)...), uint8(31), uint8(0))
	f.Fuzz(func(t *testing.T, stream []byte, per, hidden uint8) {
		p := int(per)%96 + 1
		out, want := make([]float32, len(tabs)*p), make([]float32, len(tabs)*p)
		hide, whide := make([]uint16, int(hidden)%(rans2Lanes+1)), make([]uint16, int(hidden)%(rans2Lanes+1))
		err := rans2Decode(out, slices.Clone(stream), p, pl, scale, hide, new(rans2Scratch))
		// The gather-free lookup decodes as the gather, bit for bit.
		werr := rans2Decode(want, slices.Clone(stream), p, &gather, scale, whide, new(rans2Scratch))
		if (err == nil) != (werr == nil) || err == nil && (!slices.Equal(out, want) || !slices.Equal(hide, whide)) {
			t.Fatalf("lookup: %v, gather: %v; values equal %v", err, werr, slices.Equal(out, want))
		}
	})
}

// TestRANS2DecodeStreams: two to four streams of one plan decoded side by
// side (rans2DecodeStreams: this process's kernel level; TestKernelLevels
// reruns it at each) give each stream's rans2Decode values and payloads
// bit for bit, whatever their lengths (streams leave the side-by-side
// part at different symbols), and an error in a stream is that
// stream's, which rans2Decode also refuses.
func TestRANS2DecodeStreams(t *testing.T) {
	for _, fam := range ecFamilies {
		tab, err := fam.tab()
		if err != nil {
			t.Fatal(err)
		}
		var opts []int
		for o := 1; o <= tab.n; o++ {
			opts = append(opts, o)
		}
		rng := rand.New(rand.NewPCG(5, 7))
		for _, tc := range []struct{ comps, per, hide, streams int }{{1, 32, 0, 2}, {44, 64, 32, 2}, {44, 64, 32, 3}, {44, 64, 32, 4}, {5, 64, 5, 4}, {3, 800, 32, 3}, {13, 96, 7, 4}, {5, 13, 5, 2}, {2, 7, 3, 3}} {
			name := fmt.Sprintf("%s/%d streams of %d comps of %d/%d hidden", fam.name, tc.streams, tc.comps, tc.per, tc.hide)
			o0 := rng.IntN(len(opts))
			rot := append(slices.Clone(opts[o0:]), opts[:o0]...)
			ns := tc.streams
			src, bad := make([][]byte, ns), make([][]byte, ns)
			scale, vals := make([][]float32, ns), make([][]float32, ns)
			want := make([][]uint16, ns)
			var pl *rans2Plan
			for j := range ns {
				var syms []uint8
				var tabs []*ransTable
				syms, tabs, pl, scale[j] = rans2Case(rng, tab, rot, tc.comps, tc.per)
				// Stream j's symbols skewed to its tables' lowest
				// codes by j/4, so that its words run out at another
				// pace, and other scales.
				for k := range syms {
					if rng.IntN(4) < j {
						syms[k] = tabs[k/tc.per].slot[0]
					}
				}
				for c := range scale[j] {
					scale[j][c] *= 1 - float32(j)/8
				}
				want[j] = make([]uint16, tc.hide)
				for i := range want[j] {
					want[j][i] = uint16(rng.Uint32())
				}
				src[j], _ = rans2Encode(nil, nil, syms, tabs, tc.per, want[j])
				vals[j] = make([]float32, len(syms))
				if err := rans2Decode(vals[j], src[j], tc.per, pl, scale[j], make([]uint16, tc.hide), new(rans2Scratch)); err != nil {
					t.Fatalf("%s: stream %d: %v", name, j, err)
				}
				bad[j] = flip(src[j], len(src[j])/2)
			}
			n := len(vals[0])
			decode := func(in [][]byte, sc [][]float32) ([][]float32, [][]uint16, int, error) {
				out, hd, scr := make([][]float32, ns), make([][]uint16, ns), make([]*rans2Scratch, ns)
				for j := range ns {
					out[j], hd[j], scr[j] = make([]float32, n), make([]uint16, tc.hide), new(rans2Scratch)
				}
				j, err := rans2DecodeStreams(out, in, tc.per, pl, sc, hd, scr, new(cpu.RANSStreams))
				return out, hd, j, err
			}
			for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}} {
				var ord []int
				for _, o := range order {
					if o < ns {
						ord = append(ord, o)
					}
				}
				in, sc := make([][]byte, ns), make([][]float32, ns)
				for j, o := range ord {
					in[j], sc[j] = src[o], scale[o]
				}
				out, hd, j, err := decode(in, sc)
				if err != nil {
					t.Fatalf("%s: streams %v: stream %d: %v", name, ord, j, err)
				}
				for j, o := range ord {
					if !slices.Equal(out[j], vals[o]) || !slices.Equal(hd[j], want[o]) {
						t.Fatalf("%s: streams %v: stream %d differs from its own decode", name, ord, j)
					}
				}
				// One stream altered (then cut) at a time: the
				// streams fail in it if and only if rans2Decode does.
				for j := range ns {
					for _, alt := range [][]byte{bad[ord[j]], src[ord[j]][:len(src[ord[j]])-2]} {
						in2 := slices.Clone(in)
						in2[j] = alt
						single := rans2Decode(make([]float32, n), alt, tc.per, pl, sc[j], make([]uint16, tc.hide), new(rans2Scratch))
						_, _, got, err := decode(in2, sc)
						if (err != nil) != (single != nil) || (err != nil && got != j) {
							t.Fatalf("%s: streams %v, stream %d altered: error %v in stream %d, alone %v", name, ord, j, err, got, single)
						}
					}
				}
			}
		}
	}
}

// FuzzRANS2DecodeStreams: any layout-2 streams decode side by side (two
// fuzzed ones, then four with two good ones around them) as each decodes
// alone (values, or an error in a stream that fails alone), never
// panicking or reading outside them.
func FuzzRANS2DecodeStreams(f *testing.F) {
	tab, err := ecsqTables()
	if err != nil {
		f.Fatal(err)
	}
	syms, tabs, pl, scale := rans2Case(rand.New(rand.NewPCG(1, 2)), tab, []int{2, 12, 1, 7, 9, 4, 5}, 12, 64)
	good, _ := rans2Encode(nil, nil, syms, tabs, 64, []uint16{1, 2, 3})
	gather := *pl // each stream alone by the gather: the lookup's reference
	gather.lk = nil
	f.Add(good, good, uint8(3))
	f.Add(good, good[:len(good)-20], uint8(3))
	f.Add(flip(good, len(good)/2), good, uint8(3))
	f.Add(good, make([]byte, 4+4*rans2Lanes), uint8(0))
	f.Fuzz(func(t *testing.T, a, b []byte, hidden uint8) {
		h := int(hidden) % (rans2Lanes + 1)
		for _, streams := range [][][]byte{{a, b}, {good, a, b, good}} {
			ns := len(streams)
			src, want, out := make([][]byte, ns), make([][]float32, ns), make([][]float32, ns)
			werr := make([]error, ns)
			hide, sc, scales := make([][]uint16, ns), make([]*rans2Scratch, ns), make([][]float32, ns)
			for j := range ns {
				src[j] = slices.Clone(streams[j])
				want[j], out[j] = make([]float32, len(syms)), make([]float32, len(syms))
				werr[j] = rans2Decode(want[j], src[j], 64, &gather, scale, make([]uint16, h), new(rans2Scratch))
				hide[j], sc[j], scales[j] = make([]uint16, h), new(rans2Scratch), scale
			}
			j, err := rans2DecodeStreams(out, src, 64, pl, scales, hide, sc, new(cpu.RANSStreams))
			anyErr := slices.ContainsFunc(werr, func(e error) bool { return e != nil })
			switch {
			case anyErr:
				if err == nil || werr[j] == nil {
					t.Fatalf("%d streams: alone they give %v; side by side %v in stream %d", ns, werr, err, j)
				}
			case err != nil:
				t.Fatalf("%d streams: they decode alone; side by side stream %d fails: %v", ns, j, err)
			default:
				for j := range ns {
					if !slices.Equal(out[j], want[j]) {
						t.Fatalf("%d streams: stream %d's values differ from its own decode", ns, j)
					}
				}
			}
		}
	})
}

// BenchmarkRANS2Decode times a layout-2 stream of a 64-row block of 44
// components (options 1 to 12 of the entropy-constrained family in turn)
// alone, without the block's mixing; BenchmarkRANSDecode is layout 1's.
func BenchmarkRANS2Decode(b *testing.B) {
	tab, err := ecsqTables()
	if err != nil {
		b.Fatal(err)
	}
	opts := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	syms, tabs, pl, scale := rans2Case(rand.New(rand.NewPCG(5, 6)), tab, opts, 44, 64)
	stream, _ := rans2Encode(nil, nil, syms, tabs, 64, make([]uint16, 32))
	out := make([]float32, len(syms))
	hide := make([]uint16, 32)
	var x rans2Scratch
	cpu0 := cputime.Seconds()
	for b.Loop() {
		if err := rans2Decode(out, stream, 64, pl, scale, hide, &x); err != nil {
			b.Fatal(err)
		}
	}
	msym := float64(len(syms)) * float64(b.N) / 1e6
	b.ReportMetric(msym/b.Elapsed().Seconds(), "Msym/s")
	if cpu := cputime.Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(msym/cpu, "Msym/cpu-s")
	}
}

// TestKakeyaPCStreamLayouts: kakeya-pc:ec and kvtc codecs writing stream
// layouts 1 and 2 share allocation and tag, each decodes the other's
// blocks to the same values bit for bit (the codes are the same; only the
// coder differs), and layout 2's blocks are no larger than layout 1's
// plus 1% on average.
func TestKakeyaPCStreamLayouts(t *testing.T) {
	const n, d = 64, 64
	rng := rand.New(rand.NewPCG(7, 8))
	st := pcStats(t, pcBlocks(rng, 200, n, d), n, d)
	test := pcBlocks(rand.New(rand.NewPCG(7, 8)), 216, n, d)[200:]
	for _, uniform := range []bool{false, true} {
		for _, rate := range []float64{1, 2.5, 4} {
			var k [3]*KakeyaPC
			for l := 1; l <= 2; l++ {
				o := DefaultKakeyaPCOptions()
				o.Rate, o.Entropy, o.Uniform, o.StreamLayout = rate, true, uniform, l
				var err error
				if k[l], err = NewKakeyaPC(o, st, nil); err != nil {
					t.Fatal(err)
				}
			}
			if k[1].tag != k[2].tag || !slices.Equal(k[1].alloc, k[2].alloc) || k[1].Name() == k[2].Name() {
				t.Fatalf("%s and %s: tags %#x %#x, allocations equal %v", k[1].Name(), k[2].Name(), k[1].tag, k[2].tag, slices.Equal(k[1].alloc, k[2].alloc))
			}
			var size [3]int
			for _, x := range test {
				var y [3][3][]float32 // y[writer][reader]
				for w := 1; w <= 2; w++ {
					enc, err := k[w].Encode(nil, x, n, d)
					if err != nil {
						t.Fatal(err)
					}
					if int(enc[3]) != w {
						t.Fatalf("%s wrote stream layout %d", k[w].Name(), enc[3])
					}
					size[w] += len(enc)
					for r := 1; r <= 2; r++ {
						y[w][r] = make([]float32, n*d)
						if err := k[r].Decode(y[w][r], enc, n, d); err != nil {
							t.Fatalf("%s reading %s's block: %v", k[r].Name(), k[w].Name(), err)
						}
					}
				}
				for w := 1; w <= 2; w++ {
					for r := 1; r <= 2; r++ {
						if !slices.Equal(y[w][r], y[1][1]) {
							t.Fatalf("%s's block read by %s differs from layout 1's", k[w].Name(), k[r].Name())
						}
					}
				}
			}
			t.Logf("%s: %d coded, %d means: %.1f bytes per block at layout 1, %.1f at layout 2 (%+.2f%%)", k[2].Name(), len(k[2].codedIdx), len(k[2].meanIdx),
				float64(size[1])/float64(len(test)), float64(size[2])/float64(len(test)), 100*(float64(size[2])/float64(size[1])-1))
			if float64(size[2]) > 1.01*float64(size[1]) {
				t.Errorf("%s: layout 2's blocks %d bytes, layout 1's %d", k[2].Name(), size[2], size[1])
			}
		}
	}
}

// BenchmarkRANS2DecodeStreams times one, two and four streams like
// BenchmarkRANS2Decode's decoded side by side (rans2DecodeStreams), by
// the gather-free lookup where the CPU runs it and by the gather, over
// three sets of options; Msym counts every stream's.
func BenchmarkRANS2DecodeStreams(b *testing.B) {
	tab, err := ecsqTables()
	if err != nil {
		b.Fatal(err)
	}
	// all: options 1 to 12 in turn; narrow: 1-5 (up to 16 symbols, looked
	// up in one register per table); wide: 6-9 (33 to 95, a window of 64).
	// The size classes the kernels tell apart: small 1-3 (3 to 6 symbols),
	// mid 4-5 (10 and 16), large 10-12 (134 to 255).
	for _, set := range []struct {
		name string
		opts []int
	}{{"all", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}, {"narrow", []int{1, 2, 3, 4, 5}}, {"wide", []int{6, 7, 8, 9}},
		{"small", []int{1, 2, 3}}, {"mid", []int{4, 5}}, {"large", []int{10, 11, 12}}} {
		for _, ns := range []int{1, 2, 4} {
			for _, how := range []string{"levels", "lookup", "gather"} {
				b.Run(fmt.Sprintf("%s/%d/%s", set.name, ns, how), func(b *testing.B) { benchStreams(b, tab, set.opts, ns, how) })
			}
		}
	}
}

// benchStreams times ns streams of 44 components of 64 over opts decoded
// side by side (one alone by rans2Decode): how is "levels" for the
// gather-free lookup with the family's levels, as the codec decodes
// (the AVX2 kernels then read a slot's entry and level at once),
// "lookup" for the lookup with levels of the components' own, and
// "gather" for the gather.
func benchStreams(b *testing.B, tab *pcTables, opts []int, ns int, how string) {
	rng := rand.New(rand.NewPCG(5, 6))
	out, src, scale := make([][]float32, ns), make([][]byte, ns), make([][]float32, ns)
	hide, sc := make([][]uint16, ns), make([]*rans2Scratch, ns)
	var pl *rans2Plan
	n := 0
	for j := range ns {
		var syms []uint8
		var tabs []*ransTable
		syms, tabs, pl, scale[j] = rans2Case(rng, tab, opts, 44, 64)
		src[j], _ = rans2Encode(nil, nil, syms, tabs, 64, make([]uint16, 32))
		out[j], hide[j], sc[j] = make([]float32, len(syms)), make([]uint16, 32), new(rans2Scratch)
		n += len(syms)
	}
	switch how {
	case "gather":
		pl.lk = nil
	case "levels":
		pl.lv = tab.lv2
		for c := range pl.levOff {
			pl.levOff[c] = tab.lv2Off[pl.entOff[c]>>rans2ScaleBits]
		}
	}
	st := new(cpu.RANSStreams)
	cpu0 := cputime.Seconds()
	for b.Loop() {
		if ns == 1 {
			if err := rans2Decode(out[0], src[0], 64, pl, scale[0], hide[0], sc[0]); err != nil {
				b.Fatal(err)
			}
		} else if _, err := rans2DecodeStreams(out, src, 64, pl, scale, hide, sc, st); err != nil {
			b.Fatal(err)
		}
	}
	msym := float64(n) * float64(b.N) / 1e6
	b.ReportMetric(msym/b.Elapsed().Seconds(), "Msym/s")
	if cpu := cputime.Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(msym/cpu, "Msym/cpu-s")
	}
}

// TestKakeyaPCBlocks: KakeyaPC's calls over several blocks (fixed-width,
// and entropy coded in either stream layout, groups of mixed layouts too)
// give the one-block calls' results bit for bit, and a corrupt block in
// any place is an error that leaves AddWeightedBlocks's sums as they were.
func TestKakeyaPCBlocks(t *testing.T) {
	const n, d, m = 64, 64, 3
	rng := rand.New(rand.NewPCG(9, 10))
	st := pcStats(t, pcBlocks(rng, 24, n, d), n, d)
	x := pcBlocks(rand.New(rand.NewPCG(9, 11)), MaxBlocks, n, d)
	cos, sin := make([]float32, MaxBlocks*n*d/2), make([]float32, MaxBlocks*n*d/2)
	for i := range cos {
		cos[i], sin[i] = float32(math.Cos(0.01*float64(i))), float32(math.Sin(0.01*float64(i)))
	}
	w := make([]float32, m*MaxBlocks*n)
	for i := range w {
		w[i] = rng.Float32()
	}
	codecs := map[string]*KakeyaPC{}
	for _, name := range []string{"fixed", "ec1", "ec2"} {
		o := DefaultKakeyaPCOptions()
		if name != "fixed" {
			o.Entropy, o.StreamLayout = true, int(name[2]-'0')
		}
		k, err := NewKakeyaPC(o, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		codecs[name] = k
	}
	for _, tc := range []struct {
		reader  string
		writers []string
	}{
		{"fixed", []string{"fixed", "fixed"}}, {"ec2", []string{"ec2", "ec2"}}, {"ec2", []string{"ec2", "ec2", "ec2"}},
		{"ec2", []string{"ec2", "ec2", "ec2", "ec2"}}, {"ec1", []string{"ec1", "ec1", "ec1"}}, {"ec2", []string{"ec1", "ec2"}},
		{"ec2", []string{"ec2", "ec2", "ec1", "ec2"}}, {"ec2", []string{"ec2"}},
	} {
		k, nb := codecs[tc.reader], len(tc.writers)
		src := make([][]byte, nb)
		for j, wr := range tc.writers {
			var err error
			if src[j], err = codecs[wr].Encode(nil, x[j], n, d); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("%s reading %v", tc.reader, tc.writers)
		lo, hi := make([]int, nb), make([]int, nb)
		ws, cs, ss := make([][]float32, nb), make([][]float32, nb), make([][]float32, nb)
		want, got := make([][]float32, nb), make([][]float32, nb)
		wantSum := make([]float32, m*d)
		for j := range nb {
			lo[j], hi[j] = 5*(j%2), n-7*(j%3)
			ws[j], cs[j], ss[j] = w[j*n:], cos[j*n*d/2:], sin[j*n*d/2:]
			want[j], got[j] = make([]float32, n*d), make([]float32, n*d)
			if err := k.DecodeRotated(want[j], src[j], n, d, cs[j], ss[j]); err != nil {
				t.Fatalf("%s: block %d: %v", name, j, err)
			}
			if err := k.AddWeighted(wantSum, m, ws[j], MaxBlocks*n, src[j], n, d, lo[j], hi[j]); err != nil {
				t.Fatalf("%s: block %d: %v", name, j, err)
			}
		}
		if err := k.DecodeRotatedBlocks(got, src, n, d, cs, ss); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sum := make([]float32, m*d)
		if err := k.AddWeightedBlocks(sum, m, ws, MaxBlocks*n, src, n, d, lo, hi); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for j := range nb {
			if !bitsEqual(got[j], want[j]) {
				t.Fatalf("%s: block %d's rotated rows differ from DecodeRotated's", name, j)
			}
		}
		if !bitsEqual(sum, wantSum) {
			t.Fatalf("%s: the sums differ from AddWeighted's", name)
		}
		for j := range nb {
			bad := slices.Clone(src)
			bad[j] = flip(src[j], len(src[j])-40)
			if err := k.DecodeRotatedBlocks(got, bad, n, d, cs, ss); err == nil {
				t.Errorf("%s: DecodeRotatedBlocks with block %d corrupt: no error", name, j)
			}
			before := slices.Clone(sum)
			if err := k.AddWeightedBlocks(sum, m, ws, MaxBlocks*n, bad, n, d, lo, hi); err == nil || !bitsEqual(sum, before) {
				t.Errorf("%s: AddWeightedBlocks with block %d corrupt: %v, sums changed: %v", name, j, err, !bitsEqual(sum, before))
			}
		}
	}
	k := codecs["ec2"]
	if err := k.DecodeRotatedBlocks(make([][]float32, MaxBlocks+1), make([][]byte, MaxBlocks+1), n, d, make([][]float32, MaxBlocks+1), make([][]float32, MaxBlocks+1)); err == nil {
		t.Errorf("%d blocks in one call: no error", MaxBlocks+1)
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestRANS2Start: rans2Start, branch-free over the lanes, reads the same
// states and position as rans2StartSlow, lane by lane, and fails where it
// fails, on streams of every length up to past its fast path's bound
// whose states sit on and around their bounds (2^16 for 3 bytes, 2^24
// for 4) or are random.
func TestRANS2Start(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 16))
	near := []uint32{ransWordL - 1, ransWordL, ransWordL + 1, 1<<24 - 1, 1 << 24, 1<<24 + 1, 1<<32 - 1}
	read := 0
	for round := range 4000 {
		var long uint32
		src := make([]byte, 4, 4+4*rans2Lanes+8)
		for i := range rans2Lanes {
			v := rng.Uint32()
			if rng.IntN(64) == 0 {
				v = near[rng.IntN(len(near))]
			} else if rng.IntN(2) == 0 {
				v = ransWordL + rng.Uint32N(1<<24-ransWordL)
			}
			if v >= 1<<24 && rng.IntN(256) != 0 || rng.IntN(1024) == 0 {
				long |= 1 << i
				src = binary.LittleEndian.AppendUint32(src, v)
			} else {
				src = append(src, byte(v), byte(v>>8), byte(v>>16))
			}
		}
		binary.LittleEndian.PutUint32(src, long)
		src = append(src, make([]byte, rng.IntN(8))...)
		if round%4 == 0 {
			src = src[:rng.IntN(len(src)+1)]
		}
		var x, xs [rans2Lanes]uint32
		pos, err := rans2Start(src, &x)
		posS, errS := rans2StartSlow(src, &xs)
		if (err == nil) != (errS == nil) || err == nil && (pos != posS || x != xs) {
			t.Fatalf("round %d, %d bytes: rans2Start %d, %v, slow %d, %v (states equal %v)", round, len(src), pos, err, posS, errS, x == xs)
		}
		if err == nil {
			read++
		}
	}
	if read < 1000 || read > 3000 {
		t.Errorf("%d of 4000 streams' states read: the cases test too little of one side", read)
	}
}
