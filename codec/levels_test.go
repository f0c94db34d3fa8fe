package codec_test

import (
	"testing"

	"github.com/kakeya-ai/kakeya/internal/leveltest"
)

// TestKernelLevels reruns this package's tests at every kernel level below
// the best this CPU runs: the codecs encode and decode through the SIMD
// kernels of kernels/cpu, each path of which must keep their bounds. The
// codecs never multiply through MatMul, so avx512 is not rerun below
// avx512bf16 (the same kernels for them).
func TestKernelLevels(t *testing.T) { leveltest.Rerun(t, ".", leveltest.NoMatMul) }
