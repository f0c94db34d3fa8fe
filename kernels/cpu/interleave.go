package cpu

import (
	"bytes"
	"fmt"

	"github.com/kakeya-ai/kakeya/tensor"
)

// interleaved is a quantized matrix's rows as Pool.Prepare lays them out
// for the kernels of an interleaved format (tensor.Q4_Kx8,
// tensor.Q5_Kx8, tensor.Q6_Kx8, tensor.Q8_0x8, tensor.Q4_0x8,
// tensor.Q5_0x8): its first
// rows, a multiple of the format's group, in groups; the rows after them
// as stored, in a copy of their own (so that the stored matrix's memory is
// not held).
type interleaved struct {
	f      *tensor.InterleavedFormat
	groups []byte // rows [0, rows) in f's layout
	gb     int    // bytes per group
	rows   int
	rest   []byte   // rows [rows, Mat.Rows) as stored
	off    [6]int64 // x8Offsets(f)
}

// x8Offsets returns the C kernels' offsets (kq_rows_x8's off[]) of f,
// read from its description: group block bytes, d, dmin, scales
// (Q4_Kx8's and Q5_Kx8's with the mins), qs, qh (-1 where f has none).
func x8Offsets(f *tensor.InterleavedFormat) [6]int64 {
	o := [6]int64{int64(f.Bytes), -1, -1, -1, -1, -1}
	for _, fl := range f.Fields {
		switch fl.Name {
		case "d":
			o[1] = int64(fl.Offset)
		case "dmin":
			o[2] = int64(fl.Offset)
		case "scales":
			o[3] = int64(fl.Offset)
		case "qs":
			o[4] = int64(fl.Offset)
		case "qh":
			o[5] = int64(fl.Offset)
		}
	}
	return o
}

// interleaves reports whether the kernels this process runs read m's rows
// interleaved, for a type with an interleaved format and at least one
// whole group of rows: the AVX2 family's, every such type
// (KAKEYA_CPU=avx2, or a CPU without AVX-512 VNNI), and the AVX-512
// family's, the K types (x8AVX512; the 32-value types' AVX-512 kernels
// read the rows as stored).
func interleaves(m *tensor.Mat) bool {
	f := m.DType.Interleaved()
	return hasAVX2C && (!hasQuant512 || x8AVX512(m.DType)) && f != nil && m.Rows >= f.Rows && m.Cols%f.Block == 0
}

// x8AVX512 reports whether the AVX-512 VNNI kernels read d's rows
// interleaved (quant_avx512_amd64.c's kq512_rows_x8): Q4_K's, Q5_K's and
// Q6_K's, sixteen rows (two groups) a vector.
func x8AVX512(d tensor.DType) bool { return d == tensor.Q4_K || d == tensor.Q5_K || d == tensor.Q6_K }

// InterleavedLayout returns the interleaved format in which this
// process's kernels read a quantized matrix of rows x cols values of d
// (see interleaves and Pool.Prepare), nil where they read its rows as
// stored. A loader that writes a matrix's rows itself (quantizing on
// load) may write them so at once and make the Matrix with
// NewInterleavedMatrix, rather than have Prepare copy them.
func InterleavedLayout(d tensor.DType, rows, cols int) *tensor.InterleavedFormat {
	if !interleaves(&tensor.Mat{DType: d, Rows: rows, Cols: cols}) {
		return nil
	}
	return d.Interleaved()
}

// NewInterleavedMatrix returns the Matrix of the quantized matrix m whose
// bytes m.Q already hold its rows in f, the layout InterleavedLayout
// names for it: its first rows, a multiple of f.Rows, in f's groups
// (what tensor.InterleaveRows writes), then the rows after them as
// stored; as many bytes as the stored rows. The Matrix reads m.Q in place
// (Mat then has no storage, as after Prepare). It returns an error where
// f is not that layout or the bytes do not fit the shape.
func NewInterleavedMatrix(m tensor.Mat, f *tensor.InterleavedFormat) (*Matrix, error) {
	if want := InterleavedLayout(m.DType, m.Rows, m.Cols); f == nil || f != want {
		have := "none"
		if want != nil {
			have = want.Name
		}
		name := "none"
		if f != nil {
			name = f.Name
		}
		return nil, fmt.Errorf("cpu: %v weight of %dx%d laid out as %s, where this CPU's kernels read %s", m.DType, m.Rows, m.Cols, name, have)
	}
	rb, _ := m.DType.RowBytes(m.Cols)
	if len(m.Q) != m.Rows*rb || len(m.F32) != 0 || len(m.U16) != 0 {
		return nil, fmt.Errorf("cpu: %v weight of %dx%d in %s has %d bytes, want %d", m.DType, m.Rows, m.Cols, f.Name, len(m.Q), m.Rows*rb)
	}
	gb, _ := f.GroupBytes(m.Cols)
	ng := m.Rows / f.Rows
	q := m.Q
	m.Q = nil
	w := &Matrix{m: m}
	w.x8.Store(&interleaved{f: f, groups: q[: ng*gb : ng*gb], gb: gb, rows: ng * f.Rows, off: x8Offsets(f), rest: q[ng*gb:]})
	return w, nil
}

// interleave returns m's rows interleaved, the groups made by run (a
// parallel for over groups; nil runs them here).
func interleave(m *tensor.Mat, run func(n int, fn func(lo, hi int))) *interleaved {
	f := m.DType.Interleaved()
	gb, _ := f.GroupBytes(m.Cols)
	rb, _ := m.DType.RowBytes(m.Cols)
	ng := m.Rows / f.Rows
	iv := &interleaved{f: f, groups: make([]byte, ng*gb), gb: gb, rows: ng * f.Rows, off: x8Offsets(f),
		rest: bytes.Clone(m.Q[ng*f.Rows*rb : m.Rows*rb])}
	fn := func(lo, hi int) {
		if err := tensor.InterleaveRows(iv.groups[lo*gb:hi*gb], f, m.Q[lo*f.Rows*rb:hi*f.Rows*rb], m.Cols); err != nil {
			panic("cpu: " + err.Error()) // the shapes were checked
		}
	}
	if run == nil {
		fn(0, ng)
	} else {
		run(ng, fn)
	}
	return iv
}

// row dequantizes row r (of cols values) into dst.
func (iv *interleaved) row(dst []float32, dt tensor.DType, cols, r int) {
	rb, _ := dt.RowBytes(cols)
	if r >= iv.rows {
		if err := tensor.DequantizeRow(dst[:cols], dt, iv.rest[(r-iv.rows)*rb:(r-iv.rows+1)*rb]); err != nil {
			panic("cpu: RowF32: " + err.Error())
		}
		return
	}
	f := iv.f
	var blk [256]byte
	bb := dt.Format().Bytes
	nb := cols / f.Block
	g := iv.groups[r/f.Rows*iv.gb:]
	for b := range nb {
		f.RowBlock(blk[:bb], g[b*f.Bytes:(b+1)*f.Bytes], r%f.Rows)
		if err := tensor.DequantizeRow(dst[b*f.Block:(b+1)*f.Block], dt, blk[:bb]); err != nil {
			panic("cpu: RowF32: " + err.Error())
		}
	}
}
