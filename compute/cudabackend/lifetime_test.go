package cudabackend

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

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
// driver reports a launch that points into freed memory. The cases:
// MatMul's and the held norm_qkv's operands; one sequence's decode
// attention (attention.Forward) with out, q, cos and sin dropped (kept by
// its keep), with the attention itself dropped (its block table and
// scratch, kept by its KeepAlive) and with the KV layer dropped (held
// through the attention's tables, keyed by layer: the parts' memory is
// watched, fakeDriver.reads); the batched attention (AttendBatch) with
// its operands dropped (its keep) and with a pass's KV layer and the
// passes dropped (held by the passes, read after the last allocation);
// and Draw with its logits dropped while a deferred cache write's table
// takes a slab (its keep). A case whose memory pressure no allocation
// met fails: it would test nothing.
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
		{"attention decode", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// The scratch of a split context is allocated once out, q, cos
			// and sin are the launch's: the first call, over one block,
			// splits nothing.
			ap := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxContext: 256}
			att, err := b.NewAttention(ap)
			if err != nil {
				t.Fatal(err)
			}
			kv, _ := hotLayer(t, b, r, ap.KVHeads, ap.BlockSize, ap.HeadDim, ap.MaxContext/ap.BlockSize)
			cos, sin := ropeTables(ap.MaxContext, ap.HeadDim)
			row := ap.Heads * ap.HeadDim
			out, q, cd, sd := b.Alloc(row), upload(b, randFloats(r, row)), upload(b, cos), upload(b, sin)
			if err := att.Forward(out, q, 1, ap.BlockSize-1, kv, cd, sd); err != nil {
				t.Fatal(err)
			}
			if a := att.(*attention); a.scratchN != 0 {
				t.Fatalf("the set-up's attention took %d bytes of scratch: the case needs the call below to take the first", a.scratchN)
			}
			const big = 1 << 16 // out and q: their memory would make room
			return func(allowed func(int)) {
				allowed(4 * (2*big + len(cos) + len(sin)))
				if err := att.Forward(b.Alloc(big), b.Alloc(big), 1, ap.MaxContext-1, kv, upload(b, cos), upload(b, sin)); err != nil {
					t.Logf("Forward: %v", err)
				}
				keep(out, q, cd, sd)
			}
		}},
		{"attention decode, the attention dropped", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// A new attention's block table (176 KiB at this context) is
			// allocated, then the step parameters' memory (128 KiB),
			// which the table's, freed, would make room for.
			ap := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxContext: 32768}
			kv, _ := hotLayer(t, b, r, ap.KVHeads, ap.BlockSize, ap.HeadDim, 1)
			cos, sin := ropeTables(ap.BlockSize, ap.HeadDim)
			row := ap.Heads * ap.HeadDim
			out, q, cd, sd := b.Alloc(row), upload(b, randFloats(r, row)), upload(b, cos), upload(b, sin)
			if b.step.dev != 0 {
				t.Fatal("the set-up took the step parameters' memory: the case needs the call below to take it")
			}
			return func(func(int)) {
				f.fullAfter = 1 // the table
				if err := newAttention(t, b, ap).Forward(out, q, 1, ap.BlockSize-1, kv, cd, sd); err != nil {
					t.Logf("Forward: %v", err)
				}
			}
		}},
		{"attention decode, the KV layer dropped", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// The layer's store (a slab of 1 MiB), freed, would make room
			// for the step parameters' memory, allocated after the
			// attention's block table holds the parts' addresses.
			ap := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxContext: 64}
			att, err := b.NewAttention(ap)
			if err != nil {
				t.Fatal(err)
			}
			cos, sin := ropeTables(ap.MaxContext, ap.HeadDim)
			row := ap.Heads * ap.HeadDim
			out, q, cd, sd := b.Alloc(row), upload(b, randFloats(r, row)), upload(b, cos), upload(b, sin)
			return func(func(int)) {
				kv := func() compute.KVLayer {
					l, parts := hotLayer(t, b, r, ap.KVHeads, ap.BlockSize, ap.HeadDim, 2)
					if b.step.dev != 0 {
						t.Fatal("the set-up took the step parameters' memory: the case needs the call below to take it")
					}
					f.reads, f.fullAfter = parts, 1 // the table
					return l
				}
				if err := att.Forward(out, q, 1, 2*ap.BlockSize-1, kv(), cd, sd); err != nil {
					t.Logf("Forward: %v", err)
				}
			}
		}},
		{"batched attention", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// A layer's first call allocates its directory of the passes'
			// tables once out, q, cos and sin are the launch's.
			ap := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxContext: 64}
			passes := heldPasses(t, b, r, ap, 3)
			cos, sin := ropeTables(ap.MaxContext, ap.HeadDim)
			rows := len(passes) * ap.Heads * ap.HeadDim
			out, q, cd, sd := b.Alloc(rows), upload(b, randFloats(r, rows)), upload(b, cos), upload(b, sin)
			if err := b.AttendBatch(out, q, true, 0, passes, cd, sd); err != nil {
				t.Fatal(err)
			}
			const big = 1 << 16
			return func(allowed func(int)) {
				allowed(4 * (2*big + len(cos) + len(sin)))
				if err := b.AttendBatch(b.Alloc(big), b.Alloc(big), true, 1, passes, upload(b, cos), upload(b, sin)); err != nil {
					t.Logf("AttendBatch: %v", err)
				}
				keep(out, q, cd, sd)
			}
		}},
		{"batched attention, a KV layer dropped", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// The passes hold the attentions and layers whose tables the
			// launch reads: here the passes and a layer are the call's
			// alone, and the layer's store (1 MiB), freed, would make room
			// for the directory allocated after the tables.
			ap := compute.AttentionParams{Heads: 4, KVHeads: 2, HeadDim: 64, BlockSize: 16, MaxContext: 64}
			held := heldPasses(t, b, r, ap, 2)
			att, err := b.NewAttention(ap)
			if err != nil {
				t.Fatal(err)
			}
			cos, sin := ropeTables(ap.MaxContext, ap.HeadDim)
			rows := (len(held) + 1) * ap.Heads * ap.HeadDim
			out, q, cd, sd := b.Alloc(rows), upload(b, randFloats(r, rows)), upload(b, cos), upload(b, sin)
			return func(func(int)) {
				passes := func() []compute.AttentionPass {
					l, parts := hotLayer(t, b, r, ap.KVHeads, ap.BlockSize, ap.HeadDim, 2)
					f.reads, f.fullAfter = parts, 1 // the new layer's table
					return append(slices.Clone(held), compute.AttentionPass{Attention: att, KV: l, N: 1, Start: 2*ap.BlockSize - 1})
				}
				if err := b.AttendBatch(out, q, true, 0, passes(), cd, sd); err != nil {
					t.Logf("AttendBatch: %v", err)
				}
			}
		}},
		{"Draw", func(t *testing.T, b *Backend, f *fakeDriver) func(func(int)) {
			// A deferred cache write, launched before the draw joins the
			// queue, needs a new slab (1 MiB) for its table once the
			// draw's launch holds x's address; x is 1 MiB too, so the
			// slab may take x's very addresses (the fake then sees live
			// memory: the draw reads the slab's zeros and draws another
			// token than x's one large logit a row).
			const cols, xLen = 1000, 1 << 18
			rows := []compute.DrawRow{{U: 0.25, Temperature: 1}, {U: 0.75, Temperature: 1, TopK: 40}}
			want := []int{777, 123}
			logits := make([]float32, xLen)
			for i, id := range want {
				logits[i*cols+id] = 100
			}
			ids, bad := make([]int, len(rows)), make([]int, len(rows))
			held := upload(b, logits)
			b.Draw(ids, bad, held, cols, rows) // the picks' and step parameters' memory
			if !slices.Equal(ids, want) {
				t.Fatalf("the set-up drew %v, want %v", ids, want)
			}
			s := b.NewBlockStore(16, 64, false)
			p, err := s.NewPart()
			if err != nil {
				t.Fatal(err)
			}
			src := upload(b, randFloats(r, 64))
			return func(allowed func(int)) {
				// x before the write: an allocation launches the
				// deferred writes.
				allowed(4 * xLen)
				x := upload(b, logits)
				s.Write(p, 0, src, 64, 1)
				b.Draw(ids, bad, x, cols, rows)
				if b.Err() == nil && !slices.Equal(ids, want) {
					t.Errorf("drew %v from a dropped x, want %v: the draw read memory x no longer held", ids, want)
				}
				runtime.KeepAlive(s)
				keep(held, src)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newFakeBackend(t, Options{NoCUBLAS: true})
			op := tc.run(t, b, f)
			// The set-up done, its garbage freed: collected, its
			// cleanups given time to run, then freed by a read.
			for range 3 {
				runtime.GC()
				time.Sleep(5 * time.Millisecond)
			}
			b.Read(make([]float32, 1), b.Alloc(1))
			if err := b.Err(); err != nil {
				t.Fatal(err)
			}
			op(func(extra int) { f.maxBytes = f.held + extra })
			f.maxBytes, f.fullAfter = 0, 0
			if f.refused == 0 {
				t.Fatal("no allocation found the device out of memory: the case tests nothing")
			}
			// The queued launches run before anything is allocated
			// again: a new allocation may take the freed addresses.
			b.mu.Lock()
			b.flush()
			b.mu.Unlock()
			f.reads = nil
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

// newAttention returns a new attention of p, which only the caller holds.
//
//go:noinline
func newAttention(t *testing.T, b *Backend, p compute.AttentionParams) compute.Attention {
	a, err := b.NewAttention(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// hotLayer returns a layer of blocks full blocks of hot float32 parts
// (random values) in a store of its own, which only the layer's parts
// hold, its writes launched, and the parts' memory (for
// fakeDriver.reads).
//
//go:noinline
func hotLayer(t *testing.T, b *Backend, r *rand.Rand, kvHeads, bs, d, blocks int) (*layerOf, []span) {
	s := b.NewBlockStore(bs, d, false)
	src := upload(b, randFloats(r, bs*d))
	l := &layerOf{n: blocks * bs, parts: make([][]compute.Part, blocks)}
	var mem []span
	for blk := range blocks {
		for range 2 * kvHeads {
			p, err := s.NewPart()
			if err != nil {
				t.Fatal(err)
			}
			s.Write(p, 0, src, d, bs)
			l.parts[blk] = append(l.parts[blk], p)
			mem = append(mem, span{p.(*part).addr, 4 * bs * d})
		}
	}
	b.Read(make([]float32, 1), src) // the writes launched
	return l, mem
}

// heldPasses returns n decode passes of attentions of p over layers of
// their own (a block, and a second one's first row), held by the passes.
func heldPasses(t *testing.T, b *Backend, r *rand.Rand, p compute.AttentionParams, n int) []compute.AttentionPass {
	passes := make([]compute.AttentionPass, n)
	for i := range passes {
		kv, _ := hotLayer(t, b, r, p.KVHeads, p.BlockSize, p.HeadDim, 2)
		passes[i] = compute.AttentionPass{Attention: newAttention(t, b, p), KV: kv, N: 1, Start: p.BlockSize + i}
	}
	return passes
}
