//go:build linux || darwin

package cpu

import (
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
)

// TestRANSDecodePageEnd: streams that end at the last byte of a page whose
// next page is unmapped for reading decode as the Go reference does, one
// stream or two side by side, with and without the lookup, at every
// length from a group's 64 bytes to 64 more and from every position
// parity: a kernel that read one byte past a stream would fault here.
func TestRANSDecodePageEnd(t *testing.T) {
	ps := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err) // the test needs an anonymous mapping
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[ps:], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range mem[:ps] {
		mem[i] = byte(rng.Uint32())
	}
	const per = 64
	var ent []uint32
	var lv []float32
	var eo, lo, nsy []int32
	for _, n := range []int{3, 10, 16, 33, 95} { // the compare lookup, TBL levels, loaded levels
		eo, lo, nsy = append(eo, int32(len(ent))), append(lo, int32(len(lv))), append(nsy, int32(n))
		ent = append(ent, ransTestTable(ransTestFreqs(rng, n, "gauss"))...)
		for i := range n {
			lv = append(lv, float32(i)-float32(n)/2)
		}
	}
	lk, err := NewRANSLookup(ent)
	if err != nil {
		t.Fatal(err)
	}
	scale := []float32{1, 0.5, 2, 0.75, 1.5}
	decoded := 0
	for size := 2 * RANSLanes; size <= 4*RANSLanes; size++ {
		src := mem[ps-size : ps : ps]
		for pos := range 2 {
			var x0 [RANSLanes]uint32
			for i := range x0 {
				x0[i] = 1<<16 + rng.Uint32N(1<<32-1<<16)
			}
			x := x0
			want := make([]float32, len(eo)*per)
			kw, pw := ransDecode2Ref(want, 0, src, pos, per, ent, eo, lv, lo, scale, &x)
			for _, l := range []*RANSLookup{lk, nil} {
				got, y := make([]float32, len(want)), x0
				k, p := RANSDecode2(got, 0, src, pos, per, ent, l, eo, lv, lo, nsy, scale, &y)
				if k != 0 && (k != kw || p != pw || y != x) {
					t.Fatalf("%d bytes from %d (lookup %v): %d symbols to position %d, the reference %d to %d", size, pos, l != nil, k, p, kw, pw)
				}
				for i := range k {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%d bytes from %d (lookup %v): symbol %d %v, the reference %v", size, pos, l != nil, i, got[i], want[i])
					}
				}
				// The same stream twice, side by side.
				st := RANSStreams{X: [RANSMaxStreams][RANSLanes]uint32{x0, x0}, Pos: [RANSMaxStreams]int{pos, pos}}
				outs := [][]float32{make([]float32, len(want)), make([]float32, len(want))}
				k2 := RANSDecode2Streams(outs, 0, [][]byte{src, src}, per, ent, l, eo, lv, lo, nsy, [][]float32{scale, scale}, &st)
				if k2 != 0 && (k2 != kw || st.Pos[0] != pw || st.Pos[1] != pw || st.X[0] != x || st.X[1] != x) {
					t.Fatalf("%d bytes from %d (lookup %v), two streams: %d symbols to positions %v, the reference %d to %d", size, pos, l != nil, k2, st.Pos[:2], kw, pw)
				}
				decoded += k + 2*k2
			}
		}
	}
	t.Logf("%s: %d symbols decoded by the kernels", Level(), decoded)
	if hasRANSKernels && decoded == 0 {
		t.Error("the kernels decoded nothing")
	}
}
