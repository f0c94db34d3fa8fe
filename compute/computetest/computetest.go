// Package computetest checks a compute.Backend against the contract of
// package compute, as testing/fstest checks an fs.FS: every backend's
// package runs Test from a short test of its own (the CPU, the reference
// and the emulated CUDA backend), and so does a wrapper of a backend.
//
// Test runs, on small shapes (seconds even on the CUDA emulator):
//
//   - the operations (Write/Read, Alloc, Embed, MatMul over f32 and bf16
//     weights, RMSNorm, AddRows, Add, SiLUMul, RoPE), against float64
//     loops of its own;
//   - attention over every block format: hot float32 and bf16 parts, and
//     for each registered codec whose blocks the store says it reads
//     (compute.EncodedAttention) parts encoded on the host, and by the
//     store itself where it encodes them (compute.PartEncoder, all at once
//     through compute.PartsEncoder where the store has it), with a window,
//     against float64 attention over the values the parts decode to;
//   - the optional capabilities: the backend and its store must implement
//     exactly those Config lists (a wrapper that hides one is caught), and
//     each present one is run against the float64 results (ArchOps,
//     Greedy against pick's ArgMax, Draw against pick's Draw and ArgMax,
//     BatchAttention, the four Fused steps
//     over f32 and bf16 weights where they take the call, SlidingKV:
//     windowed attention with the blocks before the window released and
//     their parts nil, hot and of every codec the store reads);
//   - every part SetEncoded took reads back (Read) as the codec decodes
//     it and says it is encoded, a part the store holds hot-decoded
//     (compute.HotDecoded) included;
//   - failures: a fresh backend's Err is nil and stays nil through the
//     checks; a corrupt encoded block fails through SetEncoded, Forward or
//     Err, never as a result, and Err is then sticky; geometry a backend
//     cannot run is an error from NewAttention, not a panic.
package computetest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/tensor"
)

// A Capability names one optional interface of package compute that a
// backend, or the block stores it makes, may implement.
type Capability string

// The capabilities Test knows: the backend's, then its block stores'.
const (
	Preparer         Capability = "Preparer"
	Describer        Capability = "Describer"
	ArchOps          Capability = "ArchOps"
	SlidingKV        Capability = "SlidingKV"
	Fused            Capability = "Fused"
	Greedy           Capability = "Greedy"
	Draw             Capability = "Draw"
	BatchAttention   Capability = "BatchAttention"
	EncodedAttention Capability = "EncodedAttention" // of the block store
	PartEncoder      Capability = "PartEncoder"      // of the block store
	PartsEncoder     Capability = "PartsEncoder"     // of the block store
)

// Capabilities returns the capabilities b and a block store it makes
// implement, in the order of the constants.
func Capabilities(b compute.Backend) []Capability {
	var out []Capability
	add := func(c Capability, ok bool) {
		if ok {
			out = append(out, c)
		}
	}
	_, ok := b.(compute.Preparer)
	add(Preparer, ok)
	_, ok = b.(compute.Describer)
	add(Describer, ok)
	_, ok = b.(compute.ArchOps)
	add(ArchOps, ok)
	_, ok = b.(compute.SlidingKV)
	add(SlidingKV, ok)
	_, ok = b.(compute.Fused)
	add(Fused, ok)
	_, ok = b.(compute.Greedy)
	add(Greedy, ok)
	_, ok = b.(compute.Draw)
	add(Draw, ok)
	_, ok = b.(compute.BatchAttention)
	add(BatchAttention, ok)
	st := b.NewBlockStore(blockSize, headDim, false)
	_, ok = st.(compute.EncodedAttention)
	add(EncodedAttention, ok)
	_, ok = st.(compute.PartEncoder)
	add(PartEncoder, ok)
	_, ok = st.(compute.PartsEncoder)
	add(PartsEncoder, ok)
	return out
}

// Config describes the backend under test.
type Config struct {
	// Open returns a new backend; Test opens several and closes each.
	Open func() (compute.Backend, error)
	// Capabilities are the optional interfaces the backend and its block
	// stores implement: Test fails on one of them missing (a wrapper that
	// hides it) and on one present but not listed.
	Capabilities []Capability
	// Tol is the largest difference allowed from the float64 results,
	// relative to the largest magnitude of the expected values; 0 means
	// 1e-4.
	Tol float64
}

// The geometry of the checks: small, so that an emulated device runs
// them in seconds.
const (
	blockSize = 8
	headDim   = 32
	heads     = 4
	kvHeads   = 2
	tokens    = 20 // two full blocks and a partial one
)

// Test runs the suite on backends c.Open returns and reports every
// failure found, joined, or nil.
func Test(c Config) error {
	if c.Tol == 0 {
		c.Tol = 1e-4
	}
	s := &suite{c: c}
	b, err := c.Open()
	if err != nil {
		return fmt.Errorf("computetest: open: %w", err)
	}
	s.checkCapabilities(b)
	if d, ok := b.(compute.Describer); ok && d.Describe() == "" {
		s.errorf("Describer.Describe: empty")
	}
	s.run(b, "operations", s.checkOps)
	s.run(b, "attention", s.checkAttention)
	s.run(b, "capabilities", s.checkOptional)
	if err := b.Err(); err != nil {
		s.errorf("Err after the checks that succeed: %v", err)
	}
	b.Close()
	// The failures poison a backend (Err is sticky): fresh ones.
	if b, err = c.Open(); err != nil {
		return fmt.Errorf("computetest: open: %w", err)
	}
	s.run(b, "failures", s.checkCorrupt)
	b.Close()
	if b, err = c.Open(); err != nil {
		return fmt.Errorf("computetest: open: %w", err)
	}
	s.run(b, "geometry", s.checkGeometry)
	b.Close()
	return errors.Join(s.errs...)
}

