package weights

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Quantizing straight into an interleaved layout (one pass, one buffer:
// what the model's loader does for a backend that reads the rows
// interleaved) writes the bytes that quantizing and then interleaving
// write, bit for bit: the groups tensor.InterleaveRows makes of
// Quantize's rows, then the rows after the last group as Quantize wrote
// them (the fallbacks' types too: q4_k's Q5_0, q6_k's Q8_0). A layout
// that names nothing is Quantize.
func TestQuantizeInterleaved(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 1))
	everyType := func(d tensor.DType, rows, cols int) *tensor.InterleavedFormat { return d.Interleaved() }
	for _, tc := range []struct {
		format     string
		dt         tensor.DType // the source tensor's type
		rows, cols int
		want       tensor.DType // the quantized type
	}{
		{"q8_0", tensor.F32, 37, 512, tensor.Q8_0},
		{"q8_0", tensor.BF16, 8, 96, tensor.Q8_0},
		{"q4_k", tensor.BF16, 37, 512, tensor.Q4_K},
		{"q4_k", tensor.F32, 21, 256, tensor.Q4_K},
		{"q5_k", tensor.F16, 19, 512, tensor.Q5_K},
		{"q6_k", tensor.BF16, 43, 256, tensor.Q6_K},
		{"q6_k", tensor.F32, 5, 256, tensor.Q6_K},  // no whole group
		{"q4_k", tensor.BF16, 24, 96, tensor.Q5_0}, // the fallback, interleaved
		{"q6_k", tensor.F32, 16, 96, tensor.Q8_0},  // the fallback, interleaved
	} {
		src := randomTensor(r, tc.dt, tc.rows, tc.cols)
		stored, ok, err := src.Quantize(tc.format)
		if err != nil || !ok || stored.DType != tc.want {
			t.Fatalf("%s of %v %dx%d: Quantize gave %v, ok %v, err %v; want %v", tc.format, tc.dt, tc.rows, tc.cols, stored.DType, ok, err, tc.want)
		}
		for _, layout := range []func(d tensor.DType, rows, cols int) *tensor.InterleavedFormat{nil, everyType} {
			q, f, ok, err := src.QuantizeInterleaved(tc.format, layout)
			if err != nil || !ok || q.DType != tc.want {
				t.Fatalf("%s of %v %dx%d: QuantizeInterleaved gave %v, ok %v, err %v; want %v", tc.format, tc.dt, tc.rows, tc.cols, q.DType, ok, err, tc.want)
			}
			var wf *tensor.InterleavedFormat
			if layout != nil {
				wf = tc.want.Interleaved()
			}
			if f != wf {
				t.Fatalf("%s of %v %dx%d: layout %v, want %v", tc.format, tc.dt, tc.rows, tc.cols, f, wf)
			}
			want := stored.Data
			if f != nil {
				rb, _ := tc.want.RowBytes(tc.cols)
				gb, _ := f.GroupBytes(tc.cols)
				ng := tc.rows / f.Rows
				want = make([]byte, len(stored.Data))
				if err := tensor.InterleaveRows(want[:ng*gb], f, stored.Data[:ng*f.Rows*rb], tc.cols); err != nil {
					t.Fatal(err)
				}
				copy(want[ng*gb:], stored.Data[ng*f.Rows*rb:])
			}
			if !bytes.Equal(q.Data, want) {
				t.Fatalf("%s of %v %dx%d, layout %v: the bytes differ from quantizing, then interleaving", tc.format, tc.dt, tc.rows, tc.cols, f)
			}
		}
	}
	// A layout that does not fit the type is an error naming the tensor.
	src := randomTensor(r, tensor.F32, 16, 256)
	if _, _, _, err := src.QuantizeInterleaved("q4_k", func(tensor.DType, int, int) *tensor.InterleavedFormat { return &tensor.Q8_0x8 }); err == nil {
		t.Fatal("QuantizeInterleaved took Q8_0x8 for Q4_K rows")
	}
}

// randomTensor returns a rows x cols tensor of dt holding Gaussian values
// (a few rows scaled up, so the rows' scales differ).
func randomTensor(r *rand.Rand, dt tensor.DType, rows, cols int) *Tensor {
	data := make([]byte, rows*cols*dt.Size())
	for i := range rows * cols {
		v := float32(r.NormFloat64() * float64(1+i/cols%3))
		switch dt {
		case tensor.F32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		case tensor.F16:
			binary.LittleEndian.PutUint16(data[2*i:], tensor.F32ToF16(v))
		default:
			binary.LittleEndian.PutUint16(data[2*i:], tensor.F32ToBF16(v))
		}
	}
	return &Tensor{Name: "m", DType: dt, Shape: []int{rows, cols}, Data: data}
}
