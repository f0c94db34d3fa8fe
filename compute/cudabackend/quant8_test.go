package cudabackend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

// cpuQ8 is the CPU backend's quantization of activations, transcribed from
// kernels/cpu/quant.go's pure-Go quantizers (quantizeQ8_0, quantizeQ8_K:
// ggml's quantize_row_q8_0 and quantize_row_q8_K), which that package's
// TestQuantizeActivationsMatchGo pins its C kernels to. group is 32 or
// 256; sums is nil for 32.
func cpuQ8(x []float32, group int) (qs []int8, d []float32, sums []int32) {
	qs, d = make([]int8, len(x)), make([]float32, len(x)/group)
	if group == 32 {
		for b := range d {
			v := x[32*b : 32*b+32]
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
				qs[32*b+j] = int8(math.Round(float64(f * id)))
			}
			d[b] = tensor.F16ToF32(tensor.F32ToF16(s))
		}
		return qs, d, nil
	}
	sums = make([]int32, len(x)/16)
	for b := range d {
		v := x[256*b : 256*b+256]
		var amax, mx float32
		for _, f := range v {
			if a := float32(math.Abs(float64(f))); a > amax {
				amax, mx = a, f
			}
		}
		if amax == 0 {
			continue
		}
		iscale := -127 / mx
		for j, f := range v {
			q := int8(min(127, int(math.RoundToEven(float64(iscale*f)))))
			qs[256*b+j] = q
			sums[b*16+j/16] += int32(q)
		}
		d[b] = 1 / iscale
	}
	return qs, d, sums
}

// q8Inputs returns n rows of cols activations: normal values, with blocks
// that test the quantizers' edges: all zeros, a largest magnitude held by
// two values of opposite signs (the first wins), values that scale to
// halves (rounded away from zero by q8_0, to even by q8_K), and tiny
// values whose q8_0 scale is an f16 subnormal.
func q8Inputs(r *rand.Rand, n, cols int) []float32 {
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for b := 0; b+32 <= len(x); b += 32 {
		v := x[b : b+32]
		switch (b / 32) % 7 {
		case 1:
			clear(v)
		case 2:
			v[3], v[20] = -3, 3
			if b%256 == 64 {
				// The block's largest in a q8_K group too.
				v[3], v[20] = -9, 9
			}
		case 3:
			for j := range v {
				v[j] = float32(j-16) / 2 // scaled by 127/8: some halves
			}
			v[1] = 0.5
			v[2] = -1.5
		case 4:
			for j := range v {
				v[j] *= 1e-6
			}
		}
	}
	return x
}

// The device's 8-bit activations (quant_x_q8_0, quant_x_q8_k) are the CPU
// backend's bit for bit: codes, scales and the K types' sums of 16, for 1,
// 3 and 8 rows of the 0.5B and 7B models' row lengths and a row of edge
// cases (q8Inputs).
func TestQuantXMatchesCPU(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(35, 8))
	for _, tc := range []struct {
		dt      tensor.DType
		n, cols int
	}{
		{tensor.Q8_0, 1, 896}, {tensor.Q8_0, 3, 4864}, {tensor.Q4_0, 8, 3584}, {tensor.Q5_0, 2, 32},
		{tensor.Q4_K, 1, 3584}, {tensor.Q6_K, 3, 4864}, {tensor.Q5_K, 8, 256}, {tensor.Q4_K, 2, 18944},
	} {
		t.Run(fmt.Sprintf("%v/n%d/%d", tc.dt, tc.n, tc.cols), func(t *testing.T) {
			x := q8Inputs(r, tc.n, tc.cols)
			f := tc.dt.Format()
			w, err := gpu.Upload(tensor.Mat{DType: tc.dt, Rows: 1, Cols: tc.cols, Q: quantWeight(r, f, 1, tc.cols)})
			if err != nil {
				t.Fatal(err)
			}
			xb, out := gpu.Alloc(len(x)), gpu.Alloc(tc.n)
			gpu.Write(xb, x)
			gpu.MatMul(out, xb, tc.n, w)
			raw := make([]float32, gpu.qxBytes/4)
			gpu.mu.Lock()
			gpu.read(raw, gpu.qx)
			gpu.mu.Unlock()
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
			bytes := unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), 4*len(raw))
			group := q8Group(tc.dt)
			qs, d, sums := cpuQ8(x, group)
			do, so, _ := q8Layout(tc.dt, tc.n, tc.cols)
			for i, q := range qs {
				if g := int8(bytes[i]); g != q {
					t.Fatalf("code %d (row %d, value %d): %d on the device, %d on the CPU (x %g)", i, i/tc.cols, i%tc.cols, g, q, x[i])
				}
			}
			for i, v := range d {
				if g := math.Float32frombits(binary.LittleEndian.Uint32(bytes[do+4*i:])); g != v {
					t.Fatalf("scale %d: %g on the device, %g on the CPU", i, g, v)
				}
			}
			for i, v := range sums {
				if g := int32(binary.LittleEndian.Uint32(bytes[so+4*i:])); g != v {
					t.Fatalf("sum %d: %d on the device, %d on the CPU", i, g, v)
				}
			}
		})
	}
}

