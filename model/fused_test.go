package model

import (
	"math"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
)

// fusing is a backend with compute.Fused whose fused steps run the
// separate operations of the backend it wraps, in the order the forward
// pass runs them, for steps of up to maxRows rows; it declines larger
// ones. It counts the steps it ran.
type fusing struct {
	compute.Backend
	maxRows                            int
	qkv, swiglu, matMulAdd, normMatMul int
}

func (f *fusing) NormQKV(q, k, v, x compute.Buffer, n, start int, p *compute.QKV) bool {
	if n > f.maxRows {
		return false
	}
	f.qkv++
	xn := f.Alloc(n * p.Norm.Len)
	f.RMSNorm(xn, x, p.Norm, n, p.Eps)
	f.MatMul(q, xn, n, p.Q)
	f.MatMul(k, xn, n, p.K)
	f.MatMul(v, xn, n, p.V)
	if p.QBias.Len > 0 {
		f.AddRows(q, p.QBias, n)
		f.AddRows(k, p.KBias, n)
		f.AddRows(v, p.VBias, n)
	}
	if p.QNorm.Len > 0 {
		f.RMSNorm(q, q, p.QNorm, n*p.Heads, p.Eps)
		f.RMSNorm(k, k, p.KNorm, n*p.KVHeads, p.Eps)
	}
	f.RoPE(q, n, p.Heads, p.HeadDim, start, p.Cos, p.Sin)
	return true
}

func (f *fusing) NormSwiGLU(gate, x compute.Buffer, n int, p *compute.SwiGLU) bool {
	if n > f.maxRows {
		return false
	}
	f.swiglu++
	rows, _ := p.Up.Shape()
	xn, up := f.Alloc(n*p.Norm.Len), f.Alloc(n*rows)
	f.RMSNorm(xn, x, p.Norm, n, p.Eps)
	f.MatMul(gate, xn, n, p.Gate)
	f.MatMul(up, xn, n, p.Up)
	if p.GateBias.Len > 0 {
		f.AddRows(gate, p.GateBias, n)
		f.AddRows(up, p.UpBias, n)
	}
	f.SiLUMul(gate, up)
	return true
}

func (f *fusing) MatMulAdd(acc, x compute.Buffer, n int, w compute.Weight, bias compute.Buffer) bool {
	if n > f.maxRows {
		return false
	}
	f.matMulAdd++
	rows, _ := w.Shape()
	tmp := f.Alloc(n * rows)
	f.MatMul(tmp, x, n, w)
	if bias.Len > 0 {
		f.AddRows(tmp, bias, n)
	}
	f.Add(acc, tmp)
	return true
}

func (f *fusing) NormMatMul(out, x, norm compute.Buffer, eps float32, n int, w compute.Weight) bool {
	if n > f.maxRows {
		return false
	}
	f.normMatMul++
	xn := f.Alloc(x.Len)
	f.RMSNorm(xn, x, norm, n, eps)
	f.MatMul(out, xn, n, w)
	return true
}

// A backend's fused steps replace exactly the operations they stand for:
// with fused steps that run those operations, the logits are the
// reference backend's bit for bit, for prompts the steps decline and
// decode steps they run, on every architecture (Qwen2's biases, Qwen3's
// per-head norms, Llama's rope scaling); and the forward pass uses each
// step once per layer and decode step, and the classifier's once per
// decode step.
func TestFusedStepsReplaceTheirOperations(t *testing.T) {
	for name, dir := range tinyModels(t) {
		t.Run(name, func(t *testing.T) {
			refM := load(t, dir, Options{Backend: refbackend.Backend{}, BlockSize: 4})
			f := &fusing{Backend: refbackend.Backend{}, maxRows: 4}
			fusedM := load(t, dir, Options{Backend: f, BlockSize: 4})
			ids := testIDs(11, refM.Config().VocabSize)
			want, err := refM.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fusedM.Logits(ids) // 11 rows: declined
			if err != nil {
				t.Fatal(err)
			}
			if f.qkv+f.swiglu+f.matMulAdd+f.normMatMul != 0 {
				t.Fatalf("fused steps ran for a prompt of 11 rows: %+v", f)
			}
			got = append(got, decode(t, fusedM, ids)...)
			want = append(want, decode(t, refM, ids)...)
			for p := range want {
				for i := range want[p] {
					if got[p][i] != want[p][i] && !(math.IsNaN(float64(got[p][i])) && math.IsNaN(float64(want[p][i]))) {
						t.Fatalf("row %d, logit %d: %v with fused steps, %v without", p, i, got[p][i], want[p][i])
					}
				}
			}
			layers := refM.Config().NumLayers
			if f.qkv != len(ids)*layers || f.swiglu != len(ids)*layers || f.matMulAdd != 2*len(ids)*layers || f.normMatMul != len(ids) {
				t.Errorf("%d decode steps of %d layers ran %d NormQKV, %d NormSwiGLU, %d MatMulAdd and %d NormMatMul", len(ids), layers, f.qkv, f.swiglu, f.matMulAdd, f.normMatMul)
			}
		})
	}
}
