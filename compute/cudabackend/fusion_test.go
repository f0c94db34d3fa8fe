package cudabackend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kernels/cuda/emu"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tensor"
)

// decodeKernels returns the kernels one decode step runs (launched
// directly or inside replayed graphs, as Backend.Launches counts them) for
// the model of spec's layer structure in dir after a prompt of prompt
// tokens in a bf16 cache of blocks of block tokens, on a fake driver that
// runs no kernel, and the kernels of the steps by name.
func decodeKernels(t *testing.T, dir string, spec testmodel.Spec, opts Options, prompt, block int) (float64, string) {
	t.Helper()
	f := newFakeOrSkip(t)
	f.noop, f.names = true, true
	gpu := newBackend(f, opts)
	t.Cleanup(func() { gpu.Close() })
	gpu.Launches()
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: spec.MaxPos})
	p, _, err := kvplan.NewPolicy(kvconfig.Spec{KV: "none", BlockSize: block, CacheType: "bf16"}, m.CacheShape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: block})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Forward(testIDs(prompt, spec.Vocab), false); err != nil {
		t.Fatal(err)
	}
	const steps = 4
	before := gpu.Launches()
	f.launched = f.launched[:0]
	for i := range steps {
		if _, err := s.Forward([]int{i + 3}, false); err != nil {
			t.Fatal(err)
		}
	}
	n := gpu.Launches().Sub(before)
	return float64(n.Kernels+n.GraphKernels) / steps, f.kernelCounts()
}

// The decode fusions cut the kernels of a decode step (launched directly
// or inside replayed graphs) more than 3x at Qwen2.5-0.5B's layer
// structure: from 18 per layer (19 once attention splits the context) to
// 5 (6), plus the embedding, and the final norm with the output head (2
// kernels, 1 fused). No kv_write, rope, bias or residual add, silu_mul,
// rmsnorm or plain matvec runs any more.
func TestDecodeKernels(t *testing.T) {
	qwen := testmodel.Qwen25_05B
	qwen.Intermediate, qwen.Vocab = 64, 256 // the kernels do not depend on these sizes
	gemma := testmodel.Gemma3_1B
	gemma.Intermediate, gemma.Vocab, gemma.MaxPos = 64, 256, 2048
	gemma2 := testmodel.Gemma2_2B
	gemma2.Intermediate, gemma2.Vocab, gemma2.MaxPos, gemma2.Layers = 64, 256, 2048, 6
	tmp, written := t.TempDir(), map[string]string{}
	for _, tc := range []struct {
		name          string
		spec          testmodel.Spec
		prompt, block int
		before, after float64
	}{
		{"qwen2.5-0.5B/context 20", qwen, 20, 64, 435, 122},            // attention in one split: 3 + 24*18, 2 + 24*5
		{"qwen2.5-0.5B/context 400", qwen, 400, 64, 459, 146},          // split, with attn_combine: 3 + 24*19, 2 + 24*6
		{"qwen2-tiny/context 20", testmodel.Qwen2Tiny, 20, 16, 41, 14}, // 2 layers: the fixed kernels weigh more
		// Gemma 3 1B's layers: each adds two sandwich norms (rmsnorm_add,
		// with the unfused o and down products before them) and GELU-tanh
		// in norm_swiglu; the step, the embedding scale (scalar_mul).
		{"gemma3-1B/context 20", gemma, 20, 64, 498, 185},     // 4 + 26*19, 3 + 26*7
		{"gemma3-1B/context 1000", gemma, 1000, 64, 524, 211}, // past the window of 512: every layer splits, 3 + 26*8
		// Gemma 2's softcaps: attention's inside attn_split, the logits' one
		// softcap launch per step (6 of its 26 layers).
		{"gemma2-2B/6 layers/context 20", gemma2, 20, 64, 107, 46}, // 5 + 6*17, 4 + 6*7
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each checkpoint is written once (up to 150 MB: most of
			// the test's time), for both runs and every context.
			key := fmt.Sprint(tc.spec)
			dir, ok := written[key]
			if !ok {
				dir = filepath.Join(tmp, fmt.Sprint(len(written)))
				if err := testmodel.Write(dir, tc.spec); err != nil {
					t.Fatal(err)
				}
				written[key] = dir
			}
			before, was := decodeKernels(t, dir, tc.spec, Options{NoFusion: true}, tc.prompt, tc.block)
			after, is := decodeKernels(t, dir, tc.spec, Options{}, tc.prompt, tc.block)
			t.Logf("kernels per decode step: %.0f without the fusions (%s), %.0f with them (%s): %.2fx fewer", before, was, after, is, before/after)
			if before != tc.before || after != tc.after {
				t.Errorf("%.1f kernels per decode step without the fusions and %.1f with them, want %.0f and %.0f", before, after, tc.before, tc.after)
			}
			if tc.spec.Layers >= 24 && before < 3*after && !strings.HasPrefix(tc.name, "gemma") {
				t.Errorf("the fusions cut the kernels of a decode step %.2fx, want at least 3x", before/after)
			}
			for _, k := range []string{"kv_write", "rope", "add", "add_rows", "silu_mul", "rmsnorm", "matvec_bf16"} {
				if k == "matvec_bf16" && strings.HasPrefix(tc.name, "gemma") {
					continue // the o and down products before the sandwich norms
				}
				if n := strings.Count(" "+is, " "+k+":"); n > 0 {
					t.Errorf("%s in the fused decode steps: %s", k, is)
				}
			}
		})
	}
}

