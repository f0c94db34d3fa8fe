//go:build !cgo || !amd64

package cpu

// pcScaleTrials is never called without C kernels: PCScaleTrials reports
// false first.
func pcScaleTrials(g *CellGrid, col, scale, inv []float32, costs bool, e, l []float64, codes []uint8) {
	panic("cpu: no C kernels")
}
