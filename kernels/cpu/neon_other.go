//go:build !cgo || !arm64

package cpu

// Without cgo on arm64 there are no NEON kernels (neon_arm64.c).
const (
	cpuNEON = false
	hasNEON = false
)

func gemmNEONBF16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	panic("cpu: no NEON kernels")
}

func gemmNEONF16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	panic("cpu: no NEON kernels")
}
