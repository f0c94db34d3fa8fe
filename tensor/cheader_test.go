package tensor

import (
	"bytes"
	"os"
	"testing"
)

// The CUDA kernels include kernels/cuda/qformats.h; it must be what
// QuantCHeader writes from Formats (make formats regenerates it).
func TestQuantCHeaderCommitted(t *testing.T) {
	got, err := os.ReadFile("../kernels/cuda/qformats.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, QuantCHeader()) {
		t.Fatal("kernels/cuda/qformats.h is stale: run make formats and commit it")
	}
}
