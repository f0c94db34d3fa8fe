package model

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/weights"
)

// refForward is an independent float64 transcription of the Hugging Face
// decoder (LlamaModel / MistralModel / Qwen2Model / Qwen3Model) with no
// cache, blocks or kernels: every position attends over recomputed keys.
func refForward(t *testing.T, dir string, ids []int) [][]float64 {
	return refRun(t, dir, ids, false)
}

// refHidden is refForward's final norm's output at each position, the
// rows its classifier reads.
func refHidden(t *testing.T, dir string, ids []int) [][]float64 {
	return refRun(t, dir, ids, true)
}

// refRun is refForward, or refHidden when hidden is set.
func refRun(t *testing.T, dir string, ids []int, hidden bool) [][]float64 {
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
		tn, err := st.Tensor(name)
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
	// linear returns x W^T (+ b) for W [out, in].
	linear := func(x, w, b []float64, out int) []float64 {
		in := len(x)
		y := make([]float64, out)
		for r := range y {
			var s float64
			for c := 0; c < in; c++ {
				s += x[c] * w[r*in+c]
			}
			if b != nil {
				s += b[r]
			}
			y[r] = s
		}
		return y
	}
	rms := func(x, w []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+cfg.RMSNormEps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * inv * w[i]
		}
		return y
	}
	H, KV, d, hid := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim, cfg.HiddenSize
	half := d / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(cfg.RopeTheta, float64(2*i)/float64(d))
		if rs := cfg.RopeScaling; rs != nil && rs.Type == "llama3" {
			orig := float64(rs.OriginalMaxPositionEmbeddings)
			wl := 2 * math.Pi / inv[i]
			switch {
			case wl < orig/rs.HighFreqFactor:
			case wl > orig/rs.LowFreqFactor:
				inv[i] /= rs.Factor
			default:
				s := (orig/wl - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-s)*inv[i]/rs.Factor + s*inv[i]
			}
		}
	}
	rope := func(v []float64, pos int) {
		for i := 0; i < half; i++ {
			c, s := math.Cos(float64(pos)*inv[i]), math.Sin(float64(pos)*inv[i])
			a, b := v[i], v[i+half]
			v[i], v[i+half] = a*c-b*s, b*c+a*s
		}
	}
	n := len(ids)
	embed := get("model.embed_tokens.weight")
	x := make([][]float64, n)
	for p, id := range ids {
		x[p] = append([]float64(nil), embed[id*hid:(id+1)*hid]...)
	}
	for l := 0; l < cfg.NumLayers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		var qb, kb, vb []float64
		if cfg.AttentionBias {
			qb, kb, vb = get(pre+"self_attn.q_proj.bias"), get(pre+"self_attn.k_proj.bias"), get(pre+"self_attn.v_proj.bias")
		}
		wq, wk, wv, wo := get(pre+"self_attn.q_proj.weight"), get(pre+"self_attn.k_proj.weight"), get(pre+"self_attn.v_proj.weight"), get(pre+"self_attn.o_proj.weight")
		inNorm, postNorm := get(pre+"input_layernorm.weight"), get(pre+"post_attention_layernorm.weight")
		var qn, kn []float64
		if cfg.QKNorm {
			qn, kn = get(pre+"self_attn.q_norm.weight"), get(pre+"self_attn.k_norm.weight")
		}
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for p := range x {
			xn := rms(x[p], inNorm)
			q[p], k[p], v[p] = linear(xn, wq, qb, H*d), linear(xn, wk, kb, KV*d), linear(xn, wv, vb, KV*d)
			for h := 0; h < H; h++ {
				if qn != nil {
					copy(q[p][h*d:], rms(q[p][h*d:(h+1)*d], qn))
				}
				rope(q[p][h*d:(h+1)*d], p)
			}
			for h := 0; h < KV; h++ {
				if kn != nil {
					copy(k[p][h*d:], rms(k[p][h*d:(h+1)*d], kn))
				}
				rope(k[p][h*d:(h+1)*d], p)
			}
		}
		for p := range x {
			att := make([]float64, H*d)
			lo := 0
			if w := cfg.SlidingWindow; w > 0 {
				lo = max(0, p-w+1)
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
					sc[j] = s / math.Sqrt(float64(d))
					m = max(m, sc[j])
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
			o := linear(att, wo, nil, hid)
			for i := range o {
				x[p][i] += o[i]
			}
		}
		wg, wu, wd := get(pre+"mlp.gate_proj.weight"), get(pre+"mlp.up_proj.weight"), get(pre+"mlp.down_proj.weight")
		var bg, bu, bd []float64
		if cfg.MLPBias {
			bg, bu, bd = get(pre+"mlp.gate_proj.bias"), get(pre+"mlp.up_proj.bias"), get(pre+"mlp.down_proj.bias")
		}
		for p := range x {
			xn := rms(x[p], postNorm)
			g, u := linear(xn, wg, bg, cfg.IntermediateSize), linear(xn, wu, bu, cfg.IntermediateSize)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			dn := linear(g, wd, bd, hid)
			for i := range dn {
				x[p][i] += dn[i]
			}
		}
	}
	norm := get("model.norm.weight")
	head := embed
	if !cfg.TieWordEmbeddings {
		head = get("lm_head.weight")
	}
	out := make([][]float64, n)
	for p := range x {
		if out[p] = rms(x[p], norm); !hidden {
			out[p] = linear(out[p], head, nil, cfg.VocabSize)
		}
	}
	return out
}

