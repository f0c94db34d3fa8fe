package cudabackend

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kernels/cuda/emu"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/tensor"
)

// deviceBytes returns the encoded bytes an encoded part holds on the
// device.
func deviceBytes(t *testing.T, b *Backend, p compute.Part) []byte {
	t.Helper()
	pt := own(p)
	out := make([]byte, pt.encLen)
	b.mu.Lock()
	err := b.copyOut(out, pt.addr)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writePart writes x's n rows of d into a new part of store and returns
// the part and the hot values it holds (x, rounded to bf16 in a bf16
// store).
func writePart(t *testing.T, gpu *Backend, store compute.BlockStore, x []float32, n, d int) (compute.Part, []float32) {
	t.Helper()
	p, err := store.NewPart()
	if err != nil {
		t.Fatal(err)
	}
	store.Write(p, 0, upload(gpu, x), d, n)
	hot := make([]float32, n*d)
	if err := store.Read(hot, p); err != nil {
		t.Fatal(err)
	}
	return p, hot
}

// encodeOnDevice writes x (n x d) into a new part of store, encodes it by
// cd on the device and returns the part and the hot values it held (x,
// rounded to bf16 in a bf16 store).
func encodeOnDevice(t *testing.T, gpu *Backend, store compute.BlockStore, cd codec.Codec, x []float32, n, d int) (compute.Part, []float32) {
	t.Helper()
	p, hot := writePart(t, gpu, store, x, n, d)
	pe := store.(compute.PartEncoder)
	size, ok := pe.EncodedLen(cd)
	if !ok {
		t.Fatalf("%s: not encoded on the device", cd.Name())
	}
	if err := pe.EncodePart(p, cd); err != nil {
		t.Fatal(err)
	}
	if pt := own(p); pt.encLen != size || pt.size > roundUp(size+size/4, fixedAlign) || !pt.Encoded() || pt.HotDecoded() {
		t.Fatalf("%s: part holds %d encoded bytes in a slot of %d (hot decoded %v), EncodedLen says %d", cd.Name(), pt.encLen, pt.size, pt.HotDecoded(), size)
	}
	return p, hot
}

// enc_int8 writes codec.Int8's bytes bit for bit, header and CRC
// included: float32 and bf16 parts, a row width that is no multiple of
// the group, all-zero groups (scale 0), values on rounding ties.
func TestEncodeInt8OnDevice(t *testing.T) {
	needKernels(t, "enc_int8", "kv_write")
	cd, err := codec.New(codec.Spec{Name: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		n, d int
		bf16 bool
	}{
		{"f32", 16, 64, false}, {"bf16", 16, 64, true}, {"d80", 16, 80, false},
		{"d128/bf16", 64, 128, true}, {"tiny", 3, 2, false}, {"block of 1", 1, 256, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(c.n*c.d)))
			gpu, _ := newFakeBackend(t, Options{})
			store := gpu.NewBlockStore(c.n, c.d, c.bf16)
			x := randFloats(r, c.n*c.d)
			for i := range x {
				switch i % 97 {
				case 0:
					x[i] *= 300
				case 1:
					x[i] = 127 // a scale of 1: codes on exact values
				}
			}
			clear(x[:min(32, c.d)]) // a zero group
			p, hot := encodeOnDevice(t, gpu, store, cd, x, c.n, c.d)
			want, err := cd.Encode(nil, hot, c.n, c.d)
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, "codec.Int8's", deviceBytes(t, gpu, p), want)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// enc_pc writes kakeya-pc blocks that codec.KakeyaPC decodes (header,
// counts and CRC checked) to within float rounding of its own encoding:
// the rotation into the basis is summed in another order, so a few codes
// on a cell boundary may move by one level and a block mean by an fp16
// step, and nothing more. A codec capped at 16 coded components (coded=16,
// the kakeya preset's keys) at head dims 64 and 128 gets blocks of its
// capped layout: the components past the cap take no bits, the block's
// length and coded count are the capped codec's, and its reconstruction
// error is the host encoder's.
func TestEncodePCOnDevice(t *testing.T) {
	needKernels(t, "enc_pc", "kv_write")
	for _, c := range []struct {
		name    string
		n, d    int
		bf16    bool
		rate    float64
		uniform bool
		coded   int // MaxCoded; 0: no cap
	}{
		{"f32", 16, 64, false, 2.5, false, 0}, {"bf16", 16, 64, true, 2.5, false, 0},
		{"d128/block 64", 64, 128, true, 2.5, false, 0}, {"uniform", 16, 64, false, 3, true, 0},
		{"low rate", 32, 32, false, 0.75, false, 0}, {"high rate", 16, 64, false, 6, false, 0},
		{"d256/odd block", 13, 256, true, 2.5, false, 0},
		{"coded=16/block 64", 64, 64, true, 2.5, false, 16}, {"coded=16/d128/block 64", 64, 128, true, 2.5, false, 16},
		{"coded=16/f32", 16, 64, false, 2.5, false, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, uint64(c.n*c.d)))
			st := synthPCA(r, c.d)
			o := codec.DefaultKakeyaPCOptions()
			o.Rate, o.Block, o.Uniform, o.MaxCoded = c.rate, c.n, c.uniform, c.coded
			cd := newPC(t, o, st)
			if c.coded > 0 {
				// The cap binds, and the capped allocation gives no
				// component past it bits.
				uo := o
				uo.MaxCoded = 0
				all, pc := newPC(t, uo, st).Settings().PC, cd.Settings().PC
				if len(pc.Coded()) != c.coded || len(all.Coded()) <= c.coded {
					t.Fatalf("%d coded components capped, %d uncapped; want %d and more", len(pc.Coded()), len(all.Coded()), c.coded)
				}
				if capped, uncapped := pc.CodeBytes(c.n), all.CodeBytes(c.n); capped >= uncapped {
					t.Fatalf("capped blocks' codes take %d bytes, uncapped %d: want fewer", capped, uncapped)
				}
			}
			gpu, _ := newFakeBackend(t, Options{})
			store := gpu.NewBlockStore(c.n, c.d, c.bf16)
			for rep := range 3 {
				x := pcRows(r, st, c.n)
				p, hot := encodeOnDevice(t, gpu, store, cd, x, c.n, c.d)
				want, err := cd.Encode(nil, hot, c.n, c.d)
				if err != nil {
					t.Fatal(err)
				}
				got := deviceBytes(t, gpu, p)
				if len(got) != len(want) || !bytes.Equal(got[:12], want[:12]) || !bytes.Equal(got[16:22], want[16:22]) {
					t.Fatalf("block %d: device header and counts % x (%d bytes), codec's % x (%d bytes)", rep, got[:22], len(got), want[:22], len(want))
				}
				dec, ref := make([]float32, c.n*c.d), make([]float32, c.n*c.d)
				if err := cd.Decode(dec, got, c.n, c.d); err != nil {
					t.Fatalf("block %d: the codec refuses the device's bytes: %v", rep, err)
				}
				if err := cd.Decode(ref, want, c.n, c.d); err != nil {
					t.Fatal(err)
				}
				diff := 0
				for i := 22; i < len(got); i++ {
					if got[i] != want[i] {
						diff++
					}
				}
				// Reconstruction error of each against the input.
				var eGot, eRef, norm float64
				for i, v := range hot {
					eGot += sq(float64(dec[i] - v))
					eRef += sq(float64(ref[i] - v))
					norm += sq(float64(v))
				}
				if eGot > eRef*1.01+1e-9*norm {
					t.Errorf("block %d: squared error %.4g of the device's encoding, the codec's %.4g", rep, eGot, eRef)
				}
				if diff > (len(got)-22)/50 {
					t.Errorf("block %d: %d of %d payload bytes differ from the codec's encoding", rep, diff, len(got)-22)
				}
				t.Logf("block %d: %d of %d payload bytes differ; squared error %.4g vs the codec's %.4g (of %.4g)", rep, diff, len(got)-22, eGot, eRef, norm)
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func sq(v float64) float64 { return v * v }

// Input the host encoders refuse (a non-finite value) gives a block every
// decoder rejects, so Read fails with the codec's error rather than
// returning garbage; codecs the device does not encode (kakeya, and
// kakeya preconditioned: preconditioned int8 and int4 are encoded) are
// declined.
func TestEncodeOnDeviceRefuses(t *testing.T) {
	needKernels(t, "enc_int8", "enc_pc", "kv_write")
	const n, d = 16, 64
	r := rand.New(rand.NewPCG(8, 9))
	st := synthPCA(r, d)
	o := codec.DefaultKakeyaPCOptions()
	o.Block = n
	pc := newPC(t, o, st)
	i8, err := codec.New(codec.Spec{Name: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cd := range []codec.Codec{i8, pc} {
		gpu, _ := newFakeBackend(t, Options{})
		store := gpu.NewBlockStore(n, d, false)
		x := randFloats(r, n*d)
		x[77] = float32(math.Inf(1))
		p, _ := encodeOnDevice(t, gpu, store, cd, x, n, d)
		err := store.Read(make([]float32, n*d), p)
		if err == nil || !strings.Contains(err.Error(), "magic") {
			t.Errorf("%s: Read of a block encoded from an infinite value: %v, want the codec's bad-magic error", cd.Name(), err)
		}
	}
	gpu, _ := newFakeBackend(t, Options{})
	store := gpu.NewBlockStore(n, d, false).(compute.PartEncoder)
	ko, err := codec.NewKakeya(codec.DefaultKakeyaOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, cd := range []codec.Codec{ko, randPreconditioned(t, r, ko, d)} {
		if _, ok := store.EncodedLen(cd); ok {
			t.Errorf("%s: encoded on the device", cd.Name())
		}
	}
	if _, ok := store.EncodedLen(randPreconditioned(t, r, i8, d)); !ok {
		t.Errorf("pre+int8: not encoded on the device")
	}
}

// hostEncoding is a block store that hides its PartEncoder, so the cache
// encodes on the host as it did before the device encoders.
type hostEncoding struct {
	compute.BlockStore
	compute.EncodedAttention
}

// A decode step that fills a block encodes it on the device: no copy
// back, and one launch and one copy in (its table of parts) for the parts
// a layer fills, where the host path made a copy back and a copy in per
// part; the blocks are the same (int8's bytes are the codec's).
func TestCacheEncodesOnDevice(t *testing.T) {
	needKernels(t, "enc_int8", "kv_write")
	const layers, kvHeads, d, bs = 2, 2, 64, 16
	i8, err := codec.New(codec.Spec{Name: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	pol := kvcache.Policy{HotBF16: true}
	for range layers {
		pol.Layers = append(pol.Layers, kvcache.LayerCodecs{K: []codec.Codec{i8}, V: i8})
	}
	r := rand.New(rand.NewPCG(1, 2))
	rows := randFloats(r, 2*bs*kvHeads*d)
	var parts [2][]float32
	for i, device := range []bool{false, true} {
		gpu, f := newFakeBackend(t, Options{})
		var store compute.BlockStore = gpu.NewBlockStore(bs, d, true)
		if !device {
			store = hostEncoding{store, store.(compute.EncodedAttention)}
		}
		c, err := kvcache.New(kvcache.Config{Layers: layers, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxTokens: 4 * bs, Policy: pol, Store: store})
		if err != nil {
			t.Fatal(err)
		}
		src := upload(gpu, rows)
		// The copies and launches of the step before the last (which
		// fills nothing) and of the last, which fills the blocks.
		var in, out, launches, in0, out0, l0 int
		for tok := range bs {
			in, out, launches = f.calls["copyIn"], f.calls["copyOut"], len(f.launched)
			if tok < bs-1 {
				in0, out0, l0 = in, out, launches
			}
			for l := range layers {
				k := src.Slice(tok*kvHeads*d, (tok+1)*kvHeads*d)
				v := src.Slice((bs+tok)*kvHeads*d, (bs+tok+1)*kvHeads*d)
				if err := c.Append(l, k, v, 1); err != nil {
					t.Fatal(err)
				}
				// The layer's deferred cache writes, as its attention
				// would launch them.
				gpu.mu.Lock()
				gpu.flush()
				gpu.mu.Unlock()
			}
			if tok < bs-1 {
				in0, out0, l0 = f.calls["copyIn"]-in0, f.calls["copyOut"]-out0, len(f.launched)-l0
			} else {
				in, out, launches = f.calls["copyIn"]-in, f.calls["copyOut"]-out, len(f.launched)-launches
			}
		}
		t.Logf("device encoding %v: a step of %d layers x %d KV heads: %d copies in, %d back, %d launches; the step that fills a block: %d, %d, %d",
			device, layers, kvHeads, in0, out0, l0, in, out, launches)
		// Per part, the host path copies back and in; the device one
		// launches one encoder for the parts a flush finds (a layer's
		// keys and values of every KV head) over a table of them it
		// copies in.
		np := 2 * layers * kvHeads
		want := [3]int{in0 + np, out0 + np, l0}
		if device {
			want = [3]int{in0 + layers, out0, l0 + layers}
		}
		if got := [3]int{in, out, launches}; got != want {
			t.Errorf("device encoding %v: the step that fills a block makes %d copies in, %d back and %d launches, want %v", device, in, out, launches, want)
		}
		st := c.Stats()
		if want := int64(2 * layers * kvHeads * (16 + bs*d + 2*bs*d/32)); st.Compressed != want {
			t.Fatalf("device encoding %v: %d compressed bytes, want %d", device, st.Compressed, want)
		}
		if st.Compressed == 0 {
			t.Fatalf("device encoding %v: no compressed bytes in %+v", device, st)
		}
		x := make([]float32, bs*d)
		for l := range layers {
			for h := range kvHeads {
				for kv := range 2 {
					if err := c.Read(x, l, h, 0, kv); err != nil {
						t.Fatal(err)
					}
					parts[i] = append(parts[i], x...)
				}
			}
		}
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxAbsDiff(parts[0], parts[1]); d != 0 {
		t.Errorf("blocks encoded on the device decode %.3g away from the host's", d)
	}
}

// sameBytes fails t when the bytes a device encoder wrote differ from
// the host codec's (named by whose), at the first byte that differs.
func sameBytes(t *testing.T, whose string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < min(len(got), len(want)) && got[i] == want[i] {
		i++
	}
	t.Fatalf("device bytes (%d) differ from %s (%d) first at byte %d", len(got), whose, len(want), i)
}

// enc_pc's bytes are those of the kernel before its projection was
// staged in shared memory and its scale search spread over a thread per
// component and step (each sum in the same order, so the same float
// rounding): 36 blocks over 12 shapes (head dims 32 to 256, 80 on the
// scalar loop, blocks of 13 to 128 rows, one to two staged chunks, float32
// and bf16 parts, rates 0.75 to 6, Lloyd-Max and uniform), hashed, the
// hash the earlier kernel's on the emulator.
func TestEncodePCBytesUnchanged(t *testing.T) {
	needKernels(t, "enc_pc", "kv_write")
	const want = "eec0d9ad5e16169d49de4309771a3ed0bfb8ee07542678ec7cf213b2cbdbe30c"
	h := sha256.New()
	for ci, c := range []struct {
		n, d    int
		bf16    bool
		rate    float64
		uniform bool
	}{
		{16, 64, false, 2.5, false}, {16, 64, true, 2.5, false}, {64, 128, true, 2.5, false}, {64, 128, false, 2.5, false},
		{16, 64, false, 3, true}, {32, 32, false, 0.75, false}, {16, 64, false, 6, false}, {13, 256, true, 2.5, false},
		{64, 64, true, 4, false}, {64, 80, false, 2.5, false}, {128, 64, true, 2.5, false}, {64, 128, true, 1.5, true},
	} {
		r := rand.New(rand.NewPCG(7, uint64(ci)))
		st := synthPCA(r, c.d)
		o := codec.DefaultKakeyaPCOptions()
		o.Rate, o.Block, o.Uniform = c.rate, c.n, c.uniform
		cd := newPC(t, o, st)
		gpu, _ := newFakeBackend(t, Options{})
		store := gpu.NewBlockStore(c.n, c.d, c.bf16)
		for range 3 {
			x := pcRows(r, st, c.n)
			p, _ := encodeOnDevice(t, gpu, store, cd, x, c.n, c.d)
			h.Write(deviceBytes(t, gpu, p))
		}
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("enc_pc's bytes hash to %s, the earlier kernel's to %s", got, want)
	}
}

// bf16, the codec of a side kept uncompressed (a boundary layer, a
// plan's "none"), is encoded in place in a store of bf16 rows: nothing is
// launched or read back, the part keeps its slot and its rows, which Read
// gives as bf16's Decode gives its bytes (the host's encoding of the
// values the part held), and it counts as encoded at the bytes' length
// (not HotDecoded), as on the CPU; it takes no more writes. A whitened
// bf16 is not encoded on the device. (Over float32 rows enc_bf16 rounds
// the rows into a slot of their own: TestEncodeBF16FromF32.)
func TestEncodeBF16InPlace(t *testing.T) {
	needKernels(t, "kv_write")
	const n, d = 16, 64
	r := rand.New(rand.NewPCG(5, 6))
	gpu, f := newFakeBackend(t, Options{})
	store := gpu.NewBlockStore(n, d, true)
	var cd codec.BF16
	x := randFloats(r, n*d)
	p, hot := writePart(t, gpu, store, x, n, d)
	want, err := cd.Encode(nil, hot, n, d)
	if err != nil {
		t.Fatal(err)
	}
	pe := store.(compute.PartsEncoder)
	if size, ok := store.(compute.PartEncoder).EncodedLen(cd); !ok || size != len(want) {
		t.Fatalf("EncodedLen(bf16) = %d, %v; want %d, true", size, ok, len(want))
	}
	addr, launched, outs := own(p).addr, len(f.launched), f.calls["copyOut"]
	if err := pe.EncodeParts([]compute.Part{p}, []compute.Decoder{cd}); err != nil {
		t.Fatal(err)
	}
	if pt := own(p); !pt.Encoded() || pt.HotDecoded() || pt.addr != addr || pt.encLen != len(want) || pt.format != partBF16 {
		t.Fatalf("part after bf16: encoded %v, hot decoded %v, at %#x (was %#x), %d encoded bytes, format %d", pt.Encoded(), pt.HotDecoded(), pt.addr, addr, pt.encLen, pt.format)
	}
	if k := f.launched[launched:]; len(k) != 0 || f.calls["copyOut"] != outs {
		t.Fatalf("bf16 in place launched %v and copied back %d times", k, f.calls["copyOut"]-outs)
	}
	got := make([]float32, n*d)
	if err := store.Read(got, p); err != nil {
		t.Fatal(err)
	}
	dec := make([]float32, n*d)
	if err := cd.Decode(dec, want, n, d); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(dec[i]) {
			t.Fatalf("value %d: read %v, bf16's Decode gives %v", i, got[i], dec[i])
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a write into a part encoded as bf16 did not panic")
			}
		}()
		store.Write(p, 0, upload(gpu, x), d, 1)
	}()
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.(compute.PartEncoder).EncodedLen(randPreconditioned(t, r, cd, d)); ok {
		t.Error("a store of bf16 rows encodes a whitened bf16 on the device")
	}
}

// bf16Specials returns float32 values on every edge of rounding to
// bfloat16: signed zeros, subnormals (the smallest, ties to even either
// way, just past a tie, the largest, which rounds up to the smallest
// normal), ties to even on both sides and of both signs, just below a
// tie, the largest finite float (rounding to an infinity) and the largest
// bf16, infinities, and NaNs quiet and signalling, whose payload lies
// only in the bits rounding drops (a NaN that must not become an
// infinity), of both signs.
func bf16Specials() []float32 {
	bits := []uint32{
		0x00000000, 0x80000000, // +-0
		0x00000001, 0x80000001, // the smallest subnormals: +-0
		0x00008000, 0x00018000, 0x80018000, // subnormal ties: to 0, up to 2, down to -2
		0x00008001, 0x007fffff, 0x00800000, // past a tie; the largest subnormal, up to the smallest normal
		0x3f808000, 0x3f818000, 0xbf818000, 0x3f807fff, // ties to even (down, up, negative), below a tie
		0x7f7fffff, 0xff7fffff, 0x7f7f7fff, // to +-Inf; to the largest bf16
		0x7f800000, 0xff800000, // +-Inf
		0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fffffff, // NaNs
	}
	x := make([]float32, len(bits))
	for i, b := range bits {
		x[i] = math.Float32frombits(b)
	}
	return x
}

// enc_bf16 encodes bf16 (a side kept uncompressed: a boundary layer, a
// plan's "none") over float32 hot rows on the device, where the store read
// each part back and encoded it on the host: EncodeParts launches one
// enc_bf16 for its parts, copies nothing back, and each part moves to a
// slot of bf16 rows (half its hot slot's size) holding, bit for bit, the
// payload of codec.BF16.Encode's bytes (tensor.F32ToBF16's rounding: to
// nearest, ties to even; NaN kept a NaN) for random values and for every
// rounding edge (bf16Specials, and each of them negated); it counts as
// encoded at the bytes' length (not HotDecoded), Read gives bf16's Decode
// of those bytes, and it takes no more writes. Parts of other codecs in
// the same call take their own launch. The kernel also converts rows of
// no multiple of four values or misaligned (its one-value path) and
// copies bf16 rows as they are, launched directly.
func TestEncodeBF16FromF32(t *testing.T) {
	needKernels(t, "enc_bf16", "enc_int8", "kv_write")
	const n, d = 16, 64
	r := rand.New(rand.NewPCG(7, 8))
	var cd codec.BF16
	i8, err := codec.New(codec.Spec{Name: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	specials := bf16Specials()
	for _, noGraph := range []bool{false, true} {
		gpu, f := newFakeBackend(t, Options{NoStepGraph: noGraph})
		store := gpu.NewBlockStore(n, d, false)
		pe := store.(compute.PartsEncoder)
		size, ok := store.(compute.PartEncoder).EncodedLen(cd)
		if want := 16 + 2*n*d; !ok || size != want {
			t.Fatalf("EncodedLen(bf16) over float32 rows = %d, %v; want %d, true", size, ok, want)
		}
		// Three bf16 parts (the rounding edges in the first, negated in
		// the second, amid random values) and an int8 part.
		var ps []compute.Part
		var decs []compute.Decoder
		var xs [][]float32
		for i := range 4 {
			x := randFloats(r, n*d)
			for j, v := range specials {
				switch i {
				case 0:
					x[3*j] = v
				case 1:
					x[5*j+1] = -v
				}
			}
			p, hot := writePart(t, gpu, store, x, n, d)
			for j := range x {
				if math.Float32bits(hot[j]) != math.Float32bits(x[j]) {
					t.Fatalf("part %d value %d: the float32 part holds %#x, written %#x", i, j, math.Float32bits(hot[j]), math.Float32bits(x[j]))
				}
			}
			ps, xs = append(ps, p), append(xs, x)
			decs = append(decs, map[bool]compute.Decoder{true: i8, false: cd}[i == 2])
		}
		hotSize := own(ps[0]).size
		launched, outs := len(f.launched), f.calls["copyOut"]
		if err := pe.EncodeParts(ps, decs); err != nil {
			t.Fatal(err)
		}
		gpu.mu.Lock()
		gpu.flushQueue()
		gpu.mu.Unlock()
		count := func(k []string, kernel string) int {
			return len(slices.DeleteFunc(slices.Clone(k), func(s string) bool { return s != kernel }))
		}
		if k := f.launched[launched:]; count(k, "enc_bf16") != 1 || count(k, "enc_int8") != 1 || f.calls["copyOut"] != outs {
			t.Fatalf("no step graph %v: EncodeParts of 3 bf16 parts and an int8 one launched %v and copied back %d times; want one enc_bf16 and one enc_int8, none", noGraph, k, f.calls["copyOut"]-outs)
		}
		for i, p := range ps {
			if decs[i] != cd {
				continue
			}
			want, err := cd.Encode(nil, xs[i], n, d)
			if err != nil {
				t.Fatal(err)
			}
			pt := own(p)
			if !pt.Encoded() || pt.HotDecoded() || pt.encLen != len(want) || pt.format != partBF16 || pt.size != roundUp(2*n*d, encAlign) || pt.size >= hotSize {
				t.Fatalf("part %d after bf16: encoded %v, hot decoded %v, %d encoded bytes (want %d), format %d, a slot of %d bytes (hot %d)",
					i, pt.Encoded(), pt.HotDecoded(), pt.encLen, len(want), pt.format, pt.size, hotSize)
			}
			rows := make([]byte, 2*n*d)
			gpu.mu.Lock()
			err = gpu.copyOut(rows, pt.addr)
			gpu.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			for j := range n * d {
				g, w := binary.LittleEndian.Uint16(rows[2*j:]), binary.LittleEndian.Uint16(want[16+2*j:])
				if g != w {
					t.Fatalf("part %d value %d (%#x): enc_bf16 wrote %#04x, codec.BF16.Encode %#04x", i, j, math.Float32bits(xs[i][j]), g, w)
				}
				if v := xs[i][j]; math.IsNaN(float64(v)) && !math.IsNaN(float64(tensor.BF16ToF32(g))) {
					t.Fatalf("part %d value %d: NaN %#x became %#04x", i, j, math.Float32bits(v), g)
				}
			}
			got, dec := make([]float32, n*d), make([]float32, n*d)
			if err := store.Read(got, p); err != nil {
				t.Fatal(err)
			}
			if err := cd.Decode(dec, want, n, d); err != nil {
				t.Fatal(err)
			}
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(dec[j]) {
					t.Fatalf("part %d value %d: read %#x, bf16's Decode gives %#x", i, j, math.Float32bits(got[j]), math.Float32bits(dec[j]))
				}
			}
		}
		// The int8 part beside them: codec.Int8's bytes.
		want, err := i8.Encode(nil, xs[2], n, d)
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "enc_int8 beside enc_bf16", deviceBytes(t, gpu, ps[2]), want)
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a write into a part encoded as bf16 over float32 rows did not panic")
				}
			}()
			store.Write(ps[0], 0, upload(gpu, xs[0]), d, 1)
		}()
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Launched directly: 3 x 5 values (three groups of four, then three
	// one at a time), misaligned rows (every value one at a time), and
	// bf16 rows copied.
	m := newDevMem(t)
	x := append(slices.Clone(specials), randFloats(r, 3)...)
	x = append(x, x...)
	for _, c := range []struct {
		name     string
		n, d, at int // at: the rows' offset in bytes from an aligned address
	}{{"3x5", 3, 5, 0}, {"misaligned", 5, 8, 4}, {"specials", len(x) / 8, 8, 0}} {
		src := x[:c.n*c.d]
		raw := append(make([]byte, c.at), f32Bytes(src)...)
		in, out := m.bytes(raw)+Ptr(c.at), m.bytes(make([]byte, 2*len(src)))
		for _, seed := range emuSeeds[:2] {
			runLaunches(t, seed, encBF16Launch(out, in, false, c.n, c.d, 0, 1))
			got := make([]byte, 2*len(src))
			emu.CopyOut(got, uint64(out))
			for j, v := range src {
				if g, w := binary.LittleEndian.Uint16(got[2*j:]), tensor.F32ToBF16(v); g != w {
					t.Fatalf("%s value %d (%#x): %#04x, tensor.F32ToBF16 %#04x", c.name, j, math.Float32bits(v), g, w)
				}
			}
		}
	}
	h := make([]uint16, 37)
	for i := range h {
		h[i] = uint16(r.Uint32())
	}
	in, out := m.u16(h), m.bytes(make([]byte, 2*len(h)))
	runLaunches(t, emuSeeds[0], encBF16Launch(out, in, true, 1, len(h), 0, 1))
	got := make([]byte, 2*len(h))
	emu.CopyOut(got, uint64(out))
	for j, v := range h {
		if g := binary.LittleEndian.Uint16(got[2*j:]); g != v {
			t.Fatalf("bf16 rows: value %d copied as %#04x, was %#04x", j, g, v)
		}
	}
}