// fusedSize is one geometry of the fused kernels' tests: n input rows of
// cols, heads and kvHeads heads of d, and a cache block of bs rows.
type fusedSize struct{ n, heads, kvHeads, d, cols, bs int }

// Awkward geometries: one row of one pair, columns that are and are not a
// multiple of 8 (the 16-byte path and the scalar one) and past one staged
// chunk, GQA 7:1, head dims 64 and 128, every split of a unit's columns
// between warps, the most input rows.
var fusedSizes = []fusedSize{
	{1, 1, 1, 2, 1, 1}, {1, 14, 2, 16, 224, 16}, {3, 4, 2, 64, 100, 8}, {8, 2, 1, 128, 1100, 64},
	{2, 7, 1, 64, 4104, 5}, {5, 3, 3, 2, 9, 7}, {maxMatVecRows, 1, 1, 8, 2056, 9},
}

// refNorm returns the reference's RMSNorm of the n rows of x by g.
func refNorm(x, g []float32, n int, eps float32) compute.Buffer {
	ref := reference.Backend{}
	xn := ref.Alloc(len(x))
	ref.RMSNorm(xn, refBuf(x), refBuf(g), n, eps)
	return xn
}

// refProj returns the reference's x times w transposed plus bias (nil
// for none), n rows.
func refProj(x compute.Buffer, mat tensor.Mat, bias []float32, n int) compute.Buffer {
	ref := reference.Backend{}
	w, _ := ref.Upload(mat)
	out := ref.Alloc(n * mat.Rows)
	ref.MatMul(out, x, n, w)
	if bias != nil {
		ref.AddRows(out, refBuf(bias), n)
	}
	return out
}

