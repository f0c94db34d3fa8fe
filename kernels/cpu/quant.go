package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/kakeya-ai/kakeya/tensor"
)

// Matrix products with quantized weights (tensor.Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K), as ggml computes them: the weights stay in their blocks, each
// activation row is quantized to 8 bits per block (ggml's q8_0 for Q8_0
// and Q4_0: an f16 scale per 32 values; q8_K for the K types: an f32 scale
// per 256 values and the sums of each 16), and each block's dot product is
// taken in integers and scaled once. The block layouts come from
// tensor.Formats.

// qLayout holds the field offsets of one format, read from its
// description once.
type qLayout struct {
	f                           *tensor.QuantFormat
	d, dmin, scales, qs, qh, ql int
	kQuant                      bool // activations as q8_K (256 per block)
	// kind and off are the C kernels' type code and the offsets they read
	// (bytes, d, dmin, scales, qs, qh, ql).
	kind int
	off  [7]int64
}

var qLayouts = func() map[tensor.DType]*qLayout {
	m := map[tensor.DType]*qLayout{}
	for i := range tensor.Formats {
		f := &tensor.Formats[i]
		l := &qLayout{f: f, kQuant: f.Block == 256}
		for _, fl := range f.Fields {
			switch fl.Name {
			case "d":
				l.d = fl.Offset
			case "dmin":
				l.dmin = fl.Offset
			case "scales":
				l.scales = fl.Offset
			case "qs":
				l.qs = fl.Offset
			case "qh":
				l.qh = fl.Offset
			case "ql":
				l.ql = fl.Offset
			}
		}
		l.kind = map[tensor.DType]int{tensor.Q8_0: 0, tensor.Q4_0: 1, tensor.Q4_K: 2, tensor.Q5_K: 3, tensor.Q6_K: 4, tensor.Q5_0: 5}[f.DType]
		l.off = [7]int64{int64(f.Bytes), int64(l.d), int64(l.dmin), int64(l.scales), int64(l.qs), int64(l.qh), int64(l.ql)}
		m[f.DType] = l
	}
	return m
}()

// qActs is a token block's activations quantized to 8 bits: qs holds n
// rows of cols int8 values; d one scale per group (32 values for q8_0, 256
// for q8_K); bsums, for q8_K, the sum of each 16 values.
type qActs struct {
	qs    []int8
	d     []float32
	bsums []int32
	// wide, for the AVX2 Q8_0 kernel, holds qs widened to 16 bits, the
	// values of each pair of blocks interleaved (wideCols per row).
	wide []int16
	// sums, for the AVX2 Q4_0 and Q5_0 kernels of interleaved rows, holds
	// the sum of each q8_0 block's 32 values (cols/32 per row): their
	// codes' offset times it is what they take off.
	sums  []int32
	quant qQuant
	task  qTask
}

// wideActs reports whether the AVX2 kernel for l's weights reads the
// activations widened (qActs.wide): Q8_0's, which multiplies in 16 bits.
func wideActs(l *qLayout) bool { return l.f.DType == tensor.Q8_0 }

// blockSums reports whether the AVX2 kernels of l's weights read the
// activations' block sums (qActs.sums): Q4_0's and Q5_0's, whose
// interleaved kernel multiplies the codes unsigned.
func blockSums(l *qLayout) bool { return l.f.DType == tensor.Q4_0 || l.f.DType == tensor.Q5_0 }

// wideCols is the length of a row of cols activations widened: 64 values
// per pair of 32-value blocks, an odd last block paired with zeros.
func wideCols(cols int) int { return 64 * ((cols/32 + 1) / 2) }

var qActsPool = sync.Pool{New: func() any { return new(qActs) }}

