package cudabackend

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// whitenedPCRows returns n hot rows x whose whitening x·L (L the factor of
// cd) are rows drawn from st, the statistics cd's inner kakeya-pc codec
// was calibrated on: x = y·L⁻¹ for y drawn by pcRows, in float64.
func whitenedPCRows(r *rand.Rand, cd *codec.Preconditioned, st *codec.PCAStats, n int) []float32 {
	d := st.Dim()
	y, linv := pcRows(r, st, n), cd.InverseFactor()
	x := make([]float32, n*d)
	for i := range n {
		for j := range d {
			var s float64
			for k := j; k < d; k++ { // Linv is lower triangular
				s += float64(y[i*d+k]) * float64(linv[k*d+j])
			}
			x[i*d+j] = float32(s)
		}
	}
	return x
}

// whitenedPCBlock checks the device's block got of a preconditioned
// kakeya-pc codec cd (format 8 or 9) for the hot rows hot against the
// host's: whitened by the host (y = hot·L, the rows enc_whiten makes bit
// for bit where the host whitens with fused multiply-adds), the inner
// codec decodes the device's block, its header and counts are the
// codec's, its squared error against y is within 1% of the host block's,
// and (format 8) at most 2% of its payload bytes differ. It returns
// whether the block is Preconditioned.Encode's bytes.
func whitenedPCBlock(t *testing.T, cd *codec.Preconditioned, got []byte, hot []float32, n, d int) bool {
	t.Helper()
	inner := cd.Inner
	y := make([]float32, n*d)
	cpu.MixBlock(y, n, hot, d, cd.Factor(), d, d)
	want, err := cd.Encode(nil, hot, n, d)
	if err != nil {
		t.Fatal(err)
	}
	if inner.(codec.Described).Format().ID == codec.FormatKakeyaPCEC {
		blk, _ := pcecBlock(t, inner, got, y, n, d)
		return bytes.Equal(blk, want)
	}
	if len(got) != len(want) || !bytes.Equal(got[:12], want[:12]) || !bytes.Equal(got[16:22], want[16:22]) {
		t.Fatalf("device header and counts % x (%d bytes), the host's % x (%d bytes)", got[:22], len(got), want[:22], len(want))
	}
	dec, ref := make([]float32, n*d), make([]float32, n*d)
	if err := inner.Decode(dec, got, n, d); err != nil {
		t.Fatalf("%s refuses the device's bytes: %v", inner.Name(), err)
	}
	if err := inner.Decode(ref, want, n, d); err != nil {
		t.Fatal(err)
	}
	var eGot, eRef, norm float64
	for i, v := range y {
		eGot += sq(float64(dec[i] - v))
		eRef += sq(float64(ref[i] - v))
		norm += sq(float64(v))
	}
	if eGot > eRef*1.01+1e-9*norm {
		t.Errorf("squared error %.5g of the device's block, the host's %.5g", eGot, eRef)
	}
	diff := 0
	for i := 22; i < len(got); i++ {
		if got[i] != want[i] {
			diff++
		}
	}
	if diff > (len(got)-22)/50 {
		t.Errorf("%d of %d payload bytes differ from the host's block", diff, len(got)-22)
	}
	return diff == 0 && bytes.Equal(got, want)
}

