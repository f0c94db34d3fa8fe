//go:build !cgo || !amd64

package cpu

import "github.com/kakeya-ai/kakeya/compute"

// Without cgo on amd64 there are no VDPBF16PS kernels (bf16dot_amd64.c).
const hasBF16Dot = false

func packX(x []float32, n, cols, ld int, hi, lo []uint16) { panic("cpu: packX without cgo") }

func gemmPanelBF16(w *compute.Mat, r0, nr int, panel []float32, xh, xl []uint16, ld, n int, out []float32, ldo int) {
	panic("cpu: gemmPanelBF16 without cgo")
}

func gemvBF16(w *compute.Mat, lo, hi int, xh, xl []uint16, out []float32) {
	panic("cpu: gemvBF16 without cgo")
}