type suite struct {
	c    Config
	name string // the check running, for errors
	errs []error
}

func (s *suite) errorf(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf("%s: "+format, append([]any{s.name}, args...)...))
}

// run runs one group of checks, turning a panic into a failure.
func (s *suite) run(b compute.Backend, name string, f func(compute.Backend)) {
	s.name = name
	defer func() {
		if r := recover(); r != nil {
			s.errorf("panic: %v", r)
		}
	}()
	f(b)
}

// checkCapabilities compares what b implements with what c lists.
func (s *suite) checkCapabilities(b compute.Backend) {
	s.name = "capabilities"
	have := Capabilities(b)
	for _, want := range s.c.Capabilities {
		if !slices.Contains(have, want) {
			s.errorf("%s does not implement compute.%s, which it should (a wrapper hiding it?); it has %v", b.Name(), want, have)
		}
	}
	for _, h := range have {
		if !slices.Contains(s.c.Capabilities, h) {
			s.errorf("%s implements compute.%s, which Config.Capabilities does not list", b.Name(), h)
		}
	}
}

// compare reports got against want (float64) within the tolerance,
// relative to the largest magnitude of want.
func (s *suite) compare(what string, got []float32, want []float64) {
	if len(got) != len(want) {
		s.errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	scale = max(scale, 1e-30)
	worst, at := 0.0, -1
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		if d > worst {
			worst, at = d, i
		}
	}
	if worst > s.c.Tol*scale {
		s.errorf("%s: largest difference %.3g (at %d: %g, want %g), %.2g of the largest value %.3g, over the tolerance %.2g", what, worst, at, got[at], want[at], worst/scale, scale, s.c.Tol)
	}
}

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func upload(b compute.Backend, x []float32) compute.Buffer {
	buf := b.Alloc(len(x))
	b.Write(buf, x)
	return buf
}

func read(b compute.Backend, buf compute.Buffer) []float32 {
	x := make([]float32, buf.Len)
	b.Read(x, buf)
	return x
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// mat returns a rows x cols weight of dtype dt holding x (rounded to bf16
// for a bf16 weight) and the values it holds.
func mat(dt tensor.DType, rows, cols int, x []float32) (tensor.Mat, []float64) {
	m := tensor.Mat{DType: dt, Rows: rows, Cols: cols}
	vals := make([]float64, len(x))
	switch dt {
	case tensor.BF16:
		m.U16 = make([]uint16, len(x))
		for i, v := range x {
			m.U16[i] = tensor.F32ToBF16(v)
			vals[i] = float64(tensor.BF16ToF32(m.U16[i]))
		}
	default:
		m.F32 = x
		vals = f64(x)
	}
	return m, vals
}

// matMul is out = x w^T in float64: n rows of x (cols) times w (rows x cols).
func matMul(x []float64, n int, w []float64, rows, cols int) []float64 {
	out := make([]float64, n*rows)
	for i := range n {
		for r := range rows {
			var sum float64
			for k := range cols {
				sum += x[i*cols+k] * w[r*cols+k]
			}
			out[i*rows+r] = sum
		}
	}
	return out
}

func rmsNorm(x []float64, w []float64, rows int, eps float64) []float64 {
	cols := len(w)
	out := make([]float64, len(x))
	for i := range rows {
		row := x[i*cols : (i+1)*cols]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(cols)+eps)
		for j, v := range row {
			out[i*cols+j] = v * inv * w[j]
		}
	}
	return out
}

