package model

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/weights"
)

// gemmaRef is an independent float64 transcription of transformers'
// Gemma2ForCausalLM / Gemma3ForCausalLM (modeling_gemma2.py,
// modeling_gemma3.py) with no cache, blocks, kernels or architecture
// description: the checkpoint's config.json read for its numbers only,
// every position attending over recomputed keys.
func gemmaRef(t *testing.T, dir string, ids []int) [][]float64 {
	t.Helper()
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	get := func(name string) []float64 {
		tn, err := st.Tensor(cfg.TensorPrefix + name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}
	linear := func(x, w []float64, out int) []float64 {
		in := len(x)
		y := make([]float64, out)
		for r := range y {
			for c := 0; c < in; c++ {
				y[r] += x[c] * w[r*in+c]
			}
		}
		return y
	}
	// Gemma's RMSNorm: x / sqrt(mean(x²) + eps) · (1 + w).
	rms := func(x, w []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+cfg.RMSNormEps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * inv * (1 + w[i])
		}
		return y
	}
	gelu := func(x float64) float64 {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	H, KV, d, hid := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim, cfg.HiddenSize
	gemma3 := cfg.ModelType != "gemma2"
	half := d / 2
	// sliding: Gemma 2 slides on even layers; Gemma 3 on all but every
	// sliding_window_pattern-th (layer_types as transformers derives them).
	pattern := 2
	if gemma3 {
		pattern = 6
		if len(cfg.LayerTypes) > 0 { // the test's checkpoints set the pattern
			for i, lt := range cfg.LayerTypes {
				if lt == "full_attention" {
					pattern = i + 1
					break
				}
			}
		}
	}
	sliding := func(l int) bool { return (l+1)%pattern != 0 }
	ropeAt := func(v []float64, pos int, base, factor float64) {
		for i := 0; i < half; i++ {
			inv := 1 / math.Pow(base, float64(2*i)/float64(d)) / factor
			c, s := math.Cos(float64(pos)*inv), math.Sin(float64(pos)*inv)
			a, b := v[i], v[i+half]
			v[i], v[i+half] = a*c-b*s, b*c+a*s
		}
	}
	n := len(ids)
	embed := get("model.embed_tokens.weight")
	x := make([][]float64, n)
	for p, id := range ids {
		x[p] = make([]float64, hid)
		for i := range x[p] {
			x[p][i] = embed[id*hid+i] * float64(float32(math.Sqrt(float64(hid))))
		}
	}
	for l := 0; l < cfg.NumLayers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		base, factor := cfg.RopeTheta, 1.0
		if cfg.RopeScaling != nil {
			factor = cfg.RopeScaling.Factor
		}
		if gemma3 && sliding(l) {
			base, factor = cfg.RopeLocalTheta, 1
		}
		wq, wk, wv, wo := get(pre+"self_attn.q_proj.weight"), get(pre+"self_attn.k_proj.weight"), get(pre+"self_attn.v_proj.weight"), get(pre+"self_attn.o_proj.weight")
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for p := range x {
			xn := rms(x[p], get(pre+"input_layernorm.weight"))
			q[p], k[p], v[p] = linear(xn, wq, H*d), linear(xn, wk, KV*d), linear(xn, wv, KV*d)
			for h := 0; h < H; h++ {
				if gemma3 {
					copy(q[p][h*d:], rms(q[p][h*d:(h+1)*d], get(pre+"self_attn.q_norm.weight")))
				}
				ropeAt(q[p][h*d:(h+1)*d], p, base, factor)
			}
			for h := 0; h < KV; h++ {
				if gemma3 {
					copy(k[p][h*d:], rms(k[p][h*d:(h+1)*d], get(pre+"self_attn.k_norm.weight")))
				}
				ropeAt(k[p][h*d:(h+1)*d], p, base, factor)
			}
		}
		for p := range x {
			att := make([]float64, H*d)
			lo := 0
			if sliding(l) {
				lo = max(0, p-cfg.SlidingWindow+1)
			}
			for h := 0; h < H; h++ {
				g := h / (H / KV)
				sc := make([]float64, p+1)
				m := math.Inf(-1)
				for j := lo; j <= p; j++ {
					var s float64
					for i := 0; i < d; i++ {
						s += q[p][h*d+i] * k[j][g*d+i]
					}
					s *= math.Pow(cfg.QueryPreAttnScalar, -0.5)
					if c := cfg.AttnLogitSoftcap; c > 0 {
						s = math.Tanh(s/c) * c
					}
					sc[j] = s
					m = max(m, s)
				}
				var sum float64
				for j := lo; j <= p; j++ {
					sc[j] = math.Exp(sc[j] - m)
					sum += sc[j]
				}
				for j := lo; j <= p; j++ {
					for i := 0; i < d; i++ {
						att[h*d+i] += sc[j] / sum * v[j][g*d+i]
					}
				}
			}
			o := rms(linear(att, wo, hid), get(pre+"post_attention_layernorm.weight"))
			for i := range o {
				x[p][i] += o[i]
			}
		}
		wg, wu, wd := get(pre+"mlp.gate_proj.weight"), get(pre+"mlp.up_proj.weight"), get(pre+"mlp.down_proj.weight")
		for p := range x {
			xn := rms(x[p], get(pre+"pre_feedforward_layernorm.weight"))
			g, u := linear(xn, wg, cfg.IntermediateSize), linear(xn, wu, cfg.IntermediateSize)
			for i := range g {
				g[i] = gelu(g[i]) * u[i]
			}
			dn := rms(linear(g, wd, hid), get(pre+"post_feedforward_layernorm.weight"))
			for i := range dn {
				x[p][i] += dn[i]
			}
		}
	}
	norm := get("model.norm.weight")
	out := make([][]float64, n)
	for p := range x {
		out[p] = linear(rms(x[p], norm), embed, cfg.VocabSize)
		if c := cfg.FinalLogitSoftcap; c > 0 {
			for i := range out[p] {
				out[p][i] = math.Tanh(out[p][i]/c) * c
			}
		}
	}
	return out
}

