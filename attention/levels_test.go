package attention_test

import (
	"testing"

	"github.com/kakeya-ai/kakeya/internal/leveltest"
)

// TestKernelLevels reruns this package's tests (attention over every kind of
// block) at every kernel level below the best this CPU runs, but avx512
// below avx512bf16: attention never multiplies through MatMul.
func TestKernelLevels(t *testing.T) { leveltest.Rerun(t, ".", leveltest.NoMatMul) }
