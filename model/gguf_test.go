package model

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/tensor"
	"github.com/kakeya-ai/kakeya/weights"

	"github.com/kakeya-ai/kakeya/internal/ggufdata"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// The shared models converted to GGUF by llama.cpp's gguf-py (st2gguf.py)
// give the logits of their safetensors directories: bit for bit where the
// GGUF keeps the stored type (stories260K F32, whose q/k rows the
// converter permuted and the loader puts back; ref-qwen2-6m BF16), within
// bf16 rounding where BF16 weights became F16. Both also against the
// golden logits of the independent implementations.
func TestGGUFLogits(t *testing.T) {
	for _, tc := range []struct {
		model, outtype, golden string
		tol                    float64 // against the safetensors logits
	}{
		{"stories260K", "native", "stories260K_runc_logits.txt", 0},
		{"ref-qwen2-6m", "native", "ref-qwen2-6m_logits.txt", 0},
		{"ref-qwen2-6m", "f16", "ref-qwen2-6m_logits.txt", 1e-4},
	} {
		t.Run(tc.model+"-"+tc.outtype, func(t *testing.T) {
			ids, want := reference(t, tc.golden)
			file := ggufdata.Convert(t, tc.model, tc.outtype)
			g := load(t, file, Options{Backend: cpuBackend(t, 2, "f32")})
			h := load(t, shareddata.File(t, "models", tc.model), Options{Backend: cpuBackend(t, 2, "f32")})
			if gc, hc := *g.Config(), *h.Config(); gc.NumLayers != hc.NumLayers || gc.HeadDim != hc.HeadDim ||
				gc.NumKVHeads != hc.NumKVHeads || gc.RopeTheta != hc.RopeTheta || float32(gc.RMSNormEps) != float32(hc.RMSNormEps) ||
				gc.TieWordEmbeddings != hc.TieWordEmbeddings || gc.MaxPositionEmbeddings != hc.MaxPositionEmbeddings {
				t.Errorf("GGUF config %+v\nsafetensors config %+v", gc, hc)
			}
			got, err := g.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := h.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			var worst, golden float64
			for p := range ids {
				worst = max(worst, maxAbsDiff(got[p], ref[p]))
				golden = max(golden, maxAbsDiff(got[p], want[p]))
			}
			t.Logf("max abs difference: %.3g vs safetensors, %.3g vs golden", worst, golden)
			if worst > tc.tol {
				t.Errorf("max abs difference vs the safetensors model %.3g, want <= %g", worst, tc.tol)
			}
			if golden > 1e-3 {
				t.Errorf("max abs difference vs the golden logits %.3g, want <= 1e-3", golden)
			}
		})
	}
}

// A Q8_0 GGUF (the BF16 conversion requantized by gguf-py) runs on the CPU
// backend in its blocks: its logits are the float64 reference backend's
// over the dequantized weights up to the 8-bit quantization of the
// activations, and the greedy tokens of the two agree.
func TestGGUFQuantizedLogits(t *testing.T) {
	ids, _ := reference(t, "ref-qwen2-6m_logits.txt")
	ids = ids[:12]
	file := ggufdata.Quantize(t, ggufdata.Convert(t, "ref-qwen2-6m", "native"), "Q8_0")
	q := load(t, file, Options{Backend: cpuBackend(t, 2, "f32")})
	r := load(t, file, Options{Backend: refbackend.Backend{}})
	got, err := q.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	worst, scale, agree := compareLogits(got, want)
	t.Logf("Q8_0: max abs difference %.3g (logits up to %.3g), greedy agreement %d/%d", worst, scale, agree, len(ids))
	if worst > 0.05*scale {
		t.Errorf("max abs difference %.3g vs the float64 reference, want <= 5%% of %.3g", worst, scale)
	}
	if agree < len(ids)-1 {
		t.Errorf("greedy tokens agree at %d of %d positions", agree, len(ids))
	}
}

// compareLogits returns the largest difference between got's and want's
// logits, the largest magnitude in want, and at how many positions their
// greedy tokens agree.
func compareLogits(got, want [][]float32) (worst, scale float64, agree int) {
	for p := range want {
		worst = max(worst, maxAbsDiff(got[p], want[p]))
		scale = max(scale, maxAbs(want[p]))
		if pick.ArgMax(got[p]) == pick.ArgMax(want[p]) {
			agree++
		}
	}
	return worst, scale, agree
}

