package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// onePerCall hides a KakeyaPC's BlocksDecoder, forcing block-by-block calls.
type onePerCall struct{ k *codec.KakeyaPC }

func (o onePerCall) Name() string { return o.k.Name() }
func (o onePerCall) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	return o.k.Encode(dst, x, n, d)
}
func (o onePerCall) Decode(dst []float32, src []byte, n, d int) error {
	return o.k.Decode(dst, src, n, d)
}
func (o onePerCall) DecodeRotated(dst []float32, src []byte, n, d int, cos, sin []float32) error {
	return o.k.DecodeRotated(dst, src, n, d, cos, sin)
}
func (o onePerCall) AddWeighted(dst []float32, m int, w []float32, wStride int, src []byte, n, d, lo, hi int) error {
	return o.k.AddWeighted(dst, m, w, wStride, src, n, d, lo, hi)
}

// blocksCounter is a KakeyaPC counting its calls over several blocks and
// the blocks they take; it hides the KakeyaPC's RunAttender.
type blocksCounter struct {
	codec.BlocksDecoder
	keys, values, blocks *atomic.Int64
}

func (p blocksCounter) DecodeRotatedBlocks(dst [][]float32, src [][]byte, n, d int, cos, sin [][]float32) error {
	p.keys.Add(1)
	p.blocks.Add(int64(len(src)))
	return p.BlocksDecoder.DecodeRotatedBlocks(dst, src, n, d, cos, sin)
}

func (p blocksCounter) AddWeightedBlocks(dst []float32, m int, w [][]float32, wStride int, src [][]byte, n, d int, lo, hi []int) error {
	p.values.Add(1)
	p.blocks.Add(int64(len(src)))
	return p.BlocksDecoder.AddWeightedBlocks(dst, m, w, wStride, src, n, d, lo, hi)
}

// runCounter is a KakeyaPC counting its RunAttender calls and the blocks
// they take.
type runCounter struct {
	*codec.KakeyaPC
	keys, values, blocks *atomic.Int64
}

func (p runCounter) ScoreRun(s []float32, lds int, q []float32, m int, src [][]byte, n, d int, cos, sin []float32, scale float32, r0, r1 int, checked bool, next [][]byte) error {
	p.keys.Add(1)
	p.blocks.Add(int64(len(src)))
	return p.KakeyaPC.ScoreRun(s, lds, q, m, src, n, d, cos, sin, scale, r0, r1, checked, next)
}

func (p runCounter) AddWeightedRun(dst []float32, m int, w []float32, wStride int, src [][]byte, n, d int, r0, r1 int, checked bool) error {
	p.values.Add(1)
	p.blocks.Add(int64(len(src)))
	return p.KakeyaPC.AddWeightedRun(dst, m, w, wStride, src, n, d, r0, r1, checked)
}

