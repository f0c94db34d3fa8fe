package cudabackend

import (
	"math"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// prePCPolicy returns the policy of sp (kakeya-pc keys) on m's shape with
// the calibration cal, its key codecs each wrapped in codec.Preconditioned
// with its layer's and KV head's factor of cal: keys that no kvplan policy
// makes (kakeya-pc keys are weighed by the queries, never whitened: see
// kvplan's precondition) but a program building its kvcache.Policy may.
func prePCPolicy(t testing.TB, m *model.Model, sp kvconfig.Spec, cal *codec.Calibration) kvcache.Policy {
	t.Helper()
	p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), cal)
	if err != nil {
		t.Fatal(err)
	}
	sh := m.CacheShape()
	layers := make([]kvcache.LayerCodecs, len(p.Layers))
	for l, lc := range p.Layers {
		layers[l].V = lc.V
		for h := range sh.KVHeads {
			k := p.KCodec(l, h)
			if _, ok := k.(*codec.KakeyaPC); !ok {
				t.Fatalf("layer %d kv head %d: key codec %v, want kakeya-pc", l, h, k)
			}
			w, err := codec.NewPreconditioned(k, cal.Chol[l*sh.KVHeads+h], sh.HeadDim)
			if err != nil {
				t.Fatal(err)
			}
			layers[l].K = append(layers[l].K, w)
		}
	}
	p.Layers = layers
	return p
}

// pcCholCalibration returns synthPCACalibration's principal components
// with randCalibration's query Cholesky factors: a calibration as
// kakeya-eval calibrate --pca makes (every file has the factors).
func pcCholCalibration(t testing.TB, m *model.Model, seed uint64) *codec.Calibration {
	t.Helper()
	cal := synthPCACalibration(m, seed)
	cal.Chol = randCalibration(t, m, seed+1).Chol
	return cal
}