// rope rotates (rotate-half pairing) each of the heads vectors of width d
// in each row of x, row i at position start+i.
func rope(x []float64, rows, nh, d, start int, cos, sin []float32) {
	h := d / 2
	for i := range rows {
		pos := start + i
		for hd := range nh {
			v := x[(i*nh+hd)*d:][:d]
			for j := range h {
				c, s := float64(cos[pos*h+j]), float64(sin[pos*h+j])
				a, b := v[j], v[j+h]
				v[j], v[j+h] = a*c-b*s, b*c+a*s
			}
		}
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// checkOps runs the base operations against float64 loops.
func (s *suite) checkOps(b compute.Backend) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols, out = 3, 48, 24
	x, y, w := randFloats(r, rows*cols), randFloats(r, rows*cols), randFloats(r, cols)

	// Write, Read and Alloc.
	if z := read(b, b.Alloc(17)); slices.ContainsFunc(z, func(v float32) bool { return v != 0 }) {
		s.errorf("Alloc: a buffer not zeroed: %v", z)
	}
	s.compare("Write then Read", read(b, upload(b, x)), f64(x))
	s.compare("Read of a slice", read(b, upload(b, x).Slice(5, 29)), f64(x[5:29]))

	bx := upload(b, x)
	b.Add(bx, upload(b, y))
	want := f64(x)
	for i := range want {
		want[i] += float64(y[i])
	}
	s.compare("Add", read(b, bx), want)

	bx = upload(b, x)
	b.Add(bx.Slice(cols, 2*cols), upload(b, y).Slice(5, 5+cols))
	want = f64(x)
	for i := range cols {
		want[cols+i] += float64(y[5+i])
	}
	s.compare("Add on slices", read(b, bx), want)

	bx = upload(b, x)
	b.SiLUMul(bx, upload(b, y))
	for i := range want {
		want[i] = silu(float64(x[i])) * float64(y[i])
	}
	s.compare("SiLUMul", read(b, bx), want)

	bx = upload(b, x)
	b.AddRows(bx, upload(b, w), rows)
	for i := range want {
		want[i] = float64(x[i]) + float64(w[i%cols])
	}
	s.compare("AddRows", read(b, bx), want)

	bx = upload(b, x)
	bo := b.Alloc(len(x))
	b.RMSNorm(bo, bx, upload(b, w), rows, 1e-5)
	want = rmsNorm(f64(x), f64(w), rows, 1e-5)
	s.compare("RMSNorm", read(b, bo), want)
	b.RMSNorm(bx, bx, upload(b, w), rows, 1e-5)
	s.compare("RMSNorm in place", read(b, bx), want)

	const nh, d, start = 3, 16, 4
	cos, sin := randFloats(r, (start+rows)*d/2), randFloats(r, (start+rows)*d/2)
	bx = upload(b, x)
	b.RoPE(bx, rows, nh, d, start, upload(b, cos), upload(b, sin))
	want = f64(x)
	rope(want, rows, nh, d, start, cos, sin)
	s.compare("RoPE", read(b, bx), want)

	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		m, vals := mat(dt, out, cols, randFloats(r, out*cols))
		wt, err := b.Upload(m)
		if err != nil {
			s.errorf("Upload of a %s weight: %v", dt, err)
			continue
		}
		if p, ok := b.(compute.Preparer); ok {
			p.Prepare(wt)
		}
		// One row (a decode step), a few, and more than a GPU's
		// matrix-vector kernels take (a prefill chunk).
		xs := slices.Concat(x, y, x, y)
		for _, n := range []int{1, rows, 4 * rows} {
			bo := b.Alloc(n * out)
			b.MatMul(bo, upload(b, xs[:n*cols]), n, wt)
			s.compare(fmt.Sprintf("MatMul, %s weight, %d rows", dt, n), read(b, bo), matMul(f64(xs[:n*cols]), n, vals, out, cols))
		}
		ids := []int{3, 0, out - 1, 3}
		be := b.Alloc(len(ids) * cols)
		b.Embed(be, wt, ids)
		want := make([]float64, 0, len(ids)*cols)
		for _, id := range ids {
			want = append(want, vals[id*cols:(id+1)*cols]...)
		}
		s.compare(fmt.Sprintf("Embed, %s table", dt), read(b, be), want)
	}
}

// checkOptional runs the optional operations the backend has.
func (s *suite) checkOptional(b compute.Backend) {
	r := rand.New(rand.NewPCG(3, 4))
	x, y := randFloats(r, 96), randFloats(r, 96)
	want := make([]float64, len(x))
	if a, ok := b.(compute.ArchOps); ok {
		bx := upload(b, x)
		a.Scale(bx, 0.75)
		for i, v := range x {
			want[i] = float64(v) * 0.75
		}
		s.compare("ArchOps.Scale", read(b, bx), want)
		bx = upload(b, x)
		a.GELUTanhMul(bx, upload(b, y))
		for i, v := range x {
			g := float64(v)
			want[i] = 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * float64(y[i])
		}
		s.compare("ArchOps.GELUTanhMul", read(b, bx), want)
		bx = upload(b, x)
		a.Softcap(bx, 1.5)
		for i, v := range x {
			want[i] = 1.5 * math.Tanh(float64(v)/1.5)
		}
		s.compare("ArchOps.Softcap", read(b, bx), want)
	}
	if g, ok := b.(compute.Greedy); ok {
		const cols = 24
		rows := [][]float32{randFloats(r, cols), make([]float32, cols), randFloats(r, cols), randFloats(r, cols)}
		rows[1][5], rows[1][9] = 2, 2 // ties: the first
		rows[2][3], rows[2][7] = float32(math.NaN()), 1e9
		for i := range rows[3] {
			rows[3][i] = float32(math.NaN())
		}
		rows[3][4] = float32(math.Inf(-1))
		host := slices.Concat(rows...)
		ids, bad := make([]int, len(rows)), make([]int, len(rows))
		g.ArgMax(ids, bad, upload(b, host), cols)
		for i, row := range rows {
			if ids[i] != pick.ArgMax(row) || bad[i] != pick.FirstNonFinite(row) {
				s.errorf("Greedy.ArgMax row %d: id %d, first non-finite %d; want %d, %d (pick)", i, ids[i], bad[i], pick.ArgMax(row), pick.FirstNonFinite(row))
			}
		}
	}
	if d, ok := b.(compute.Draw); ok {
		const cols = 300
		rows := [][]float32{randFloats(r, cols), randFloats(r, cols), randFloats(r, cols), make([]float32, cols), randFloats(r, cols), randFloats(r, cols)}
		rows[2][7] = float32(math.Inf(-1)) // masked
		draws := []compute.DrawRow{{U: 0.3, Temperature: 1}, {U: 0.9, Temperature: 0.5, MinP: 0.1}, {U: 0.5, Temperature: 2}, {U: 0.7},
			{U: 0.6, Temperature: 0.8, TopK: 20, TopP: 0.9, MinP: 0.01}, {U: 0.2, Temperature: 1.2, TopP: 0.8}}
		host := slices.Concat(rows...)
		ids, bad := make([]int, len(rows)), make([]int, len(rows))
		d.Draw(ids, bad, upload(b, host), cols, draws)
		for i, row := range rows {
			want := pick.ArgMax(row)
			if dr := draws[i]; dr.Temperature > 0 {
				var sc pick.Scratch
				f := pick.Filter{TopK: int(dr.TopK), TopP: dr.TopP, MinP: dr.MinP}
				want = pick.DrawFiltered(slices.Clone(row), dr.Temperature, f, dr.U, &sc)
			}
			if ids[i] != want || bad[i] != pick.FirstNonFinite(row) {
				s.errorf("Draw row %d: id %d, first non-finite %d; want %d, %d (pick)", i, ids[i], bad[i], want, pick.FirstNonFinite(row))
			}
		}
	}
	if f, ok := b.(compute.Fused); ok {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			s.checkFused(b, f, dt, r)
			s.checkFusedLayer(b, f, dt, r)
		}
	}
}

