package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cputime"
	"github.com/kakeya-ai/kakeya/tensor"
)

// quantMat returns a rows x cols matrix of format f with random codes and
// scales, seeded.
func quantMat(f *tensor.QuantFormat, rows, cols int, seed uint64) tensor.Mat {
	r := rand.New(rand.NewPCG(seed, 7))
	nb := rows * cols / f.Block
	b := make([]byte, nb*f.Bytes)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for k := range nb {
		for _, fl := range f.Fields {
			if fl.Kind == tensor.FieldF16 {
				binary.LittleEndian.PutUint16(b[k*f.Bytes+fl.Offset:], tensor.F32ToF16(float32(r.NormFloat64()*0.01)))
			}
		}
	}
	return tensor.Mat{DType: f.DType, Rows: rows, Cols: cols, Q: b}
}

// Each quantized MatMul against float64 sums over the dequantized weights:
// within float32 rounding of the weights times the activations as the
// kernel quantized them (so the integer block dots are exact), and within
// the 8-bit activation quantization of the unquantized product. Prefill
// and decode rows agree bit for bit, on one thread and on three.
func TestQuantMatMul(t *testing.T) {
	const rows, cols, n = 37, 512, 5
	r := rand.New(rand.NewPCG(3, 3))
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	x[7] = 0                  // a zero among them
	clear(x[cols : cols+256]) // an all-zero q8_K block
	for _, f := range tensor.Formats {
		t.Run(f.Name, func(t *testing.T) {
			m := quantMat(&f, rows, cols, uint64(f.DType))
			w := NewMatrix(m)
			deq := make([]float32, rows*cols)
			for i := range rows {
				RowF32(deq[i*cols:(i+1)*cols], m, i)
			}
			// The activations as the kernel quantizes them.
			l := qLayouts[f.DType]
			var a qActs
			a.quantize(x, n, cols, l)
			group := 32
			if l.kQuant {
				group = 256
			}
			xq := make([]float64, n*cols)
			for i := range xq {
				xq[i] = float64(a.qs[i]) * float64(a.d[i/group])
			}
			for _, threads := range []int{1, 3} {
				p := NewPool(threads)
				out := make([]float32, n*rows)
				p.MatMul(out, x, n, w)
				one := make([]float32, rows)
				for i := range n {
					p.MatMul(one, x[i*cols:(i+1)*cols], 1, w)
					for j := range rows {
						if one[j] != out[i*rows+j] {
							t.Fatalf("%d threads: token %d row %d: decode %v, prefill %v", threads, i, j, one[j], out[i*rows+j])
						}
					}
				}
				p.Close()
				for i := range n {
					for j := range rows {
						var exact, quant, mag float64
						for c := range cols {
							wv := float64(deq[j*cols+c])
							exact += wv * float64(x[i*cols+c])
							quant += wv * xq[i*cols+c]
							mag += math.Abs(wv * float64(x[i*cols+c]))
						}
						got := float64(out[i*rows+j])
						if d := math.Abs(got - quant); d > 1e-5*mag+1e-9 {
							t.Errorf("token %d row %d: %v, float64 over the quantized activations %v (|w||x| %v)", i, j, got, quant, mag)
						}
						if d := math.Abs(got - exact); d > 0.02*mag+1e-9 {
							t.Errorf("token %d row %d: %v, float64 %v (|w||x| %v)", i, j, got, exact, mag)
						}
					}
				}
			}
		})
	}
}

// Quantizing activations as ggml does: q8_0's scale is amax/127 in f16,
// q8_K's maps the value of largest magnitude to -127 and sums each 16.
func TestQuantizeActivations(t *testing.T) {
	x := make([]float32, 256)
	for i := range x {
		x[i] = float32(i%32) - 10
	}
	x[100] = -40
	qs, d, bs := make([]int8, 256), make([]float32, 1), make([]int32, 16)
	quantizeQ8_K(qs, d, bs, x)
	if qs[100] != -127 || math.Abs(float64(d[0]-40.0/127)) > 1e-6 {
		t.Errorf("q8_K: q %d d %v, want -127 and 40/127", qs[100], d[0])
	}
	var s int32
	for _, q := range qs[96:112] {
		s += int32(q)
	}
	if bs[6] != s {
		t.Errorf("bsum %d, want %d", bs[6], s)
	}
	q0, d0 := make([]int8, 32), make([]float32, 1)
	quantizeQ8_0(q0, d0, x[:32])
	if q0[31] != 127 || d0[0] != tensor.F16ToF32(tensor.F32ToF16(21.0/127)) {
		t.Errorf("q8_0: q %d d %v", q0[31], d0[0])
	}
}