// forwardEachThenAll appends total tokens' keys and values one at a time
// to a new one-layer cache of codec c (hot window bs) and attends each
// position's queries as it comes, then every position again in one call,
// as a prefill over the encoded cache: the outputs (one query at a time,
// then the prefill's), the cache and the attention.
func forwardEachThenAll(t *testing.T, name string, be *backend, p compute.AttentionParams, c codec.Codec, bs, maxCtx, total int, q, k, v, cos, sin []float32) ([]float32, *kvcache.Cache, compute.Attention) {
	t.Helper()
	d := p.HeadDim
	kr, qr := p.KVHeads*d, p.Heads*d
	kc, err := newCache(be, p.KVHeads, d, bs, maxCtx, kvcache.Policy{HotWindow: bs, Layers: []kvcache.LayerCodecs{{K: []codec.Codec{c}, V: c}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAttention(be, p, bs, maxCtx)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 2*len(q))
	for pos := 0; pos < total; pos++ {
		if err := kc.Append(0, compute.Wrap(k[pos*kr:(pos+1)*kr]), compute.Wrap(v[pos*kr:(pos+1)*kr]), 1); err != nil {
			t.Fatal(err)
		}
		if err := a.Forward(compute.Wrap(out[pos*qr:(pos+1)*qr]), compute.Wrap(q[pos*qr:(pos+1)*qr]), 1, pos, kc.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err != nil {
			t.Fatalf("%s: position %d: %v", name, pos, err)
		}
	}
	if err := a.Forward(compute.Wrap(out[len(q):]), compute.Wrap(q), total, 0, kc.Layer(0), compute.Wrap(cos), compute.Wrap(sin)); err != nil {
		t.Fatalf("%s: prefill: %v", name, err)
	}
	return out, kc, a
}

// TestForwardBlocks: attention taking blocks up to codec.MaxBlocks at a
// time through a BlocksDecoder (kakeya-pc fixed-width, and entropy coded
// in both stream layouts) gives the block-by-block calls' outputs bit for
// bit, one query at a time and a whole prefill, with windows that start
// inside encoded blocks; a corrupt block's key or value is an error
// naming it.
func TestForwardBlocks(t *testing.T) {
	be := newBackend(2)
	defer be.Close()
	const total, maxCtx, bs, d = 150, 160, 16, 32
	for _, spec := range []string{"kakeya-pc", "kakeya-pc:ec=true", "kakeya-pc:ec=true,layout=1", "kvtc:rate=2.5"} {
		cd, err := codec.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := codec.NewKakeyaPC(cd.(*codec.KakeyaPC).Options(), benchPCStats(d), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []compute.AttentionParams{
			{Heads: 6, KVHeads: 2, HeadDim: d},
			{Heads: 4, KVHeads: 2, HeadDim: d, Window: 37},
		} {
			name := fmt.Sprintf("%s/window %d", spec, p.Window)
			q, k, v := randQKV(rand.New(rand.NewPCG(5, 6)), total, p)
			cos, sin := ropeTables(maxCtx, d)
			qr := p.Heads * d
			run := func(c codec.Codec) ([]float32, *kvcache.Cache, compute.Attention) {
				return forwardEachThenAll(t, name, be, p, c, bs, maxCtx, total, q, k, v, cos, sin)
			}
			var keys, values, blocks atomic.Int64
			got, kc, a := run(blocksCounter{pc, &keys, &values, &blocks})
			want, _, _ := run(onePerCall{pc})
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: output %d = %v in pairs, %v block by block", name, i, got[i], want[i])
				}
			}
			if calls := keys.Load() + values.Load(); keys.Load() == 0 || values.Load() == 0 || blocks.Load() < 2*calls || p.Window == 0 && blocks.Load() <= 3*calls {
				t.Fatalf("%s: %d key and %d value calls over %d blocks", name, keys.Load(), values.Load(), blocks.Load())
			}
			// A corrupt key block, then a corrupt value block: the
			// error names it.
			bads := []struct {
				g, b, kv int
				want     string
			}{{1, 3, 0, "block 3 head 1 K"}, {0, 6, 1, "block 6 head 0 V"}}
			if p.Window > 0 { // the last query reads blocks 7 to 9
				bads[0].b, bads[0].want, bads[1].b, bads[1].want = 7, "block 7 head 1 K", 7, "block 7 head 0 V"
			}
			for _, bad := range bads {
				pt := kc.Layer(0).Part(bad.g, bad.b, bad.kv).(*part)
				pt.enc[len(pt.enc)/2] ^= 0x10
				err := a.Forward(compute.Wrap(got[:qr]), compute.Wrap(q[:qr]), 1, total-1, kc.Layer(0), compute.Wrap(cos), compute.Wrap(sin))
				if err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Fatalf("%s: corrupt %s: %v", name, bad.want, err)
				}
				pt.enc[len(pt.enc)/2] ^= 0x10
			}
		}
	}
}

// TestForwardRuns: attention taking runs of encoded blocks through a
// RunAttender (kakeya-pc fixed-width, entropy coded in both stream
// layouts, kvtc, and a key cap) agrees with the block-by-block calls
// within rounding, one query at a time and a whole prefill, with windows
// that start inside encoded blocks, and with the float64 reference
// (naive) over the decoded cache as closely as they do; a corrupt block's
// key or value is an error naming it. Below the AVX2 level the codec runs
// no kernel and attention takes the blocks one by one.
func TestForwardRuns(t *testing.T) {
	be := newBackend(2)
	defer be.Close()
	for _, tc := range []struct {
		spec                 string
		total, maxCtx, bs, d int
		p                    compute.AttentionParams
	}{
		{"kakeya-pc", 150, 160, 16, 32, compute.AttentionParams{Heads: 6, KVHeads: 2}},
		{"kakeya-pc", 150, 160, 16, 32, compute.AttentionParams{Heads: 4, KVHeads: 2, Window: 37}},
		{"kakeya-pc:ec=true", 150, 160, 16, 32, compute.AttentionParams{Heads: 4, KVHeads: 2, Window: 37}},
		{"kakeya-pc:ec=true,layout=1", 150, 160, 16, 32, compute.AttentionParams{Heads: 6, KVHeads: 2}},
		{"kvtc:rate=2.5", 150, 160, 16, 32, compute.AttentionParams{Heads: 4, KVHeads: 2}},
		{"kakeya-pc", 300, 320, 64, 64, compute.AttentionParams{Heads: 4, KVHeads: 2}},
		{"kakeya-pc:coded=16", 300, 320, 64, 64, compute.AttentionParams{Heads: 14, KVHeads: 2, Window: 150}},
		{"kakeya-pc:ec=true", 300, 320, 64, 64, compute.AttentionParams{Heads: 4, KVHeads: 2}},
	} {
		total, maxCtx, bs, d, p := tc.total, tc.maxCtx, tc.bs, tc.d, tc.p
		p.HeadDim = d
		name := fmt.Sprintf("%s/d%d/heads %d/window %d", tc.spec, d, p.Heads, p.Window)
		cd, err := codec.Parse(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := codec.NewKakeyaPC(cd.(*codec.KakeyaPC).Options(), benchPCStats(d), nil)
		if err != nil {
			t.Fatal(err)
		}
		q, k, v := randQKV(rand.New(rand.NewPCG(5, 6)), total, p)
		cos, sin := ropeTables(maxCtx, d)
		kr, qr := p.KVHeads*d, p.Heads*d
		run := func(c codec.Codec) ([]float32, *kvcache.Cache, compute.Attention) {
			return forwardEachThenAll(t, name, be, p, c, bs, maxCtx, total, q, k, v, cos, sin)
		}
		var keys, values, blocks atomic.Int64
		got, kc, a := run(runCounter{pc, &keys, &values, &blocks})
		want, _, _ := run(onePerCall{pc})
		for i := range want {
			if diff := math.Abs(float64(got[i] - want[i])); !(diff <= 1e-5*(1+math.Abs(float64(want[i])))) {
				t.Fatalf("%s: output %d = %v in runs, %v block by block", name, i, got[i], want[i])
			}
		}
		if calls := keys.Load() + values.Load(); pc.RunSupported(bs, d) && (keys.Load() == 0 || values.Load() == 0 || p.Window == 0 && blocks.Load() <= calls) {
			t.Fatalf("%s: %d key and %d value runs over %d blocks", name, keys.Load(), values.Load(), blocks.Load())
		}
		// The float64 reference over the cache as decoded: the prefill's
		// rows and the last decode step.
		kd, vd := make([]float32, total*kr), make([]float32, total*kr)
		rows := make([]float32, bs*d)
		for b := 0; b*bs < total; b++ {
			for g := 0; g < p.KVHeads; g++ {
				for kv, dst := range [][]float32{kd, vd} {
					x, err := kc.Layer(0).Part(g, b, kv).(*part).values(rows, bs, d)
					if err != nil {
						t.Fatal(err)
					}
					for r := 0; r < bs && b*bs+r < total; r++ {
						copy(dst[((b*bs+r)*p.KVHeads+g)*d:], x[r*d:(r+1)*d])
					}
				}
			}
		}
		ref := naive(q, kd, vd, total, 0, p, cos, sin)
		var errRun, errBlock float64
		for i, r := range ref {
			errRun = max(errRun, math.Abs(float64(got[len(q)+i])-r))
			errBlock = max(errBlock, math.Abs(float64(want[len(q)+i])-r))
		}
		for i, r := range ref[(total-1)*qr:] {
			errRun = max(errRun, math.Abs(float64(got[(total-1)*qr+i])-r))
			errBlock = max(errBlock, math.Abs(float64(want[(total-1)*qr+i])-r))
		}
		if errRun > 2*errBlock+1e-6 || errRun > 1e-4 {
			t.Errorf("%s: max abs difference from the float64 reference %.3g in runs, %.3g block by block", name, errRun, errBlock)
		}
		// A corrupt key block, then a corrupt value block: the store
		// refuses a block whose bytes fail its CRC-32C where attention
		// reads it in runs (elsewhere every read checks it), and a stored
		// block whose header or fields go bad is an error naming it at
		// the next step (runs check the CRC once, when stored).
		last := (total - 1) / bs // hot
		bad := last - 2
		for _, c := range []struct{ g, kv int }{{1, 0}, {0, 1}} {
			pt := kc.Layer(0).Part(c.g, bad, c.kv).(*part)
			st := NewStore(bs, d, false)
			np, err := st.NewPart()
			if err != nil {
				t.Fatal(err)
			}
			flipped := append([]byte(nil), pt.enc...)
			flipped[len(flipped)/2] ^= 0x10
			if err := st.SetEncoded(np, flipped, pt.dec); pc.RunSupported(bs, d) && (err == nil || !strings.Contains(err.Error(), "checksum")) {
				t.Fatalf("%s: SetEncoded of a block with a flipped byte: %v", name, err)
			}
			// The codec's id; the first fixed-width field's exponent (an fp16
			// Inf or NaN).
			for _, at := range []struct {
				i    int
				bits byte
			}{{2, 0x10}, {23, 0x7c}} {
				old := pt.enc[at.i]
				pt.enc[at.i] |= at.bits
				if pt.enc[at.i] == old {
					pt.enc[at.i] ^= at.bits
				}
				want := fmt.Sprintf("block %d head %d %s", bad, c.g, kvName(c.kv))
				err := a.Forward(compute.Wrap(got[:qr]), compute.Wrap(q[:qr]), 1, total-1, kc.Layer(0), compute.Wrap(cos), compute.Wrap(sin))
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("%s: corrupt byte %d of %s: %v", name, at.i, want, err)
				}
				pt.enc[at.i] = old
			}
		}
	}
}
