package cudabackend

// The kernels, launched as launch.go describes them, run through the CPU
// emulator and are checked against compute/reference on random inputs of
// awkward sizes under several schedules (seeds).

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/reference"
	kcuda "github.com/kakeya-ai/kakeya/kernels/cuda"
	"github.com/kakeya-ai/kakeya/kernels/cuda/emu"
	"github.com/kakeya-ai/kakeya/tensor"
)

// emuSeeds are the schedules every launch is run under.
var emuSeeds = []uint64{1, 2, 0x9e3779b9}

// devMem is emulated device memory that a test frees at its end.
type devMem struct {
	t testing.TB
}

func newDevMem(t testing.TB) *devMem {
	if !emu.Available() {
		t.Skip("no kernel emulation in this build (it needs cgo on Linux)")
	}
	return &devMem{t: t}
}

func (m *devMem) bytes(b []byte) Ptr {
	p, err := emu.Alloc(len(b))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { emu.Free(p) })
	emu.CopyIn(p, b)
	return Ptr(p)
}

func (m *devMem) f32(v []float32) Ptr { return m.bytes(f32Bytes(v)) }

func (m *devMem) u16(v []uint16) Ptr {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return m.bytes(b)
}

func (m *devMem) i32(v []int32) Ptr {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return m.bytes(b)
}

func (m *devMem) u64(v []uint64) Ptr {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return m.bytes(b)
}

func (m *devMem) read(p Ptr, n int) []float32 {
	b := make([]byte, 4*n)
	emu.CopyOut(b, uint64(p))
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// runLaunches runs ls in order through the emulator.
func runLaunches(t testing.TB, seed uint64, ls ...Launch) {
	t.Helper()
	for _, l := range ls {
		err := emu.Run(l.Kernel, [3]uint32{l.Grid.X, l.Grid.Y, l.Grid.Z}, [3]uint32{l.Block.X, l.Block.Y, l.Block.Z}, l.Shared, l.Args, seed)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64()) * scale
	}
	return v
}

// refBuf returns a reference-backend buffer holding v.
func refBuf(v []float32) compute.Buffer {
	b := reference.Backend{}.Alloc(len(v))
	reference.Backend{}.Write(b, v)
	return b
}

func refRead(b compute.Buffer) []float32 {
	v := make([]float32, b.Len)
	reference.Backend{}.Read(v, b)
	return v
}

// checkClose fails when got and want differ by more than tol relative to
// want's largest magnitude (at least 1).
func checkClose(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 1.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	worst, at := 0.0, -1
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(float64(got[i])) {
			d = math.Inf(1)
		}
		if d > worst {
			worst, at = d, i
		}
	}
	if worst > tol*scale {
		t.Fatalf("%s: value %d is %v, want %v (error %.3g > %.3g)", what, at, got[at], want[at], worst, tol*scale)
	}
}

// weightOf returns a random rows x cols matrix of dt as the reference
// uploads it and as the device stores it.
func weightOf(r *rand.Rand, dt tensor.DType, rows, cols int) (tensor.Mat, []byte) {
	m := tensor.Mat{DType: dt, Rows: rows, Cols: cols}
	v := randF32(r, rows*cols, 0.5)
	if dt == tensor.F32 {
		m.F32 = v
		return m, f32Bytes(v)
	}
	m.U16 = make([]uint16, len(v))
	b := make([]byte, 2*len(v))
	for i, x := range v {
		if dt == tensor.BF16 {
			m.U16[i] = tensor.F32ToBF16(x)
		} else {
			m.U16[i] = tensor.F32ToF16(x)
		}
		binary.LittleEndian.PutUint16(b[2*i:], m.U16[i])
	}
	return m, b
}

var dtypes = []tensor.DType{tensor.F32, tensor.BF16, tensor.F16}

func TestLaunchEmbed(t *testing.T) {
	m := newDevMem(t)
	ref := reference.Backend{}
	for _, dt := range dtypes {
		for _, sz := range []struct{ vocab, cols, n int }{{7, 5, 3}, {50, 300, 9}} {
			t.Run(fmt.Sprintf("%v/%dx%d/n%d", dt, sz.vocab, sz.cols, sz.n), func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, uint64(sz.cols)))
				mat, raw := weightOf(r, dt, sz.vocab, sz.cols)
				// Special values the conversions must keep: f16
				// subnormals, infinities, signed zero.
				if dt == tensor.F16 {
					copy(mat.U16, []uint16{0x0001, 0x8200, 0x7c00, 0xfc00, 0x8000})
					for i := range 5 {
						binary.LittleEndian.PutUint16(raw[2*i:], mat.U16[i])
					}
				}
				ids := make([]int, sz.n)
				ids32 := make([]int32, sz.n)
				for i := range ids {
					ids[i] = r.IntN(sz.vocab)
					ids32[i] = int32(ids[i])
				}
				ids[0], ids32[0] = 0, 0
				w, _ := ref.Upload(mat)
				want := ref.Alloc(sz.n * sz.cols)
				ref.Embed(want, w, ids)
				table, idp := m.bytes(raw), m.i32(ids32)
				for _, seed := range emuSeeds {
					out := m.f32(make([]float32, sz.n*sz.cols))
					runLaunches(t, seed, embedLaunch(dt, out, table, idp, sz.n, sz.cols))
					checkClose(t, "embed", m.read(out, sz.n*sz.cols), refRead(want), 0)
				}
			})
		}
	}
}

