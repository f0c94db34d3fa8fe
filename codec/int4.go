package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/tensor"
)

func init() {
	for _, name := range []string{"int4", "int4-rot", "int4-k", "int4-k-rot", "int2", "int2-rot", "int2-k", "int2-k-rot"} {
		Register(Registration{Name: name, Formats: []FormatID{FormatInt4}, New: newInt4Spec})
	}
}

// newInt4Spec builds the int4/int2 codec a spec names: the name gives the
// width (int2), per-channel scales (-k) and the rotation (-rot).
func newInt4Spec(s Spec, a *Args) (Codec, error) {
	o := DefaultInt4Options()
	if strings.HasPrefix(s.Name, "int2") {
		o.Bits = 2
	}
	o.PerChannel = strings.Contains(s.Name, "-k")
	o.Rotate = strings.HasSuffix(s.Name, "-rot")
	a.IntIn("group", &o.Group, 1, 65535)
	a.Uint64("seed", &o.Seed)
	if v, ok := a.Get("params"); ok {
		switch v {
		case "f16":
			o.F16Params = true
		case "8bit":
		default:
			a.Fail("params", v, errors.New("want 8bit (the default) or f16"))
		}
	}
	if a.Err() != nil {
		return nil, nil
	}
	return NewInt4(o)
}

// Int4Options configures Int4.
type Int4Options struct {
	// Bits is the code width: 4 (the default when 0) or 2 (KIVI's 2-bit
	// caches).
	Bits int
	// Group is the number of values sharing one minimum and step.
	Group int
	// F16Params stores each group's minimum and step as two fp16 values
	// (KIVI's layout: 32 bits per group, 1 bit per value at groups of 32).
	// Otherwise, the default, a group stores its step as an 8-bit code on
	// a log scale below one fp16 step per encoded block, and its minimum as
	// an 8-bit integer multiple of that step (a zero point): 16 bits per
	// group, 0.5 bits per value at groups of 32 — llama.cpp q4_0's
	// overhead, with q4_1's asymmetric range.
	F16Params bool
	// PerChannel runs groups along the token axis for each channel (KIVI's
	// choice for keys, whose outliers live in fixed channels); otherwise
	// groups run along each vector (KIVI's choice for values).
	PerChannel bool
	// Rotate applies a randomized normalised Walsh–Hadamard transform to
	// every vector (zero-padded to a power of two) before quantizing, as in
	// QuaRot and llama.cpp's rotated caches, and inverts it after decoding.
	Rotate bool
	// Seed fixes the random signs of the rotation.
	Seed uint64
}

// DefaultInt4Options returns 4-bit codes in groups of 32 per token without
// rotation, with 8-bit group parameters: 4.5 bits per value.
func DefaultInt4Options() Int4Options { return Int4Options{Bits: 4, Group: 32, Seed: defaultSeed} }

const defaultSeed = 0x6b616b657961 // "kakeya"

// Int4 is asymmetric 4-bit (or, with Bits 2, 2-bit) group quantization:
// each group of Group values has a minimum m and a step s, and each value a
// code c of Bits bits, decoded as m + c*s. With p = d (or NextPow2(d) when
// rotating) and G = Group, the encoded length is 16 + 2 + 2*groups +
// ceil(n*p*Bits/8) bytes (with F16Params 16 + 4*groups + ...), where groups
// = n*ceil(p/G) per token or p*ceil(n/G) per channel: 4.5 bits per value at
// 4 bits and G = 32 (5 with F16Params), 2.5 at 2 bits (3).
//
// The default parameters: after the header one fp16 step S for the block,
// then per group a byte e and a signed byte z, giving s = S * 2^(-e/16)
// (stepScale) and m = z*s: the group's 2^Bits levels are consecutive
// multiples of its step, placed to cover its range.
type Int4 struct {
	opt   Int4Options
	name  string
	signs []float32 // ±1 per padded coordinate when rotating
	pool  scratchPool
}

// NewInt4 validates o and returns the codec.
func NewInt4(o Int4Options) (*Int4, error) {
	if o.Group < 1 || o.Group > 65535 {
		return nil, fmt.Errorf("codec: int4: group %d not in 1..65535", o.Group)
	}
	switch o.Bits {
	case 0:
		o.Bits = 4
	case 2, 4:
	default:
		return nil, fmt.Errorf("codec: int4: bits %d, want 2 or 4", o.Bits)
	}
	c := &Int4{opt: o}
	c.name = c.makeName()
	if o.Rotate {
		c.signs = randomSigns(maxDim, o.Seed)
	}
	return c, nil
}

