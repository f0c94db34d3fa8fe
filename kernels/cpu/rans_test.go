package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ransTestFreqs returns frequencies of n symbols summing to 1 <<
// RANSScaleBits in the given shape: "gauss" (a bell over the symbols with
// tails of frequency 1, as the codec's quantizers' tables), "flat",
// "spike" (one symbol taking almost every slot) or "random".
func ransTestFreqs(rng *rand.Rand, n int, shape string) []uint32 {
	const total = 1 << RANSScaleBits
	w := make([]float64, n)
	for i := range w {
		switch shape {
		case "gauss":
			z := (float64(i) - float64(n-1)/2) / (float64(n) / 7)
			w[i] = math.Exp(-z * z / 2)
		case "flat":
			w[i] = 1
		case "spike":
			w[i] = 1e-9
			if i == n/3 {
				w[i] = 1
			}
		default:
			w[i] = rng.Float64() * rng.Float64()
		}
	}
	var sum float64
	for _, v := range w {
		sum += v
	}
	f := make([]uint32, n)
	left := total
	for i, v := range w {
		f[i] = uint32(max(1, int(v/sum*float64(total-n)))) // at least 1, leaving room
		left -= int(f[i])
	}
	for i := 0; left > 0; i = (i + 1) % n { // the rest spread from the middle
		f[(n/2+i)%n]++
		left--
	}
	return f
}

// ransTestTable packs the layout-2 entries of freq.
func ransTestTable(freq []uint32) []uint32 {
	ent := make([]uint32, 0, 1<<RANSScaleBits)
	for s, f := range freq {
		for b := range f {
			ent = append(ent, uint32(s)|f<<8|b<<20)
		}
	}
	return ent
}

// ransTestStart returns symbol s's start: the frequencies before it.
func ransTestStart(freq []uint32, s int) uint32 {
	var st uint32
	for _, f := range freq[:s] {
		st += f
	}
	return st
}

// ransTestSizes are alphabet sizes of every class the kernels tell apart:
// up to 8 (counted by compares, frequencies and levels in one register)
// and 9 (past them), up to 16 and 32 (one register's window), up to 64
// (two), past 64 (a window of the 64 likeliest, the rest gathered) up to
// 256.
var ransTestSizes = []int{2, 3, 4, 6, 7, 8, 9, 10, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 68, 95, 128, 134, 191, 255, 256}

var ransTestShapes = []string{"gauss", "flat", "spike", "random"}

// A ransTestFamily is one table of every size class and shape
// (ransTestSizes x ransTestShapes) in one entry array, each with its
// levels, and their lookup: tabs, levOff and nsym give each table's
// entry offset, level offset and symbol count.
type ransTestFamily struct {
	ent                []uint32
	lv                 []float32
	tabs, levOff, nsym []int32
	lk                 *RANSLookup
	// lkl is the lookup with the tables' levels (NewRANSLookupLevels).
	lkl *RANSLookup
}

