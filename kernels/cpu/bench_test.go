package cpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/cputime"
	"github.com/kakeya-ai/kakeya/tensor"
)

// benchBF16 fills a rows x cols BF16 matrix with values in ±[1, 2) from a
// xorshift generator: real random draws would dominate the lm_head setup.
func benchBF16(rows, cols int) tensor.Mat {
	u := make([]uint16, rows*cols)
	s := uint64(0x9e3779b97f4a7c15)
	for i := range u {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		u[i] = 0x3f80 | uint16(s)&0x807f
	}
	return tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, U16: u}
}

// Qwen2.5-0.5B projection shapes as [out, in].
var qwenShapes = []struct {
	name       string
	rows, cols int
}{
	{"q_o_896x896", 896, 896},
	{"kv_128x896", 128, 896},
	{"gate_up_4864x896", 4864, 896},
	{"down_896x4864", 896, 4864},
	{"lm_head_151936x896", 151936, 896},
}

// BenchmarkMatMul reports GEMV (n=1) as weight bytes streamed per second and
// GEMM (n=128) as GFLOP/s, for each kernel set this machine runs (with
// AVX-512, also the AVX2 loops it replaces for bf16 weights) at f32, and
// with VDPBF16PS at bf16 as well.
func BenchmarkMatMul(b *testing.B) {
	best := bestKernels()
	kernels := []*kernelSet{best}
	if best.avx512 {
		k := *best
		k.name, k.avx512, k.dotBF16 = "avx2c", false, false
		kernels = append(kernels, &k)
	}
	for _, k := range kernels {
		for _, prec := range []Precision{PrecisionF32, PrecisionBF16} {
			if prec == PrecisionBF16 && !k.dotBF16 {
				continue // the f32 kernels on rounded activations: no faster
			}
			p := newPool(0, k, prec)
			for _, sh := range qwenShapes {
				w := NewMatrix(benchBF16(sh.rows, sh.cols))
				for _, n := range []int{1, 4, 16, 64, 128} {
					b.Run(fmt.Sprintf("%s/%v/%s/n=%d", k.name, prec, sh.name, n), func(b *testing.B) {
						x := make([]float32, n*sh.cols)
						for i := range x {
							x[i] = float32(i%7) - 3
						}
						out := make([]float32, n*sh.rows)
						p.MatMul(out, x, n, w) // packs the panels, once
						if n == 1 {
							b.SetBytes(int64(sh.rows * sh.cols * 2))
						}
						cpu0 := cputime.Seconds()
						for b.Loop() {
							p.MatMul(out, x, n, w)
						}
						if n > 1 {
							flops := 2 * float64(n) * float64(sh.rows) * float64(sh.cols)
							b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
							// Per second of the process's CPU time (all
							// threads), which other work on a loaded
							// machine does not take from.
							if cpu := cputime.Seconds() - cpu0; cpu > 0 {
								b.ReportMetric(flops*float64(b.N)/cpu/1e9, "GFLOP/cpu-s")
							}
						}
					})
				}
			}
			p.Close()
		}
	}
}

const memBenchBytes = 256 << 20

type memTask struct {
	dst, src []float32
	sums     []float32
}

func (m *memTask) Run(lo, hi int) {
	if m.dst != nil {
		copy(m.dst[lo:hi], m.src[lo:hi])
		return
	}
	s := Dot(m.src[lo:hi], m.src[lo:hi]) // one read stream
	m.sums[lo*len(m.sums)/len(m.src)] += s
}

// BenchmarkMemCopy measures copy bandwidth (bytes copied per second; the
// memory traffic is twice that) on one goroutine and across the pool.
func BenchmarkMemCopy(b *testing.B) {
	src := make([]float32, memBenchBytes/4)
	dst := make([]float32, memBenchBytes/4)
	for i := range src {
		src[i] = float32(i)
	}
	copy(dst, src)
	for _, threads := range []int{1, 0} {
		p := NewPool(threads)
		b.Run(fmt.Sprintf("threads=%d", p.Threads()), func(b *testing.B) {
			b.SetBytes(memBenchBytes)
			t := &memTask{dst: dst, src: src}
			for b.Loop() {
				p.Run(len(src), t)
			}
		})
		p.Close()
	}
}

// BenchmarkMemRead measures read-only streaming bandwidth (a sum of squares
// over the buffer): the ceiling a memory-bound GEMV can approach.
func BenchmarkMemRead(b *testing.B) {
	src := make([]float32, memBenchBytes/4)
	for i := range src {
		src[i] = float32(i & 15)
	}
	for _, threads := range []int{1, 0} {
		p := NewPool(threads)
		b.Run(fmt.Sprintf("threads=%d", p.Threads()), func(b *testing.B) {
			b.SetBytes(memBenchBytes)
			t := &memTask{src: src, sums: make([]float32, 64)}
			for b.Loop() {
				p.Run(len(src), t)
			}
		})
		p.Close()
	}
}