// checkFused runs Fused's MatMulAdd and NormMatMul over weights of dtype
// dt against float64.
func (s *suite) checkFused(b compute.Backend, f compute.Fused, dt tensor.DType, r *rand.Rand) {
	const n, rows, cols = 2, 16, 32
	m, vals := mat(dt, rows, cols, randFloats(r, rows*cols))
	wt, err := b.Upload(m)
	if err != nil {
		s.errorf("Upload: %v", err)
		return
	}
	xs, acc, bias := randFloats(r, n*cols), randFloats(r, n*rows), randFloats(r, rows)
	bacc := upload(b, acc)
	if f.MatMulAdd(bacc, upload(b, xs), n, wt, upload(b, bias)) {
		want := matMul(f64(xs), n, vals, rows, cols)
		for i := range want {
			want[i] += float64(acc[i]) + float64(bias[i%rows])
		}
		s.compare(fmt.Sprintf("Fused.MatMulAdd (%s weights)", dt), read(b, bacc), want)
	}
	norm := randFloats(r, cols)
	bo := b.Alloc(n * rows)
	if f.NormMatMul(bo, upload(b, xs), upload(b, norm), 1e-5, n, wt) {
		s.compare(fmt.Sprintf("Fused.NormMatMul (%s weights)", dt), read(b, bo), matMul(rmsNorm(f64(xs), f64(norm), n, 1e-5), n, vals, rows, cols))
	}
}

// checkFusedLayer runs Fused's NormSwiGLU and NormQKV (with and without
// per-head norms, at positions that are not consecutive) over weights of
// dtype dt against float64.
func (s *suite) checkFusedLayer(b compute.Backend, f compute.Fused, dt tensor.DType, r *rand.Rand) {
	const n, cols, ffn, hd, nh, nkv = 2, 32, 24, 8, 4, 2
	up := func(rows int) (compute.Weight, []float64) {
		m, vals := mat(dt, rows, cols, randFloats(r, rows*cols))
		w, err := b.Upload(m)
		if err != nil {
			s.errorf("Upload: %v", err)
		}
		return w, vals
	}
	x, norm := randFloats(r, n*cols), randFloats(r, cols)
	xn := rmsNorm(f64(x), f64(norm), n, 1e-5)
	addBias := func(y []float64, bias []float32) []float64 {
		for i := range y {
			y[i] += float64(bias[i%len(bias)])
		}
		return y
	}

	wg, vg := up(ffn)
	wu, vu := up(ffn)
	bg, bu := randFloats(r, ffn), randFloats(r, ffn)
	gate := b.Alloc(n * ffn)
	if f.NormSwiGLU(gate, upload(b, x), n, &compute.SwiGLU{Norm: upload(b, norm), Eps: 1e-5, Gate: wg, Up: wu, GateBias: upload(b, bg), UpBias: upload(b, bu)}) {
		g, u := addBias(matMul(xn, n, vg, ffn, cols), bg), addBias(matMul(xn, n, vu, ffn, cols), bu)
		for i := range g {
			g[i] = silu(g[i]) * u[i]
		}
		s.compare(fmt.Sprintf("Fused.NormSwiGLU (%s weights)", dt), read(b, gate), g)
	}

	wq, vq := up(nh * hd)
	wk, vk := up(nkv * hd)
	wv, vv := up(nkv * hd)
	bq := randFloats(r, nh*hd)
	pos := []int{5, 2}
	cos, sin := randFloats(r, 8*hd/2), randFloats(r, 8*hd/2)
	for _, headNorms := range []bool{false, true} {
		p := &compute.QKV{Norm: upload(b, norm), Eps: 1e-5, Q: wq, K: wk, V: wv, QBias: upload(b, bq),
			Heads: nh, KVHeads: nkv, HeadDim: hd, Cos: upload(b, cos), Sin: upload(b, sin)}
		var qn, kn []float32
		if headNorms {
			qn, kn = randFloats(r, hd), randFloats(r, hd)
			p.QNorm, p.KNorm = upload(b, qn), upload(b, kn)
		}
		q, k, v := b.Alloc(n*nh*hd), b.Alloc(n*nkv*hd), b.Alloc(n*nkv*hd)
		if !f.NormQKV(q, k, v, upload(b, x), pos, p) {
			continue
		}
		wantQ := addBias(matMul(xn, n, vq, nh*hd, cols), bq)
		wantK, wantV := matMul(xn, n, vk, nkv*hd, cols), matMul(xn, n, vv, nkv*hd, cols)
		if headNorms {
			wantQ = rmsNorm(wantQ, f64(qn), n*nh, 1e-5)
			wantK = rmsNorm(wantK, f64(kn), n*nkv, 1e-5)
		}
		for i, at := range pos {
			rope(wantQ[i*nh*hd:(i+1)*nh*hd], 1, nh, hd, at, cos, sin)
		}
		what := fmt.Sprintf("Fused.NormQKV (%s weights, per-head norms %v)", dt, headNorms)
		s.compare(what+": q", read(b, q), wantQ)
		s.compare(what+": k", read(b, k), wantK)
		s.compare(what+": v", read(b, v), wantV)
	}
}

