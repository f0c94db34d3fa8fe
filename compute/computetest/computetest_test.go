package computetest_test

import (
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/computetest"
	"github.com/kakeya-ai/kakeya/compute/reference"
)

// hiding wraps a backend in an interface value: every optional
// capability of the backend is hidden behind it, as a careless wrapper
// (a counting or logging backend) hides them.
type hiding struct{ compute.Backend }

// The suite catches a wrapper that hides an optional capability: the
// reference backend's ArchOps and SlidingKV behind hiding.
func TestCatchesHiddenCapability(t *testing.T) {
	err := computetest.Test(computetest.Config{
		Open:         func() (compute.Backend, error) { return hiding{reference.Backend{}}, nil },
		Capabilities: computetest.Capabilities(reference.Backend{}),
	})
	if err == nil {
		t.Fatal("the suite passed a wrapper that hides ArchOps and SlidingKV")
	}
	for _, c := range []string{"compute.ArchOps", "compute.SlidingKV"} {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("the suite's error does not name the hidden %s:\n%v", c, err)
		}
	}
}

// A capability present but not listed is reported too, so that the
// lists in the backends' tests stay true.
func TestCatchesUnlistedCapability(t *testing.T) {
	err := computetest.Test(computetest.Config{
		Open:         func() (compute.Backend, error) { return reference.Backend{}, nil },
		Capabilities: []computetest.Capability{computetest.SlidingKV, computetest.EncodedAttention},
	})
	if err == nil || !strings.Contains(err.Error(), "implements compute.ArchOps, which Config.Capabilities does not list") {
		t.Errorf("err = %v, want one naming the unlisted ArchOps", err)
	}
}

// wrongAdd is a backend whose Add adds x to itself.
type wrongAdd struct{ compute.Backend }

func (w wrongAdd) Add(x, _ compute.Buffer) { w.Backend.Add(x, x) }

// The suite checks values, not only that the calls return: a wrong Add
// is reported by name.
func TestCatchesWrongValues(t *testing.T) {
	b := wrongAdd{reference.Backend{}}
	err := computetest.Test(computetest.Config{
		Open:         func() (compute.Backend, error) { return b, nil },
		Capabilities: computetest.Capabilities(b),
	})
	if err == nil || !strings.Contains(err.Error(), "operations: Add: largest difference") {
		t.Errorf("err = %v, want one naming Add", err)
	}
}
