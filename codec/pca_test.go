package codec

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// pcBlocks returns blocks of n rows of d values: a per-block offset plus
// a random rotation of independent coordinates whose standard deviations
// fall geometrically from 4 to 4/2^6, the spectrum of real keys and values
// in miniature.
func pcBlocks(rng *rand.Rand, blocks, n, d int) [][]float32 {
	rot := make([]float32, d*d)
	for i := range rot {
		rot[i] = float32(rng.NormFloat64())
	}
	orthonormalizeRows(rot, d)
	out := make([][]float32, blocks)
	for b := range out {
		off := make([]float32, d)
		for j := range off {
			off[j] = float32(rng.NormFloat64()) * 0.5
		}
		x := make([]float32, n*d)
		z := make([]float32, d)
		for i := 0; i < n; i++ {
			for j := range z {
				z[j] = float32(rng.NormFloat64() * 4 * math.Pow(2, -6*float64(j)/float64(d)))
			}
			row := x[i*d : (i+1)*d]
			copy(row, off)
			cpu.AxpyBlock(row, z, rot, d, d)
		}
		out[b] = x
	}
	return out
}

// orthonormalizeRows runs Gram–Schmidt on the rows of the d x d matrix m.
func orthonormalizeRows(m []float32, d int) {
	for a := 0; a < d; a++ {
		ra := m[a*d : (a+1)*d]
		for b := 0; b < a; b++ {
			rb := m[b*d : (b+1)*d]
			var s float32
			for i := range ra {
				s += ra[i] * rb[i]
			}
			for i := range ra {
				ra[i] -= s * rb[i]
			}
		}
		var nn float64
		for _, v := range ra {
			nn += float64(v) * float64(v)
		}
		for i := range ra {
			ra[i] /= float32(math.Sqrt(nn))
		}
	}
}

