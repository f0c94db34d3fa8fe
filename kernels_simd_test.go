//go:build goexperiment.simd && amd64

package kakeya

// wantKernels lists what cpu.Features may say in a SIMD build: which one
// depends on the CPU.
func wantKernels() []string {
	return []string{
		"avx2+fma (GOEXPERIMENT=simd), avx512+avx512_bf16 for bf16 weights, avx2+fma+f16c for f16 weights, avx512+vnni for quantized weights (cgo)",
		"avx2+fma (GOEXPERIMENT=simd), avx512 for bf16 weights, avx2+fma+f16c for f16 weights, avx512+vnni for quantized weights (cgo)",
		"avx2+fma (GOEXPERIMENT=simd), avx512 for bf16 weights, avx2+fma+f16c for f16 weights, avx2 for quantized weights (cgo)",
		"avx2+fma (GOEXPERIMENT=simd), avx2+fma+f16c for bf16 and f16 weights, avx2 for quantized weights (cgo)",
		"avx2+fma (GOEXPERIMENT=simd)",
		"scalar (the CPU lacks AVX2/FMA)",
		"scalar",
	}
}
