package cudabackend

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
)

// synthPCA returns seeded PCAStats of dimension d: a random orthonormal
// basis (Gram-Schmidt of Gaussian rows), a random mean and variances
// falling off geometrically, as a calibration measures them on real keys
// and values.
func synthPCA(r *rand.Rand, d int) *codec.PCAStats {
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for j := range d {
		st.Mean[j] = float32(r.NormFloat64())
		st.Var[j] = float32(4 * math.Exp(-float64(j)/6))
		st.Between[j] = st.Var[j] / 4
		u := make([]float64, d)
		for {
			for i := range u {
				u[i] = r.NormFloat64()
			}
			for k := range j {
				var dot float64
				for i := range d {
					dot += u[i] * float64(st.Basis[k*d+i])
				}
				for i := range d {
					u[i] -= dot * float64(st.Basis[k*d+i])
				}
			}
			var nn float64
			for _, v := range u {
				nn += v * v
			}
			if nn > 1e-6 {
				for i, v := range u {
					st.Basis[j*d+i] = float32(v / math.Sqrt(nn))
				}
				break
			}
		}
	}
	return st
}

// pcRows returns n rows drawn from st: the mean plus each component at
// its standard deviation (a block-wide offset from Between, a per-row
// part from Var).
func pcRows(r *rand.Rand, st *codec.PCAStats, n int) []float32 {
	d := st.Dim()
	x := make([]float32, n*d)
	off := make([]float64, d)
	for j := range d {
		off[j] = r.NormFloat64() * math.Sqrt(float64(st.Between[j]))
	}
	for i := range n {
		row := x[i*d : (i+1)*d]
		copy(row, st.Mean)
		for j := range d {
			c := float32(off[j] + r.NormFloat64()*math.Sqrt(float64(st.Var[j])))
			for a := range d {
				row[a] += c * st.Basis[j*d+a]
			}
		}
	}
	return x
}