// pcStats accumulates the statistics of blocks.
func pcStats(t testing.TB, blocks [][]float32, n, d int) *PCAStats {
	t.Helper()
	acc := NewPCAAccumulator(d)
	for _, b := range blocks {
		if err := acc.AddBlock(b, n); err != nil {
			t.Fatal(err)
		}
	}
	st, err := acc.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustPC(t testing.TB, rate float64, st *PCAStats) *KakeyaPC {
	t.Helper()
	o := DefaultKakeyaPCOptions()
	o.Rate = rate
	k, err := NewKakeyaPC(o, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pcPredicted returns the squared error per row k's allocation expects
// on blocks of st's distribution.
func pcPredicted(k *KakeyaPC, st *PCAStats) float64 {
	var e float64
	for j, a := range k.alloc {
		switch {
		case a < 0:
			e += float64(st.Var[j] + st.Between[j])
		case a == 0:
			e += float64(st.Var[j])
		default:
			e += float64(st.Var[j]) * k.tab.dist[a]
		}
	}
	return e
}

// TestKakeyaPCRoundTrip: on held-out blocks of the calibrated
// distribution the error falls as the rate rises and stays near the
// allocation's prediction; the length is the documented formula and
// within the budget.
func TestKakeyaPCRoundTrip(t *testing.T) {
	const n, d = 64, 64
	rng := rand.New(rand.NewPCG(7, 8))
	st := pcStats(t, pcBlocks(rng, 200, n, d), n, d)
	// Held out: the same rotation and spectrum, other draws.
	rng2 := rand.New(rand.NewPCG(7, 8))
	test := pcBlocks(rng2, 220, n, d)[200:]
	var total float64
	for _, v := range st.Var {
		total += float64(v)
	}
	prev := math.Inf(1)
	for _, rate := range []float64{0.5, 1, 2, 2.5, 4, 6} {
		k := mustPC(t, rate, st)
		var se, ss float64
		predicted := pcPredicted(k, st)
		for _, x := range test {
			y, enc := roundTrip(t, k, x, n, d)
			if bits := 8 * (len(enc) - 22); float64(bits) > rate*n*d {
				t.Errorf("rate %v: payload of %d bits over the budget of %v", rate, bits, rate*n*d)
			}
			for i := range x {
				e := float64(x[i] - y[i])
				se += e * e
				ss += float64(x[i]) * float64(x[i])
			}
		}
		mse := se / float64(len(test)*n)
		t.Logf("rate %v: %d coded, %d bits/row, error %.4g per row (predicted %.4g), relative %.4g", rate, len(k.codedIdx), k.rowBits, mse, predicted, se/ss)
		if !(mse < prev) {
			t.Errorf("rate %v: error %v not below the lower rate's %v", rate, mse, prev)
		}
		if mse > 1.5*predicted+1e-3 || mse < 0.5*predicted {
			t.Errorf("rate %v: error %v per row, the allocation predicted %v", rate, mse, predicted)
		}
		prev = mse
	}
	if prev > 1e-3*total {
		t.Errorf("6 bits per value: error %v, want below 1e-3 of the variance %v", prev, total)
	}
}

// TestAllocatePCOptimal: the dynamic program finds the least weighted
// distortion within the budget, checked against every allocation of four
// components.
func TestAllocatePCOptimal(t *testing.T) {
	tab, err := gaussianTables()
	if err != nil {
		t.Fatal(err)
	}
	st := &PCAStats{
		Mean:    make([]float32, 4),
		Basis:   []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1},
		Var:     []float32{16, 3, 1, 0.02},
		Between: []float32{1, 40, 0.5, 0.01},
	}
	for _, tc := range []struct {
		rate float64
		w    []float32
	}{{0.25, nil}, {0.8, nil}, {1.5, nil}, {3, nil}, {1.5, []float32{0.01, 1, 1, 100}}} {
		o := KakeyaPCOptions{Rate: tc.rate, MaxBits: 3, Block: 16}
		got := allocatePC(st, tc.w, o, tab)
		cost := func(a int8) int {
			switch {
			case a < 0:
				return 0
			case a == 0:
				return 16
			}
			return 32 + int(a)*o.Block
		}
		dist := func(j int, a int8) float64 {
			w := 1.0
			if tc.w != nil {
				w = float64(tc.w[j])
			}
			switch {
			case a < 0:
				return w * float64(st.Var[j]+st.Between[j])
			case a == 0:
				return w * float64(st.Var[j])
			}
			return w * float64(st.Var[j]) * tab.dist[a]
		}
		budget := tc.rate * float64(o.Block*4)
		best, bestD := []int8(nil), math.Inf(1)
		var walk func(j int, cur []int8)
		walk = func(j int, cur []int8) {
			if j == 4 {
				c, dd := 0, 0.0
				for i, a := range cur {
					c += cost(a)
					dd += dist(i, a)
				}
				if float64(c) <= budget && dd < bestD-1e-12 {
					best, bestD = slices.Clone(cur), dd
				}
				return
			}
			for a := int8(-1); a <= 3; a++ {
				walk(j+1, append(cur, a))
			}
		}
		walk(0, nil)
		gc, gd := 0, 0.0
		for i, a := range got {
			gc += cost(a)
			gd += dist(i, a)
		}
		if float64(gc) > budget || math.Abs(gd-bestD) > 1e-9 {
			t.Errorf("rate %v weights %v: allocation %v (cost %d, distortion %v), the best is %v (distortion %v)", tc.rate, tc.w, got, gc, gd, best, bestD)
		}
	}
	// A budget too fine for the table (a block of 2^20 rows at 16 bits)
	// takes coarser units and still stays within it.
	st8 := &PCAStats{Mean: make([]float32, 4), Basis: st.Basis, Var: st.Var, Between: st.Between}
	o := KakeyaPCOptions{Rate: 16, MaxBits: 6, Block: 1 << 20}
	a := allocatePC(st8, nil, o, tab)
	bits := 0
	for _, s := range a {
		if s >= 0 {
			bits += 16
		}
		if s > 0 {
			bits += 16 + int(s)*o.Block
		}
	}
	if bits > 16*o.Block*4 || !slices.Equal(a, []int8{6, 6, 6, 6}) {
		t.Errorf("rate 16 over blocks of 2^20: allocation %v, %d bits", a, bits)
	}
	if math.Abs(tab.dist[1]-0.3634) > 1e-4 || math.Abs(tab.dist[2]-0.1175) > 1e-4 || math.Abs(tab.dist[3]-0.03455) > 1e-4 {
		t.Errorf("Gaussian Lloyd–Max distortions %v, want 0.3634, 0.1175, 0.03455 at 1..3 bits", tab.dist[1:4])
	}
}

// TestKakeyaPCFastPaths: DecodeRotated is Decode then RoPE bit for bit,
// and AddWeighted adds the weighted sums of the decoded rows.
func TestKakeyaPCFastPaths(t *testing.T) {
	const n, d = 32, 48
	rng := rand.New(rand.NewPCG(3, 4))
	blocks := pcBlocks(rng, 40, n, d)
	k := mustPC(t, 2.5, pcStats(t, blocks[:39], n, d))
	x := blocks[39]
	enc, err := k.Encode(nil, x, n, d)
	if err != nil {
		t.Fatal(err)
	}
	dec := make([]float32, n*d)
	if err := k.Decode(dec, enc, n, d); err != nil {
		t.Fatal(err)
	}
	cos, sin := make([]float32, n*d/2), make([]float32, n*d/2)
	for i := range cos {
		a := rng.Float64() * 6
		cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	rot := make([]float32, n*d)
	if err := k.DecodeRotated(rot, enc, n, d, cos, sin); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(dec)
	cpu.RoPEBlock(want, want, cos, sin, n, d)
	if !slices.Equal(rot, want) {
		t.Error("DecodeRotated differs from Decode then RoPEBlock")
	}
	const m, stride = 3, 40
	w := make([]float32, (m-1)*stride+n)
	for i := range w {
		w[i] = rng.Float32()
	}
	for _, r := range [][2]int{{0, n}, {5, 17}, {9, 9}} {
		lo, hi := r[0], r[1]
		got := make([]float32, m*d)
		for i := range got {
			got[i] = 1
		}
		if err := k.AddWeighted(got, m, w, stride, enc, n, d, lo, hi); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < m; j++ {
			for c := 0; c < d; c++ {
				s := 1.0
				for i := lo; i < hi; i++ {
					s += float64(w[j*stride+i]) * float64(dec[i*d+c])
				}
				if e := math.Abs(float64(got[j*d+c]) - s); e > 1e-4*(1+math.Abs(s)) {
					t.Fatalf("rows [%d,%d) weight row %d col %d: %v, want %v", lo, hi, j, c, got[j*d+c], s)
				}
			}
		}
	}
}

// TestKakeyaPCErrors: a codec without statistics, another shape, another
// calibration's blocks and corrupt bytes are errors, never panics.
func TestKakeyaPCErrors(t *testing.T) {
	const n, d = 16, 32
	rng := rand.New(rand.NewPCG(5, 6))
	blocks := pcBlocks(rng, 20, n, d)
	k := mustPC(t, 3, pcStats(t, blocks[:10], n, d))
	other := mustPC(t, 3, pcStats(t, blocks[10:19], n, d))
	x := blocks[19]
	enc, err := k.Encode(nil, x, n, d)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n*d)
	bare, err := Parse("kakeya-pc:rate=3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Encode(nil, x, n, d); err == nil || !strings.Contains(err.Error(), "calibration") {
		t.Errorf("encode without statistics: %v, want an error naming the calibration", err)
	}
	if err := bare.Decode(out, enc, n, d); err == nil || !strings.Contains(err.Error(), "calibration") {
		t.Errorf("decode without statistics: %v", err)
	}
	if _, err := k.Encode(nil, x[:n*16], n, 16); err == nil || !strings.Contains(err.Error(), "components have 32") {
		t.Errorf("encode of rows of 16: %v", err)
	}
	if err := other.Decode(out, enc, n, d); err == nil || !strings.Contains(err.Error(), "tag") {
		t.Errorf("decode with another calibration: %v", err)
	}
	for i := 0; i < len(enc); i += 7 {
		bad := slices.Clone(enc)
		bad[i] ^= 0x24
		if err := k.Decode(out, bad, n, d); err == nil {
			t.Errorf("byte %d flipped: decoded", i)
		}
	}
	if err := k.Decode(out, enc[:len(enc)-1], n, d); err == nil {
		t.Error("truncated block decoded")
	}
	for _, o := range []KakeyaPCOptions{{Rate: -1, MaxBits: 4, Block: 64}, {Rate: 2, MaxBits: 7, Block: 64}, {Rate: 2, MaxBits: 4, Block: 0}} {
		if _, err := NewKakeyaPC(o, nil, nil); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	huge := slices.Clone(x)
	huge[5] = 3e4
	if _, err := k.Encode(nil, huge, n, d); err == nil || !strings.Contains(err.Error(), "too large for fp16") {
		t.Errorf("value 3e4: %v", err)
	}
	st := pcStats(t, blocks[:10], n, d)
	st.Var[3] = -1
	if _, err := NewKakeyaPC(DefaultKakeyaPCOptions(), st, nil); err == nil || !strings.Contains(err.Error(), "variance 3") {
		t.Errorf("negative variance: %v", err)
	}
}

// TestKakeyaPCAllocations: steady-state Encode, Decode and AddWeighted,
// and the two-block calls, allocate nothing, with fixed-width codes,
// entropy coded, and as kvtc.
func TestKakeyaPCAllocations(t *testing.T) {
	const n, d = 64, 64
	rng := rand.New(rand.NewPCG(9, 9))
	blocks := pcBlocks(rng, 30, n, d)
	st := pcStats(t, blocks, n, d)
	for _, mode := range [][2]bool{{false, false}, {true, false}, {true, true}} {
		o := DefaultKakeyaPCOptions()
		o.Entropy, o.Uniform = mode[0], mode[1]
		k, err := NewKakeyaPC(o, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := k.Encode(nil, blocks[0], n, d)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 0, 2*len(enc))
		out := make([]float32, n*d)
		w := make([]float32, 2*n)
		acc := make([]float32, 2*d)
		// Two blocks at once (BlocksDecoder), their arguments made here.
		srcs, ws, los, his := [][]byte{enc, enc}, [][]float32{w, w}, []int{0, 0}, []int{n, n}
		outs := [][]float32{out, make([]float32, n*d)}
		cs, sn := make([]float32, n*d/2), make([]float32, n*d/2)
		for i := range cs {
			cs[i] = 1
		}
		coss, sins := [][]float32{cs, cs}, [][]float32{sn, sn}
		if err := k.AddWeightedBlocks(acc, 2, ws, n, srcs, n, d, los, his); err != nil {
			t.Fatal(err)
		}
		if err := k.DecodeRotatedBlocks(outs, srcs, n, d, coss, sins); err != nil {
			t.Fatal(err)
		}
		for name, f := range map[string]func(){
			"encode":              func() { _, _ = k.Encode(buf[:0], blocks[1], n, d) },
			"decode":              func() { _ = k.Decode(out, enc, n, d) },
			"addweighted":         func() { _ = k.AddWeighted(acc, 2, w, n, enc, n, d, 0, n) },
			"addweightedblocks":   func() { _ = k.AddWeightedBlocks(acc, 2, ws, n, srcs, n, d, los, his) },
			"decoderotatedblocks": func() { _ = k.DecodeRotatedBlocks(outs, srcs, n, d, coss, sins) },
		} {
			if a := testing.AllocsPerRun(20, f); a != 0 {
				t.Errorf("%s %s: %v allocations per call", k.Name(), name, a)
			}
		}
	}
}

// TestPCAAccumulator: the statistics of known blocks, and Merge equal to
// adding every block to one accumulator.
func TestPCAAccumulator(t *testing.T) {
	// Two blocks of two rows in 2-D: within-block deviations only along
	// the first axis (±1 and ±3: variance 5), block means (0, 2) and
	// (0, -2) around the mean row 0: between-block variance 4 along the
	// second.
	b1 := []float32{1, 2, -1, 2}
	b2 := []float32{3, -2, -3, -2}
	a, b := NewPCAAccumulator(2), NewPCAAccumulator(2)
	for _, x := range []struct {
		acc *PCAAccumulator
		x   []float32
	}{{a, b1}, {b, b2}} {
		if err := x.acc.AddBlock(x.x, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	st, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want float32) bool { return math.Abs(float64(got-want)) < 1e-5 }
	if !near(st.Mean[0], 0) || !near(st.Mean[1], 0) {
		t.Errorf("mean %v, want 0", st.Mean)
	}
	if !near(st.Var[0], 5) || !near(st.Var[1], 0) || !near(st.Between[0], 0) || !near(st.Between[1], 4) {
		t.Errorf("variances %v between %v, want [5 0] and [0 4]", st.Var, st.Between)
	}
	if !near(float32(math.Abs(float64(st.Basis[0]))), 1) || !near(st.Basis[1], 0) {
		t.Errorf("first component %v, want ±(1, 0)", st.Basis[:2])
	}
	if err := a.AddBlock([]float32{1, 2, 3}, 2); err == nil {
		t.Error("block of 3 values for n=2, d=2 accepted")
	}
	if err := a.AddBlock([]float32{1, float32(math.NaN())}, 1); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := NewPCAAccumulator(3).Stats(); err == nil {
		t.Error("statistics of no blocks")
	}
}

// TestKakeyaPCLayout reads blocks by the format's description alone —
// header parameter byte 1, the means and scales, then per coded component
// a byte-aligned plane of its n codes LSB-first — and checks the rows
// they describe are Decode's, for odd and even n; a block of the old
// row-major layout (parameter byte 0) fails with an error naming the
// layout.
func TestKakeyaPCLayout(t *testing.T) {
	cases := []struct {
		n, d int
		rate float64
	}{{64, 64, 2.5}, {33, 48, 2}, {7, 48, 4}, {1, 16, 6}, {64, 16, 0.7}}
	for _, tc := range cases {
		n, d := tc.n, tc.d
		rng := rand.New(rand.NewPCG(uint64(n), uint64(d)))
		blocks := pcBlocks(rng, 30, max(n, 8), d)
		k := mustPC(t, tc.rate, pcStats(t, blocks[:29], max(n, 8), d))
		x := blocks[29][:n*d]
		enc, err := k.Encode(nil, x, n, d)
		if err != nil {
			t.Fatal(err)
		}
		if enc[3] != 1 {
			t.Fatalf("n=%d d=%d: parameter byte %d, want 1 (component planes)", n, d, enc[3])
		}
		u16 := func(off int) int { return int(enc[off]) | int(enc[off+1])<<8 }
		m, c := u16(16), u16(18)
		if m != len(k.meanIdx) || c != len(k.codedIdx) || u16(20) != k.rowBits {
			t.Fatalf("n=%d d=%d: fields %d, %d, %d", n, d, m, c, u16(20))
		}
		// y: every component's coefficient, left out as 0.
		y := make([]float64, n*d)
		for a, j := range k.meanIdx {
			mj := float64(getF16(enc[22+2*a:]))
			for i := 0; i < n; i++ {
				y[i*d+j] = mj
			}
		}
		at := 22 + 2*m + 2*c
		for tt, j := range k.codedIdx {
			s := float64(getF16(enc[22+2*m+2*tt:]))
			w := int(k.width[tt])
			for i := 0; i < n; i++ {
				code := 0
				for b := 0; b < w; b++ {
					bit := i*w + b
					code |= int(enc[at+bit/8]>>(bit%8)&1) << b
				}
				y[i*d+j] += s * float64(k.tab.levels[w][code])
			}
			at += (n*w + 7) / 8
		}
		if at != len(enc) {
			t.Fatalf("n=%d d=%d: planes end at %d, block is %d bytes", n, d, at, len(enc))
		}
		dec := make([]float32, n*d)
		if err := k.Decode(dec, enc, n, d); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			for a := 0; a < d; a++ {
				want := float64(k.mean[a])
				for j := 0; j < d; j++ {
					want += y[i*d+j] * float64(k.basis[j*d+a])
				}
				if got := float64(dec[i*d+a]); math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
					t.Fatalf("n=%d d=%d: row %d col %d decodes to %v, the layout says %v", n, d, i, a, got, want)
				}
			}
		}
		stale := slices.Clone(enc)
		stale[3] = 0
		Seal(stale)
		if err := k.Decode(dec, stale, n, d); err == nil || !strings.Contains(err.Error(), "layout 0") {
			t.Errorf("n=%d d=%d: block of parameter byte 0: %v, want an error naming layout 0", n, d, err)
		}
	}
}

// pcRowMajor decodes enc the way kakeya-pc did before its latents went
// component-major: the latents row by row (n x q, q = C+1 rounded up to 8,
// a 1 after each row's), the base row by one Axpy per nonzero mean, the
// rows by MixBlock and AddWeighted's sums by MixBlock then AxpyBlock. It
// is the reference TestKakeyaPCSameBits holds the kernels to.
func pcRowMajor(t *testing.T, k *KakeyaPC, enc []byte, n, d int) (base, lat []float32, q int) {
	t.Helper()
	sc := new(pcScratch)
	if err := k.parse(sc, enc, n, d); err != nil {
		t.Fatal(err)
	}
	// Means and scales straight from the bytes, latents by the old
	// per-code loop over the component-major codes.
	m, c := len(k.meanIdx), len(k.codedIdx)
	info := 22 // the header and the info fields: 6 bytes, or 8 with the stream's length
	if k.opt.Entropy {
		info = 24
	}
	base = slices.Clone(k.mean)
	hidden := 0
	if k.opt.Entropy && enc[3] == pcECLayout2 {
		hidden = rans2Hidden(m) // the first means are in the lanes' final states
	}
	for a, j := range k.meanIdx {
		v := sc.means[a]
		if a >= hidden {
			v = getF16(enc[info+2*(a-hidden):])
		}
		if v != 0 {
			cpu.Axpy(v, k.basis[j*d:(j+1)*d], base)
		}
	}
	q = (c + 1 + 7) &^ 7
	lat = make([]float32, n*q)
	for i := 0; i < n; i++ {
		lat[i*q+c] = 1
	}
	if k.opt.Entropy {
		for tt := 0; tt < c; tt++ {
			for i := 0; i < n; i++ {
				lat[i*q+tt] = sc.lat[tt*n+i] // the stream's decoder is unchanged
			}
		}
		return base, lat, q
	}
	at := 22 + 2*m + 2*c
	for tt, w := range k.width {
		s := getF16(enc[22+2*m+2*tt:])
		for i := 0; i < n; i++ {
			code := 0
			for b := 0; b < int(w); b++ {
				bit := i*int(w) + b
				code |= int(enc[at+bit/8]>>(bit%8)&1) << b
			}
			lat[i*q+tt] = k.tab.levels[w][code] * s
		}
		at += (n*int(w) + 7) / 8
	}
	return base, lat, q
}

// fmaGoLoops reports whether the Go block kernels (AxpyBlock, Axpy) round
// as the C ones do, one fused multiply-add per term: true in the SIMD
// builds, false where the Go loops are scalar and round the product and
// the sum apart.
func fmaGoLoops() bool {
	w, v := []float32{1.1, 2.3, -0.7}, []float32{0.3, 1.7, 2.9, -1.3, 0.1, 0.6, 0.7, 1e-3, -3, 2, 1.5, 0.2, 9, -2.5, 0.4, 1.1, 0.3, 0.5, 0.8, -0.9, 1.7, 2.1, -0.1, 0.33}
	a, b := make([]float32, 8), make([]float32, 8)
	for i := range a {
		a[i], b[i] = 0.1*float32(i), 0.1*float32(i)
	}
	cpu.AxpyBlock(a, w, v, 3, 8)
	cpu.MixBlock(b, 1, w, 3, v, 3, 8)
	return slices.Equal(a, b)
}

// sameValues reports whether got equals want bit for bit, or with exact
// false within 1e-5 of each value's magnitude.
func sameValues(got, want []float32, exact bool) bool {
	if exact {
		return slices.Equal(got, want)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
			return false
		}
	}
	return len(got) == len(want)
}

// TestKakeyaPCSameBits: Decode, DecodeRotated and AddWeighted give the
// bits of the row-major decoder they replaced (pcRowMajor), for fixed-width
// and entropy-coded blocks, odd and even n, whole and partial row ranges;
// in a build whose Go loops do not fuse multiply-adds (no
// GOEXPERIMENT=simd), where the base row and AddWeighted's products now
// run in the C kernels, the values agree to rounding.
func TestKakeyaPCSameBits(t *testing.T) {
	exact := fmaGoLoops()
	t.Logf("bit for bit: %v", exact)
	for _, tc := range []struct {
		n, d int
		rate float64
		ec   bool
	}{{64, 64, 2.5, false}, {64, 64, 2, true}, {33, 48, 3, false}, {17, 128, 2.5, false}, {7, 16, 6, false}} {
		n, d := tc.n, tc.d
		rng := rand.New(rand.NewPCG(uint64(n), uint64(d)+9))
		blocks := pcBlocks(rng, 20, max(n, 16), d)
		o := DefaultKakeyaPCOptions()
		o.Rate, o.Entropy = tc.rate, tc.ec
		k, err := NewKakeyaPC(o, pcStats(t, blocks[:19], max(n, 16), d), nil)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := k.Encode(nil, blocks[19][:n*d], n, d)
		if err != nil {
			t.Fatal(err)
		}
		base, lat, q := pcRowMajor(t, k, enc, n, d)
		c := len(k.codedIdx)
		want := make([]float32, n*d)
		for i := 0; i < n; i++ {
			copy(want[i*d:(i+1)*d], base)
		}
		cpu.MixBlock(want, n, lat, q, k.coded, c, d)
		got := make([]float32, n*d)
		if err := k.Decode(got, enc, n, d); err != nil {
			t.Fatal(err)
		}
		if !sameValues(got, want, exact) {
			t.Errorf("n=%d d=%d rate %v ec %v: Decode differs from the row-major decoder", n, d, tc.rate, tc.ec)
		}
		cos, sin := make([]float32, n*d/2), make([]float32, n*d/2)
		for i := range cos {
			a := rng.Float64() * 6
			cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		cpu.RoPEBlock(want, want, cos, sin, n, d)
		if err := k.DecodeRotated(got, enc, n, d, cos, sin); err != nil {
			t.Fatal(err)
		}
		if !sameValues(got, want, exact) {
			t.Errorf("n=%d d=%d: DecodeRotated differs from the row-major decoder", n, d)
		}
		const m, stride = 7, 70
		w := make([]float32, (m-1)*stride+n)
		for i := range w {
			w[i] = rng.Float32()
		}
		for _, rg := range [][2]int{{0, n}, {n / 3, n - 1}, {n - 1, n}} {
			lo, hi := rg[0], rg[1]
			want := make([]float32, m*d)
			for i := range want {
				want[i] = float32(i % 5)
			}
			got := slices.Clone(want)
			acc := make([]float32, m*q)
			cpu.MixBlock(acc, m, w[lo:], stride, lat[lo*q:], hi-lo, q)
			for j := 0; j < m; j++ {
				cpu.AxpyBlock(want[j*d:(j+1)*d], acc[j*q:j*q+c], k.coded, c, d)
				cpu.Axpy(acc[j*q+c], base, want[j*d:(j+1)*d])
			}
			if err := k.AddWeighted(got, m, w, stride, enc, n, d, lo, hi); err != nil {
				t.Fatal(err)
			}
			if !sameValues(got, want, exact) {
				t.Errorf("n=%d d=%d rows [%d,%d): AddWeighted differs from the row-major decoder", n, d, lo, hi)
			}
		}
	}
}

// TestKakeyaPCMaxCoded: coded=N codes at most the N components of most
// variance (fixed-width and entropy coded), the blocks shrink, round trip
// within the allocation's prediction, and the spec names the cap.
func TestKakeyaPCMaxCoded(t *testing.T) {
	const n, d = 64, 64
	rng := rand.New(rand.NewPCG(7, 8))
	st := pcStats(t, pcBlocks(rng, 200, n, d), n, d)
	test := pcBlocks(rand.New(rand.NewPCG(7, 8)), 204, n, d)[200:]
	for _, ec := range []bool{false, true} {
		o := DefaultKakeyaPCOptions()
		o.Entropy = ec
		full, err := NewKakeyaPC(o, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, cap := range []int{8, 16} {
			o.MaxCoded = cap
			k, err := NewKakeyaPC(o, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(k.codedIdx) > cap || len(k.codedIdx) < cap/2 {
				t.Errorf("%s: %d coded components, want at most (and near) %d", k.Name(), len(k.codedIdx), cap)
			}
			for _, j := range k.codedIdx {
				if j >= cap { // pcStats' variances fall with j
					t.Errorf("%s: component %d coded, not among the %d of most variance", k.Name(), j, cap)
				}
			}
			if k.tag == full.tag {
				t.Errorf("%s: same tag as the uncapped codec", k.Name())
			}
			predicted := pcPredicted(k, st)
			var se float64
			for _, x := range test {
				y, enc := roundTrip(t, k, x, n, d)
				_, encFull := roundTrip(t, full, x, n, d)
				if len(enc) >= len(encFull) {
					t.Errorf("%s: block of %d bytes, not below the uncapped %d", k.Name(), len(enc), len(encFull))
				}
				for i := range x {
					e := float64(x[i] - y[i])
					se += e * e
				}
			}
			if mse := se / float64(len(test)*n); mse > 1.5*predicted+1e-3 || mse < 0.5*predicted {
				t.Errorf("%s: error %v per row, the allocation predicted %v", k.Name(), mse, predicted)
			}
			want := fmt.Sprintf("-c%d", cap)
			if !strings.Contains(k.Name(), want) {
				t.Errorf("name %q lacks %q", k.Name(), want)
			}
		}
	}
	c, err := Parse("kakeya-pc:rate=2.5,coded=12")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*KakeyaPC).Options().MaxCoded; got != 12 {
		t.Errorf("coded=12 parsed as MaxCoded %d", got)
	}
	if _, err := Parse("kakeya-pc:coded=-1"); err == nil {
		t.Error("coded=-1 parsed")
	}
}

// TestKakeyaPCCodedFrac: codedfrac=F caps the coded components at F·d
// (rounded, at least one): at d=64 a quarter is coded=16 to the byte,
// at d=128 it codes at most 32; with coded=N too the smaller cap holds;
// the name says the fraction and a fraction outside [0, 1] is refused.
func TestKakeyaPCCodedFrac(t *testing.T) {
	const n = 64
	for _, tt := range []struct {
		d, coded int
		frac     float64
		max      int
	}{{64, 0, 0.25, 16}, {128, 0, 0.25, 32}, {128, 16, 0.25, 16}, {64, 0, 0.001, 1}} {
		rng := rand.New(rand.NewPCG(7, uint64(tt.d)))
		st := pcStats(t, pcBlocks(rng, 200, n, tt.d), n, tt.d)
		o := DefaultKakeyaPCOptions()
		o.MaxCoded, o.CodedFrac = tt.coded, tt.frac
		k, err := NewKakeyaPC(o, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(k.codedIdx) > tt.max || len(k.codedIdx) < (tt.max+1)/2 {
			t.Errorf("d=%d %s: %d coded components, want at most (and near) %d", tt.d, k.Name(), len(k.codedIdx), tt.max)
		}
		if !strings.Contains(k.Name(), fmt.Sprintf("-cf%g", tt.frac)) {
			t.Errorf("name %q lacks the fraction %g", k.Name(), tt.frac)
		}
		o.MaxCoded, o.CodedFrac = tt.max, 0
		byCount, err := NewKakeyaPC(o, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		x := pcBlocks(rand.New(rand.NewPCG(9, uint64(tt.d))), 1, n, tt.d)[0]
		_, a := roundTrip(t, k, x, n, tt.d)
		_, b := roundTrip(t, byCount, x, n, tt.d)
		if !slices.Equal(k.codedIdx, byCount.codedIdx) || !bytes.Equal(a, b) {
			t.Errorf("d=%d: codedfrac=%g codes %v (%d bytes), coded=%d codes %v (%d bytes): want the same block", tt.d, tt.frac, k.codedIdx, len(a), tt.max, byCount.codedIdx, len(b))
		}
	}
	c, err := Parse("kakeya-pc:rate=2.5,codedfrac=0.25")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*KakeyaPC).Options().CodedFrac; got != 0.25 {
		t.Errorf("codedfrac=0.25 parsed as %v", got)
	}
	for _, bad := range []string{"kakeya-pc:codedfrac=1.5", "kakeya-pc:codedfrac=-0.1"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "codedfrac") {
			t.Errorf("%s: err = %v, want one naming codedfrac", bad, err)
		}
	}
}
