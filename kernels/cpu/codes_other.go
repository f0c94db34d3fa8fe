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
