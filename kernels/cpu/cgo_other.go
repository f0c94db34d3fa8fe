//go:build !cgo || !amd64

package cpu

// Without cgo on amd64 there are no C kernels (avx2_amd64.c,
// avx512_amd64.c).
const (
	cpuAVX2C, cpuAVX512, cpuBF16Dot = false, false, false

	hasAVX2C   = false
	hasAVX512  = false
	hasBF16Dot = false

	cpuQuant512, hasQuant512     = false, false
	cpuRANSLookup, hasRANSLookup = false, false
)

func packPairs(w []uint16, rows, cols, width, p0, p1 int, dst []uint16) { panic("cpu: no C kernels") }
func roundBF16(x, dst []float32)                                        { panic("cpu: no C kernels") }
func packX(x []float32, n, cols, ld int, dst []uint16)                  { panic("cpu: no C kernels") }

func gemmBF16(panels []uint16, rows, cols, p0, p1 int, x []uint16, ld, n int, out []float32) {
	panic("cpu: no C kernels")
}

func gemmF32(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	panic("cpu: no C kernels")
}

func gemm2BF16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	panic("cpu: no C kernels")
}

func gemm2F16(panels []uint16, rows, cols, p0, p1 int, x []float32, n int, out []float32) {
	panic("cpu: no C kernels")
}

func scoresAVX512(s []float32, lds int, q []float32, m int, keys []float32, n, d int, scale float32) {
	panic("cpu: no AVX-512 kernels")
}

func mixAVX512(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	panic("cpu: no AVX-512 kernels")
}

func scoresAVX2(s []float32, lds int, q []float32, m int, keys []float32, n, d int, scale float32) {
	panic("cpu: no AVX2 kernels")
}

func mixAVX2(o []float32, m int, p []float32, ldp int, vals []float32, n, d int) {
	panic("cpu: no AVX2 kernels")
}

func fwhtRows64AVX512(out, v, signs, z, w, rows []float32, n, r int, cos, sin []float32) {
	panic("cpu: no AVX-512 kernels")
}

func mixTAVX512(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	panic("cpu: no AVX-512 kernels")
}

func mixTAVX2(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int) {
	panic("cpu: no AVX2 kernels")
}

func unpackPlanesAVX512(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32) {
	panic("cpu: no AVX-512 kernels")
}

func unpackPlanesAVX2(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32) {
	panic("cpu: no AVX2 kernels")
}

func mixTRoPEAVX512(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int, cos, sin []float32) {
	panic("cpu: no AVX-512 kernels")
}

func transposeAVX2(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	panic("cpu: no AVX2 kernels")
}

func mixTRoPEAVX2(o []float32, m int, base, p []float32, ldp int, vals []float32, n, d int, cos, sin []float32) {
	panic("cpu: no AVX2 kernels")
}

func quantRowsC(t *qTask, r0, r1 int) { panic("cpu: no C kernels") }

func quantRowsX8(t *qTask, r0, r1 int) { panic("cpu: no C kernels") }

func quantRowsX8ISA(t *qTask, r0, r1 int, avx512 bool) { panic("cpu: no C kernels") }

func quantizeActsC(q *qQuant, lo, hi int) { panic("cpu: no C kernels") }

func quantRowsISA(t *qTask, r0, r1 int, avx512 bool) { panic("cpu: no C kernels") }

func widenActsC(a *qActs, lo, hi, cols int) { panic("cpu: no C kernels") }

func pcScoreRun(r *PCRun, nb int, s []float32, lds int, q []float32, m int, scale float32, cos, sin []float32, r0, r1 int, work []float32) {
	panic("cpu: no C kernels")
}

func pcAddRun(r *PCRun, nb int, w []float32, ldw, m, r0, r1 int, acc, macc, wsum, work []float32) {
	panic("cpu: no C kernels")
}

func pcAddRunEnd(r *PCRun, o []float32, m int, acc, macc, wsum []float32) { panic("cpu: no C kernels") }
