// Package reference is a compute.Backend written to be obviously correct
// rather than fast: plain loops over host memory, every sum accumulated in
// float64, attention straight from its definition. It is the oracle the
// other backends are checked against (the CPU's in the model's tests, a
// GPU's later); nothing in it is tuned, and it shares no code with them.
package reference

import (
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

func init() {
	compute.RegisterBackend("reference", func(compute.OpenOptions) (compute.Backend, error) { return Backend{}, nil })
}

// Backend is the reference compute.Backend.
type Backend struct{}

var (
	_ compute.Backend   = Backend{}
	_ compute.ArchOps   = Backend{}
	_ compute.SlidingKV = Backend{}
)

// SlidingKV marks that the reference's attention reads no block before a
// call's window.
func (Backend) SlidingKV() {}

// Name returns "reference".
func (Backend) Name() string { return "reference" }

// Err returns nil: the reference records no failure, since its operations
// without an error result cannot fail, and those with one (Upload,
// attention, its block store) return theirs. It holds no state a failure
// could put in doubt.
func (Backend) Err() error { return nil }

// Close does nothing: the backend holds no resources.
func (Backend) Close() error { return nil }

func vals(b compute.Buffer) []float32 { return compute.Host(b) }

// Alloc returns a zeroed buffer of n values.
func (Backend) Alloc(n int) compute.Buffer {
	return compute.Wrap(make([]float32, n))
}

// Write copies src into dst.
func (Backend) Write(dst compute.Buffer, src []float32) { copy(vals(dst), src) }

// Read copies src to dst.
func (Backend) Read(dst []float32, src compute.Buffer) { copy(dst, vals(src)) }

// weight keeps the host matrix and reads one element at a time.
type weight struct{ m tensor.Mat }

func (w weight) Shape() (rows, cols int) { return w.m.Rows, w.m.Cols }

// at returns element (r, c) widened to float64.
func (w weight) at(r, c int) float64 {
	i := r*w.m.Cols + c
	switch w.m.DType {
	case tensor.F32:
		return float64(w.m.F32[i])
	case tensor.F16:
		return float64(tensor.F16ToF32(w.m.U16[i]))
	default:
		return float64(tensor.BF16ToF32(w.m.U16[i]))
	}
}

// Upload keeps m; a quantized m it dequantizes (exactly, as
// tensor.DequantizeRow does) and keeps as float32, so the products over it
// are float64 sums over the dequantized weights.
func (Backend) Upload(m tensor.Mat) (compute.Weight, error) {
	if m.DType.Quantized() && m.Rows > 0 && m.Cols > 0 {
		rb, ok := m.DType.RowBytes(m.Cols)
		if !ok || len(m.Q) < m.Rows*rb {
			return nil, fmt.Errorf("reference: %v weight of %dx%d from %d bytes", m.DType, m.Rows, m.Cols, len(m.Q))
		}
		f := make([]float32, m.Rows*m.Cols)
		if err := tensor.DequantizeRow(f, m.DType, m.Q); err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		return weight{tensor.Mat{DType: tensor.F32, Rows: m.Rows, Cols: m.Cols, F32: f}}, nil
	}
	if m.DType.Size() == 0 || m.Rows <= 0 || m.Cols <= 0 {
		return nil, fmt.Errorf("reference: weight %v %dx%d", m.DType, m.Rows, m.Cols)
	}
	return weight{m}, nil
}

// Embed copies row ids[i] of table into row i of out.
func (Backend) Embed(out compute.Buffer, table compute.Weight, ids []int) {
	w, o := table.(weight), vals(out)
	for i, id := range ids {
		for c := 0; c < w.m.Cols; c++ {
			o[i*w.m.Cols+c] = float32(w.at(id, c))
		}
	}
}

// MatMul sets out[r][o] = sum_c x[r][c] * w[o][c], in float64.
func (Backend) MatMul(out, x compute.Buffer, n int, w compute.Weight) {
	wt, o, xs := w.(weight), vals(out), vals(x)
	rows, cols := wt.m.Rows, wt.m.Cols
	for r := 0; r < n; r++ {
		for j := 0; j < rows; j++ {
			var s float64
			for c := 0; c < cols; c++ {
				s += float64(xs[r*cols+c]) * wt.at(j, c)
			}
			o[r*rows+j] = float32(s)
		}
	}
}

// RMSNorm sets out = x / sqrt(mean(x^2) + eps) * w, row by row.
func (Backend) RMSNorm(out, x, w compute.Buffer, rows int, eps float32) {
	o, xs, ws := vals(out), vals(x), vals(w)
	d := len(ws)
	for r := 0; r < rows; r++ {
		row := xs[r*d : (r+1)*d]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(d)+float64(eps))
		for i := range row {
			o[r*d+i] = float32(float64(row[i]) * inv * float64(ws[i]))
		}
	}
}

