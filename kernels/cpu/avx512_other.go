//go:build !cgo || !amd64

package cpu

import "github.com/kakeya-ai/kakeya/compute"

// Without cgo on amd64 there are no AVX-512 kernels (avx512_amd64.c).
const (
	hasAVX512  = false
	hasBF16Dot = false
)

func packX(x []float32, n, cols, ld int, dst []uint16) { panic("cpu: no AVX-512 kernels") }

func gemmPanelBF16(w *compute.Mat, r0, nr int, panel []float32, x []uint16, ld, n int, out []float32, ldo int) {
	panic("cpu: no AVX-512 kernels")
}

func gemvBF16(w *compute.Mat, lo, hi int, x []uint16, out []float32) {
	panic("cpu: no AVX-512 kernels")
}

func gemmPanelF32(w *compute.Mat, r0, nr int, panel, x []float32, n int, out []float32, ldo int) {
	panic("cpu: no AVX-512 kernels")
}

func splitX(x, xe, xo []float32) { panic("cpu: no AVX-512 kernels") }

func gemvF32(w *compute.Mat, lo, hi int, xe, xo, out []float32) { panic("cpu: no AVX-512 kernels") }

func scoresAVX512(s []float32, lds int, q []float32, m int, keys []float32, n, d int, scale float32) {
	panic("cpu: no AVX-512 kernels")
}

func mixAVX512(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	panic("cpu: no AVX-512 kernels")
}

func fwhtRows64AVX512(out, v, signs, z, w, rows []float32, n, r int, cos, sin []float32) {
	panic("cpu: no AVX-512 kernels")
}
