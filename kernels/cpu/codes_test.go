package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
)

// packCodes packs codes LSB first, as codec.PackBits does.
func packCodes(codes []uint8, bits int) []byte {
	out := make([]byte, (len(codes)*bits+7)/8)
	for i, c := range codes {
		for b := 0; b < bits; b++ {
			if c>>b&1 != 0 {
				k := i*bits + b
				out[k/8] |= 1 << (k % 8)
			}
		}
	}
	return out
}

func TestUnpackLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var table [16]float32
	for i := range table {
		table[i] = float32(rng.NormFloat64())
	}
	for bits := 1; bits <= 4; bits++ {
		for n := 0; n <= 140; n++ {
			for _, extra := range []int{0, 1, 5} {
				codes := make([]uint8, n)
				for i := range codes {
					codes[i] = uint8(rng.IntN(1 << bits))
				}
				src := append(packCodes(codes, bits), make([]byte, extra)...)
				for i := len(src) - extra; i < len(src); i++ {
					src[i] = 0xff // bytes past the codes must not matter
				}
				dst := make([]float32, n+1)
				dst[n] = 42
				UnpackLookup(dst[:n], src, bits, &table)
				for i, c := range codes {
					if dst[i] != table[c] {
						t.Fatalf("bits=%d n=%d extra=%d: [%d] = %v, want %v (code %d)", bits, n, extra, i, dst[i], table[c], c)
					}
				}
				if dst[n] != 42 {
					t.Fatalf("bits=%d n=%d: wrote past dst", bits, n)
				}
			}
		}
	}
	for _, c := range []struct{ n, bits, src int }{{8, 0, 8}, {8, 5, 8}, {9, 3, 3}} {
		wantPanic(t, fmt.Sprintf("%+v", c), func() { UnpackLookup(make([]float32, c.n), make([]byte, c.src), c.bits, &table) })
	}
}

func TestWidenF16(t *testing.T) {
	// Every half, in runs that start at every offset of a vector.
	src := make([]byte, 2<<16)
	for h := range 1 << 16 {
		src[2*h], src[2*h+1] = byte(h), byte(h>>8)
	}
	dst := make([]float32, 1<<16)
	for _, lo := range []int{0, 3} {
		finite := true
		for h := lo; h < 1<<16; h++ {
			finite = finite && h&0x7c00 != 0x7c00
		}
		if ok := WidenF16(dst[lo:], src[2*lo:]); ok != finite {
			t.Errorf("from %d: finite %v, want %v", lo, ok, finite)
		}
		for h := lo; h < 1<<16; h++ {
			if got, want := math.Float32bits(dst[h]), math.Float32bits(tensor.F16ToF32(uint16(h))); got != want {
				t.Fatalf("half %#04x: %#08x, want %#08x", h, got, want)
			}
		}
	}
	// The finiteness of short runs, with the bad value in the vector part
	// and in the tail.
	for n := 1; n <= 20; n++ {
		for bad := 0; bad < n; bad++ {
			b := make([]byte, 2*n)
			b[2*bad+1] = 0x7c // +Inf
			if WidenF16(make([]float32, n), b) {
				t.Fatalf("n=%d: Inf at %d not reported", n, bad)
			}
		}
		if !WidenF16(make([]float32, n), make([]byte, 2*n)) {
			t.Fatalf("n=%d: zeros reported non-finite", n)
		}
	}
	wantPanic(t, "short src", func() { WidenF16(make([]float32, 3), make([]byte, 5)) })
}

