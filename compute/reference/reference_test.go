package reference

import (
	"math"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

func buf(b Backend, v ...float32) compute.Buffer {
	x := b.Alloc(len(v))
	b.Write(x, v)
	return x
}

func near(t *testing.T, what string, got []float32, want ...float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-6 {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
}

// The operations on values small enough to work out by hand.
func TestOps(t *testing.T) {
	var b Backend
	x := buf(b, 3, 4)
	b.RMSNorm(x, x, buf(b, 1, 2), 1, 0) // rms = sqrt(12.5)
	near(t, "RMSNorm", vals(x), 3/math.Sqrt(12.5), 8/math.Sqrt(12.5))

	w, err := b.Upload(tensor.Mat{DType: tensor.F32, Rows: 2, Cols: 2, F32: []float32{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	out := b.Alloc(2)
	b.MatMul(out, buf(b, 1, 1), 1, w)
	near(t, "MatMul", vals(out), 3, 7)
	b.Embed(out, w, []int{1})
	near(t, "Embed", vals(out), 3, 4)

	g := buf(b, 0, 1)
	b.SiLUMul(g, buf(b, 5, 2))
	near(t, "SiLUMul", vals(g), 0, 2/(1+math.Exp(-1)))

	// A quarter turn at position 1 maps (1, 0) to (0, 1).
	r := buf(b, 1, 0)
	b.RoPE(r, 1, 1, 2, 1, buf(b, 1, 0), buf(b, 0, 1))
	near(t, "RoPE", vals(r), 0, 1)
}

// Two positions, one head, keys without rotation (angle 0): the second
// query's output is the softmax-weighted mean of both values.
func TestAttention(t *testing.T) {
	var b Backend
	st := b.NewBlockStore(2, 2, false)
	k, _ := st.NewPart()
	v, _ := st.NewPart()
	st.Write(k, 0, buf(b, 1, 0, 0, 1), 2, 2)
	st.Write(v, 0, buf(b, 10, 0, 0, 10), 2, 2)
	a, err := b.NewAttention(compute.AttentionParams{Heads: 1, KVHeads: 1, HeadDim: 2, BlockSize: 2, MaxContext: 2})
	if err != nil {
		t.Fatal(err)
	}
	out := b.Alloc(4)
	ones := buf(b, 1, 1)
	zeros := buf(b, 0, 0)
	if err := a.Forward(out, buf(b, 2, 0, 2, 0), 2, 0, layer{k, v}, ones, zeros); err != nil {
		t.Fatal(err)
	}
	// Query 1 sees score 2/sqrt(2) for key 0 and 0 for key 1.
	w0 := 1 / (1 + math.Exp(-2/math.Sqrt2))
	near(t, "attention", vals(out), 10, 0, 10*w0, 10*(1-w0))
}

type layer struct{ k, v compute.Part }

func (l layer) Len() int { return 2 }

func (l layer) Part(head, block, kv int) compute.Part {
	if kv == 0 {
		return l.k
	}
	return l.v
}
