//go:build !goexperiment.simd

package cli

// simdBuild says whether the binary was built with GOEXPERIMENT=simd.
const simdBuild = false
