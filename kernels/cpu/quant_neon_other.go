//go:build !cgo || !arm64

package cpu

// Without cgo on arm64 there are no NEON kernels for quantized weights
// (quant_neon_arm64.c).
const cpuQuantDot, hasQuantDot = false, false

func quantRowsNEON(t *qTask, r0, r1 int, sdot bool) { panic("cpu: no NEON kernels") }
