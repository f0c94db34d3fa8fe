package codec

import (
	"fmt"
	"math"
)

func init() {
	Register(Registration{Name: "turbo", MinBits: 2, MaxBits: 4, Formats: []FormatID{FormatTurbo}, New: newTurboSpec})
}

// newTurboSpec builds the Turbo codec a spec names.
func newTurboSpec(s Spec, a *Args) (Codec, error) {
	o := DefaultTurboOptions()
	if s.Bits != 0 {
		o.Bits = s.Bits
	}
	a.Int("group", &o.Block)
	a.Want("group", o.Block >= 2 && o.Block <= 1024 && o.Block&(o.Block-1) == 0, "want a power of two in 2..1024")
	a.Uint64("seed", &o.Seed)
	if a.Err() != nil {
		return nil, nil
	}
	return NewTurbo(o)
}

// TurboOptions configures Turbo.
type TurboOptions struct {
	// Bits is the width of each coordinate's code: 2, 3 or 4.
	Bits int
	// Block is the number of values sharing one norm: 32 in the llama.cpp
	// forks (a power of two; shorter vectors use their own padded width).
	Block int
	// Seed fixes the random signs of the rotation.
	Seed uint64
}

// DefaultTurboOptions returns 3-bit codes in blocks of 32, llama.cpp
// forks' turbo3.
func DefaultTurboOptions() TurboOptions { return TurboOptions{Bits: 3, Block: 32, Seed: defaultSeed} }

// Turbo is a TurboQuant-style codec, the baseline llama.cpp forks ship as
// turbo3/turbo4: every vector is cut into blocks of Block values; each
// block is scaled to unit norm, rotated by a randomized normalised
// Walsh–Hadamard transform (which makes its coordinates close to
// N(0, 1/Block)), and each coordinate is coded by the Lloyd–Max quantizer
// of that Gaussian. The block stores one fp16 norm, corrected so that the
// decoded block has the original norm. With B = min(Block, NextPow2(d))
// and d padded to a multiple of B, the encoded length is
// 16 + n*(d/B)*(2 + B*Bits/8) bytes: 3.5 bits per value for 3-bit codes in
// blocks of 32.
type Turbo struct {
	opt   TurboOptions
	name  string
	cb    *Codebook
	signs []float32
	pool  scratchPool
}

// NewTurbo validates o and returns the codec.
func NewTurbo(o TurboOptions) (*Turbo, error) {
	if o.Bits < 2 || o.Bits > 4 {
		return nil, fmt.Errorf("codec: turbo: bits %d not in 2..4", o.Bits)
	}
	if o.Block < 2 || o.Block > 1024 || o.Block&(o.Block-1) != 0 {
		return nil, fmt.Errorf("codec: turbo: block %d is not a power of two in 2..1024", o.Block)
	}
	cb, err := GaussianCodebook(o.Bits)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("turbo%d", o.Bits)
	if o.Block != 32 {
		name += fmt.Sprintf("-g%d", o.Block)
	}
	return &Turbo{opt: o, name: name, cb: cb, signs: randomSigns(maxDim, o.Seed)}, nil
}

// Name is "turbo<bits>", with "-g<B>" when the block is not 32.
func (c *Turbo) Name() string { return c.name }

// The sections of formatTurbo.
const (
	turboNorms = iota
	turboCodes
)

// Format returns the turbo format.
func (c *Turbo) Format() *Format { return formatTurbo }

// Settings returns the code width, the norm block, the codebook levels
// and the rotation's signs.
func (c *Turbo) Settings() Settings {
	return Settings{Bits: c.opt.Bits, Block: c.opt.Block, Rotated: true, Levels: append([]float32(nil), c.cb.Levels...), signs: c.signs}
}

func (c *Turbo) tag() uint16 {
	return uint16(c.opt.Block) ^ uint16(c.opt.Seed*0x9e3779b97f4a7c15>>48)&^0x7ff
}

// layout returns the block width and the padded row width.
func (c *Turbo) layout(d int) (b, p int) {
	b = min(c.opt.Block, NextPow2(d))
	return b, (d + b - 1) / b * b
}