// Name is "int4" (or "int2"), "-k" per channel, "-rot" when rotating,
// "-f16" with F16Params and "-g<G>" when the group is not 32.
func (c *Int4) Name() string { return c.name }

// Options returns the codec's settings (Bits filled in), for a backend
// that reads its blocks itself.
func (c *Int4) Options() Int4Options { return c.opt }

func (c *Int4) makeName() string {
	s := fmt.Sprintf("int%d", c.opt.Bits)
	if c.opt.PerChannel {
		s += "-k"
	}
	if c.opt.Rotate {
		s += "-rot"
	}
	if c.opt.F16Params {
		s += "-f16"
	}
	if c.opt.Group != 32 {
		s += fmt.Sprintf("-g%d", c.opt.Group)
	}
	return s
}

func (c *Int4) param() byte {
	p := byte(c.opt.Bits)
	if c.opt.PerChannel {
		p |= 0x10
	}
	if c.opt.Rotate {
		p |= 0x20
	}
	if !c.opt.F16Params {
		p |= 0x40
	}
	return p
}

// paramLen is the length of the group parameters of a block of the given
// number of groups: the step and groups sections of formatInt4.
func (c *Int4) paramLen(groups int) int {
	if c.opt.F16Params {
		return 4 * groups
	}
	return 2 + 2*groups
}

// The sections of formatInt4.
const (
	int4Step = iota
	int4Groups
	int4Codes
)

