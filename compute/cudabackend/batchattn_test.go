package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// batchSeq is one sequence of a batched attention test: n queries from
// position start over blocks whose full ones are encoded as enc says
// ("" all hot; "K/V" codecs, one name for both sides; "hot" keeps a side
// hot; "pre+X" is X preconditioned by a factor of each KV head's own,
// keys only; "pc" is kakeya-pc, a basis per KV head for keys, "pc16" the
// same capped at 16 coded components (the kakeya preset's keys), "pcec"
// the same entropy coded, "kvtc" entropy coded and uniform).
type batchSeq struct {
	start, n int
	enc      string
}

// One attn_batch launch (and one attn_combine where the context is
// split) over a step of several sequences, each at its own positions over
// its own paged blocks, gives every sequence the attention the float64
// reference computes for it alone: decode rows and prefill chunks
// together, partly filled and encoded blocks of every format the kernels
// read (hot f32 and bf16, int8, int4 and int2 by row and by channel,
// kakeya with two codecs' settings in one layer, kakeya-pc fixed-rate
// and entropy coded, the kakeya preset's keys capped at 16 coded
// components beside uncapped values, kvtc, preconditioned keys), GQA 7:1,
// head dims 64 and 128, sliding windows, under several
// schedules, the queries rotated before the call or by the kernel.
func TestAttendBatchMatchesReference(t *testing.T) {
	needKernels(t, "attn_batch", "attn_batch_pre", "attn_batch_pc", "attn_combine")
	for _, c := range []struct {
		name                       string
		heads, kvHeads, d, bs, win int
		bf16                       bool
		kernel                     string
		seqs                       []batchSeq
	}{
		{"gqa7/d64/plain", 7, 1, 64, 16, 0, true, "attn_batch", []batchSeq{
			{70, 1, "int8"}, {21, 9, "kakeya/int4"}, {0, 3, ""}, {40, 1, "int2-k/int4-k"}, {33, 1, "kakeya-b4c8/int2"}}},
		{"gqa7/d128/pre", 14, 2, 128, 16, 0, false, "attn_batch_pre", []batchSeq{
			{50, 1, "pre+int8/int8"}, {17, 12, "pre+kakeya/kakeya"}, {90, 1, ""}, {5, 1, "int4/hot"}}},
		{"gqa7/d64/pc", 7, 1, 64, 16, 0, true, "attn_batch_pc", []batchSeq{
			{60, 1, "pc"}, {16, 16, "pre+int8/pc"}, {35, 1, "kakeya/pc"}, {44, 2, "int8"}}},
		{"gqa7/d128/pc/window", 7, 1, 128, 16, 20, false, "attn_batch_pc", []batchSeq{
			{45, 1, "pc/int8"}, {8, 11, "int8/pc"}, {70, 1, "hot/kakeya"}}},
		{"gqa7/d64/pcec", 7, 1, 64, 64, 0, true, "attn_batch_pc", []batchSeq{
			{100, 1, "pcec"}, {64, 16, "pcec/kvtc"}, {90, 1, "pc/pcec"}, {70, 2, "int8"}}},
		{"gqa2/d128/pcec/window", 4, 2, 128, 16, 24, false, "attn_batch_pc", []batchSeq{
			{60, 1, "pcec"}, {9, 10, "kvtc/pcec"}, {50, 1, "hot/pcec"}}},
		{"gqa2/d64/preset", 4, 2, 64, 64, 0, true, "attn_batch_pc", []batchSeq{
			{120, 1, "pc16/pc"}, {70, 8, "pc16/pc"}, {100, 1, "pc"}, {40, 2, "int8"}}},
		{"gqa2/d128/preset/window", 4, 2, 128, 16, 40, false, "attn_batch_pc", []batchSeq{
			{90, 1, "pc16/pc"}, {20, 6, "pc16/pc"}, {60, 1, "pc/pc16"}}},
		{"1to1/d64/one split", 4, 4, 64, 32, 0, true, "attn_batch", []batchSeq{
			{10, 1, ""}, {3, 5, ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gpu, f := newFakeBackend(t, Options{})
			// The float32 kernels, to their tolerance: a step whose
			// prefill chunks read format 9 parts would otherwise decode
			// them once (pc_unpack) for the tensor cores, which
			// TestPrefillAttentionMatchesReference checks.
			gpu.pcOnce = pcOnceNever
			ref := reference.Backend{}
			r := rand.New(rand.NewPCG(9, uint64(c.heads*c.d)))
			ap := compute.AttentionParams{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.d, Window: c.win, BlockSize: c.bs, MaxContext: 128}
			cos, sin := ropeTables(ap.MaxContext, c.d)
			gstore := gpu.NewBlockStore(c.bs, c.d, c.bf16)
			rstore := ref.NewBlockStore(c.bs, c.d, c.bf16)
			row := c.heads * c.d
			rows := 0
			for _, s := range c.seqs {
				rows += s.n
			}
			// q before RoPE, and qr rotated by the reference.
			q := randFloats(r, rows*row)
			qr := make([]float32, 0, len(q))
			want := make([]float32, 0, rows*row)
			var passes []compute.AttentionPass
			at := 0
			for _, s := range c.seqs {
				pass, sqr, sw := batchPass(t, r, gpu, gstore, rstore, ap, s, q[at*row:(at+s.n)*row], cos, sin)
				passes, qr, want = append(passes, pass), append(qr, sqr...), append(want, sw...)
				at += s.n
			}
			qd, qrd, cd, sd := upload(gpu, q), upload(gpu, qr), upload(gpu, cos), upload(gpu, sin)
			for rep := range 3 { // schedules differ by the launch count
				out := gpu.Alloc(rows * row)
				before := len(f.launched)
				// Queries rotated by the reference, or rotated by the
				// kernel as it loads them.
				rotate, in := rep > 0, qrd
				if rotate {
					in = qd
				}
				if err := gpu.AttendBatch(out, in, rotate, 0, passes, cd, sd); err != nil {
					t.Fatal(err)
				}
				got := read(gpu, out)
				if err := gpu.Err(); err != nil {
					t.Fatal(err)
				}
				// The block tables' updates (copy_runs: the device ran
				// work before, so they go through the step parameters)
				// precede the attention launch.
				ks := withoutKernel(f.launched[before:], "copy_runs")
				if len(ks) == 0 || ks[0] != c.kernel || len(ks) > 2 || len(ks) == 2 && ks[1] != "attn_combine" {
					t.Fatalf("launched %v, want %s (and attn_combine)", ks, c.kernel)
				}
				at = 0
				for i, s := range c.seqs {
					g, w := got[at*row:(at+s.n)*row], want[at*row:(at+s.n)*row]
					tol := 2e-5 * max(1, maxAbs(w))
					if dd := maxAbsDiff(g, w); !(dd <= tol) {
						t.Fatalf("run %d (rotate %v): sequence %d (%+v): attention differs from the reference by %.3g (tolerance %.3g)", rep, rotate, i, s, dd, tol)
					}
					at += s.n
				}
				if rep == 0 {
					t.Logf("launches %v", ks)
				}
			}
		})
	}
}

// batchPass builds sequence s of a batched attention test (ap's
// geometry): its layer on the GPU's store and the reference's (batchLayer,
// the codecs of s.enc), its GPU pass, its queries q (before RoPE) rotated
// by the reference, and the reference's attention over them.
func batchPass(t *testing.T, r *rand.Rand, gpu *Backend, gstore, rstore compute.BlockStore, ap compute.AttentionParams, s batchSeq, q, cos, sin []float32) (pass compute.AttentionPass, qr, want []float32) {
	t.Helper()
	ref := reference.Backend{}
	codecs := batchCodecs(t, r, s.enc, ap.KVHeads, ap.HeadDim, ap.BlockSize)
	gl, rl := batchLayer(t, r, gpu, gstore, rstore, s.start+s.n, ap.KVHeads, ap.BlockSize, ap.HeadDim, codecs)
	ra, err := ref.NewAttention(ap)
	if err != nil {
		t.Fatal(err)
	}
	out := ref.Alloc(s.n * ap.Heads * ap.HeadDim)
	pq := refBuf(q)
	ref.RoPE(pq, s.n, ap.Heads, ap.HeadDim, s.start, refBuf(cos), refBuf(sin))
	if err := ra.Forward(out, pq, s.n, s.start, rl, refBuf(cos), refBuf(sin)); err != nil {
		t.Fatalf("sequence %+v: reference: %v", s, err)
	}
	ga, err := gpu.NewAttention(ap)
	if err != nil {
		t.Fatal(err)
	}
	return compute.AttentionPass{Attention: ga, KV: gl, N: s.n, Start: s.start}, refRead(pq), refRead(out)
}

// batchCodecs returns the codecs of a batchSeq's enc: keys per KV head,
// then values (nil for a hot side).
func batchCodecs(t *testing.T, r *rand.Rand, enc string, kvHeads, d, bs int) (cs [2][]codec.Codec) {
	t.Helper()
	if enc == "" {
		enc = "hot"
	}
	sides := strings.Split(enc, "/")
	if len(sides) == 1 {
		sides = append(sides, sides[0])
	}
	for side, name := range sides {
		heads := 1
		if side == 0 {
			heads = kvHeads
		}
		var shared codec.Codec
		for range heads {
			var cd codec.Codec
			var err error
			inner, pre := strings.CutPrefix(name, "pre+")
			switch inner {
			case "hot":
			case "kakeya":
				cd, err = codec.NewKakeya(codec.DefaultKakeyaOptions())
			case "kakeya-b4c8":
				o := codec.DefaultKakeyaOptions()
				o.Bits, o.CoeffBits, o.Seed = 4, 8, 12345
				cd, err = codec.NewKakeya(o)
			case "pc", "pc16", "pcec", "kvtc":
				o := codec.DefaultKakeyaPCOptions()
				o.Rate, o.Block = 2.5, bs
				o.Entropy, o.Uniform = inner == "pcec" || inner == "kvtc", inner == "kvtc"
				if inner == "pc16" {
					o.MaxCoded = 16
				}
				pc := newPC(t, o, synthPCA(r, d))
				if inner == "pc16" && len(pc.Settings().PC.Coded()) != 16 {
					t.Fatalf("pc16 at d %d, blocks of %d: %d coded components, want the cap to bind", d, bs, len(pc.Settings().PC.Coded()))
				}
				cd = pc
			default:
				cd, err = codec.New(codec.Spec{Name: inner})
			}
			if err != nil {
				t.Fatal(err)
			}
			if pre {
				cd = randPreconditioned(t, r, cd, d)
			}
			// One kakeya codec per side and layer (the kernels take one
			// settings copy per side); kakeya-pc and preconditioned keys
			// have one per KV head.
			if inner == "kakeya" || inner == "kakeya-b4c8" || inner == "hot" {
				if shared == nil {
					shared = cd
				}
				cd = shared
			}
			cs[side] = append(cs[side], cd)
		}
	}
	return cs
}

// batchLayer builds one sequence's layer of total tokens on the GPU's
// store and the reference's, the same rows in both (random, past total
// NaN in the hot last block), every full block's parts encoded by codecs
// (the same bytes handed to both stores).
func batchLayer(t *testing.T, r *rand.Rand, gpu compute.Backend, gs, rs compute.BlockStore, total, kvHeads, bs, d int, codecs [2][]codec.Codec) (g, ref *layerOf) {
	t.Helper()
	nb := (total + bs - 1) / bs
	g, ref = &layerOf{n: total, parts: make([][]compute.Part, nb)}, &layerOf{n: total, parts: make([][]compute.Part, nb)}
	for blk := range nb {
		m := min(bs, total-blk*bs)
		g.parts[blk], ref.parts[blk] = make([]compute.Part, 2*kvHeads), make([]compute.Part, 2*kvHeads)
		for j := range 2 * kvHeads {
			vals := randFloats(r, bs*d)
			for i := m * d; i < len(vals); i++ {
				vals[i] = float32(math.NaN())
			}
			gp, err := gs.NewPart()
			if err != nil {
				t.Fatal(err)
			}
			rp, err := rs.NewPart()
			if err != nil {
				t.Fatal(err)
			}
			gs.Write(gp, 0, upload(gpu, vals), d, m)
			rs.Write(rp, 0, refBuf(vals), d, m)
			g.parts[blk][j], ref.parts[blk][j] = gp, rp
			cs := codecs[j%2]
			cd := cs[min(j/2, len(cs)-1)]
			if m < bs || cd == nil {
				continue
			}
			enc, err := cd.Encode(nil, vals, bs, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := gs.SetEncoded(gp, enc, cd); err != nil {
				t.Fatal(err)
			}
			if err := rs.SetEncoded(rp, enc, cd); err != nil {
				t.Fatal(err)
			}
		}
	}
	return g, ref
}

// A decode step of 16 sequences (and one of 4, through the decode
// fusions, norm_qkv reading every row's position from the step
// parameters) is one run of launches, captured once
// and then replayed as one graph: attention is one attn_batch per layer
// (and one attn_combine where the context is split), the 16 sequences'
// cache writes one kv_write_runs per layer, the queries rotated inside
// attention (no rope launch), every per-step value (positions, cache
// rows, tables, the passes' rows) read from the step parameters. A steady
// step makes four driver calls: the token ids and the step parameters
// in, the graph, the logits out, the one host wait (TestBatchStepHostWaits
// counts the waits of the steps that fill and encode blocks, and of a
// step mixing a prefill chunk with decode rows). Its logits are bit for bit those of
// launching every kernel directly (Options.NoGraphs).
func TestBatchStepGraph(t *testing.T) {
	needKernels(t, "attn_batch", "kv_write_runs", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	// Prompts of 17 tokens in blocks of 16: decode positions 17..21 stay
	// in one block and one shape class (two blocks). 16 sequences' rows
	// run the separate kernels, 4 sequences' the decode fusions.
	for _, seqs := range []int{16, 4} {
		t.Run(fmt.Sprintf("%d sequences", seqs), func(t *testing.T) { testBatchStepGraph(t, dir, seqs) })
	}
}

func testBatchStepGraph(t *testing.T, dir string, seqs int) {
	// Five steps: the first is seen, the second captured, three replay.
	const prompt, steps, bs = 17, 5, 16
	run := func(opts Options) ([][]float32, []LaunchStats, map[string]int, int) {
		gpu, f := newFakeBackend(t, opts)
		m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
		vocab := m.Config().VocabSize
		p, _, err := kvplan.NewPolicy(kvconfig.Spec{KV: "none", BlockSize: bs, CacheType: "bf16"}, m.CacheShape(), nil)
		if err != nil {
			t.Fatal(err)
		}
		bt, err := m.NewBatch(seqs * prompt)
		if err != nil {
			t.Fatal(err)
		}
		items := make([]model.BatchItem, seqs)
		for i := range items {
			s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			items[i] = model.BatchItem{Seq: s, IDs: testIDs(prompt, vocab-i)}
		}
		if err := bt.Forward(items); err != nil {
			t.Fatal(err)
		}
		var logits [][]float32
		var calls []LaunchStats
		steady := map[string]int{}
		for st := range steps {
			for i := range items {
				items[i].IDs = []int{(7*st + 3*i + 1) % vocab}
			}
			before, k0 := gpu.Launches(), len(f.launched)
			if err := bt.Forward(items); err != nil {
				t.Fatal(err)
			}
			calls = append(calls, gpu.Launches().Sub(before))
			for i := range items {
				logits = append(logits, slices.Clone(items[i].Logits))
			}
			if st >= 2 {
				for _, k := range f.launched[k0:] {
					steady[k]++
				}
			}
		}
		return logits, calls, steady, m.Config().NumLayers
	}
	got, calls, kernels, layers := run(Options{})
	direct, _, _, _ := run(Options{NoGraphs: true})
	for i := range got {
		for j := range got[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(direct[i][j]) {
				t.Fatalf("row %d logit %d: %v graphed, %v launched directly", i, j, got[i][j], direct[i][j])
			}
		}
	}
	for i, c := range calls {
		t.Logf("decode step %d of %d sequences: %+v", i, seqs, c)
		if i < 2 {
			continue // seen, then captured
		}
		if c.Kernels != 0 || c.Graphs != 1 || c.CopiesIn != 2 || c.CopiesOut != 1 || c.Calls()+c.CopiesIn+c.CopiesOut+c.Syncs != 4 || c.Waits() != 1 {
			t.Errorf("decode step %d: %+v, want one graph launch, two copies in and one out: 4 driver calls", i, c)
		}
	}
	n := steps - 2
	for k, want := range map[string]int{"attn_batch": layers * n, "kv_write_runs": layers * n, "attn_combine": layers * n, "attn_split": 0, "rope": 0, "kv_write": 0} {
		if kernels[k] != want {
			t.Errorf("%d steady steps of %d layers ran %d %s, want %d (%v)", n, layers, kernels[k], k, want, kernels)
		}
	}
	total := 0
	for _, c := range kernels {
		total += c
	}
	// The embedding; per layer rmsnorm, 3 matmul, 3 add_rows, kv_write_runs,
	// attn_batch, attn_combine, matmul, add, rmsnorm, 2 matmul, silu_mul,
	// matmul, add; the final rmsnorm (every row's at once) and the head.
	// Fused: per layer norm_qkv, kv_write_runs, attn_batch, attn_combine,
	// matvec_add, norm_swiglu, matvec_add; the final norm_matvec.
	want := 1 + 18*layers + 2
	if seqs <= maxMatVecRows {
		want = 1 + 7*layers + 1
	}
	// Products that take bf16 activations add a conversion each
	// (to_bf16, where the bf16 GEMMs are): not counted here.
	if total-kernels["to_bf16"] != want*n {
		t.Errorf("a steady decode step of %d sequences ran %d kernels, want %d (%v)", seqs, total/n, want, kernels)
	}
	t.Logf("a steady decode step of %d sequences: %d kernels in one graph (%v)", seqs, total/n, kernels)
}