// newRANSTestFamily builds the family from rng, symbol i's level of each
// table drawn by level(i).
func newRANSTestFamily(t *testing.T, rng *rand.Rand, level func(i int) float32) ransTestFamily {
	t.Helper()
	var f ransTestFamily
	for _, n := range ransTestSizes {
		for _, shape := range ransTestShapes {
			f.tabs = append(f.tabs, int32(len(f.ent)))
			f.ent = append(f.ent, ransTestTable(ransTestFreqs(rng, n, shape))...)
			f.levOff, f.nsym = append(f.levOff, int32(len(f.lv))), append(f.nsym, int32(n))
			for i := range n {
				f.lv = append(f.lv, level(i))
			}
		}
	}
	var err error
	if f.lk, err = NewRANSLookup(f.ent); err != nil {
		t.Fatal(err)
	}
	if f.lkl, err = NewRANSLookupLevels(f.ent, f.lv, f.levOff); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRANSLookupLevels: NewRANSLookupLevels's slot entries hold each
// slot's packed entry and its symbol's level, for the tables of more than
// ransElMin symbols alone; levelsMatch takes the levels they were made
// from and no others; a level offset past the levels, or a count of
// offsets not that of the tables, is an error.
func TestRANSLookupLevels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	f := newRANSTestFamily(t, rng, func(i int) float32 { return float32(rng.NormFloat64()) })
	lk := f.lkl
	withEl := 0
	for i, o := range f.tabs {
		tb := int(o) >> RANSScaleBits
		b := int(lk.aux[tb*ransAuxWords+ransAuxEL])
		if (b != 0) != (f.nsym[i] > ransElMin) {
			t.Fatalf("table %d of %d symbols: slot entries %d", tb, f.nsym[i], b)
		}
		if b == 0 {
			continue
		}
		withEl++
		for x, e := range f.ent[o:][:1<<RANSScaleBits] {
			w := lk.el[(b-1)<<RANSScaleBits+x]
			if uint32(w) != e || math.Float32frombits(uint32(w>>32)) != f.lv[int(f.levOff[i])+int(e&0xff)] {
				t.Fatalf("table %d slot %d: slot entry %#x, entry %#x level %v", tb, x, w, e, f.lv[int(f.levOff[i])+int(e&0xff)])
			}
		}
	}
	if withEl == 0 || len(lk.el) != withEl<<RANSScaleBits {
		t.Fatalf("%d tables with slot entries in %d", withEl, len(lk.el))
	}
	if !lk.levelsMatch(f.lv, f.tabs, f.levOff) {
		t.Error("the tables' own levels do not match")
	}
	if f.lk.levelsMatch(f.lv, f.tabs, f.levOff) {
		t.Error("a lookup without levels matches")
	}
	if lk.levelsMatch(slices.Clone(f.lv), f.tabs, f.levOff) {
		t.Error("a copy of the levels matches")
	}
	last := len(f.tabs) - 1 // 256 symbols
	moved := slices.Clone(f.levOff)
	moved[last]++
	if lk.levelsMatch(f.lv, f.tabs, moved) {
		t.Error("a component's levels at another offset match")
	}
	if _, err := NewRANSLookupLevels(f.ent, f.lv, f.levOff[:last]); err == nil || !strings.Contains(err.Error(), "level offsets") {
		t.Errorf("too few offsets: %v", err)
	}
	if _, err := NewRANSLookupLevels(f.ent, f.lv[:len(f.lv)-1], f.levOff); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("table %d", last)) {
		t.Errorf("levels cut short: %v", err)
	}
}

