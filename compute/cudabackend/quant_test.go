package cudabackend

import (
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/tensor"
)

// The CUDA backend has no kernels for quantized weights yet: Upload refuses
// each quantized type with an error naming it (which the model wraps with
// the file and tensor), rather than reading the blocks as values.
func TestUploadRefusesQuantized(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	for _, f := range tensor.Formats {
		rb, _ := f.DType.RowBytes(f.Block)
		_, err := gpu.Upload(tensor.Mat{DType: f.DType, Rows: 2, Cols: f.Block, Q: make([]byte, 2*rb)})
		if err == nil || !strings.Contains(err.Error(), f.Name) {
			t.Errorf("%s: Upload error %v, want one naming %s", f.Name, err, f.Name)
		}
	}
}
