//go:build !(goexperiment.simd && amd64)

package kakeya

import "runtime"

// wantKernels lists what cpu.Features must say in a build without the SIMD
// kernels.
func wantKernels() []string {
	if runtime.GOARCH != "amd64" {
		return []string{"scalar (no SIMD kernels for " + runtime.GOARCH + ")"}
	}
	return []string{"scalar (built without GOEXPERIMENT=simd)"}
}