// TestRANSLookup: for tables of every size class and shape, the lookup
// gives every slot's symbol, frequency and start as the packed entry does,
// or leaves the slot to the gather, as many slots as Gathered says, none
// for tables of up to 64 symbols.
func TestRANSLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range ransTestSizes {
		for _, shape := range ransTestShapes {
			freq := ransTestFreqs(rng, n, shape)
			ent := ransTestTable(freq)
			// Two tables, and a table of zeros (an unused option) first.
			all := append(make([]uint32, 1<<RANSScaleBits), ent...)
			all = append(all, ent...)
			lk, err := NewRANSLookup(all)
			if err != nil {
				t.Fatalf("%d symbols, %s: %v", n, shape, err)
			}
			if g := lk.Gathered(0); g != 1<<RANSScaleBits {
				t.Fatalf("the zero table: %d slots gathered", g)
			}
			for tb := 1; tb <= 2; tb++ {
				aux := lk.aux[tb*ransAuxWords:][:ransAuxWords]
				mode, out := aux[ransAuxMode], 0
				for x, e := range ent {
					sym, f, st, ok := ransAuxLookup(aux, uint32(x))
					if !ok {
						out++
						continue
					}
					if sym != e&0xff || f != e>>8&0xfff || uint32(x)-st != e>>20 {
						t.Fatalf("%d symbols, %s: slot %d: symbol %d freq %d start %d, entry %#x", n, shape, x, sym, f, st, e)
					}
				}
				// The compares' window: all of a table of up to
				// ransCmpMax symbols; for up to twice that, the
				// ransCmpMax symbols of most slots where at most
				// ransCmpOutside slots lie outside them; their
				// frequencies and starts apart (zeros past them).
				cw, cb, cout := min(n, ransCmpMax), 0, 1<<RANSScaleBits
				for b := 0; b+cw <= n; b++ {
					if o := 1<<RANSScaleBits - int(ransTestStart(freq, b+cw)-ransTestStart(freq, b)); o < cout {
						cb, cout = b, o
					}
				}
				want := n <= ransCmpMax || n <= 2*ransCmpMax && cout <= ransCmpOutside
				if (aux[ransAuxCmp] == 1) != want || want && int(aux[ransAuxCmpBase]) != cb {
					t.Fatalf("%d symbols, %s: compares' window %d from %d, want %v from %d (%d slots outside)", n, shape, aux[ransAuxCmp], aux[ransAuxCmpBase], want, cb, cout)
				}
				for i := 0; want && i < ransCmpMax; i++ {
					f, st := uint32(0), uint32(0)
					if i < cw {
						f, st = freq[cb+i], ransTestStart(freq, cb+i)
					}
					if aux[ransAuxFreq+i] != f || aux[ransAuxStart+i] != st {
						t.Fatalf("%d symbols, %s: window symbol %d's frequency %d and start %d, want %d and %d", n, shape, i, aux[ransAuxFreq+i], aux[ransAuxStart+i], f, st)
					}
				}
				if tb == 1 && want && n > ransCmpMax {
					t.Logf("%3d symbols, %-6s: compares' window from %d, %d slots outside", n, shape, cb, cout)
				}
				if mode != ransModeGather && out != lk.Gathered(tb) {
					t.Fatalf("%d symbols, %s: %d slots outside the window, Gathered %d", n, shape, out, lk.Gathered(tb))
				}
				switch {
				case n <= 32 && mode != ransModeNarrow, n > 32 && n <= 64 && mode != ransModeWide:
					t.Errorf("%d symbols, %s: mode %d", n, shape, mode)
				case n <= 64 && out != 0:
					t.Errorf("%d symbols, %s: %d slots outside the window", n, shape, out)
				case mode == ransModeWide && out > ransMaxOutside, mode == ransModeGather && lk.Gathered(tb) != 1<<RANSScaleBits:
					t.Errorf("%d symbols, %s: mode %d with %d slots outside, Gathered %d", n, shape, mode, out, lk.Gathered(tb))
				}
				if tb == 1 {
					t.Logf("%3d symbols, %-6s: mode %d, %d slots outside the window", n, shape, mode, out)
				}
			}
		}
	}
}

