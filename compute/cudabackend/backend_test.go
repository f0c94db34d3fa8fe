package cudabackend

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tensor"
)

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// upload puts host values into a new buffer of b.
// randMat returns a rows x cols matrix of random values stored as dt.
func randMat(r *rand.Rand, dt tensor.DType, rows, cols int) tensor.Mat {
	m := tensor.Mat{DType: dt, Rows: rows, Cols: cols}
	for _, v := range randFloats(r, rows*cols) {
		switch dt {
		case tensor.F32:
			m.F32 = append(m.F32, v)
		case tensor.BF16:
			m.U16 = append(m.U16, tensor.F32ToBF16(v))
		case tensor.F16:
			m.U16 = append(m.U16, tensor.F32ToF16(v))
		}
	}
	return m
}

// matMulOn uploads m to b and returns x (n rows) times it, read back.
func matMulOn(t *testing.T, b compute.Backend, m tensor.Mat, x []float32, n int) []float32 {
	t.Helper()
	w, err := b.Upload(m)
	if err != nil {
		t.Fatal(err)
	}
	out := b.Alloc(n * m.Rows)
	b.MatMul(out, upload(b, x), n, w)
	return read(b, out)
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

// Every operation of the backend, on the fake driver and the emulated
// kernels, gives the CPU backend's results.
func TestOpsMatchCPU(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	host := cpubackend.New(1)
	defer host.Close()
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols, heads, d = 3, 48, 3, 16
	x, y := randFloats(r, rows*cols), randFloats(r, rows*cols)
	w := randFloats(r, cols)
	cos, sin := randFloats(r, 8*d/2), randFloats(r, 8*d/2)

	for _, tc := range []struct {
		name string
		op   func(b compute.Backend, x, y, w, cos, sin compute.Buffer)
	}{
		{"Add", func(b compute.Backend, x, y, _, _, _ compute.Buffer) { b.Add(x, y) }},
		{"SiLUMul", func(b compute.Backend, x, y, _, _, _ compute.Buffer) { b.SiLUMul(x, y) }},
		{"AddRows", func(b compute.Backend, x, _, w, _, _ compute.Buffer) { b.AddRows(x, w, rows) }},
		{"RMSNorm", func(b compute.Backend, x, y, w, _, _ compute.Buffer) { b.RMSNorm(x, y, w, rows, 1e-5) }},
		{"RMSNorm in place", func(b compute.Backend, x, _, w, _, _ compute.Buffer) { b.RMSNorm(x, x, w, rows, 1e-5) }},
		{"RoPE", func(b compute.Backend, x, _, _, cos, sin compute.Buffer) { b.RoPE(x, rows, heads, d, 4, cos, sin) }},
		{"slices", func(b compute.Backend, x, y, _, _, _ compute.Buffer) {
			b.Add(x.Slice(cols, 2*cols), y.Slice(5, 5+cols))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got, want []float32
			for _, b := range []compute.Backend{gpu, host} {
				bx := upload(b, x)
				tc.op(b, bx, upload(b, y), upload(b, w), upload(b, cos), upload(b, sin))
				if b == host {
					want = read(b, bx)
				} else {
					got = read(b, bx)
				}
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
			if dd := maxAbsDiff(got, want); dd > 1e-5 || math.IsNaN(dd) {
				t.Errorf("max abs difference %.3g from the CPU backend", dd)
			}
		})
	}
}

// MatMul (both kernels) and Embed, for every weight dtype.
func TestMatMulEmbedMatchCPU(t *testing.T) {
	needKernels(t, "matvec_f32", "matvec_bf16", "matvec_f16", "matmul_f32", "matmul_bf16", "matmul_f16", "embed_f16")
	gpu, _ := newFakeBackend(t, Options{MatMul: "f32"}) // the float32 kernels; gemm_test.go tests the 16-bit ones
	host := cpubackend.New(1)
	defer host.Close()
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 24, 40
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		m := randMat(r, dt, rows, cols)
		for _, n := range []int{1, maxMatVecRows, maxMatVecRows + 3} {
			t.Run(dt.String()+"/"+map[bool]string{true: "matvec", false: "matmul"}[n <= maxMatVecRows], func(t *testing.T) {
				x := randFloats(r, n*cols)
				got, want := matMulOn(t, gpu, m, x, n), matMulOn(t, host, m, x, n)
				if dd := maxAbsDiff(got, want); dd > 1e-4 || math.IsNaN(dd) {
					t.Errorf("n=%d: max abs difference %.3g from the CPU backend", n, dd)
				}
			})
		}
		t.Run(dt.String()+"/embed", func(t *testing.T) {
			ids := []int{3, 0, 23, 3}
			var got, want []float32
			for _, b := range []compute.Backend{gpu, host} {
				w, err := b.Upload(m)
				if err != nil {
					t.Fatal(err)
				}
				out := b.Alloc(len(ids) * cols)
				b.Embed(out, w, ids)
				if b == host {
					want = read(b, out)
				} else {
					got = read(b, out)
				}
			}
			if dd := maxAbsDiff(got, want); dd != 0 {
				t.Errorf("embedded rows differ by %.3g", dd)
			}
		})
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
}

// The block store keeps hot rows (float32, or bf16 rounded as the CPU
// rounds them), reads back encoded parts through their decoder, and reuses
// the device memory of released parts.
func TestBlockStore(t *testing.T) {
	const rows, d, kvHeads = 4, 32, 2
	r := rand.New(rand.NewPCG(5, 6))
	for _, bf16 := range []bool{false, true} {
		t.Run(map[bool]string{false: "f32", true: "bf16"}[bf16], func(t *testing.T) {
			gpu, _ := newFakeBackend(t, Options{})
			host := cpubackend.New(1)
			defer host.Close()
			src := randFloats(r, rows*kvHeads*d)
			var parts [2][]compute.Part
			var stores [2]compute.BlockStore
			for i, b := range []compute.Backend{gpu, host} {
				stores[i] = b.NewBlockStore(rows, d, bf16)
				buf := upload(b, src)
				for h := range kvHeads {
					p, err := stores[i].NewPart()
					if err != nil {
						t.Fatal(err)
					}
					// Two writes, the second of strided rows (one token's K
					// of every head is a row of kvHeads*d values).
					stores[i].Write(p, 0, buf.Slice(h*d, h*d+d), d, 1)
					stores[i].Write(p, 1, buf.Slice(kvHeads*d+h*d, len(src)), kvHeads*d, rows-1)
					parts[i] = append(parts[i], p)
				}
			}
			got, want := make([]float32, rows*d), make([]float32, rows*d)
			for h := range kvHeads {
				if err := stores[0].Read(got, parts[0][h]); err != nil {
					t.Fatal(err)
				}
				if err := stores[1].Read(want, parts[1][h]); err != nil {
					t.Fatal(err)
				}
				if dd := maxAbsDiff(got, want); dd != 0 {
					t.Fatalf("head %d: hot rows differ from the CPU store's by %.3g", h, dd)
				}
			}
			// Encoded by codecs the kernels read (int8, int4-k, kakeya,
			// preconditioned int4 and kakeya) and do not (turbo): Read
			// gives the CPU store's decoded values.
			used0, _ := gpu.MemoryStats()
			for i, name := range []string{"int8", "int4-k", "kakeya", "pre+int4", "pre+kakeya", "turbo"} {
				cd, err := codec.Parse(strings.TrimPrefix(name, "pre+"))
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(name, "pre+") {
					cd = randPreconditioned(t, r, cd, d)
				}
				h := i % kvHeads
				stores[1].Read(want, parts[1][h])
				enc, err := cd.Encode(nil, want, rows, d)
				if err != nil {
					t.Fatal(err)
				}
				for j := range 2 {
					p, err := stores[j].NewPart()
					if err != nil {
						t.Fatal(err)
					}
					if err := stores[j].SetEncoded(p, enc, cd); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					parts[j] = append(parts[j], p)
				}
				if !parts[0][len(parts[0])-1].Encoded() {
					t.Errorf("%s: encoded part reports hot", name)
				}
				if pt := own(parts[0][len(parts[0])-1]); (pt.encLen == 0) != (name == "turbo") || (pt.linv == 0) == strings.HasPrefix(name, "pre+") {
					t.Errorf("%s: %d codec bytes on the device, inverse factor at %#x", name, pt.encLen, pt.linv)
				}
				stores[0].Read(got, parts[0][len(parts[0])-1])
				stores[1].Read(want, parts[1][len(parts[1])-1])
				if dd := maxAbsDiff(got, want); dd != 0 {
					t.Fatalf("%s: encoded part reads back %.3g away from the CPU store's", name, dd)
				}
			}
			// Released parts' slots are reused: no new device memory.
			for _, p := range parts[0] {
				stores[0].Release(p)
			}
			used1, _ := gpu.MemoryStats()
			for range kvHeads {
				if _, err := stores[0].NewPart(); err != nil {
					t.Fatal(err)
				}
			}
			if used2, _ := gpu.MemoryStats(); used2 != used1 {
				t.Errorf("device memory %d bytes after reusing released parts, %d before (%d before encoding)", used2, used1, used0)
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Driver failures: an allocation the device cannot hold makes the backend
// fail with an error naming the call, the size and the CUresult; later
// operations do nothing, Read gives NaN, and the methods that return
// errors return it.
func TestDriverErrors(t *testing.T) {
	gpu, f := newFakeBackend(t, Options{})
	x := upload(gpu, []float32{1, 2, 3})
	f.fail["alloc"] = ErrOutOfMemory
	y := gpu.Alloc(1 << 20)
	err := gpu.Err()
	if err == nil || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Err() = %v after a failed allocation, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	for _, w := range []string{"Alloc of 1048576 values", "cuMemAlloc of 4 MiB (4194304 bytes)", "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", "the backend holds"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != ErrOutOfMemory || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("errors.As: %+v", ce)
	}
	gpu.Add(x, y) // ignored
	got := read(gpu, x)
	for _, v := range got {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("Read after a failure gave %v, want NaN", got)
		}
	}
	if _, err := gpu.Upload(tensor.Mat{DType: tensor.F32, Rows: 1, Cols: 1, F32: []float32{1}}); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Upload after the failure: %v", err)
	}
	if _, err := gpu.NewBlockStore(4, 8, false).NewPart(); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("NewPart after the failure: %v", err)
	}
	if _, err := gpu.NewAttention(compute.AttentionParams{Heads: 2, KVHeads: 1, HeadDim: 8, BlockSize: 4, MaxContext: 8}); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("NewAttention after the failure: %v", err)
	}
	if err := gpu.Close(); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Close: %v", err)
	}
	if err := gpu.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if len(f.allocs) != 0 {
		t.Errorf("%d allocations left after Close", len(f.allocs))
	}
}

// Every CUresult a call may return is named with the driver's words, or
// the table's when the library cannot name it.
func TestResultNames(t *testing.T) {
	for _, tc := range []struct {
		code Result
		want string
	}{
		{ErrOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{ErrNoDevice, "CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"},
		{Result(700), "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was encountered"},
		{Result(901), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)"},
		{Result(12345), "CUresult(12345) (12345): unrecognized error code"},
	} {
		err := newError("cuTest(1)", tc.code)
		if got := err.Error(); got != "cuda: cuTest(1): "+tc.want && !strings.HasPrefix(got, "cuda: cuTest(1): "+tc.want) {
			t.Errorf("%d: %q, want %q", tc.code, got, tc.want)
		}
		if !errors.Is(err, tc.code) {
			t.Errorf("%d: errors.Is fails", tc.code)
		}
	}
}

// A CUresult injected into any driver call surfaces through the
// backend's error, by name.
func TestInjectedResults(t *testing.T) {
	for _, call := range []string{"copyIn", "launch", "zero"} {
		gpu, f := newFakeBackend(t, Options{})
		x := gpu.Alloc(4)
		f.fail[call] = Result(700)
		gpu.Write(x, []float32{1, 2, 3, 4})
		gpu.Add(x, x)
		gpu.Alloc(4)
		read(gpu, x)
		if err := gpu.Err(); !errors.Is(err, Result(700)) || !strings.Contains(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS") {
			t.Errorf("%s failing: Err() = %v", call, err)
		}
	}
}

// Buffers nobody refers to any more are freed at the next point where the
// stream is idle (a Read), so a sequence's activations do not outlive it.
func TestMemoryFreedAfterGC(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{})
	keep := gpu.Alloc(16)
	before, _ := gpu.MemoryStats()
	for range 8 {
		gpu.Alloc(1 << 12)
	}
	if used, _ := gpu.MemoryStats(); used != before+8*4<<12 {
		t.Fatalf("%d bytes held after 8 allocations of 16 KiB, want %d", used, before+8*4<<12)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		read(gpu, keep)
		if used, _ := gpu.MemoryStats(); used == before {
			break
		}
		if time.Now().After(deadline) {
			used, _ := gpu.MemoryStats()
			t.Fatalf("%d bytes still held, want %d", used, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, peak := gpu.MemoryStats(); peak < before+8*4<<12 {
		t.Errorf("peak %d bytes", peak)
	}
}

// With cuBLAS and Options.MatMul f32, prefill's products widen bf16 and f16 weights to float32 a
// chunk of rows at a time and multiply them with cublasGemmEx (on the fake,
// a host product), giving the CPU backend's results.
func TestMatMulCUBLAS(t *testing.T) {
	needKernels(t, "embed_bf16", "embed_f16")
	host := cpubackend.New(1)
	defer host.Close()
	r := rand.New(rand.NewPCG(9, 10))
	const n, rows, cols = maxMatVecRows + 4, 37, 24
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, wide := range []int{wideFloats, 10 * cols} { // one chunk, four
			f := newFakeOrSkip(t)
			f.cublas = true
			gpu := newBackend(f, Options{MatMul: "f32"})
			gpu.wideMax = wide
			if got := gpu.GEMM(); got != "cuBLAS (TF32)" {
				t.Errorf("GEMM() = %q", got)
			}
			m := randMat(r, dt, rows, cols)
			x := randFloats(r, n*cols)
			got, want := matMulOn(t, gpu, m, x, n), matMulOn(t, host, m, x, n)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
			if dd := maxAbsDiff(got, want); dd > 1e-4 || math.IsNaN(dd) {
				t.Errorf("%v, scratch of %d floats: max abs difference %.3g from the CPU backend", dt, wide, dd)
			}
			if chunks := (rows + wide/cols - 1) / (wide / cols); dt != tensor.F32 && f.gemms != chunks || dt == tensor.F32 && f.gemms != 1 {
				t.Errorf("%v: %d GEMMs", dt, f.gemms)
			}
			gpu.Close()
		}
	}
}

// Out of device memory, the backend first frees what the garbage
// collector reclaimed and retries; a block store out of room refuses the
// part without failing the backend, so the cache can report it.
func TestOutOfMemory(t *testing.T) {
	f := newFakeOrSkip(t)
	gpu := newBackend(f, Options{})
	defer gpu.Close()
	f.maxBytes = 1 << 20
	for range 8 {
		gpu.Alloc(64 << 10) // 256 KiB each, dropped at once
	}
	if err := gpu.Err(); err != nil {
		t.Fatalf("allocations the GC could make room for failed: %v", err)
	}
	keep := gpu.Alloc(128 << 10)          // 512 KiB held: no room for a 1 MiB slab
	s := gpu.NewBlockStore(64, 64, false) // 16 KiB parts, 1 MiB slabs
	if _, err := s.NewPart(); !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "block store slab of 64 parts of 16384 bytes") {
		t.Errorf("NewPart past the device's memory: %v", err)
	}
	if err := gpu.Err(); err != nil {
		t.Errorf("a refused part failed the backend: %v", err)
	}
	f.maxBytes = 0
	if _, err := s.NewPart(); err != nil {
		t.Errorf("NewPart once memory is back: %v", err)
	}
	runtime.KeepAlive(keep)
}

// layerOf is a KV layer of parts indexed [block][2*head+side], as the
// cache lays them out.
type layerOf struct {
	n     int
	parts [][]compute.Part
}

func (l *layerOf) Len() int                              { return l.n }
func (l *layerOf) Part(head, block, kv int) compute.Part { return l.parts[block][2*head+kv] }

// Attention over Kakeya blocks kept encoded on the device (keys and
// values of different settings, beside a hot, partly filled last block)
// gives the CPU backend's attention, which decodes the same bytes with
// codec.Kakeya.Decode: the two differ only by float32 reassociation
// (the kernel's Walsh-Hadamard stages, dot products and softmax sums run
// in another order). Preconditioned keys (Kakeya or int8 inside, each KV
// head with its own factor) stay encoded too, smaller than bf16, and the
// kernel un-whitens them as codec.Preconditioned.Decode does. A layer
// whose Kakeya blocks use two codecs' settings is refused, since the
// kernels take one per side, and so are preconditioned values, which the
// kernel does not un-whiten.
func TestKakeyaAttentionMatchesCPU(t *testing.T) {
	needKernels(t, "attn_split", "attn_split_pre", "kv_write")
	const heads, kvHeads, d, bs = 6, 2, 64, 16
	r := rand.New(rand.NewPCG(11, 12))
	kOpt, vOpt := codec.DefaultKakeyaOptions(), codec.DefaultKakeyaOptions()
	vOpt.Bits, vOpt.CoeffBits, vOpt.Seed = 2, 8, 77
	kCodec, err := codec.NewKakeya(kOpt)
	if err != nil {
		t.Fatal(err)
	}
	vCodec, err := codec.NewKakeya(vOpt)
	if err != nil {
		t.Fatal(err)
	}
	i8, err := codec.New(codec.Spec{Name: "int8"})
	if err != nil {
		t.Fatal(err)
	}
	// Preconditioned key codecs, one factor per KV head as kvplan
	// builds them.
	var preK, pre8 []codec.Codec
	for range kvHeads {
		preK = append(preK, randPreconditioned(t, r, kCodec, d))
		pre8 = append(pre8, randPreconditioned(t, r, i8, d))
	}
	for _, c := range []struct {
		name   string
		kc     []codec.Codec // the keys' codec of each KV head (one: all)
		total  int           // tokens: the last block is partly filled, hot
		n      int           // queries, the last n positions
		window int
		bf16   bool
		kfmt   int32 // the format of the keys' encoded parts on the device
	}{
		{"decode/bf16", []codec.Codec{kCodec}, 5*bs + 3, 1, 0, true, partKakeya},
		{"prefill/f32", []codec.Codec{kCodec}, 4*bs + 9, 7, 0, false, partKakeya},
		{"decode/window", []codec.Codec{kCodec}, 6*bs + 1, 2, 40, true, partKakeya},
		{"decode/preconditioned kakeya keys", preK, 4*bs + 5, 1, 0, false, partKakeya},
		{"prefill/preconditioned kakeya keys/bf16", preK, 5*bs + 2, 6, 0, true, partKakeya},
		{"decode/preconditioned int8 keys/bf16", pre8, 5*bs + 7, 1, 0, true, partInt8},
		{"window/preconditioned int8 keys", pre8, 6*bs + 3, 3, 37, false, partInt8},
	} {
		t.Run(c.name, func(t *testing.T) {
			gpu, f := newFakeBackend(t, Options{})
			host := cpubackend.New(1)
			defer host.Close()
			nb := (c.total + bs - 1) / bs
			ap := compute.AttentionParams{Heads: heads, KVHeads: kvHeads, HeadDim: d, Window: c.window, BlockSize: bs, MaxContext: nb * bs}
			// The new rows of every block, as the cache appends them: a
			// row of all KV heads per token.
			rows := randFloats(r, 2*nb*bs*kvHeads*d)
			q := randFloats(r, c.n*heads*d)
			cos, sin := ropeTables(nb*bs, d)
			layer := encodedLayer{nb: nb, kvHeads: kvHeads, bs: bs, d: d, total: c.total, bf16: c.bf16,
				write: func(b compute.Backend, store compute.BlockStore, p compute.Part, blk, j, m int) {
					// Side j%2 of head j/2: keys in the first half of
					// the rows, values in the second.
					off := (j%2)*nb*bs*kvHeads*d + blk*bs*kvHeads*d + (j/2)*d
					store.Write(p, 0, upload(b, rows[off:off+(m-1)*kvHeads*d+d]), kvHeads*d, m)
				},
				codec: func(j int) codec.Codec {
					if j%2 == 1 {
						return vCodec
					}
					return c.kc[(j/2)%len(c.kc)]
				},
			}
			outs, gpuParts, _ := layer.attend(t, gpu, host, ap, c.n, q, cos, sin)
			// Every full block's parts stay encoded, in slots smaller than
			// bf16 rows; the preconditioned keys' parts share their head's
			// one inverse factor.
			linv := map[int]Ptr{}
			for blk := range nb - 1 {
				for j, p := range gpuParts[blk] {
					pt := own(p)
					want := c.kfmt
					if j%2 == 1 {
						want = partKakeya
					}
					if pt.format != want || pt.encLen == 0 || !pt.Encoded() {
						t.Fatalf("block %d part %d: format %d, %d encoded bytes; want format %d, encoded on the device", blk, j, pt.format, pt.encLen, want)
					}
					if pt.size >= 2*bs*d {
						t.Errorf("block %d part %d: an encoded slot of %d bytes, no smaller than a bf16 part", blk, j, pt.size)
					}
					_, isPre := c.kc[0].(*codec.Preconditioned)
					if isPre = isPre && j%2 == 0; isPre != (pt.linv != 0) {
						t.Fatalf("block %d part %d: inverse factor at %#x; want one: %v", blk, j, pt.linv, isPre)
					}
					if isPre {
						if at, ok := linv[j/2]; ok && at != pt.linv {
							t.Errorf("block %d head %d: inverse factor at %#x, block 0's at %#x: uploaded twice", blk, j/2, pt.linv, at)
						}
						linv[j/2] = pt.linv
					}
				}
			}
			if len(linv) == kvHeads && linv[0] == linv[1] {
				t.Errorf("both KV heads' keys read the inverse factor at %#x", linv[0])
			}
			// The un-whitening kernel only where keys are preconditioned.
			want := map[bool]string{false: "attn_split", true: "attn_split_pre"}[len(linv) > 0]
			if !slices.Contains(f.launched, want) {
				t.Errorf("launched %s, want %s", f.kernelCounts(), want)
			}
			tol := 2e-5 * max(1, maxAbs(outs[1]))
			dd := maxAbsDiff(outs[0], outs[1])
			if dd > tol || math.IsNaN(dd) {
				t.Fatalf("attention differs from the CPU's by %.3g", dd)
			}
			t.Logf("worst difference %.2g of the tolerance", dd/tol)
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("preconditioned values", func(t *testing.T) {
		gpu, _ := newFakeBackend(t, Options{})
		store := gpu.NewBlockStore(bs, d, false)
		x := randFloats(r, bs*d)
		l := &layerOf{n: bs, parts: [][]compute.Part{nil}}
		for _, cd := range []codec.Codec{pre8[0], pre8[0]} { // keys, values
			enc, err := cd.Encode(nil, x, bs, d)
			if err != nil {
				t.Fatal(err)
			}
			p, err := store.NewPart()
			if err != nil {
				t.Fatal(err)
			}
			if err := store.SetEncoded(p, enc, cd); err != nil {
				t.Fatal(err)
			}
			l.parts[0] = append(l.parts[0], p)
		}
		att, err := gpu.NewAttention(compute.AttentionParams{Heads: 1, KVHeads: 1, HeadDim: d, BlockSize: bs, MaxContext: bs})
		if err != nil {
			t.Fatal(err)
		}
		cos, sin := ropeTables(bs, d)
		err = att.Forward(gpu.Alloc(d), upload(gpu, randFloats(r, d)), 1, bs-1, l, upload(gpu, cos), upload(gpu, sin))
		if err == nil || !strings.Contains(err.Error(), "keys only") {
			t.Fatalf("attention over preconditioned values: %v", err)
		}
	})
	t.Run("two codecs in a layer", func(t *testing.T) {
		gpu, _ := newFakeBackend(t, Options{})
		other := kOpt
		other.Seed++
		oc, err := codec.NewKakeya(other)
		if err != nil {
			t.Fatal(err)
		}
		store := gpu.NewBlockStore(bs, d, true)
		l := &layerOf{n: 2 * bs, parts: make([][]compute.Part, 2)}
		for blk, cd := range []codec.Codec{kCodec, oc} {
			enc, err := cd.Encode(nil, randFloats(r, bs*d), bs, d)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // keys and values of the one KV head
				p, err := store.NewPart()
				if err != nil {
					t.Fatal(err)
				}
				if err := store.SetEncoded(p, enc, cd); err != nil {
					t.Fatal(err)
				}
				l.parts[blk] = append(l.parts[blk], p)
			}
		}
		att, err := gpu.NewAttention(compute.AttentionParams{Heads: 1, KVHeads: 1, HeadDim: d, BlockSize: bs, MaxContext: 2 * bs})
		if err != nil {
			t.Fatal(err)
		}
		cos, sin := ropeTables(2*bs, d)
		err = att.Forward(gpu.Alloc(d), upload(gpu, randFloats(r, d)), 1, 2*bs-1, l, upload(gpu, cos), upload(gpu, sin))
		if err == nil || !strings.Contains(err.Error(), "one codec") {
			t.Fatalf("attention over two Kakeya codecs in a layer: %v", err)
		}
	})
}

// Describe names the device and the GEMM path, for kakeya-run's stats.
func TestDescribe(t *testing.T) {
	gpu, _ := newFakeBackend(t, Options{NoCUBLAS: true})
	got := gpu.Describe()
	for _, want := range []string{"CUDA fake (sm_80, 4 SMs", "prefill GEMM mma kernel (bf16/f16 tensor cores), f32 weights matmul kernel (cuda: cuBLAS off"} {
		if !strings.Contains(got, want) {
			t.Errorf("Describe() = %q, want it to contain %q", got, want)
		}
	}
}

// A layer's writes, every KV head's keys and values at one row, are one
// kv_write launch, and its table of parts goes to the device only when a
// block starts or the sources move: decode steps through a block upload
// nothing and read nothing back. The parts then hold the CPU store's rows
// exactly, and a new block reuses the retired table's memory.
func TestKVWritesOneLaunchPerLayer(t *testing.T) {
	needKernels(t, "kv_write")
	const bs, d, kvHeads = 4, 24, 3
	r := rand.New(rand.NewPCG(13, 14))
	for _, bf16 := range []bool{false, true} {
		t.Run(map[bool]string{false: "f32", true: "bf16"}[bf16], func(t *testing.T) {
			gpu, f := newFakeBackend(t, Options{})
			host := cpubackend.New(1)
			defer host.Close()
			// Two layers' K and V buffers of one token, as decode's
			// projections leave them, and a third pair the sources move to.
			rows := randFloats(r, 6*kvHeads*d)
			var stores [2]compute.BlockStore
			var parts [2][][]compute.Part // [backend][layer*blocks+block][2*head+side]
			var srcs [2]compute.Buffer
			for i, b := range []compute.Backend{gpu, host} {
				stores[i] = b.NewBlockStore(bs, d, bf16)
				srcs[i] = upload(b, rows)
			}
			flush := func() { gpu.Read(make([]float32, 1), srcs[0]) }
			step := func(layer, blk, row, src int) {
				for i := range 2 {
					p := parts[i][layer*2+blk]
					for h := range kvHeads {
						for side := range 2 {
							off := (2*src+side)*kvHeads*d + h*d
							stores[i].Write(p[2*h+side], row, srcs[i].Slice(off, off+d), d, 1)
						}
					}
				}
			}
			for i := range 2 {
				for range 2 * 2 { // 2 layers x 2 blocks
					p := make([]compute.Part, 2*kvHeads)
					for j := range p {
						var err error
						if p[j], err = stores[i].NewPart(); err != nil {
							t.Fatal(err)
						}
					}
					parts[i] = append(parts[i], p)
				}
			}
			var used int64
			for blk := range 2 {
				for row := range bs {
					before := maps.Clone(f.calls)
					for layer := range 2 {
						src := layer
						if row == 2 && layer == 1 {
							src = 2 // the sources move: the table must follow
						}
						step(layer, blk, row, src)
						flush()
					}
					launches, uploads := f.calls["launch"]-before["launch"], f.calls["copyIn"]-before["copyIn"]
					wantUploads := 0
					if row == 0 {
						wantUploads = 2 // each layer's table, at the block's start
					}
					if row == 2 || row == 3 {
						wantUploads = 1 // layer 1's sources moved at row 2, and back at 3
					}
					if launches != 2 || uploads != wantUploads {
						t.Errorf("block %d row %d: %d launches and %d uploads for two layers, want 2 and %d", blk, row, launches, uploads, wantUploads)
					}
				}
				if blk == 0 {
					used, _ = gpu.MemoryStats()
				}
			}
			if now, _ := gpu.MemoryStats(); now != used {
				t.Errorf("device memory %d bytes after the second blocks, %d after the first", now, used)
			}
			got, want := make([]float32, bs*d), make([]float32, bs*d)
			for e := range parts[0] {
				for j := range parts[0][e] {
					if err := stores[0].Read(got, parts[0][e][j]); err != nil {
						t.Fatal(err)
					}
					if err := stores[1].Read(want, parts[1][e][j]); err != nil {
						t.Fatal(err)
					}
					if dd := maxAbsDiff(got, want); dd != 0 {
						t.Fatalf("block %d part %d differs from the CPU store's by %.3g", e, j, dd)
					}
				}
			}
			if err := gpu.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A kernel that faults on the device shows up at the next synchronizing
// call, as on a GPU: the model returns the error from that forward step
// (never NaN logits), and with Options.Sync the error names the kernel,
// its geometry and its parameters.
func TestKernelFaultIsAnError(t *testing.T) {
	dir := tinyArchitectures(t)["qwen2"]
	for _, tc := range []struct {
		name   string
		opts   Options
		kernel string
		want   []string
	}{
		{"async", Options{NoFusion: true}, "silu_mul", []string{"model: cuda backend", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"}},
		{"sync", Options{Sync: true, NoFusion: true}, "silu_mul", []string{"kernel silu_mul (grid {", "block {256 1 1}", "3 parameters in 20 bytes) failed", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"}},
		{"fused/async", Options{}, "norm_swiglu_bf16", []string{"model: cuda backend", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"}},
		{"fused/sync", Options{Sync: true}, "norm_qkv_bf16", []string{"kernel norm_qkv_bf16 (grid {", "block {256 1 1}", "30 parameters in 200 bytes) failed", "CUDA_ERROR_ILLEGAL_ADDRESS (700)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newFakeBackend(t, tc.opts)
			f.fault = tc.kernel
			m := loadModel(t, dir, model.Options{Backend: b})
			logits, err := m.Logits(testIDs(5, m.Config().VocabSize))
			if err == nil {
				t.Fatalf("no error; logits %v", logits[0][:4])
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// KAKEYA_CUDA_SYNC=1 sets Options.Sync for New (the driver is absent
	// here, so New fails, but only after reading it): tested through the
	// option's effect on graphs.
	b, _ := newFakeBackend(t, Options{Sync: true})
	if _, _, _, off := b.GraphStats(); off == nil {
		t.Error("graphs on with Options.Sync")
	}
}

// encodedLayer is one attention layer of nb blocks, each of 2*kvHeads
// parts (the keys and values of each KV head, alternating), for the tests
// of attention over encoded blocks.
type encodedLayer struct {
	nb, kvHeads, bs, d, total int
	bf16                      bool
	// write stores the first m rows of part j of block blk.
	write func(b compute.Backend, store compute.BlockStore, p compute.Part, blk, j, m int)
	// codec encodes part j of every full block.
	codec func(j int) codec.Codec
}

// attend builds the layer on gpu and on host, every full block's parts
// read back and encoded by their codec (the last, partial block stays
// hot), and runs attention of the n queries q at the last n positions on
// both: it returns the two outputs, the GPU's parts and each encoded
// part's length by (block, part).
func (e encodedLayer) attend(t *testing.T, gpu, host compute.Backend, ap compute.AttentionParams, n int, q, cos, sin []float32) (outs [2][]float32, gpuParts [][]compute.Part, encLen map[[2]int]int) {
	t.Helper()
	encLen = map[[2]int]int{}
	for i, b := range []compute.Backend{gpu, host} {
		store := b.NewBlockStore(e.bs, e.d, e.bf16)
		l := &layerOf{n: e.total, parts: make([][]compute.Part, e.nb)}
		x := make([]float32, e.bs*e.d)
		for blk := range e.nb {
			l.parts[blk] = make([]compute.Part, 2*e.kvHeads)
			m := min(e.bs, e.total-blk*e.bs)
			for j := range l.parts[blk] {
				p, err := store.NewPart()
				if err != nil {
					t.Fatal(err)
				}
				e.write(b, store, p, blk, j, m)
				l.parts[blk][j] = p
				if m < e.bs {
					continue // the hot block
				}
				cd := e.codec(j)
				if err := store.Read(x, p); err != nil {
					t.Fatal(err)
				}
				enc, err := cd.Encode(nil, x, e.bs, e.d)
				if err != nil {
					t.Fatal(err)
				}
				encLen[[2]int{blk, j}] = len(enc)
				if err := store.SetEncoded(p, enc, cd); err != nil {
					t.Fatal(err)
				}
			}
		}
		att, err := b.NewAttention(ap)
		if err != nil {
			t.Fatal(err)
		}
		out := b.Alloc(n * ap.Heads * e.d)
		if err := att.Forward(out, upload(b, q), n, e.total-n, l, upload(b, cos), upload(b, sin)); err != nil {
			t.Fatal(err)
		}
		outs[i] = read(b, out)
		if i == 0 {
			gpuParts = l.parts
		}
	}
	return outs, gpuParts, encLen
}
