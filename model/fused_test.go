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

func (f *fusing) NormQKV(q, k, v, x compute.Buffer, pos []int, p *compute.QKV) bool {
	n := len(pos)
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
	// Each run of consecutive positions (a sequence's rows) as the
	// forward pass rotates it.
	qd := p.Heads * p.HeadDim
	for i := 0; i < n; {
		r := 1
		for i+r < n && pos[i+r] == pos[i]+r {
			r++
		}
		f.RoPE(q.Slice(i*qd, (i+r)*qd), r, p.Heads, p.HeadDim, pos[i], p.Cos, p.Sin)
		i += r
	}
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

// A step of several sequences hands the fused attention input every
// row's own position: batched decode steps through the fused steps give
// the reference backend's batched logits bit for bit.
func TestFusedStepsBatched(t *testing.T) {
	dir := tinyModels(t)["qwen2"]
	var logits [2][][]float32
	f := &fusing{Backend: refbackend.Backend{}, maxRows: 4}
	for i, b := range []compute.Backend{refbackend.Backend{}, f} {
		m := load(t, dir, Options{Backend: b, BlockSize: 4})
		bt, err := m.NewBatch(16)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []*Sequence
		for range 3 {
			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			seqs = append(seqs, s)
		}
		vocab := m.Config().VocabSize
		for st := range 6 {
			var items []BatchItem
			for j, s := range seqs {
				ids := []int{(st*7 + j*13 + 1) % vocab}
				if st == 0 {
					ids = testIDs(2+3*j, vocab) // prompts of 2, 5 and 8 tokens
				}
				items = append(items, BatchItem{Seq: s, IDs: ids})
			}
			if err := bt.Forward(items); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				logits[i] = append(logits[i], append([]float32(nil), it.Logits...))
			}
		}
	}
	for p := range logits[0] {
		for j := range logits[0][p] {
			if logits[1][p][j] != logits[0][p][j] {
				t.Fatalf("row %d, logit %d: %v with fused steps, %v without", p, j, logits[1][p][j], logits[0][p][j])
			}
		}
	}
	if f.qkv == 0 || f.normMatMul == 0 {
		t.Errorf("the batched decode steps ran %d NormQKV and %d NormMatMul", f.qkv, f.normMatMul)
	}
}