// vars returns the layout variables of a block of n x d.
func (c *Int4) vars(n, d int) Vars {
	var v Vars
	v[VarN], v[VarD], v[VarBits], v[VarGroup] = n, d, c.opt.Bits, c.opt.Group
	v[VarPerChannel], v[VarRotated], v[VarByteParams] = b2i(c.opt.PerChannel), b2i(c.opt.Rotate), b2i(!c.opt.F16Params)
	return v
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Format returns the int4 format (int2 blocks are int4's with 2-bit codes).
func (c *Int4) Format() *Format { return formatInt4 }

// Settings returns the code width, group and layout flags, and the
// rotation's signs when rotating.
func (c *Int4) Settings() Settings {
	return Settings{Bits: c.opt.Bits, Group: c.opt.Group, PerChannel: c.opt.PerChannel, Rotated: c.opt.Rotate,
		ByteParams: !c.opt.F16Params, signs: c.signs}
}

// stepScales[r] is 2^(-r/16) rounded to float32 (the CUDA kernel holds the
// same constants).
var stepScales = [16]float32{
	0x1p+0, 0x1.ea4afap-1, 0x1.d5818ep-1, 0x1.c199bep-1,
	0x1.ae89fap-1, 0x1.9c4918p-1, 0x1.8ace54p-1, 0x1.7a1148p-1,
	0x1.6a09e6p-1, 0x1.5ab07ep-1, 0x1.4bfdaep-1, 0x1.3dea64p-1,
	0x1.306fep-1, 0x1.2387a6p-1, 0x1.172b84p-1, 0x1.0b5586p-1,
}

// stepScale returns 2^(-e/16) for a step code e: exact products of a table
// value and a power of two, so every decoder computes the same step S*scale.
func stepScale(e byte) float32 {
	return stepScales[e&15] * math.Float32frombits(uint32(127-e>>4)<<23)
}

func (c *Int4) tag() uint16 {
	t := uint16(c.opt.Group)
	if c.opt.Rotate {
		t ^= uint16(c.opt.Seed*0x9e3779b97f4a7c15>>48) &^ 0xff
	}
	return t
}

// layout returns the coded width per row and the number of groups.
func (c *Int4) layout(n, d int) (p, groups int) {
	p = d
	if c.opt.Rotate {
		p = NextPow2(d)
	}
	g := c.opt.Group
	if c.opt.PerChannel {
		return p, p * ((n + g - 1) / g)
	}
	return p, n * ((p + g - 1) / g)
}

// group returns the flat indexes [first, first+count*stride) of group k.
func (c *Int4) group(k, n, p int) (first, stride, count int) {
	g := c.opt.Group
	if c.opt.PerChannel {
		per := (n + g - 1) / g
		ch, t := k/per, (k%per)*g
		return t*p + ch, p, min(g, n-t)
	}
	per := (p + g - 1) / g
	row, j := k/per, (k%per)*g
	return row*p + j, 1, min(g, p-j)
}

// Encode appends header, the (min, step) pairs in group order and the codes
// of the (rotated) n x p matrix in row-major order, two per byte.
func (c *Int4) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	name := c.Name()
	am, err := checkInput(name, x, n, d)
	if err != nil {
		return dst, err
	}
	x = x[:n*d]
	p, groups := c.layout(n, d)
	limit := am
	if c.opt.Rotate {
		limit *= float32(math.Sqrt(float64(d))) // a rotated coordinate is at most the norm
	}
	if limit > maxF16/2 {
		return dst, fmt.Errorf("codec: %s: |value| %v exceeds the fp16 parameter range", name, am)
	}
	sc := c.pool.get()
	defer c.pool.put(sc)
	z := x
	if c.opt.Rotate {
		sc.f = growF32(sc.f, n*p)
		z = sc.f
		for i := 0; i < n; i++ {
			r := z[i*p : (i+1)*p]
			copy(r, x[i*d:(i+1)*d])
			clear(r[d:])
			for j := range r {
				r[j] *= c.signs[j]
			}
			fwht(r)
		}
	}
	sc.u8 = growU8(sc.u8, n*p)
	codes := sc.u8
	top := 1<<c.opt.Bits - 1 // the largest code
	start := len(dst)
	v := c.vars(n, d)
	l := formatInt4.Layout(&v)
	dst = appendHeader(dst, FormatInt4, c.param(), n, d, c.tag())
	dst = grow(dst, l.Off(int4Codes)-headerLen)
	params := dst[start+l.Off(int4Step):]
	if c.opt.F16Params {
		for k := 0; k < groups; k++ {
			first, stride, count := c.group(k, n, p)
			mn, mx := groupRange(z, first, stride, count)
			m := f16Floor(mn)
			s := roundF16(max(0, (mx-m)/float32(top)))
			putF16(params[4*k:], m)
			putF16(params[4*k+2:], s)
			codeGroup(codes, z, first, stride, count, m, s, top)
		}
	} else {
		c.quantize(params, codes, z, n, p, groups, sc)
	}
	dst = PackBits(dst, codes, c.opt.Bits)
	seal(dst[start:])
	return dst, nil
}

// quantize writes the default layout's parameters (S, then e and z per
// group) to params and every value's code to codes.
func (c *Int4) quantize(params, codes []byte, z []float32, n, p, groups int, sc *scratch) {
	top := 1<<c.opt.Bits - 1
	// Each group's smallest step: its levels must span its range, and its
	// zero point fit a signed byte. The block's step S is the largest.
	sc.params = growF32(sc.params, 2*groups)
	mins, need := sc.params[:groups], sc.params[groups:2*groups]
	var S float32
	for k := 0; k < groups; k++ {
		first, stride, count := c.group(k, n, p)
		mn, mx := groupRange(z, first, stride, count)
		mins[k] = mn
		need[k] = max((mx-mn)/float32(top), -mn/128, mn/127)
		S = max(S, need[k])
	}
	// S rounded up to fp16, so that e = 0 leaves every group room (at
	// most one level lost to the zero point's rounding: (top-1)*S still
	// spans the range the largest group needs).
	S16 := tensor.F32ToF16(S)
	if tensor.F16ToF32(S16) < S {
		S16++
	}
	S = tensor.F16ToF32(S16)
	binary.LittleEndian.PutUint16(params, S16)
	for k := 0; k < groups; k++ {
		first, stride, count := c.group(k, n, p)
		var e byte
		var zp int
		if need[k] > 0 {
			// The group's values, contiguous, for cpu.QuantError.
			g := sc.group[:0]
			for t, j := 0, first; t < count; t, j = t+1, j+stride {
				g = append(g, z[j])
			}
			sc.group = g
			// e0 is the smallest step at or above the need. The levels of
			// a step sit at its multiples, so the group's extremes rarely
			// fall on one (fp16 minima and steps put them there): of the
			// two steps either side of e0's and the zero points at or just
			// above the minimum, keep the pair with the least squared
			// error weighted by each value's square (cpu.QuantError). The
			// weights keep the large components most exact, as fp16
			// parameters keep a group's extremes: a key's outlier channels
			// meet the queries' large components, and on ref-qwen2-6m
			// (WikiText, 100 passages) the weighted choice has about the
			// KL of the 5-bit fp16 layout (7.9e-5 against 7.5e-5; 1.06e-4
			// unweighted).
			e0 := int(min(255, max(0, math.Floor(16*math.Log2(float64(S/need[k]))))))
			best := float32(math.Inf(1))
			for ec := max(0, e0-2); ec <= min(255, e0+2); ec++ {
				s := S * stepScale(byte(ec))
				fl := int(math.Floor(float64(mins[k] / s)))
				for zc := max(-128, fl); zc <= min(127, fl+1); zc++ {
					if sse := cpu.QuantError(g, float32(zc)*s, s, float32(top), best); sse < best {
						best, e, zp = sse, byte(ec), zc
					}
				}
			}
		}
		params[2+2*k], params[3+2*k] = e, byte(int8(zp))
		s := S * stepScale(e)
		codeGroup(codes, z, first, stride, count, float32(zp)*s, s, top)
	}
}

// groupRange returns the smallest and largest of a group's values.
func groupRange(z []float32, first, stride, count int) (mn, mx float32) {
	mn, mx = float32(math.Inf(1)), float32(math.Inf(-1))
	for t, j := 0, first; t < count; t, j = t+1, j+stride {
		mn, mx = min(mn, z[j]), max(mx, z[j])
	}
	return mn, mx
}

// codeGroup sets the codes of a group's values for levels m + c*s, c in
// [0, top]: the nearest, ties to even.
func codeGroup(codes []byte, z []float32, first, stride, count int, m, s float32, top int) {
	var inv float32
	if s > 0 {
		inv = 1 / s
	}
	tf := float32(top)
	for t, j := 0, first; t < count; t, j = t+1, j+stride {
		// Clamped, then rounded (ties to even) by adding and taking away
		// 1.5*2^23: the same codes as rounding first, without a float64
		// round trip.
		x := (z[j] - m) * inv
		if x < 0 {
			x = 0
		}
		if x > tf {
			x = tf
		}
		codes[j] = uint8(float32(x+0x1.8p23) - 0x1.8p23)
	}
}

// readParams widens the groups' parameters of block src (laid out as l
// says) to (m, s) pairs in prm.
func (c *Int4) readParams(prm []float32, src []byte, l *Layout, groups int) error {
	name := c.Name()
	gp := src[l.Off(int4Groups):]
	if c.opt.F16Params {
		ok := cpu.WidenF16(prm, gp[:4*groups])
		for k := 0; k < groups; k++ {
			if m, s := prm[2*k], prm[2*k+1]; !ok && (!finite32(m) || !finite32(s)) || s < 0 {
				return fmt.Errorf("codec: %s: group %d has min %v step %v", name, k, m, s)
			}
		}
		return nil
	}
	S := getF16(src[l.Off(int4Step):])
	if !finite32(S) || S < 0 {
		return fmt.Errorf("codec: %s: block step %v", name, S)
	}
	for k := 0; k < groups; k++ {
		s := S * stepScale(gp[2*k])
		prm[2*k], prm[2*k+1] = float32(int8(gp[2*k+1]))*s, s
	}
	return nil
}

// Decode dequantizes every group and undoes the rotation.
func (c *Int4) Decode(dst []float32, src []byte, n, d int) error {
	name := c.Name()
	if err := checkShape(name, n, d, len(dst), "destination"); err != nil {
		return err
	}
	pl, err := checkHeader(name, src, FormatInt4, c.param(), n, d, c.tag())
	if err != nil {
		return err
	}
	p, groups := c.layout(n, d)
	v := c.vars(n, d)
	l := formatInt4.Layout(&v)
	if len(src) != l.Size() {
		return fmt.Errorf("codec: %s: payload is %d bytes, want %d", name, len(pl), l.Size()-headerLen)
	}
	sc := c.pool.get()
	defer c.pool.put(sc)
	z := dst
	if c.opt.Rotate {
		sc.f = growF32(sc.f, n*p)
		z = sc.f
	}
	sc.params = growF32(sc.params, 2*groups)
	prm := sc.params
	if err := c.readParams(prm, src, &l, groups); err != nil {
		return err
	}
	packed := src[l.Off(int4Codes):]
	bits, g := c.opt.Bits, c.opt.Group
	if !c.opt.PerChannel && g*bits%8 == 0 && p%g == 0 {
		// Per-token groups that start on a byte (the default layout):
		// unpack each group's codes straight to its levels m + c·s,
		// computed as the loop below does.
		cpu.UnpackAffine(z, packed, bits, g, prm)
	} else {
		sc.u8 = growU8(sc.u8, n*p)
		codes := sc.u8
		if err := UnpackBits(codes, packed, bits); err != nil {
			return fmt.Errorf("codec: %s: %w", name, err)
		}
		for k := 0; k < groups; k++ {
			m, s := prm[2*k], prm[2*k+1]
			first, stride, count := c.group(k, n, p)
			for t, j := 0, first; t < count; t, j = t+1, j+stride {
				z[j] = m + float32(codes[j])*s
			}
		}
	}
	if c.opt.Rotate {
		for i := 0; i < n; i++ {
			r := z[i*p : (i+1)*p]
			fwht(r)
			out := dst[i*d : (i+1)*d]
			for j := range out {
				out[j] = r[j] * c.signs[j]
			}
		}
	}
	return nil
}