// kvLayer is a sequence's layer as attention reads it: parts[block][head]
// keys and values.
type kvLayer struct {
	parts [][kvHeads][2]compute.Part
	n     int
}

func (l *kvLayer) Len() int                              { return l.n }
func (l *kvLayer) Part(head, block, kv int) compute.Part { return l.parts[block][head][kv] }
func (l *kvLayer) release(st compute.BlockStore) {
	for _, blk := range l.parts {
		for _, h := range blk {
			for _, p := range h {
				if p != nil {
					st.Release(p)
				}
			}
		}
	}
}

// A cache is one sequence's keys and values (tokens x kvHeads x headDim,
// before RoPE) in a store, and the values its parts hold (what
// attention must read).
type cache struct {
	layer    *kvLayer
	k, v     []float64 // tokens x kvHeads x headDim, as the parts decode
	encoding string    // how the full blocks are held, for errors
}

// newCache writes keys and values to hot parts of st; bf16 rounds what the
// parts hold.
func (s *suite) newCache(b compute.Backend, st compute.BlockStore, k, v []float32, bf16 bool) (*cache, error) {
	c := &cache{layer: &kvLayer{n: tokens}, k: f64(k), v: f64(v), encoding: "hot"}
	if bf16 {
		c.encoding = "hot bf16"
		for i := range c.k {
			c.k[i] = float64(tensor.BF16ToF32(tensor.F32ToBF16(k[i])))
			c.v[i] = float64(tensor.BF16ToF32(tensor.F32ToBF16(v[i])))
		}
	}
	bk, bv := upload(b, k), upload(b, v)
	for blk := 0; blk*blockSize < tokens; blk++ {
		rows := min(blockSize, tokens-blk*blockSize)
		var row [kvHeads][2]compute.Part
		for h := range kvHeads {
			for kv, src := range []compute.Buffer{bk, bv} {
				p, err := st.NewPart()
				if err != nil {
					return nil, fmt.Errorf("NewPart: %w", err)
				}
				off := (blk*blockSize*kvHeads + h) * headDim
				st.Write(p, 0, src.Slice(off, src.Len), kvHeads*headDim, rows)
				row[h][kv] = p
			}
		}
		c.layer.parts = append(c.layer.parts, row)
	}
	return c, nil
}

// block returns the values of block blk, head h, side kv of vals.
func block(vals []float64, blk, h int) []float32 {
	out := make([]float32, blockSize*headDim)
	for i := range blockSize {
		copy32(out[i*headDim:(i+1)*headDim], vals[((blk*blockSize+i)*kvHeads+h)*headDim:])
	}
	return out
}

func copy32(dst []float32, src []float64) {
	for i := range dst {
		dst[i] = float32(src[i])
	}
}

// setBlock stores x (one part's rows) as block blk, head h of vals.
func setBlock(vals []float64, blk, h int, x []float32) {
	for i := range blockSize {
		for j := range headDim {
			vals[((blk*blockSize+i)*kvHeads+h)*headDim+j] = float64(x[i*headDim+j])
		}
	}
}

