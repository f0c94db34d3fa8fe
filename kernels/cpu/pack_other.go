//go:build !cgo || !(amd64 || arm64)

package cpu

// Without cgo (or on an architecture without C kernels) nothing packs
// panels: every matrix product runs the Go loops on the rows as stored.
func packColumns(w []uint16, rows, cols, width, p0, p1 int, dst []uint16) { panic("cpu: no C kernels") }