// newPC returns a kakeya-pc codec of options o over st.
func newPC(t testing.TB, o codec.KakeyaPCOptions, st *codec.PCAStats) *codec.KakeyaPC {
	t.Helper()
	k, err := codec.NewKakeyaPC(o, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Attention over kakeya-pc blocks (format 8) kept encoded on the device
// gives the CPU backend's attention over the same bytes (which decodes
// them with codec.KakeyaPC's DecodeRotated and AddWeighted) within float
// tolerance: keys of a codec per KV head (each its own calibrated basis,
// as kvplan builds them), values of one per layer, some of the uniform
// quantizer, beside a hot, partly filled last block. Every full block's
// parts hold exactly the codec's bytes on the device, in a slot of the
// most bytes the rate allows (one size class for every codec), each
// codec's basis uploaded once; the entropy-coded format 9, which no
// kernel reads, stays hot and decoded.
func TestKakeyaPCAttentionMatchesCPU(t *testing.T) {
	needKernels(t, "attn_split", "attn_split_pc", "attn_combine", "kv_write")
	const heads, kvHeads, bs = 6, 2, 16
	for _, c := range []struct {
		name    string
		d       int
		total   int // tokens: the last block is partly filled, hot
		n       int // queries, the last n positions
		window  int
		bf16    bool
		uniform bool // the values' codec quantizes uniformly
		rate    float64
		vec     bool // the values' codec is entropy coded (format 9)
	}{
		{name: "decode/bf16", d: 64, total: 5*bs + 3, n: 1, bf16: true, rate: 2.5},
		{name: "prefill/f32", d: 64, total: 4*bs + 9, n: 7, rate: 3},
		{name: "decode/window/uniform values", d: 64, total: 6*bs + 1, n: 2, window: 40, bf16: true, uniform: true, rate: 2},
		{name: "decode/d128/split", d: 128, total: 20*bs + 5, n: 1, bf16: true, rate: 2.5},
		{name: "decode/d32/low rate", d: 32, total: 3*bs + 2, n: 1, rate: 0.75},
		{name: "decode/d80", d: 80, total: 3*bs + 1, n: 1, bf16: true, rate: 2.5},
		{name: "decode/d256", d: 256, total: 2*bs + 3, n: 1, bf16: true, rate: 2},
		{name: "decode/entropy-coded values stay hot", d: 64, total: 4*bs + 3, n: 1, bf16: true, rate: 2.5, vec: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			r := rand.New(rand.NewPCG(21, uint64(d)))
			o := codec.DefaultKakeyaPCOptions()
			o.Rate, o.Block = c.rate, bs
			var kst []*codec.PCAStats
			var kc []codec.Codec
			for range kvHeads {
				st := synthPCA(r, d)
				kst = append(kst, st)
				kc = append(kc, newPC(t, o, st))
			}
			vst := synthPCA(r, d)
			vo := o
			vo.Uniform, vo.Entropy = c.uniform, c.vec
			vc := newPC(t, vo, vst)
			gpu, f := newFakeBackend(t, Options{})
			host := cpubackend.New(1)
			defer host.Close()
			nb := (c.total + bs - 1) / bs
			ap := compute.AttentionParams{Heads: heads, KVHeads: kvHeads, HeadDim: d, Window: c.window, BlockSize: bs, MaxContext: nb * bs}
			// The rows of every part, drawn from its codec's statistics.
			rows := make([][]float32, nb*2*kvHeads)
			for blk := range nb {
				for j := range 2 * kvHeads {
					st := vst
					if j%2 == 0 {
						st = kst[j/2]
					}
					rows[blk*2*kvHeads+j] = pcRows(r, st, bs)
				}
			}
			q := randFloats(r, c.n*heads*d)
			cos, sin := ropeTables(nb*bs, d)
			layer := encodedLayer{nb: nb, kvHeads: kvHeads, bs: bs, d: d, total: c.total, bf16: c.bf16,
				write: func(b compute.Backend, store compute.BlockStore, p compute.Part, blk, j, m int) {
					store.Write(p, 0, upload(b, rows[blk*2*kvHeads+j]), d, m)
				},
				codec: func(j int) codec.Codec {
					if j%2 == 1 {
						return vc
					}
					return kc[j/2]
				},
			}
			outs, gpuParts, encLen := layer.attend(t, gpu, host, ap, c.n, q, cos, sin)
			// Encoded parts hold the codec's bytes, each key codec's
			// basis once (one per KV head), the values' once.
			prm := map[int]Ptr{}
			for blk := range nb - 1 {
				for j, p := range gpuParts[blk] {
					pt := own(p)
					if j%2 == 1 && c.vec {
						if pt.format != partBF16 || !pt.HotDecoded() {
							t.Fatalf("block %d part %d: format %d, hot decoded %v; want the entropy-coded values hot and decoded", blk, j, pt.format, pt.HotDecoded())
						}
						continue
					}
					want := encLen[[2]int{blk, j}]
					// Every codec's blocks take the slot of the most
					// bytes the rate allows: one size class.
					cd := kc[j/2].(*codec.KakeyaPC)
					if j%2 == 1 {
						cd = vc
					}
					bound, _ := cd.Settings().PC.MaxLen(bs, d)
					if pt.format != partKakeyaPC || pt.encLen != want || pt.size != roundUp(bound, fixedAlign) || pt.HotDecoded() {
						t.Fatalf("block %d part %d: format %d, %d encoded bytes in a slot of %d; want format %d, the codec's %d bytes in a slot of %d",
							blk, j, pt.format, pt.encLen, pt.size, partKakeyaPC, want, roundUp(bound, fixedAlign))
					}
					if pt.prm == 0 {
						t.Fatalf("block %d part %d: no pcParams", blk, j)
					}
					if at, ok := prm[j]; ok && at != pt.prm {
						t.Errorf("block %d part %d: pcParams at %#x, block 0's at %#x: uploaded twice", blk, j, pt.prm, at)
					}
					prm[j] = pt.prm
				}
			}
			if prm[0] == prm[2] {
				t.Errorf("both KV heads' keys read the pcParams at %#x", prm[0])
			}
			if !slices.Contains(f.launched, "attn_split_pc") {
				t.Errorf("launched %s, want attn_split_pc", f.kernelCounts())
			}
			tol := 2e-5 * max(1, maxAbs(outs[1]))
			if c.vec {
				tol *= 100 // the hot decoded values are rounded to bf16
			}
			dd := maxAbsDiff(outs[0], outs[1])
			if dd > tol || math.IsNaN(dd) {
				t.Fatalf("attention differs from the CPU's by %.3g (tolerance %.3g)", dd, tol)
			}
			t.Logf("worst difference %.2g of the tolerance", dd/tol)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
