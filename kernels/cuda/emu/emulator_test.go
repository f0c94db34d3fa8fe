//go:build cgo && linux

package emu_test

// Tests of the emulator itself, through the test kernels of
// testdata/emutest (go test ./... does not walk testdata, so they run
// here): a faithful emulation must expose a missing barrier, reject
// kernels that break the execution model and give CUDA's results for
// warp collectives and atomics.

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kernels/cuda/emu"
	"github.com/kakeya-ai/kakeya/kernels/cuda/emu/testdata/emutest"
)

// Run runs a test kernel.
var Run = emutest.Run

// mem is emulated device memory of n bytes, freed when the test ends.
func mem(t *testing.T, b []byte) uint64 {
	t.Helper()
	p, err := emu.Alloc(len(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Free(p) })
	emu.CopyIn(p, b)
	return p
}

func args(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func ints(p uint64, n int) []int32 {
	b := make([]byte, 4*n)
	emu.CopyOut(b, p)
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func block(x uint32) [3]uint32 { return [3]uint32{x, 1, 1} }

// A missing __syncthreads must give a wrong result under some schedule,
// and the same kernel with the barrier the right one under all.
func TestMissingBarrierIsCaught(t *testing.T) {
	const n, blocks = 256, 2
	in := make([]byte, 4*n*blocks)
	for i := range n * blocks {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)))
	}
	inp := mem(t, in)
	wrong := 0
	for seed := range uint64(8) {
		for _, sync := range []uint64{0, 1} {
			out := mem(t, make([]byte, len(in)))
			// int32 sync after two pointers: offset 16, 20 bytes in all.
			if err := Run("reverse", [3]uint32{blocks, 1, 1}, block(n), 0, args(out, inp, sync)[:20], seed); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, len(in))
			emu.CopyOut(b, out)
			ok := true
			for i := range n * blocks {
				want := float32(i/n*n + n - 1 - i%n)
				if math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) != want {
					ok = false
				}
			}
			if sync == 1 && !ok {
				t.Fatalf("seed %d: the kernel with its barrier gave a wrong result", seed)
			}
			if sync == 0 && !ok {
				wrong++
			}
		}
	}
	if wrong == 0 {
		t.Fatal("no schedule exposed the missing __syncthreads")
	}
	t.Logf("%d of 8 schedules exposed the missing barrier", wrong)
}

// So must a missing __syncwarp: lanes do not run in lock step.
func TestMissingSyncwarpIsCaught(t *testing.T) {
	wrong := 0
	for seed := range uint64(8) {
		for _, sync := range []uint64{0, 1} {
			out := mem(t, make([]byte, 4*32))
			// int32 sync after a pointer: 12 bytes.
			if err := Run("warp_race", block(1), block(32), 0, args(out, sync)[:12], seed); err != nil {
				t.Fatal(err)
			}
			ok := true
			for l, v := range ints(out, 32) {
				if v != int32((l^1)*10) {
					ok = false
				}
			}
			if sync == 1 && !ok {
				t.Fatalf("seed %d: the kernel with __syncwarp gave a wrong result", seed)
			}
			if sync == 0 && !ok {
				wrong++
			}
		}
	}
	if wrong == 0 {
		t.Fatal("no schedule exposed the missing __syncwarp")
	}
}

// Kernels that break the execution model fail the launch, whatever the
// schedule, instead of hanging.
func TestModelViolationsAreErrors(t *testing.T) {
	for _, c := range []struct {
		kernel string
		want   string
	}{
		{"skip_barrier", "barrier divergence"},
		{"two_barriers", "different __syncthreads"},
		{"lane_exits", "exited"},
	} {
		t.Run(c.kernel, func(t *testing.T) {
			for seed := range uint64(4) {
				out := mem(t, make([]byte, 4*64))
				err := Run(c.kernel, block(1), block(64), 0, args(out), seed)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("seed %d: error %v, want one saying %q", seed, err, c.want)
				}
			}
		})
	}
}

