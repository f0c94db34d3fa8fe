package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kakeya-ai/kakeya/tensor"
)

const (
	// A GEMM tile of the Go loops is tileRows weight rows by tileK columns
	// converted to f32 (16 KiB): small enough to stay in L1 while every
	// token streams past it.
	tileRows = 16
	tileK    = 256
	// gemvRows is the unit of Go-loop GEMV work handed to a worker.
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
	gemv func(out, x []float32, w *tensor.Mat, lo, hi int, s []float32)
	// cvt sets dst[i] to element off+i of w's row-major storage.
	cvt func(dst []float32, w *tensor.Mat, off int)
	// dot4x2 sets d[j] = w_j·x0 and d[4+j] = w_j·x1 for the four f32 rows
	// w_j = w[j*ws : j*ws+len(x0)].
	dot4x2 func(w []float32, ws int, x0, x1 []float32, d *[8]float32)
	// dot4x1 sets d[j] = w_j·x for the four rows as in dot4x2.
	dot4x1 func(w []float32, ws int, x []float32, d *[4]float32)
	// dot1 returns w·x for one row.
	//
	// dot4x2, dot4x1, dot1 and gemv compute each output by one arithmetic
	// (the kernel set's order of products and sums over each tileK-column
	// tile, tiles added in column order), so an output does not depend on
	// how many tokens a call multiplies or where a token sits among them:
	// prefill, decode and any batch of tokens agree bit for bit.
	dot1 func(w, x []float32) float32
	// avx2c says bf16 and f16 weights go through avx2_amd64.c's kernels
	// instead of the loops above, and avx512 that bf16 ones go through
	// avx512_amd64.c's: the f32 ones, and with dotBF16 the VDPBF16PS ones
	// for PrecisionBF16. neon says bf16 and f16 weights go through
	// neon_arm64.c's.
	avx2c, avx512, dotBF16, neon bool
}

var scalarKernels = kernelSet{
	name:   "scalar",
	gemv:   gemvScalar,
	cvt:    cvtScalar,
	dot4x2: dot4x2Scalar,
	dot4x1: dot4x1Scalar,
	dot1:   dot1Scalar,
}

// Kernel reports which kernels the pool runs, by level: "avx512bf16",
// "avx512", "avx2" or "scalar"; "scalar+avx2" and the like where the Go
// loops are scalar (a build without GOEXPERIMENT=simd) and the C kernels
// multiply bf16 and f16 weights.
func (p *Pool) Kernel() string { return p.k.name }

// A Matrix is a weight matrix as Pool.MatMul multiplies it: the rows as
// stored (tensor.Mat), and, made on first use for the C kernels that read
// weights in panels, the rows packed into those panels (as much memory
// again as the matrix); for a quantized type with an interleaved format
// (tensor.Q4_Kx8, Q5_Kx8, Q6_Kx8, Q8_0x8, Q4_0x8, Q5_0x8), where the AVX2 kernels run (and
// for the K types where the AVX-512 ones do), the rows interleaved in its place, made by Prepare. A Matrix may be used by several pools and
// goroutines at once; Prepare of a quantized matrix must come before its
// first MatMul (as at load).
type Matrix struct {
	m      tensor.Mat
	mu     sync.Mutex // held while packing
	panels [numLayouts]atomic.Pointer[[]uint16]
	x8     atomic.Pointer[interleaved]
}

// NewMatrix returns the Matrix of m, whose storage it shares. It panics if
// m's storage does not match its shape and dtype.
func NewMatrix(m tensor.Mat) *Matrix {
	checkMat("NewMatrix", &m)
	return &Matrix{m: m}
}

// Mat returns the matrix as stored; once Prepare has interleaved a
// quantized one, without its storage (Row reads its rows).
func (w *Matrix) Mat() tensor.Mat { return w.m }