// llama.cpp's own quantizations of ref-qwen2-6m (llama-quantize: Q8_0,
// Q4_K_M with its Q6_K tensors, Q5_K_M) run in their blocks: logits
// within the activations' quantization of the float64 reference over the
// dequantized weights, the same greedy tokens.
func TestGGUFLlamaQuantized(t *testing.T) {
	ggufdata.NeedLlamaQuantize(t)
	ids, _ := reference(t, "ref-qwen2-6m_logits.txt")
	ids = ids[:16]
	src := ggufdata.Convert(t, "ref-qwen2-6m", "native")
	for _, typ := range []string{"Q8_0", "Q4_K_M", "Q5_K_M", "Q4_0"} {
		t.Run(typ, func(t *testing.T) {
			file := ggufdata.LlamaQuantize(t, src, typ)
			q := load(t, file, Options{Backend: cpuBackend(t, 2, "f32")})
			r := load(t, file, Options{Backend: refbackend.Backend{}})
			got, err := q.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			want, err := r.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			worst, scale, agree := compareLogits(got, want)
			t.Logf("%s: max abs difference %.3g (logits up to %.3g), greedy agreement %d/%d", typ, worst, scale, agree, len(ids))
			if worst > 0.05*scale || agree < len(ids)-1 {
				t.Errorf("max abs difference %.3g (want <= 5%% of %.3g), greedy agreement %d of %d", worst, scale, agree, len(ids))
			}
		})
	}
}

// The compressed KV caches work unchanged on quantized weights: a Q8_0
// GGUF decoded through each codec against its own uncompressed cache (f32
// bit for bit, the lossy ones close).
func TestGGUFQuantizedCaches(t *testing.T) {
	file := ggufdata.Quantize(t, ggufdata.Convert(t, "ref-qwen2-6m", "native"), "Q8_0")
	const bs = 16
	plain := load(t, file, Options{Backend: cpuBackend(t, 2, ""), BlockSize: bs})
	ids := testIDs(48, plain.Config().VocabSize)
	want := decode(t, plain, ids)
	for _, tc := range []struct {
		spec string
		tol  float64 // max abs diff over row max abs; 0: bit-identical
	}{
		{"f32", 0},
		{"bf16", 2e-2},
		{"int8", 3e-2},
		{"int4", 5e-2},
		{"kakeya-block", 5e-2},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			c, err := codec.Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			layers := make([]kvcache.LayerCodecs, plain.Config().NumLayers)
			for i := range layers {
				layers[i] = kvcache.LayerCodecs{K: []codec.Codec{c}, V: c}
			}
			m := load(t, file, Options{Backend: cpuBackend(t, 2, ""), BlockSize: bs, Cache: kvcache.Policy{Layers: layers, HotWindow: bs}})
			got := decode(t, m, ids)
			var worst float64
			for p := range ids {
				d := maxAbsDiff(got[p], want[p]) / maxAbs(want[p])
				if math.IsNaN(d) {
					t.Fatalf("position %d: NaN logits", p)
				}
				worst = max(worst, d)
			}
			t.Logf("%s: max abs difference / max abs logit %.3g", tc.spec, worst)
			if worst > tc.tol {
				t.Errorf("%s: relative difference %.3g, want <= %g", tc.spec, worst, tc.tol)
			}
		})
	}
}

// Quantize-on-load (Options.Weights) of the safetensors checkpoint gives
// the logits of the same model quantized by gguf-py into a GGUF, bit for
// bit: the same blocks, read by the same kernels.
func TestQuantizeOnLoad(t *testing.T) {
	ids, _ := reference(t, "ref-qwen2-6m_logits.txt")
	ids = ids[:16]
	file := ggufdata.Quantize(t, ggufdata.Convert(t, "ref-qwen2-6m", "native"), "Q8_0")
	g := load(t, file, Options{Backend: cpuBackend(t, 2, "")})
	h := load(t, shareddata.File(t, "models", "ref-qwen2-6m"), Options{Backend: cpuBackend(t, 2, ""), Weights: "q8_0"})
	want, err := g.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	for p := range ids {
		if d := maxAbsDiff(got[p], want[p]); d != 0 {
			t.Fatalf("position %d: max abs difference %g from the gguf-py Q8_0 file", p, d)
		}
	}
	if _, err := Load(shareddata.File(t, "models", "ref-qwen2-6m"), Options{Backend: cpuBackend(t, 1, ""), Weights: "q3_k"}); err == nil {
		t.Error("Weights q3_k: no error")
	}
}

