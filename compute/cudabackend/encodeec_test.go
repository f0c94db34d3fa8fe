package cudabackend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/model"
)

// identityPCA returns PCAStats of dimension d whose basis is the identity
// and mean zero, variances falling off as synthPCA's: the rotation into
// the basis is then exact on the host and the device (each component is
// its value), so the encoders see bit-identical inputs.
func identityPCA(d int) *codec.PCAStats {
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for j := range d {
		st.Basis[j*d+j] = 1
		st.Var[j] = float32(4 * math.Exp(-float64(j)/6))
		st.Between[j] = st.Var[j] / 4
	}
	return st
}

// pcecBlock checks one block enc_pcec wrote (got, the slot's bytes) for
// the hot rows x against the codec's own encoding of them: the block's
// length is its fields', within the slot; the codec decodes it (header,
// counts, CRC and the stream's end all checked by its fuzz-hardened
// decoder); its header and counts are the codec's; its squared error is
// within 1% of the codec's encoding's. It returns the block and whether
// its bytes are the codec's.
func pcecBlock(t *testing.T, cd codec.Codec, got []byte, x []float32, n, d int) ([]byte, bool) {
	t.Helper()
	blk := blockBytes(cd, got)
	if len(blk) == len(got) && len(got)%fixedAlign == 0 && blk[len(blk)-1] == 0 && len(blk) > 64 {
		// blockBytes gives the whole slot only where the fields do not
		// fit it; a block that fills its slot exactly is possible but
		// rare: say so.
		t.Logf("block of %d bytes fills its slot", len(blk))
	}
	want, err := cd.Encode(nil, x, n, d)
	if err != nil {
		t.Fatal(err)
	}
	dec, ref := make([]float32, n*d), make([]float32, n*d)
	if err := cd.Decode(dec, blk, n, d); err != nil {
		t.Fatalf("the codec refuses the device's block of %d bytes: %v", len(blk), err)
	}
	if err := cd.Decode(ref, want, n, d); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(blk[:12], want[:12]) || !bytes.Equal(blk[16:20], want[16:20]) {
		t.Fatalf("device header and counts % x, codec's % x", blk[:20], want[:20])
	}
	var eGot, eRef, norm float64
	for i, v := range x {
		eGot += sq(float64(dec[i] - v))
		eRef += sq(float64(ref[i] - v))
		norm += sq(float64(v))
	}
	if eGot > eRef*1.01+1e-9*norm {
		t.Errorf("squared error %.5g of the device's block (%d bytes), the codec's %.5g (%d bytes)", eGot, len(blk), eRef, len(want))
	}
	return blk, bytes.Equal(blk, want)
}