// enc_whiten then enc_pc or enc_pcec write the blocks of preconditioned
// kakeya-pc keys (fixed rate, format 8; entropy-coded, format 9; the
// preset's key cap, coded=16) as codec.Preconditioned.Encode does: the
// whitened rows bit for bit where the host whitens with fused
// multiply-adds, then the inner encoder's blocks, which are the codec's
// where the rotation into the basis rounds as the host's does (checked as
// TestEncodePCOnDevice and TestEncodePCECOnDevice check them: the codec
// decodes every block, within 1% of the host block's squared error).
// Head dims 64 and 128, random factors whose channels' scales span two
// orders of magnitude, float32 and bf16 parts, three blocks in one
// EncodeParts (one enc_whiten launch, one encoder's), queued with the
// step's launches or launched at once (Options.NoStepGraph). Read decodes
// the device's blocks as the codec decodes them.
func TestEncodePreconditionedPCOnDevice(t *testing.T) {
	needKernels(t, "enc_whiten", "enc_pc", "enc_pcec", "kv_write")
	for _, c := range []struct {
		n, d   int
		bf16   bool
		ec     bool
		coded  int // MaxCoded; 0: no cap
		noStep bool
	}{
		{16, 64, false, false, 0, false}, {64, 128, true, false, 0, false}, {16, 128, false, false, 0, true},
		{64, 64, true, false, 16, false}, {16, 64, true, true, 0, false}, {64, 128, false, true, 0, false},
		{32, 128, true, true, 0, true},
	} {
		name := fmt.Sprintf("%dx%d", c.n, c.d)
		if c.ec {
			name += "/ec"
		}
		if c.coded > 0 {
			name += fmt.Sprintf("/coded=%d", c.coded)
		}
		if c.bf16 {
			name += "/bf16"
		}
		if c.noStep {
			name += "/no step graph"
		}
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(21, uint64(c.n*c.d)))
			st := synthPCA(r, c.d)
			o := codec.DefaultKakeyaPCOptions()
			o.Rate, o.Block, o.Entropy, o.MaxCoded = 2.5, c.n, c.ec, c.coded
			inner := newPC(t, o, st)
			cd := randPreconditioned(t, r, inner, c.d)
			gpu, f, pe, size := preconditionedStore(t, cd, inner, c.n, c.d, c.bf16, c.noStep)
			const blocks = 3
			var rows [][]float32
			for range blocks {
				rows = append(rows, whitenedPCRows(r, cd, st, c.n))
			}
			encoder := "enc_pc"
			if c.ec {
				encoder = "enc_pcec"
			}
			ps, hots, w, e := encodeBatch(t, gpu, f, pe, cd, rows, c.n, c.d, encoder)
			if w != 1 || e != 1 {
				t.Errorf("%d blocks encoded by %d enc_whiten and %d %s launches, want 1 and 1", blocks, w, e, encoder)
			}
			same := 0
			for i, p := range ps {
				if pt := own(p); pt.encLen != size || pt.dec != cd || pt.linv == 0 || pt.prm == 0 {
					t.Fatalf("block %d: part holds %d bytes of %v (settings at %#x, inverse factor at %#x), want %d of %s with both", i, pt.encLen, pt.dec, pt.prm, pt.linv, size, cd.Name())
				}
				got := deviceBytes(t, gpu, p)
				if whitenedPCBlock(t, cd, got, hots[i], c.n, c.d) {
					same++
				}
				// Read decodes the block (its length trimmed from the
				// slot's for format 9) as the codec does.
				dec, ref := make([]float32, c.n*c.d), make([]float32, c.n*c.d)
				if err := pe.Read(dec, p); err != nil {
					t.Fatal(err)
				}
				if c.ec {
					got = blockBytes(cd, got)
				}
				if err := cd.Decode(ref, got, c.n, c.d); err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(dec, ref); d != 0 {
					t.Errorf("block %d: Read gives %.3g from the codec's decoding of the device's bytes", i, d)
				}
			}
			// The whitened rows of a part encoded alone, at the start
			// of the encoders' scratch.
			p, hot := whitenAlone(t, gpu, pe, cd, whitenedPCRows(r, cd, st, c.n), c.n, c.d)
			if whitenedPCBlock(t, cd, deviceBytes(t, gpu, p), hot, c.n, c.d) {
				same++
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d of %d blocks are the host's bytes (kernel level %s)", same, blocks+1, cpu.Level())
		})
	}
}