// quantizeQ8_0 quantizes x (a multiple of 32 values) as ggml's
// quantize_row_q8_0: scale amax/127 rounded to f16, values rounded to the
// nearest.
func quantizeQ8_0(qs []int8, d []float32, x []float32) {
	for b := range len(x) / 32 {
		v := x[b*32 : b*32+32]
		var amax float32
		for _, f := range v {
			amax = max(amax, float32(math.Abs(float64(f))))
		}
		s := amax / 127
		var id float32
		if s != 0 {
			id = 1 / s
		}
		for j, f := range v {
			qs[b*32+j] = int8(roundHalfAway(f * id))
		}
		d[b] = tensor.F16ToF32(tensor.F32ToF16(s))
	}
}

// quantizeQ8_K quantizes x (a multiple of 256 values) as ggml's
// quantize_row_q8_K: the scale maps the value of largest magnitude to
// -127 (its sign kept), values rounded to the nearest and capped at 127,
// with the sum of each 16.
func quantizeQ8_K(qs []int8, d []float32, bsums []int32, x []float32) {
	for b := range len(x) / 256 {
		v := x[b*256 : b*256+256]
		var amax, mx float32
		for _, f := range v {
			if a := float32(math.Abs(float64(f))); a > amax {
				amax, mx = a, f
			}
		}
		q := qs[b*256 : b*256+256]
		if amax == 0 {
			d[b] = 0
			clear(q)
			clear(bsums[b*16 : b*16+16])
			continue
		}
		iscale := -127 / mx
		for j, f := range v {
			q[j] = int8(min(127, nearestInt(iscale*f)))
		}
		for j := range 16 {
			var s int32
			for _, c := range q[j*16 : j*16+16] {
				s += int32(c)
			}
			bsums[b*16+j] = s
		}
		d[b] = 1 / iscale
	}
}

// sumBlocks sets sums[b] to the sum of the 32 values of block b of qs.
func sumBlocks(sums []int32, qs []int8) {
	for b := range sums {
		var s int32
		for _, v := range qs[32*b : 32*b+32] {
			s += int32(v)
		}
		sums[b] = s
	}
}

// roundHalfAway is C's roundf.
func roundHalfAway(f float32) float32 { return float32(math.Round(float64(f))) }

// nearestInt is ggml's nearest_int: round half to even.
func nearestInt(f float32) int { return int(math.RoundToEven(float64(f))) }

// quantize fills a with the n rows of x quantized for weights of format l.
func (a *qActs) quantize(x []float32, n, cols int, l *qLayout) {
	a.prepare(x, n, cols, l)
	a.quant.Run(0, n)
}

// prepare sizes a for the n rows of x and sets a.quant to quantize them.
func (a *qActs) prepare(x []float32, n, cols int, l *qLayout) {
	a.qs = grow(a.qs, n*cols)
	if l.kQuant {
		a.d = grow(a.d, n*cols/256)
		a.bsums = grow(a.bsums, n*cols/16)
	} else {
		a.d = grow(a.d, n*cols/32)
	}
	a.quant = qQuant{a: a, x: x[:n*cols], cols: cols, k: l.kQuant}
	// Widened for the AVX2 kernel alone: the AVX-512 ones read qs.
	if hasAVX2C && !hasQuant512 && wideActs(l) {
		a.wide = grow(a.wide, n*wideCols(cols))
		a.quant.wide = true
	}
	// Block sums wherever the C quantizer runs (a sum a block, taken from
	// the vectors it packs), for the AVX2 kernels of interleaved rows.
	if hasAVX2C && blockSums(l) {
		a.sums = grow(a.sums, n*cols/32)
		a.quant.sums = true
	}
}

// qQuant quantizes token rows [lo, hi) of x into a: a Task, so that a
// prefill's rows are quantized on every thread.
type qQuant struct {
	a    *qActs
	x    []float32
	cols int
	k    bool // q8_K, else q8_0
	wide bool // also a.wide (hasAVX2C)
	sums bool // also a.sums (q8_0)
}

func (q *qQuant) Run(lo, hi int) {
	if hasAVX2C && lo < hi {
		quantizeActsC(q, lo, hi)
		if q.wide {
			widenActsC(q.a, lo, hi, q.cols)
		}
		return
	}
	q.runGo(lo, hi)
}