// The C quantizers of activations give the Go loops' bits: random rows
// at scales from subnormal f16 to past f16's range, an all-zero block,
// ties at a half (amax 127: scale 1), and a block whose values of largest
// magnitude are +v then -v (q8_K keeps the first one's sign).
func TestQuantizeActivationsMatchGo(t *testing.T) {
	if !hasAVX2C {
		t.Skip("no C quantizers on this CPU or build (or KAKEYA_CPU caps them)")
	}
	const cols = 512
	r := rand.New(rand.NewPCG(11, 11))
	var rows [][]float32
	for _, sc := range []float64{1, 1e-9, 1e-6, 3e-3, 0.4, 17, 3e4, 1e7} {
		x := make([]float32, cols)
		for i := range x {
			x[i] = float32(r.NormFloat64() * sc)
		}
		rows = append(rows, x)
	}
	ties := make([]float32, cols)
	for i := range ties {
		ties[i] = float32(i%255-127) / 2 // halves, amax 63.5 ...
	}
	for b := 0; b < cols; b += 32 {
		ties[b+5] = 127 // ... then 127: scale 1, q8_0 ties at each half
	}
	ties[256+3], ties[256+9] = -127, 127 // q8_K: -127 first
	rows = append(rows, ties, make([]float32, cols))
	pm := make([]float32, cols)
	for i := range pm {
		pm[i] = float32(i%7) - 3
	}
	pm[10], pm[20], pm[300], pm[301] = 9, -9, -9, 9
	rows = append(rows, pm)
	n := len(rows)
	x := make([]float32, 0, n*cols)
	for _, row := range rows {
		x = append(x, row...)
	}
	clear(x[cols+256 : cols+512]) // a zero block in a row of others
	// q8_0 for Q8_0 weights, for Q5_0's (with the block sums) and q8_K.
	for _, dt := range []tensor.DType{tensor.Q8_0, tensor.Q5_0, tensor.Q4_K} {
		l := qLayouts[dt]
		k := l.kQuant
		var g, c qActs
		g.prepare(x, n, cols, l)
		g.quant.runGo(0, n)
		c.prepare(x, n, cols, l)
		quantizeActsC(&c.quant, 0, 1)
		quantizeActsC(&c.quant, 1, n)
		for i := range g.qs {
			if g.qs[i] != c.qs[i] {
				t.Fatalf("q8_K %v: value %d (row %d): C %d, Go %d (x %v)", k, i, i/cols, c.qs[i], g.qs[i], x[i])
			}
		}
		for i := range g.d {
			if math.Float32bits(g.d[i]) != math.Float32bits(c.d[i]) {
				t.Fatalf("q8_K %v: scale %d: C %v, Go %v", k, i, c.d[i], g.d[i])
			}
		}
		for i := range g.bsums {
			if g.bsums[i] != c.bsums[i] {
				t.Fatalf("q8_K: sum %d: C %d, Go %d", i, c.bsums[i], g.bsums[i])
			}
		}
		if len(c.sums) != n*cols/32 && blockSums(l) {
			t.Fatalf("%v: %d block sums, want %d", dt, len(c.sums), n*cols/32)
		}
		for i := range g.sums {
			var want int32
			for _, v := range c.qs[32*i : 32*i+32] {
				want += int32(v)
			}
			if g.sums[i] != want || c.sums[i] != want {
				t.Fatalf("%v: block sum %d: C %d, Go %d, want %d", dt, i, c.sums[i], g.sums[i], want)
			}
		}
	}
}

// quantKernel is one family of the C kernels for quantized weights, for
// the tests and benchmarks to run beside the Go loops; exact says its K
// types give the Go loops' bits, all says its 32-value types do too.
type quantKernel struct {
	name       string
	run        func(t *qTask, r0, r1 int)
	exact, all bool
	// x8 marks the kernels of interleaved rows (qTask.x8), for the types
	// with an interleaved format; run wants r0 and r1 whole groups.
	x8 bool
	// x8only, where set, names the types of those that the family has
	// kernels of its own for (the AVX-512 family's: x8AVX512).
	x8only func(tensor.DType) bool
}

