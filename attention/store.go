package attention

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	kern "github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/tensor"
)

// part is one block's keys or values for one KV head in host memory: hot
// float32 or bf16 rows, or codec bytes with their decoder.
type part struct {
	hot   []float32 // rows*d values, nil once encoded or when bf16
	hot16 []uint16  // rows*d bf16 values, nil once encoded or when float32
	enc   []byte
	dec   compute.Decoder // nil while hot
	// The fast paths dec declares, resolved once when the part is
	// encoded: nil where its codec has none.
	rot   codec.RotaryDecoder
	comb  codec.RowCombiner
	multi codec.BlocksDecoder
	run   codec.RunAttender // nil also where its kernels do not run for the store's blocks
}

func (p *part) Encoded() bool { return p.dec != nil }

// values returns the part's rows x d values as float32: a float32 hot part
// as it is, a bf16 or encoded one widened or decoded into scratch.
func (p *part) values(scratch []float32, rows, d int) ([]float32, error) {
	n := rows * d
	switch {
	case p.hot != nil:
		return p.hot, nil
	case p.hot16 != nil:
		widen(scratch[:n], p.hot16)
	default:
		if err := p.dec.Decode(scratch[:n], p.enc, rows, d); err != nil {
			return nil, fmt.Errorf("%s: %w", p.dec.Name(), err)
		}
	}
	return scratch[:n], nil
}

// store is a compute.BlockStore in host memory: parts whose hot storage
// and encoded buffers are reused once released.
type store struct {
	rows, d int
	bf16    bool
	free    [][]float32 // hot float32 storage ready for reuse
	free16  [][]uint16  // hot bf16 storage ready for reuse
	parts   []*part     // released parts, keeping their encoded buffers
}

// NewStore returns a store of parts of rows x d values in host memory, hot
// parts in bf16 or float32; the attention of New reads its parts.
func NewStore(rows, d int, bf16 bool) compute.BlockStore {
	return &store{rows: rows, d: d, bf16: bf16}
}

// AttendsEncoded reports true: host attention decodes any codec's blocks
// as it reads them.
func (s *store) AttendsEncoded(compute.Decoder) bool { return true }

func (s *store) NewPart() (compute.Part, error) {
	var p *part
	if n := len(s.parts); n > 0 {
		p, s.parts = s.parts[n-1], s.parts[:n-1]
	} else {
		p = new(part)
	}
	p.enc, p.dec, p.rot, p.comb, p.multi, p.run = p.enc[:0], nil, nil, nil, nil, nil
	n := s.rows * s.d
	if s.bf16 {
		if k := len(s.free16); k > 0 {
			p.hot16, s.free16 = s.free16[k-1], s.free16[:k-1]
		} else {
			p.hot16 = make([]uint16, n)
		}
		return p, nil
	}
	if k := len(s.free); k > 0 {
		p.hot, s.free = s.free[k-1], s.free[:k-1]
	} else {
		p.hot = make([]float32, n)
	}
	return p, nil
}

// own returns p as a part of this backend.
func own(p compute.Part) *part {
	pt, ok := p.(*part)
	if !ok {
		panic(fmt.Sprintf("cpu: a %T is not a part of a CPU block store", p))
	}
	return pt
}

func (s *store) Write(p compute.Part, row int, src compute.Buffer, stride, rows int) {
	pt, x, d := own(p), compute.Host(src), s.d
	for i := range rows {
		r := x[i*stride : i*stride+d]
		if pt.hot16 != nil {
			dst := pt.hot16[(row+i)*d : (row+i+1)*d]
			for j, v := range r {
				dst[j] = tensor.F32ToBF16(v)
			}
		} else {
			copy(pt.hot[(row+i)*d:(row+i+1)*d], r)
		}
	}
}

func (s *store) Read(dst []float32, p compute.Part) error {
	if n := s.rows * s.d; len(dst) < n {
		return fmt.Errorf("cpu: read of a %dx%d block into %d values", s.rows, s.d, len(dst))
	}
	v, err := own(p).values(dst, s.rows, s.d)
	if err == nil {
		copy(dst, v) // a float32 hot part is returned in place
	}
	return err
}

func (s *store) SetEncoded(p compute.Part, enc []byte, dec compute.Decoder) error {
	pt := own(p)
	if dec == nil {
		return fmt.Errorf("cpu: encoded block without a decoder")
	}
	// A block that attention will read in runs is checked whole here,
	// once, and its runs then skip the checks that read all its bytes (the
	// fixed-width kakeya-pc CRC-32C; header, sizes and fields are read at
	// every step still). That is safe because the bytes checked are the
	// part's own copy, which nothing writes until Release: the cache's
	// full blocks are immutable. What it gives up is noticing memory
	// corruption of those bytes after the write.
	run, ok := dec.(codec.RunAttender)
	if ok && run.RunSupported(s.rows, s.d) {
		if err := run.CheckBlock(enc, s.rows, s.d); err != nil {
			return fmt.Errorf("cpu: refused encoded block: %w", err)
		}
	} else {
		run = nil
	}
	pt.enc, pt.dec = append(pt.enc[:0], enc...), dec
	pt.rot, _ = dec.(codec.RotaryDecoder)
	pt.comb, _ = dec.(codec.RowCombiner)
	pt.multi, _ = dec.(codec.BlocksDecoder)
	pt.run = run
	s.releaseHot(pt)
	return nil
}

func (s *store) Release(p compute.Part) {
	pt := own(p)
	s.releaseHot(pt)
	pt.dec, pt.rot, pt.comb, pt.multi, pt.run = nil, nil, nil, nil, nil
	s.parts = append(s.parts, pt)
}

func (s *store) releaseHot(pt *part) {
	if pt.hot != nil {
		s.free = append(s.free, pt.hot)
		pt.hot = nil
	}
	if pt.hot16 != nil {
		s.free16 = append(s.free16, pt.hot16)
		pt.hot16 = nil
	}
}

// widen converts bf16 values to float32 through the weights' conversion
// kernel.
func widen(dst []float32, x []uint16) {
	kern.RowF32(dst, tensor.Mat{DType: tensor.BF16, Rows: 1, Cols: len(x), U16: x}, 0)
}
