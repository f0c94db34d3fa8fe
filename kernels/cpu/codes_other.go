//go:build !(goexperiment.simd && amd64)

package cpu

// Without GOEXPERIMENT=simd on amd64 the decoding kernels run their scalar
// loops.

func unpackLookup(dst []float32, src []byte, bits int, t *[16]float32) {
	unpackLookupScalar(dst, src, bits, t)
}
func widenF16(dst []float32, src []byte) bool      { return widenF16Scalar(dst, src) }
func fwht(x []float32)                             { fwhtScalar(x) }
func fwhtAxpy(out, v, signs, z, w, rows []float32) { fwhtAxpyParts(out, v, signs, z, w, rows) }

func unpackLookupRows(dst []float32, stride, cols int, src []byte, bits int, t *[16]float32, scales []float32) {
	unpackLookupRowsScalar(dst, stride, cols, src, bits, t, scales)
}

func fwhtAxpyRows(out, v, signs, z, w, rows []float32, n, d, p, r int, cos, sin []float32) {
	fwhtAxpyRowsParts(out, v, signs, z, w, rows, n, d, p, r, cos, sin)
}

func affineTable(t *[16]float32, m, s float32) { affineTableScalar(t, m, s) }

func unpackAffine4(dst []float32, src []byte, g int, params []float32) bool { return false }

func quantError(g []float32, m, s, inv, top, best float32) float32 {
	return quantErrorScalar(g, m, s, inv, top, best)
}

func dequantInt8(dst []float32, src []byte, g int, scales []float32) {
	dequantInt8Scalar(dst, src, g, scales)
}
