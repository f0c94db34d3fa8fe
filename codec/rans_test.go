package codec

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cputime"
)

// pcFamilies are the fixed-level quantizer families of kakeya-pc.
var pcFamilies = []struct {
	name string
	tab  func() (*pcTables, error)
}{{"lloyd-max", gaussianTables}, {"uniform", uniformTables}}

// TestRANSTables: each width's frequencies sum to the coder's scale with
// none zero, the expected code length is within 0.01 bit of the cells'
// entropy and below the width from 2 bits on, and the uniform quantizers
// have Max's optimal Gaussian steps.
func TestRANSTables(t *testing.T) {
	// Max (1960), table of optimum uniform quantizers for N(0, 1).
	maxStep := map[int]float64{1: 1.596, 2: 0.9957, 3: 0.5860, 4: 0.3352}
	for _, q := range pcFamilies {
		tab, err := q.tab()
		if err != nil {
			t.Fatal(err)
		}
		for b := 1; b <= pcMaxBits; b++ {
			a := tab.ans[b]
			var sum uint32
			for _, f := range a.freq {
				if f == 0 {
					t.Errorf("%s b=%d: a zero frequency", q.name, b)
				}
				sum += f
			}
			if sum != 1<<ransScaleBits {
				t.Errorf("%s b=%d: frequencies sum to %d", q.name, b, sum)
			}
			var h float64
			for _, p := range cellProbs(tab.bounds[b]) {
				if p > 0 {
					h -= p * math.Log2(p)
				}
			}
			if a.bits < h-1e-9 || a.bits > h+0.01 {
				t.Errorf("%s b=%d: %v bits per code, entropy %v", q.name, b, a.bits, h)
			}
			if b >= 2 && !(a.bits < float64(b)-0.05) {
				t.Errorf("%s b=%d: %v bits per code, no gain over the width", q.name, b, a.bits)
			}
			t.Logf("%s b=%d: %.4f bits per code, distortion %.5f", q.name, b, a.bits, tab.dist[b])
			if s, ok := maxStep[b]; ok && q.name == "uniform" {
				step := float64(tab.levels[b][1] - tab.levels[b][0])
				if math.Abs(step-s) > 2e-3 {
					t.Errorf("uniform b=%d: step %v, Max's optimum %v", b, step, s)
				}
			}
		}
	}
}

// TestECSQTables: the entropy-constrained option b has cells of entropy
// b/2 bits, a rANS table within 0.02 bit of it, less error than the
// coarser options, and less error than the Lloyd–Max and uniform
// quantizers of 2^w levels at the coded length of those (interpolated
// between the two options around it, as an allocation mixing them gets).
func TestECSQTables(t *testing.T) {
	ec, err := ecsqTables()
	if err != nil {
		t.Fatal(err)
	}
	for b := 1; b <= ec.n; b++ {
		h := cellEntropy(ec.bounds[b])
		if math.Abs(h-float64(b)/2) > 1e-6 {
			t.Errorf("option %d: entropy %v, want %v", b, h, float64(b)/2)
		}
		if a := ec.ans[b].bits; a < h-1e-9 || a > h+0.02 {
			t.Errorf("option %d: %v bits per code, entropy %v", b, a, h)
		}
		if b > 1 && !(ec.dist[b] < ec.dist[b-1]) {
			t.Errorf("option %d: distortion %v, not below option %d's %v", b, ec.dist[b], b-1, ec.dist[b-1])
		}
		t.Logf("ecsq b=%d: %d cells, %.4f bits per code, distortion %.5f", b, len(ec.levels[b]), ec.ans[b].bits, ec.dist[b])
	}
	// distAt interpolates the ECSQ distortion at h bits between options.
	distAt := func(h float64) float64 {
		b := int(math.Floor(2 * h))
		if b < 1 {
			return math.Inf(1)
		}
		if b >= ec.n {
			return ec.dist[ec.n]
		}
		f := 2*h - float64(b)
		return (1-f)*ec.dist[b] + f*ec.dist[b+1]
	}
	for _, q := range pcFamilies {
		tab, err := q.tab()
		if err != nil {
			t.Fatal(err)
		}
		for b := 2; b <= pcMaxBits; b++ {
			h := tab.ans[b].bits
			if got := distAt(h); !(got < tab.dist[b]) {
				t.Errorf("%s b=%d at %.3f bits: distortion %v, the entropy-constrained options' %v", q.name, b, h, tab.dist[b], got)
			}
		}
	}
}