// Encode appends the header, then per block of each row its fp16 corrected
// norm, then all codes, Bits per coordinate, row by row.
func (c *Turbo) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	name := c.Name()
	if _, err := checkInput(name, x, n, d); err != nil {
		return dst, err
	}
	b, p := c.layout(d)
	sc := c.pool.get()
	defer c.pool.put(sc)
	sc.f = growF32(sc.f, p)
	row := sc.f
	sc.u8 = growU8(sc.u8, n*p)
	codes := sc.u8
	start := len(dst)
	dst = appendHeader(dst, FormatTurbo, byte(c.opt.Bits), n, d, c.tag())
	l := formatTurbo.Layout(&Vars{VarN: n, VarD: d, VarBits: c.opt.Bits, VarBlock: c.opt.Block})
	dst = grow(dst, l.Len(turboNorms))
	norms := dst[start+l.Off(turboNorms):]
	scale := float32(math.Sqrt(float64(b))) // rotated unit-norm coordinates have variance 1/b
	for i := 0; i < n; i++ {
		copy(row, x[i*d:(i+1)*d])
		clear(row[d:])
		for k := 0; k < p/b; k++ {
			blk := row[k*b : (k+1)*b]
			var ss float64
			for _, v := range blk {
				ss += float64(v) * float64(v)
			}
			norm := math.Sqrt(ss)
			bc := codes[i*p+k*b : i*p+(k+1)*b]
			if norm == 0 {
				clear(bc)
				putF16(norms[2*(i*p/b+k):], 0)
				continue
			}
			inv := float32(1 / norm)
			for j := range blk {
				blk[j] *= inv * c.signs[k*b+j]
			}
			fwht(blk)
			// Quantize each coordinate on the unit Gaussian's grid; the
			// norm is corrected so that the decoded block keeps |x|.
			var qs float64
			for j, v := range blk {
				q := c.cb.Quantize(v * scale)
				bc[j] = uint8(q)
				l := float64(c.cb.Value(q))
				qs += l * l
			}
			corr := norm
			if qs > 0 {
				corr = norm * float64(scale) / math.Sqrt(qs)
			}
			if corr > maxF16 {
				return dst[:start], fmt.Errorf("codec: %s: block norm %v exceeds the fp16 range", name, corr)
			}
			putF16(norms[2*(i*p/b+k):], float32(corr))
		}
	}
	dst = PackBits(dst, codes, c.opt.Bits)
	seal(dst[start:])
	return dst, nil
}

// Decode rebuilds every block from its codes and norm and undoes the
// rotation.
func (c *Turbo) Decode(dst []float32, src []byte, n, d int) error {
	name := c.Name()
	if err := checkShape(name, n, d, len(dst), "destination"); err != nil {
		return err
	}
	pl, err := checkHeader(name, src, FormatTurbo, byte(c.opt.Bits), n, d, c.tag())
	if err != nil {
		return err
	}
	b, p := c.layout(d)
	l := formatTurbo.Layout(&Vars{VarN: n, VarD: d, VarBits: c.opt.Bits, VarBlock: c.opt.Block})
	if len(src) != l.Size() {
		return fmt.Errorf("codec: %s: payload is %d bytes, want %d", name, len(pl), l.Size()-headerLen)
	}
	pl = src[l.Off(turboNorms):]
	sc := c.pool.get()
	defer c.pool.put(sc)
	sc.u8 = growU8(sc.u8, n*p)
	codes := sc.u8
	if err := UnpackBits(codes, src[l.Off(turboCodes):], c.opt.Bits); err != nil {
		return fmt.Errorf("codec: %s: %w", name, err)
	}
	sc.f = growF32(sc.f, p)
	row := sc.f
	inv := float32(1 / math.Sqrt(float64(b)))
	for i := 0; i < n; i++ {
		for k := 0; k < p/b; k++ {
			norm := getF16(pl[2*(i*p/b+k):])
			if !finite32(norm) || norm < 0 {
				return fmt.Errorf("codec: %s: row %d block %d has norm %v", name, i, k, norm)
			}
			blk := row[k*b : (k+1)*b]
			for j := range blk {
				blk[j] = c.cb.Value(int(codes[i*p+k*b+j])) * inv
			}
			fwht(blk)
			for j := range blk {
				blk[j] *= norm * c.signs[k*b+j]
			}
		}
		copy(dst[i*d:(i+1)*d], row[:d])
	}
	return nil
}