func TestLaunchElementwise(t *testing.T) {
	m := newDevMem(t)
	ref := reference.Backend{}
	for _, sz := range []struct{ rows, cols int }{{1, 1}, {3, 7}, {5, 257}, {2, 1000}} {
		t.Run(fmt.Sprintf("%dx%d", sz.rows, sz.cols), func(t *testing.T) {
			r := rand.New(rand.NewPCG(2, uint64(sz.rows*sz.cols)))
			n := sz.rows * sz.cols
			x, y, w := randF32(r, n, 2), randF32(r, n, 2), randF32(r, sz.cols, 1)
			cases := []struct {
				name string
				ref  func() []float32
				dev  func(x, y, w Ptr) (Launch, Ptr)
			}{
				{"rmsnorm", func() []float32 {
					out := ref.Alloc(n)
					ref.RMSNorm(out, refBuf(x), refBuf(w), sz.rows, 1e-5)
					return refRead(out)
				}, func(x, y, w Ptr) (Launch, Ptr) { return rmsNormLaunch(x, x, w, sz.rows, sz.cols, 1e-5), x }},
				{"rmsnorm_add", func() []float32 {
					xn, yb := ref.Alloc(n), refBuf(y)
					ref.RMSNorm(xn, refBuf(x), refBuf(w), sz.rows, 1e-5)
					ref.Add(yb, xn)
					return refRead(yb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return rmsNormAddLaunch(y, x, w, sz.rows, sz.cols, 1e-5), y }},
				{"add_rows", func() []float32 {
					xb := refBuf(x)
					ref.AddRows(xb, refBuf(w), sz.rows)
					return refRead(xb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return addRowsLaunch(x, w, sz.rows, sz.cols), x }},
				{"add", func() []float32 {
					xb := refBuf(x)
					ref.Add(xb, refBuf(y))
					return refRead(xb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return addLaunch(x, y, n), x }},
				{"silu_mul", func() []float32 {
					xb := refBuf(x)
					ref.SiLUMul(xb, refBuf(y))
					return refRead(xb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return siluMulLaunch(x, y, n), x }},
				// Gemma's (compute.ArchOps), against the float64 reference.
				{"gelu_tanh_mul", func() []float32 {
					xb := refBuf(x)
					ref.GELUTanhMul(xb, refBuf(y))
					return refRead(xb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return geluTanhMulLaunch(x, y, n), x }},
				{"scalar_mul", func() []float32 {
					xb := refBuf(x)
					ref.Scale(xb, 33.941124)
					return refRead(xb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return scalarMulLaunch(x, 33.941124, n), x }},
				{"softcap", func() []float32 {
					xb := refBuf(x)
					ref.Softcap(xb, 0.75) // x in (-2, 2): through the bend and into saturation
					return refRead(xb)
				}, func(x, y, w Ptr) (Launch, Ptr) { return softcapLaunch(x, 0.75, n), x }},
			}
			for _, c := range cases {
				want := c.ref()
				for _, seed := range emuSeeds {
					l, out := c.dev(m.f32(x), m.f32(y), m.f32(w))
					runLaunches(t, seed, l)
					checkClose(t, c.name, m.read(out, n), want, 2e-6)
				}
			}
		})
	}
}

func TestLaunchRoPE(t *testing.T) {
	m := newDevMem(t)
	ref := reference.Backend{}
	for _, sz := range []struct{ rows, heads, d, start int }{{1, 1, 2, 0}, {3, 7, 64, 5}, {5, 2, 128, 17}} {
		t.Run(fmt.Sprintf("%dx%dx%d@%d", sz.rows, sz.heads, sz.d, sz.start), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(sz.d)))
			n := sz.rows * sz.heads * sz.d
			pos := sz.start + sz.rows
			x := randF32(r, n, 1)
			cos, sin := ropeTables(pos, sz.d)
			xb := refBuf(x)
			ref.RoPE(xb, sz.rows, sz.heads, sz.d, sz.start, refBuf(cos), refBuf(sin))
			cp, sp := m.f32(cos), m.f32(sin)
			for _, seed := range emuSeeds {
				xp := m.f32(x)
				runLaunches(t, seed, ropeLaunch(xp, sz.rows, sz.heads, sz.d, sz.start, cp, sp))
				checkClose(t, "rope", m.read(xp, n), refRead(xb), 1e-6)
			}
		})
	}
}

// kv_write stores rows of every part of a run at once, float32 exactly
// and bf16 rounded as tensor.F32ToBF16 rounds (ties to even, NaN kept,
// overflow to infinity), leaving the part's other rows alone: parts
// allocated in a shuffled order, sources strided within one buffer, sizes
// that fill no whole block of threads.
func TestLaunchKVWrite(t *testing.T) {
	m := newDevMem(t)
	type size struct{ parts, bs, d, row, rows, stride int }
	sizes := []size{{1, 1, 2, 0, 1, 2}, {4, 16, 64, 5, 1, 128}, {6, 7, 40, 2, 5, 3 * 40}, {3, 64, 128, 0, 64, 128}, {10, 32, 256, 31, 1, 1000}, {2, 9, 30, 1, 8, 31}}
	for _, sz := range sizes {
		for _, bf16 := range []bool{false, true} {
			name := fmt.Sprintf("%dx%dx%d/rows%d+%d/stride%d/bf16=%v", sz.parts, sz.bs, sz.d, sz.row, sz.rows, sz.stride, bf16)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(9, uint64(sz.parts*sz.bs*sz.d+sz.row)))
				esize := 4
				if bf16 {
					esize = 2
				}
				// Sources: each part's rows lie at its own offset in one
				// buffer, stride apart, as a layer's heads do.
				n := sz.parts*sz.d + (sz.rows-1)*sz.stride
				src := randF32(r, n, 3)
				// Values on bf16's edges: exact ties (odd and even), a NaN,
				// infinities, the largest finite float rounding up,
				// subnormals, signed zero.
				special := []uint32{0x3f808000, 0x3f818000, 0x7fc00001, 0xffa00000, 0x7f800000, 0xff800000, 0x7f7fffff, 0x00000001, 0x80008000, 0x80000000, 0x3f80ffff}
				for i, u := range special {
					if i < len(src) {
						src[i] = math.Float32frombits(u)
					}
				}
				srcDev := m.f32(src)
				order := r.Perm(sz.parts)
				olds := make([][]byte, sz.parts)
				dst := make([]Ptr, sz.parts)
				for _, e := range order {
					olds[e] = make([]byte, esize*sz.bs*sz.d)
					for i := range olds[e] {
						olds[e][i] = byte(r.Uint32())
					}
					dst[e] = m.bytes(olds[e])
				}
				tab := make([]uint64, 2*sz.parts)
				for e := range sz.parts {
					tab[e], tab[sz.parts+e] = uint64(dst[e]), uint64(srcDev)+uint64(4*e*sz.d)
				}
				format := int32(partF32)
				if bf16 {
					format = partBF16
				}
				l := kvWriteLaunch(m.u64(tab), sz.parts, sz.row, sz.rows, sz.d, sz.stride, format)
				for _, seed := range emuSeeds {
					runLaunches(t, seed, l)
					for e := range sz.parts {
						want := slices.Clone(olds[e])
						for rr := range sz.rows {
							for c := range sz.d {
								v := src[e*sz.d+rr*sz.stride+c]
								at := (sz.row+rr)*sz.d + c
								if bf16 {
									binary.LittleEndian.PutUint16(want[2*at:], tensor.F32ToBF16(v))
								} else {
									binary.LittleEndian.PutUint32(want[4*at:], math.Float32bits(v))
								}
							}
						}
						got := make([]byte, len(want))
						emu.CopyOut(got, uint64(dst[e]))
						for i := 0; i < len(got); i += esize {
							if !slices.Equal(got[i:i+esize], want[i:i+esize]) {
								t.Fatalf("seed %d part %d value %d (row %d): % x, want % x", seed, e, i/esize, i/esize/sz.d, got[i:i+esize], want[i:i+esize])
							}
						}
					}
				}
			})
		}
	}
}

