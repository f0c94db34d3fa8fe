package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// enc_int4 writes codec.Int4's bytes bit for bit, header and CRC
// included, for every unrotated int4 and int2 codec attention reads: per
// token and per channel, 8-bit and fp16 group parameters, groups of 16 to
// 64, head dims 64 and 128, blocks of 16 to 64 rows (and 13, a partial
// channel group), float32 and bf16 parts, with all-zero groups, -0 and
// outlier values.
func TestEncodeInt4OnDevice(t *testing.T) {
	needKernels(t, "enc_int4", "kv_write")
	for _, c := range []struct {
		spec string
		n, d int
		bf16 bool
	}{
		{"int4", 16, 64, false}, {"int4", 64, 128, true}, {"int2", 16, 64, true}, {"int2", 64, 128, false},
		{"int4-k", 16, 64, false}, {"int4-k", 64, 128, true}, {"int2-k", 32, 64, true}, {"int2-k", 13, 128, false},
		{"int4:params=f16", 16, 64, false}, {"int2-k:params=f16", 32, 128, true},
		{"int4:group=16", 16, 128, false}, {"int4-k:group=64", 64, 64, true}, {"int2:group=64", 16, 128, true},
	} {
		name := fmt.Sprintf("%s/%dx%d", c.spec, c.n, c.d)
		if c.bf16 {
			name += "/bf16"
		}
		t.Run(name, func(t *testing.T) {
			spec, err := codec.ParseSpec(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			cd, err := codec.New(spec)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(4, uint64(c.n*c.d)))
			gpu, _ := newFakeBackend(t, Options{})
			store := gpu.NewBlockStore(c.n, c.d, c.bf16)
			if _, ok := store.(compute.PartEncoder).EncodedLen(cd); !ok {
				t.Fatalf("%s: not encoded on the device", cd.Name())
			}
			for rep := range 3 {
				x := randFloats(r, c.n*c.d)
				for i := range x {
					switch i % 89 {
					case 0:
						x[i] *= 40 // an outlier
					case 1:
						x[i] = float32(math.Copysign(0, -1))
					case 2:
						x[i] = 0.5 // values on exact levels
					}
				}
				if rep == 1 {
					clear(x[:min(64, c.n*c.d)]) // zero groups (per token)
					for i := 0; i < c.n; i++ {
						x[i*c.d+c.d-1] = 0 // a zero channel (per channel)
					}
				}
				if rep == 2 {
					for i := range x {
						x[i] = x[i]*0.01 + 3 // one sign: the zero point far from 0
					}
				}
				p, hot := encodeOnDevice(t, gpu, store, cd, x, c.n, c.d)
				want, err := cd.Encode(nil, hot, c.n, c.d)
				if err != nil {
					t.Fatal(err)
				}
				sameBytes(t, fmt.Sprintf("%s's for block %d", cd.Name(), rep), deviceBytes(t, gpu, p), want)
				// And Read decodes them as the codec does.
				dec, ref := make([]float32, c.n*c.d), make([]float32, c.n*c.d)
				if err := store.Read(dec, p); err != nil {
					t.Fatal(err)
				}
				if err := cd.Decode(ref, want, c.n, c.d); err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(dec, ref); d != 0 {
					t.Fatalf("block %d: Read returns values %.3g from the codec's decode", rep, d)
				}
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A value the int4 encoder refuses (non-finite, or past half of fp16's
// range) gives a block the codec rejects; the rotated int4 codecs, which
// attention does not read, are declined.
func TestEncodeInt4OnDeviceRefuses(t *testing.T) {
	needKernels(t, "enc_int4", "kv_write")
	const n, d = 16, 64
	r := rand.New(rand.NewPCG(8, 10))
	for _, spec := range []string{"int4", "int2-k"} {
		cd, err := codec.New(codec.Spec{Name: spec})
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []float32{float32(math.NaN()), 40000} {
			gpu, _ := newFakeBackend(t, Options{})
			store := gpu.NewBlockStore(n, d, false)
			x := randFloats(r, n*d)
			x[77] = bad
			p, _ := encodeOnDevice(t, gpu, store, cd, x, n, d)
			if err := store.Read(make([]float32, n*d), p); err == nil {
				t.Errorf("%s: Read of a block encoded from %v succeeded, want the codec's error", spec, bad)
			}
		}
	}
	gpu, _ := newFakeBackend(t, Options{})
	store := gpu.NewBlockStore(n, d, false).(compute.PartEncoder)
	for _, spec := range []string{"int4-rot", "int2-k-rot", "int4:group=24"} {
		sp, err := codec.ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		cd, err := codec.New(sp)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := store.EncodedLen(cd); ok {
			t.Errorf("%s: encoded on the device", cd.Name())
		}
	}
}
