package cudabackend

import (
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/computetest"
)

// The CUDA backend, on the fake driver with its kernels emulated on the
// CPU, meets the compute contract (computetest): operations, attention
// over every block format its store reads or encodes, its capabilities,
// failures through Err.
func TestConformance(t *testing.T) {
	newFakeOrSkip(t)
	err := computetest.Test(computetest.Config{
		Open: func() (compute.Backend, error) { return newBackend(newFake(), Options{MatMul: "f32"}), nil },
		Capabilities: []computetest.Capability{computetest.Describer, computetest.ArchOps, computetest.SlidingKV, computetest.Fused, computetest.Greedy, computetest.Draw, computetest.BatchAttention,
			computetest.EncodedAttention, computetest.PartEncoder, computetest.PartsEncoder},
	})
	if err != nil {
		t.Fatal(err)
	}
}