// TestRANSRoundTrip: symbols drawn from each table's distribution, in
// components of per symbols (multiples of the lanes, for the unrolled
// path, and not), decode back exactly in about their entropy plus the
// lanes' states; the stream is refused when cut, extended or altered.
func TestRANSRoundTrip(t *testing.T) {
	tab, err := gaussianTables()
	if err != nil {
		t.Fatal(err)
	}
	widths := []int{1, 3, 6, 2, 4}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ comps, per int }{{0, 8}, {1, 1}, {1, 4}, {2, 7}, {5, 64}, {5, 13}, {3, 800}, {4, 1000}} {
		tabs := make([]*ransTable, tc.comps)
		var levOff []int32
		var lv []float32
		for c := range tabs {
			w := widths[c%len(widths)]
			tabs[c] = tab.ans[w]
			levOff = append(levOff, int32(len(lv)))
			for j := range tab.levels[w] {
				lv = append(lv, float32(1000*c+j))
			}
		}
		syms := make([]uint8, tc.comps*tc.per)
		var want float64
		for k := range syms {
			a := tabs[k/tc.per]
			syms[k] = a.slot[rng.IntN(1<<ransScaleBits)]
			want += ransScaleBits - math.Log2(float64(a.freq[syms[k]]))
		}
		stream, _ := ransEncode([]byte("prefix"), nil, syms, tabs, tc.per)
		if string(stream[:6]) != "prefix" {
			t.Fatalf("%+v: the prefix was overwritten", tc)
		}
		stream = stream[len("prefix"):]
		if got := float64(8 * len(stream)); got > want+8*4*ransLanes+16*ransLanes {
			t.Errorf("%+v: %v bits, their information is %v", tc, got, want)
		}
		out := make([]float32, len(syms))
		if err := ransDecode(out, stream, tc.per, tabs, lv, levOff); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		for k, s := range syms {
			if w := float32(1000*(k/tc.per) + int(s)); out[k] != w {
				t.Fatalf("%+v: symbol %d decoded as level %v, want %v", tc, k, out[k], w)
			}
		}
		for _, bad := range []struct {
			name   string
			stream []byte
		}{
			{"cut", stream[:len(stream)-2]},
			{"extended", append(append([]byte(nil), stream...), 0, 0)},
			{"odd", stream[:len(stream)-1]},
			{"no states", stream[:4*ransLanes-4]},
			{"first state's top byte altered", flip(stream, 3)},
			{"last state's top byte altered", flip(stream, 4*ransLanes-1)},
		} {
			if err := ransDecode(out, bad.stream, tc.per, tabs, lv, levOff); err == nil {
				t.Errorf("%+v: stream %s: decoded without error", tc, bad.name)
			}
		}
	}
}

// flip returns a copy of b with byte i inverted.
func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0xff
	return c
}

// FuzzRANSDecode: any stream decodes or fails, never panics or reads
// outside it (the decoder runs on an exact-length copy).
func FuzzRANSDecode(f *testing.F) {
	tab, err := gaussianTables()
	if err != nil {
		f.Fatal(err)
	}
	tabs := []*ransTable{tab.ans[2], tab.ans[6], tab.ans[1]}
	var lv []float32
	var levOff []int32
	for _, a := range tabs {
		levOff = append(levOff, int32(len(lv)))
		lv = append(lv, make([]float32, len(a.freq))...)
	}
	syms := make([]uint8, 3*16)
	for k := range syms {
		syms[k] = uint8(k % 4 % len(tabs[k/16].freq))
	}
	good, _ := ransEncode(nil, nil, syms, tabs, 16)
	f.Add(good, uint8(16))
	f.Add(good, uint8(5))
	f.Add(good[:40], uint8(16))
	f.Add(make([]byte, 4*ransLanes), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, per uint8) {
		p := int(per)%32 + 1
		out := make([]float32, len(tabs)*p)
		_ = ransDecode(out, slices.Clone(stream), p, tabs, lv, levOff)
	})
}