// TestRANSDecodeLookup: the gather-free kernels decode exactly as the
// gather's, states, positions and values bit for bit, one stream or up to
// four side by side, over tables of every size class and shape, on
// streams of random bytes from random states (any corrupt stream is one),
// cut at random lengths so the kernels stop at different groups.
func TestRANSDecodeLookup(t *testing.T) {
	const per = 64
	rng := rand.New(rand.NewPCG(3, 4))
	t.Logf("lookup kernels: %v", hasRANSLookup)
	// One family of every size and shape, and its levels.
	f := newRANSTestFamily(t, rng, func(i int) float32 { return float32(rng.NormFloat64()) + float32(i) })
	ent, lv, tabs, levOff, nsym, lk := f.ent, f.lv, f.tabs, f.levOff, f.nsym, f.lk
	// Every fifth round passes a copy of the levels: the lookup with
	// levels then reads them from lv, as the one without.
	lvCopy := slices.Clone(lv)
	decoded := 0
	for round := range 400 {
		ns := 1 + round%RANSMaxStreams
		comps := 1 + rng.IntN(12)
		// The components' tables: a run of one size class, or any.
		var eo, lo, nsy []int32
		for range comps {
			i := rng.IntN(len(tabs))
			if round%3 == 0 {
				i = (round / 3 * len(ransTestShapes)) % len(tabs)
			}
			eo, lo, nsy = append(eo, tabs[i]), append(lo, levOff[i]), append(nsy, nsym[i])
		}
		g0 := 0 // whole components, or from the second group
		if round%2 == 1 {
			g0 = RANSLanes
		}
		n := comps*per - g0
		var st [3]RANSStreams
		var out [3][][]float32
		src, scale := make([][]byte, ns), make([][]float32, ns)
		for j := range ns {
			src[j] = make([]byte, 64+rng.IntN(2*n+64))
			for i := range src[j] {
				src[j][i] = byte(rng.Uint32())
			}
			scale[j] = make([]float32, comps)
			for c := range scale[j] {
				scale[j][c] = 0.5 + rng.Float32()
			}
			for i := range st[0].X[j] {
				st[0].X[j][i] = 1<<16 + rng.Uint32N(1<<32-1<<16)
			}
			st[0].Pos[j] = rng.IntN(8)
		}
		st[1], st[2] = st[0], st[0]
		lvr := lv
		if round%5 == 4 {
			lvr = lvCopy
		}
		var k [3]int
		// The lookup, the lookup with levels, and the gather last.
		for v, l := range []*RANSLookup{lk, f.lkl, nil} {
			out[v] = make([][]float32, ns)
			for j := range ns {
				out[v][j] = make([]float32, n)
			}
			if ns == 1 {
				k[v], st[v].Pos[0] = RANSDecode2(out[v][0], g0, src[0], st[v].Pos[0], per, ent, l, eo, lvr, lo, nsy, scale[0], &st[v].X[0])
			} else {
				k[v] = RANSDecode2Streams(out[v], g0, src, per, ent, l, eo, lvr, lo, nsy, scale, &st[v])
			}
		}
		for v := range 2 {
			if k[v] != k[2] || st[v].X != st[2].X || st[v].Pos != st[2].Pos {
				t.Fatalf("round %d, %d streams: lookup %d decoded %d symbols to positions %v, the gather %d to %v (states equal %v)",
					round, ns, v, k[v], st[v].Pos[:ns], k[2], st[2].Pos[:ns], st[v].X == st[2].X)
			}
			for j := range ns {
				for i := range k[v] {
					if math.Float32bits(out[v][j][i]) != math.Float32bits(out[2][j][i]) {
						t.Fatalf("round %d, stream %d of %d, symbol %d (component %d, %d symbols): lookup %d %v, gather %v",
							round, j, ns, i, (g0+i)/per, nsy[(g0+i)/per], v, out[v][j][i], out[2][j][i])
					}
				}
			}
		}
		decoded += k[0] * ns
	}
	t.Logf("%d symbols decoded", decoded)
	if hasRANSKernels && decoded < 10000 {
		t.Errorf("%d symbols decoded: the kernels stopped early", decoded)
	}
}

