package cudabackend

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/reference"
)

// Prefill attention on the tensor cores (attn_prefill_d64, _d128 and
// their batched forms) gives the attention the float64 reference
// computes, to the rounding of its bf16 operands (queries, keys,
// probabilities and values; float32 sums): one sequence's call and a
// batched step of prefill chunks beside decode rows, from position 0 and
// from a later chunk's, over hot f32 and bf16 rows and int8, int4 and
// int2 blocks, GQA 7:1 and 2:1, head dims 64 and 128, a sliding window,
// with the queries rotated before the call or by the kernel. Layers with
// fixed-rate kakeya-pc blocks (format 8: keys, values or both, beside hot
// blocks, int8 and int4 parts and sequences without them in one batch;
// blocks of 16 and 64 rows, windows whose tiles start inside a block, a
// query scale and softcap; the kakeya preset's keys, capped at 16 coded
// components, beside uncapped values) run the _pc kernels. Under --matmul f32, or
// with a part only attn_split reads (kakeya, entropy-coded kakeya-pc),
// the call stays on attn_split.
func TestPrefillAttentionMatchesReference(t *testing.T) {
	needKernels(t, "attn_prefill_d64", "attn_prefill_d128", "attn_prefill_batch_d64", "attn_prefill_batch_d128", "attn_split",
		"attn_prefill_pc_d64", "attn_prefill_pc_d128", "attn_prefill_batch_pc_d64", "attn_prefill_batch_pc_d128", "pc_unpack")
	for _, c := range []struct {
		name                       string
		heads, kvHeads, d, bs, win int
		bf16                       bool
		exact                      bool
		seqs                       []batchSeq
		kernel                     string  // the single-sequence calls' kernel
		scale, softcap             float64 // Gemma's query scale and score softcap (0: none)
	}{
		{"gqa7/d64/bf16", 7, 1, 64, 16, 0, true, false, []batchSeq{{0, 40, ""}, {30, 19, "int8"}}, "attn_prefill_d64", 0, 0},
		{"gqa2/d128/f32", 4, 2, 128, 16, 0, false, false, []batchSeq{{0, 33, "int4/int8"}, {17, 9, "int2-k/hot"}, {50, 1, "int8"}}, "attn_prefill_d128", 0, 0},
		{"gqa7/d128/window", 14, 2, 128, 16, 20, true, false, []batchSeq{{5, 60, "int8"}, {70, 1, ""}}, "attn_prefill_d128", 0, 0},
		{"exact", 7, 1, 64, 16, 0, true, true, []batchSeq{{0, 20, ""}}, "attn_split", 0, 0},
		{"kakeya", 7, 1, 64, 16, 0, true, false, []batchSeq{{20, 12, "kakeya"}}, "attn_split", 0, 0},
		// Gemma's query scale (query_pre_attn_scalar 144) and score
		// softcap through a sliding window, on the tensor cores and, under
		// --matmul f32, on attn_split and attn_batch.
		{"gemma/d128/window", 8, 4, 128, 16, 20, true, false, []batchSeq{{5, 40, "int8"}, {30, 12, ""}, {60, 1, ""}}, "attn_prefill_d128", 1.0 / 12, 5},
		{"gemma/exact/window", 4, 2, 64, 16, 12, false, true, []batchSeq{{0, 30, ""}, {40, 1, "int8"}}, "attn_split", 0.2, 3},
		// Fixed-rate kakeya-pc (format 8) on the tensor cores.
		{"pc/gqa7/d64/bf16", 7, 1, 64, 16, 0, true, false, []batchSeq{{0, 40, "pc"}, {30, 19, "pc/int8"}}, "attn_prefill_pc_d64", 0, 0},
		{"pc/gqa2/d128/f32", 4, 2, 128, 16, 0, false, false, []batchSeq{{0, 33, "pc"}, {17, 9, "int8/pc"}, {50, 1, "pc"}}, "attn_prefill_pc_d128", 0, 0},
		{"pc/gqa7/d128/window", 14, 2, 128, 16, 21, true, false, []batchSeq{{5, 60, "pc"}, {70, 1, ""}, {40, 20, "int4/pc"}}, "attn_prefill_pc_d128", 0, 0},
		{"pc/gqa4/d128/bs64", 8, 2, 128, 64, 0, true, false, []batchSeq{{0, 100, "pc"}, {64, 40, "pc"}}, "attn_prefill_pc_d128", 0, 0},
		{"pc/gqa4/d64/bs64/window", 8, 2, 64, 64, 50, true, false, []batchSeq{{70, 30, "pc"}}, "attn_prefill_pc_d64", 0, 0},
		{"pc/gemma/d128", 8, 4, 128, 16, 0, true, false, []batchSeq{{5, 40, "pc"}}, "attn_prefill_pc_d128", 1.0 / 12, 5},
		// The kakeya preset's keys, capped at 16 coded components, beside
		// uncapped values.
		{"preset/gqa4/d64/bs64", 8, 2, 64, 64, 0, true, false, []batchSeq{{0, 100, "pc16/pc"}, {64, 40, "pc16/pc"}}, "attn_prefill_pc_d64", 0, 0},
		{"preset/gqa4/d128/bs64", 8, 2, 128, 64, 0, true, false, []batchSeq{{0, 100, "pc16/pc"}, {64, 40, "pc/pc16"}}, "attn_prefill_pc_d128", 0, 0},
		// Entropy-coded kakeya-pc (format 9): decoded once by pc_unpack
		// for the tensor cores in a sequence's own call, attn_split_pc
		// otherwise (pc_unpack off, and batched).
		{"pcec", 7, 1, 64, 16, 0, true, false, []batchSeq{{20, 12, "pcec"}}, "attn_split_pc", 0, 0},
		{"pcec/gqa4/d128", 8, 2, 128, 16, 0, true, false, []batchSeq{{0, 40, "pcec"}, {30, 19, "pc/pcec"}}, "attn_split_pc", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{}
			if c.exact {
				o.MatMul = "f32"
			}
			gpu, f := newFakeBackend(t, o)
			ref := reference.Backend{}
			r := rand.New(rand.NewPCG(11, uint64(c.heads*c.d+c.win)))
			ap := compute.AttentionParams{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.d, Window: c.win, BlockSize: c.bs, MaxContext: 128,
				Scale: c.scale, Softcap: c.softcap}
			cos, sin := ropeTables(ap.MaxContext, c.d)
			gstore := gpu.NewBlockStore(c.bs, c.d, c.bf16)
			rstore := ref.NewBlockStore(c.bs, c.d, c.bf16)
			row := c.heads * c.d
			rows := 0
			for _, s := range c.seqs {
				rows += s.n
			}
			q := randFloats(r, rows*row)
			var qr, want []float32
			var passes []compute.AttentionPass
			at := 0
			cd, sd := upload(gpu, cos), upload(gpu, sin)
			for i, s := range c.seqs {
				pass, sqr, w := batchPass(t, r, gpu, gstore, rstore, ap, s, q[at*row:(at+s.n)*row], cos, sin)
				passes, qr, want = append(passes, pass), append(qr, sqr...), append(want, w...)
				// The sequence's own call, its queries rotated before. A
				// call over kakeya_pc parts also runs with them decoded
				// once (pc_unpack, then the plain kernel) and in every
				// row tile (the _pc kernel), besides the model's choice;
				// one over entropy-coded ones decodes them once (the
				// model) or stays on attn_split_pc (never).
				pcCall := strings.Contains(s.enc, "pc") && s.n > maxMatVecRows && !c.exact
				ec := strings.Contains(s.enc, "pcec")
				modes := []int{pcOnceModel}
				if pcCall {
					modes = append(modes, pcOnceNever, pcOnceAlways)
				}
				var outs [][]float32
				for _, mode := range modes {
					gpu.pcOnce = mode
					gout := gpu.Alloc(s.n * row)
					before := len(f.launched)
					if err := pass.Attention.Forward(gout, upload(gpu, sqr), s.n, s.start, pass.KV, cd, sd); err != nil {
						t.Fatal(err)
					}
					got := read(gpu, gout)
					if err := gpu.Err(); err != nil {
						t.Fatal(err)
					}
					kernel := c.kernel
					if s.n <= maxMatVecRows {
						kernel = "attn_split"
						if strings.Contains(s.enc, "pc") {
							kernel = "attn_split_pc"
						}
					}
					unpacked := []string{"pc_unpack", fmt.Sprintf("attn_prefill_d%d", c.d)}
					ks := withoutKernel(f.launched[before:], "copy_runs")
					switch {
					case pcCall && (mode == pcOnceAlways || mode == pcOnceModel && ec):
						if !slices.Equal(ks, unpacked) {
							t.Fatalf("sequence %d (pc_unpack mode %d): launched %v, want %v", i, mode, ks, unpacked)
						}
					case pcCall && mode == pcOnceModel && len(ks) > 0 && ks[0] == "pc_unpack":
						if !slices.Equal(ks, unpacked) {
							t.Fatalf("sequence %d: launched %v, want %v", i, ks, unpacked)
						}
						t.Logf("sequence %d (%d rows from %d): the model decodes the kakeya_pc parts once", i, s.n, s.start)
					case len(ks) == 0 || ks[0] != kernel:
						t.Fatalf("sequence %d (pc_unpack mode %d): launched %v, want %s first", i, mode, ks, kernel)
					}
					checkPrefill(t, fmt.Sprintf("sequence %d (%+v) alone, pc_unpack mode %d", i, s, mode), got, w, c.exact || strings.HasPrefix(ks[0], "attn_split"))
					outs = append(outs, got)
				}
				gpu.pcOnce = pcOnceModel
				if len(outs) == 3 {
					// Both read the same decoded rows; decoded once, the
					// keys are rounded to bf16 before RoPE too.
					d, scale := maxAbsDiff(outs[1], outs[2]), max(1, maxAbs(w))
					t.Logf("sequence %d: decoded once vs in every row tile: %.3g of the output's scale apart", i, d/scale)
				}
				at += s.n
			}
			// The batched step: on the tensor cores when a pass is a
			// prefill chunk and every part is one the kernel reads.
			qd, qrd := upload(gpu, q), upload(gpu, qr)
			batchKernel := fmt.Sprintf("attn_prefill_batch_d%d", c.d)
			if strings.Contains(c.kernel, "_pc_") {
				batchKernel = fmt.Sprintf("attn_prefill_batch_pc_d%d", c.d)
			}
			if k, ok := strings.CutPrefix(c.kernel, "attn_split"); ok {
				batchKernel = "attn_batch" + k
			}
			// A batch with kakeya_pc passes on the tensor cores also runs
			// with them decoded once (pc_unpack per pass, then the plain
			// batched kernel where no pass keeps kakeya_pc parts) and in
			// the kernel, besides the model's choice.
			bmodes := []int{pcOnceModel}
			ec := strings.HasPrefix(c.name, "pcec")
			switch {
			case strings.Contains(batchKernel, "_pc_"):
				bmodes = append(bmodes, pcOnceNever, pcOnceAlways)
			case ec:
				// Format 9: decoded once for the tensor cores (the
				// model), or attn_batch_pc (never).
				bmodes = append(bmodes, pcOnceNever)
			}
			plainBatch := fmt.Sprintf("attn_prefill_batch_d%d", c.d)
			for _, mode := range bmodes {
				gpu.pcOnce = mode
				for _, rotate := range []bool{false, true} {
					in := qrd
					if rotate {
						in = qd
					}
					out := gpu.Alloc(rows * row)
					before := len(f.launched)
					if err := gpu.AttendBatch(out, in, rotate, 0, passes, cd, sd); err != nil {
						t.Fatal(err)
					}
					got := read(gpu, out)
					if err := gpu.Err(); err != nil {
						t.Fatal(err)
					}
					all := withoutKernel(f.launched[before:], "copy_runs")
					ks := withoutKernel(all, "pc_unpack")
					unpacks := len(all) - len(ks)
					switch {
					case len(ks) == 0:
						t.Fatalf("batched (rotate %v, pc_unpack mode %d): launched nothing", rotate, mode)
					case ec && mode == pcOnceModel && (ks[0] != plainBatch || unpacks == 0):
						t.Fatalf("batched (rotate %v), format 9: launched %v, want pc_unpack then %s", rotate, all, plainBatch)
					case mode == pcOnceAlways && (ks[0] != plainBatch || unpacks == 0):
						t.Fatalf("batched (rotate %v), decoded once: launched %v, want pc_unpack then %s", rotate, all, plainBatch)
					case mode == pcOnceNever && (ks[0] != batchKernel || unpacks != 0):
						t.Fatalf("batched (rotate %v), not decoded once: launched %v, want %s", rotate, all, batchKernel)
					case mode == pcOnceModel && ks[0] != batchKernel && !(ks[0] == plainBatch && unpacks > 0):
						t.Fatalf("batched (rotate %v): launched %v, want %s first", rotate, all, batchKernel)
					}
					if mode == pcOnceModel && unpacks > 0 && !rotate {
						t.Logf("batched: the model decodes %d passes' kakeya_pc parts once, then %s", unpacks, ks[0])
					}
					at = 0
					for i, s := range c.seqs {
						checkPrefill(t, fmt.Sprintf("batched (rotate %v, pc_unpack mode %d): sequence %d (%+v)", rotate, mode, i, s),
							got[at*row:(at+s.n)*row], want[at*row:(at+s.n)*row], strings.HasPrefix(ks[0], "attn_batch"))
						at += s.n
					}
				}
			}
			gpu.pcOnce = pcOnceModel
		})
	}
}

// checkPrefill compares an attention output with the reference's: to
// float32 rounding for attn_split, to the bf16 operands' rounding for the
// tensor cores (2^-8 relative on each operand: the output, an average of
// values, within 1% of the values' scale).
func checkPrefill(t *testing.T, what string, got, want []float32, exact bool) {
	t.Helper()
	tol := 1e-2 * max(1, maxAbs(want))
	if exact {
		tol = 2e-5 * max(1, maxAbs(want))
	}
	if d := maxAbsDiff(got, want); !(d <= tol) {
		t.Fatalf("%s: attention differs from the reference by %.3g (tolerance %.3g)", what, d, tol)
	}
}
