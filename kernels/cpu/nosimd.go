//go:build !(goexperiment.simd && amd64)

package cpu

import (
	"runtime"

	"github.com/kakeya-ai/kakeya/tensor"
)

// cpuAVX2 is false: this build has no SIMD Go loops to run.
const cpuAVX2 = false

// loops returns the Go loops this build runs, the scalar ones: the SIMD
// loops need amd64 and a build with GOEXPERIMENT=simd.
func loops() (*kernelSet, string) {
	if runtime.GOARCH != "amd64" {
		return &scalarKernels, "scalar (no SIMD kernels for " + runtime.GOARCH + ")"
	}
	return &scalarKernels, "scalar (built without GOEXPERIMENT=simd)"
}

func cvtRow(dst []float32, w *tensor.Mat, off int)        { cvtScalar(dst, w, off) }
func dot(a, b []float32) float32                          { return dotScalar(a, b) }
func axpy(alpha float32, x, y []float32)                  { axpyScalar(alpha, x, y) }
func add(dst, x []float32)                                { addScalar(dst, x) }
func scale(x []float32, s float32)                        { scaleScalar(x, s) }
func butterfly(lo, hi []float32)                          { butterflyScalar(lo, hi) }
func hadamardStages(x []float32)                          { hadamardStagesScalar(x) }
func lookup(dst []float32, codes []uint8, t *[16]float32) { lookupScalar(dst, codes, t) }
func mulAdd(dst, x, y, z []float32)                       { mulAddScalar(dst, x, y, z) }
func sumSquares(x []float32) float32                      { return sumSquaresScalar(x) }
func mulScaled(out, x, w []float32, s float32)            { mulScaledScalar(out, x, w, s) }
func siluMul(gate, up []float32)                          { siluMulScalar(gate, up) }
func geluTanhMul(gate, up []float32)                      { geluTanhMulScalar(gate, up) }
func softmax(x []float32)                                 { softmaxScalar(x) }
func rope(x, cos, sin []float32)                          { ropeScalar(x, cos, sin) }

func dotBlock(out, q, keys []float32, d int) { dotBlockScalar(out, q, keys, d) }
func axpyBlock(out, w, vals []float32)       { axpyBlockScalar(out, w, vals) }
func ropeCopy(dst, src, cos, sin []float32)  { ropeCopyScalar(dst, src, cos, sin) }