// Preconditioned kakeya-pc keys (a policy built by hand: prePCPolicy),
// fixed-rate (format 8) and entropy-coded (format 9), whitened by
// enc_whiten and encoded by enc_pc or enc_pcec on the device, then read
// and un-whitened by attention, give the CPU's logits (which whitens,
// encodes and decodes with codec.Preconditioned): a Qwen2-shaped model of
// head_dim 64, a 40-token prefill that encodes a block, and decode steps
// that encode two more. Format 8: every position within 1e-3 of the
// largest logit (or one code apart, as TestForwardMatchesCPU allows) and
// the same greedy token. Format 9: the entropy-constrained scale choice
// turns a last-bit difference of a key into other codes (see
// TestPCECForwardMatchesCPU), and the random factors' whitened keys, two
// orders of magnitude apart in scale, make that visible here: the CPU's
// float32 run and the float64 reference's part by 0.04-0.25 from
// position 48, where the GPU's stays within 5e-4 of the reference. A
// position past the tolerance there passes within twice the reference's
// own distance from the CPU, its greedy token the CPU's or the
// reference's. The cache holds the CPU's bytes (format 9: the device's
// slots, at most a quarter more).
func TestPreconditionedPCForwardMatchesCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of a forward pass per token")
	}
	needKernels(t, "matvec_f32", "matmul_f32", "attn_split_pc", "attn_combine", "enc_whiten", "enc_pc", "enc_pcec", "kv_write")
	dir := writeQwen2D64(t)
	cpuM, gpuM, gpu, f := cpuAndFake(t, dir, 128)
	const tokens, pre, bs = 72, 40, 16
	ids := testIDs(tokens, cpuM.Config().VocabSize)
	cal := pcCholCalibration(t, cpuM, 23)
	// The codecs allocate for blocks of 64 (block=64), not the cache's 16,
	// as every cache did before kvplan followed the cache's block size.
	for _, kv := range []string{"kakeya-pc:block=64,rate=2.5", "kakeya-pc:block=64,ec=true"} {
		ec := strings.HasSuffix(kv, "ec=true")
		sp := kvconfig.Spec{KV: kv, BlockSize: bs, HotWindow: bs, Boundary: "none", CacheType: "bf16"}
		whiten, encs := kernelCount(f, "enc_whiten"), kernelCount(f, "enc_pc")+kernelCount(f, "enc_pcec")
		want, stW, err := runPolicy(cpuM, prePCPolicy(t, cpuM, sp, cal), bs, ids, pre)
		if err != nil {
			t.Fatal(err)
		}
		got, stG, err := runPolicy(gpuM, prePCPolicy(t, gpuM, sp, cal), bs, ids, pre)
		if err != nil {
			t.Fatal(err)
		}
		whiten, encs = kernelCount(f, "enc_whiten")-whiten, kernelCount(f, "enc_pc")+kernelCount(f, "enc_pcec")-encs
		if whiten == 0 || encs == 0 {
			t.Errorf("%s: %d enc_whiten and %d encoder launches: the preconditioned keys were not encoded on the device", kv, whiten, encs)
		}
		var ref [][]float32 // the float64 reference's logits, run when needed
		var worst, worstEnv float64
		flips, past := 0, 0
		for p := range want {
			d, tol := maxAbsDiff(got[p], want[p]), 1e-3*max(1, maxAbs(want[p]))
			kl, err := eval.KL(want[p], got[p])
			if err != nil {
				t.Fatal(err)
			}
			tok := pick.ArgMax(got[p])
			if math.IsNaN(d) {
				t.Fatalf("%s: position %d: NaN logits on CUDA", kv, p)
			}
			if d <= tol {
				worst = max(worst, d/tol)
				if tok != pick.ArgMax(want[p]) {
					t.Errorf("%s: position %d: greedy token %d on CUDA, %d on the CPU", kv, p, tok, pick.ArgMax(want[p]))
				}
				continue
			}
			if !ec {
				if d < 100*tol && kl < 1e-5 && tok == pick.ArgMax(want[p]) {
					flips++ // one code apart: see TestForwardMatchesCPU
					continue
				}
				t.Errorf("%s: position %d: max abs logit difference %.3g, CUDA vs CPU (tolerance %.3g, KL %.3g)", kv, p, d, tol, kl)
				continue
			}
			if ref == nil {
				refM := loadModel(t, dir, model.Options{Backend: reference.Backend{}, MaxContext: 128})
				if ref, _, err = runPolicy(refM, prePCPolicy(t, refM, sp, cal), bs, ids, pre); err != nil {
					t.Fatal(err)
				}
			}
			env := maxAbsDiff(ref[p], want[p])
			if d > 2*env || tok != pick.ArgMax(want[p]) && tok != pick.ArgMax(ref[p]) {
				t.Errorf("%s: position %d: max abs logit difference %.3g, CUDA vs CPU (tolerance %.3g; the float64 reference's %.3g, CUDA's %.3g); greedy token %d, the CPU's %d, the reference's %d",
					kv, p, d, tol, env, maxAbsDiff(ref[p], got[p]), tok, pick.ArgMax(want[p]), pick.ArgMax(ref[p]))
			}
			worstEnv = max(worstEnv, maxAbsDiff(ref[p], got[p]))
			past++
		}
		if flips > len(want)/4 {
			t.Errorf("%s: %d of %d positions one code apart", kv, flips, len(want))
		}
		if stW.Compressed == 0 || stG.Hot != stW.Hot || stG.Compressed < stW.Compressed ||
			!ec && stG.Compressed != stW.Compressed || stG.Compressed > stW.Compressed+stW.Compressed/4 {
			t.Errorf("%s: CUDA holds %d hot + %d encoded bytes, the CPU %d + %d", kv, stG.Hot, stG.Compressed, stW.Hot, stW.Compressed)
		}
		t.Logf("pre+%s: %d positions, worst difference %.2g of the tolerance, %d a code apart, %d past it (CUDA within %.2g of the float64 reference there); %d encoded bytes (CPU %d); %d enc_whiten and %d encoder launches",
			kv, len(want), worst, flips, past, worstEnv, stG.Compressed, stW.Compressed, whiten, encs)
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
}
