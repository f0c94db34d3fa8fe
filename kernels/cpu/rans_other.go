//go:build !cgo || (!amd64 && !arm64)

package cpu

// Without cgo, or on an architecture without rANS kernels
// (rans_amd64.c, rans_neon_arm64.c), RANSDecode2 and RANSDecode2Streams
// decode nothing and their callers' Go loops decode every symbol.

func ransDecode2C(out []float32, g0 int, src []byte, pos, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale []float32, x *[RANSLanes]uint32, el bool) (int, int) {
	return 0, pos
}

func ransDecode2StreamsC(out [][]float32, g0 int, src [][]byte, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale [][]float32, st *RANSStreams, el bool) int {
	return 0
}