// A layer's keys and values that share a codec take one encoder launch,
// the keys whitened or not: one EncodeParts of two KV heads' keys of
// preconditioned int8 (float32 rows from enc_whiten) and values of int8
// (bf16 rows of the hot parts), and likewise of preconditioned kakeya-pc
// keys beside kakeya-pc values, makes one enc_whiten launch and one
// enc_int8 (enc_pc) launch, where reading the hot format per launch made
// two encoder launches; every block is its codec's (int8 bit for bit
// where the host whitens with fused multiply-adds).
func TestWhitenedKeysShareLaunch(t *testing.T) {
	needKernels(t, "enc_whiten", "enc_int8", "enc_pc", "kv_write")
	const n, d, kvHeads = 16, 64, 2
	r := rand.New(rand.NewPCG(31, 32))
	i8, err := codec.New(codec.Spec{Name: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	st := synthPCA(r, d)
	o := codec.DefaultKakeyaPCOptions()
	o.Rate, o.Block = 2.5, n
	pc := newPC(t, o, st)
	for _, c := range []struct {
		encoder string
		value   codec.Codec
	}{{"enc_int8", i8}, {"enc_pc", pc}} {
		t.Run(c.encoder, func(t *testing.T) {
			gpu, f := newFakeBackend(t, Options{})
			bs := gpu.NewBlockStore(n, d, true)
			pe := bs.(*store)
			var ps []compute.Part
			var decs []compute.Decoder
			var hots [][]float32
			for h := range 2 * kvHeads {
				cd := codec.Codec(c.value)
				if h < kvHeads {
					cd = randPreconditioned(t, r, c.value, d)
				}
				x := randFloats(r, n*d)
				if c.value == codec.Codec(pc) {
					x = pcRows(r, st, n)
					if w, ok := cd.(*codec.Preconditioned); ok {
						x = whitenedPCRows(r, w, st, n)
					}
				}
				p, err := bs.NewPart()
				if err != nil {
					t.Fatal(err)
				}
				bs.Write(p, 0, upload(gpu, x), d, n)
				hot := make([]float32, n*d)
				if err := bs.Read(hot, p); err != nil {
					t.Fatal(err)
				}
				ps, decs, hots = append(ps, p), append(decs, cd), append(hots, hot)
			}
			whiten, encs := kernelCount(f, "enc_whiten"), kernelCount(f, c.encoder)
			if err := pe.EncodeParts(ps, decs); err != nil {
				t.Fatal(err)
			}
			gpu.mu.Lock()
			gpu.flushQueue()
			gpu.mu.Unlock()
			if w, e := kernelCount(f, "enc_whiten")-whiten, kernelCount(f, c.encoder)-encs; w != 1 || e != 1 {
				t.Errorf("%d whitened key parts and %d value parts of one codec encoded by %d enc_whiten and %d %s launches, want 1 and 1", kvHeads, kvHeads, w, e, c.encoder)
			}
			for i, p := range ps {
				got := deviceBytes(t, gpu, p)
				switch cd := decs[i].(type) {
				case *codec.Preconditioned:
					if c.value == codec.Codec(i8) {
						checkWhitenedBlock(t, cd, got, hostEncode(t, cd, hots[i], n, d), n, d)
					} else {
						whitenedPCBlock(t, cd, got, hots[i], n, d)
					}
				default:
					want := hostEncode(t, cd.(codec.Codec), hots[i], n, d)
					if c.value == codec.Codec(i8) {
						sameBytes(t, "codec.Int8's", got, want)
						continue
					}
					dec, ref := make([]float32, n*d), make([]float32, n*d)
					if err := pc.Decode(dec, got, n, d); err != nil {
						t.Fatalf("value block %d: the codec refuses the device's bytes: %v", i, err)
					}
					if err := pc.Decode(ref, want, n, d); err != nil {
						t.Fatal(err)
					}
					var eGot, eRef float64
					for j, v := range hots[i] {
						eGot += sq(float64(dec[j] - v))
						eRef += sq(float64(ref[j] - v))
					}
					if eGot > eRef*1.01 {
						t.Errorf("value block %d: squared error %.5g of the device's block, the codec's %.5g", i, eGot, eRef)
					}
				}
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// hostEncode returns cd's encoding of the n x d rows x.
func hostEncode(t *testing.T, cd codec.Codec, x []float32, n, d int) []byte {
	t.Helper()
	b, err := cd.Encode(nil, x, n, d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