// quantProduct returns x (n rows of cols) times the quantized w (rows x
// cols, blocks q) transposed, as backend b computes it (the CPU backend's
// quantized kernels quantize x to 8 bits per group and multiply in
// integers), failing t on an upload or a recorded backend error.
func quantProduct(t *testing.T, b compute.Backend, dt tensor.DType, q []byte, x []float32, n, rows, cols int) []float32 {
	t.Helper()
	w, err := b.Upload(tensor.Mat{DType: dt, Rows: rows, Cols: cols, Q: q})
	if err != nil {
		t.Fatal(err)
	}
	xb, out := b.Alloc(len(x)), b.Alloc(n*rows)
	b.Write(xb, x)
	b.MatMul(out, xb, n, w)
	got := make([]float32, n*rows)
	b.Read(got, out)
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// q8Mag returns, for each output of x times w transposed, the sum over
// its values of |w| |x as quantized| (for Q4_K and Q5_K, |d sc q| + |dmin
// m| in place of |w|: their block terms subtract the two), which bounds
// the sum of the magnitudes of the block terms the CPU and the device
// add; and the float64 product over the dequantized weights and the
// quantized activations.
func q8Mag(t *testing.T, dt tensor.DType, w []byte, x []float32, n, rows, cols int) (mag, quant []float64) {
	t.Helper()
	group := q8Group(dt)
	qs, d, _ := cpuQ8(x, group)
	f := dt.Format()
	rb, _ := dt.RowBytes(cols)
	// Q4_K and Q5_K: dequantized with dmin zeroed (d sc q) and with d
	// zeroed (-dmin m).
	var wq, wm []byte
	if dt == tensor.Q4_K || dt == tensor.Q5_K {
		wq, wm = append([]byte(nil), w...), append([]byte(nil), w...)
		for b := 0; b < len(w); b += f.Bytes {
			for _, fl := range f.Fields {
				switch fl.Name {
				case "dmin":
					wq[b+fl.Offset], wq[b+fl.Offset+1] = 0, 0
				case "d":
					wm[b+fl.Offset], wm[b+fl.Offset+1] = 0, 0
				}
			}
		}
	}
	deq := func(dst []float32, src []byte, r int) {
		if err := tensor.DequantizeRow(dst, dt, src[r*rb:(r+1)*rb]); err != nil {
			t.Fatal(err)
		}
	}
	wf, a1, a2 := make([]float32, cols), make([]float32, cols), make([]float32, cols)
	mag, quant = make([]float64, n*rows), make([]float64, n*rows)
	for r := range rows {
		deq(wf, w, r)
		if wq != nil {
			deq(a1, wq, r)
			deq(a2, wm, r)
		}
		for i := range n {
			var m, s float64
			for c, v := range wf {
				k := i*cols + c
				xq := float64(qs[k]) * float64(d[k/group])
				a := math.Abs(float64(v))
				if wq != nil {
					a = math.Abs(float64(a1[c])) + math.Abs(float64(a2[c]))
				}
				m += a * math.Abs(xq)
				s += float64(v) * xq
			}
			mag[i*rows+r], quant[i*rows+r] = m, s
		}
	}
	return mag, quant
}

// matvec_q8 on the emulated device against the CPU backend's quantized
// products: the same integer dot products of the same codes, scaled as
// kernels/cpu's Go loops scale them (each block's term, its integer dot
// times the scales, every product rounded once), while its SIMD kernels
// split a 32-value block's integer sum over 8 lanes, each converted and
// multiplied-added on its own, and every kernel adds the nb terms of a
// row in its own order: within 2 (nb+8) 2^-24 of the sum of the terms'
// magnitudes (the first-order bound of two float32 sums of the same nb
// terms, 8 lanes' partial products more on the CPU). Against
// float64 over the dequantized weights: within 1e-5 of sum |w x| of the
// product with the activations as quantized, and within 0.02 of it of the
// product with x itself (8-bit activations), as kernels/cpu's
// TestQuantMatMul bounds the CPU. Shapes: the 0.5B and 7B models' row
// lengths (896 only for the 32-value types; the K types need whole 256s),
// 1 to 8 input rows a launch and 11 (two launches), output rows not a
// multiple of matvec_q8's 8 warps, and rows whose units do not fill the
// warp's last step.
func TestQuantMatVecMatchesCPU(t *testing.T) {
	gpu, fd := newFakeBackend(t, Options{})
	cpu := cpuF32(t, 1)
	r := rand.New(rand.NewPCG(35, 9))
	for i := range tensor.Formats {
		f := &tensor.Formats[i]
		shapes := []struct{ n, rows, cols int }{
			{1, 13, f.Block}, {3, 9, f.Block}, {1, 9, 3584}, {8, 3, 4864}, {11, 2, 18944}, {2, 17, 3584},
		}
		if f.Block == 32 {
			shapes = append(shapes, struct{ n, rows, cols int }{3, 5, 896}, struct{ n, rows, cols int }{1, 7, 96})
		}
		for _, tc := range shapes {
			t.Run(fmt.Sprintf("%s/n%d/%dx%d", f.Name, tc.n, tc.rows, tc.cols), func(t *testing.T) {
				q := quantWeight(r, f, tc.rows, tc.cols)
				x := q8Inputs(r, tc.n, tc.cols)
				got := quantProduct(t, gpu, f.DType, q, x, tc.n, tc.rows, tc.cols)
				want := quantProduct(t, cpu, f.DType, q, x, tc.n, tc.rows, tc.cols)
				mag, quant := q8Mag(t, f.DType, q, x, tc.n, tc.rows, tc.cols)
				exact, emag := quantRef(t, f.DType, q, x, tc.n, tc.rows, tc.cols)
				nb := tc.cols / f.Block
				var worst float64
				for k := range got {
					d := math.Abs(float64(got[k]) - float64(want[k]))
					if tol := 2 * float64(nb+8) * 0x1p-24 * mag[k] * 1.01; !(d <= tol+1e-30) {
						t.Fatalf("out[%d] = %g, the CPU's %g: |difference| %.3g over the bound %.3g", k, got[k], want[k], d, tol)
					}
					if mag[k] > 0 {
						worst = max(worst, d/(float64(nb+8)*0x1p-24*mag[k]))
					}
					if dq := math.Abs(float64(got[k]) - quant[k]); !(dq <= 1e-5*emag[k]+1e-9) {
						t.Fatalf("out[%d] = %g, float64 over the quantized activations %g (sum |w x| %.3g)", k, got[k], quant[k], emag[k])
					}
					if de := math.Abs(float64(got[k]) - exact[k]); !(de <= 0.02*emag[k]+1e-9) {
						t.Fatalf("out[%d] = %g, float64 %g (sum |w x| %.3g)", k, got[k], exact[k], emag[k])
					}
				}
				t.Logf("worst |device - CPU| %.2f (nb+8) 2^-24 of the terms' magnitudes", worst)
			})
		}
	}
	if c := fd.kernelCounts(); !strings.Contains(c, "quant_x_q8_k:") || !strings.Contains(c, "matvec_q8_q6_k:") {
		t.Errorf("ran %s, want quant_x and matvec_q8", c)
	}
}

// goTerm is one block's term of kernels/cpu's Go loops (dotQ8_0, dotQ4_0,
// dotQ5_0, dotQ45K, dotQ6K), transcribed: the block blk of format f
// times the quantized activations xq (its 32 or 256 codes), xd (their
// scale) and, for the K types, sums (their 16 sums of 16).
func goTerm(f *tensor.QuantFormat, blk []byte, xq []int8, xd float32, sums []int32) float32 {
	off := map[string]int{}
	for _, fl := range f.Fields {
		off[fl.Name] = fl.Offset
	}
	h16 := func(o int) float32 { return tensor.F16ToF32(binary.LittleEndian.Uint16(blk[o:])) }
	var si int32
	switch f.DType {
	case tensor.Q8_0:
		for j := range 32 {
			si += int32(int8(blk[off["qs"]+j])) * int32(xq[j])
		}
	case tensor.Q4_0:
		for j := range 16 {
			q := blk[off["qs"]+j]
			si += (int32(q&15)-8)*int32(xq[j]) + (int32(q>>4)-8)*int32(xq[j+16])
		}
	case tensor.Q5_0:
		qh := binary.LittleEndian.Uint32(blk[off["qh"]:])
		for j := range 16 {
			q := blk[off["qs"]+j]
			lo := int32(uint32(q&15)|(qh>>j<<4)&0x10) - 16
			hi := int32(uint32(q>>4)|(qh>>(j+12))&0x10) - 16
			si += lo*int32(xq[j]) + hi*int32(xq[j+16])
		}
	case tensor.Q4_K, tensor.Q5_K:
		var mins int32
		sc := blk[off["scales"] : off["scales"]+12]
		for s := range 8 {
			scale, m := tensor.ScaleMinK4(s, sc)
			var dot int32
			for l := range 32 {
				q := int32(blk[off["qs"]+32*(s/2)+l]>>(4*(s&1))) & 15
				if f.DType == tensor.Q5_K {
					q += int32(blk[off["qh"]+l]>>s&1) << 4
				}
				dot += q * int32(xq[32*s+l])
			}
			si += int32(scale) * dot
			mins += int32(m) * (sums[2*s] + sums[2*s+1])
		}
		d, dmin := h16(off["d"])*xd, h16(off["dmin"])*xd
		return float32(d*float32(si)) - float32(dmin*float32(mins))
	case tensor.Q6_K:
		for v := range 256 {
			h, j := v/128, v%128
			t, l := j/32, j%32
			q := int32(blk[off["ql"]+64*h+32*(t&1)+l]>>(4*(t>>1)))&15 | int32(blk[off["qh"]+32*h+l]>>(2*t)&3)<<4
			si += int32(int8(blk[off["scales"]+8*h+2*t+l/16])) * (q - 32) * int32(xq[v])
		}
		return float32(h16(off["d"]) * xd * float32(si))
	}
	return float32(float32(si) * (h16(off["d"]) * xd))
}

// A row of one block comes out of matvec_q8 as kernels/cpu's Go loops
// compute its term, bit for bit: the same codes, integer dot product and
// rounded scale products (the device's warp sum adds zeros to it).
func TestQuantMatVecTermsMatchGo(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(35, 10))
	for i := range tensor.Formats {
		f := &tensor.Formats[i]
		const n, rows = 5, 11
		cols := f.Block
		q := quantWeight(r, f, rows, cols)
		x := q8Inputs(r, n, cols)
		got := quantProduct(t, gpu, f.DType, q, x, n, rows, cols)
		qs, d, sums := cpuQ8(x, q8Group(f.DType))
		for j := range n {
			var s []int32
			if sums != nil {
				s = sums[16*j : 16*j+16]
			}
			for r := range rows {
				want := goTerm(f, q[r*f.Bytes:(r+1)*f.Bytes], qs[j*cols:(j+1)*cols], d[j], s)
				if g := got[j*rows+r]; g != want {
					t.Errorf("%s: input %d row %d: %g (%#x), the Go loops' %g (%#x)", f.Name, j, r, g, math.Float32bits(g), want, math.Float32bits(want))
				}
			}
		}
	}
}

