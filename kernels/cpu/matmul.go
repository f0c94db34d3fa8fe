package cpu

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
)

const (
	// A GEMM tile is tileRows weight rows by tileK columns converted to f32
	// (16 KiB): small enough to stay in L1 while every token streams past it.
	tileRows = 16
	tileK    = 256
	// gemvRows is the unit of GEMV work handed to a worker.
	gemvRows = 16
	// chunksPerThread over-splits work so a core slowed by other processes
	// does not hold everyone up.
	chunksPerThread = 8
	// minParallelWork is the smallest n·rows·cols worth waking workers for:
	// below it (e.g. a 128x896 k/v projection at decode) the hand-off costs
	// more than it saves.
	minParallelWork = 1 << 18
	// scratchLen is one worker's GEMM scratch: a tile and 8 results.
	scratchLen = tileRows*tileK + 8
	// panelRows is the number of weight rows of an AVX-512 GEMM panel
	// (KK_PANEL in avx512_amd64.c).
	panelRows = 32
)

// Precision says how MatMul treats the activations it multiplies bf16
// weights by. Products accumulate in f32 at either precision, and no result
// depends on the number of threads. Weights of other dtypes always multiply
// the activations as they are.
type Precision int

const (
	// PrecisionF32 multiplies by the activations as they are, in f32: exact
	// f32 products, a pool's zero value.
	PrecisionF32 Precision = iota
	// PrecisionBF16 rounds the activations to bf16 first, the arithmetic of
	// llama.cpp's BF16 matmul: with VDPBF16PS (AVX512_BF16) about 1.5 times
	// PrecisionF32's prefill speed, and within bf16 rounding of its
	// results. model.Load's default.
	PrecisionBF16
)

// String returns the name ParsePrecision accepts: "f32" or "bf16".
func (pr Precision) String() string {
	if pr == PrecisionBF16 {
		return "bf16"
	}
	return "f32"
}

// ParsePrecision returns the Precision named "f32" or "bf16".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "f32":
		return PrecisionF32, nil
	case "bf16":
		return PrecisionBF16, nil
	}
	return 0, fmt.Errorf("matmul precision %q: want f32 or bf16", s)
}

// kernelSet is one implementation of the inner loops: scalar, or SIMD.
type kernelSet struct {
	name string
	// gemv sets out[r] = W[r]·x for rows [lo, hi), with s (at least
	// w.Cols long) as scratch.
	gemv func(out, x []float32, w *compute.Mat, lo, hi int, s []float32)
	// cvt sets dst[i] to element off+i of w's row-major storage.
	cvt func(dst []float32, w *compute.Mat, off int)
	// dot4x2 sets d[j] = w_j·x0 and d[4+j] = w_j·x1 for the four f32 rows
	// w_j = w[j*ws : j*ws+len(x0)].
	dot4x2 func(w []float32, ws int, x0, x1 []float32, d *[8]float32)
	// dot4x1 sets d[j] = w_j·x for the four rows as in dot4x2.
	dot4x1 func(w []float32, ws int, x []float32, d *[4]float32)
	dot    func(a, b []float32) float32
	// avx512 says bf16 weights go through avx512_amd64.c's kernels
	// instead of the loops above: the f32 ones, and with dotBF16 the
	// VDPBF16PS ones for PrecisionBF16.
	avx512, dotBF16 bool
}

var scalarKernels = kernelSet{
	name:   "scalar",
	gemv:   gemvScalar,
	cvt:    cvtScalar,
	dot4x2: dot4x2Scalar,
	dot4x1: dot4x1Scalar,
	dot:    dotScalar,
}

// Kernel reports which implementation of the inner loops the pool runs
// ("avx512bf16", "avx512", "avx2" or "scalar").
func (p *Pool) Kernel() string { return p.k.name }

