package kakeya

import (
	"testing"

	"github.com/kakeya-ai/kakeya/compute/cpubackend"
)

// The automatic calibration runs on as many threads as the CPU backend
// the engine was given (the tools open it with --threads), or Threads.
func TestCalibrationThreads(t *testing.T) {
	cpu, err := cpubackend.NewMatMul(1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	for _, tt := range []struct {
		opt  Options
		want int
	}{{Options{Threads: 3}, 3}, {Options{Backend: cpu}, 1}, {Options{}, 0}} {
		if got := calibrationThreads(tt.opt); got != tt.want {
			t.Errorf("calibrationThreads(%+v) = %d, want %d", tt.opt, got, tt.want)
		}
	}
}