// BenchmarkDecodeVsRead alternates an lm_head GEMV with a read of a buffer of
// the same size, so the ratio of the two bandwidths holds even when other
// work on the machine makes each figure drift.
func BenchmarkDecodeVsRead(b *testing.B) {
	p := NewPool(0)
	defer p.Close()
	m := benchBF16(151936, 896)
	w := NewMatrix(m)
	x := make([]float32, 896)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	out := make([]float32, m.Rows)
	bytes := len(m.U16) * 2
	read := &memTask{src: make([]float32, bytes/4), sums: make([]float32, 64)}
	for i := range read.src {
		read.src[i] = float32(i & 15)
	}
	t0 := time.Now()
	p.MatMul(out, x, 1, w) // packs the panels, once
	b.ReportMetric(time.Since(t0).Seconds()*1e3, "first_ms")
	var tg, tr time.Duration
	for b.Loop() {
		t0 := time.Now()
		p.MatMul(out, x, 1, w)
		t1 := time.Now()
		p.Run(len(read.src), read)
		tr += time.Since(t1)
		tg += t1.Sub(t0)
	}
	gemv := float64(bytes) * float64(b.N) / tg.Seconds() / 1e9
	rd := float64(bytes) * float64(b.N) / tr.Seconds() / 1e9
	b.ReportMetric(gemv, "gemv_GB/s")
	b.ReportMetric(rd, "read_GB/s")
	b.ReportMetric(gemv/rd, "gemv/read")
}

// BenchmarkOps times the element-wise ops at Qwen2.5-0.5B widths.
func BenchmarkOps(b *testing.B) {
	vec := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%13)*0.25 - 1.5
		}
		return x
	}
	x, w := vec(896), vec(896)
	gate, up := vec(4864), vec(4864)
	scores := vec(4096)
	head, cos, sin := vec(64), vec(32), vec(32)
	b.Run("RMSNorm/896", func(b *testing.B) {
		out := make([]float32, 896)
		for b.Loop() {
			RMSNorm(out, x, w, 1e-6)
		}
	})
	b.Run("SiLUMul/4864", func(b *testing.B) {
		g := make([]float32, len(gate))
		for b.Loop() {
			copy(g, gate)
			SiLUMul(g, up)
		}
	})
	b.Run("Softmax/4096", func(b *testing.B) {
		s := make([]float32, len(scores))
		for b.Loop() {
			copy(s, scores)
			Softmax(s)
		}
	})
	b.Run("RoPE/64", func(b *testing.B) {
		for b.Loop() {
			RoPE(head, cos, sin)
		}
	})
	b.Run("Dot/896", func(b *testing.B) {
		var s float32
		for b.Loop() {
			s += Dot(x, w)
		}
		_ = s
	})
}

// BenchmarkMixBlockT times the key side of kakeya-pc decode: a 64-token
// block's 40 latents mixed into rows of 64 values by the basis, from the
// mean row, then rotated (RoPE), for each kernel set this machine runs;
// and the value side's first sum (MixBlock): a GQA group's 7 weight rows
// over the block's 64 latent rows of 48.
func BenchmarkMixBlockT(b *testing.B) {
	const m, n, d = 64, 40, 64
	vec := func(k int) []float32 {
		x := make([]float32, k)
		for i := range x {
			x[i] = float32(i%29)*0.125 - 1.75
		}
		return x
	}
	p, vals, base, cos, sin := vec(n*m), vec(n*d), vec(d), vec(m*d/2), vec(m*d/2)
	o := make([]float32, m*d)
	b.Run("best/rope", func(b *testing.B) {
		for b.Loop() {
			MixBlockTRoPE(o, m, base, p, m, vals, n, d, cos, sin)
		}
	})
	b.Run("best/plain", func(b *testing.B) {
		for b.Loop() {
			MixBlockT(o, m, base, p, m, vals, n, d)
		}
	})
	acc, w, lat := make([]float32, 7*48), vec(7*64), vec(64*48)
	b.Run("best/values", func(b *testing.B) {
		for b.Loop() {
			MixBlock(acc, 7, w, 64, lat, 64, 48)
		}
	})
	if hasAVX2C {
		b.Run("avx2/values", func(b *testing.B) {
			for b.Loop() {
				mixAVX2(acc, 7, w, 64, lat, 64, 48)
			}
		})
		b.Run("avx2/rope", func(b *testing.B) {
			for b.Loop() {
				mixTRoPEAVX2(o, m, base, p, m, vals, n, d, cos, sin)
			}
		})
		b.Run("avx2/plain", func(b *testing.B) {
			for b.Loop() {
				mixTAVX2(o, m, base, p, m, vals, n, d)
			}
		})
	}
}