// norm_qkv computes what the separate operations compute, by the
// reference: RMSNorm, the three projections and their biases, RoPE on q;
// and writes k and v into rows row.. of the cache's parts, float32 or
// rounded to bf16 exactly as kv_write rounds (checked against the k and v
// it wrote), leaving their other rows alone; without a table it writes
// no part; rows of several sequences are rotated at their own positions.
func TestFusedNormQKV(t *testing.T) {
	m := newDevMem(t)
	const eps = 1e-6
	for _, dt := range dtypes {
		for i, sz := range fusedSizes {
			// The cache's formats in turn (they do not depend on the
			// weights' dtype), so each size and dtype runs once.
			format := []int32{partF32, partBF16}[(i+int(dt))%2]
			t.Run(fmt.Sprintf("%v/%+v/format%d", dt, sz, format), func(t *testing.T) {
				r := rand.New(rand.NewPCG(22, uint64(sz.n*sz.cols+sz.d+int(format))))
				qd, kvd := sz.heads*sz.d, sz.kvHeads*sz.d
				x, g := randF32(r, sz.n*sz.cols, 2), randF32(r, sz.cols, 1)
				matQ, rawQ := weightOf(r, dt, qd, sz.cols)
				matK, rawK := weightOf(r, dt, kvd, sz.cols)
				matV, rawV := weightOf(r, dt, kvd, sz.cols)
				bq, bk, bv := randF32(r, qd, 1), randF32(r, kvd, 1), randF32(r, kvd, 1)
				start := 3 + sz.bs/2
				row := start % sz.bs
				if row+sz.n > sz.bs {
					row = 0
				}
				cos, sin := ropeTables(start+3*sz.n, sz.d) // for the scattered positions too

				xn := refNorm(x, g, sz.n, eps)
				wantQ := refProj(xn, matQ, bq, sz.n)
				reference.Backend{}.RoPE(wantQ, sz.n, sz.heads, sz.d, start, refBuf(cos), refBuf(sin))
				wantK, wantV := refProj(xn, matK, bk, sz.n), refProj(xn, matV, bv, sz.n)

				esize := 4
				if format == partBF16 {
					esize = 2
				}
				parts := make([]Ptr, 2*sz.kvHeads)
				olds := make([][]byte, len(parts))
				tab := make([]uint64, len(parts))
				for e := range parts {
					olds[e] = make([]byte, esize*sz.bs*sz.d)
					for i := range olds[e] {
						olds[e][i] = byte(r.Uint32())
					}
					parts[e] = m.bytes(olds[e])
					tab[e] = uint64(parts[e])
				}
				a := qkvArgs{
					X: m.f32(x), Norm: m.f32(g), Eps: eps, WQ: m.bytes(rawQ), WK: m.bytes(rawK), WV: m.bytes(rawV),
					BQ: m.f32(bq), BK: m.f32(bk), BV: m.f32(bv),
					N: sz.n, Heads: sz.heads, KVHeads: sz.kvHeads, HeadDim: sz.d, Cols: sz.cols, Start: start,
					Cos: m.f32(cos), Sin: m.f32(sin), Tab: m.u64(tab), Row: row, Format: format, dt: dt,
				}
				// One schedule per case, the seeds taking turns with the
				// formats over the table (each pair run by a quarter of it).
				seed := emuSeeds[(i+int(dt))/2%2]
				a.Q, a.K, a.V = m.f32(make([]float32, sz.n*qd)), m.f32(make([]float32, sz.n*kvd)), m.f32(make([]float32, sz.n*kvd))
				runLaunches(t, seed, normQKVLaunch(a))
				gotK, gotV := m.read(a.K, sz.n*kvd), m.read(a.V, sz.n*kvd)
				checkClose(t, "q", m.read(a.Q, sz.n*qd), refRead(wantQ), 1e-5)
				checkClose(t, "k", gotK, refRead(wantK), 1e-5)
				checkClose(t, "v", gotV, refRead(wantV), 1e-5)
				for e := range parts {
					src, h := gotK, e
					if e >= sz.kvHeads {
						src, h = gotV, e-sz.kvHeads
					}
					want := partWant(olds[e], src, h, kvd, row, sz.n, sz.d, format)
					got := make([]byte, len(want))
					emu.CopyOut(got, uint64(parts[e]))
					if !bytes.Equal(got, want) {
						t.Fatalf("seed %d: part %d is not the old part with rows %d.. set to the new keys or values", seed, e, row)
					}
				}
				// Rows of several sequences: row i at position
				// start+3i, from a device array.
				if sz.n > 1 {
					pos := make([]int32, sz.n)
					want := refRead(refProj(xn, matQ, bq, sz.n))
					for i := range pos {
						pos[i] = int32(start + 3*i)
						row := refBuf(want[i*qd : (i+1)*qd])
						reference.Backend{}.RoPE(row, 1, sz.heads, sz.d, int(pos[i]), refBuf(cos), refBuf(sin))
						copy(want[i*qd:], refRead(row))
					}
					c := a
					c.Tab, c.Pos, c.Q = 0, m.i32(pos), m.f32(make([]float32, sz.n*qd))
					runLaunches(t, 2, normQKVLaunch(c))
					checkClose(t, "q at scattered positions", m.read(c.Q, sz.n*qd), want, 1e-5)
				}

				// Without a table the same launch writes no part.
				snap := make([][]byte, len(parts))
				for e := range parts {
					snap[e] = make([]byte, len(olds[e]))
					emu.CopyOut(snap[e], uint64(parts[e]))
				}
				a.Tab, a.Q = 0, m.f32(make([]float32, sz.n*qd))
				runLaunches(t, 1, normQKVLaunch(a))
				checkClose(t, "q without a table", m.read(a.Q, sz.n*qd), refRead(wantQ), 1e-5)
				for e := range parts {
					got := make([]byte, len(snap[e]))
					if emu.CopyOut(got, uint64(parts[e])); !bytes.Equal(got, snap[e]) {
						t.Fatalf("part %d written without a table", e)
					}
				}
			})
		}
	}
}