// runGo is Run's pure-Go loops, the fallback and the reference of the C
// quantizers.
func (q *qQuant) runGo(lo, hi int) {
	c := q.cols
	if q.k {
		quantizeQ8_K(q.a.qs[lo*c:hi*c], q.a.d[lo*c/256:hi*c/256], q.a.bsums[lo*c/16:hi*c/16], q.x[lo*c:hi*c])
		return
	}
	quantizeQ8_0(q.a.qs[lo*c:hi*c], q.a.d[lo*c/32:hi*c/32], q.x[lo*c:hi*c])
	if q.sums {
		sumBlocks(q.a.sums[lo*c/32:hi*c/32], q.a.qs[lo*c:hi*c])
	}
}

// qRows is how many weight rows one unit of a quantized MatMul covers:
// each row is read once for all the tokens.
const qRows = 16

// qTask is a quantized MatMul over units of qRows rows.
type qTask struct {
	out  []float32
	a    *qActs
	w    *tensor.Mat
	l    *qLayout
	n    int
	rowB int // bytes per weight row
	// x8, when set, holds w's rows interleaved (w.Q is then unset): the
	// AVX2 kernels of its format read them.
	x8 *interleaved
}

// cSums checks that t's slices hold what a C kernel reads for rows up to
// r1 (a Go panic here rather than an out-of-bounds read in C) and
// returns the activations' block sums for the K types, else any valid
// pointer (t.l.off's): the kernels of quant_amd64.c and
// quant_neon_arm64.c take the same arguments.
func (t *qTask) cSums(r1 int) unsafe.Pointer {
	rows, cols := t.w.Rows, t.w.Cols
	_ = t.w.Q[r1*t.rowB-1]
	_ = t.a.qs[t.n*cols-1]
	_ = t.out[(t.n-1)*rows+r1-1]
	if t.l.kQuant {
		_ = t.a.bsums[t.n*cols/16-1]
		return unsafe.Pointer(&t.a.bsums[0])
	}
	return unsafe.Pointer(&t.l.off[0])
}

func (t *qTask) Run(lo, hi int) {
	r0, r1 := lo*qRows, min(hi*qRows, t.w.Rows)
	switch {
	case t.n == 0:
	case t.x8 != nil:
		quantRowsX8(t, r0, r1)
		return
	case hasAVX2C:
		quantRowsC(t, r0, r1)
		return
	case hasNEON:
		quantRowsNEON(t, r0, r1, hasQuantDot)
		return
	}
	t.runGo(r0, r1)
}

// runGo is Run's pure-Go loops over rows [r0, r1), the fallback and the
// reference of the C kernels.
func (t *qTask) runGo(r0, r1 int) {
	rows, cols := t.w.Rows, t.w.Cols
	groups := cols / 32
	if t.l.kQuant {
		groups = cols / 256
	}
	for r := r0; r < r1; r++ {
		wr := t.w.Q[r*t.rowB : (r+1)*t.rowB]
		for i := range t.n {
			xq := t.a.qs[i*cols : (i+1)*cols]
			xd := t.a.d[i*groups : (i+1)*groups]
			var s float32
			switch t.l.f.DType {
			case tensor.Q8_0:
				s = dotQ8_0(t.l, wr, xq, xd)
			case tensor.Q4_0:
				s = dotQ4_0(t.l, wr, xq, xd)
			case tensor.Q5_0:
				s = dotQ5_0(t.l, wr, xq, xd)
			case tensor.Q4_K, tensor.Q5_K:
				s = dotQ45K(t.l, wr, xq, xd, t.a.bsums[i*cols/16:(i+1)*cols/16])
			case tensor.Q6_K:
				s = dotQ6K(t.l, wr, xq, xd)
			}
			t.out[i*rows+r] = s
		}
	}
}