// Quantize-on-load to the K types (Options.Weights q4_k, q5_k, q6_k) and
// bf16: the logits stay close to the stored bf16 model's (max abs
// difference within the stated share of the largest logit: the weights'
// quantization error, 4 to 6 bits, plus the activations' 8 bits), the
// greedy tokens mostly agree, and every matrix holds the type asked for
// (ref-qwen2-6m's rows, 256 and 768 values, are whole K blocks).
func TestQuantizeOnLoadK(t *testing.T) {
	ids, _ := reference(t, "ref-qwen2-6m_logits.txt")
	ids = ids[:16]
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	want, err := load(t, dir, Options{Backend: cpuBackend(t, 2, "f32")}).Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		weights string
		dtype   tensor.DType
		tol     float64 // max abs difference over the largest logit
		agree   int     // greedy agreement of 16
	}{
		{"q4_k", tensor.Q4_K, 0.10, 14},  // measured 0.074, 15 of 16
		{"q5_k", tensor.Q5_K, 0.05, 15},  // 0.031, 16
		{"q6_k", tensor.Q6_K, 0.025, 15}, // 0.018, 16
		{"bf16", tensor.BF16, 0, 16},
	} {
		t.Run(tc.weights, func(t *testing.T) {
			b := cpuBackend(t, 2, "f32")
			m := load(t, dir, Options{Backend: b, Weights: tc.weights})
			// The backend names the weight types it was given.
			desc := b.(interface{ Describe() string }).Describe()
			mm := desc[strings.Index(desc, "matmuls: ")+len("matmuls: "):]
			if w := strings.ToLower(tc.dtype.String()) + " weights x"; !strings.HasPrefix(mm, w) || strings.Count(mm, " weights x ") != 1 {
				t.Errorf("matmuls: %s, want only %s", mm, w)
			}
			got, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			worst, scale, agree := compareLogits(got, want)
			t.Logf("%s: max abs difference %.3g (logits up to %.3g), greedy agreement %d/%d", tc.weights, worst, scale, agree, len(ids))
			if worst > tc.tol*scale || agree < tc.agree {
				t.Errorf("max abs difference %.3g (want <= %g of %.3g), greedy agreement %d (want >= %d)", worst, tc.tol, scale, agree, tc.agree)
			}
		})
	}
}

// Quantizing on load for a backend whose kernels read the rows
// interleaved (the CPU's AVX2 family: this test's rerun at the avx2 level)
// writes them so in one pass (compute.Interleaver); the logits are bit
// for bit those of the two passes, quantizing and then Prepare's
// interleaving, which a backend that names no layout takes. Where the
// kernels read the rows as stored both loads are the same path.
func TestQuantizeOnLoadOnePass(t *testing.T) {
	ids, _ := reference(t, "ref-qwen2-6m_logits.txt")
	ids = ids[:8]
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	for _, w := range []string{"q8_0", "q4_k", "q5_k", "q6_k"} {
		t.Run(w, func(t *testing.T) {
			b, err := cpubackend.NewMatMul(2, "f32")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			one, err := load(t, dir, Options{Backend: cpuBackend(t, 2, "f32"), Weights: w}).Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			two, err := load(t, dir, Options{Backend: noLayout{b}, Weights: w}).Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			for i := range one {
				for j := range one[i] {
					if math.Float32bits(one[i][j]) != math.Float32bits(two[i][j]) {
						t.Fatalf("position %d logit %d: %v in one pass, %v in two", i, j, one[i][j], two[i][j])
					}
				}
			}
		})
	}
}

// noLayout is the CPU backend naming no interleaved layout to a loader
// (compute.Interleaver), so that quantizing on load writes the rows as
// stored and Prepare interleaves them: the two passes.
type noLayout struct{ *cpubackend.Backend }

func (noLayout) Interleaved(tensor.DType, int, int) *tensor.InterleavedFormat { return nil }

// The K quantizers are llama.cpp's: ref-qwen2-6m's matrices quantized on
// load are, byte for byte, the blocks llama-quantize --pure writes for the
// same BF16 values (without an importance matrix llama-quantize runs
// quantize_row_*_ref). Skipped without llama.cpp's tools.
func TestQuantizeOnLoadMatchesLlamaQuantize(t *testing.T) {
	ggufdata.NeedLlamaTool(t, "llama-quantize")
	src := ggufdata.Convert(t, "ref-qwen2-6m", "native")
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct{ llama, weights string }{{"Q4_K", "q4_k"}, {"Q5_K", "q5_k"}, {"Q6_K", "q6_k"}, {"Q5_0", "q5_0"}} {
		t.Run(tc.llama, func(t *testing.T) {
			file := ggufdata.LlamaQuantize(t, src, tc.llama, "--pure")
			_, gs, _, err := weights.OpenGGUFModel(file)
			if err != nil {
				t.Fatal(err)
			}
			defer gs.Close()
			checked := 0
			for _, name := range st.Names() {
				ht, err := st.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				gt, err := gs.Tensor(name)
				if err != nil || len(ht.Shape) != 2 || gt.DType.Format() == nil {
					continue // tied output, norms, biases
				}
				q, ok, err := ht.Quantize(tc.weights)
				if err != nil || !ok {
					t.Fatalf("%s: quantize: ok %v, %v", name, ok, err)
				}
				if q.DType != gt.DType {
					t.Errorf("%s: %v, llama-quantize %v", name, q.DType, gt.DType)
					continue
				}
				checked++
				if !bytes.Equal(q.Data, gt.Data) {
					f := q.DType.Format()
					for i := range q.Data {
						if q.Data[i] != gt.Data[i] {
							t.Errorf("%s (%v): byte %d (block %d, offset %d) %#x, llama-quantize %#x", name, q.DType, i, i/f.Bytes, i%f.Bytes, q.Data[i], gt.Data[i])
							break
						}
					}
				}
			}
			if checked == 0 {
				t.Fatal("no matrix compared")
			}
			t.Logf("%s: %d matrices byte for byte", tc.llama, checked)
		})
	}
}