// AddRows adds bias to each row of x.
func (Backend) AddRows(x, bias compute.Buffer, rows int) {
	xs, bs := vals(x), vals(bias)
	d := len(bs)
	for r := 0; r < rows; r++ {
		for i := range bs {
			xs[r*d+i] = float32(float64(xs[r*d+i]) + float64(bs[i]))
		}
	}
}

// Add adds y to x.
func (Backend) Add(x, y compute.Buffer) {
	xs, ys := vals(x), vals(y)
	for i := range xs {
		xs[i] = float32(float64(xs[i]) + float64(ys[i]))
	}
}

// SiLUMul sets gate = gate * sigmoid(gate) * up.
func (Backend) SiLUMul(gate, up compute.Buffer) {
	g, u := vals(gate), vals(up)
	for i := range g {
		v := float64(g[i])
		g[i] = float32(v / (1 + math.Exp(-v)) * float64(u[i]))
	}
}

// Scale multiplies x by s.
func (Backend) Scale(x compute.Buffer, s float32) {
	xs := vals(x)
	for i := range xs {
		xs[i] = float32(float64(xs[i]) * float64(s))
	}
}

// GELUTanhMul sets gate = gelu_tanh(gate) * up, from GELU's tanh
// approximation's definition.
func (Backend) GELUTanhMul(gate, up compute.Buffer) {
	g, u := vals(gate), vals(up)
	for i := range g {
		x := float64(g[i])
		g[i] = float32(0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * float64(u[i]))
	}
}

// Softcap sets x = c*tanh(x/c).
func (Backend) Softcap(x compute.Buffer, c float32) {
	xs := vals(x)
	for i := range xs {
		xs[i] = float32(float64(c) * math.Tanh(float64(xs[i])/float64(c)))
	}
}

// rotate applies RoPE at one position to a head vector, rotate-half
// pairing: (x[i], x[i+d/2]) turns by the angle of frequency i.
func rotate(dst []float64, x []float32, cos, sin []float32) {
	half := len(x) / 2
	for i := 0; i < half; i++ {
		c, s := float64(cos[i]), float64(sin[i])
		a, b := float64(x[i]), float64(x[i+half])
		dst[i] = a*c - b*s
		dst[i+half] = b*c + a*s
	}
}

// RoPE rotates every head of every row at its position.
func (Backend) RoPE(x compute.Buffer, rows, heads, d, start int, cos, sin compute.Buffer) {
	xs, cs, sn := vals(x), vals(cos), vals(sin)
	half := d / 2
	tmp := make([]float64, d)
	for r := 0; r < rows; r++ {
		p := start + r
		for h := 0; h < heads; h++ {
			v := xs[(r*heads+h)*d : (r*heads+h+1)*d]
			rotate(tmp, v, cs[p*half:(p+1)*half], sn[p*half:(p+1)*half])
			for i := range v {
				v[i] = float32(tmp[i])
			}
		}
	}
}