// withX8 returns t for kernel k over m: for the interleaved kernels, with
// m's rows interleaved, and false where m's type has no such format.
func withX8(k quantKernel, t qTask, m *tensor.Mat) (qTask, bool) {
	if !k.x8 {
		return t, true
	}
	if m.DType.Interleaved() == nil || m.Rows < m.DType.Interleaved().Rows || k.x8only != nil && !k.x8only(m.DType) {
		return t, false
	}
	t.x8 = interleave(m, nil)
	return t, true
}

// widenForAVX2 widens t's Q8_0 activations for the AVX2 kernels where
// quantize left them unwidened (where the AVX-512 kernels run).
func widenForAVX2(t *qTask) {
	if wideActs(t.l) && !t.a.quant.wide {
		t.a.wide = grow(t.a.wide, t.n*wideCols(t.w.Cols))
		widenActsC(t.a, 0, t.n, t.w.Cols)
		t.a.quant.wide = true
	}
}

// quantKernels returns the C kernel families this CPU and build run (as
// far as $KAKEYA_CPU allows): AVX2 and AVX-512 VNNI on amd64, plain NEON
// and NEON with SDOT on arm64.
func quantKernels() []quantKernel {
	var ks []quantKernel
	if hasAVX2C {
		ks = append(ks, quantKernel{"avx2", func(t *qTask, r0, r1 int) {
			widenForAVX2(t)
			quantRowsISA(t, r0, r1, false)
		}, true, false, false, nil})
		ks = append(ks, quantKernel{"avx2x8", func(t *qTask, r0, r1 int) {
			widenForAVX2(t)
			quantRowsX8ISA(t, r0, r1, false)
		}, true, false, true, nil})
	}
	if hasQuant512 {
		ks = append(ks, quantKernel{"avx512vnni", func(t *qTask, r0, r1 int) { quantRowsISA(t, r0, r1, true) }, false, false, false, nil})
		ks = append(ks, quantKernel{"avx512x8", func(t *qTask, r0, r1 int) { quantRowsX8ISA(t, r0, r1, true) }, true, false, true, x8AVX512})
	}
	if hasNEON {
		ks = append(ks, quantKernel{"neon", func(t *qTask, r0, r1 int) { quantRowsNEON(t, r0, r1, false) }, true, true, false, nil})
	}
	if hasQuantDot {
		ks = append(ks, quantKernel{"neon+dotprod", func(t *qTask, r0, r1 int) { quantRowsNEON(t, r0, r1, true) }, true, true, false, nil})
	}
	return ks
}