// Row widens row r of w into dst (w.Cols values), from wherever w holds
// it: RowF32 of the stored matrix, or its interleaved rows.
func (w *Matrix) Row(dst []float32, r int) {
	if iv := w.x8.Load(); iv != nil {
		if r < 0 || r >= w.m.Rows || len(dst) < w.m.Cols {
			panic(fmt.Sprintf("cpu: Row: row %d of %d into %d values", r, w.m.Rows, len(dst)))
		}
		iv.row(dst, w.m.DType, w.m.Cols, r)
		return
	}
	RowF32(dst, w.m, r)
}

// layout is an arrangement of a matrix's rows for a family of kernels.
type layout int

const (
	layoutRows      layout = iota // as stored: the Go loops
	layoutPairs32                 // 32-row panels of bf16 column pairs: avx512_amd64.c
	layoutColumns32               // 32-row panels of columns: avx2_amd64.c, neon_arm64.c
	numLayouts
)

// width returns the rows of one of l's panels.
func (l layout) width() int {
	switch l {
	case layoutPairs32:
		return 32
	case layoutColumns32:
		return 32
	}
	return 1
}

// pairsLen is the uint16 values of p panels of width rows of cols columns
// in the column-pair layout, and columnsLen in the column layout.
func pairsLen(p, width, cols int) int   { return p * width * 2 * ((cols + 1) / 2) }
func columnsLen(p, width, cols int) int { return p * width * cols }

