package cpu_test

import (
	"testing"

	"github.com/kakeya-ai/kakeya/internal/leveltest"
)

// TestKernelLevels reruns this package's tests at every kernel level below
// the best this CPU runs, so the package-level kernels (DotBlock, Softmax,
// the codec kernels...) are tested on each path the CPU has, not only the
// fastest.
func TestKernelLevels(t *testing.T) { leveltest.Rerun(t, ".") }