// The C kernels give the Go loops' integer block dots exactly: on amd64
// AVX2 and (where the CPU has VNNI) AVX-512, on arm64 plain NEON and
// (where the CPU has DotProd) SDOT. The AVX2 kernels' K types also give
// their f32 scaling in the same order, bit for bit, and the NEON kernels'
// every type. The AVX-512 kernels and the AVX2 32-value ones sum the
// scaled blocks in f32 lanes, another order: within 1e-5 of Σ|w||x| there;
// but the AVX2 Q8_0, Q4_0 and Q5_0 kernels of interleaved rows
// (tensor.Q8_0x8, Q4_0x8, Q5_0x8) scale and sum a row's blocks in one
// lane, the Go loop's order and bits.
// An odd block count (17) takes the AVX-512 last-block path.
func TestQuantKernelsMatchGo(t *testing.T) {
	isas := quantKernels()
	if len(isas) == 0 {
		t.Skip("no C kernels for quantized weights on this CPU or build (or KAKEYA_CPU caps them)")
	}
	if hasAVX2C && !hasQuant512 {
		t.Log("no AVX-512 VNNI on this CPU (or KAKEYA_CPU caps it): AVX2 only")
	}
	if hasNEON && !hasQuantDot {
		t.Log("no DotProd on this CPU: plain NEON only")
	}
	for _, k := range isas {
		t.Logf("checking the %s kernels", k.name)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for _, tc := range []struct{ cols, n int }{{768, 3}, {256, 6}, {32 * 17, 1}, {32 * 17, 6}, {32 * 18, 5}, {32 * 19, 7}, {32 * 19, 1}, {32 * 19, 9}, {32 * 67, 9}, {32 * 1025, 9}, {256 * 19, 13}, {256 * 3, 1}} {
		// Token counts of one, three, five, six, seven and nine: tiles of
		// 4 and 8 tokens and the shorter ones after them; 17 blocks of 32,
		// the AVX-512 kernels' last block alone; 67, AVX2 Q8_0's passes of
		// 32 blocks and an odd last one; 1025, rows wider than the AVX2
		// kernels gather the token scales of; 19 blocks of 256 for 13
		// tokens, the AVX-512 K kernels' ranges of 8 blocks; 3 blocks of
		// 256 for one token, the AVX2 K kernels' groups of 8 rows (two,
		// then three rows alone).
		const rows = 19
		cols, n := tc.cols, tc.n
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		for _, f := range tensor.Formats {
			if cols%f.Block != 0 {
				continue
			}
			m := quantMat(&f, rows, cols, uint64(f.DType)+100)
			l := qLayouts[f.DType]
			var a qActs
			a.quantize(x, n, cols, l)
			rb, _ := f.DType.RowBytes(cols)
			goOut := make([]float32, n*rows)
			tk := qTask{out: goOut, a: &a, w: &m, l: l, n: n, rowB: rb}
			tk.runGo(0, rows)
			// Σ|w||x| per output, over the dequantized weights and the
			// activations as quantized, for the tolerance of f32 lanes.
			group := 32
			if l.kQuant {
				group = 256
			}
			deq := make([]float32, cols)
			mags := make([]float64, n*rows)
			for j := range rows {
				RowF32(deq, m, j)
				for i := range n {
					for c := range cols {
						mags[i*rows+j] += math.Abs(float64(deq[c]) * float64(a.qs[i*cols+c]) * float64(a.d[(i*cols+c)/group]))
					}
				}
			}
			for _, k := range isas {
				cOut := make([]float32, n*rows)
				tk.out = cOut
				kt, ok := withX8(k, tk, &m)
				if !ok {
					continue
				}
				k.run(&kt, 0, rows)
				// f32 lanes: exact integer dots, the scaled sums in another
				// order than Go's.
				lanes := !k.exact || (f.Block == 32 && !k.all)
				for i := range goOut {
					// The interleaved kernels of the 32-value types give
					// their groups' rows the Go loop's bits (the rows after
					// them go through kq_rows' lanes).
					if lanes := lanes && !(k.x8 && f.Block == 32 && i%rows < rows/8*8); lanes {
						if d := math.Abs(float64(goOut[i] - cOut[i])); d > 1e-5*mags[i] {
							t.Fatalf("%s %d columns: output %d: %s %v, Go %v", f.Name, cols, i, k.name, cOut[i], goOut[i])
						}
						continue
					}
					if math.Float32bits(goOut[i]) != math.Float32bits(cOut[i]) {
						t.Fatalf("%s %d columns: output %d: %s %v, Go %v", f.Name, cols, i, k.name, cOut[i], goOut[i])
					}
				}
			}
		}
	}
}

// Every C kernel gives a token the same bits whatever the call's token
// count and row range: tiles of 8 tokens and the ragged ones after them,
// a token alone (decode), rows split across calls, and (AVX2 Q8_0) rows
// taken 32 blocks at a time for a chunk of rows, with an odd last block
// and row counts past a chunk.
func TestQuantKernelsTileInvariant(t *testing.T) {
	isas := quantKernels()
	if len(isas) == 0 {
		t.Skip("no C kernels for quantized weights on this CPU or build (or KAKEYA_CPU caps them)")
	}
	r := rand.New(rand.NewPCG(9, 9))
	// 256 x 19 columns: the AVX-512 K kernels' prefill path takes a row's
	// blocks in ranges of 8 (8, 8, 3), keeping the lanes between them.
	// 27 x 2,304 for 70 tokens: three groups, which the AVX-512 K kernels'
	// prefill takes as a pair and one alone, blocks in ranges of 8 and 1,
	// tokens in blocks of 64 and 6 (tiles of 8 and a ragged one).
	for _, tc := range []struct{ rows, cols, n int }{{45, 32 * 67, 19}, {50, 32 * 64, 9}, {23, 256 * 3, 11}, {21, 256 * 19, 13}, {27, 256 * 9, 70}} {
		x := make([]float32, tc.n*tc.cols)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for _, f := range tensor.Formats {
			if tc.cols%f.Block != 0 {
				continue
			}
			m := quantMat(&f, tc.rows, tc.cols, uint64(f.DType)+200)
			l := qLayouts[f.DType]
			rb, _ := f.DType.RowBytes(tc.cols)
			var all qActs
			all.quantize(x, tc.n, tc.cols, l)
			for _, k := range isas {
				batch := make([]float32, tc.n*tc.rows)
				bt, ok := withX8(k, qTask{out: batch, a: &all, w: &m, l: l, n: tc.n, rowB: rb}, &m)
				if !ok {
					continue
				}
				k.run(&bt, 0, tc.rows)
				split := 7 // off a chunk's edge
				if k.x8 {
					split = 8 // a whole group
				}
				for i := range tc.n {
					var one qActs
					one.quantize(x[i*tc.cols:(i+1)*tc.cols], 1, tc.cols, l)
					out := make([]float32, tc.rows)
					tk := qTask{out: out, a: &one, w: &m, l: l, n: 1, rowB: rb, x8: bt.x8}
					// Rows in two calls.
					k.run(&tk, 0, split)
					k.run(&tk, split, tc.rows)
					for j, v := range out {
						if b := batch[i*tc.rows+j]; math.Float32bits(v) != math.Float32bits(b) {
							t.Fatalf("%s %s %dx%d: token %d row %d: %v alone, %v among %d", k.name, f.Name, tc.rows, tc.cols, i, j, v, b, tc.n)
						}
					}
				}
			}
		}
	}
}

// BenchmarkQuantRows times the quantized kernels on one thread at the
// shapes of Qwen2.5-0.5B's MLP (ffn_up 4864x896, ffn_down 896x4864; the K
// types the latter alone), for one token (decode), 64 and 512 (a prefill
// chunk), per kernel family: go test -run - -bench QuantRows ./kernels/cpu.
func BenchmarkQuantRows(b *testing.B) {
	isas := append([]quantKernel{{name: "go", run: (*qTask).runGo}}, quantKernels()...)
	type shape struct{ rows, cols int }
	for _, f := range tensor.Formats {
		shapes := []shape{{4864, 896}, {896, 4864}}
		if f.Block == 256 {
			shapes = shapes[1:]
		}
		for _, sh := range shapes {
			benchQuantRows(b, &f, sh.rows, sh.cols, isas)
		}
	}
}

// BenchmarkQuantRows7B is BenchmarkQuantRows at Qwen2.5-7B's MLP shapes
// (ffn_up 18944x3584, ffn_down 3584x18944), for the types of its Q4_K_M,
// Q5_K_M and Q8_0 files: where the 0.5B shapes' rows are short, these stream
// long rows and wide activations (go test -run - -bench QuantRows7B).
func BenchmarkQuantRows7B(b *testing.B) {
	isas := quantKernels()
	for _, f := range tensor.Formats {
		if f.DType != tensor.Q4_K && f.DType != tensor.Q5_K && f.DType != tensor.Q6_K && f.DType != tensor.Q8_0 {
			continue
		}
		for _, sh := range [][2]int{{18944, 3584}, {3584, 18944}} {
			benchQuantRows(b, &f, sh[0], sh[1], isas)
		}
	}
}

func benchQuantRows(b *testing.B, f *tensor.QuantFormat, rows, cols int, isas []quantKernel) {
	m := quantMat(f, rows, cols, 9)
	l := qLayouts[f.DType]
	for _, n := range []int{1, 64, 512} {
		x := make([]float32, n*cols)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		var a qActs
		a.quantize(x, n, cols, l)
		rb, _ := f.DType.RowBytes(cols)
		out := make([]float32, n*rows)
		tk := qTask{out: out, a: &a, w: &m, l: l, n: n, rowB: rb}
		for _, k := range isas {
			if k.name == "go" && n > 64 {
				continue
			}
			kt, ok := withX8(k, tk, &m)
			if !ok {
				continue
			}
			b.Run(fmt.Sprintf("%s/%dx%d/n=%d/%s", f.Name, rows, cols, n, k.name), func(b *testing.B) {
				cpu0 := cputime.Seconds()
				for b.Loop() {
					k.run(&kt, 0, rows)
				}
				macs := float64(b.N) * float64(n*rows*cols) / 1e9
				b.ReportMetric(macs/b.Elapsed().Seconds(), "GMAC/s")
				// Per second of the process's CPU time, which a
				// loaded machine's other work does not take from.
				if cpu := cputime.Seconds() - cpu0; cpu > 0 {
					b.ReportMetric(macs/cpu, "GMAC/cpu-s")
				}
			})
		}
	}
}

// Prepare interleaves a Q4_K, Q5_K, Q6_K, Q8_0, Q4_0 or Q5_0 matrix where
// the AVX2 kernels run, a Q4_K, Q5_K or Q6_K one where the AVX-512 ones
// do (and only there), and lets go of the stored rows: MatMul then gives
// the Go loops' bits (decode and prefill, one thread and three), which
// are the stored matrix's where the AVX2 K kernels run, Row its rows, for
// rows that are whole groups, groups and a remainder, one block per row,
// and fewer rows than a group (left as stored). The 32-value types'
// interleaved rows have the Go loop's bits too (the stored rows' AVX2
// kernels sum in f32 lanes: within 1e-5 of Σ|w||x| of them), and their
// rows after the groups the stored kernel's; all within 1e-5 of Σ|w||x|
// of float64.
func TestPrepareInterleaves(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 12))
	for _, tc := range []struct {
		dt         tensor.DType
		rows, cols int
	}{{tensor.Q4_K, 37, 512}, {tensor.Q4_K, 16, 256}, {tensor.Q4_K, 5, 512}, {tensor.Q4_K, 64, 256 * 3},
		{tensor.Q5_K, 37, 512}, {tensor.Q5_K, 16, 256}, {tensor.Q5_K, 5, 512}, {tensor.Q5_K, 64, 256 * 3},
		{tensor.Q6_K, 37, 512}, {tensor.Q6_K, 16, 256}, {tensor.Q6_K, 5, 512}, {tensor.Q6_K, 64, 256 * 3},
		{tensor.Q8_0, 37, 512}, {tensor.Q8_0, 16, 32}, {tensor.Q8_0, 5, 512}, {tensor.Q8_0, 64, 32 * 67},
		{tensor.Q5_0, 37, 512}, {tensor.Q5_0, 16, 32}, {tensor.Q5_0, 5, 512}, {tensor.Q5_0, 64, 32 * 67},
		{tensor.Q4_0, 37, 512}, {tensor.Q4_0, 16, 32}, {tensor.Q4_0, 5, 512}, {tensor.Q4_0, 64, 32 * 67}} {
		m := quantMat(tc.dt.Format(), tc.rows, tc.cols, uint64(tc.rows))
		want := interleaves(&m)
		stored, prep := NewMatrix(m), NewMatrix(m)
		for _, threads := range []int{1, 3} {
			p := NewPool(threads)
			if got := p.Prepare(prep); got != want {
				t.Fatalf("%v %dx%d: Prepare %v, want %v (avx2 %v, avx512 vnni %v)", tc.dt, tc.rows, tc.cols, got, want, hasAVX2C, hasQuant512)
			}
			if want && prep.Mat().Q != nil {
				t.Fatalf("%v %dx%d: the stored rows are still held", tc.dt, tc.rows, tc.cols)
			}
			for _, n := range []int{1, 5, 9} {
				x := make([]float32, n*tc.cols)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				a, b := make([]float32, n*tc.rows), make([]float32, n*tc.rows)
				p.MatMul(a, x, n, stored)
				p.MatMul(b, x, n, prep)
				var qa qActs
				qa.quantize(x, n, tc.cols, qLayouts[tc.dt])
				if want {
					// The Go loop's bits: for the K types every row (the
					// AVX-512 stored kernels' lanes differ), for the 32-value
					// types the groups' rows, the stored kernel's for the
					// rows after them.
					rb, _ := tc.dt.RowBytes(tc.cols)
					goOut := make([]float32, n*tc.rows)
					g := tc.rows
					if tc.dt.Format().Block == 32 {
						g = tc.rows / 8 * 8
					}
					tk := qTask{out: goOut, a: &qa, w: &m, l: qLayouts[tc.dt], n: n, rowB: rb}
					tk.runGo(0, g)
					for i := range n {
						copy(a[i*tc.rows:i*tc.rows+g], goOut[i*tc.rows:])
					}
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("%v %dx%d, %d tokens, %d threads: output %d: interleaved %v, stored %v", tc.dt, tc.rows, tc.cols, n, threads, i, b[i], a[i])
					}
				}
				// And against float64 over the dequantized weights and the
				// activations as quantized (q8_K, q8_0), as TestQuantMatMul.
				group := tc.dt.Format().Block
				deq := make([]float32, tc.cols)
				for j := range tc.rows {
					RowF32(deq, m, j)
					for i := range n {
						var want, mag float64
						for c, v := range deq {
							xv := float64(qa.qs[i*tc.cols+c]) * float64(qa.d[(i*tc.cols+c)/group])
							want += float64(v) * xv
							mag += math.Abs(float64(v) * xv)
						}
						if d := math.Abs(float64(b[i*tc.rows+j]) - want); d > 1e-5*mag+1e-9 {
							t.Fatalf("%v %dx%d, %d tokens: token %d row %d: %v, float64 %v (|w||x| %v)", tc.dt, tc.rows, tc.cols, n, i, j, b[i*tc.rows+j], want, mag)
						}
					}
				}
			}
			p.Close()
		}
		ra, rb := make([]float32, tc.cols), make([]float32, tc.cols)
		for i := range tc.rows {
			RowF32(ra, m, i)
			prep.Row(rb, i)
			for c := range ra {
				if math.Float32bits(ra[c]) != math.Float32bits(rb[c]) {
					t.Fatalf("%v %dx%d: row %d value %d: %v, stored %v", tc.dt, tc.rows, tc.cols, i, c, rb[c], ra[c])
				}
			}
		}
	}
}