// enc_pcec writes entropy-coded kakeya-pc blocks (format 9) the codec
// decodes: stream layouts 1 and 2, kvtc, float32 and bf16 parts, head
// dims 32 (fewer stored means than layout 2's lanes) to 128, rates 0.75
// to 6, blocks of 13 to 64 rows. Where the rotation into the basis is
// exact on both (an identity basis, zero mean) the inputs of the scale
// rule are bit-identical and so are the blocks, stream included; with a
// random basis the rows differ by float rounding, and the device's blocks
// decode within 1% of the codec's squared error (most are its bytes).
func TestEncodePCECOnDevice(t *testing.T) {
	needKernels(t, "enc_pcec", "kv_write")
	for _, c := range []struct {
		name     string
		n, d     int
		bf16     bool
		rate     float64
		layout   int
		uniform  bool
		identity bool
	}{
		{"identity/f32", 16, 64, false, 2.5, 2, false, true},
		{"identity/d128/block 64", 64, 128, true, 2.5, 2, false, true},
		{"identity/layout 1", 64, 64, true, 2.5, 1, false, true},
		{"identity/kvtc", 16, 64, false, 3, 2, true, true},
		{"identity/d32", 32, 32, false, 4, 2, false, true},
		{"identity/high rate", 16, 64, false, 6, 2, false, true},
		{"identity/d256", 16, 256, true, 8, 2, false, true},         // the trials' results in the scratch
		{"identity/bounded rows", 64, 32, false, 1, 2, false, true}, // rows within ±1.8 RMS: ties of error between scales
		{"f32", 16, 64, false, 2.5, 2, false, false},
		{"bf16/d128/block 64", 64, 128, true, 2.5, 2, false, false},
		{"layout 1/d128", 64, 128, true, 2.5, 1, false, false},
		{"kvtc", 16, 64, false, 3, 2, true, false},
		{"low rate", 32, 32, false, 0.75, 2, false, false},
		{"odd block", 13, 64, true, 2.5, 2, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, uint64(c.n*c.d+c.layout)))
			st := synthPCA(r, c.d)
			if c.identity {
				st = identityPCA(c.d)
			}
			o := codec.DefaultKakeyaPCOptions()
			o.Rate, o.Block, o.Entropy, o.Uniform, o.StreamLayout = c.rate, c.n, true, c.uniform, c.layout
			cd := newPC(t, o, st)
			gpu, _ := newFakeBackend(t, Options{})
			store := gpu.NewBlockStore(c.n, c.d, c.bf16)
			same := 0
			const blocks = 3
			for rep := range blocks {
				x := pcRows(r, st, c.n)
				if strings.Contains(c.name, "bounded") {
					// Each component uniform within ±sqrt(3) of its
					// deviation: at the larger scales every value lies in
					// an option's zero cell, so those scales' errors tie
					// and the host keeps the first.
					for i := range x {
						x[i] = float32((2*r.Float64() - 1) * math.Sqrt(3*float64(st.Var[i%c.d])))
					}
				}
				if c.identity && rep == 2 {
					clear(x[:c.d]) // a zero row
					for i := c.d; i < 2*c.d && 2*c.d <= len(x); i++ {
						x[i] *= 40 // and an outlier row
					}
				}
				p, hot := encodeOnDevice(t, gpu, store, cd, x, c.n, c.d)
				blk, eq := pcecBlock(t, cd, deviceBytes(t, gpu, p), hot, c.n, c.d)
				if int(blk[3]) != c.layout {
					t.Fatalf("block of stream layout %d, want %d", blk[3], c.layout)
				}
				if c.identity && !eq {
					want, _ := cd.Encode(nil, hot, c.n, c.d)
					sameBytes(t, "the codec's (bit-identical inputs)", blk, want)
				}
				if eq {
					same++
				}
				// Read copies the slot back and decodes the block in it.
				got := make([]float32, c.n*c.d)
				if err := store.Read(got, p); err != nil {
					t.Fatal(err)
				}
			}
			pc := cd.Settings().PC
			m, cc := len(pc.Stored), len(pc.Coded())
			where := "shared memory"
			if pcecStaged(pcChunk(c.n, c.d, m, encThreads), c.d, m, cc, len(pc.ScaleSteps), encThreads) < 4*cc*len(pc.ScaleSteps) {
				where = "the scratch"
			}
			t.Logf("%d of %d blocks byte for byte the codec's (%d stored, %d coded components; the trials in %s)", same, blocks, m, cc, where)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// enc_pcec over keys and values of a trained model (ref-qwen2-6m, head
// dim 64: rows of the CPU's cache after a prefill), with a calibration
// made from those rows, both stream layouts: the codec decodes every
// block within 1% of its own encoding's squared error, and the blocks are
// about as long as its.
func TestEncodePCECRealRows(t *testing.T) {
	needKernels(t, "enc_pcec", "kv_write")
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	const bs, tokens = 64, 256
	m := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: tokens})
	s, err := m.NewSequenceOpts(model.SequenceOptions{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Forward(testIDs(tokens, m.Config().VocabSize), false); err != nil {
		t.Fatal(err)
	}
	d := m.CacheShape().HeadDim
	for _, layer := range []int{1, 4} {
		for kv, side := range []string{"keys", "values"} {
			acc := codec.NewPCAAccumulator(d)
			var rows [][]float32
			for b := range tokens / bs {
				k, v, err := s.KVBlock(layer, 0, b)
				if err != nil {
					t.Fatal(err)
				}
				x := [2][]float32{k, v}[kv]
				if err := acc.AddBlock(x, bs); err != nil {
					t.Fatal(err)
				}
				rows = append(rows, x)
			}
			st, err := acc.Stats()
			if err != nil {
				t.Fatal(err)
			}
			for _, layout := range []int{2, 1} {
				t.Run(fmt.Sprintf("layer %d %s layout %d", layer, side, layout), func(t *testing.T) {
					o := codec.DefaultKakeyaPCOptions()
					o.Block, o.Entropy, o.StreamLayout = bs, true, layout
					cd := newPC(t, o, st)
					gpu, _ := newFakeBackend(t, Options{})
					store := gpu.NewBlockStore(bs, d, true)
					var got, want int
					for _, x := range rows {
						p, hot := encodeOnDevice(t, gpu, store, cd, x, bs, d)
						blk, _ := pcecBlock(t, cd, deviceBytes(t, gpu, p), hot, bs, d)
						enc, err := cd.Encode(nil, hot, bs, d)
						if err != nil {
							t.Fatal(err)
						}
						got, want = got+len(blk), want+len(enc)
					}
					if got > want+want/50 {
						t.Errorf("the device's blocks take %d bytes, the codec's %d", got, want)
					}
					t.Logf("%d blocks: %d bytes on the device, %d by the codec (bf16: %d)", len(rows), got, want, len(rows)*bs*d*2)
				})
			}
		}
	}
}

// A block whose stream does not fit its slot is coded again under a
// smaller budget, so that it does (a valid block the codec decodes, with
// more error than the codec's own encoding); with a slot too small for
// any stream the block is refused (magic 0), and Read fails with the
// codec's error. The slot is made small by rewriting the bytes the
// codec's device settings give it.
func TestEncodePCECSlotOverflow(t *testing.T) {
	needKernels(t, "enc_pcec", "kv_write")
	const n, d = 64, 64
	r := rand.New(rand.NewPCG(12, 13))
	st := synthPCA(r, d)
	o := codec.DefaultKakeyaPCOptions()
	o.Block, o.Entropy = n, true
	cd := newPC(t, o, st)
	for _, c := range []struct {
		name   string
		shrink int // bytes taken off the stream's room
		refuse bool
	}{
		{"a tenth less", 0, false}, {"no room", -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			gpu, _ := newFakeBackend(t, Options{})
			blocks := gpu.NewBlockStore(n, d, false)
			x := pcRows(r, st, n)
			want, err := cd.Encode(nil, x, n, d)
			if err != nil {
				t.Fatal(err)
			}
			// The settings on the device, then their slot word rewritten.
			gpu.mu.Lock()
			prm, ok, err := blocks.(*store).codecParams(cd, partKakeyaPCEC)
			gpu.mu.Unlock()
			if err != nil || !ok {
				t.Fatalf("settings: %v %v", ok, err)
			}
			_, off, off2, off3, _ := ransTables(cd.Settings().PC)
			host, _ := pcecParams(cd, n, d, 0, off, off2, off3)
			e := int(binary.LittleEndian.Uint32(host[40:]))
			var v codec.Vars
			if err := cd.Format().ReadFields(want, &v); err != nil {
				t.Fatal(err)
			}
			codesOff := len(want) - v[codec.VarCodeBytes]
			limit := codesOff + v[codec.VarCodeBytes]*9/10
			if c.refuse {
				limit = codesOff + 8
			}
			var w [4]byte
			binary.LittleEndian.PutUint32(w[:], uint32(limit))
			gpu.mu.Lock()
			gpu.flush()
			gpu.fail(gpu.drv.copyIn(prm+Ptr(4*(e+3)), w[:]))
			gpu.mu.Unlock()
			p, hot := encodeOnDevice(t, gpu, blocks, cd, x, n, d)
			slot := deviceBytes(t, gpu, p)
			blk := blockBytes(cd, slot)
			if c.refuse {
				err := blocks.Read(make([]float32, n*d), p)
				if err == nil || !strings.Contains(err.Error(), "magic") {
					t.Fatalf("Read of a block that fits no slot: %v, want the codec's bad-magic error", err)
				}
				return
			}
			if len(blk) > limit {
				t.Fatalf("block of %d bytes in a slot of %d", len(blk), limit)
			}
			dec, ref := make([]float32, n*d), make([]float32, n*d)
			if err := cd.Decode(dec, blk, n, d); err != nil {
				t.Fatalf("the codec refuses the block coded again: %v", err)
			}
			if err := cd.Decode(ref, want, n, d); err != nil {
				t.Fatal(err)
			}
			var eGot, eRef, norm float64
			for i, v := range hot {
				eGot += sq(float64(dec[i] - v))
				eRef += sq(float64(ref[i] - v))
				norm += sq(float64(v))
			}
			if !(eGot > eRef) || eGot > 0.5*norm {
				t.Errorf("squared error %.4g coded again in %d bytes, the codec's %.4g in %d (of %.4g)", eGot, len(blk), eRef, len(want), norm)
			}
			t.Logf("coded again in %d bytes (slot %d; the codec's %d): squared error %.4g, the codec's %.4g (of %.4g)", len(blk), limit, len(want), eGot, eRef, norm)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Input the host encoder refuses (a non-finite value) gives a format-9
// block every decoder rejects; the slot EncodedLen gives is the rate's
// bound (pcecSlot) for both layouts.
func TestEncodePCECRefuses(t *testing.T) {
	needKernels(t, "enc_pcec", "kv_write")
	const n, d = 16, 64
	r := rand.New(rand.NewPCG(14, 15))
	st := synthPCA(r, d)
	for _, layout := range []int{1, 2} {
		o := codec.DefaultKakeyaPCOptions()
		o.Block, o.Entropy, o.StreamLayout = n, true, layout
		cd := newPC(t, o, st)
		gpu, _ := newFakeBackend(t, Options{})
		store := gpu.NewBlockStore(n, d, false)
		size, ok := store.(compute.PartEncoder).EncodedLen(cd)
		if want := pcecSlot(cd.Settings().PC, n, d); !ok || size != want {
			t.Fatalf("layout %d: EncodedLen %d %v, want %d", layout, size, ok, want)
		}
		x := randFloats(r, n*d)
		x[5] = float32(math.NaN())
		p, _ := encodeOnDevice(t, gpu, store, cd, x, n, d)
		err := store.Read(make([]float32, n*d), p)
		if err == nil || !strings.Contains(err.Error(), "magic") {
			t.Errorf("layout %d: Read of a block encoded from NaN: %v, want the codec's bad-magic error", layout, err)
		}
	}
}