// TestWidenF16Tail checks short runs value by value, their last n%8
// values widened through the vector loop's padded copy: every value as
// tensor.F16ToF32 gives it, nothing written past n, and NaN, Inf and
// subnormals in the tail.
func TestWidenF16Tail(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for n := 1; n <= 40; n++ {
		for trial := range 4 {
			src := make([]byte, 2*n+6)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			if trial == 0 { // a subnormal, then +Inf, in the tail
				src[2*(n-1)], src[2*(n-1)+1] = 0x01, 0x00
			}
			dst := make([]float32, n+8)
			for i := range dst {
				dst[i] = -7
			}
			finite := true
			for i := range n {
				finite = finite && src[2*i+1]&0x7c != 0x7c
			}
			if ok := WidenF16(dst[:n], src); ok != finite {
				t.Fatalf("n=%d trial %d: finite %v, want %v", n, trial, ok, finite)
			}
			for i := range n {
				h := uint16(src[2*i]) | uint16(src[2*i+1])<<8
				if got, want := math.Float32bits(dst[i]), math.Float32bits(tensor.F16ToF32(h)); got != want {
					t.Fatalf("n=%d trial %d value %d (%#04x): %#08x, want %#08x", n, trial, i, h, got, want)
				}
			}
			for i := n; i < len(dst); i++ {
				if dst[i] != -7 {
					t.Fatalf("n=%d: dst[%d] written (%v)", n, i, dst[i])
				}
			}
		}
	}
}

func TestFWHT(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	for _, n := range []int{8, 16, 32, 64, 128, 256, 512} {
		for range 20 {
			x := randVec(rng, n)
			x[rng.IntN(n)] = 0 // signed zeros come out of equal pairs
			want := append([]float32(nil), x...)
			for h := 1; h < n; h <<= 1 {
				for i := 0; i < n; i += 2 * h {
					for j := i; j < i+h; j++ {
						want[j], want[j+h] = want[j]+want[j+h], want[j]-want[j+h]
					}
				}
			}
			FWHT(x)
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d: [%d] = %v, want %v", n, i, x[i], want[i])
				}
			}
		}
	}
	for _, n := range []int{0, 4, 24} {
		wantPanic(t, fmt.Sprintf("length %d", n), func() { FWHT(make([]float32, n)) })
	}
}

func TestFWHTAxpy(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, s := range []struct{ d, p int }{{64, 64}, {5, 8}, {8, 8}, {33, 64}, {64, 128}, {100, 128}, {128, 128}} {
		for r := 0; r <= 5; r++ {
			for _, alias := range []bool{false, true} {
				v, signs := randVec(rng, s.p), randVec(rng, s.d+3)
				z, w, rows := randVec(rng, s.d), randVec(rng, r), randVec(rng, r*s.d+2)
				want := make([]float32, s.d)
				vw := append([]float32(nil), v...)
				FWHT(vw)
				MulAdd(want, vw[:s.d], signs[:s.d], z)
				AxpyBlock(want, w, rows, r, s.d)
				got := make([]float32, s.d)
				if alias {
					copy(got, z)
					z = got
				}
				FWHTAxpy(got, v, signs, z, w, rows)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("d=%d p=%d r=%d alias=%v: [%d] = %v, want %v", s.d, s.p, r, alias, i, got[i], want[i])
					}
				}
			}
		}
	}
	for _, c := range []struct{ d, p, z, rows int }{{64, 63, 64, 0}, {65, 64, 65, 0}, {64, 64, 63, 0}, {8, 8, 8, 7}} {
		wantPanic(t, fmt.Sprintf("%+v", c), func() {
			FWHTAxpy(make([]float32, c.d), make([]float32, c.p), make([]float32, c.d), make([]float32, c.z), make([]float32, 1), make([]float32, c.rows))
		})
	}
}

func TestUnpackLookupRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	var table [16]float32
	for i := range table {
		table[i] = float32(rng.NormFloat64())
	}
	for bits := 1; bits <= 4; bits++ {
		for _, cols := range []int{0, 8, 16, 24, 64, 128} {
			for _, n := range []int{0, 1, 3, 64} {
				for _, pad := range []int{0, 8} {
					stride := cols + pad
					codes := make([]uint8, n*cols)
					for i := range codes {
						codes[i] = uint8(rng.IntN(1 << bits))
					}
					src := packCodes(codes, bits)
					scales := randVec(rng, n)
					dst := make([]float32, n*stride)
					for i := range dst {
						dst[i] = 42
					}
					UnpackLookupRows(dst, stride, cols, src, bits, &table, scales)
					for i := range n {
						for j := range stride {
							want := float32(42) // padding stays
							if j < cols {
								want = table[codes[i*cols+j]] * scales[i]
							}
							if got := dst[i*stride+j]; math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("bits=%d cols=%d n=%d pad=%d: [%d][%d] = %v, want %v", bits, cols, n, pad, i, j, got, want)
							}
						}
					}
				}
			}
		}
	}
	for _, c := range []struct{ cols, stride, bits, dst, src int }{{4, 4, 3, 8, 3}, {8, 7, 3, 16, 6}, {8, 8, 3, 15, 6}, {8, 8, 3, 16, 5}, {8, 8, 5, 16, 10}} {
		wantPanic(t, fmt.Sprintf("%+v", c), func() {
			UnpackLookupRows(make([]float32, c.dst), c.stride, c.cols, make([]byte, c.src), c.bits, &table, make([]float32, 2))
		})
	}
}

func TestFWHTAxpyRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	for _, s := range []struct{ d, p int }{{64, 64}, {5, 8}, {100, 128}} {
		for _, r := range []int{0, 1, 4} {
			const n = 5
			v, signs, z := randVec(rng, n*s.p), randVec(rng, s.d), randVec(rng, s.d)
			w, rows := randVec(rng, n*r), randVec(rng, r*s.d)
			want := make([]float32, n*s.d)
			vw := append([]float32(nil), v...)
			for i := range n {
				FWHTAxpy(want[i*s.d:(i+1)*s.d], vw[i*s.p:(i+1)*s.p], signs, z, w[i*r:(i+1)*r], rows)
			}
			got := make([]float32, n*s.d)
			FWHTAxpyRows(got, v, signs, z, w, rows, n, s.d, s.p, r)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("d=%d p=%d r=%d: [%d] = %v, want %v", s.d, s.p, r, i, got[i], want[i])
				}
			}
		}
	}
	wantPanic(t, "short v", func() {
		FWHTAxpyRows(make([]float32, 128), make([]float32, 127), make([]float32, 64), make([]float32, 64), nil, nil, 2, 64, 64, 0)
	})
}

// FWHTAxpyRoPERows equals FWHTAxpyRows then RoPEBlock in place, bit for bit.
func TestFWHTAxpyRoPERows(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, s := range []struct{ d, p int }{{64, 64}, {6, 8}, {100, 128}} {
		for _, r := range []int{0, 1, 4} {
			const n = 5
			v, signs, z := randVec(rng, n*s.p), randVec(rng, s.d), randVec(rng, s.d)
			w, rows := randVec(rng, n*r), randVec(rng, r*s.d)
			cos, sin := randVec(rng, n*s.d/2), randVec(rng, n*s.d/2)
			want := make([]float32, n*s.d)
			FWHTAxpyRows(want, append([]float32(nil), v...), signs, z, w, rows, n, s.d, s.p, r)
			RoPEBlock(want, want, cos, sin, n, s.d)
			got := make([]float32, n*s.d)
			FWHTAxpyRoPERows(got, v, signs, z, w, rows, n, s.d, s.p, r, cos, sin)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("d=%d p=%d r=%d: [%d] = %v, want %v", s.d, s.p, r, i, got[i], want[i])
				}
			}
		}
	}
	wantPanic(t, "short cos", func() {
		FWHTAxpyRoPERows(make([]float32, 128), make([]float32, 128), make([]float32, 64), make([]float32, 64), nil, nil, 2, 64, 64, 0, make([]float32, 63), make([]float32, 64))
	})
}