// BenchmarkUnpackPlanes times UnpackPlanes on a 64-token block of
// kakeya-pc code planes, per kernel this machine runs: 16 planes of 6 bits
// (the key cap coded=16, which codes its components at the widest) and the
// mixed widths of the preset's values (52 planes of 1 to 6 bits).
func BenchmarkUnpackPlanes(b *testing.B) {
	const n = 64
	var levels [PlaneLevels]float32
	for i := range levels {
		levels[i] = float32(i%37)*0.25 - 4
	}
	sets := []struct {
		name   string
		widths []uint8
	}{
		{"w6x16", bytes.Repeat([]byte{6}, 16)},
		{"mixed52", slices.Concat(bytes.Repeat([]byte{1}, 12), bytes.Repeat([]byte{2}, 17), bytes.Repeat([]byte{3}, 11),
			bytes.Repeat([]byte{4}, 9), bytes.Repeat([]byte{5}, 3))},
	}
	kernels := []struct {
		name   string
		unpack func(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32)
	}{{"best", UnpackPlanes}}
	if hasAVX2C && hasAVX512 {
		kernels = append(kernels, struct {
			name   string
			unpack func(dst []float32, ldd, n int, src []byte, widths []uint8, scales []float32, levels *[PlaneLevels]float32)
		}{"avx2", unpackPlanesAVX2})
	}
	for _, s := range sets {
		size := 0
		for _, w := range s.widths {
			size += PlaneBytes(n, int(w))
		}
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*97 + 13)
		}
		scales := make([]float32, len(s.widths))
		for i := range scales {
			scales[i] = 0.5 + float32(i)/64
		}
		dst := make([]float32, len(s.widths)*n)
		for _, k := range kernels {
			b.Run(k.name+"/"+s.name, func(b *testing.B) {
				for b.Loop() {
					k.unpack(dst, n, n, src, s.widths, scales, &levels)
				}
			})
		}
	}
}

// BenchmarkPCRun times a run of 16 kakeya-pc blocks of 64 tokens (d = 64)
// through PCScoreRun (2 query rows, a GQA group of ref-qwen2-6m) and
// PCAddRun: keys capped at 16 components of 6 bits (48 means), the
// preset's keys (47 components of mixed widths, 2 means) and its values
// (52 and 2), per block.
func BenchmarkPCRun(b *testing.B) {
	const nb, n, d, m = 16, 64, 64, 2
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct {
		name   string
		c, mc  int
		widths []uint8
	}{
		{"coded16", 16, 48, bytes.Repeat([]byte{6}, 16)},
		{"keys47", 47, 2, slices.Concat(bytes.Repeat([]byte{1}, 9), bytes.Repeat([]byte{2}, 13), bytes.Repeat([]byte{3}, 10),
			bytes.Repeat([]byte{4}, 7), bytes.Repeat([]byte{5}, 5), bytes.Repeat([]byte{6}, 3))},
		{"values52", 52, 2, slices.Concat(bytes.Repeat([]byte{1}, 12), bytes.Repeat([]byte{2}, 17), bytes.Repeat([]byte{3}, 11),
			bytes.Repeat([]byte{4}, 9), bytes.Repeat([]byte{5}, 3))},
	} {
		r := newPCRun(rng, pcRunCase{nb, n, d, s.c, s.mc, false})
		r.Widths, r.PlaneBytes = s.widths, 0
		for _, w := range s.widths {
			r.PlaneBytes += PlaneBytes(n, int(w))
		}
		r.Planes = make([]byte, nb*r.PlaneBytes)
		for i := range r.Planes {
			r.Planes[i] = byte(rng.Uint32())
		}
		if !PCRunSupported(n, d, s.c) {
			b.Skip("no run kernel at this level")
		}
		work := make([]float32, PCRunWorkLen(n, d, s.c))
		q, cos, sin := randVec(rng, m*d), randVec(rng, nb*n*d/2), randVec(rng, nb*n*d/2)
		sc := make([]float32, m*nb*n)
		b.Run("scores/"+s.name, func(b *testing.B) {
			for b.Loop() {
				PCScoreRun(r, nb, sc, nb*n, q, m, 0.125, cos, sin, 0, n, work)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nb), "ns/block")
		})
		acc, macc, wsum := make([]float32, PCRunAccLen(m, s.c)), make([]float32, m*s.mc), make([]float32, m)
		b.Run("values/"+s.name, func(b *testing.B) {
			for b.Loop() {
				PCAddRun(r, nb, sc, nb*n, m, 0, n, acc, macc, wsum, work)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nb), "ns/block")
		})
	}
}