// gemmaSpecs are the Gemma checkpoints the tests run: Gemma 2 and Gemma 3
// text models, and a multimodal Gemma 3's language model.
func gemmaSpecs() map[string]testmodel.Spec {
	mm := testmodel.Gemma3Tiny
	mm.Multimodal, mm.Seed, mm.SlidingWindowPattern = true, 40, 3
	qs := testmodel.Gemma2Tiny
	qs.QueryPreAttnScalar, qs.Seed = 24, 41 // not head_dim: the scale is query_pre_attn_scalar's
	return map[string]testmodel.Spec{"gemma2": testmodel.Gemma2Tiny, "gemma2-query-scale": qs, "gemma3": testmodel.Gemma3Tiny, "gemma3-multimodal-pattern3": mm}
}

// TestGemmaMatchesFloat64 checks Gemma 2 and Gemma 3 on the CPU backend
// (f32 matmuls) and the reference backend against gemmaRef over 40
// positions, five times the sliding window, so sliding layers drop keys.
func TestGemmaMatchesFloat64(t *testing.T) {
	for name, spec := range gemmaSpecs() {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			if err := testmodel.Write(dir, spec); err != nil {
				t.Fatal(err)
			}
			ids := testIDs(40, spec.Vocab)
			want := gemmaRef(t, dir, ids)
			for _, b := range []compute.Backend{cpuBackend(t, 2, "f32"), refbackend.Backend{}} {
				m := load(t, dir, Options{Backend: b, BlockSize: 4})
				got, err := m.Logits(ids)
				if err != nil {
					t.Fatal(err)
				}
				var worst, spread float64
				for p := range ids {
					var diff, scale float64
					lo, hi := math.Inf(1), math.Inf(-1)
					for i := range want[p] {
						diff = max(diff, math.Abs(float64(got[p][i])-want[p][i]))
						scale = max(scale, math.Abs(want[p][i]))
						lo, hi = min(lo, want[p][i]), max(hi, want[p][i])
					}
					spread = max(spread, hi-lo)
					if diff > 1e-4*scale {
						t.Errorf("%s: position %d: max abs diff %.3g vs float64 (row max %.3g)", b.Name(), p, diff, scale)
					}
					worst = max(worst, diff)
				}
				if spread < 1 {
					t.Errorf("logits spread only %.3g: the random model is too flat to test anything", spread)
				}
				t.Logf("%s: max abs diff vs float64 %.3g (logit spread %.3g)", b.Name(), worst, spread)
			}
		})
	}
}

// TestGemmaPrefillMatchesDecode checks that a Gemma prompt prefilled at
// once and decoded token by token give identical logits on the CPU, past
// the sliding window.
func TestGemmaPrefillMatchesDecode(t *testing.T) {
	for name, spec := range map[string]testmodel.Spec{"gemma2": testmodel.Gemma2Tiny, "gemma3": testmodel.Gemma3Tiny} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			if err := testmodel.Write(dir, spec); err != nil {
				t.Fatal(err)
			}
			m := load(t, dir, Options{Backend: cpuBackend(t, 2, "bf16"), BlockSize: 4})
			ids := testIDs(30, spec.Vocab)
			all, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			dec := decode(t, m, ids)
			for p := range ids {
				for i := range all[p] {
					if all[p][i] != dec[p][i] {
						t.Fatalf("position %d logit %d: prefill %v, decode %v", p, i, all[p][i], dec[p][i])
					}
				}
			}
		})
	}
}

// plainBackend hides a backend's compute.ArchOps, as a backend without
// Gemma's operations has none. (The CUDA backend has them: its Gemma path
// is tested against the reference in compute/cudabackend's gemma_test.go.)
type plainBackend struct{ compute.Backend }

// TestGemmaNeedsArchOps checks that a backend without compute.ArchOps
// refuses a Gemma model with an error naming what it lacks.
func TestGemmaNeedsArchOps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gemma2")
	if err := testmodel.Write(dir, testmodel.Gemma2Tiny); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, Options{Backend: plainBackend{refbackend.Backend{}}})
	if err == nil {
		t.Fatal("a backend without ArchOps loaded a Gemma 2 model")
	}
	for _, want := range []string{"gemma2", "GELU-tanh gating", "attention logit softcap", "final logit softcap", "reference backend", "compute.ArchOps"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	var ce *ContextError
	if errors.As(err, &ce) {
		t.Errorf("error %v is a context error", err)
	}
}
