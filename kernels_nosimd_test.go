//go:build !(goexperiment.simd && amd64)

package kakeya

import "runtime"

// wantKernels lists what cpu.Features may say in a build without the SIMD
// kernels: on amd64 with cgo the AVX-512 kernels may still run.
func wantKernels() []string {
	if runtime.GOARCH != "amd64" {
		scalar := "scalar (no SIMD kernels for " + runtime.GOARCH + ")"
		return []string{scalar,
			scalar + ", neon for bf16 and f16 weights, neon for quantized weights (cgo)",
			scalar + ", neon for bf16 and f16 weights, neon+dotprod for quantized weights (cgo)"}
	}
	return []string{
		"scalar (built without GOEXPERIMENT=simd)",
		"scalar (built without GOEXPERIMENT=simd), avx2+fma+f16c for bf16 and f16 weights, avx2 for quantized weights (cgo)",
		"scalar (built without GOEXPERIMENT=simd), avx512 for bf16 weights, avx2+fma+f16c for f16 weights, avx512+vnni for quantized weights (cgo)",
		"scalar (built without GOEXPERIMENT=simd), avx512 for bf16 weights, avx2+fma+f16c for f16 weights, avx2 for quantized weights (cgo)",
		"scalar (built without GOEXPERIMENT=simd), avx512+avx512_bf16 for bf16 weights, avx2+fma+f16c for f16 weights, avx512+vnni for quantized weights (cgo)",
	}
}