// attention is the definition of causal grouped-query attention.
type attention struct{ p compute.AttentionParams }

// NewAttention returns attention with the geometry p.
func (Backend) NewAttention(p compute.AttentionParams) (compute.Attention, error) {
	if p.Heads <= 0 || p.KVHeads <= 0 || p.Heads%p.KVHeads != 0 || p.HeadDim <= 0 || p.HeadDim%2 != 0 || p.BlockSize <= 0 || p.Window < 0 || p.Scale < 0 || p.Softcap < 0 {
		return nil, fmt.Errorf("reference: attention %+v", p)
	}
	return &attention{p: p}, nil
}

// Forward computes, for each query and head, softmax(q·rope(k)·scale)
// over the positions it sees (scale 1/sqrt(d) unless the params set one,
// each score softcapped first where they set Softcap), times the values,
// all in float64.
func (a *attention) Forward(out, q compute.Buffer, n, start int, kv compute.KVLayer, cos, sin compute.Buffer) error {
	p := a.p
	d, half, group := p.HeadDim, p.HeadDim/2, p.Heads/p.KVHeads
	total := start + n
	if kv.Len() < total {
		return fmt.Errorf("reference: the cache holds %d tokens, queries reach position %d", kv.Len(), total-1)
	}
	cs, sn := vals(cos), vals(sin)
	// Every key rotated at its position, every value, as float64 rows.
	keys := make([][]float64, p.KVHeads*total)
	values := make([][]float64, p.KVHeads*total)
	block := make([]float32, p.BlockSize*d)
	// Keys before the first query's window are never read: a cache may
	// have released their blocks (compute.SlidingKV).
	lo := 0
	if p.Window > 0 {
		lo = max(0, start-p.Window+1) / p.BlockSize
	}
	for g := 0; g < p.KVHeads; g++ {
		for b := lo; b*p.BlockSize < total; b++ {
			for side := 0; side < 2; side++ {
				if err := readPart(block, kv.Part(g, b, side)); err != nil {
					return err
				}
				for r := 0; r < p.BlockSize && b*p.BlockSize+r < total; r++ {
					pos := b*p.BlockSize + r
					row := block[r*d : (r+1)*d]
					v := make([]float64, d)
					if side == 0 {
						rotate(v, row, cs[pos*half:(pos+1)*half], sn[pos*half:(pos+1)*half])
						keys[g*total+pos] = v
						continue
					}
					for i := range row {
						v[i] = float64(row[i])
					}
					values[g*total+pos] = v
				}
			}
		}
	}
	o, qs := vals(out), vals(q)
	scale := 1 / math.Sqrt(float64(d))
	if p.Scale != 0 {
		scale = p.Scale
	}
	for i := 0; i < n; i++ {
		qp := start + i
		first := 0
		if p.Window > 0 {
			first = max(0, qp-p.Window+1)
		}
		for h := 0; h < p.Heads; h++ {
			g := h / group
			qv := qs[(i*p.Heads+h)*d : (i*p.Heads+h+1)*d]
			scores := make([]float64, qp+1-first)
			top := math.Inf(-1)
			for pos := first; pos <= qp; pos++ {
				var s float64
				for j := range qv {
					s += float64(qv[j]) * keys[g*total+pos][j]
				}
				s *= scale
				if p.Softcap != 0 {
					s = p.Softcap * math.Tanh(s/p.Softcap)
				}
				scores[pos-first] = s
				top = max(top, scores[pos-first])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - top)
				sum += scores[j]
			}
			acc := make([]float64, d)
			for pos := first; pos <= qp; pos++ {
				w := scores[pos-first] / sum
				for j := range acc {
					acc[j] += w * values[g*total+pos][j]
				}
			}
			for j := range acc {
				o[(i*p.Heads+h)*d+j] = float32(acc[j])
			}
		}
	}
	return nil
}
