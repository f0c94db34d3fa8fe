package codec

import (
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// Int4Options configures Int4.
type Int4Options struct {
	// Bits is the code width: 4 (the default when 0) or 2 (KIVI's 2-bit
	// caches).
	Bits int
	// Group is the number of values sharing one fp16 (min, scale) pair.
	Group int
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
// rotation.
func DefaultInt4Options() Int4Options { return Int4Options{Bits: 4, Group: 32, Seed: defaultSeed} }

const defaultSeed = 0x6b616b657961 // "kakeya"

// Int4 is asymmetric 4-bit (or, with Bits 2, 2-bit) group quantization:
// each group of Group values stores an fp16 minimum and fp16 step, and each
// value a code of Bits bits. With p = d (or NextPow2(d) when rotating) and
// G = Group, the encoded length is 16 + 4*groups + ceil(n*p*Bits/8) bytes,
// where groups = n*ceil(p/G) per token or p*ceil(n/G) per channel: 5 bits
// per value at 4 bits and G = 32, 3 at 2 bits.
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

// Name is "int4" (or "int2"), "-k" per channel, "-rot" when rotating and
// "-g<G>" when the group is not 32.
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
	return p
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
	dst = appendHeader(dst, idInt4, c.param(), n, d, c.tag())
	dst = grow(dst, 4*groups)
	params := dst[len(dst)-4*groups:]
	for k := 0; k < groups; k++ {
		first, stride, count := c.group(k, n, p)
		mn, mx := float32(math.Inf(1)), float32(math.Inf(-1))
		for t, j := 0, first; t < count; t, j = t+1, j+stride {
			mn, mx = min(mn, z[j]), max(mx, z[j])
		}
		m := f16Floor(mn)
		s := roundF16(max(0, (mx-m)/float32(top)))
		putF16(params[4*k:], m)
		putF16(params[4*k+2:], s)
		var inv float32
		if s > 0 {
			inv = 1 / s
		}
		for t, j := 0, first; t < count; t, j = t+1, j+stride {
			q := math.RoundToEven(float64((z[j] - m) * inv))
			codes[j] = uint8(max(0, min(float64(top), q)))
		}
	}
	dst = PackBits(dst, codes, c.opt.Bits)
	seal(dst[start:])
	return dst, nil
}

// Decode dequantizes every group and undoes the rotation.
func (c *Int4) Decode(dst []float32, src []byte, n, d int) error {
	name := c.Name()
	if err := checkShape(name, n, d, len(dst), "destination"); err != nil {
		return err
	}
	pl, err := checkHeader(name, src, idInt4, c.param(), n, d, c.tag())
	if err != nil {
		return err
	}
	p, groups := c.layout(n, d)
	if want := 4*groups + PackedLen(n*p, c.opt.Bits); len(pl) != want {
		return fmt.Errorf("codec: %s: payload is %d bytes, want %d", name, len(pl), want)
	}
	sc := c.pool.get()
	defer c.pool.put(sc)
	z := dst
	if c.opt.Rotate {
		sc.f = growF32(sc.f, n*p)
		z = sc.f
	}
	bits, g := c.opt.Bits, c.opt.Group
	if !c.opt.PerChannel && g*bits%8 == 0 && p%g == 0 {
		// Per-token groups that start on a byte (the default layout):
		// widen the parameters at once, check them, then unpack each
		// group's codes straight to its levels m + c·s, computed as the
		// loop below does.
		sc.params = growF32(sc.params, 2*groups)
		prm := sc.params
		ok := cpu.WidenF16(prm, pl[:4*groups])
		for k := 0; k < groups; k++ {
			if m, s := prm[2*k], prm[2*k+1]; !ok && (!finite32(m) || !finite32(s)) || s < 0 {
				return fmt.Errorf("codec: %s: group %d has min %v step %v", name, k, m, s)
			}
		}
		cpu.UnpackAffine(z, pl[4*groups:], bits, g, prm)
	} else {
		sc.u8 = growU8(sc.u8, n*p)
		codes := sc.u8
		if err := UnpackBits(codes, pl[4*groups:], bits); err != nil {
			return fmt.Errorf("codec: %s: %w", name, err)
		}
		for k := 0; k < groups; k++ {
			m, s := getF16(pl[4*k:]), getF16(pl[4*k+2:])
			if !finite32(m) || !finite32(s) || s < 0 {
				return fmt.Errorf("codec: %s: group %d has min %v step %v", name, k, m, s)
			}
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