// TestKakeyaPCEntropy: entropy-coded kakeya-pc and kvtc on held-out
// blocks: the payload stays near the rate's budget (the allocation
// charges expected code lengths), the error near the allocation's
// prediction, and at equal rate kakeya-pc:ec has less error than the
// fixed-width codes (it affords more bits); an altered stream is an
// error, never a panic.
func TestKakeyaPCEntropy(t *testing.T) {
	const n, d = 64, 64
	rng := rand.New(rand.NewPCG(7, 8))
	st := pcStats(t, pcBlocks(rng, 200, n, d), n, d)
	test := pcBlocks(rand.New(rand.NewPCG(7, 8)), 220, n, d)[200:]
	for _, rate := range []float64{1, 2, 2.5, 4} {
		mse := map[string]float64{}
		for _, mode := range []struct {
			name             string
			entropy, uniform bool
		}{{"fixed", false, false}, {"ec", true, false}, {"kvtc", true, true}} {
			o := DefaultKakeyaPCOptions()
			o.Rate, o.Entropy, o.Uniform = rate, mode.entropy, mode.uniform
			k, err := NewKakeyaPC(o, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			predicted := pcPredicted(k, st)
			var se float64
			var bytes int
			for _, x := range test {
				y, enc := roundTrip(t, k, x, n, d)
				bytes += len(enc)
				for i := range x {
					e := float64(x[i] - y[i])
					se += e * e
				}
			}
			mse[mode.name] = se / float64(len(test)*n)
			payload := 8 * (float64(bytes)/float64(len(test)) - 24)
			t.Logf("%s rate %v: %d coded, %.0f payload bits per block (budget %v), error %.4g per row (predicted %.4g)",
				mode.name, rate, len(k.codedIdx), payload, rate*n*d, mse[mode.name], predicted)
			if payload > 1.03*rate*n*d+32 {
				t.Errorf("%s rate %v: %v payload bits per block, budget %v", mode.name, rate, payload, rate*n*d)
			}
			if m := mse[mode.name]; m > 1.5*predicted+1e-3 || m < 0.5*predicted {
				t.Errorf("%s rate %v: error %v per row, the allocation predicted %v", mode.name, rate, m, predicted)
			}
			if mode.entropy {
				enc, err := k.Encode(nil, test[0], n, d)
				if err != nil {
					t.Fatal(err)
				}
				checkStreamErrors(t, k, enc, n, d)
			}
		}
		if rate >= 2 && !(mse["ec"] < mse["fixed"]) {
			t.Errorf("rate %v: entropy-coded error %v not below the fixed-width codes' %v", rate, mse["ec"], mse["fixed"])
		}
	}
}

// checkStreamErrors alters enc's code stream (byte flips, resealed so that
// the checksum passes) and its length field, expecting errors.
func checkStreamErrors(t *testing.T, k *KakeyaPC, enc []byte, n, d int) {
	t.Helper()
	out := make([]float32, n*d)
	var v Vars
	if err := formatKakeyaPCEC.ReadFields(enc, &v); err != nil {
		t.Fatal(err)
	}
	l := formatKakeyaPCEC.Layout(&v)
	start := l.Off(pcCodes)
	// A state's low bits may alter decoded symbols without desynchronizing
	// the lanes (rANS passes them on as the symbols' own bits), so a flip
	// there may decode (the block's CRC is what catches such damage); its
	// top byte, or a word early in the stream, desynchronizes them.
	for _, at := range []int{3, 4*ransLanes - 1, 4*ransLanes + 1, l.Len(pcCodes) / 2} {
		bad := append([]byte(nil), enc...)
		bad[start+at] ^= 0x5a
		Seal(bad)
		if err := k.Decode(out, bad, n, d); err == nil {
			t.Errorf("%s: stream byte %d altered: decoded without error", k.Name(), at)
		}
	}
	old := append([]byte(nil), enc...)
	old[3] = 0 // the single-state layout's parameter byte
	Seal(old)
	if err := k.Decode(out, old, n, d); err == nil || !strings.Contains(err.Error(), "stream layout 0") {
		t.Errorf("%s: a layout-0 block: err = %v, want one naming stream layout 0", k.Name(), err)
	}
	short := append([]byte(nil), enc[:len(enc)-1]...)
	binary.LittleEndian.PutUint32(short[20:], uint32(l.Len(pcCodes)-1))
	Seal(short)
	if err := k.Decode(out, short, n, d); err == nil {
		t.Errorf("%s: stream cut by a byte: decoded without error", k.Name())
	}
}

// BenchmarkRANSDecode times the stream of a 64-row block of 44 components
// (widths 1 to 6 in turn) alone, without the block's mixing.
func BenchmarkRANSDecode(b *testing.B) {
	tab, err := gaussianTables()
	if err != nil {
		b.Fatal(err)
	}
	const per, comps = 64, 44
	tabs := make([]*ransTable, comps)
	var lv []float32
	var levOff []int32
	for c := range tabs {
		tabs[c] = tab.ans[1+c%6]
		levOff = append(levOff, int32(len(lv)))
		lv = append(lv, tab.levels[1+c%6]...)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	syms := make([]uint8, comps*per)
	for k := range syms {
		syms[k] = tabs[k/per].slot[rng.IntN(1<<ransScaleBits)]
	}
	stream, _ := ransEncode(nil, nil, syms, tabs, per)
	out := make([]float32, len(syms))
	cpu0 := cputime.Seconds()
	for b.Loop() {
		if err := ransDecode(out, stream, per, tabs, lv, levOff); err != nil {
			b.Fatal(err)
		}
	}
	msym := float64(len(syms)) * float64(b.N) / 1e6
	b.ReportMetric(msym/b.Elapsed().Seconds(), "Msym/s")
	// Per second of the process's CPU time, which a loaded machine's
	// other work does not take from (its other hyperthread still does).
	if cpu := cputime.Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(msym/cpu, "Msym/cpu-s")
	}
}