// encode encodes the full blocks of c with cd: on the host and handed to
// SetEncoded, or, with onStore, by the store (PartEncoder). The values
// attention must read become what the parts decode to.
func (s *suite) encode(st compute.BlockStore, c *cache, cd codec.Codec, onStore bool) error {
	if pe, ok := st.(compute.PartsEncoder); ok && onStore {
		// All the full parts in one call (as the cache encodes a step's);
		// the loop below then reads them back.
		var ps []compute.Part
		var decs []compute.Decoder
		for blk := 0; blk < tokens/blockSize; blk++ {
			for h := range kvHeads {
				for kv := range 2 {
					ps, decs = append(ps, c.layer.parts[blk][h][kv]), append(decs, cd)
				}
			}
		}
		if err := pe.EncodeParts(ps, decs); err != nil {
			return fmt.Errorf("EncodeParts: %w", err)
		}
	}
	for blk := 0; blk < tokens/blockSize; blk++ {
		for h := range kvHeads {
			for kv, vals := range [][]float64{c.k, c.v} {
				p := c.layer.parts[blk][h][kv]
				if onStore {
					if _, batched := st.(compute.PartsEncoder); !batched {
						if err := st.(compute.PartEncoder).EncodePart(p, cd); err != nil {
							return fmt.Errorf("EncodePart: %w", err)
						}
					}
					got := make([]float32, blockSize*headDim)
					if err := st.Read(got, p); err != nil {
						return fmt.Errorf("reading back a part the store encoded: %w", err)
					}
					// What the store holds is what the host codec makes of
					// the block, to the tolerance.
					enc, err := cd.Encode(nil, block(vals, blk, h), blockSize, headDim)
					if err != nil {
						return err
					}
					host := make([]float32, blockSize*headDim)
					if err := cd.Decode(host, enc, blockSize, headDim); err != nil {
						return err
					}
					s.compare(fmt.Sprintf("%s encoded by the store, read back", cd.Name()), got, f64(host))
					setBlock(vals, blk, h, got)
					continue
				}
				enc, err := cd.Encode(nil, block(vals, blk, h), blockSize, headDim)
				if err != nil {
					return fmt.Errorf("encode: %w", err)
				}
				dec := make([]float32, blockSize*headDim)
				if err := cd.Decode(dec, enc, blockSize, headDim); err != nil {
					return fmt.Errorf("decode: %w", err)
				}
				if err := st.SetEncoded(p, enc, cd); err != nil {
					return fmt.Errorf("SetEncoded: %w", err)
				}
				how := "encoded"
				if hd, ok := p.(compute.HotDecoded); ok && hd.HotDecoded() {
					how = "held hot-decoded"
				}
				if !p.Encoded() {
					s.errorf("%s: a part SetEncoded took (%s) says it is not encoded", cd.Name(), how)
				}
				got := make([]float32, blockSize*headDim)
				if err := st.Read(got, p); err != nil {
					return fmt.Errorf("reading back a part SetEncoded took (%s): %w", how, err)
				}
				s.compare(fmt.Sprintf("%s part %s by SetEncoded, read back", cd.Name(), how), got, f64(dec))
				setBlock(vals, blk, h, dec)
			}
		}
	}
	if onStore {
		c.encoding = cd.Name() + " encoded by the store"
	} else {
		c.encoding = cd.Name() + " encoded"
	}
	return nil
}

// attend is attention in float64: n queries (heads x headDim each, RoPE
// applied) at positions start.. over c's values, keys rotated.
func attend(q []float32, n, start int, c *cache, p compute.AttentionParams, cos, sin []float32) []float64 {
	kr := slices.Clone(c.k)
	rope(kr, tokens, kvHeads, headDim, 0, cos, sin)
	scale := p.Scale
	if scale == 0 {
		scale = 1 / math.Sqrt(headDim)
	}
	out := make([]float64, n*heads*headDim)
	for i := range n {
		pos := start + i
		lo := 0
		if p.Window > 0 {
			lo = max(0, pos-p.Window+1)
		}
		for hq := range heads {
			hk := hq / (heads / kvHeads)
			qv := q[(i*heads+hq)*headDim:][:headDim]
			scores := make([]float64, pos+1-lo)
			mx := math.Inf(-1)
			for t := lo; t <= pos; t++ {
				var dot float64
				for j := range headDim {
					dot += float64(qv[j]) * kr[(t*kvHeads+hk)*headDim+j]
				}
				sc := dot * scale
				if p.Softcap != 0 {
					sc = p.Softcap * math.Tanh(sc/p.Softcap)
				}
				scores[t-lo] = sc
				mx = max(mx, sc)
			}
			var sum float64
			for t := range scores {
				scores[t] = math.Exp(scores[t] - mx)
				sum += scores[t]
			}
			o := out[(i*heads+hq)*headDim:][:headDim]
			for t := lo; t <= pos; t++ {
				w := scores[t-lo] / sum
				for j := range headDim {
					o[j] += w * c.v[(t*kvHeads+hk)*headDim+j]
				}
			}
		}
	}
	return out
}

// params are the attention geometry of the checks.
func params(window int, scale, softcap float64) compute.AttentionParams {
	return compute.AttentionParams{Heads: heads, KVHeads: kvHeads, HeadDim: headDim, Window: window, Scale: scale, Softcap: softcap, BlockSize: blockSize, MaxContext: 64}
}