// The interleaved kernels' 16-bit sums hold at the extremes: every code at
// its largest (Q4_K and Q4_0 15, Q5_K and Q5_0 31, Q6_K 63, Q8_0 127) or
// smallest (Q8_0 0 and -128), the scales at their largest magnitudes, against activations all +127 or all -127 (one value per
// block at the extreme, the rest just under it, so they quantize to ±127
// too) and alternating in sign; each output has the Go loops' bits.
func TestQuantX8Extremes(t *testing.T) {
	if !hasAVX2C {
		t.Skip("no AVX2 C kernels on this CPU or build")
	}
	const rows, cols, n = 16, 512, 3
	for _, dt := range []tensor.DType{tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.Q8_0, tensor.Q4_0, tensor.Q5_0} {
		f := dt.Format()
		for _, fill := range []byte{0xFF, 0x00, 0x80} {
			code := fill
			if dt == tensor.Q8_0 && fill == 0xFF {
				code = 0x7F // Q8_0's largest code, 127 (0x80 is -128)
			}
			m := quantMat(f, rows, cols, 1)
			nb := rows * cols / f.Block
			for k := range nb {
				blk := m.Q[k*f.Bytes : (k+1)*f.Bytes]
				for _, fl := range f.Fields {
					switch {
					case fl.Name == "qs" || fl.Name == "ql" || fl.Name == "qh":
						for i := range fl.Count {
							blk[fl.Offset+i] = code
						}
					case fl.Name == "scales" && dt == tensor.Q6_K:
						for i := range fl.Count {
							blk[fl.Offset+i] = []byte{0x80, 0x7F}[(i+int(fill))%2] // -128, 127
						}
					case fl.Name == "scales":
						for i := range fl.Count {
							blk[fl.Offset+i] = 0xFF // 6-bit scales and mins 63
						}
					}
				}
			}
			x := make([]float32, n*cols)
			for i := range x {
				switch i / cols {
				case 0:
					x[i] = 1
				case 1:
					x[i] = -1
				default:
					x[i] = float32(1 - 2*(i/2%2))
				}
			}
			l := qLayouts[dt]
			var a qActs
			a.quantize(x, n, cols, l)
			if a.qs[0] != 127 && a.qs[0] != -127 {
				t.Fatalf("activations quantized to %d, want ±127", a.qs[0])
			}
			rb, _ := dt.RowBytes(cols)
			want, got := make([]float32, n*rows), make([]float32, n*rows)
			tk := qTask{out: want, a: &a, w: &m, l: l, n: n, rowB: rb}
			tk.runGo(0, rows)
			for _, k := range quantKernels() {
				kt, ok := withX8(k, tk, &m)
				if !k.x8 || !ok {
					continue
				}
				kt.out = got
				k.run(&kt, 0, rows)
				one := make([]float32, rows)
				for i := range n {
					var a1 qActs
					a1.quantize(x[i*cols:(i+1)*cols], 1, cols, l)
					t1 := qTask{out: one, a: &a1, w: &m, l: l, n: 1, rowB: rb, x8: kt.x8}
					k.run(&t1, 0, rows)
					for j := range rows {
						w, g, o := want[i*rows+j], got[i*rows+j], one[j]
						if math.Float32bits(w) != math.Float32bits(g) || math.Float32bits(w) != math.Float32bits(o) {
							t.Fatalf("%s %v codes 0x%02x, token %d row %d: interleaved %v (alone %v), Go %v", k.name, dt, fill, i, j, g, o, w)
						}
					}
				}
			}
		}
	}
}

