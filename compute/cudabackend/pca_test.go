package cudabackend

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/compute/reference"
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

// Attention over kakeya-pc blocks kept encoded on the device, fixed-rate
// (format 8) or entropy coded (format 9: kakeya-pc ec=true, and kvtc with
// uniform values), gives the CPU backend's attention over the same bytes
// (which decodes them with codec.KakeyaPC's DecodeRotated and
// AddWeighted) within float tolerance, and the float64 reference's for
// the entropy-coded cases: keys of a codec per KV head (each its own
// calibrated basis, as kvplan builds them), values of one per layer, some
// of the uniform quantizer, beside a hot, partly filled last block, in
// blocks of 16 and of 64 rows (two key tiles a block: a tile's rows start
// inside the rANS stream's components), one split and several. Every full
// block's parts hold exactly the codec's bytes on the device: format 8's
// in a slot of the most bytes the rate allows (one size class for every
// codec), format 9's, whose length varies, in encAlign's classes; each
// codec's settings uploaded once, the rANS tables once for all. Keys
// capped at 16 coded components (coded=16, the kakeya preset's keys)
// beside uncapped values, at head dims 32, 64 and 128, are checked
// against the float64 reference too; their blocks take a slot of their
// own size where the rate's bound would waste more than a quarter.
func TestKakeyaPCAttentionMatchesCPU(t *testing.T) {
	needKernels(t, "attn_split", "attn_split_pc", "attn_combine", "kv_write")
	const heads, kvHeads = 6, 2
	for _, c := range []struct {
		name    string
		d, bs   int // bs 0: 16
		block   int // the codecs' allocation block, 0: bs
		total   int // tokens: the last block is partly filled, hot
		n       int // queries, the last n positions
		window  int
		bf16    bool
		uniform bool // the values' codec quantizes uniformly
		rate    float64
		kec     bool // the keys' codecs are entropy coded (format 9)
		vec     bool // the values' codec is entropy coded (format 9; kvtc when uniform)
		layout1 bool // format 9 in stream layout 1 (else 2, the codecs' default)
		coded   int  // the keys' codecs code at most this many components (0: no cap)
	}{
		{name: "decode/bf16", d: 64, total: 5*16 + 3, n: 1, bf16: true, rate: 2.5},
		{name: "prefill/f32", d: 64, total: 4*16 + 9, n: 7, rate: 3},
		{name: "decode/window/uniform values", d: 64, total: 6*16 + 1, n: 2, window: 40, bf16: true, uniform: true, rate: 2},
		{name: "decode/d128/split", d: 128, total: 20*16 + 5, n: 1, bf16: true, rate: 2.5},
		{name: "decode/d32/low rate", d: 32, total: 3*16 + 2, n: 1, rate: 0.75},
		{name: "decode/d80", d: 80, total: 3*16 + 1, n: 1, bf16: true, rate: 2.5},
		{name: "decode/d36/scalar product", d: 36, total: 2*16 + 5, n: 1, rate: 2.5}, // no multiple of 8: kk_pc_mix
		{name: "decode/d256", d: 256, total: 2*16 + 3, n: 1, bf16: true, rate: 2},
		{name: "ec/decode/d64/entropy-coded values", d: 64, total: 4*16 + 3, n: 1, bf16: true, rate: 2.5, vec: true},
		{name: "ec/decode/d64/bs64", d: 64, bs: 64, total: 3*64 + 5, n: 1, bf16: true, rate: 2.5, kec: true, vec: true},
		{name: "ec/decode/d128/bs64/split", d: 128, bs: 64, total: 9*64 + 7, n: 1, bf16: true, rate: 2.5, kec: true, vec: true},
		{name: "ec/decode/d128/one split", d: 128, total: 2*16 + 3, n: 1, rate: 3, kec: true, vec: true},
		{name: "ec/decode/d64/layout 1", d: 64, bs: 64, total: 2*64 + 5, n: 1, bf16: true, rate: 2.5, kec: true, vec: true, layout1: true},
		{name: "ec/prefill/d64/f32", d: 64, total: 4*16 + 9, n: 7, rate: 2, kec: true, vec: true},
		{name: "ec/decode/d64/kvtc values/window", d: 64, bs: 64, total: 3*64 + 30, n: 2, window: 100, bf16: true, uniform: true, rate: 2, kec: true, vec: true},
		{name: "ec/decode/d128/ec keys, fixed-rate values", d: 128, total: 6*16 + 1, n: 1, bf16: true, rate: 1.5, kec: true},
		{name: "ec/prefill/d64/bs8", d: 64, bs: 8, total: 3*8 + 6, n: 22, rate: 2.5, kec: true, vec: true},
		{name: "ec/prefill/d64/bs8/block64", d: 64, bs: 8, block: 64, total: 3*8 + 6, n: 22, rate: 2.5, kec: true, vec: true},
		{name: "coded=16/decode/d64/bs64", d: 64, bs: 64, total: 3*64 + 5, n: 1, bf16: true, rate: 2.5, coded: 16},
		{name: "coded=16/decode/d128/bs64/split", d: 128, bs: 64, total: 9*64 + 7, n: 1, bf16: true, rate: 2.5, coded: 16},
		{name: "coded=16/prefill/d64/f32", d: 64, total: 4*16 + 9, n: 7, rate: 2.5, coded: 16},
		{name: "coded=16/prefill/d32/bs4", d: 32, bs: 4, total: 10, n: 10, bf16: true, rate: 8, coded: 16},
		{name: "coded=16/decode/d32/bs4", d: 32, bs: 4, total: 14, n: 1, bf16: true, rate: 8, coded: 16},
		{name: "coded=16/decode/d32/bs4/block64", d: 32, bs: 4, block: 64, total: 14, n: 1, bf16: true, rate: 2.5, coded: 16},
		{name: "coded=16/prefill/d32/bs4/block64", d: 32, bs: 4, block: 64, total: 10, n: 10, bf16: true, rate: 2.5, coded: 16},
		{name: "coded=16/decode/d32/bs8/block64", d: 32, bs: 8, block: 64, total: 20, n: 1, bf16: true, rate: 2.5, coded: 16},
		{name: "coded=16/decode/d64/bs64/all stored", d: 64, bs: 64, total: 3*64 + 5, n: 1, bf16: true, rate: 8, coded: 16},
		{name: "coded=16/decode/d128/ec keys", d: 128, bs: 64, total: 3*64 + 3, n: 1, bf16: true, rate: 2.5, kec: true, coded: 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, bs := c.d, c.bs
			if bs == 0 {
				bs = 16
			}
			r := rand.New(rand.NewPCG(21, uint64(d)))
			o := codec.DefaultKakeyaPCOptions()
			o.Rate, o.Block = c.rate, bs
			if c.block > 0 {
				o.Block = c.block
			}
			ko := o
			ko.Entropy, ko.MaxCoded = c.kec, c.coded
			if c.layout1 {
				ko.StreamLayout = 1
			}
			var kst []*codec.PCAStats
			var kc []codec.Codec
			for range kvHeads {
				st := synthPCA(r, d)
				kst = append(kst, st)
				kc = append(kc, newPC(t, ko, st))
				if c.coded > 0 {
					// The cap binds: the uncapped allocation codes more.
					uo := ko
					uo.MaxCoded = 0
					capped, all := len(kc[len(kc)-1].(*codec.KakeyaPC).Settings().PC.Coded()), len(newPC(t, uo, st).Settings().PC.Coded())
					if capped != c.coded || all <= c.coded {
						t.Fatalf("keys code %d components capped, %d uncapped; want %d and more", capped, all, c.coded)
					}
				}
			}
			vst := synthPCA(r, d)
			vo := o
			vo.Uniform, vo.Entropy, vo.StreamLayout = c.uniform, c.vec, ko.StreamLayout
			vc := newPC(t, vo, vst)
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
			refs := []compute.Backend{host}
			if c.kec || c.vec || c.coded > 0 {
				refs = append(refs, reference.Backend{})
			}
			for _, ref := range refs {
				gpu, f := newFakeBackend(t, Options{})
				// The float32 kernel, checked to the CPU's float
				// tolerance: prefill chunks over format 9 parts would
				// otherwise be decoded once (pc_unpack) for the bf16
				// tensor cores, which TestPrefillAttentionMatchesReference
				// checks at their own tolerance.
				gpu.pcOnce = pcOnceNever
				outs, gpuParts, encLen := layer.attend(t, gpu, ref, ap, c.n, q, cos, sin)
				// Encoded parts hold the codec's bytes, each key codec's
				// settings once (one per KV head), the values' once.
				prm := map[int]Ptr{}
				var tabs []Ptr // the rANS tables each format-9 part's params point at
				for blk := range nb - 1 {
					for j, p := range gpuParts[blk] {
						pt := own(p)
						ec := j%2 == 1 && c.vec || j%2 == 0 && c.kec
						want := encLen[[2]int{blk, j}]
						cd := kc[j/2].(*codec.KakeyaPC)
						if j%2 == 1 {
							cd = vc
						}
						format, size := partKakeyaPCEC, roundUp(want, encAlign)
						if !ec {
							// Every codec's blocks take the slot of the most
							// bytes the rate allows, one size class; capped
							// keys more than a quarter below it, their own.
							format = partKakeyaPC
							if bound, ok := cd.Settings().PC.MaxLen(bs, d); !ok {
								// No bound (rows not a multiple of 8): the
								// block's own class.
							} else if bound <= want+want/4 {
								size = roundUp(bound, fixedAlign)
							} else if c.coded == 0 || j%2 == 1 {
								t.Fatalf("block %d part %d: %d bytes, a quarter under the rate's %d, uncapped", blk, j, want, bound)
							}
						}
						if pt.format != format || pt.encLen != want || pt.size != size || pt.HotDecoded() {
							t.Fatalf("block %d part %d: format %d, %d encoded bytes in a slot of %d; want format %d, the codec's %d bytes in a slot of %d",
								blk, j, pt.format, pt.encLen, pt.size, format, want, size)
						}
						if pt.prm == 0 {
							t.Fatalf("block %d part %d: no pcParams", blk, j)
						}
						if at, ok := prm[j]; ok && at != pt.prm {
							t.Errorf("block %d part %d: pcParams at %#x, block 0's at %#x: uploaded twice", blk, j, pt.prm, at)
						}
						prm[j] = pt.prm
						if ec {
							var w [1]uint64
							if err := f.copyOut(bytesOf(w[:]), pt.prm+32); err != nil {
								t.Fatal(err)
							}
							tabs = append(tabs, Ptr(w[0]))
						}
					}
				}
				if prm[0] == prm[2] {
					t.Errorf("both KV heads' keys read the pcParams at %#x", prm[0])
				}
				if c.kec != c.vec || c.uniform {
					tabs = nil // two quantizer families: two tables
				}
				for _, at := range tabs {
					if at == 0 || at != tabs[0] {
						t.Fatalf("format 9 parts' rANS tables at %#x and %#x: want one copy", at, tabs[0])
					}
				}
				if !slices.Contains(f.launched, "attn_split_pc") {
					t.Errorf("launched %s, want attn_split_pc", f.kernelCounts())
				}
				tol := 2e-5 * max(1, maxAbs(outs[1]))
				dd := maxAbsDiff(outs[0], outs[1])
				if dd > tol || math.IsNaN(dd) {
					t.Fatalf("attention differs from the %s backend's by %.3g (tolerance %.3g)", ref.Name(), dd, tol)
				}
				t.Logf("%s: worst difference %.2g of the tolerance", ref.Name(), dd/tol)
				if err := gpu.Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
