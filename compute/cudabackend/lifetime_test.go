package cudabackend

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

// An operation's buffers stay its own until the launches that read them
// are queued, even when the caller holds them no longer: allocating its
// scratch on a device out of memory, the backend collects garbage and
// frees what the collector reclaimed (allocRaw), which must not be an
// operand whose address the operation already took. Each case drops an
// operand (passed straight from Alloc), and leaves the device room for
// the operand but not for the scratch the operation then needs; the fake
// driver reports a launch that points into freed memory.
func TestDroppedOperandOutOfMemory(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 1))
	for _, tc := range []struct {
		name string
		// run sets up what the case needs (weights, scratch already
		// held), then returns the operation: it allocates the dropped
		// operand itself, after allowed sets the memory limit.
		run func(t *testing.T, b *Backend, f *fakeDriver) func(allowed func(extra int))
	}{
		{"MatMul bf16 16 rows", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			const n, rows, cols = 16, 64, 256
			w, err := b.Upload(randMat(r, tensor.BF16, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			out := b.Alloc(n * rows)
			return func(allowed func(int)) {
				allowed(4 * n * cols) // x, not the 16-bit activations' 2*n*cols more
				b.MatMul(out, b.Alloc(n*cols), n, w)
			}
		}},
		{"NormQKV held back", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// The held launch is queued by the next operation, which
			// takes the step parameters' memory (128 KiB) first.
			const heads, kvHeads, d, cols = 2, 1, 64, 128
			up := func(rows int) compute.Weight {
				w, err := b.Upload(randMat(r, tensor.BF16, rows, cols))
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			p := &compute.QKV{Norm: b.Alloc(cols), Eps: 1e-5, Q: up(heads * d), K: up(kvHeads * d), V: up(kvHeads * d),
				Heads: heads, KVHeads: kvHeads, HeadDim: d, Cos: b.Alloc(4 * d / 2), Sin: b.Alloc(4 * d / 2)}
			q, k, v := b.Alloc(heads*d), b.Alloc(kvHeads*d), b.Alloc(kvHeads*d)
			return func(allowed func(int)) {
				const xLen = stepSlotBytes * maxStepSlots / 4 // x's memory would make room
				allowed(4 * xLen)
				if !b.NormQKV(q, k, v, b.Alloc(xLen), []int{0}, p) {
					t.Fatal("NormQKV declined")
				}
				b.Add(q, q)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newFakeBackend(t, Options{NoCUBLAS: true})
			op := tc.run(t, b, f)
			b.Read(make([]float32, 1), b.Alloc(1)) // the set-up done, its garbage freed
			if err := b.Err(); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			op(func(extra int) { f.maxBytes = f.held + extra })
			f.maxBytes = 0
			// The queued launches run before anything is allocated
			// again: a new allocation may take the freed addresses.
			b.mu.Lock()
			b.flush()
			b.mu.Unlock()
			if err := b.Err(); err != nil && strings.Contains(err.Error(), "freed memory") {
				t.Fatalf("a dropped operand was freed under its operation: %v", err)
			} else if err != nil {
				t.Logf("the operation failed otherwise (not this test's concern): %v", err)
			}
		})
	}
}

// A deferred cache write (store.Write) holds its source until it is
// launched: here the source is dropped at once, and the operation that
// launches the write needs a new slab for the write's table on a device
// without room for it, so it collects garbage and frees what was
// reclaimed before the write reads its source.
func TestDroppedCacheWriteSource(t *testing.T) {
	b, f := newFakeBackend(t, Options{NoCUBLAS: true})
	const bs, d = 16, 64
	s := b.NewBlockStore(bs, d, false)
	p, err := s.NewPart()
	if err != nil {
		t.Fatal(err)
	}
	x := b.Alloc(16)
	b.Read(make([]float32, 1), b.Alloc(1))
	runtime.GC()
	// A source of 1 MiB and more (rows 4,370 floats apart): its memory,
	// freed, would make room for the table's slab.
	const stride = 4370 * 4
	writeDropped(b, s, p, bs, d, stride)
	f.maxBytes = f.held // no room for the table's slab
	b.Add(x, x)         // launches the deferred write first
	f.maxBytes = 0
	b.mu.Lock()
	b.flush()
	b.mu.Unlock()
	if err := b.Err(); err != nil {
		t.Logf("the write failed for want of memory (not this test's concern): %v", err)
		return
	}
	got := make([]float32, bs*d)
	if err := s.Read(got, p); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if want := float32(i/d*stride + i%d); v != want {
			t.Fatalf("value %d of the part written from a dropped source is %v, want %v: the write read freed memory", i, v, want)
		}
	}
}

// writeDropped writes rows of a fresh buffer, valued by their index in
// it, to p, and drops the buffer.
//
//go:noinline
func writeDropped(b *Backend, s compute.BlockStore, p compute.Part, rows, d, stride int) {
	vals := make([]float32, (rows-1)*stride+d)
	for i := range vals {
		vals[i] = float32(i)
	}
	src := b.Alloc(len(vals))
	b.Write(src, vals)
	s.Write(p, 0, src, stride, rows)
}