// partWant returns the cache part old with its rows row.. set to the n
// rows of KV head h (head_dim d) of src, rows of kvd values, in format
// (float32, or rounded to bf16 as kv_write rounds).
func partWant(old []byte, src []float32, h, kvd, row, n, d int, format int32) []byte {
	want := slices.Clone(old)
	esize := 4
	if format == partBF16 {
		esize = 2
	}
	for i := range n {
		for c := range d {
			v, at := src[i*kvd+h*d+c], ((row+i)*d+c)*esize
			if format == partF32 {
				binary.LittleEndian.PutUint32(want[at:], math.Float32bits(v))
			} else {
				binary.LittleEndian.PutUint16(want[at:], tensor.F32ToBF16(v))
			}
		}
	}
	return want
}

// norm_swiglu (SiLU and GELU-tanh gating), matvec_add and norm_matvec
// compute what the separate operations compute, by the float64
// reference, with and without biases.
func TestFusedMatVecs(t *testing.T) {
	m := newDevMem(t)
	const eps = 1e-5
	type size struct{ n, rows, cols int }
	sizes := []size{{1, 1, 1}, {1, 13, 8}, {3, 9, 21}, {8, 37, 64}, {2, 17, 1032}, {5, 11, 1100}, {1, 40, 4104}, {3, 300, 600}, {1, 2200, 24}}
	ref := reference.Backend{}
	for _, dt := range dtypes {
		for i, sz := range sizes {
			for j, biased := range []bool{false, true} {
				// One schedule per case, the seeds taking turns over the
				// table (each is run by half the cases).
				seed := emuSeeds[(i+j+int(dt))%2]
				t.Run(fmt.Sprintf("%v/%dx%dx%d/bias=%v", dt, sz.n, sz.rows, sz.cols, biased), func(t *testing.T) {
					r := rand.New(rand.NewPCG(23, uint64(sz.n*sz.rows*sz.cols)))
					x, g := randF32(r, sz.n*sz.cols, 2), randF32(r, sz.cols, 1)
					matG, rawG := weightOf(r, dt, sz.rows, sz.cols)
					matU, rawU := weightOf(r, dt, sz.rows, sz.cols)
					var bg, bu []float32
					var bgp, bup Ptr
					if biased {
						bg, bu = randF32(r, sz.rows, 1), randF32(r, sz.rows, 1)
						bgp, bup = m.f32(bg), m.f32(bu)
					}
					xn := refNorm(x, g, sz.n, eps)
					want := refProj(xn, matG, bg, sz.n)
					up := refProj(xn, matU, bu, sz.n)
					wantGELU := refProj(xn, matG, bg, sz.n)
					ref.SiLUMul(want, up)
					ref.GELUTanhMul(wantGELU, up)

					// norm_matvec: xn wg^T.
					wantHead := refProj(xn, matG, nil, sz.n)

					// matvec_add: acc += x wg^T + bg.
					acc := randF32(r, sz.n*sz.rows, 1)
					wantAcc := refBuf(acc)
					ref.Add(wantAcc, refProj(refBuf(x), matG, bg, sz.n))

					xp, gp, wgp, wup := m.f32(x), m.f32(g), m.bytes(rawG), m.bytes(rawU)
					out := m.f32(make([]float32, sz.n*sz.rows))
					runLaunches(t, seed, normSwiGLULaunch(dt, out, xp, gp, eps, wgp, wup, bgp, bup, sz.n, sz.rows, sz.cols, false))
					checkClose(t, "norm_swiglu", m.read(out, sz.n*sz.rows), refRead(want), 1e-5)
					runLaunches(t, seed, normSwiGLULaunch(dt, out, xp, gp, eps, wgp, wup, bgp, bup, sz.n, sz.rows, sz.cols, true))
					checkClose(t, "norm_swiglu gelu-tanh", m.read(out, sz.n*sz.rows), refRead(wantGELU), 1e-5)
					accp := m.f32(acc)
					runLaunches(t, seed, matVecAddLaunch(dt, accp, xp, wgp, bgp, sz.n, sz.rows, sz.cols))
					checkClose(t, "matvec_add", m.read(accp, sz.n*sz.rows), refRead(wantAcc), 1e-5)
					if !biased { // norm_matvec has no bias
						head := m.f32(make([]float32, sz.n*sz.rows))
						runLaunches(t, seed, normMatVecLaunch(dt, head, xp, gp, eps, wgp, sz.n, sz.rows, sz.cols))
						checkClose(t, "norm_matvec", m.read(head, sz.n*sz.rows), refRead(wantHead), 1e-5)
					}
				})
			}
		}
	}
}