// UnpackAffine is bit-identical to m + float32(c)*s per value, for every
// code width and several group sizes.
func TestUnpackAffine(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for bits := 1; bits <= 4; bits++ {
		for _, g := range []int{8, 16, 32, 64, 24} {
			if g*bits%8 != 0 {
				continue
			}
			for _, groups := range []int{0, 1, 3, 8} {
				codes := make([]uint8, groups*g)
				for i := range codes {
					codes[i] = uint8(rng.IntN(1 << bits))
				}
				params := make([]float32, 2*groups)
				for i := range params {
					params[i] = float32(rng.NormFloat64())
				}
				dst := make([]float32, groups*g+1)
				dst[groups*g] = 42
				UnpackAffine(dst, packCodes(codes, bits), bits, g, params)
				for i, c := range codes {
					m, s := params[2*(i/g)], params[2*(i/g)+1]
					if want := m + float32(c)*s; math.Float32bits(dst[i]) != math.Float32bits(want) {
						t.Fatalf("bits %d g %d: dst[%d] = %v, want %v", bits, g, i, dst[i], want)
					}
				}
				if dst[groups*g] != 42 {
					t.Fatalf("bits %d g %d: wrote past the groups", bits, g)
				}
			}
		}
	}
	wantPanic(t, "UnpackAffine with 12-bit groups", func() { UnpackAffine(make([]float32, 3), make([]byte, 2), 4, 3, []float32{0, 1}) })
}

// DequantInt8 is bit-identical to float32(int8(c))*s, at every byte value
// and at group sizes the vector loop takes and the scalar one does.
func TestDequantInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, g := range []int{32, 16, 48, 7, 1} {
		for _, groups := range []int{0, 1, 9} {
			src := make([]byte, groups*g)
			for i := range src {
				src[i] = byte(rng.IntN(256))
			}
			if len(src) > 0 {
				src[0], src[len(src)-1] = 0x80, 0x7f
			}
			scales := make([]float32, groups)
			for i := range scales {
				scales[i] = float32(rng.ExpFloat64())
			}
			dst := make([]float32, groups*g)
			DequantInt8(dst, src, g, scales)
			for i, c := range src {
				if want := float32(int8(c)) * scales[i/g]; math.Float32bits(dst[i]) != math.Float32bits(want) {
					t.Fatalf("g %d: dst[%d] = %v, want %v", g, i, dst[i], want)
				}
			}
		}
	}
}

// QuantError: the kernel this build runs against the scalar loop (bit for
// bit) and a float64 sum, with and without an early stop.
func TestQuantError(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for n := 0; n <= 41; n++ {
		g := make([]float32, n)
		for i := range g {
			g[i] = float32(r.NormFloat64() * 3)
		}
		for _, tc := range []struct{ m, s, top float32 }{{-6, 0.8, 15}, {-2.5, 0.37, 15}, {0, 0, 15}, {-4, 2.7, 3}, {1, 0.1, 15}} {
			var inv float32
			if tc.s > 0 {
				inv = 1 / tc.s
			}
			inf := float32(math.Inf(1))
			got := QuantError(g, tc.m, tc.s, tc.top, inf)
			if want := quantErrorScalar(g, tc.m, tc.s, inv, tc.top, inf); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("n=%d %+v: %v, scalar %v", n, tc, got, want)
			}
			var ref float64
			for _, v := range g {
				q := 0.0
				if tc.s > 0 {
					q = math.Max(0, math.Min(float64(tc.top), math.RoundToEven(float64((v-tc.m)*inv))))
				}
				d := float64(v) - (float64(tc.m) + q*float64(tc.s))
				ref += float64(v) * float64(v) * d * d
			}
			if math.Abs(float64(got)-ref) > 1e-5*ref+1e-6 {
				t.Fatalf("n=%d %+v: %v, float64 sum %v", n, tc, got, ref)
			}
			// A bound below the sum: the result may stop early, but never
			// below the bound.
			if ref > 0 {
				best := float32(ref / 3)
				if e := QuantError(g, tc.m, tc.s, tc.top, best); e < best {
					t.Fatalf("n=%d %+v: %v with best %v", n, tc, e, best)
				}
			}
		}
	}
}
