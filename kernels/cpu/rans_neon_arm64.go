//go:build cgo

package cpu

/*
#cgo CFLAGS: -O2
#include <stdint.h>
long kkn_rans2_decode(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
		      const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
		      const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
		      const float *scale0, const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux,
		      uint32_t *xs);
long kkn_rans2_decode1(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
		       const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale,
		       const uint32_t *aux, uint32_t *xs);
*/
import "C"

import "unsafe"

// ransAuxC is the lookups of lk for rans_neon_arm64.c's kernels, or null
// without one (every table's entries then read by loads).
func ransAuxC(lk *RANSLookup) *C.uint32_t {
	if lk == nil {
		return nil
	}
	return (*C.uint32_t)(&lk.aux[0])
}

// ransDecode2C is RANSDecode2's kernel call (rans_neon_arm64.c);
// RANSDecode2 checked the tables' extents. The NEON kernels read no slot
// entries (el).
func ransDecode2C(out []float32, g0 int, src []byte, pos, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale []float32, x *[RANSLanes]uint32, el bool) (int, int) {
	if len(src)-pos < 2*RANSLanes {
		return 0, pos
	}
	k := C.kkn_rans2_decode1(f32n(out), C.long(len(out)), C.long(g0), (*C.uint8_t)(&src[0]), C.long(len(src)), C.long(pos), C.long(per),
		(*C.uint32_t)(&ent[0]), (*C.int32_t)(&entOff[0]), f32n(lv), (*C.int32_t)(&levOff[0]), (*C.int32_t)(&nsym[0]), f32n(scale),
		ransAuxC(lk), (*C.uint32_t)(&x[0]))
	return int(k & (1<<32 - 1)), int(k >> 32)
}

// ransDecode2StreamsC is RANSDecode2Streams's kernel call
// (rans_neon_arm64.c); RANSDecode2Streams checked the extents.
func ransDecode2StreamsC(out [][]float32, g0 int, src [][]byte, per int, ent []uint32, lk *RANSLookup, entOff []int32, lv []float32, levOff, nsym []int32, scale [][]float32, st *RANSStreams, el bool) int {
	var o [RANSMaxStreams]*C.float
	var s [RANSMaxStreams]*C.uint8_t
	var sc [RANSMaxStreams]*C.float
	for j := range out {
		o[j], s[j], sc[j] = f32n(out[j]), (*C.uint8_t)(&src[j][0]), f32n(scale[j])
	}
	k := C.kkn_rans2_decode(C.long(len(out)), o[0], o[1], o[2], o[3], C.long(len(out[0])), C.long(g0), s[0], s[1], s[2], s[3],
		(*C.long)(unsafe.Pointer(&st.len[0])), (*C.long)(unsafe.Pointer(&st.Pos[0])), C.long(per),
		(*C.uint32_t)(&ent[0]), (*C.int32_t)(&entOff[0]), f32n(lv), (*C.int32_t)(&levOff[0]), (*C.int32_t)(&nsym[0]),
		sc[0], sc[1], sc[2], sc[3], ransAuxC(lk), (*C.uint32_t)(&st.X[0][0]))
	return int(k)
}
