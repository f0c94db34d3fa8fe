package reference_test

import (
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/computetest"
	"github.com/kakeya-ai/kakeya/compute/reference"
)

// The reference backend meets the compute contract (computetest).
func TestConformance(t *testing.T) {
	err := computetest.Test(computetest.Config{
		Open:         func() (compute.Backend, error) { return reference.Backend{}, nil },
		Capabilities: []computetest.Capability{computetest.ArchOps, computetest.SlidingKV, computetest.EncodedAttention},
	})
	if err != nil {
		t.Fatal(err)
	}
}