// qMatMul is MatMul for a quantized w.
func (p *Pool) qMatMul(out, x []float32, n int, w *Matrix) {
	l := qLayouts[w.m.DType]
	a := qActsPool.Get().(*qActs)
	a.prepare(x, n, w.m.Cols, l)
	if n >= 8 {
		p.Run(n, &a.quant)
	} else {
		a.quant.Run(0, n)
	}
	rb, _ := w.m.DType.RowBytes(w.m.Cols)
	a.task = qTask{out: out, a: a, w: &w.m, l: l, n: n, rowB: rb, x8: w.x8.Load()}
	units := (w.m.Rows + qRows - 1) / qRows
	if n*w.m.Rows*w.m.Cols >= minParallelWork {
		p.Run(units, &a.task)
	} else {
		a.task.Run(0, units)
	}
	a.task, a.quant = qTask{}, qQuant{}
	qActsPool.Put(a)
}

func f16le(b []byte, off int) float32 { return tensor.F16ToF32(binary.LittleEndian.Uint16(b[off:])) }

// dotQ8_0 is ggml_vec_dot_q8_0_q8_0: per block, the integer dot times the
// two scales.
func dotQ8_0(l *qLayout, w []byte, xq []int8, xd []float32) float32 {
	var sum float32
	const bb = 34
	for b := range len(xd) {
		blk := w[b*bb : b*bb+bb]
		qs := blk[l.qs : l.qs+32]
		x := xq[b*32 : b*32+32]
		var si int32
		for j := range 32 {
			si += int32(int8(qs[j])) * int32(x[j])
		}
		s := f16le(blk, l.d) * xd[b]
		sum += float32(float32(si) * s)
	}
	return sum
}

// dotQ4_0 is ggml_vec_dot_q4_0_q8_0.
func dotQ4_0(l *qLayout, w []byte, xq []int8, xd []float32) float32 {
	var sum float32
	const bb = 18
	for b := range len(xd) {
		blk := w[b*bb : b*bb+bb]
		qs := blk[l.qs : l.qs+16]
		x := xq[b*32 : b*32+32]
		var si int32
		for j := range 16 {
			si += (int32(qs[j]&0xF)-8)*int32(x[j]) + (int32(qs[j]>>4)-8)*int32(x[j+16])
		}
		s := f16le(blk, l.d) * xd[b]
		sum += float32(float32(si) * s)
	}
	return sum
}

// dotQ5_0 is ggml_vec_dot_q5_0_q8_0: 4-bit codes with a fifth bit from
// qh, offset by 16.
func dotQ5_0(l *qLayout, w []byte, xq []int8, xd []float32) float32 {
	var sum float32
	const bb = 22
	for b := range len(xd) {
		blk := w[b*bb : b*bb+bb]
		qh := binary.LittleEndian.Uint32(blk[l.qh:])
		qs := blk[l.qs : l.qs+16]
		x := xq[b*32 : b*32+32]
		var si int32
		for j := range 16 {
			lo := int32(uint32(qs[j]&0xF)|(qh>>j<<4)&0x10) - 16
			hi := int32(uint32(qs[j]>>4)|(qh>>(j+12))&0x10) - 16
			si += lo*int32(x[j]) + hi*int32(x[j+16])
		}
		s := f16le(blk, l.d) * xd[b]
		sum += float32(float32(si) * s)
	}
	return sum
}

