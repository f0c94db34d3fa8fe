package cpubackend_test

import (
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/computetest"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
)

// The CPU backend meets the compute contract (computetest), with exact
// f32 products and with bf16-rounded activations (looser: the rounding).
func TestConformance(t *testing.T) {
	caps := []computetest.Capability{computetest.Preparer, computetest.Describer, computetest.ArchOps, computetest.SlidingKV, computetest.EncodedAttention}
	for _, tc := range []struct {
		matmul string
		tol    float64
	}{{"f32", 1e-4}, {"bf16", 1e-2}} {
		err := computetest.Test(computetest.Config{
			Open:         func() (compute.Backend, error) { return cpubackend.NewMatMul(2, tc.matmul) },
			Capabilities: caps,
			Tol:          tc.tol,
		})
		if err != nil {
			t.Errorf("matmul %s:\n%v", tc.matmul, err)
		}
	}
}