// Warp shuffles and votes return what CUDA specifies, as in lock step.
func TestCollectives(t *testing.T) {
	const n = 64
	for seed := range uint64(3) {
		out := mem(t, make([]byte, 4*12*n))
		if err := Run("collectives", block(1), block(n), 0, args(out), seed); err != nil {
			t.Fatal(err)
		}
		got := ints(out, 12*n)
		for tid := range n {
			lane, base := tid&31, tid&^31
			var ballot uint32
			for l := 0; l < 32; l += 3 {
				ballot |= 1 << l
			}
			sum := 0
			for l := range 32 {
				sum += base + l
			}
			seg := lane &^ 7
			want := []int32{
				int32(base + lane ^ 5),
				int32(tid + 3*b2i(lane+3 < 32)),
				int32(tid - 3*b2i(lane >= 3)),
				int32(base + 7),
				int32(ballot),
				1,
				0,
				int32(tid + 3*b2i(lane-seg+3 < 8)),
				int32(base + seg + 9%8),
				int32(base + lane ^ 4),
				-1,
				int32(sum),
			}
			if lane&1 == 0 {
				want[10] = int32(base + lane ^ 2)
			}
			for k, w := range want {
				if got[tid*12+k] != w {
					t.Fatalf("seed %d thread %d op %d: %d, want %d", seed, tid, k, got[tid*12+k], w)
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestAtomics(t *testing.T) {
	out := mem(t, make([]byte, 12))
	if err := Run("count", [3]uint32{5, 1, 1}, block(96), 0, args(out), 7); err != nil {
		t.Fatal(err)
	}
	got := ints(out, 3)
	if got[0] != 480 || got[1] != 479 || math.Float32frombits(uint32(got[2])) != 240 {
		t.Fatalf("atomics: count %d, max %d, float sum %v; want 480, 479, 240", got[0], got[1], math.Float32frombits(uint32(got[2])))
	}
}

// A kernel running past the end of an allocation or of its dynamic shared
// memory faults at once (in a child process, which the fault ends).
func TestOverrunFaults(t *testing.T) {
	if which := os.Getenv("KAKEYA_EMU_OVERRUN"); which != "" {
		g, err := emu.Alloc(1024)
		if err != nil {
			t.Fatal(err)
		}
		// overrun(float *g, int i, int shared): 8 + 4 + 4.
		a := binary.LittleEndian.AppendUint64(nil, g)
		if which == "shared" {
			a = binary.LittleEndian.AppendUint32(a, 16) // 64 bytes given
			a = binary.LittleEndian.AppendUint32(a, 1)
		} else {
			a = binary.LittleEndian.AppendUint32(a, 256) // 1024 bytes allocated
			a = binary.LittleEndian.AppendUint32(a, 0)
		}
		err = Run("overrun", block(1), block(32), 64, a, 1)
		t.Fatalf("the overrun did not fault (error %v)", err)
	}
	for _, which := range []string{"shared", "global"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOverrunFaults$")
		cmd.Env = append(os.Environ(), "KAKEYA_EMU_OVERRUN="+which)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "SIGSEGV") {
			t.Errorf("%s overrun: %v, output:\n%s", which, err, out)
		}
	}
}

// mmaFragments lays A (16 x 16, row-major) and B (16 x 8, B[k][n]) out as
// the lanes' registers of mma.m16n8k16 with .bf16/.f16 operands, by the
// PTX ISA's figures ("Matrix Fragments for mma.m16n8k16 with floating
// point type"), written out here apart from the emulator's code: lane l,
// groupID g = l/4, threadID_in_group t = l%4, holds in its four A
// registers (low half first) A[g][2t], A[g][2t+1]; A[g+8][2t], A[g+8][2t+1];
// A[g][2t+8], A[g][2t+9]; A[g+8][2t+8], A[g+8][2t+9]; in its two B
// registers B[2t][g], B[2t+1][g]; B[2t+8][g], B[2t+9][g]; and its four
// accumulators are C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
func mmaFragments(a [16][16]uint16, b [16][8]uint16) (af []uint32, bf []uint32) {
	pack := func(lo, hi uint16) uint32 { return uint32(lo) | uint32(hi)<<16 }
	for l := range 32 {
		g, t := l/4, l%4
		af = append(af, pack(a[g][2*t], a[g][2*t+1]), pack(a[g+8][2*t], a[g+8][2*t+1]),
			pack(a[g][2*t+8], a[g][2*t+9]), pack(a[g+8][2*t+8], a[g+8][2*t+9]))
		bf = append(bf, pack(b[2*t][g], b[2*t+1][g]), pack(b[2*t+8][g], b[2*t+9][g]))
	}
	return af, bf
}

// The emulated tensor-core product takes its operands from the lanes'
// registers by the PTX ISA's fragment layout and gives each lane its
// part of D: checked against A B + C summed here, for bf16 and f16
// operands whose products are exact. A fragment mapping one register
// off (the two middle A registers swapped, a plausible slip) gives wrong
// results.
func TestMMAFragmentLayout(t *testing.T) {
	u32s := func(v []uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	for _, f16 := range []bool{false, true} {
		var a [16][16]uint16
		var b [16][8]uint16
		var av [16][16]float64
		var bv [16][8]float64
		// Small distinct integers: every product and sum is exact.
		enc := func(v int) uint16 {
			if f16 {
				return f32ToF16Exact(float32(v))
			}
			return uint16(math.Float32bits(float32(v)) >> 16)
		}
		for i := range 16 {
			for k := range 16 {
				v := (i*16+k)%23 - 11
				a[i][k], av[i][k] = enc(v), float64(v)
			}
		}
		for k := range 16 {
			for n := range 8 {
				v := (k*8+n)%13 - 6
				b[k][n], bv[k][n] = enc(v), float64(v)
			}
		}
		af, bf := mmaFragments(a, b)
		c := make([]float32, 128)
		for l := range 32 {
			for i := range 4 {
				c[4*l+i] = float32(l*4 + i) // the accumulators' own values
			}
		}
		for _, swap := range []bool{false, true} {
			afs := append([]uint32(nil), af...)
			if swap {
				for l := range 32 {
					afs[4*l+1], afs[4*l+2] = afs[4*l+2], afs[4*l+1]
				}
			}
			cb := make([]byte, 0, 512)
			for _, v := range c {
				cb = binary.LittleEndian.AppendUint32(cb, math.Float32bits(v))
			}
			dp, ap, bp := mem(t, cb), mem(t, u32s(afs)), mem(t, u32s(bf))
			var kind uint64
			if f16 {
				kind = 1
			}
			if err := Run("mma_probe", block(1), block(32), 0, args(dp, ap, bp, kind)[:28], 3); err != nil {
				t.Fatal(err)
			}
			out := make([]byte, 512)
			emu.CopyOut(out, dp)
			bad := 0
			for l := range 32 {
				g, tq := l/4, l%4
				for i := range 4 {
					row, col := g+8*(i/2), 2*tq+i%2
					want := float64(c[4*l+i])
					for k := range 16 {
						want += av[row][k] * bv[k][col]
					}
					if got := math.Float32frombits(binary.LittleEndian.Uint32(out[16*l+4*i:])); float64(got) != want {
						bad++
						if !swap && bad < 4 {
							t.Errorf("f16 %v: lane %d d[%d] (D[%d][%d]) = %v, want %v", f16, l, i, row, col, got, want)
						}
					}
				}
			}
			if swap && bad == 0 {
				t.Errorf("f16 %v: A's registers 1 and 2 swapped gave the right D: the layout is not checked", f16)
			}
		}
	}
}

// The tf32 product m16n8k8 takes its operands by the PTX ISA's figures
// for .tf32 ("Matrix Fragments for mma.m16n8k8", written out here apart
// from the emulator's code: lane l, g = l/4, t = l%4, holds A[g][t],
// A[g+8][t], A[g][t+4], A[g+8][t+4] and B[t][g], B[t+4][g], a register
// each) and reads each as tf32, ignoring its low 13 bits (set here to
// noise that would change the sum): checked against A B + C summed here,
// and a layout one register off (A's middle two swapped) fails.
func TestMMATF32FragmentLayout(t *testing.T) {
	var av [16][8]float64
	var bv [8][8]float64
	for i := range 16 {
		for k := range 8 {
			av[i][k] = float64((i*8+k)%23-11) * 1.5
		}
	}
	for k := range 8 {
		for n := range 8 {
			bv[k][n] = float64((k*8+n)%13-6) * 0.25
		}
	}
	bits := func(v float64, noise uint32) uint32 { return math.Float32bits(float32(v)) | noise&0x1fff }
	var af, bf []uint32
	for l := range 32 {
		g, tq := l/4, l%4
		n := uint32(l*2654435761) >> 7
		af = append(af, bits(av[g][tq], n), bits(av[g+8][tq], n>>1), bits(av[g][tq+4], n>>2), bits(av[g+8][tq+4], n>>3))
		bf = append(bf, bits(bv[tq][g], n>>4), bits(bv[tq+4][g], n>>5))
	}
	for _, swap := range []bool{false, true} {
		afs := append([]uint32(nil), af...)
		if swap {
			for l := range 32 {
				afs[4*l+1], afs[4*l+2] = afs[4*l+2], afs[4*l+1]
			}
		}
		var ab, bb, cb []byte
		for _, x := range afs {
			ab = binary.LittleEndian.AppendUint32(ab, x)
		}
		for _, x := range bf {
			bb = binary.LittleEndian.AppendUint32(bb, x)
		}
		for i := range 128 {
			cb = binary.LittleEndian.AppendUint32(cb, math.Float32bits(float32(i)))
		}
		dp, ap, bp := mem(t, cb), mem(t, ab), mem(t, bb)
		if err := Run("mma_probe", block(1), block(32), 0, args(dp, ap, bp, 2)[:28], 5); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 512)
		emu.CopyOut(out, dp)
		bad := 0
		for l := range 32 {
			g, tq := l/4, l%4
			for i := range 4 {
				row, col := g+8*(i/2), 2*tq+i%2
				want := float64(4*l + i)
				for k := range 8 {
					want += av[row][k] * bv[k][col]
				}
				if got := math.Float32frombits(binary.LittleEndian.Uint32(out[16*l+4*i:])); float64(got) != want {
					bad++
					if !swap && bad < 4 {
						t.Errorf("lane %d d[%d] (D[%d][%d]) = %v, want %v", l, i, row, col, got, want)
					}
				}
			}
		}
		if swap && bad == 0 {
			t.Error("A's registers 1 and 2 swapped gave the right D: the layout is not checked")
		}
	}
}

// f32ToF16Exact encodes a small integer (|v| < 2048) as an IEEE half.
func f32ToF16Exact(v float32) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	e := 0
	for v >= 2 {
		v /= 2
		e++
	}
	return sign | uint16(e+15)<<10 | uint16((v-1)*1024)
}