// dotQ45K is ggml_vec_dot_q4_K_q8_K (and q5_K with its fifth bit): per
// sub-block of 32 the integer dot times its 6-bit scale, less its 6-bit
// min times the activations' sum, then scaled by d and dmin.
func dotQ45K(l *qLayout, w []byte, xq []int8, xd []float32, bsums []int32) float32 {
	bb := l.f.Bytes
	five := l.f.DType == tensor.Q5_K
	var sum float32
	for b := range len(xd) {
		blk := w[b*bb : (b+1)*bb]
		sc := blk[l.scales : l.scales+12]
		qs := blk[l.qs : l.qs+128]
		var qh []byte
		if five {
			qh = blk[l.qh : l.qh+32]
		}
		x := xq[b*256 : (b+1)*256]
		bs := bsums[b*16 : (b+1)*16]
		var sumi, mins int32
		for c := range 4 { // 64 values: two sub-blocks
			s0, m0 := tensor.ScaleMinK4(2*c, sc)
			s1, m1 := tensor.ScaleMinK4(2*c+1, sc)
			q := qs[32*c : 32*c+32]
			x0, x1 := x[64*c:64*c+32], x[64*c+32:64*c+64]
			var d0, d1 int32
			if five {
				u0, u1 := byte(1)<<(2*c), byte(2)<<(2*c)
				for j := range 32 {
					lo, hi := int32(q[j]&0xF), int32(q[j]>>4)
					if qh[j]&u0 != 0 {
						lo += 16
					}
					if qh[j]&u1 != 0 {
						hi += 16
					}
					d0 += lo * int32(x0[j])
					d1 += hi * int32(x1[j])
				}
			} else {
				for j := range 32 {
					d0 += int32(q[j]&0xF) * int32(x0[j])
					d1 += int32(q[j]>>4) * int32(x1[j])
				}
			}
			sumi += int32(s0)*d0 + int32(s1)*d1
			mins += int32(m0)*(bs[4*c]+bs[4*c+1]) + int32(m1)*(bs[4*c+2]+bs[4*c+3])
		}
		d := f16le(blk, l.d) * xd[b]
		dmin := f16le(blk, l.dmin) * xd[b]
		// Each product rounded, as the C kernel's (no fused multiply-add).
		sum += float32(d*float32(sumi)) - float32(dmin*float32(mins))
	}
	return sum
}

// dotQ6K is ggml_vec_dot_q6_K_q8_K: per 16 values the integer dot of the
// 6-bit values (less 32) times its int8 scale, scaled by d.
func dotQ6K(l *qLayout, w []byte, xq []int8, xd []float32) float32 {
	const bb = 210
	var sum float32
	for b := range len(xd) {
		blk := w[b*bb : (b+1)*bb]
		x := xq[b*256 : (b+1)*256]
		sc := blk[l.scales : l.scales+16]
		var sumi int32
		for h := range 2 { // 128 values
			ql := blk[l.ql+64*h : l.ql+64*h+64]
			qh := blk[l.qh+32*h : l.qh+32*h+32]
			xs := x[128*h : 128*h+128]
			var acc [8]int32 // per 16 values of this half
			for j := range 32 {
				q1 := int32(ql[j]&0xF|(qh[j]&3)<<4) - 32
				q2 := int32(ql[j+32]&0xF|(qh[j]>>2&3)<<4) - 32
				q3 := int32(ql[j]>>4|(qh[j]>>4&3)<<4) - 32
				q4 := int32(ql[j+32]>>4|(qh[j]>>6&3)<<4) - 32
				g := j / 16
				acc[g] += q1 * int32(xs[j])
				acc[g+2] += q2 * int32(xs[j+32])
				acc[g+4] += q3 * int32(xs[j+64])
				acc[g+6] += q4 * int32(xs[j+96])
			}
			for g, a := range acc {
				sumi += int32(int8(sc[8*h+g])) * a
			}
		}
		d := f16le(blk, l.d) * xd[b]
		sum += float32(d * float32(sumi))
	}
	return sum
}

// checkQuant checks a quantized matrix's storage against its shape.
func checkQuant(fn string, w *tensor.Mat) {
	rb, ok := w.DType.RowBytes(w.Cols)
	if !ok || len(w.Q) != w.Rows*rb {
		panic(fmt.Sprintf("cpu: %s: %v weight of %dx%d has %d bytes", fn, w.DType, w.Rows, w.Cols, len(w.Q)))
	}
}

// rowQuant dequantizes row r of a quantized w into dst.
func rowQuant(dst []float32, w *tensor.Mat, r int) {
	rb, _ := w.DType.RowBytes(w.Cols)
	if err := tensor.DequantizeRow(dst[:w.Cols], w.DType, w.Q[r*rb:(r+1)*rb]); err != nil {
		panic("cpu: RowF32: " + err.Error())
	}
}