// MatMul computes out[i*w.Rows+r] = Σ_c x[i*w.Cols+c]·W[r][c] for the n
// token vectors in x, reading W in its stored dtype and accumulating in f32.
// n == 1 is a memory-bound GEMV; n > 1 converts tiles of W once and reuses
// them across all tokens. out must not overlap x. It panics if the lengths
// do not match the shapes.
func (p *Pool) MatMul(out, x []float32, n int, w compute.Mat) {
	checkMatMul(out, x, n, &w)
	if n == 0 {
		return
	}
	mode := p.k.mode(&w, p.prec)
	units := (w.Rows + gemvRows - 1) / gemvRows
	switch {
	case n > 1 && mode != modeLoops:
		units = (w.Rows + panelRows - 1) / panelRows
	case n > 1:
		units = (w.Rows + tileRows - 1) / tileRows
	}
	parallel := n*w.Rows*w.Cols >= minParallelWork && p.acquire(units)
	if parallel || p.mu.TryLock() {
		// The pool is ours, and so are its buffers for the activations.
		p.mm = matmulTask{k: p.k, scratch: p.scratch, out: out, x: x, n: n, w: w}
		p.mm.prepare(&p.acts, mode, p.prec)
		if parallel {
			p.wtask = &p.mm
			p.dispatch(units, min(units, p.threads*chunksPerThread))
			return
		}
		// Small, or a closed or single-threaded pool: run on this
		// goroutine.
		p.mm.runWorker(0, 0, units)
		p.mm = matmulTask{}
		p.mu.Unlock()
		return
	}
	// A busy pool (a nested or concurrent call): run here, with memory of
	// its own.
	t := &matmulTask{k: p.k, scratch: [][]float32{nil}, out: out, x: x, n: n, w: w}
	t.prepare(&activations{}, mode, p.prec)
	t.runWorker(0, 0, units)
}

// matmulMode is the family of kernels a MatMul call runs.
type matmulMode int

const (
	modeLoops matmulMode = iota // the kernel set's loops (gemv, gemmTile)
	modeF32                     // avx512_amd64.c's f32 kernels
	modeBF16                    // avx512_amd64.c's VDPBF16PS kernels
)

// mode picks the kernels for weights w at precision prec.
func (k *kernelSet) mode(w *compute.Mat, prec Precision) matmulMode {
	switch {
	case w.DType != compute.BF16 || !k.avx512:
		return modeLoops
	case prec == PrecisionBF16 && k.dotBF16:
		return modeBF16
	}
	// At PrecisionBF16 without VDPBF16PS, prepare rounds the activations.
	return modeF32
}

func checkMatMul(out, x []float32, n int, w *compute.Mat) {
	if n < 0 || w.Rows <= 0 || w.Cols <= 0 {
		panic(fmt.Sprintf("cpu: MatMul: bad shape n=%d rows=%d cols=%d", n, w.Rows, w.Cols))
	}
	size := w.Rows * w.Cols
	switch w.DType {
	case compute.F32:
		if len(w.F32) != size {
			panic(fmt.Sprintf("cpu: MatMul: F32 weight has %d elements, want %dx%d", len(w.F32), w.Rows, w.Cols))
		}
	case compute.F16, compute.BF16:
		if len(w.U16) != size {
			panic(fmt.Sprintf("cpu: MatMul: %v weight has %d elements, want %dx%d", w.DType, len(w.U16), w.Rows, w.Cols))
		}
	default:
		panic(fmt.Sprintf("cpu: MatMul: unsupported weight dtype %v", w.DType))
	}
	if len(x) < n*w.Cols {
		panic(fmt.Sprintf("cpu: MatMul: x has %d elements, want %d tokens x %d", len(x), n, w.Cols))
	}
	if len(out) < n*w.Rows {
		panic(fmt.Sprintf("cpu: MatMul: out has %d elements, want %d tokens x %d", len(out), n, w.Rows))
	}
}

// matmulTask is one MatMul call split into units: gemvRows-row blocks for
// n == 1, tileRows-row tiles otherwise.
type matmulTask struct {
	k       *kernelSet
	scratch [][]float32
	out, x  []float32
	n       int
	w       compute.Mat
	mode    matmulMode
	// ld is the packed rows' length in bf16 values (w.Cols rounded up to
	// even) outside modeLoops; the activations as the mode's kernels read
	// them: bf16 rows of stride ld (modeBF16), or for a modeF32 GEMV x's
	// even and odd halves.
	ld     int
	xb     []uint16
	xe, xo []float32
}

// activations is the memory behind a task's converted activations.
type activations struct {
	b       []uint16
	e, o, r []float32
}

// prepare converts the task's activations for its mode and precision into
// a's memory (grown to fit): rounded to bf16 where prec says so, and laid
// out as the mode's kernels read them.
func (t *matmulTask) prepare(a *activations, mode matmulMode, prec Precision) {
	t.mode = mode
	cols := t.w.Cols
	if mode != modeLoops {
		t.ld = cols + cols&1
	}
	if mode == modeBF16 {
		a.b = grow(a.b, t.n*t.ld)
		t.xb = a.b
		packX(t.x, t.n, cols, t.ld, t.xb)
		return
	}
	if prec == PrecisionBF16 && t.w.DType == compute.BF16 {
		// Without VDPBF16PS the f32 kernels and loops give the same
		// arithmetic on rounded activations.
		a.r = grow(a.r, t.n*cols)
		for i, v := range t.x[:t.n*cols] {
			a.r[i] = compute.BF16ToF32(compute.F32ToBF16(v))
		}
		t.x = a.r
	}
	if mode == modeF32 && t.n == 1 {
		h := splitLen(cols)
		a.e, a.o = grow(a.e, h), grow(a.o, h)
		t.xe, t.xo = a.e, a.o
		splitX(t.x[:cols], t.xe, t.xo)
	}
}

