package cudabackend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/tensor"
)

// This file adds a codec from outside package codec, touching nothing
// else: its block format (a codec.Format), its encoder and parser on that
// layout, and the codec.Described methods that declare both. No backend
// knows it: the cache encodes its blocks, host attention decodes them,
// and the CUDA store keeps them hot (decoded), since no kernel reads its
// format.

// toyFormatID is above the built-in formats' ids.
const toyFormatID codec.FormatID = 200

// toySign codes each value as its sign, one bit, times its row's mean
// magnitude in fp16.
type toySign struct{ f *codec.Format }

func newToySign() toySign {
	n, d := codec.V(codec.VarN), codec.V(codec.VarD)
	return toySign{f: &codec.Format{
		ID: toyFormatID, Name: "toy-sign",
		Doc:  "One sign bit per value times its row's fp16 mean magnitude.",
		Vars: []codec.Var{codec.VarN, codec.VarD},
		Sections: []codec.Section{
			{Name: "scales", Count: n, Width: codec.Lit(16), Doc: "fp16 mean |x| per row"},
			{Name: "signs", Count: codec.Mul(n, d), Width: codec.Lit(1), Doc: "1 where x >= 0, row-major"},
		},
	}}
}

const (
	toyScales = iota
	toySigns
	toyTag = 0x7051
)

func (c toySign) Name() string              { return c.f.Name }
func (c toySign) Format() *codec.Format     { return c.f }
func (c toySign) Settings() codec.Settings  { return codec.Settings{Bits: 1} }
func (c toySign) vars(n, d int) *codec.Vars { return &codec.Vars{codec.VarN: n, codec.VarD: d} }

func (c toySign) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	if n <= 0 || d <= 0 || len(x) < n*d {
		return dst, fmt.Errorf("toy-sign: %d values for %d x %d", len(x), n, d)
	}
	l := c.f.Layout(c.vars(n, d))
	start := len(dst)
	dst = codec.AppendHeader(dst, toyFormatID, 1, n, d, toyTag)
	signs := make([]uint8, n*d)
	for i := range n {
		var s float64
		for j, v := range x[i*d : (i+1)*d] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return dst[:start], fmt.Errorf("toy-sign: value at row %d col %d is %v", i, j, v)
			}
			s += math.Abs(float64(v))
			if v >= 0 {
				signs[i*d+j] = 1
			}
		}
		dst = binary.LittleEndian.AppendUint16(dst, tensor.F32ToF16(float32(s/float64(d))))
	}
	dst = codec.PackBits(dst, signs, 1)
	if len(dst)-start != l.Size() {
		return dst[:start], fmt.Errorf("toy-sign: wrote %d bytes, the layout says %d", len(dst)-start, l.Size())
	}
	codec.Seal(dst[start:])
	return dst, nil
}

func (c toySign) Decode(dst []float32, src []byte, n, d int) error {
	if len(dst) < n*d {
		return fmt.Errorf("toy-sign: %d destination values for %d x %d", len(dst), n, d)
	}
	if _, err := codec.CheckHeader(c.f.Name, src, toyFormatID, 1, n, d, toyTag); err != nil {
		return err
	}
	l := c.f.Layout(c.vars(n, d))
	if len(src) != l.Size() {
		return fmt.Errorf("toy-sign: block of %d bytes, want %d", len(src), l.Size())
	}
	scales, signs := src[l.Off(toyScales):], src[l.Off(toySigns):]
	for i := range n {
		s := tensor.F16ToF32(binary.LittleEndian.Uint16(scales[2*i:]))
		for j := range d {
			k := i*d + j
			if signs[k/8]>>(k%8)&1 == 1 {
				dst[k] = s
			} else {
				dst[k] = -s
			}
		}
	}
	return nil
}

// toyReference is what a toy-sign block of x (n rows of d) means, in
// float64: each value's sign times its row's mean magnitude.
func toyReference(x []float32, n, d int) []float64 {
	out := make([]float64, n*d)
	for i := range n {
		var s float64
		for _, v := range x[i*d : (i+1)*d] {
			s += math.Abs(float64(v))
		}
		s /= float64(d)
		for j, v := range x[i*d : (i+1)*d] {
			out[i*d+j] = math.Copysign(s, float64(v))
			if v == 0 {
				out[i*d+j] = s
			}
		}
	}
	return out
}

