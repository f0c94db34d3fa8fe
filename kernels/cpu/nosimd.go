//go:build !(goexperiment.simd && amd64)

package cpu

import (
	"runtime"

	"github.com/kakeya-ai/kakeya/compute"
)

// Features describes the kernels this build runs, for a tool to print: the
// scalar loops, because the SIMD kernels need amd64 and a build with
// GOEXPERIMENT=simd, and the AVX-512 C kernels for bf16 weights where the
// CPU runs them (they need cgo, not the experiment).
func Features() string {
	switch {
	case runtime.GOARCH != "amd64":
		return "scalar (no SIMD kernels for " + runtime.GOARCH + ")"
	case hasBF16Dot:
		return "scalar (built without GOEXPERIMENT=simd), avx512+avx512_bf16 for bf16 weights (cgo)"
	case hasAVX512:
		return "scalar (built without GOEXPERIMENT=simd), avx512 for bf16 weights (cgo)"
	}
	return "scalar (built without GOEXPERIMENT=simd)"
}

// Without GOEXPERIMENT=simd on amd64 every op runs its scalar loop, but for
// the matrix products of bf16 weights where the AVX-512 kernels run.

var scalarAVX512Kernels = func() kernelSet {
	k := scalarKernels
	k.name, k.avx512, k.dotBF16 = "scalar+avx512", true, hasBF16Dot
	return k
}()

func bestKernels() *kernelSet {
	if hasAVX512 {
		return &scalarAVX512Kernels
	}
	return &scalarKernels
}

func cvtRow(dst []float32, w *compute.Mat, off int)       { cvtScalar(dst, w, off) }
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
func softmax(x []float32)                                 { softmaxScalar(x) }
func rope(x, cos, sin []float32)                          { ropeScalar(x, cos, sin) }

func dotBlock(out, q, keys []float32, d int) { dotBlockScalar(out, q, keys, d) }
func axpyBlock(out, w, vals []float32)       { axpyBlockScalar(out, w, vals) }
func ropeCopy(dst, src, cos, sin []float32)  { ropeCopyScalar(dst, src, cos, sin) }