// TestNewRANSLookupErrors: tables that are not layout-2 tables are
// errors naming the table, never a panic.
func TestNewRANSLookupErrors(t *testing.T) {
	good := ransTestTable(ransTestFreqs(rand.New(rand.NewPCG(5, 6)), 10, "gauss"))
	for _, tc := range []struct {
		name string
		edit func(e []uint32) []uint32
		want string
	}{
		{"short", func(e []uint32) []uint32 { return e[:len(e)-1] }, "not whole tables"},
		{"symbol skipped", func(e []uint32) []uint32 { e[len(e)-1] += 2; return e }, "table 1: slot 4095"},
		{"symbol back", func(e []uint32) []uint32 {
			const i = 1<<RANSScaleBits + 2000
			e[i] = e[i]&^0xff | (e[i]&0xff - 1)
			return e
		}, "table 1: slot 2000"},
		{"frequency", func(e []uint32) []uint32 { e[1<<RANSScaleBits+100] += 1 << 8; return e }, "table 1: slot 100"},
		{"bias", func(e []uint32) []uint32 { e[1<<RANSScaleBits+3000] += 1 << 20; return e }, "table 1: slot 3000"},
		{"one symbol", func(e []uint32) []uint32 {
			for i := range e[1<<RANSScaleBits:] {
				e[1<<RANSScaleBits+i] = uint32(i) << 20
			}
			return e
		}, "table 1: slot 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ent := append(slices.Clone(good), good...)
			_, err := NewRANSLookup(tc.edit(ent))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// ransDecode2Ref is RANSDecode2's contract in plain Go, from the packed
// entries: whole groups from symbol g0 of the first component while a
// group's 64 bytes remain, each lane's state updated, then the lanes below
// 2^16 given the next words in lane order. It returns the symbols decoded
// and the position after them, leaving the lanes in x.
func ransDecode2Ref(out []float32, g0 int, src []byte, pos, per int, ent []uint32, entOff []int32, lv []float32, levOff []int32, scale []float32, x *[RANSLanes]uint32) (int, int) {
	k := 0
	for k < len(out) && pos+2*RANSLanes <= len(src) {
		c := (g0 + k) / per
		for i := range RANSLanes {
			e := ent[int(entOff[c])+int(x[i]&(1<<RANSScaleBits-1))]
			out[k+i] = lv[int(levOff[c])+int(e&0xff)] * scale[c]
			x[i] = (e>>8&(1<<RANSScaleBits-1))*(x[i]>>RANSScaleBits) + e>>20
		}
		for i := range RANSLanes {
			if x[i] < 1<<16 {
				x[i] = x[i]<<16 | uint32(src[pos]) | uint32(src[pos+1])<<8
				pos += 2
			}
		}
		k += RANSLanes
	}
	return k, pos
}

// TestRANSDecode2Reference: the kernels in force (AVX-512, AVX2 or NEON;
// none at scalar, where they decode nothing), with and without the
// lookup, one stream or up to four side by side, decode random streams
// from random states (corrupt streams, as a fuzzer's) as the plain Go
// reference does: the same symbols decoded, positions, lanes and values
// bit for bit, over tables of every size class and shape.
func TestRANSDecode2Reference(t *testing.T) {
	const per = 96
	rng := rand.New(rand.NewPCG(7, 8))
	f := newRANSTestFamily(t, rng, func(i int) float32 { return float32(rng.NormFloat64()) * float32(i+1) })
	ent, lv, tabs, levOff, nsym, lk := f.ent, f.lv, f.tabs, f.levOff, f.nsym, f.lk
	// Every fifth round passes a copy of the levels: the lookup with
	// levels then reads them from lv, as the one without.
	lvCopy := slices.Clone(lv)
	decoded := 0
	for round := range 300 {
		ns := 1 + round%RANSMaxStreams
		comps := 1 + rng.IntN(10)
		var eo, lo, nsy []int32
		for range comps {
			i := rng.IntN(len(tabs))
			eo, lo, nsy = append(eo, tabs[i]), append(lo, levOff[i]), append(nsy, nsym[i])
		}
		g0 := RANSLanes * rng.IntN(per/RANSLanes)
		n := comps*per - g0
		src, scale := make([][]byte, ns), make([][]float32, ns)
		var st0 RANSStreams
		for j := range ns {
			src[j] = make([]byte, 64+rng.IntN(2*n+64))
			for i := range src[j] {
				src[j][i] = byte(rng.Uint32())
			}
			scale[j] = make([]float32, comps)
			for c := range scale[j] {
				scale[j][c] = 0.25 + rng.Float32()
			}
			for i := range st0.X[j] {
				st0.X[j][i] = 1<<16 + rng.Uint32N(1<<32-1<<16)
			}
			st0.Pos[j] = rng.IntN(8)
		}
		// The reference: each stream alone, as far as all of them go.
		var ref RANSStreams
		want, kr := make([][]float32, ns), make([]int, ns)
		for j := range ns {
			ref.X[j] = st0.X[j]
			want[j] = make([]float32, n)
			kr[j], ref.Pos[j] = ransDecode2Ref(want[j], g0, src[j], st0.Pos[j], per, ent, eo, lv, lo, scale[j], &ref.X[j])
		}
		lvr := lv
		if round%5 == 4 {
			lvr = lvCopy
		}
		for _, l := range []*RANSLookup{lk, f.lkl, nil} {
			st := st0
			out := make([][]float32, ns)
			for j := range ns {
				out[j] = make([]float32, n)
			}
			var k int
			if ns == 1 {
				k, st.Pos[0] = RANSDecode2(out[0], g0, src[0], st.Pos[0], per, ent, l, eo, lvr, lo, nsy, scale[0], &st.X[0])
			} else {
				k = RANSDecode2Streams(out, g0, src, per, ent, l, eo, lvr, lo, nsy, scale, &st)
			}
			if k == 0 {
				continue // no kernel, or a stream too short: nothing decoded, nothing moved
			}
			if ns == 1 && k != kr[0] || k > slices.Min(kr) || k%RANSLanes != 0 {
				t.Fatalf("round %d, %d streams (lookup %v): decoded %d symbols, the reference %v", round, ns, l != nil, k, kr)
			}
			for j := range ns {
				// The reference again, stopped where the kernel stopped.
				x := st0.X[j]
				w := make([]float32, k)
				_, p := ransDecode2Ref(w, g0, src[j], st0.Pos[j], per, ent, eo, lv, lo, scale[j], &x)
				if st.X[j] != x || st.Pos[j] != p {
					t.Fatalf("round %d, stream %d of %d (lookup %v): after %d symbols position %d, the reference %d (lanes equal %v)",
						round, j, ns, l != nil, k, st.Pos[j], p, st.X[j] == x)
				}
				for i := range k {
					if math.Float32bits(out[j][i]) != math.Float32bits(w[i]) {
						t.Fatalf("round %d, stream %d of %d (lookup %v), symbol %d (component %d, %d symbols): %v, the reference %v",
							round, j, ns, l != nil, i, (g0+i)/per, nsy[(g0+i)/per], out[j][i], w[i])
					}
				}
			}
			decoded += k * ns
		}
	}
	t.Logf("%s: %d symbols decoded by the kernels", Level(), decoded)
	if hasRANSKernels && decoded < 100000 {
		t.Errorf("%d symbols decoded: the kernels stopped early", decoded)
	}
	if !hasRANSKernels && decoded != 0 {
		t.Errorf("%d symbols decoded without kernels", decoded)
	}
}

// TestRANSTables: a table set checked once decodes as RANSDecode2 and
// RANSDecode2Streams do with the same tables, states, positions and
// values bit for bit, from any first component, with and without a
// lookup holding its levels; tables outside ent or lv, or not the
// lookup's, are errors naming the component.
func TestRANSTables(t *testing.T) {
	const per = 64
	rng := rand.New(rand.NewPCG(11, 12))
	f := newRANSTestFamily(t, rng, func(i int) float32 { return float32(rng.NormFloat64()) + float32(i) })
	decoded := 0
	for round := range 120 {
		ns := 1 + round%RANSMaxStreams
		comps := 2 + rng.IntN(10)
		var eo, lo, nsy []int32
		for range comps {
			i := rng.IntN(len(f.tabs))
			eo, lo, nsy = append(eo, f.tabs[i]), append(lo, f.levOff[i]), append(nsy, f.nsym[i])
		}
		lk := []*RANSLookup{f.lkl, f.lk, nil}[round%3]
		tabs, err := NewRANSTables(f.ent, lk, eo, f.lv, lo, nsy)
		if err != nil {
			t.Fatal(err)
		}
		if tabs.el != (lk == f.lkl) {
			t.Fatalf("round %d: slot entries %v with lookup %d", round, tabs.el, round%3)
		}
		c0 := rng.IntN(comps - 1)
		g0 := RANSLanes * rng.IntN(per/RANSLanes)
		n := (comps-c0)*per - g0
		src, scale := make([][]byte, ns), make([][]float32, ns)
		var st [2]RANSStreams
		for j := range ns {
			src[j] = make([]byte, 64+rng.IntN(2*n+64))
			for i := range src[j] {
				src[j][i] = byte(rng.Uint32())
			}
			scale[j] = make([]float32, comps-c0)
			for c := range scale[j] {
				scale[j][c] = 0.5 + rng.Float32()
			}
			for i := range st[0].X[j] {
				st[0].X[j][i] = 1<<16 + rng.Uint32N(1<<32-1<<16)
			}
			st[0].Pos[j] = rng.IntN(8)
		}
		st[1] = st[0]
		var out [2][][]float32
		var k [2]int
		for v := range 2 {
			out[v] = make([][]float32, ns)
			for j := range ns {
				out[v][j] = make([]float32, n)
			}
			switch {
			case ns == 1 && v == 0:
				k[v], st[v].Pos[0] = tabs.Decode2(out[v][0], g0, src[0], st[v].Pos[0], per, c0, scale[0], &st[v].X[0])
			case ns == 1:
				k[v], st[v].Pos[0] = RANSDecode2(out[v][0], g0, src[0], st[v].Pos[0], per, f.ent, lk, eo[c0:], f.lv, lo[c0:], nsy[c0:], scale[0], &st[v].X[0])
			case v == 0:
				k[v] = tabs.Decode2Streams(out[v], g0, src, per, c0, scale, &st[v])
			default:
				k[v] = RANSDecode2Streams(out[v], g0, src, per, f.ent, lk, eo[c0:], f.lv, lo[c0:], nsy[c0:], scale, &st[v])
			}
		}
		if k[0] != k[1] || st[0].X != st[1].X || st[0].Pos != st[1].Pos {
			t.Fatalf("round %d, %d streams: the table set decoded %d symbols to %v, RANSDecode2 %d to %v", round, ns, k[0], st[0].Pos[:ns], k[1], st[1].Pos[:ns])
		}
		for j := range ns {
			for i := range k[0] {
				if math.Float32bits(out[0][j][i]) != math.Float32bits(out[1][j][i]) {
					t.Fatalf("round %d, stream %d, symbol %d: %v, RANSDecode2 %v", round, j, i, out[0][j][i], out[1][j][i])
				}
			}
		}
		decoded += k[0] * ns
	}
	if hasRANSKernels && decoded < 10000 {
		t.Errorf("%d symbols decoded: the kernels stopped early", decoded)
	}
	eo, lo, nsy := slices.Clone(f.tabs[:3]), slices.Clone(f.levOff[:3]), slices.Clone(f.nsym[:3])
	for _, tc := range []struct {
		name, want string
		edit       func(eo, lo, nsy []int32) ([]uint32, *RANSLookup, []int32, []int32, []int32)
	}{
		{"counts", "2 level offsets", func(eo, lo, nsy []int32) ([]uint32, *RANSLookup, []int32, []int32, []int32) {
			return f.ent, f.lk, eo, lo[:2], nsy
		}},
		{"table past ent", "component 1's table", func(eo, lo, nsy []int32) ([]uint32, *RANSLookup, []int32, []int32, []int32) {
			eo[1] = int32(len(f.ent))
			return f.ent, f.lk, eo, lo, nsy
		}},
		{"levels past lv", "component 2's table", func(eo, lo, nsy []int32) ([]uint32, *RANSLookup, []int32, []int32, []int32) {
			lo[2] = int32(len(f.lv))
			return f.ent, f.lk, eo, lo, nsy
		}},
		{"inside a table", "component 0's table at 1", func(eo, lo, nsy []int32) ([]uint32, *RANSLookup, []int32, []int32, []int32) {
			eo[0] = 1
			return f.ent, f.lk, eo, lo, nsy
		}},
		{"other lookup", "other tables", func(eo, lo, nsy []int32) ([]uint32, *RANSLookup, []int32, []int32, []int32) {
			return slices.Clone(f.ent), f.lk, eo, lo, nsy
		}},
	} {
		ent, lk, e, l, s := tc.edit(slices.Clone(eo), slices.Clone(lo), slices.Clone(nsy))
		if _, err := NewRANSTables(ent, lk, e, f.lv, l, s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