// TestToyCodec runs the toy codec through the cache on the CPU and the
// CUDA backends (emulated): its blocks decode to the reference within
// fp16 rounding of the scales, the CPU's attention over them and the CUDA
// backend's (which keeps them hot, decoded, since no kernel reads the
// toy's format) match float64 attention over the reference values, and
// blocks of a format reusing a built-in id are not read as that format.
func TestToyCodec(t *testing.T) {
	needKernels(t, "attn_split", "kv_write")
	const heads, kvHeads, d, bs, total, nq = 4, 2, 32, 16, 3*16 + 5, 3
	toy := newToySign()
	if _, builtin := codec.BuiltinFormat(toy.Format().ID); builtin {
		t.Fatalf("toy format id %d is a built-in format's", toy.Format().ID)
	}
	if _, ok := encodedFormat(toy, d); ok {
		t.Fatal("the CUDA backend claims a kernel for the toy format")
	}
	// A format of another package that reuses a built-in id is not read
	// by the built-in format's kernel.
	impostor := toySign{f: &codec.Format{ID: codec.FormatInt8, Name: "impostor", Vars: toy.f.Vars, Sections: toy.f.Sections}}
	if _, ok := encodedFormat(impostor, d); ok {
		t.Fatal("the CUDA backend reads a foreign format with int8's id as int8")
	}

	r := rand.New(rand.NewPCG(23, 1))
	k, v := randFloats(r, total*kvHeads*d), randFloats(r, total*kvHeads*d)
	q := randFloats(r, nq*heads*d)
	cos, sin := ropeTables(total, d)

	// The reference: full blocks older than the hot window hold the toy's
	// values, the rest the raw rows.
	ref := func(x []float32) []float64 {
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = float64(v)
		}
		for blk := range total / bs {
			if (blk+1)*bs > total-bs { // inside the hot window
				break
			}
			for g := range kvHeads {
				rows := make([]float32, bs*d)
				for i := range bs {
					copy(rows[i*d:(i+1)*d], x[((blk*bs+i)*kvHeads+g)*d:])
				}
				for i, w := range toyReference(rows, bs, d) {
					out[((blk*bs+i/d)*kvHeads+g)*d+i%d] = w
				}
			}
		}
		return out
	}
	kRef, vRef := ref(k), ref(v)
	want := refAttention(q, kRef, vRef, nq, total-nq, heads, kvHeads, d, cos, sin)

	gpu, _ := newFakeBackend(t, Options{})
	host := cpubackend.New(1)
	defer host.Close()
	for _, be := range []struct {
		name string
		b    compute.Backend
	}{{"cpu", host}, {"cuda", gpu}} {
		t.Run(be.name, func(t *testing.T) {
			store := be.b.NewBlockStore(bs, d, false)
			c, err := kvcache.New(kvcache.Config{Layers: 1, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxTokens: total,
				Policy: kvcache.Policy{HotWindow: bs, Layers: []kvcache.LayerCodecs{{K: []codec.Codec{toy}, V: toy}}}, Store: store})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Append(0, upload(be.b, k), upload(be.b, v), total); err != nil {
				t.Fatal(err)
			}
			// The old blocks are encoded and read back as the toy's values.
			got := make([]float32, bs*d)
			encoded := 0
			for blk := range c.NumBlocks(0) {
				for g := range kvHeads {
					for side, x := range [2][]float64{kRef, vRef} {
						if !c.Encoded(0, g, blk, side) {
							continue
						}
						encoded++
						if err := c.Read(got, 0, g, blk, side); err != nil {
							t.Fatal(err)
						}
						for i, w := range got {
							rw := x[((blk*bs+i/d)*kvHeads+g)*d+i%d]
							if math.Abs(float64(w)-rw) > 1e-3*math.Abs(rw) { // fp16 scales
								t.Fatalf("block %d head %d side %d value %d: %v, reference %v", blk, g, side, i, w, rw)
							}
						}
						if be.name == "cuda" {
							// No kernel reads the toy: the part holds its
							// decoded rows in the hot slot.
							pt := own(c.Layer(0).Part(g, blk, side))
							if pt.format != partF32 || pt.encLen != 0 {
								t.Fatalf("block %d head %d side %d: CUDA part of format %d with %d encoded bytes, want hot float32", blk, g, side, pt.format, pt.encLen)
							}
						}
					}
				}
			}
			if want := 2 * kvHeads * (total/bs - 1); encoded != want {
				t.Fatalf("%d encoded parts, want %d", encoded, want)
			}
			att, err := be.b.NewAttention(compute.AttentionParams{Heads: heads, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxContext: total})
			if err != nil {
				t.Fatal(err)
			}
			out := be.b.Alloc(nq * heads * d)
			if err := att.Forward(out, upload(be.b, q), nq, total-nq, c.Layer(0), upload(be.b, cos), upload(be.b, sin)); err != nil {
				t.Fatal(err)
			}
			res := read(be.b, out)
			var worst, scale float64
			for i, w := range want {
				worst = max(worst, math.Abs(float64(res[i])-w))
				scale = max(scale, math.Abs(w))
			}
			if tol := 1e-3 * max(1, scale); worst > tol || math.IsNaN(worst) {
				t.Fatalf("attention differs from the float64 reference by %.3g (tolerance %.3g)", worst, tol)
			}
		})
	}
}

// refAttention is causal GQA attention in float64 over keys (before RoPE)
// and values of total = start+n positions, each position a row of kvHeads
// heads of d, for the n queries at positions start.. (rows of heads x d).
func refAttention(q []float32, k, v []float64, n, start, heads, kvHeads, d int, cos, sin []float32) []float64 {
	half, group, total := d/2, heads/kvHeads, start+n
	krot := make([]float64, len(k))
	for pos := range total {
		for g := range kvHeads {
			x, o := k[(pos*kvHeads+g)*d:], krot[(pos*kvHeads+g)*d:]
			for i := range half {
				c, s := float64(cos[pos*half+i]), float64(sin[pos*half+i])
				o[i] = x[i]*c - x[i+half]*s
				o[i+half] = x[i+half]*c + x[i]*s
			}
		}
	}
	out := make([]float64, n*heads*d)
	for qi := range n {
		for h := range heads {
			g := h / group
			qv := q[(qi*heads+h)*d:]
			sc := make([]float64, start+qi+1)
			m := math.Inf(-1)
			for pos := range sc {
				var s float64
				for j := range d {
					s += float64(qv[j]) * krot[(pos*kvHeads+g)*d+j]
				}
				sc[pos] = s / math.Sqrt(float64(d))
				m = max(m, sc[pos])
			}
			var sum float64
			for pos := range sc {
				sc[pos] = math.Exp(sc[pos] - m)
				sum += sc[pos]
			}
			for pos := range sc {
				for j := range d {
					out[(qi*heads+h)*d+j] += sc[pos] / sum * v[(pos*kvHeads+g)*d+j]
				}
			}
		}
	}
	return out
}