// A matrix whose rows a loader wrote interleaved itself
// (NewInterleavedMatrix over InterleaveRows' groups and the rows after
// them as stored, as quantizing on load writes them) multiplies and reads
// back bit for bit as the same rows interleaved by Prepare; where this
// process's kernels read the rows as stored, or the layout or bytes do
// not fit, NewInterleavedMatrix says so.
func TestNewInterleavedMatrix(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	p := NewPool(2)
	for _, tc := range []struct {
		dt         tensor.DType
		rows, cols int
	}{{tensor.Q4_K, 37, 512}, {tensor.Q5_K, 16, 256}, {tensor.Q6_K, 21, 512}, {tensor.Q8_0, 37, 512}, {tensor.Q8_0, 5, 64},
		{tensor.Q5_0, 21, 96}, {tensor.Q4_0, 40, 512}} {
		m := quantMat(tc.dt.Format(), tc.rows, tc.cols, uint64(tc.rows))
		f := InterleavedLayout(tc.dt, tc.rows, tc.cols)
		if want := interleaves(&m); (f != nil) != want {
			t.Fatalf("%v %dx%d: InterleavedLayout %v, Prepare interleaves %v", tc.dt, tc.rows, tc.cols, f, want)
		}
		if f == nil {
			if _, err := NewInterleavedMatrix(m, tc.dt.Interleaved()); err == nil {
				t.Fatalf("%v %dx%d: NewInterleavedMatrix took a layout this CPU's kernels do not read", tc.dt, tc.rows, tc.cols)
			}
			continue
		}
		rb, _ := tc.dt.RowBytes(tc.cols)
		gb, _ := f.GroupBytes(tc.cols)
		ng := tc.rows / f.Rows
		q := make([]byte, len(m.Q))
		if err := tensor.InterleaveRows(q[:ng*gb], f, m.Q[:ng*f.Rows*rb], tc.cols); err != nil {
			t.Fatal(err)
		}
		copy(q[ng*gb:], m.Q[ng*f.Rows*rb:])
		lm := m
		lm.Q = q
		for _, bad := range []struct {
			what string
			m    tensor.Mat
			f    *tensor.InterleavedFormat
		}{{"another type's layout", lm, otherLayout(f)}, {"no layout", lm, nil}, {"a byte short", tensor.Mat{DType: m.DType, Rows: m.Rows, Cols: m.Cols, Q: q[:len(q)-1]}, f}} {
			if _, err := NewInterleavedMatrix(bad.m, bad.f); err == nil {
				t.Fatalf("%v %dx%d: NewInterleavedMatrix took %s", tc.dt, tc.rows, tc.cols, bad.what)
			}
		}
		loaded, err := NewInterleavedMatrix(lm, f)
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Mat().Q != nil {
			t.Fatalf("%v %dx%d: the Matrix's Mat still has storage", tc.dt, tc.rows, tc.cols)
		}
		prep := NewMatrix(m)
		if !p.Prepare(prep) || !p.Prepare(loaded) {
			t.Fatalf("%v %dx%d: Prepare did not report interleaved rows", tc.dt, tc.rows, tc.cols)
		}
		for _, n := range []int{1, 6} {
			x := make([]float32, n*tc.cols)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			a, b := make([]float32, n*tc.rows), make([]float32, n*tc.rows)
			p.MatMul(a, x, n, prep)
			p.MatMul(b, x, n, loaded)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("%v %dx%d, %d tokens: output %d: loaded interleaved %v, prepared %v", tc.dt, tc.rows, tc.cols, n, i, b[i], a[i])
				}
			}
		}
		ra, rb2 := make([]float32, tc.cols), make([]float32, tc.cols)
		for row := range tc.rows {
			prep.Row(ra, row)
			loaded.Row(rb2, row)
			for i := range ra {
				if math.Float32bits(ra[i]) != math.Float32bits(rb2[i]) {
					t.Fatalf("%v %dx%d: row %d value %d: %v, prepared %v", tc.dt, tc.rows, tc.cols, row, i, rb2[i], ra[i])
				}
			}
		}
	}
}

// otherLayout returns an interleaved format other than f.
func otherLayout(f *tensor.InterleavedFormat) *tensor.InterleavedFormat {
	if f == &tensor.Q8_0x8 {
		return &tensor.Q4_Kx8
	}
	return &tensor.Q8_0x8
}