// kvData returns the keys, values, queries and RoPE tables of the checks.
func kvData(seed uint64) (k, v, q, cos, sin []float32) {
	r := rand.New(rand.NewPCG(seed, 7))
	k, v = randFloats(r, tokens*kvHeads*headDim), randFloats(r, tokens*kvHeads*headDim)
	q = randFloats(r, tokens*heads*headDim)
	cos, sin = make([]float32, tokens*headDim/2), make([]float32, tokens*headDim/2)
	for pos := range tokens {
		for j := range headDim / 2 {
			a := float64(pos) * math.Pow(10000, -2*float64(j)/headDim)
			cos[pos*headDim/2+j], sin[pos*headDim/2+j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return k, v, q, cos, sin
}

// forward checks one attention call (n queries at start) over c.
func (s *suite) forward(b compute.Backend, c *cache, p compute.AttentionParams, n, start int) {
	_, _, q, cos, sin := kvData(1)
	q = q[start*heads*headDim : (start+n)*heads*headDim]
	att, err := b.NewAttention(p)
	if err != nil {
		s.errorf("NewAttention(%+v): %v", p, err)
		return
	}
	out := b.Alloc(n * heads * headDim)
	if err := att.Forward(out, upload(b, q), n, start, c.layer, upload(b, cos), upload(b, sin)); err != nil {
		s.errorf("%s blocks: Forward: %v", c.encoding, err)
		return
	}
	what := fmt.Sprintf("attention over %s blocks, %d queries at %d", c.encoding, n, start)
	if p.Window != 0 || p.Scale != 0 || p.Softcap != 0 {
		what += fmt.Sprintf(", window %d scale %g softcap %g", p.Window, p.Scale, p.Softcap)
	}
	s.compare(what, read(b, out), attend(q, n, start, c, p, cos, sin))
}

// checkAttention runs attention over every block format the backend
// claims to read.
func (s *suite) checkAttention(b compute.Backend) {
	k, v, _, _, _ := kvData(1)
	for _, bf16 := range []bool{false, true} {
		st := b.NewBlockStore(blockSize, headDim, bf16)
		c, err := s.newCache(b, st, k, v, bf16)
		if err != nil {
			s.errorf("hot parts (bf16 %v): %v", bf16, err)
			continue
		}
		s.forward(b, c, params(0, 0, 0), 1, tokens-1)
		s.forward(b, c, params(0, 0, 0), 5, tokens-5)
		if !bf16 {
			s.forward(b, c, params(6, 0, 0), 4, tokens-4)
			if _, ok := b.(compute.SlidingKV); ok {
				s.checkSliding(b, st, k, v)
			}
			if _, ok := b.(compute.ArchOps); ok {
				s.forward(b, c, params(0, 0.3, 2), 3, tokens-3)
			}
			s.checkBatch(b, c)
		}
		c.layer.release(st)
	}

	st := b.NewBlockStore(blockSize, headDim, false)
	ea, _ := st.(compute.EncodedAttention)
	pe, _ := st.(compute.PartEncoder)
	read := 0
	for _, r := range codec.Registered() {
		cd, err := s.codecFor(r, k)
		if err != nil {
			s.errorf("codec %s: %v", r.Name, err)
			continue
		}
		for _, onStore := range []bool{false, true} {
			if onStore {
				if pe == nil {
					continue
				}
				if _, ok := pe.EncodedLen(cd); !ok {
					continue
				}
			} else if ea == nil || !ea.AttendsEncoded(cd) {
				continue
			}
			read++
			c, err := s.newCache(b, st, k, v, false)
			if err != nil {
				s.errorf("%s: %v", r.Name, err)
				continue
			}
			if err := s.encode(st, c, cd, onStore); err != nil {
				s.errorf("%s (by the store %v): %v", r.Name, onStore, err)
			} else {
				s.forward(b, c, params(0, 0, 0), 5, tokens-5)
				if _, ok := b.(compute.SlidingKV); ok {
					// A sliding layer that codes (Mistral's) releases
					// encoded blocks.
					s.slide(b, st, c)
				}
			}
			c.layer.release(st)
		}
	}
	if ea != nil && read == 0 {
		s.errorf("the store implements compute.EncodedAttention but reads no registered codec's blocks")
	}
}

// checkSliding runs windowed attention (compute.SlidingKV) over a cache
// whose blocks no query of the call sees were released, their parts nil,
// as kvcache's sliding layers leave them.
func (s *suite) checkSliding(b compute.Backend, st compute.BlockStore, k, v []float32) {
	c, err := s.newCache(b, st, k, v, false)
	if err != nil {
		s.errorf("hot parts: %v", err)
		return
	}
	defer c.layer.release(st)
	s.slide(b, st, c)
}

// slide releases the blocks of c that no query of a windowed call sees
// and runs the call, as attention over a sliding layer whose blocks, hot
// or encoded, slid out: queries at 16..19 with a window of 6 see keys
// from 11 on, so block 0 (keys 0..7) is out of every query's window.
func (s *suite) slide(b compute.Backend, st compute.BlockStore, c *cache) {
	const window, start = 6, tokens - 4
	for blk := 0; (blk+1)*blockSize <= start-window+1; blk++ {
		for h := range kvHeads {
			for kv := range 2 {
				st.Release(c.layer.parts[blk][h][kv])
				c.layer.parts[blk][h][kv] = nil
			}
		}
	}
	c.encoding += " (the blocks before the window released)"
	s.forward(b, c, params(window, 0, 0), 4, start)
}

// codecFor builds r's codec at its default settings; a principal-basis
// codec gets statistics measured on the blocks of k.
func (s *suite) codecFor(r codec.Registration, k []float32) (codec.Codec, error) {
	cd, err := codec.New(codec.Spec{Name: r.Name})
	if err != nil || !r.Principal {
		return cd, err
	}
	pc, ok := cd.(*codec.KakeyaPC)
	if !ok {
		return nil, fmt.Errorf("a principal-basis codec that is not a KakeyaPC (%T): computetest cannot calibrate it", cd)
	}
	acc := codec.NewPCAAccumulator(headDim)
	c := &cache{k: f64(k)}
	for blk := 0; blk < tokens/blockSize; blk++ {
		for h := range kvHeads {
			if err := acc.AddBlock(block(c.k, blk, h), blockSize); err != nil {
				return nil, err
			}
		}
	}
	st, err := acc.Stats()
	if err != nil {
		return nil, err
	}
	return codec.NewKakeyaPC(pc.Options(), st, nil)
}

// checkBatch runs BatchAttention, where the backend has it, over two
// passes of c against their float64 attention.
func (s *suite) checkBatch(b compute.Backend, c *cache) {
	ba, ok := b.(compute.BatchAttention)
	if !ok {
		return
	}
	_, _, q, cos, sin := kvData(1)
	p := params(0, 0, 0)
	a1, err1 := b.NewAttention(p)
	a2, err2 := b.NewAttention(p)
	if err := errors.Join(err1, err2); err != nil {
		s.errorf("NewAttention: %v", err)
		return
	}
	// Pass 1: the last token; pass 2: the three before it (a prefill
	// chunk), over the same blocks.
	passes := []compute.AttentionPass{{Attention: a1, KV: c.layer, N: 1, Start: tokens - 1}, {Attention: a2, KV: &kvLayer{parts: c.layer.parts, n: tokens - 1}, N: 3, Start: tokens - 4}}
	row := heads * headDim
	qs := slices.Concat(q[(tokens-1)*row:tokens*row], q[(tokens-4)*row:(tokens-1)*row])
	out := b.Alloc(4 * row)
	if err := ba.AttendBatch(out, upload(b, qs), false, 0, passes, upload(b, cos), upload(b, sin)); err != nil {
		s.errorf("BatchAttention.AttendBatch: %v", err)
		return
	}
	short := &cache{k: c.k[:(tokens-1)*kvHeads*headDim], v: c.v[:(tokens-1)*kvHeads*headDim]}
	want := slices.Concat(attend(qs[:row], 1, tokens-1, c, p, cos, sin), attendN(qs[row:], 3, tokens-4, short, p, cos, sin))
	s.compare("BatchAttention.AttendBatch, two passes", read(b, out), want)
}

// attendN is attend over a cache of fewer than tokens positions.
func attendN(q []float32, n, start int, c *cache, p compute.AttentionParams, cos, sin []float32) []float64 {
	full := &cache{k: make([]float64, tokens*kvHeads*headDim), v: make([]float64, tokens*kvHeads*headDim)}
	copy(full.k, c.k)
	copy(full.v, c.v)
	return attend(q, n, start, full, p, cos, sin)
}

// checkCorrupt hands the store a truncated encoded block: the failure
// must come back from SetEncoded, Forward or Err, never as a result, and
// Err must then stay set.
func (s *suite) checkCorrupt(b compute.Backend) {
	if err := b.Err(); err != nil {
		s.errorf("a new backend's Err: %v", err)
		return
	}
	st := b.NewBlockStore(blockSize, headDim, false)
	ea, ok := st.(compute.EncodedAttention)
	cd, _ := codec.New(codec.Spec{Name: "int8"})
	if !ok || !ea.AttendsEncoded(cd) {
		return // encoded blocks never reach this backend's attention
	}
	k, v, _, _, _ := kvData(2)
	c, err := s.newCache(b, st, k, v, false)
	if err != nil {
		s.errorf("%v", err)
		return
	}
	enc, err := cd.Encode(nil, block(c.k, 0, 0), blockSize, headDim)
	if err != nil {
		s.errorf("%v", err)
		return
	}
	if err := st.SetEncoded(c.layer.parts[0][0][0], enc[:len(enc)-3], cd); err != nil {
		return // refused at once
	}
	att, err := b.NewAttention(params(0, 0, 0))
	if err != nil {
		return // the failure was recorded and is reported here
	}
	_, _, q, cos, sin := kvData(2)
	out := b.Alloc(heads * headDim)
	ferr := att.Forward(out, upload(b, q[:heads*headDim]), 1, tokens-1, c.layer, upload(b, cos), upload(b, sin))
	read(b, out)
	berr := b.Err()
	if ferr == nil && berr == nil {
		s.errorf("attention over a truncated %s block returned a result: neither SetEncoded, Forward nor Err failed", cd.Name())
		return
	}
	if berr != nil && b.Err() == nil {
		s.errorf("Err is not sticky")
	}
}

// checkGeometry asks for attention no backend can run (query heads not a
// multiple of the key heads, a zero head size): an error, not a panic.
func (s *suite) checkGeometry(b compute.Backend) {
	for _, p := range []compute.AttentionParams{
		{Heads: 3, KVHeads: 2, HeadDim: headDim, BlockSize: blockSize, MaxContext: 64},
		{Heads: heads, KVHeads: kvHeads, HeadDim: 0, BlockSize: blockSize, MaxContext: 64},
		{Heads: heads, KVHeads: kvHeads, HeadDim: headDim, BlockSize: 0, MaxContext: 64},
	} {
		if _, err := b.NewAttention(p); err == nil {
			s.errorf("NewAttention(%+v): no error", p)
		}
	}
}
