package cudabackend

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/model"
)

// fmaWhitening reports whether codec.Preconditioned.Encode whitens in
// this process as enc_whiten does: MixBlock's C kernels (AVX-512, AVX2)
// sum each value's terms in order, one fused multiply-add a term. The
// scalar loops round each product before the sum, so a value may differ
// in its last bit and a code on a rounding boundary by one step.
func fmaWhitening() bool {
	switch cpu.Level() {
	case "avx2", "avx512", "avx512bf16":
		return true
	}
	return false
}

// checkWhitenedBlock checks the device's block of a preconditioned codec
// against the host's: the same bytes where the host whitens with fused
// multiply-adds (fmaWhitening), else blocks that decode to within one code
// step (the inner codec's error on the host's block, per value) of each
// other.
func checkWhitenedBlock(t *testing.T, cd *codec.Preconditioned, got, want []byte, n, d int) {
	t.Helper()
	if fmaWhitening() {
		sameBytes(t, cd.Name()+"'s", got, want)
		return
	}
	a, b := make([]float32, n*d), make([]float32, n*d)
	if err := cd.Inner.Decode(a, got, n, d); err != nil {
		t.Fatalf("%s: the codec refuses the device's bytes: %v", cd.Name(), err)
	}
	if err := cd.Inner.Decode(b, want, n, d); err != nil {
		t.Fatal(err)
	}
	step := 0.0
	for _, v := range b {
		step = max(step, math.Abs(float64(v)))
	}
	step /= 7 // int4's widest step over a group's range is range/15; int8's far less
	if diff := maxAbsDiff(a, b); diff > step {
		t.Errorf("%s (kernel level %s): the device's whitened block decodes %.3g from the host's, past a code step %.3g", cd.Name(), cpu.Level(), diff, step)
	}
}

