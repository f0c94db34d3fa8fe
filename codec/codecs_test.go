package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

func mustKakeya(t testing.TB, mod func(*KakeyaOptions)) *Kakeya {
	t.Helper()
	o := DefaultKakeyaOptions()
	if mod != nil {
		mod(&o)
	}
	k, err := NewKakeya(o)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustTurbo(t testing.TB, bits int) *Turbo {
	t.Helper()
	o := DefaultTurboOptions()
	o.Bits = bits
	c, err := NewTurbo(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustInt4(t testing.TB, o Int4Options) *Int4 {
	t.Helper()
	c, err := NewInt4(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectedLen is the documented encoded length of each codec; for kakeya
// the block's rank and outlier count are read from its payload.
func expectedLen(t *testing.T, c Codec, enc []byte, n, d int) int {
	switch c := c.(type) {
	case Identity:
		return 16 + 4*n*d
	case BF16:
		return 16 + 2*n*d
	case Int8:
		return 16 + 2*n*((d+31)/32) + n*d
	case *Int4:
		p, g := d, c.opt.Group
		if c.opt.Rotate {
			p = NextPow2(d)
		}
		groups := n * ((p + g - 1) / g)
		if c.opt.PerChannel {
			groups = p * ((n + g - 1) / g)
		}
		return 16 + c.paramLen(groups) + (n*p*c.opt.Bits+7)/8
	case *Kakeya:
		r, cb, m := int(enc[16]), int(enc[17]), int(binary.LittleEndian.Uint32(enc[18:]))
		p, b := NextPow2(d), c.opt.Bits
		s := 2
		if n*p > 65536 {
			s = 4
		}
		l := 16 + 6 + 2*d + 2*r*d + (n*r*cb+7)/8 + 2*n + (n*p*b+7)/8 + m*(s+2)
		if cb < 16 {
			l += 2 * r
		}
		return l
	case *Turbo:
		b, p := c.layout(d)
		return 16 + 2*n*p/b + (n*p*c.opt.Bits+7)/8
	case *KakeyaPC:
		if c.opt.Entropy { // the stream's length is the block's own; layout 2's lanes carry up to 32 means
			return 16 + 8 + 2*(len(c.meanIdx)-c.hidden()) + 2*len(c.codedIdx) + int(binary.LittleEndian.Uint32(enc[20:]))
		}
		l := 16 + 6 + 2*len(c.meanIdx) + 2*len(c.codedIdx)
		for _, w := range c.width { // one byte-aligned plane per coded component
			l += (n*int(w) + 7) / 8
		}
		return l
	case *Preconditioned:
		return expectedLen(t, c.Inner, enc, n, d)
	}
	t.Fatalf("no length formula for %T", c)
	return 0
}

func roundTrip(t *testing.T, c Codec, x []float32, n, d int) ([]float32, []byte) {
	t.Helper()
	enc, err := c.Encode([]byte("prefix"), x, n, d)
	if err != nil {
		t.Fatalf("%s: encode: %v", c.Name(), err)
	}
	if string(enc[:6]) != "prefix" {
		t.Fatalf("%s: encode clobbered dst", c.Name())
	}
	enc = enc[6:]
	if want := expectedLen(t, c, enc, n, d); len(enc) != want {
		t.Errorf("%s n=%d d=%d: %d bytes, formula says %d", c.Name(), n, d, len(enc), want)
	}
	y := make([]float32, n*d)
	if err := c.Decode(y, enc, n, d); err != nil {
		t.Fatalf("%s: decode: %v", c.Name(), err)
	}
	return y, enc
}

func TestRoundTripBounds(t *testing.T) {
	kb := func(b int) *Kakeya { return mustKakeya(t, func(o *KakeyaOptions) { o.Bits = b }) }
	// Upper bounds on the error relative to the centred energy, per data
	// kind; about 1.3x the measured values, in decreasing order along bits.
	tests := []struct {
		c      Codec
		gauss  float64
		t3     float64
		keyish float64
	}{
		{BF16{}, 1.3e-5, 1.3e-5, 1e-4},
		{Int8{}, 1.5e-4, 1e-4, 1.5e-3},
		// 8-bit group parameters (the default) against fp16 ones: 10% fewer
		// bits at about the same error (their choice of step and zero
		// point, weighted toward the large values, gains most of what the
		// parameters' precision loses).
		{mustInt4(t, DefaultInt4Options()), 0.012, 0.013, 0.26},
		{mustInt4(t, Int4Options{Group: 32, F16Params: true}), 0.012, 0.013, 0.22},
		{mustInt4(t, Int4Options{Group: 32, Rotate: true, Seed: 1}), 0.008, 0.008, 0.07},
		{mustInt4(t, Int4Options{Group: 32, Rotate: true, Seed: 1, F16Params: true}), 0.008, 0.008, 0.07},
		{mustInt4(t, Int4Options{Group: 32, PerChannel: true, F16Params: true}), 0.012, 0.013, 0.01},
		{mustInt4(t, Int4Options{Bits: 2, Group: 32, PerChannel: true, F16Params: true}), 0.21, 0.33, 0.21},
		{mustInt4(t, Int4Options{Group: 32, PerChannel: true}), 0.012, 0.013, 0.01},
		{kb(4), 0.012, 0.012, 0.004},
		{kb(3), 0.042, 0.042, 0.013},
		{kb(2), 0.14, 0.14, 0.05},
		{kb(1), 0.45, 0.45, 0.2},
		{mustInt4(t, Int4Options{Bits: 2, Group: 32, PerChannel: true}), 0.21, 0.33, 0.21},
		// The TurboQuant-style codec codes uncentred blocks: keys with a
		// large mean cost it most.
		{mustTurbo(t, 4), 0.011, 0.011, 0.12},
		{mustTurbo(t, 3), 0.041, 0.039, 0.43},
		{mustTurbo(t, 2), 0.15, 0.14, 1.12},
	}
	for _, d := range []int{64, 128, 80} {
		n := 256
		for _, kd := range []kind{gaussian, studentT, keyLike} {
			x := synth(kd, n, d, 3, 11)
			prevKakeya := 0.0
			for _, tt := range tests {
				y, enc := roundTrip(t, tt.c, x, n, d)
				e := relErr(x, y, n, d)
				bound := map[kind]float64{gaussian: tt.gauss, studentT: tt.t3, keyLike: tt.keyish}[kd]
				if d == 80 {
					bound *= 1.2 // padding to 128 changes the statistics a little
				}
				t.Logf("d=%d %-6s %-28s %6.3f bits  rel.err %.6f", d, kd, tt.c.Name(), float64(8*len(enc))/float64(n*d), e)
				if !(e <= bound) {
					t.Errorf("d=%d %s %s: relative error %.6f above bound %.6f", d, kd, tt.c.Name(), e, bound)
				}
				if k, ok := tt.c.(*Kakeya); ok {
					if e <= prevKakeya {
						t.Errorf("d=%d %s: %d bits error %.6f not above the error with more bits %.6f", d, kd, k.opt.Bits, e, prevKakeya)
					}
					prevKakeya = e
				}
			}
		}
	}
}

func TestIdentityBitExact(t *testing.T) {
	x := synth(studentT, 33, 7, 1, 1)
	x[3] = float32(math.Inf(-1))
	x[4] = math.Float32frombits(0x7fc00123) // NaN with payload
	x[5] = float32(math.Copysign(0, -1))
	y, _ := roundTrip(t, Identity{}, x, 33, 7)
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			t.Fatalf("value %d: %#x -> %#x", i, math.Float32bits(x[i]), math.Float32bits(y[i]))
		}
	}
}

func allCodecs(t testing.TB) []Codec {
	return []Codec{
		Identity{}, BF16{}, Int8{},
		mustInt4(t, DefaultInt4Options()),
		mustInt4(t, Int4Options{Group: 32, Rotate: true, PerChannel: true, Seed: 9}),
		mustKakeya(t, nil),
		mustKakeya(t, func(o *KakeyaOptions) { o.CoeffBits = 16; o.MaxRank = 8 }),
		mustKakeya(t, func(o *KakeyaOptions) { o.CoeffBits = 8; o.OutlierThreshold = 1.5; o.MaxOutliers = 8 }),
		mustInt4(t, Int4Options{Bits: 2, Group: 32, PerChannel: true}),
		mustTurbo(t, 3),
		mustTurbo(t, 4),
	}
}

func TestOddShapes(t *testing.T) {
	for _, c := range allCodecs(t) {
		for _, sh := range [][2]int{{1, 1}, {1, 64}, {2, 3}, {5, 33}, {300, 96}, {600, 128}} {
			n, d := sh[0], sh[1]
			x := synth(keyLike, n, d, 4, 5)
			y, _ := roundTrip(t, c, x, n, d)
			e := relErr(x, y, n, d)
			if _, ok := c.(*Turbo); ok {
				// It codes uncentred blocks: measure against their energy.
				var num, den float64
				for i := range x {
					num += float64(x[i]-y[i]) * float64(x[i]-y[i])
					den += float64(x[i]) * float64(x[i])
				}
				e = num / den
			}
			if n > 1 && !(e < 0.5) {
				t.Errorf("%s n=%d d=%d: relative error %v", c.Name(), n, d, e)
			}
		}
		// Constant and zero blocks decode to themselves (up to fp16).
		x := make([]float32, 16*8)
		y, _ := roundTrip(t, c, x, 16, 8)
		for i, v := range y {
			if v != 0 {
				t.Fatalf("%s: zero block decoded %v at %d", c.Name(), v, i)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	for _, c := range allCodecs(t) {
		x := synth(gaussian, 8, 16, 1, 1)
		if _, err := c.Encode(nil, x, 8, 17); err == nil {
			t.Errorf("%s: short input accepted", c.Name())
		}
		if _, err := c.Encode(nil, x, 0, 16); err == nil {
			t.Errorf("%s: n=0 accepted", c.Name())
		}
		switch c.(type) {
		case Identity, BF16: // format conversions: NaN and Inf survive as such
			continue
		}
		{
			x[37] = float32(math.NaN())
			if _, err := c.Encode(nil, x, 8, 16); err == nil || !strings.Contains(err.Error(), "row 2 col 5") {
				t.Errorf("%s: NaN input: err = %v, want one naming row 2 col 5", c.Name(), err)
			}
		}
		if err := c.Decode(make([]float32, 10), nil, 8, 16); err == nil {
			t.Errorf("%s: short destination accepted", c.Name())
		}
	}
}

// reseal recomputes a block's checksum after a deliberate edit, so the
// decoder's semantic checks (not just the CRC) are exercised.
func reseal(b []byte) []byte {
	b = append([]byte(nil), b...)
	seal(b)
	return b
}

func TestCorruptBlocks(t *testing.T) {
	n, d := 64, 32
	x := synth(keyLike, n, d, 2, 2)
	for _, c := range allCodecs(t) {
		enc, err := c.Encode(nil, x, n, d)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, n*d)
		bad := map[string][]byte{
			"empty":     nil,
			"truncated": enc[:len(enc)-1],
			"half":      enc[:len(enc)/2],
			"extended":  append(append([]byte(nil), enc...), 0),
			"resealed truncated": func() []byte {
				b := reseal(enc[:len(enc)-1])
				return b
			}(),
		}
		for i := 0; i < headerLen; i++ {
			b := append([]byte(nil), enc...)
			b[i] ^= 0x10
			bad[fmt.Sprintf("header byte %d", i)] = b
		}
		for _, i := range []int{headerLen, len(enc) / 2, len(enc) - 1} {
			b := append([]byte(nil), enc...)
			b[i] ^= 0x01
			bad[fmt.Sprintf("payload byte %d", i)] = b
		}
		for name, b := range bad {
			if err := c.Decode(y, b, n, d); err == nil {
				t.Errorf("%s: %s block decoded without error", c.Name(), name)
			}
		}
		if err := c.Decode(y, enc, n+1, d); err == nil {
			t.Errorf("%s: wrong n accepted", c.Name())
		}
		if err := c.Decode(y, enc, n/2, d*2); err == nil {
			t.Errorf("%s: wrong d accepted", c.Name())
		}
	}
	// Semantic checks behind a valid checksum.
	k := mustKakeya(t, func(o *KakeyaOptions) { o.OutlierThreshold = 1.5; o.MaxOutliers = 8 })
	enc, _ := k.Encode(nil, x, n, d)
	m := int(binary.LittleEndian.Uint32(enc[18:]))
	if m < 2 {
		t.Fatalf("want outliers in the test block, got %d", m)
	}
	y := make([]float32, n*d)
	cases := map[string]func(b []byte){
		"rank > d":          func(b []byte) { b[16] = byte(d + 1) },
		"coefficient width": func(b []byte) { b[17] = 5 },
		"outlier count":     func(b []byte) { binary.LittleEndian.PutUint32(b[18:], uint32(m+1)) },
		"outlier index out of range": func(b []byte) {
			binary.LittleEndian.PutUint16(b[len(b)-4:], uint16(n*d))
		},
		"outliers out of order": func(b []byte) {
			binary.LittleEndian.PutUint16(b[len(b)-4:], 0)
		},
		"outlier NaN": func(b []byte) { binary.LittleEndian.PutUint16(b[len(b)-2:], 0x7e00) },
		"mean NaN":    func(b []byte) { binary.LittleEndian.PutUint16(b[22:], 0x7c00) },
		"coefficient code 0": func(b []byte) {
			r := int(b[16])
			b[22+2*d+2*r*d+2*r] &^= 0x0f // first 4-bit code of token 0
		},
		"last coefficient code 0": func(b []byte) {
			r := int(b[16])
			b[22+2*d+2*r*d+2*r+(n*r+1)/2-1] &^= 0xf0 // last 4-bit code
		},
	}
	for name, edit := range cases {
		b := append([]byte(nil), enc...)
		edit(b)
		if err := k.Decode(y, reseal(b), n, d); err == nil {
			t.Errorf("kakeya: %s accepted", name)
		} else {
			t.Logf("kakeya: %s: %v", name, err)
		}
	}
	i8, _ := Int8{}.Encode(nil, x, n, d)
	i8[len(i8)-1] = 0x80
	if err := (Int8{}).Decode(y, reseal(i8), n, d); err == nil {
		t.Error("int8: code -128 accepted")
	}
	// A block decoded by a codec with other settings fails on the header.
	other := mustKakeya(t, func(o *KakeyaOptions) { o.Seed = 99 })
	if err := other.Decode(y, enc, n, d); err == nil {
		t.Error("kakeya block decoded by a codec with other signs")
	}
	if err := mustKakeya(t, func(o *KakeyaOptions) { o.Bits = 2 }).Decode(y, enc, n, d); err == nil {
		t.Error("3-bit kakeya block decoded by a 2-bit codec")
	}
}

func TestConcurrentUse(t *testing.T) {
	n, d := 128, 64
	for _, c := range allCodecs(t) {
		want := make([][]byte, 8)
		for g := range want {
			var err error
			if want[g], err = c.Encode(nil, synth(keyLike, n, d, 1, uint64(g)), n, d); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := synth(keyLike, n, d, 1, uint64(g))
				y := make([]float32, n*d)
				ref := make([]float32, n*d)
				var buf []byte
				for it := 0; it < 4; it++ {
					var err error
					buf, err = c.Encode(buf[:0], x, n, d)
					if err != nil {
						errs <- err
						return
					}
					if string(buf) != string(want[g]) {
						errs <- fmt.Errorf("%s: goroutine %d: encoding differs from the serial one", c.Name(), g)
						return
					}
					if err := c.Decode(y, buf, n, d); err != nil {
						errs <- err
						return
					}
					if it == 0 {
						copy(ref, y)
					} else if !equalBits(ref, y) {
						errs <- fmt.Errorf("%s: goroutine %d: decode not deterministic", c.Name(), g)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

func equalBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked in the full run")
	}
	n, d := 256, 128
	x := synth(keyLike, n, d, 1, 1)
	y := make([]float32, n*d)
	for _, c := range allCodecs(t) {
		buf, _ := c.Encode(nil, x, n, d)
		enc := allocs(func() { buf, _ = c.Encode(buf[:0], x, n, d) })
		dec := allocs(func() { _ = c.Decode(y, buf, n, d) })
		t.Logf("%s: %.1f allocs/encode, %.1f allocs/decode", c.Name(), enc, dec)
		if dec > 0 {
			t.Errorf("%s: decode allocates %.1f times", c.Name(), dec)
		}
		if enc > 2 {
			t.Errorf("%s: encode allocates %.1f times", c.Name(), enc)
		}
	}
}

func allocs(f func()) float64 { return testing.AllocsPerRun(5, f) }

// FuzzDecodeResealed edits encoded blocks of every codec behind a valid
// checksum (the CRC catches random damage; this reaches the decoders'
// own checks) and requires an error or a decode, never a panic, from Decode
// and from AddWeighted.
func FuzzDecodeResealed(f *testing.F) {
	f.Add(uint8(0), uint16(16), []byte{0xff})
	f.Add(uint8(5), uint16(17), []byte{0x7f, 0xff, 0xff, 0xff})
	f.Add(uint8(6), uint16(0), []byte{1, 2, 3})
	f.Add(uint8(7), uint16(40), []byte{0x3c, 0x00})
	f.Add(uint8(3), uint16(300), []byte{0})
	const n, d = 32, 24
	x := synth(keyLike, n, d, 3, 3)
	codecs := allCodecs(f)
	encs := make([][]byte, len(codecs))
	for i, c := range codecs {
		var err error
		if encs[i], err = c.Encode(nil, x, n, d); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, at uint16, patch []byte) {
		i := int(which) % len(codecs)
		b := append([]byte(nil), encs[i]...)
		off := headerLen + int(at)%max(1, len(b)-headerLen)
		for j, p := range patch {
			if off+j < len(b) {
				b[off+j] = p
			}
		}
		y := make([]float32, n*d)
		b = reseal(b)
		_ = codecs[i].Decode(y, b, n, d)
		if rc, ok := codecs[i].(RowCombiner); ok {
			w := make([]float32, 2*n)
			for j := range w {
				w[j] = 1
			}
			_ = rc.AddWeighted(y[:2*d], 2, w, n, b, n, d, int(at)%n, n)
		}
	})
}

// AddWeighted must equal decoding the block and summing its weighted rows.
func TestAddWeighted(t *testing.T) {
	const n, d, m = 64, 48, 3
	x := synth(keyLike, n, d, 4, 4)
	for _, k := range []*Kakeya{
		mustKakeya(t, nil),
		mustKakeya(t, func(o *KakeyaOptions) { o.MaxRank = 0 }),
		mustKakeya(t, func(o *KakeyaOptions) { o.CoeffBits = 16; o.MaxRank = 8; o.Bits = 2 }),
		mustKakeya(t, func(o *KakeyaOptions) { o.OutlierThreshold = 1.2; o.MaxOutliers = 16; o.Bits = 4 }),
	} {
		var rc RowCombiner = k
		enc, err := k.Encode(nil, x, n, d)
		if err != nil {
			t.Fatal(err)
		}
		rows := make([]float32, n*d)
		if err := k.Decode(rows, enc, n, d); err != nil {
			t.Fatal(err)
		}
		const stride = n + 5
		w := make([]float32, (m-1)*stride+n)
		for i := range w {
			w[i] = float32(math.Sin(float64(i)*0.7)) + 0.2
		}
		w[stride+3] = 0 // a zero weight is skipped, not mis-summed
		for _, rg := range [][2]int{{0, n}, {5, n - 3}, {n - 1, n}, {7, 7}} {
			lo, hi := rg[0], rg[1]
			got := make([]float32, m*d)
			want := make([]float64, m*d)
			for i := range got {
				got[i] = float32(i%7) - 3 // AddWeighted adds to what is there
				want[i] = float64(got[i])
			}
			if err := rc.AddWeighted(got, m, w, stride, enc, n, d, lo, hi); err != nil {
				t.Fatalf("%s [%d,%d): %v", k.Name(), lo, hi, err)
			}
			var scale float64
			for j := 0; j < m; j++ {
				for i := lo; i < hi; i++ {
					for c := 0; c < d; c++ {
						want[j*d+c] += float64(w[j*stride+i]) * float64(rows[i*d+c])
						scale = math.Max(scale, math.Abs(float64(rows[i*d+c])))
					}
				}
			}
			for i := range got {
				if diff := math.Abs(float64(got[i]) - want[i]); diff > 1e-5*float64(n)*(scale+1) {
					t.Fatalf("%s [%d,%d): [%d] = %v, want %v", k.Name(), lo, hi, i, got[i], want[i])
				}
			}
		}
		dst := make([]float32, m*d)
		for _, bad := range []struct {
			name string
			call func() error
		}{
			{"corrupt", func() error {
				b := append([]byte(nil), enc...)
				b[len(b)/2] ^= 1
				return rc.AddWeighted(dst, m, w, stride, b, n, d, 0, n)
			}},
			{"rows past the block", func() error { return rc.AddWeighted(dst, m, w, stride, enc, n, d, 0, n+1) }},
			{"short weights", func() error { return rc.AddWeighted(dst, m, w[:len(w)-1], stride, enc, n, d, 0, n) }},
			{"short destination", func() error { return rc.AddWeighted(dst[:m*d-1], m, w, stride, enc, n, d, 0, n) }},
			{"other shape", func() error { return rc.AddWeighted(dst, m, w, stride, enc, n/2, d*2, 0, n/2) }},
		} {
			if err := bad.call(); err == nil {
				t.Errorf("%s: %s accepted", k.Name(), bad.name)
			}
		}
	}
}

// The default int4 layout's step codes: 2^(-e/16), as the CUDA kernel's
// copy of the table gives them too.
func TestStepScale(t *testing.T) {
	for e := 0; e < 256; e++ {
		if got, want := stepScale(byte(e)), float32(math.Exp2(-float64(e)/16)); got != want {
			t.Errorf("stepScale(%d) = %v, want %v", e, got, want)
		}
	}
}

// The byte-aligned per-token int4 layouts decode through one fused kernel;
// each value must still be exactly m + c·s of its group (then the inverse
// rotation), as the general loop computes it from the payload.
func TestInt4DecodeMatchesPayload(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const n, d = 24, 64
	x := make([]float32, n*d)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, o := range []Int4Options{
		{Bits: 4, Group: 32}, {Bits: 2, Group: 32}, {Bits: 4, Group: 16}, {Bits: 4, Group: 64},
		{Bits: 4, Group: 32, F16Params: true}, {Bits: 2, Group: 32, F16Params: true},
	} {
		c, err := NewInt4(o)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := c.Encode(nil, x, n, d)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n*d)
		if err := c.Decode(got, enc, n, d); err != nil {
			t.Fatal(err)
		}
		pl := enc[headerLen:]
		groups := n * d / o.Group
		codes := make([]uint8, n*d)
		if err := UnpackBits(codes, pl[c.paramLen(groups):], o.Bits); err != nil {
			t.Fatal(err)
		}
		for j, cd := range codes {
			k := j / o.Group
			m, s := getF16(pl[4*k:]), getF16(pl[4*k+2:])
			if !o.F16Params {
				// s = S * 2^(-e/16), m = z*s.
				s = getF16(pl) * float32(math.Exp2(-float64(pl[2+2*k])/16))
				m = float32(int8(pl[3+2*k])) * s
			}
			if want := m + float32(cd)*s; math.Float32bits(got[j]) != math.Float32bits(want) {
				t.Fatalf("%s: value %d = %v, want %v", c.Name(), j, got[j], want)
			}
		}
	}
}

// hasZeroNibble agrees with a code-by-code scan for every length and for a
// zero in each position.
func TestHasZeroNibble(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for n := 0; n <= 40; n++ {
		b := make([]byte, (n+1)/2)
		for i := range b {
			b[i] = byte(rng.IntN(15)+1) | byte(rng.IntN(15)+1)<<4
		}
		if hasZeroNibble(b, n) {
			t.Fatalf("n=%d: zero reported in nonzero codes", n)
		}
		for j := 0; j < n; j++ {
			c := append([]byte(nil), b...)
			c[j/2] &^= 15 << (4 * (j % 2))
			if !hasZeroNibble(c, n) {
				t.Errorf("n=%d: zero code %d missed", n, j)
			}
		}
		if n%2 == 1 {
			// The unused high nibble of the last byte does not count.
			c := append([]byte(nil), b...)
			c[len(c)-1] &^= 0xf0
			if hasZeroNibble(c, n) {
				t.Errorf("n=%d: the padding nibble counted", n)
			}
		}
	}
}

// DecodeRotated must equal Decode followed by RoPEBlock, bit for bit, on
// the fused 64-wide path and the general ones.
func TestDecodeRotated(t *testing.T) {
	const n = 64
	for _, d := range []int{64, 48, 6} {
		x := synth(keyLike, n, d, 5, 5)
		cos, sin := make([]float32, n*d/2), make([]float32, n*d/2)
		for i := range cos {
			a := 0.37 * float64(i)
			cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		for _, k := range []*Kakeya{
			mustKakeya(t, nil),
			mustKakeya(t, func(o *KakeyaOptions) { o.MaxRank = 0 }),
			mustKakeya(t, func(o *KakeyaOptions) { o.OutlierThreshold = 1.2; o.MaxOutliers = 16; o.Bits = 4 }),
		} {
			var rd RotaryDecoder = k
			enc, err := k.Encode(nil, x, n, d)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, n*d)
			if err := k.Decode(want, enc, n, d); err != nil {
				t.Fatal(err)
			}
			cpu.RoPEBlock(want, want, cos, sin, n, d)
			got := make([]float32, n*d)
			if err := rd.DecodeRotated(got, enc, n, d, cos, sin); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s d=%d: [%d] = %v, want %v", k.Name(), d, i, got[i], want[i])
				}
			}
			if err := rd.DecodeRotated(got, enc, n, d, cos[:len(cos)-1], sin); err == nil {
				t.Errorf("%s d=%d: short cos accepted", k.Name(), d)
			}
		}
	}
}