// The forward pass through the fused kernels gives the logits of the
// separate kernels and of the CPU (within TestForwardMatchesCPU's
// tolerance: keys rounded to bf16 may land one ulp apart): a prompt of 6
// tokens whose rows span two blocks of 4 (their cache writes go through
// kv_write), then decode steps, each writing its keys and values from
// norm_qkv; Qwen3's per-head norms run inside norm_qkv too (no rmsnorm,
// rope or kv_write runs in a decode step).
func TestFusedForward(t *testing.T) {
	needKernels(t, "norm_qkv_bf16", "norm_swiglu_bf16", "matvec_add_bf16")
	dirs := tinyArchitectures(t)
	spec := kvconfig.Spec{KV: "none", BlockSize: 4, CacheType: "bf16"}
	for _, name := range []string{"qwen2", "qwen3", "llama"} {
		t.Run(name, func(t *testing.T) {
			cpuM := loadModel(t, dirs[name], model.Options{Backend: cpuF32(t, 1), MaxContext: 32})
			ids := testIDs(12, cpuM.Config().VocabSize)
			want, _ := run(t, cpuM, spec, ids, 6)
			var kernels [2]string
			var logits [2][][]float32
			for i, opts := range []Options{{NoFusion: true}, {}} {
				gpu, f := newFakeBackend(t, opts)
				m := loadModel(t, dirs[name], model.Options{Backend: gpu, MaxContext: 32})
				logits[i], _ = run(t, m, spec, ids, 6)
				if err := gpu.Err(); err != nil {
					t.Fatal(err)
				}
				kernels[i] = f.kernelCounts()
			}
			for p := range want {
				tol := 1e-3 * max(1, maxAbs(want[p]))
				if d := maxAbsDiff(logits[1][p], logits[0][p]); math.IsNaN(d) || d > tol {
					t.Fatalf("position %d: fused and separate kernels' logits differ by %.3g", p, d)
				}
				if d := maxAbsDiff(logits[1][p], want[p]); math.IsNaN(d) || d > tol {
					t.Fatalf("position %d: fused kernels' and the CPU's logits differ by %.3g", p, d)
				}
			}
			t.Logf("separate: %s\nfused: %s", kernels[0], kernels[1])
			has := func(k string) bool { return countOf(kernels[1], k) > 0 }
			if !has("norm_swiglu_") || !has("matvec_add_") || !has("norm_matvec_") || has("silu_mul") || has("add") || has("rmsnorm") {
				t.Errorf("the feed-forward and projections did not run fused: %s", kernels[1])
			}
			if !has("norm_qkv_") || has("rope") {
				t.Errorf("norm_qkv ran %v, rope %v: %s", has("norm_qkv_"), has("rope"), kernels[1])
			}
			// kv_write runs for the prompt's rows, one run per block in
			// each layer, and not for the decode steps: norm_qkv writes
			// their keys and values.
			wantWrites := 2 * cpuM.Config().NumLayers
			if n := countOf(kernels[1], "kv_write"); n != wantWrites {
				t.Errorf("kv_write ran %d times, want %d: %s", n, wantWrites, kernels[1])
			}
		})
	}
}

// countOf returns how many kernels whose names begin with prefix a
// fakeDriver.kernelCounts summary counts.
func countOf(counts, prefix string) int {
	total := 0
	for _, f := range strings.Fields(counts) {
		name, n, _ := strings.Cut(f, ":")
		if strings.HasPrefix(name, prefix) {
			var v int
			fmt.Sscan(n, &v)
			total += v
		}
	}
	return total
}