// splitLen is the length of each half splitX writes for cols values: the
// even- or odd-indexed ones, zero-padded to a multiple of 16.
func splitLen(cols int) int { return ((cols+1)/2 + 15) &^ 15 }

// grow returns s resliced to n elements, reallocated if it is too short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (t *matmulTask) runWorker(worker, lo, hi int) {
	s := t.scratch[worker]
	if len(s) < scratchLen {
		s = make([]float32, scratchLen)
		t.scratch[worker] = s
	}
	if t.mode != modeLoops {
		rows := t.w.Rows
		if t.n == 1 {
			r0, r1 := lo*gemvRows, min(hi*gemvRows, rows)
			if t.mode == modeBF16 {
				gemvBF16(&t.w, r0, r1, t.xb, t.out)
			} else {
				gemvF32(&t.w, r0, r1, t.xe, t.xo, t.out)
			}
			return
		}
		if need := panelRows * t.ld / 2; len(s) < need {
			// Grown once per worker for the widest matrix it meets.
			s = make([]float32, need)
			t.scratch[worker] = s
		}
		for u := lo; u < hi; u++ {
			r0 := u * panelRows
			nr := min(panelRows, rows-r0)
			if t.mode == modeBF16 {
				gemmPanelBF16(&t.w, r0, nr, s, t.xb, t.ld, t.n, t.out[r0:], rows)
			} else {
				gemmPanelF32(&t.w, r0, nr, s, t.x, t.n, t.out[r0:], rows)
			}
		}
		return
	}
	if t.n == 1 {
		if len(s) < t.w.Cols {
			// Grown once per worker for the widest matrix it meets.
			s = make([]float32, max(scratchLen, t.w.Cols))
			t.scratch[worker] = s
		}
		t.k.gemv(t.out, t.x, &t.w, lo*gemvRows, min(hi*gemvRows, t.w.Rows), s)
		return
	}
	for u := lo; u < hi; u++ {
		r0 := u * tileRows
		t.k.gemmTile(t.out, t.x, t.n, &t.w, r0, min(r0+tileRows, t.w.Rows), s)
	}
}

// gemmTile computes rows [r0, r1) of the output for all n tokens, converting
// the weight rows tileK columns at a time into the f32 scratch s.
func (k *kernelSet) gemmTile(out, x []float32, n int, w *compute.Mat, r0, r1 int, s []float32) {
	rows, cols := w.Rows, w.Cols
	nr := r1 - r0
	// The micro-kernels' results go through the scratch: a local array passed
	// to a function value would escape and allocate on every call.
	d := (*[8]float32)(s[tileRows*tileK:])
	d4 := (*[4]float32)(d[:4])
	for k0 := 0; k0 < cols; k0 += tileK {
		kc := min(tileK, cols-k0)
		for j := range nr {
			k.cvt(s[j*kc:(j+1)*kc], w, (r0+j)*cols+k0)
		}
		first := k0 == 0
		i := 0
		for ; i+2 <= n; i += 2 {
			x0 := x[i*cols+k0 : i*cols+k0+kc]
			x1 := x[(i+1)*cols+k0 : (i+1)*cols+k0+kc]
			o0 := out[i*rows+r0 : i*rows+r1]
			o1 := out[(i+1)*rows+r0 : (i+1)*rows+r1]
			j := 0
			for ; j+4 <= nr; j += 4 {
				k.dot4x2(s[j*kc:], kc, x0, x1, d)
				accum(o0[j:j+4], d[:4], first)
				accum(o1[j:j+4], d[4:], first)
			}
			for ; j < nr; j++ {
				row := s[j*kc : (j+1)*kc]
				accum1(&o0[j], k.dot(row, x0), first)
				accum1(&o1[j], k.dot(row, x1), first)
			}
		}
		if i < n {
			x0 := x[i*cols+k0 : i*cols+k0+kc]
			o0 := out[i*rows+r0 : i*rows+r1]
			j := 0
			for ; j+4 <= nr; j += 4 {
				k.dot4x1(s[j*kc:], kc, x0, d4)
				accum(o0[j:j+4], d4[:], first)
			}
			for ; j < nr; j++ {
				accum1(&o0[j], k.dot(s[j*kc:(j+1)*kc], x0), first)
			}
		}
	}
}

func accum(dst, src []float32, first bool) {
	if first {
		copy(dst, src)
		return
	}
	for i, v := range src {
		dst[i] += v
	}
}

