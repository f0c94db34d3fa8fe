package codec

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestScaledResidualsMatchEncode checks that quantizing ScaledResiduals with
// the codec's codebook gives exactly the codes Encode stores, and that with
// outliers on the values left out are exactly the outliers Encode stores.
func TestScaledResidualsMatchEncode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k       kind
		n, d    int
		rank    int
		outlier float32
	}{
		{"keys d64 r4", keyLike, 32, 64, 4, 0},
		{"values d48 r0", valueLike, 16, 48, 0, 0},
		{"t3 d8 r2", studentT, 16, 8, 2, 0},
		{"keys d64 outliers", keyLike, 32, 64, 4, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultKakeyaOptions()
			o.MaxRank, o.OutlierThreshold = tc.rank, tc.outlier
			if tc.outlier == 0 {
				o.MaxOutliers = 0
			}
			k, err := NewKakeya(o)
			if err != nil {
				t.Fatal(err)
			}
			x := synth(tc.k, tc.n, tc.d, 7, 11)
			u, err := k.ScaledResiduals(nil, x, tc.n, tc.d)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := k.Encode(nil, x, tc.n, tc.d)
			if err != nil {
				t.Fatal(err)
			}
			p := NextPow2(tc.d)
			pl := enc[headerLen:]
			r, cbits, m := int(pl[0]), int(pl[1]), int(binary.LittleEndian.Uint32(pl[2:]))
			if len(u) != tc.n*p-m {
				t.Fatalf("%d residuals, want n*p - outliers = %d - %d", len(u), tc.n*p, m)
			}
			if tc.outlier == 0 && m != 0 {
				t.Fatalf("%d outliers with outliers off", m)
			}
			coefLen := 2 * tc.n * r
			if cbits < 16 {
				coefLen = 2*r + PackedLen(tc.n*r, cbits)
			}
			off := 6 + 2*tc.d + 2*r*tc.d + coefLen + 2*tc.n
			codes := make([]uint8, tc.n*p)
			if err := UnpackBits(codes, pl[off:], o.Bits); err != nil {
				t.Fatal(err)
			}
			outPos := map[int]bool{}
			outs := pl[off+PackedLen(tc.n*p, o.Bits):]
			for i := 0; i < m; i++ {
				outPos[int(binary.LittleEndian.Uint16(outs[4*i:]))] = true
			}
			next := 0
			for pos, c := range codes {
				if outPos[pos] {
					continue
				}
				if got := k.cb.Quantize(u[next]); got != int(c) {
					t.Fatalf("coordinate %d: residual %v quantizes to %d, Encode stored %d", pos, u[next], got, c)
				}
				next++
			}
			// Unit variance per row: each full row's squares sum to about p.
			if m == 0 {
				for i := 0; i < tc.n; i++ {
					var ss float64
					for _, v := range u[i*p : (i+1)*p] {
						ss += float64(v) * float64(v)
					}
					if math.Abs(ss/float64(p)-1) > 2e-3 {
						t.Fatalf("row %d: mean square %v, want 1", i, ss/float64(p))
					}
				}
			}
		})
	}
}

// TestTrainedCodebookLowersError fits a codebook to the residuals of
// heavy-tailed blocks and checks it codes fresh blocks of the same kind
// with less error than the Gaussian codebook.
func TestTrainedCodebookLowersError(t *testing.T) {
	const n, d, bits = 32, 64, 2
	o := DefaultKakeyaOptions()
	o.Bits, o.MaxRank, o.MaxOutliers, o.OutlierThreshold = bits, 0, 0, 0
	gauss, err := NewKakeya(o)
	if err != nil {
		t.Fatal(err)
	}
	var samples []float32
	for s := uint64(0); s < 40; s++ {
		if samples, err = gauss.ScaledResiduals(samples, synth(studentT, n, d, 1, s), n, d); err != nil {
			t.Fatal(err)
		}
	}
	cb, err := TrainLloydMax(samples, bits)
	if err != nil {
		t.Fatal(err)
	}
	o.Codebook = cb
	cal, err := NewKakeya(o)
	if err != nil {
		t.Fatal(err)
	}
	mse := func(c Codec) float64 {
		var se float64
		out := make([]float32, n*d)
		for s := uint64(100); s < 110; s++ {
			x := synth(studentT, n, d, 1, s)
			enc, err := c.Encode(nil, x, n, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Decode(out, enc, n, d); err != nil {
				t.Fatal(err)
			}
			for i, v := range x {
				e := float64(v - out[i])
				se += e * e
			}
		}
		return se
	}
	g, c := mse(gauss), mse(cal)
	t.Logf("t3 blocks, %d-bit residual: squared error gaussian %.1f, trained %.1f", bits, g, c)
	if !(c < 0.99*g) {
		t.Fatalf("trained codebook error %v not below gaussian %v", c, g)
	}
}

func TestScaledResidualsErrors(t *testing.T) {
	k, err := NewKakeya(DefaultKakeyaOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.ScaledResiduals(nil, make([]float32, 10), 4, 8); err == nil {
		t.Fatal("short input: no error")
	}
	x := make([]float32, 32)
	x[5] = float32(math.Inf(1))
	if _, err := k.ScaledResiduals(nil, x, 4, 8); err == nil {
		t.Fatal("infinite input: no error")
	}
	// All-equal rows leave a zero residual: nothing to train on, no error.
	for i := range x {
		x[i] = 1
	}
	u, err := k.ScaledResiduals(nil, x, 4, 8)
	if err != nil || len(u) != 0 {
		t.Fatalf("constant block: %d residuals, %v; want none", len(u), err)
	}
}