func TestMatchesFloat64Reference(t *testing.T) {
	llamaMLPBias := testmodel.Llama3Tiny
	llamaMLPBias.MLPBias, llamaMLPBias.RopeScaling = true, nil
	for name, spec := range map[string]testmodel.Spec{
		"qwen2":          testmodel.Qwen2Tiny,
		"llama3":         testmodel.Llama3Tiny,
		"qwen3":          testmodel.Qwen3Tiny,
		"mistral-window": testmodel.MistralTiny,
		"llama-mlp-bias": llamaMLPBias,
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			if err := testmodel.Write(dir, spec); err != nil {
				t.Fatal(err)
			}
			m := load(t, dir, Options{Backend: cpuBackend(t, 2, "f32"), BlockSize: 4})
			ids := testIDs(24, spec.Vocab)
			got, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			want := refForward(t, dir, ids)
			checkHidden(t, m, dir, ids)
			var worst, spread float64
			for p := range ids {
				var d, scale float64
				lo, hi := math.Inf(1), math.Inf(-1)
				for i := range want[p] {
					d = max(d, math.Abs(float64(got[p][i])-want[p][i]))
					scale = max(scale, math.Abs(want[p][i]))
					lo, hi = min(lo, want[p][i]), max(hi, want[p][i])
				}
				spread = max(spread, hi-lo)
				if d > 1e-4*scale {
					t.Errorf("position %d: max abs diff %.3g vs float64 reference (row max %.3g)", p, d, scale)
				}
				worst = max(worst, d)
			}
			if spread < 1 {
				t.Errorf("logits spread only %.3g: the random model is too flat to test anything", spread)
			}
			t.Logf("max abs diff vs float64 reference %.3g (logit spread %.3g)", worst, spread)
		})
	}
}

// checkHidden checks Sequence.Hidden against the float64 reference's final
// norm output, run in two calls (the second's rows attend over the
// first's cached tokens), and that it leaves the tokens in the cache.
func checkHidden(t *testing.T, m *Model, dir string, ids []int) {
	t.Helper()
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Hidden(ids[:len(ids)/2])
	if err != nil {
		t.Fatal(err)
	}
	more, err := s.Hidden(ids[len(ids)/2:])
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, more...)
	h := m.Config().HiddenSize
	if len(got) != len(ids)*h || s.Len() != len(ids) {
		t.Fatalf("Hidden: %d values and %d tokens cached, want %d and %d", len(got), s.Len(), len(ids)*h, len(ids))
	}
	want := refHidden(t, dir, ids)
	var worst float64
	for p := range ids {
		var d, scale float64
		for i, w := range want[p] {
			d = max(d, math.Abs(float64(got[p*h+i])-w))
			scale = max(scale, math.Abs(w))
		}
		if d > 1e-4*scale || scale == 0 {
			t.Errorf("hidden position %d: max abs diff %.3g vs float64 reference (row max %.3g)", p, d, scale)
		}
		worst = max(worst, d)
	}
	t.Logf("hidden: max abs diff vs float64 reference %.3g", worst)
}