// norm_qkv with Qwen3's per-head norms computes what the separate
// operations compute, by the reference: RMSNorm, the projections and
// biases, RMSNorm of each head of q and k, RoPE on q; and writes the
// normalised keys and the values into the cache's parts, reading its
// position, row and table from a step slot or from its arguments. The
// block counter is back at zero after each launch, so the next launch
// (a graph's replay) counts afresh.
func TestFusedNormQKVHeadNorms(t *testing.T) {
	m := newDevMem(t)
	const eps = 1e-6
	for _, dt := range dtypes {
		for i, sz := range fusedSizes {
			format := []int32{partF32, partBF16}[(i+int(dt))%2]
			t.Run(fmt.Sprintf("%v/%+v/format%d", dt, sz, format), func(t *testing.T) {
				r := rand.New(rand.NewPCG(23, uint64(sz.n*sz.cols+sz.d+int(format))))
				qd, kvd := sz.heads*sz.d, sz.kvHeads*sz.d
				x, g := randF32(r, sz.n*sz.cols, 2), randF32(r, sz.cols, 1)
				qn, kn := randF32(r, sz.d, 1), randF32(r, sz.d, 1)
				matQ, rawQ := weightOf(r, dt, qd, sz.cols)
				matK, rawK := weightOf(r, dt, kvd, sz.cols)
				matV, rawV := weightOf(r, dt, kvd, sz.cols)
				bq, bk := randF32(r, qd, 1), randF32(r, kvd, 1)
				start := 3 + sz.bs/2
				row := start % sz.bs
				if row+sz.n > sz.bs {
					row = 0
				}
				cos, sin := ropeTables(start+sz.n, sz.d)

				ref := reference.Backend{}
				xn := refNorm(x, g, sz.n, eps)
				wantQ, wantK, wantV := refProj(xn, matQ, bq, sz.n), refProj(xn, matK, bk, sz.n), refProj(xn, matV, nil, sz.n)
				ref.RMSNorm(wantQ, wantQ, refBuf(qn), sz.n*sz.heads, eps)
				ref.RMSNorm(wantK, wantK, refBuf(kn), sz.n*sz.kvHeads, eps)
				ref.RoPE(wantQ, sz.n, sz.heads, sz.d, start, refBuf(cos), refBuf(sin))

				esize := 4
				if format == partBF16 {
					esize = 2
				}
				parts := make([]Ptr, 2*sz.kvHeads)
				tab := make([]uint64, len(parts))
				for e := range parts {
					parts[e] = m.bytes(make([]byte, esize*sz.bs*sz.d))
					tab[e] = uint64(parts[e])
				}
				cnt, tabDev := m.i32([]int32{0}), m.u64(tab)
				slot := make([]byte, stepSlotBytes)
				binary.LittleEndian.PutUint64(slot, uint64(tabDev))
				binary.LittleEndian.PutUint32(slot[8:], uint32(row))
				binary.LittleEndian.PutUint32(slot[12:], uint32(start))
				a := qkvArgs{
					X: m.f32(x), Norm: m.f32(g), Eps: eps, WQ: m.bytes(rawQ), WK: m.bytes(rawK), WV: m.bytes(rawV),
					BQ: m.f32(bq), BK: m.f32(bk),
					N: sz.n, Heads: sz.heads, KVHeads: sz.kvHeads, HeadDim: sz.d, Cols: sz.cols, Start: start,
					Cos: m.f32(cos), Sin: m.f32(sin), Tab: tabDev, Row: row, Format: format, dt: dt,
					QN: m.f32(qn), KN: m.f32(kn), Cnt: cnt,
				}
				for k, seed := range emuSeeds[:2] {
					if k == 1 {
						a.Step = m.bytes(slot) // the same values through a step slot
					}
					a.Q, a.K, a.V = m.f32(make([]float32, sz.n*qd)), m.f32(make([]float32, sz.n*kvd)), m.f32(make([]float32, sz.n*kvd))
					runLaunches(t, seed, normQKVLaunch(a))
					gotK, gotV := m.read(a.K, sz.n*kvd), m.read(a.V, sz.n*kvd)
					checkClose(t, "q", m.read(a.Q, sz.n*qd), refRead(wantQ), 1e-5)
					checkClose(t, "k", gotK, refRead(wantK), 1e-5)
					checkClose(t, "v", gotV, refRead(wantV), 1e-5)
					var c [4]byte
					if emu.CopyOut(c[:], uint64(cnt)); c != [4]byte{} {
						t.Fatalf("seed %d: the block counter is %v after the launch, want 0", seed, c)
					}
					for e := range parts {
						src, h := gotK, e
						if e >= sz.kvHeads {
							src, h = gotV, e-sz.kvHeads
						}
						got := make([]byte, esize*sz.bs*sz.d)
						emu.CopyOut(got, uint64(parts[e]))
						if want := partWant(make([]byte, len(got)), src, h, kvd, row, sz.n, sz.d, format); !bytes.Equal(got, want) {
							t.Fatalf("seed %d: part %d is not a zeroed part with rows %d.. set to the %s written", seed, e, row, map[bool]string{true: "keys", false: "values"}[e < sz.kvHeads])
						}
					}
				}
			})
		}
	}
}