// ropeTables returns cos and sin for positions 0..pos-1, d/2 per position,
// at base 10000.
func ropeTables(pos, d int) (cos, sin []float32) {
	half := d / 2
	cos, sin = make([]float32, pos*half), make([]float32, pos*half)
	for p := range pos {
		for i := range half {
			a := float64(p) * math.Pow(10000, -float64(2*i)/float64(d))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// The committed PTX and the emulator hold the same kernels, for sm_80 and
// PTX ISA 7.8 (what make ptx produces; make ptx-check keeps it current).
func TestPTXMatchesEmulator(t *testing.T) {
	ptx := string(kcuda.PTX())
	if !strings.Contains(ptx, "\n.version 7.8\n") || !strings.Contains(ptx, "\n.target sm_80\n") {
		t.Fatal("the PTX is not PTX ISA 7.8 for sm_80: run make ptx")
	}
	var entries []string
	for _, m := range regexp.MustCompile(`\.entry ([A-Za-z0-9_]+)\(`).FindAllStringSubmatch(ptx, -1) {
		entries = append(entries, m[1])
	}
	emu := emu.Kernels()
	if emu == nil {
		t.Skip("no kernel emulation in this build")
	}
	slices.Sort(entries)
	emu = slices.Sorted(slices.Values(emu))
	if !slices.Equal(entries, emu) {
		t.Fatalf("PTX entries %v, emulated kernels %v", entries, emu)
	}
}

func TestLaunchMatVecMatMul(t *testing.T) {
	m := newDevMem(t)
	ref := reference.Backend{}
	type size struct{ n, rows, cols int }
	// Rows that fill no whole block, columns that are and are not a
	// multiple of 8 (the 16-byte path and the scalar one), columns past one
	// staged chunk, every n of the decode kernel.
	// Rows from 2,112 up take one warp per row, fewer rows split a row
	// between 2, 4 or 8 warps when it has the columns for it.
	sizes := []size{{1, 1, 1}, {1, 13, 8}, {3, 9, 21}, {8, 37, 64}, {2, 17, 1032}, {5, 11, 1100}, {7, 70, 72},
		{1, 40, 4104}, {3, 300, 600}, {2, 700, 1030}, {1, 2200, 24}}
	matmul := []size{{1, 1, 1}, {9, 13, 21}, {70, 65, 33}, {64, 64, 16}, {3, 130, 200}}
	for _, dt := range dtypes {
		for _, kind := range []string{"matvec", "matmul"} {
			list := sizes
			if kind == "matmul" {
				list = matmul
			}
			for _, sz := range list {
				t.Run(fmt.Sprintf("%s/%v/%dx%dx%d", kind, dt, sz.n, sz.rows, sz.cols), func(t *testing.T) {
					r := rand.New(rand.NewPCG(4, uint64(sz.n*sz.rows*sz.cols)))
					mat, raw := weightOf(r, dt, sz.rows, sz.cols)
					x := randF32(r, sz.n*sz.cols, 1)
					w, _ := ref.Upload(mat)
					want := ref.Alloc(sz.n * sz.rows)
					ref.MatMul(want, refBuf(x), sz.n, w)
					wp, xp := m.bytes(raw), m.f32(x)
					for _, seed := range emuSeeds[:2] {
						out := m.f32(make([]float32, sz.n*sz.rows))
						l := matMulLaunch(dt, out, xp, wp, sz.n, sz.rows, sz.cols)
						if kind == "matvec" {
							l = matVecLaunch(dt, out, xp, wp, sz.n, sz.rows, sz.cols)
						}
						runLaunches(t, seed, l)
						checkClose(t, kind, m.read(out, sz.n*sz.rows), refRead(want), 1e-5)
					}
				})
			}
		}
	}
}

// The decode kernels, fused or not, read weights with 16-byte loads.
func TestMatVecLoads16Bytes(t *testing.T) {
	ptx := string(kcuda.PTX())
	var kernels []string
	for _, k := range []string{"matvec", "norm_qkv", "norm_swiglu", "matvec_add", "norm_matvec"} {
		for _, dt := range dtypes {
			kernels = append(kernels, k+"_"+dtypeSuffix(dt))
		}
	}
	for _, k := range kernels {
		i := strings.Index(ptx, ".entry "+k+"(")
		if i < 0 {
			t.Fatalf("no %s in the PTX", k)
		}
		body := ptx[i:]
		if j := strings.Index(body, "\n}\n"); j >= 0 {
			body = body[:j]
		}
		if !regexp.MustCompile(`ld\.global(\.nc)?\.v4\.(u32|f32|b32)`).MatchString(body) {
			t.Errorf("%s loads no 16-byte vectors of weights", k)
		}
	}
}

// refKV is a KV layer of reference-store parts, indexed block*kvHeads+g.
type refKV struct {
	n, kvHeads int
	parts      [][2]compute.Part
}

func (k *refKV) Len() int { return k.n }
func (k *refKV) Part(head, block, kv int) compute.Part {
	return k.parts[block*k.kvHeads+head][kv]
}

// attnCase is one attention geometry and the storage of its blocks:
// hot "f32" or "bf16" parts, and full blocks encoded as enc says: "" (all
// hot), one codec name for both sides, "K/V" codecs for keys and values
// ("hot" keeps that side hot; "pre+X" is codec X preconditioned by a
// factor of each KV head's own, keys only), or "mixed" or "mixed-pre"
// (full blocks cycle through several of those).
type attnCase struct {
	name                            string
	heads, kvHeads, d, bs, start, n int
	window                          int
	hot                             string // f32 or bf16
	enc                             string
	seeds                           int // schedules to run (0: two)
}

func TestLaunchAttention(t *testing.T) {
	cases := []attnCase{
		{"decode/gqa7/d64", 7, 1, 64, 16, 40, 1, 0, "f32", "", 0},
		{"decode/1to1/d128/bf16", 2, 2, 128, 32, 70, 1, 0, "bf16", "", 0},
		{"prefill/gqa7/d64", 14, 2, 64, 16, 0, 37, 0, "f32", "", 0},
		{"chunk/1to1/d128/bf16", 4, 4, 128, 16, 21, 9, 0, "bf16", "", 0},
		{"window/decode", 4, 2, 64, 16, 50, 1, 20, "f32", "", 0},
		{"window/prefill", 4, 2, 64, 8, 3, 30, 7, "bf16", "", 0},
		{"oneblock/d8", 2, 1, 8, 64, 0, 5, 0, "f32", "", 0},
		{"decode/d256", 2, 1, 256, 16, 20, 1, 0, "f32", "", 0},
		{"decode/int8/gqa7", 7, 1, 64, 32, 90, 1, 0, "bf16", "int8", 0},
		{"prefill/int4/d128", 4, 2, 128, 16, 40, 11, 0, "bf16", "int4", 0},
		{"decode/kivi4/d64", 7, 1, 64, 64, 150, 1, 0, "bf16", "int4-k/int4", 0},
		{"decode/kivi2/bs48", 4, 2, 64, 48, 100, 2, 0, "bf16", "int2-k/int2", 0},
		{"decode/int8-int4/d128", 2, 1, 128, 16, 50, 1, 0, "f32", "int8/int4", 0},
		// Groups other than 32, read from the block header: 64 values
		// (q4_0's 4.5 bits at head_dim 64), 16, and per channel 8 tokens.
		{"decode/int4-g64/d64", 7, 1, 64, 16, 50, 1, 0, "bf16", "int4-g64", 0},
		{"decode/int4-f16/d64", 7, 1, 64, 16, 50, 1, 0, "bf16", "int4-f16", 0},
		{"prefill/int2-k-f16-int4-f16-g64/d128", 4, 2, 128, 16, 40, 11, 0, "f32", "int2-k-f16/int4-f16-g64", 0},
		{"prefill/int4-g16-int2-g64/d128", 4, 2, 128, 16, 40, 11, 0, "f32", "int4-g16/int2-g64", 0},
		{"decode/int4-k-g8/d40", 6, 3, 40, 16, 40, 2, 0, "f32", "int4-k-g8/int4-g64", 0},
		{"decode/kakeya/d64", 7, 1, 64, 16, 50, 1, 0, "bf16", "kakeya", 0},
		{"prefill/kakeya-int8/d128", 4, 2, 128, 32, 64, 8, 0, "f32", "kakeya/int8", 0},
		{"decode/kakeya-variants/d40", 6, 3, 40, 16, 40, 2, 0, "f32", "kakeya-b2c16/kakeya-r0", 0},
		{"window/kakeya-b4c8", 4, 1, 64, 16, 60, 3, 21, "bf16", "kakeya-b4c8", 0},
		{"decode/mixed/odd-d", 6, 3, 40, 16, 61, 2, 0, "f32", "mixed", 0},
		{"window/mixed", 8, 2, 64, 16, 70, 4, 33, "bf16", "mixed", 0},
		// Preconditioned keys, un-whitened by the kernel with their KV
		// head's inverse factor.
		{"decode/pre+int8/gqa7/d64", 7, 1, 64, 16, 50, 1, 0, "bf16", "pre+int8/int8", 0},
		{"decode/pre+int8/gqa7/d128", 7, 1, 128, 32, 70, 1, 0, "f32", "pre+int8/int4", 0},
		{"decode/pre+kakeya/gqa7/d64", 7, 1, 64, 16, 50, 1, 0, "f32", "pre+kakeya/kakeya", 0},
		{"decode/pre+kakeya/gqa7/d128", 7, 1, 128, 16, 40, 1, 0, "bf16", "pre+kakeya/int8", 0},
		{"prefill/pre+kakeya/gqa7/d128", 14, 2, 128, 16, 20, 13, 0, "f32", "pre+kakeya/kakeya-b4c8", 0},
		{"prefill/pre+int8/d64", 8, 4, 64, 32, 33, 9, 0, "bf16", "pre+int8/int8", 0},
		{"decode/pre+int8/d256", 2, 1, 256, 16, 35, 1, 0, "f32", "pre+int8/hot", 0},
		{"window/pre+kakeya-b2c16", 4, 2, 64, 16, 60, 3, 21, "bf16", "pre+kakeya-b2c16/int4", 0},
		// Head dims that leave warps without columns (d < 8) or with
		// fewer columns than others (d not a multiple of 8).
		{"prefill/pre+int4/d6", 2, 1, 6, 16, 10, 9, 0, "f32", "pre+int4/int4", 0},
		{"decode/pre+int2-k/d46", 3, 1, 46, 16, 40, 1, 0, "f32", "pre+int2-k/int8", 0},
		{"decode/mixed-pre/odd-d", 6, 3, 40, 16, 100, 2, 0, "f32", "mixed-pre", 0},
		{"decode/mixed-pre/gqa7/d128", 7, 1, 128, 16, 100, 1, 0, "bf16", "mixed-pre", 0},
		// Under many schedules: a race between the kernel's phases would
		// show under some.
		{"schedules/kakeya-int4", 8, 2, 64, 16, 45, 3, 0, "bf16", "kakeya/int4", 24},
		{"schedules/pre+kakeya/gqa7", 7, 1, 64, 16, 45, 2, 0, "bf16", "pre+kakeya/int8", 24},
		{"schedules/pre+int8/d128", 4, 2, 128, 16, 30, 3, 0, "f32", "pre+int8/kakeya", 12},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testAttention(t, c) })
	}
}

// TestLaunchAttentionGemma runs the attention kernels with Gemma's
// settings against the float64 reference: a query scale that is not
// 1/sqrt(head_dim) (query_pre_attn_scalar), Gemma 2's score softcap, and
// sliding windows shorter than the context, in decode steps (one split
// and several, merged by attn_combine) and chunks, at head dims 32 (the
// tiny presets), 128 and 256 (Gemma 2 2B's and Gemma 3 1B's).
func TestLaunchAttentionGemma(t *testing.T) {
	for _, c := range []struct {
		attnCase
		scale, softcap float64
	}{
		{attnCase{"decode/window/d32", 4, 2, 32, 4, 40, 1, 8, "f32", "", 0}, 1 / math.Sqrt(24), 2},
		{attnCase{"chunk/window/d64/int8", 4, 2, 64, 16, 20, 12, 16, "bf16", "int8", 0}, 0.1, 3},
		{attnCase{"decode/window/d256", 4, 1, 256, 16, 70, 1, 32, "f32", "", 0}, 0.0625, 0},
		{attnCase{"decode/full/splits/d128", 8, 4, 128, 16, 300, 1, 0, "bf16", "", 0}, 1 / math.Sqrt(144), 1.5},
		{attnCase{"decode/window/splits/d128/kakeya", 8, 4, 128, 16, 300, 2, 100, "bf16", "kakeya/int8", 0}, 1 / math.Sqrt(144), 1.5},
	} {
		t.Run(c.name, func(t *testing.T) { testAttentionArch(t, c.attnCase, c.scale, c.softcap) })
	}
}

func testAttention(t *testing.T, c attnCase) { testAttentionArch(t, c, 0, 0) }

// testAttentionArch is testAttention with the query scale and score
// softcap of compute.AttentionParams (0: the defaults, none).
func testAttentionArch(t *testing.T, c attnCase, scale, softcap float64) {
	m := newDevMem(t)
	ref := reference.Backend{}
	r := rand.New(rand.NewPCG(5, uint64(c.heads*c.d+c.start)))
	total := c.start + c.n
	nb := (total + c.bs - 1) / c.bs
	blocks := nb + 1 // the tables may hold more blocks than the context reaches
	codecs := map[string]codec.Codec{"hot": nil}
	for _, name := range []string{"int8", "int4", "int4-k", "int2", "int2-k"} {
		cd, err := codec.New(codec.Spec{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		codecs[name] = cd
	}
	for name, o := range map[string]codec.Int4Options{
		"int4-g64":  {Bits: 4, Group: 64},
		"int4-g16":  {Bits: 4, Group: 16},
		"int2-g64":  {Bits: 2, Group: 64},
		"int4-k-g8": {Bits: 4, Group: 8, PerChannel: true},
		// fp16 group parameters (KIVI's layout) beside the default 8-bit
		// ones.
		"int4-f16":     {Bits: 4, Group: 32, F16Params: true},
		"int2-k-f16":   {Bits: 2, Group: 32, PerChannel: true, F16Params: true},
		"int4-f16-g64": {Bits: 4, Group: 64, F16Params: true},
	} {
		cd, err := codec.NewInt4(o)
		if err != nil {
			t.Fatal(err)
		}
		if cd.Name() != name {
			t.Fatalf("codec %s is named %s", name, cd.Name())
		}
		if _, ok := encodedFormat(cd, c.d); !ok {
			t.Fatalf("%s: the kernels do not read it", name)
		}
		codecs[name] = cd
	}
	for name, edit := range map[string]func(*codec.KakeyaOptions){
		"kakeya":       func(*codec.KakeyaOptions) {},
		"kakeya-b2c16": func(o *codec.KakeyaOptions) { o.Bits, o.CoeffBits, o.RandomSigns = 2, 16, false },
		"kakeya-r0":    func(o *codec.KakeyaOptions) { o.MaxRank, o.OutlierThreshold = 0, 1.5 },
		"kakeya-b4c8":  func(o *codec.KakeyaOptions) { o.Bits, o.CoeffBits, o.Seed = 4, 8, 12345 },
	} {
		o := codec.DefaultKakeyaOptions()
		edit(&o)
		cd, err := codec.NewKakeya(o)
		if err != nil {
			t.Fatal(err)
		}
		codecs[name] = cd
	}
	// Preconditioned key codecs: every codec above wrapped, one per KV
	// head, each with the Cholesky factor of a covariance of its own
	// (channels of very different scales, as queries have).
	pre := map[string][]codec.Codec{}
	for _, name := range slices.Sorted(maps.Keys(codecs)) { // in order: r draws the factors
		inner := codecs[name]
		if inner == nil {
			continue
		}
		for range c.kvHeads {
			pre["pre+"+name] = append(pre["pre+"+name], randPreconditioned(t, r, inner, c.d))
		}
	}
	// codecFor returns the codec of block b's side (0 keys, 1 values) for
	// KV head g, nil for a hot part.
	codecFor := func(b, g, side int) codec.Codec {
		if (b+1)*c.bs > total || c.enc == "" { // a partly filled block stays hot
			return nil
		}
		enc := c.enc
		switch enc {
		case "mixed":
			enc = []string{"int8", "int4-k/int4", "hot", "int2/int8", "int2-k", "kakeya/int4"}[b%6]
		case "mixed-pre":
			// Preconditioned keys of every inner format beside plain and
			// hot ones in one layer.
			enc = []string{"pre+int4/int8", "pre+int4-k/int4", "hot", "pre+int2/kakeya", "pre+int2-k/hot", "int8", "pre+kakeya/int4", "pre+int8/int2"}[b%8]
		}
		kv := strings.Split(enc, "/")
		if len(kv) == 1 {
			kv = append(kv, kv[0])
		}
		if strings.HasPrefix(kv[side], "pre+") {
			if side == 1 {
				t.Fatalf("case %s: values are never preconditioned", c.name)
			}
			return pre[kv[side]][g]
		}
		return codecs[kv[side]]
	}
	store := ref.NewBlockStore(c.bs, c.d, c.hot == "bf16")
	kv := &refKV{n: total, kvHeads: c.kvHeads, parts: make([][2]compute.Part, nb*c.kvHeads)}
	ktab, vtab := make([]uint64, blocks*c.kvHeads), make([]uint64, blocks*c.kvHeads)
	fmts := make([]int32, blocks*c.kvHeads)
	hotFmt := int32(partF32)
	if c.hot == "bf16" {
		hotFmt = partBF16
	}
	// Parts are allocated one by one in a shuffled order, so the table's
	// addresses are scattered and unordered.
	order := r.Perm(nb * c.kvHeads * 2)
	sideFmt := make([][2]int32, blocks*c.kvHeads)
	var params [2]Ptr // the key and value codecs' kakeyaParams
	// The preconditioned keys' inverse factors, each uploaded once, and
	// the table of their addresses.
	linvs := map[*codec.Preconditioned]Ptr{}
	ltab := make([]uint64, blocks*c.kvHeads)
	for _, o := range order {
		e, side := o/2, o%2
		b, g := e/c.kvHeads, e%c.kvHeads
		vals := randF32(r, c.bs*c.d, 1)
		p, err := store.NewPart()
		if err != nil {
			t.Fatal(err)
		}
		store.Write(p, 0, refBuf(vals), c.d, c.bs)
		var dev Ptr
		sideFmt[e][side] = hotFmt
		if cd := codecFor(b, g, side); cd != nil {
			enc, err := cd.Encode(nil, vals, c.bs, c.d)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.SetEncoded(p, enc, cd); err != nil {
				t.Fatal(err)
			}
			dev = m.bytes(enc)
			f, ok := encodedFormat(cd, c.d)
			inner := compute.Decoder(cd)
			if p, isPre := cd.(*codec.Preconditioned); isPre {
				if linvs[p] == 0 {
					linvs[p] = m.f32(unwhitenLayout(p.Linv, c.d))
				}
				ltab[e] = uint64(linvs[p])
				inner = p.Inner
			}
			if f == partKakeya && params[side] == 0 {
				prm, isK := kakeyaParams(inner, c.d)
				if !isK {
					t.Fatalf("no kakeyaParams for %s", cd.Name())
				}
				params[side] = m.bytes(prm)
			}
			if !ok {
				t.Fatalf("attention does not read %s", cd.Name())
			}
			sideFmt[e][side] = f
		} else {
			// Rows past the context are garbage the kernel must not read.
			for i := (total - b*c.bs) * c.d; i >= 0 && i < len(vals); i++ {
				vals[i] = float32(math.NaN())
			}
			if c.hot == "bf16" {
				u := make([]uint16, len(vals))
				for i, v := range vals {
					u[i] = tensor.F32ToBF16(v)
				}
				dev = m.u16(u)
			} else {
				dev = m.f32(vals)
			}
		}
		kv.parts[e][side] = p
		if side == 0 {
			ktab[e] = uint64(dev)
		} else {
			vtab[e] = uint64(dev)
		}
	}
	for e := range fmts {
		fmts[e] = attnFormat(sideFmt[e][0], sideFmt[e][1])
	}
	q := randF32(r, c.n*c.heads*c.d, 1)
	cos, sin := ropeTables(total, c.d)
	att, err := ref.NewAttention(compute.AttentionParams{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.d, Window: c.window, BlockSize: c.bs, MaxContext: total,
		Scale: scale, Softcap: softcap})
	if err != nil {
		t.Fatal(err)
	}
	want := ref.Alloc(c.n * c.heads * c.d)
	if err := att.Forward(want, refBuf(q), c.n, c.start, kv, refBuf(cos), refBuf(sin)); err != nil {
		t.Fatal(err)
	}
	a := attnArgs{Q: m.f32(q), N: c.n, Start: c.start, Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.d,
		Window: c.window, BlockSize: c.bs, KTab: m.u64(ktab), VTab: m.u64(vtab), Fmts: m.i32(fmts), Blocks: blocks,
		Cos: m.f32(cos), Sin: m.f32(sin), KParams: params[0], VParams: params[1], Scale: float32(scale), Softcap: float32(softcap)}
	if len(linvs) > 0 {
		a.LTab = m.u64(ltab)
	}
	if n := attentionScratch(a); n > 0 {
		a.Scratch = m.bytes(make([]byte, n))
	}
	ls := attentionLaunches(a)
	seeds := emuSeeds[:2]
	if c.seeds > 0 {
		seeds = nil
		for s := range c.seeds {
			seeds = append(seeds, uint64(s)*0x9e3779b97f4a7c15+7)
		}
	}
	for _, seed := range seeds {
		a.Out = m.f32(make([]float32, c.n*c.heads*c.d))
		ls = attentionLaunches(a)
		runLaunches(t, seed, ls...)
		checkClose(t, "attention", m.read(a.Out, c.n*c.heads*c.d), refRead(want), 2e-5)
	}
	t.Logf("%d launches, grid %v, %d bytes shared", len(ls), ls[0].Grid, ls[0].Shared)
}

// randPreconditioned wraps inner with randCholesky's factor.
func randPreconditioned(t testing.TB, r *rand.Rand, inner codec.Codec, d int) *codec.Preconditioned {
	t.Helper()
	p, err := codec.NewPreconditioned(inner, randCholesky(t, r, d), d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// randCholesky returns the Cholesky factor of a random d x d covariance
// whose channels' scales span two orders of magnitude, as queries' do.
func randCholesky(t testing.TB, r *rand.Rand, d int) []float32 {
	t.Helper()
	a := make([]float64, d*d)
	for j := range d {
		scale := math.Pow(10, 2*r.Float64()-1)
		for i := range d {
			a[i*d+j] = r.NormFloat64() * scale
		}
	}
	cov := make([]float64, d*d)
	for i := range d {
		for j := range d {
			var s float64
			for k := range d {
				s += a[i*d+k] * a[j*d+k]
			}
			cov[i*d+j] = s / float64(d)
		}
	}
	L, err := codec.Cholesky(cov, d, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	return L
}

// sampleLaunches returns launches of every kernel the launchers make, at
// the largest shapes each constructor takes.
func sampleLaunches() []Launch {
	var ls []Launch
	for _, dt := range dtypes {
		ls = append(ls, embedLaunch(dt, 0, 0, 0, 512, 8192),
			matVecLaunch(dt, 0, 0, 0, maxMatVecRows, 151936, 8192), matVecLaunch(dt, 0, 0, 0, 1, 64, 64),
			matMulLaunch(dt, 0, 0, 0, 4096, 8192, 8192),
			normQKVLaunch(qkvArgs{N: maxMatVecRows, Heads: 64, KVHeads: 8, HeadDim: 128, Cols: 8192, Start: 32760, Row: 56, Format: partBF16, dt: dt}),
			normQKVLaunch(qkvArgs{N: 1, Heads: 1, KVHeads: 1, HeadDim: 2, Cols: 1, Pos: 1, dt: dt}),
			normQKVLaunch(qkvArgs{N: 1, Heads: 14, KVHeads: 2, HeadDim: 64, Cols: 896, Start: 9, Row: 9, Format: partBF16, Step: 1, dt: dt}),
			normSwiGLULaunch(dt, 0, 0, 0, 1e-6, 0, 0, 0, 0, maxMatVecRows, 29568, 8192, false), normSwiGLULaunch(dt, 0, 0, 0, 1e-6, 0, 0, 0, 0, 1, 1, 1, true),
			matVecAddLaunch(dt, 0, 0, 0, 0, maxMatVecRows, 8192, 29568), matVecAddLaunch(dt, 0, 0, 0, 0, 1, 1, 1),
			normMatVecLaunch(dt, 0, 0, 0, 1e-6, 0, maxMatVecRows, 152064, 8192), normMatVecLaunch(dt, 0, 0, 0, 1e-6, 0, 1, 1, 1))
	}
	for _, f := range tensor.Formats { // quant.go
		ls = append(ls, quantEmbedLaunch(f.DType, 0, 0, 0, 512, 8192), quantMatVecLaunch(f.DType, 0, 0, 0, 0, 0, maxMatVecRows, 151936, 8192),
			quantMatVecLaunch(f.DType, 0, 0, 0, 0, 0, 1, 1, f.Block), quantXLaunch(f.DType, 0, 0, 0, 0, quantSplitRows, 18944), quantXLaunch(f.DType, 0, 0, 0, 0, 1, f.Block), quantMatMulLaunch(f.DType, 0, 0, 0, 4096, 8192, 8192),
			dequantLaunch(f.DType, 0, 0, 18944, 3584))
	}
	ls = append(ls, rmsNormLaunch(0, 0, 0, 512, 8192, 1e-6), rmsNormAddLaunch(0, 0, 0, 512, 8192, 1e-6), addRowsLaunch(0, 0, 512, 8192), addLaunch(0, 0, 1<<24),
		siluMulLaunch(0, 0, 1<<24), geluTanhMulLaunch(0, 0, 1<<24), scalarMulLaunch(0, 48, 1<<20), softcapLaunch(0, 30, 1<<24), ropeLaunch(0, 512, 64, 128, 32768, 0, 0), kvWriteLaunch(0, 512, 0, 64, 128, 1024, partBF16),
		kvWriteRunsLaunch(0, 256, 16, 64, 128, 1024, partBF16), copyRunsLaunch(0, 6), pcUnpackLaunch(0, 0, 0, 0, 0, 0, 0, 0, 256, 4096, 64, 128),
		encInt8Launch(0, 0, true, 256, 256, 4*(2*encThreads+33), 0, 1), encPCLaunch(0, 0, false, 256, 256, 0, 0, attnSharedCap, 0, 1),
		encInt8Launch(0, 0, false, 64, 128, 4*(2*encThreads+33), 1, 4096), encPCLaunch(0, 0, true, 64, 128, 0, 0, attnSharedCap, 1, 4096),
		encWhitenLaunch(0, 0, true, 64, 128, 0, 1, 4096), encWhitenLaunch(0, 0, false, 16, 64, 1, 0, 1),
		encInt4Launch(0, 0, true, 256, 256, 4|32<<8, attnSharedCap, 0, 1), encInt4Launch(0, 0, false, 64, 128, 0, 4*(2*encThreads+35), 1, 4096),
		encPCECLaunch(0, 0, false, 256, 256, 0, 0, attnSharedCap, 0, 1), encPCECLaunch(0, 0, true, 64, 128, 0, 0, attnSharedCap, 1, 4096),
		encBF16Launch(0, 0, false, 256, 256, 0, 1), encBF16Launch(0, 0, false, 64, 128, 1, 4096),
		argMaxLaunch(0, 0, 64, 152064), drawLaunch(0, 0, 0, 64, 152064),
		drawSplitLaunches(0, 0, 0, 0, 0, 4, 151936, 32, 4768, 40)[0], drawSplitLaunches(0, 0, 0, 0, 0, 4, 151936, 32, 4768, 40)[1],
		toBF16Launch(0, 0, 2048*18944), toF16RowsLaunch(0, 0, 0, 2048, 18944), scaleRowsLaunch(0, 0, 2048, 152064),
		gemmLaunch(tensor.BF16, 0, 0, 0, 0, 2048, 18944, 3584), gemmLaunch(tensor.F16, 0, 0, 0, 0, 9, 37, 52))
	for _, d := range []int{2, 8, 64, 80, 128, 256} {
		for _, n := range []int{1, 7, 512} {
			for _, lt := range []Ptr{0, 1} { // attn_split and attn_split_pre
				ls = append(ls, attentionLaunches(attnArgs{N: n, Start: 32768 - n, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512, LTab: lt})...)
				ls = append(ls, attentionLaunches(attnArgs{N: n, Start: 32768 - n, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512, LTab: lt, Step: 1})...)
			}
			// attn_split_pc
			ls = append(ls, attentionLaunches(attnArgs{N: n, Start: 32768 - n, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512, KPTab: 1, VPTab: 2})...)
			ls = append(ls, attentionLaunches(attnArgs{N: n, Start: 32768 - n, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512, KPTab: 1, VPTab: 2, Step: 1})...)
			// A sliding layer's (Gemma's window, query scale and softcap)
			ls = append(ls, attentionLaunches(attnArgs{N: n, Start: 32768 - n, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512, Window: 4096, Scale: 0.0625, Softcap: 50, Step: 1})...)
			// attn_batch, _pre and _pc: 256 sequences, the longest pass n rows
			for _, v := range [][2]bool{{false, false}, {true, false}, {true, true}} {
				a := attnBatchArgs{NPasses: 256, N: 255 + n, MaxN: n, Context: 32768, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Pre: v[0], PC: v[1], Rotate: true}
				ls = append(ls, attnBatchLaunches(a, a.plan(255*ceilDiv(8, attnBatchRows(64, 8, d, n))+ceilDiv(8*n, attnBatchRows(64, 8, d, n))))...)
			}
		}
	}
	// The tensor-core prefill attention, one sequence's and batched.
	for _, d := range []int{64, 128} {
		ls = append(ls, prefillLaunch(attnArgs{N: 2048, Start: 32768 - 2048, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512}),
			prefillBatchLaunch(attnBatchArgs{NPasses: 256, N: 255 + 512, MaxN: 512, Context: 32768, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Rotate: true}, 255+ceilDiv(8*512, prefillRows)),
			// Their _pc kernels: kakeya-pc parts (the tables' kptab, vptab).
			prefillLaunch(attnArgs{N: 2048, Start: 32768 - 2048, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Blocks: 512, KPTab: 1 << 40, VPTab: 1 << 41}),
			prefillBatchLaunch(attnBatchArgs{NPasses: 256, N: 255 + 512, MaxN: 512, Context: 32768, Heads: 64, KVHeads: 8, HeadDim: d, BlockSize: 64, Rotate: true, PC: true}, 255+ceilDiv(8*512, prefillRows)))
	}
	return ls
}

// Every launch stays within what the device accepts without opting in:
// the kernel's __launch_bounds__ (the PTX's .maxntid) and 48 KiB of
// dynamic shared memory, for the largest shapes each constructor takes.
func TestLaunchesWithinDeviceLimits(t *testing.T) {
	ptx := string(kcuda.PTX())
	bounds := map[string]int{}
	for _, m := range regexp.MustCompile(`\.entry ([A-Za-z0-9_]+)\([^)]*\)\s*\.maxntid (\d+), 1, 1`).FindAllStringSubmatch(ptx, -1) {
		var n int
		fmt.Sscan(m[2], &n)
		bounds[m[1]] = n
	}
	for _, l := range sampleLaunches() {
		threads := int(l.Block.X * l.Block.Y * l.Block.Z)
		if b, ok := bounds[l.Kernel]; ok && threads > b {
			t.Errorf("%s: %d threads per block, launch bounds %d", l.Kernel, threads, b)
		}
		if threads > 1024 || threads%32 != 0 {
			t.Errorf("%s: %d threads per block", l.Kernel, threads)
		}
		if l.Shared > 48<<10 {
			t.Errorf("%s: %d bytes of dynamic shared memory", l.Kernel, l.Shared)
		}
	}
	if len(bounds) == 0 {
		t.Fatal("no .maxntid in the PTX")
	}
}

// ptxParam is one parameter of a PTX entry: its size and alignment.
type ptxParam struct{ size, align int }

// ptxEntries returns every .entry of the PTX with its parameter list.
func ptxEntries(t *testing.T, ptx string) map[string][]ptxParam {
	t.Helper()
	entries := map[string][]ptxParam{}
	param := regexp.MustCompile(`^\.param\s+(?:\.align\s+(\d+)\s+)?\.([bfsu])(\d+)\s+(?:\.ptr\s+\S+\s+(?:\.align\s+\d+\s+)?)?(\w+?)(?:\[(\d+)\])?,?$`)
	for _, m := range regexp.MustCompile(`(?s)\.entry ([A-Za-z0-9_]+)\((.*?)\)`).FindAllStringSubmatch(ptx, -1) {
		var ps []ptxParam
		for _, line := range strings.Split(m[2], "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			p := param.FindStringSubmatch(line)
			if p == nil {
				t.Fatalf("%s: cannot read the parameter %q", m[1], line)
			}
			var bits, align, count int
			fmt.Sscan(p[3], &bits)
			size := bits / 8
			align = size
			if p[1] != "" {
				fmt.Sscan(p[1], &align)
			}
			if p[5] != "" {
				fmt.Sscan(p[5], &count)
				size *= count
			}
			ps = append(ps, ptxParam{size, align})
		}
		entries[m[1]] = ps
	}
	return entries
}

// Every kernel's launcher passes exactly the parameters its PTX entry
// declares: as many, each at the offset the .param layout gives it, and
// the arguments' bytes end where the last parameter ends. A launcher whose
// arguments drift from the kernel's signature fails here, not on a GPU.
func TestLaunchParamsMatchPTX(t *testing.T) {
	entries := ptxEntries(t, string(kcuda.PTX()))
	covered := map[string]bool{}
	for _, l := range sampleLaunches() {
		ps, ok := entries[l.Kernel]
		if !ok {
			t.Errorf("%s is launched but not in the PTX", l.Kernel)
			continue
		}
		covered[l.Kernel] = true
		off := 0
		var want []uint32
		for _, p := range ps {
			off = (off + p.align - 1) / p.align * p.align
			want = append(want, uint32(off))
			off += p.size
		}
		if !slices.Equal(l.Params, want) || len(l.Args) != off {
			t.Errorf("%s: parameters at %v in %d bytes, the PTX declares them at %v in %d bytes", l.Kernel, l.Params, len(l.Args), want, off)
		}
	}
	for name := range entries {
		if !covered[name] {
			t.Errorf("no launcher test covers the PTX entry %s: add it to sampleLaunches", name)
		}
	}
	if len(entries) < 10 {
		t.Fatalf("only %d entries read from the PTX", len(entries))
	}
}

// pcBasisFrags lays the basis out as kk_pc_mix_tc loads it: for each
// group of 64 rows, k-step, column tile and lane, the lane's two B
// fragment values of mma m16n8k8 (rows q+s+8t and q+s+8t+32, column
// 8n+g), zeros past the stored rows, from an even word; nothing for head
// dims that are no multiple of 8.
func TestPCBasisFrags(t *testing.T) {
	for _, c := range []struct{ m, d, words int }{{70, 16, 3}, {64, 8, 4}, {5, 24, 0}, {9, 12, 1}} {
		basis := make([]float32, c.m*c.d)
		for i := range basis {
			basis[i] = float32(i + 1)
		}
		pre := make([]byte, 4*c.words)
		b := pcBasisFrags(pre, basis, c.m, c.d)
		if c.d%8 != 0 {
			if len(b) != len(pre) {
				t.Errorf("m %d d %d: %d bytes appended, want none", c.m, c.d, len(b)-len(pre))
			}
			continue
		}
		at := len(pre) + 4*(c.words%2)
		groups := (c.m + 63) / 64
		if want := at + 4*groups*64*c.d; len(b) != want {
			t.Fatalf("m %d d %d: %d bytes, want %d", c.m, c.d, len(b), want)
		}
		if at%8 != 0 {
			t.Fatalf("m %d d %d: fragments at byte %d, not 8-byte aligned", c.m, c.d, at)
		}
		word := func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[at+4*i:])) }
		for q := range groups {
			for s := range 8 {
				for n := range c.d / 8 {
					for l := range 32 {
						i := (((q*8+s)*(c.d/8)+n)*32 + l) * 2
						for h := range 2 {
							k, col := 64*q+s+8*(l%4)+32*h, 8*n+l/4
							var want float32
							if k < c.m {
								want = basis[k*c.d+col]
							}
							if got := word(i + h); got != want {
								t.Fatalf("m %d d %d: group %d step %d tile %d lane %d value %d = %v, want B[%d][%d] = %v",
									c.m, c.d, q, s, n, l, h, got, k, col, want)
							}
						}
					}
				}
			}
		}
	}
}
