package cudabackend

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

// The CUDA kernels read a quantized matrix's blocks as stored: the device
// receives the uploaded bytes unchanged (whole groups of eight Q4_K, Q6_K or Q8_0 rows
// and a remainder, the rows the CPU's AVX2 kernels would interleave), and
// the backend is no compute.Preparer, so a model never has its weights
// interleaved (kern.Pool.Prepare) or their stored rows let go of.
func TestQuantUploadNotInterleaved(t *testing.T) {
	gpu, f := newFakeBackend(t, Options{})
	if _, ok := any(gpu).(compute.Preparer); ok {
		t.Fatal("the CUDA backend is a compute.Preparer: a model would prepare (interleave) its quantized weights")
	}
	r := rand.New(rand.NewPCG(8, 8))
	for _, dt := range []tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q8_0} {
		const rows, cols = 19, 512
		q := quantWeight(r, dt.Format(), rows, cols)
		w, err := gpu.Upload(tensor.Mat{DType: dt, Rows: rows, Cols: cols, Q: q})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(q))
		if err := f.copyOut(got, ownWeight(w).mem.ptr); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, q) {
			t.Fatalf("%v: the device holds other bytes than the uploaded rows", dt)
		}
	}
}