func accum1(dst *float32, v float32, first bool) {
	if first {
		*dst = v
	} else {
		*dst += v
	}
}

// RowF32 converts row r of w to f32 into dst[:w.Cols] (an embedding lookup).
// It panics if r is out of range or dst is shorter than a row.
func RowF32(dst []float32, w compute.Mat, r int) {
	if r < 0 || r >= w.Rows || len(dst) < w.Cols {
		panic(fmt.Sprintf("cpu: RowF32: row %d of %dx%d into %d floats", r, w.Rows, w.Cols, len(dst)))
	}
	switch w.DType {
	case compute.F32:
		if len(w.F32) < w.Rows*w.Cols {
			panic(fmt.Sprintf("cpu: RowF32: F32 weight has %d elements, want %dx%d", len(w.F32), w.Rows, w.Cols))
		}
	case compute.F16, compute.BF16:
		if len(w.U16) < w.Rows*w.Cols {
			panic(fmt.Sprintf("cpu: RowF32: %v weight has %d elements, want %dx%d", w.DType, len(w.U16), w.Rows, w.Cols))
		}
	default:
		panic(fmt.Sprintf("cpu: RowF32: unsupported weight dtype %v", w.DType))
	}
	cvtRow(dst[:w.Cols], &w, r*w.Cols)
}

// Scalar inner loops, used without SIMD and as the reference the SIMD
// paths are tested against.

func cvtScalar(dst []float32, w *compute.Mat, off int) {
	switch w.DType {
	case compute.F32:
		copy(dst, w.F32[off:off+len(dst)])
	case compute.BF16:
		src := w.U16[off : off+len(dst)]
		for i, b := range src {
			dst[i] = compute.BF16ToF32(b)
		}
	case compute.F16:
		src := w.U16[off : off+len(dst)]
		for i, h := range src {
			dst[i] = compute.F16ToF32(h)
		}
	}
}

func gemvScalar(out, x []float32, w *compute.Mat, lo, hi int, _ []float32) {
	cols := w.Cols
	x = x[:cols]
	for r := lo; r < hi; r++ {
		switch w.DType {
		case compute.F32:
			out[r] = dotScalar(w.F32[r*cols:(r+1)*cols], x)
		case compute.BF16:
			row := w.U16[r*cols : (r+1)*cols]
			var s0, s1, s2, s3 float32
			c := 0
			for ; c+4 <= cols; c += 4 {
				s0 += compute.BF16ToF32(row[c]) * x[c]
				s1 += compute.BF16ToF32(row[c+1]) * x[c+1]
				s2 += compute.BF16ToF32(row[c+2]) * x[c+2]
				s3 += compute.BF16ToF32(row[c+3]) * x[c+3]
			}
			for ; c < cols; c++ {
				s0 += compute.BF16ToF32(row[c]) * x[c]
			}
			out[r] = (s0 + s1) + (s2 + s3)
		case compute.F16:
			row := w.U16[r*cols : (r+1)*cols]
			var s0, s1, s2, s3 float32
			c := 0
			for ; c+4 <= cols; c += 4 {
				s0 += compute.F16ToF32(row[c]) * x[c]
				s1 += compute.F16ToF32(row[c+1]) * x[c+1]
				s2 += compute.F16ToF32(row[c+2]) * x[c+2]
				s3 += compute.F16ToF32(row[c+3]) * x[c+3]
			}
			for ; c < cols; c++ {
				s0 += compute.F16ToF32(row[c]) * x[c]
			}
			out[r] = (s0 + s1) + (s2 + s3)
		}
	}
}

func dot4x2Scalar(w []float32, ws int, x0, x1 []float32, d *[8]float32) {
	k := len(x0)
	x1 = x1[:k]
	w0, w1, w2, w3 := w[:k], w[ws:ws+k], w[2*ws:2*ws+k], w[3*ws:3*ws+k]
	var a00, a10, a20, a30, a01, a11, a21, a31 float32
	for c := range k {
		u, v := x0[c], x1[c]
		a00 += w0[c] * u
		a10 += w1[c] * u
		a20 += w2[c] * u
		a30 += w3[c] * u
		a01 += w0[c] * v
		a11 += w1[c] * v
		a21 += w2[c] * v
		a31 += w3[c] * v
	}
	*d = [8]float32{a00, a10, a20, a30, a01, a11, a21, a31}
}

func dot4x1Scalar(w []float32, ws int, x []float32, d *[4]float32) {
	k := len(x)
	d[0] = dotScalar(w[:k], x)
	d[1] = dotScalar(w[ws:ws+k], x)
	d[2] = dotScalar(w[2*ws:2*ws+k], x)
	d[3] = dotScalar(w[3*ws:3*ws+k], x)
}
