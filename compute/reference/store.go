package reference

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

// part holds one block's rows as float32 (rounded to bf16 when the store
// is), or codec bytes and their decoder.
type part struct {
	rows []float32
	enc  []byte
	dec  compute.Decoder
	n, d int
}

func (p *part) Encoded() bool { return p.dec != nil }

// store makes a new part for every block; nothing is reused.
type store struct {
	rows, d int
	bf16    bool
}

// NewBlockStore returns a store of parts of rows x d values.
func (Backend) NewBlockStore(rows, d int, bf16 bool) compute.BlockStore {
	return &store{rows: rows, d: d, bf16: bf16}
}

// AttendsEncoded reports true: Forward decodes every part it reads.
func (*store) AttendsEncoded(compute.Decoder) bool { return true }

func (s *store) NewPart() (compute.Part, error) {
	return &part{rows: make([]float32, s.rows*s.d), n: s.rows, d: s.d}, nil
}

func (s *store) Write(p compute.Part, row int, src compute.Buffer, stride, rows int) {
	pt, x := p.(*part), vals(src)
	for i := 0; i < rows; i++ {
		for j := 0; j < s.d; j++ {
			v := x[i*stride+j]
			if s.bf16 {
				v = tensor.BF16ToF32(tensor.F32ToBF16(v))
			}
			pt.rows[(row+i)*s.d+j] = v
		}
	}
}

func (s *store) Read(dst []float32, p compute.Part) error { return readPart(dst, p) }

// readPart copies or decodes a part's rows into dst.
func readPart(dst []float32, p compute.Part) error {
	pt, ok := p.(*part)
	if !ok {
		return fmt.Errorf("reference: a %T is not a reference block part", p)
	}
	if pt.dec == nil {
		copy(dst, pt.rows)
		return nil
	}
	if err := pt.dec.Decode(dst[:pt.n*pt.d], pt.enc, pt.n, pt.d); err != nil {
		return fmt.Errorf("reference: %s: %w", pt.dec.Name(), err)
	}
	return nil
}

func (s *store) SetEncoded(p compute.Part, enc []byte, dec compute.Decoder) error {
	pt := p.(*part)
	pt.enc, pt.dec, pt.rows = append([]byte(nil), enc...), dec, nil
	return nil
}

func (s *store) Release(compute.Part) {}