// packed returns w's rows packed in layout l (not layoutRows), packing
// them across p's threads the first time.
func (w *Matrix) packed(p *Pool, l layout) []uint16 {
	if s := w.panels[l].Load(); s != nil {
		return *s
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.panels[l].Load(); s != nil {
		return *s
	}
	rows, cols, width := w.m.Rows, w.m.Cols, l.width()
	np := (rows + width - 1) / width
	size := columnsLen(np, width, cols)
	if l == layoutPairs32 {
		size = pairsLen(np, width, cols)
	}
	dst := make([]uint16, size)
	p.For(np, func(lo, hi int) {
		if l == layoutColumns32 {
			packColumns(w.m.U16, rows, cols, width, lo, hi, dst)
		} else {
			packPairs(w.m.U16, rows, cols, width, lo, hi, dst)
		}
	})
	w.panels[l].Store(&dst)
	return dst
}

// Prepare lays w out for the pool's kernels now, packing its panels where
// they read any, instead of in w's first MatMul: a model pays at load, not
// in its first request. It reports whether it packed (MatMul then no
// longer reads the matrix as stored).
//
// A quantized matrix is read in its blocks, except where the kernels read
// its type's rows interleaved (tensor.Q4_Kx8, Q5_Kx8, Q6_Kx8, Q8_0x8,
// Q4_0x8 and Q5_0x8 for the AVX2 kernels of those types, the K types' for
// the AVX-512 ones): there Prepare interleaves the rows across p's threads and lets go of the
// stored ones (Mat then has no storage; the caller may give their pages
// back), and reports true.
func (p *Pool) Prepare(w *Matrix) bool {
	if w.m.DType.Quantized() {
		return p.interleave(w)
	}
	l := p.k.mode(w.m.DType, p.prec).layout()
	if l == layoutRows {
		return false
	}
	w.packed(p, l)
	return true
}

// interleave is Prepare for a quantized w.
func (p *Pool) interleave(w *Matrix) bool {
	if !interleaves(&w.m) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.x8.Load() == nil {
		w.x8.Store(interleave(&w.m, p.For))
		w.m.Q = nil
	}
	return true
}

// MatMul computes out[i*w.Rows+r] = Σ_c x[i*w.Cols+c]·W[r][c] for the n
// token vectors in x, reading W in its stored dtype and accumulating in f32.
// Each output is computed by one arithmetic whatever n is and wherever its
// token sits among the n: a prefill's rows equal a decode step's bit for
// bit. n == 1 is a memory-bound GEMV; n > 1 reuses each piece of W it
// loads across all tokens. out must not overlap x. It panics if the lengths
// do not match the shapes.
func (p *Pool) MatMul(out, x []float32, n int, w *Matrix) {
	checkMatMul(out, x, n, &w.m)
	if n == 0 {
		return
	}
	if w.m.DType.Quantized() {
		p.qMatMul(out, x, n, w)
		return
	}
	mode := p.k.mode(w.m.DType, p.prec)
	var panels []uint16
	if l := mode.layout(); l != layoutRows {
		panels = w.packed(p, l)
	}
	rows := w.m.Rows
	var units int
	switch {
	case mode != modeLoops:
		width := mode.layout().width()
		units = (rows + width - 1) / width
	case n > 1:
		units = (rows + tileRows - 1) / tileRows
	default:
		units = (rows + gemvRows - 1) / gemvRows
	}
	parallel := n*rows*w.m.Cols >= minParallelWork && p.acquire(units)
	if parallel || p.mu.TryLock() {
		// The pool is ours, and so are its buffers for the activations.
		p.mm = matmulTask{k: p.k, scratch: p.scratch, out: out, x: x, n: n, w: w.m, panels: panels}
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
	t := &matmulTask{k: p.k, scratch: [][]float32{nil}, out: out, x: x, n: n, w: w.m, panels: panels}
	t.prepare(&activations{}, mode, p.prec)
	t.runWorker(0, 0, units)
}

// matmulMode is the family of kernels a MatMul call runs.
type matmulMode int

const (
	modeLoops      matmulMode = iota // the kernel set's loops (gemv, gemmTile)
	modeAVX512F32                    // avx512_amd64.c's f32 kernels
	modeAVX512BF16                   // avx512_amd64.c's VDPBF16PS kernels
	modeAVX2BF16                     // avx2_amd64.c's kernels for bf16 weights
	modeAVX2F16                      // avx2_amd64.c's kernels for f16 weights
	modeNEONBF16                     // neon_arm64.c's kernels for bf16 weights
	modeNEONF16                      // neon_arm64.c's kernels for f16 weights
)

// layout returns the arrangement of the weights m's kernels read.
func (m matmulMode) layout() layout {
	switch m {
	case modeAVX512F32, modeAVX512BF16:
		return layoutPairs32
	case modeAVX2BF16, modeAVX2F16, modeNEONBF16, modeNEONF16:
		return layoutColumns32
	}
	return layoutRows
}

// mode picks the kernels for weights of dtype dt at precision prec.
func (k *kernelSet) mode(dt tensor.DType, prec Precision) matmulMode {
	switch {
	case dt == tensor.BF16 && k.dotBF16 && prec == PrecisionBF16:
		return modeAVX512BF16
	case dt == tensor.BF16 && k.avx512:
		// At PrecisionBF16 without VDPBF16PS, prepare rounds the
		// activations.
		return modeAVX512F32
	case dt == tensor.BF16 && k.avx2c:
		return modeAVX2BF16
	case dt == tensor.F16 && k.avx2c:
		return modeAVX2F16
	case dt == tensor.BF16 && k.neon:
		return modeNEONBF16
	case dt == tensor.F16 && k.neon:
		return modeNEONF16
	}
	return modeLoops
}

func checkMat(fn string, w *tensor.Mat) {
	if w.Rows <= 0 || w.Cols <= 0 {
		panic(fmt.Sprintf("cpu: %s: bad shape rows=%d cols=%d", fn, w.Rows, w.Cols))
	}
	size := w.Rows * w.Cols
	switch w.DType {
	case tensor.F32:
		if len(w.F32) != size {
			panic(fmt.Sprintf("cpu: %s: F32 weight has %d elements, want %dx%d", fn, len(w.F32), w.Rows, w.Cols))
		}
	case tensor.F16, tensor.BF16:
		if len(w.U16) != size {
			panic(fmt.Sprintf("cpu: %s: %v weight has %d elements, want %dx%d", fn, w.DType, len(w.U16), w.Rows, w.Cols))
		}
	default:
		if !w.DType.Quantized() {
			panic(fmt.Sprintf("cpu: %s: unsupported weight dtype %v", fn, w.DType))
		}
		checkQuant(fn, w)
	}
}

func checkMatMul(out, x []float32, n int, w *tensor.Mat) {
	if n < 0 {
		panic(fmt.Sprintf("cpu: MatMul: bad shape n=%d rows=%d cols=%d", n, w.Rows, w.Cols))
	}
	if len(x) < n*w.Cols {
		panic(fmt.Sprintf("cpu: MatMul: x has %d elements, want %d tokens x %d", len(x), n, w.Cols))
	}
	if len(out) < n*w.Rows {
		panic(fmt.Sprintf("cpu: MatMul: out has %d elements, want %d tokens x %d", len(out), n, w.Rows))
	}
}

// matmulTask is one MatMul call split into units: panels for the C
// kernels; for the loops gemvRows-row blocks for n == 1, tileRows-row tiles
// otherwise.
type matmulTask struct {
	k       *kernelSet
	scratch [][]float32
	out, x  []float32
	n       int
	w       tensor.Mat
	panels  []uint16
	mode    matmulMode
	// ld is the length in bf16 values (w.Cols rounded up to even) of the
	// activations' rows as modeAVX512BF16 reads them, in xb.
	ld int
	xb []uint16
}

// activations is the memory behind a task's converted activations.
type activations struct {
	b []uint16
	r []float32
}

// prepare converts the task's activations for its mode and precision into
// a's memory (grown to fit): rounded to bf16 where prec says so, and laid
// out as the mode's kernels read them.
func (t *matmulTask) prepare(a *activations, mode matmulMode, prec Precision) {
	t.mode = mode
	cols := t.w.Cols
	if mode == modeAVX512BF16 {
		t.ld = cols + cols&1
		a.b = grow(a.b, t.n*t.ld)
		t.xb = a.b
		packX(t.x, t.n, cols, t.ld, t.xb)
		return
	}
	if prec == PrecisionBF16 && t.w.DType == tensor.BF16 {
		// Without VDPBF16PS the f32 kernels and loops give the same
		// arithmetic on rounded activations.
		a.r = grow(a.r, t.n*cols)
		if mode == modeAVX2BF16 {
			roundBF16(t.x[:t.n*cols], a.r)
		} else {
			for i, v := range t.x[:t.n*cols] {
				a.r[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
			}
		}
		t.x = a.r
	}
}

// grow returns s resliced to n elements, reallocated if it is too short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (t *matmulTask) runWorker(worker, lo, hi int) {
	rows, cols := t.w.Rows, t.w.Cols
	switch t.mode {
	case modeAVX512BF16:
		gemmBF16(t.panels, rows, cols, lo, hi, t.xb, t.ld, t.n, t.out)
		return
	case modeAVX512F32:
		gemmF32(t.panels, rows, cols, lo, hi, t.x, t.n, t.out)
		return
	case modeAVX2BF16:
		gemm2BF16(t.panels, rows, cols, lo, hi, t.x, t.n, t.out)
		return
	case modeAVX2F16:
		gemm2F16(t.panels, rows, cols, lo, hi, t.x, t.n, t.out)
		return
	case modeNEONBF16:
		gemmNEONBF16(t.panels, rows, cols, lo, hi, t.x, t.n, t.out)
		return
	case modeNEONF16:
		gemmNEONF16(t.panels, rows, cols, lo, hi, t.x, t.n, t.out)
		return
	}
	s := t.scratch[worker]
	if len(s) < scratchLen {
		s = make([]float32, scratchLen)
		t.scratch[worker] = s
	}
	if t.n == 1 {
		t.k.gemv(t.out, t.x, &t.w, lo*gemvRows, min(hi*gemvRows, rows), s)
		return
	}
	for u := lo; u < hi; u++ {
		r0 := u * tileRows
		t.k.gemmTile(t.out, t.x, t.n, &t.w, r0, min(r0+tileRows, rows), s)
	}
}

// gemmTile computes rows [r0, r1) of the output for all n tokens, converting
// the weight rows tileK columns at a time into the f32 scratch s.
func (k *kernelSet) gemmTile(out, x []float32, n int, w *tensor.Mat, r0, r1 int, s []float32) {
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
				accum1(&o0[j], k.dot1(row, x0), first)
				accum1(&o1[j], k.dot1(row, x1), first)
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
				accum1(&o0[j], k.dot1(s[j*kc:(j+1)*kc], x0), first)
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
func RowF32(dst []float32, w tensor.Mat, r int) {
	if r < 0 || r >= w.Rows || len(dst) < w.Cols {
		panic(fmt.Sprintf("cpu: RowF32: row %d of %dx%d into %d floats", r, w.Rows, w.Cols, len(dst)))
	}
	switch w.DType {
	case tensor.F32:
		if len(w.F32) < w.Rows*w.Cols {
			panic(fmt.Sprintf("cpu: RowF32: F32 weight has %d elements, want %dx%d", len(w.F32), w.Rows, w.Cols))
		}
	case tensor.F16, tensor.BF16:
		if len(w.U16) < w.Rows*w.Cols {
			panic(fmt.Sprintf("cpu: RowF32: %v weight has %d elements, want %dx%d", w.DType, len(w.U16), w.Rows, w.Cols))
		}
	default:
		if !w.DType.Quantized() {
			panic(fmt.Sprintf("cpu: RowF32: unsupported weight dtype %v", w.DType))
		}
		checkQuant("RowF32", &w)
		rowQuant(dst, &w, r)
		return
	}
	cvtRow(dst[:w.Cols], &w, r*w.Cols)
}

// Scalar inner loops, used without SIMD and as the reference the SIMD
// paths are tested against.

func cvtScalar(dst []float32, w *tensor.Mat, off int) {
	switch w.DType {
	case tensor.F32:
		copy(dst, w.F32[off:off+len(dst)])
	case tensor.BF16:
		src := w.U16[off : off+len(dst)]
		for i, b := range src {
			dst[i] = tensor.BF16ToF32(b)
		}
	case tensor.F16:
		src := w.U16[off : off+len(dst)]
		for i, h := range src {
			dst[i] = tensor.F16ToF32(h)
		}
	}
}

// gemvScalar is gemmTile's arithmetic for one token: each row converted a
// tile of tileK columns at a time into the scratch s (at least w.Cols long)
// and summed by dot1Scalar, tiles added in column order.
func gemvScalar(out, x []float32, w *tensor.Mat, lo, hi int, s []float32) {
	cols := w.Cols
	for r := lo; r < hi; r++ {
		var sum float32
		for k0 := 0; k0 < cols; k0 += tileK {
			kc := min(tileK, cols-k0)
			cvtScalar(s[:kc], w, r*cols+k0)
			accum1(&sum, dot1Scalar(s[:kc], x[k0:k0+kc]), k0 == 0)
		}
		out[r] = sum
	}
}

// The scalar micro-kernels sum each output's products one after another
// in column order. Every product is converted to float32 before it is
// added, so no compiler fuses it into an FMA in one loop and not another.

func dot4x2Scalar(w []float32, ws int, x0, x1 []float32, d *[8]float32) {
	k := len(x0)
	x1 = x1[:k]
	w0, w1, w2, w3 := w[:k], w[ws:ws+k], w[2*ws:2*ws+k], w[3*ws:3*ws+k]
	var a00, a10, a20, a30, a01, a11, a21, a31 float32
	for c := range k {
		u, v := x0[c], x1[c]
		a00 += float32(w0[c] * u)
		a10 += float32(w1[c] * u)
		a20 += float32(w2[c] * u)
		a30 += float32(w3[c] * u)
		a01 += float32(w0[c] * v)
		a11 += float32(w1[c] * v)
		a21 += float32(w2[c] * v)
		a31 += float32(w3[c] * v)
	}
	*d = [8]float32{a00, a10, a20, a30, a01, a11, a21, a31}
}

func dot4x1Scalar(w []float32, ws int, x []float32, d *[4]float32) {
	k := len(x)
	d[0] = dot1Scalar(w[:k], x)
	d[1] = dot1Scalar(w[ws:ws+k], x)
	d[2] = dot1Scalar(w[2*ws:2*ws+k], x)
	d[3] = dot1Scalar(w[3*ws:3*ws+k], x)
}

func dot1Scalar(w, x []float32) float32 {
	x = x[:len(w)]
	var a float32
	for c, v := range w {
		a += float32(v * x[c])
	}
	return a
}