// Consecutive products of one x share its quantization (one quant_x for
// two matvec_q8 launches); a host write of x, a kernel that writes it, or
// another x between them makes the next product quantize again, and every
// result is the one a lone product gives.
func TestQuantXShared(t *testing.T) {
	gpu, fd := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(35, 11))
	const rows, cols = 9, 512
	var ws []compute.Weight
	var qs [][]byte
	for range 2 {
		q := quantWeight(r, tensor.Q4_K.Format(), rows, cols)
		w, err := gpu.Upload(tensor.Mat{DType: tensor.Q4_K, Rows: rows, Cols: cols, Q: q})
		if err != nil {
			t.Fatal(err)
		}
		ws, qs = append(ws, w), append(qs, q)
	}
	x1, x2 := q8Inputs(r, 1, cols), q8Inputs(r, 1, cols)
	xb, yb, out := gpu.Alloc(cols), gpu.Alloc(cols), gpu.Alloc(rows)
	gpu.Write(yb, x2)
	// want returns a lone product of x by weight i (a fresh backend).
	lone, _ := newFakeBackend(t, Options{})
	want := func(i int, x []float32) []float32 {
		return quantProduct(t, lone, tensor.Q4_K, qs[i], x, 1, rows, cols)
	}
	check := func(step string, i int, x []float32, quants int) {
		t.Helper()
		count := func() (n int) {
			for _, k := range fd.launched {
				if k == "quant_x_q8_k" {
					n++
				}
			}
			return n
		}
		n0 := count()
		gpu.MatMul(out, xb, 1, ws[i])
		got := make([]float32, rows)
		gpu.Read(got, out)
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
		if n := count() - n0; n != quants {
			t.Errorf("%s: %d quant_x launches, want %d", step, n, quants)
		}
		for k, v := range want(i, x) {
			if got[k] != v {
				t.Fatalf("%s: out[%d] = %g, a lone product's %g", step, k, got[k], v)
			}
		}
	}
	gpu.Write(xb, x1)
	check("first product", 0, x1, 1)
	check("same x, next weight", 1, x1, 0)
	gpu.Write(xb, x2)
	check("after a host write of x", 0, x2, 1)
	check("same x again", 1, x2, 0)
	gpu.Add(xb, yb) // x2 + x2 in place, by a kernel
	sum := make([]float32, cols)
	for c := range sum {
		sum[c] = x2[c] + x2[c]
	}
	check("after a kernel wrote x", 0, sum, 1)
}