// enc_whiten then enc_int8 or enc_int4 write codec.Preconditioned's bytes
// of int8 and int4 keys (per token and per channel, 8-bit and fp16 group
// parameters, int2), header and CRC included, bit for bit where the host
// whitens with fused multiply-adds (the AVX-512 and AVX2 kernels): head
// dims 64 and 128, random factors whose channels' scales span two orders
// of magnitude, float32 and bf16 parts, several blocks of one codec
// encoded in one EncodeParts (a batch: one enc_whiten launch, one
// encoder's), queued with the step's launches or (Options.NoStepGraph)
// launched at once. Read decodes the device's blocks as the codec does.
func TestEncodePreconditionedOnDevice(t *testing.T) {
	needKernels(t, "enc_whiten", "enc_int8", "enc_int4", "kv_write")
	for _, c := range []struct {
		spec   string
		n, d   int
		bf16   bool
		noStep bool
	}{
		{"int8", 16, 64, false, false}, {"int8", 16, 64, true, false}, {"int8", 64, 128, true, false}, {"int8", 32, 128, false, true},
		{"int4", 16, 64, true, false}, {"int4-k", 16, 64, false, false}, {"int4-k", 64, 128, true, true}, {"int4", 32, 128, false, false},
		{"int2-k", 16, 128, true, false}, {"int4:params=f16", 16, 64, false, false},
	} {
		name := fmt.Sprintf("%s/%dx%d", c.spec, c.n, c.d)
		if c.bf16 {
			name += "/bf16"
		}
		if c.noStep {
			name += "/no step graph"
		}
		t.Run(name, func(t *testing.T) {
			spec, err := codec.ParseSpec(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			inner, err := codec.New(spec)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(11, uint64(c.n*c.d)))
			cd := randPreconditioned(t, r, inner, c.d)
			gpu, f, pe, size := preconditionedStore(t, cd, inner, c.n, c.d, c.bf16, c.noStep)
			const blocks = 3
			var rows [][]float32
			for range blocks {
				rows = append(rows, randFloats(r, c.n*c.d))
			}
			ps, hots, w, e := encodeBatch(t, gpu, f, pe, cd, rows, c.n, c.d, "enc_int8", "enc_int4")
			if w != 1 || e != 1 {
				t.Errorf("%d blocks encoded by %d enc_whiten and %d encoder launches, want 1 and 1", blocks, w, e)
			}
			for i, p := range ps {
				if pt := own(p); pt.encLen != size || pt.dec != cd || pt.linv == 0 {
					t.Fatalf("block %d: part holds %d bytes of %v (inverse factor at %#x), want %d of %s with its inverse factor", i, pt.encLen, pt.dec, pt.linv, size, cd.Name())
				}
				want, err := cd.Encode(nil, hots[i], c.n, c.d)
				if err != nil {
					t.Fatal(err)
				}
				checkWhitenedBlock(t, cd, deviceBytes(t, gpu, p), want, c.n, c.d)
				got, ref := make([]float32, c.n*c.d), make([]float32, c.n*c.d)
				if err := pe.Read(got, p); err != nil {
					t.Fatal(err)
				}
				if err := cd.Decode(ref, want, c.n, c.d); err != nil {
					t.Fatal(err)
				}
				if fmaWhitening() {
					if diff := maxAbsDiff(got, ref); diff != 0 {
						t.Errorf("block %d: Read gives %.3g from the host block's decoding", i, diff)
					}
				}
			}
			// The whitened rows themselves, which few codes show: a
			// part encoded alone leaves them at the start of the
			// encoders' scratch.
			whitenAlone(t, gpu, pe, cd, randFloats(r, c.n*c.d), c.n, c.d)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The query Cholesky factors of a trained model (ref-qwen2-6m, head dim
// 64, calibrated here over 192 tokens), applied to its own keys' scale of
// values: enc_whiten and enc_int8 or enc_int4 write the host's bytes for
// every layer's and KV head's factor; enc_whiten and enc_pc or enc_pcec
// (kakeya-pc keys, fixed rate and entropy-coded, whose whitened rows are
// drawn from the inner codec's synthetic statistics) blocks the codec
// decodes within 1% of the host block's squared error
// (whitenedPCBlock), most of them its bytes.
func TestEncodePreconditionedRealFactor(t *testing.T) {
	if testing.Short() {
		t.Skip("calibrates ref-qwen2-6m")
	}
	needKernels(t, "enc_whiten", "enc_int8", "enc_int4", "enc_pc", "enc_pcec", "kv_write")
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	m := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 256})
	cal, err := calibrate.RunModel(context.Background(), m, testIDs(192, m.Config().VocabSize), calibrate.Options{Ctx: 64})
	if err != nil {
		t.Fatal(err)
	}
	d := cal.HeadDim
	const n = 16
	r := rand.New(rand.NewPCG(5, 6))
	st := synthPCA(r, d)
	for _, spec := range []string{"int8", "int4-k", "int4", "kakeya-pc", "kakeya-pc:ec=true"} {
		var inner codec.Codec
		pc := strings.HasPrefix(spec, "kakeya-pc")
		if pc {
			o := codec.DefaultKakeyaPCOptions()
			o.Rate, o.Block, o.Entropy = 2.5, n, strings.Contains(spec, "ec=true")
			inner = newPC(t, o, st)
		} else {
			s, err := codec.ParseSpec(spec)
			if err != nil {
				t.Fatal(err)
			}
			if inner, err = codec.New(s); err != nil {
				t.Fatal(err)
			}
		}
		gpu, _ := newFakeBackend(t, Options{})
		store := gpu.NewBlockStore(n, d, true)
		same := 0
		for i, L := range cal.Chol {
			cd, err := codec.NewPreconditioned(inner, L, d)
			if err != nil {
				t.Fatalf("factor %d: %v", i, err)
			}
			var x []float32
			if pc {
				x = whitenedPCRows(r, cd, st, n)
			} else {
				x = randFloats(r, n*d)
				for j := range x {
					x[j] *= 3 // keys of a few units, as the model's are
				}
			}
			p, hot := encodeOnDevice(t, gpu, store, cd, x, n, d)
			if pc {
				if whitenedPCBlock(t, cd, deviceBytes(t, gpu, p), hot, n, d) {
					same++
				}
				continue
			}
			want, err := cd.Encode(nil, hot, n, d)
			if err != nil {
				t.Fatal(err)
			}
			checkWhitenedBlock(t, cd, deviceBytes(t, gpu, p), want, n, d)
		}
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d real factors (d %d), kernel level %s: device blocks checked against the host's (%d of kakeya-pc's its bytes)", spec, len(cal.Chol), d, cpu.Level(), same)
	}
}

// preconditionedStore makes a fake backend (without the step graph where
// noStep) and a block store of n x d rows (bf16 or float32) that encodes
// cd on the device, at the bytes of its inner codec.
func preconditionedStore(t *testing.T, cd, inner codec.Codec, n, d int, bf16, noStep bool) (*Backend, *fakeDriver, *store, int) {
	t.Helper()
	gpu, f := newFakeBackend(t, Options{NoStepGraph: noStep})
	pe := gpu.NewBlockStore(n, d, bf16).(*store)
	size, ok := pe.EncodedLen(cd)
	if !ok {
		t.Fatalf("%s: not encoded on the device", cd.Name())
	}
	if in, _ := pe.EncodedLen(inner); in != size {
		t.Fatalf("%s: %d encoded bytes, its inner codec %d", cd.Name(), size, in)
	}
	return gpu, f, pe, size
}

// encodeBatch writes each of rows (n x d values) into a new part of s,
// reads back the hot values each part then holds (the rows, rounded to
// bf16 in a bf16 store), encodes every part by cd in one EncodeParts and
// gives the queue to the driver. It returns the parts, their hot values,
// and the enc_whiten launches and the launches of the encoders named
// that the encoding made.
func encodeBatch(t *testing.T, gpu *Backend, f *fakeDriver, s *store, cd compute.Decoder, rows [][]float32, n, d int, encoders ...string) (ps []compute.Part, hots [][]float32, whitens, encs int) {
	t.Helper()
	for _, x := range rows {
		p, err := s.NewPart()
		if err != nil {
			t.Fatal(err)
		}
		s.Write(p, 0, upload(gpu, x), d, n)
		hot := make([]float32, n*d)
		if err := s.Read(hot, p); err != nil {
			t.Fatal(err)
		}
		ps, hots = append(ps, p), append(hots, hot)
	}
	count := func() int {
		k := 0
		for _, e := range encoders {
			k += kernelCount(f, e)
		}
		return k
	}
	whiten, enc := kernelCount(f, "enc_whiten"), count()
	decs := make([]compute.Decoder, len(ps))
	for i := range decs {
		decs[i] = cd
	}
	if err := s.EncodeParts(ps, decs); err != nil {
		t.Fatal(err)
	}
	gpu.mu.Lock()
	gpu.flushQueue()
	gpu.mu.Unlock()
	return ps, hots, kernelCount(f, "enc_whiten") - whiten, count() - enc
}

// whitenAlone writes rows (n x d) into a new part of s and encodes it
// alone with the preconditioned cd (encodeOnDevice), and checks the whitened rows enc_whiten
// leaves at the start of the encoders' scratch against the host's
// whitening (cpu.MixBlock): bit for bit where the host's products fuse as
// the device's (fmaWhitening), else within 1e-5. It returns the part and
// the rows it held.
func whitenAlone(t *testing.T, gpu *Backend, s *store, cd *codec.Preconditioned, rows []float32, n, d int) (compute.Part, []float32) {
	t.Helper()
	p, hot := encodeOnDevice(t, gpu, s, cd, rows, n, d)
	y := make([]float32, n*d)
	gpu.mu.Lock()
	gpu.flushQueue()
	err := gpu.copyOut(bytesOf(y), gpu.enc.y)
	gpu.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n*d)
	cpu.MixBlock(want, n, hot, d, cd.Factor(), d, d)
	if diff := maxAbsDiff(y, want); fmaWhitening() && diff != 0 || diff > 1e-5*max(1, maxAbs(want)) {
		t.Errorf("enc_whiten's rows are %.3g from the host's whitening (kernel level %s)", diff, cpu.Level())
	}
	return p, hot
}
