package cudabackend

// A decode step of one sequence is one CUDA graph. Of its kernels only
// norm_qkv and attention take arguments that move with the position: the
// position itself, the cache row the new keys and values go to and the
// table of the block they go into. Those values go to a small device
// array of step parameters instead, a slot per launch, which the kernels
// read (norm_qkv's step, attention's startp): the host writes a step's
// slots as it queues the launches and copies them to the device once,
// right before it gives the queue to the driver, so the launches
// themselves are the same at every position and the whole step, from the
// embedding to the logits, is one run of launches that the graph cache
// captures once and then replays with one cuGraphLaunch. Attention's
// geometry depends on the context only through its shape class (see
// attnArgs.plan), so a graph stays valid while the context grows within a
// class; a new class is a new run, captured once: a handful of captures
// over a sequence's life, counted by GraphStats and Launches.

import (
	"encoding/binary"
	"fmt"
)

// Step parameter slots: a slot is the part table's address (uint64),
// then the cache row and the position (int32 each). A step uses a slot
// per norm_qkv and attention launch; past maxStepSlots the launches carry
// their arguments and run on their own, as without step parameters.
const (
	stepSlotBytes = 16
	maxStepSlots  = 8192 // 128 KiB: a batched step's cache writes and attention records too
)

// stepParams are the slots of the launches queued since the queue was
// last given to the driver: n written on the host, up of them copied to
// the device at dev.
type stepParams struct {
	host  []byte
	n, up int
	dev   Ptr
	gen   uint64 // starts of a step's slots so far (flushQueue)
	stage []byte // stageCopies' scratch
}

// stepSlot writes tab, row and start to the next slot and returns its
// device address, or 0 when the step parameters are off or full, or their
// memory cannot be had (a failure recorded for Err): the caller then
// passes the values as arguments. Called with mu held.
func (b *Backend) stepSlot(tab Ptr, row, start int) Ptr {
	s := &b.step
	if b.noStep || s.n >= maxStepSlots || b.err != nil {
		return 0
	}
	if s.dev == 0 {
		p, err := b.allocRaw(maxStepSlots * stepSlotBytes)
		if err != nil {
			b.fail(fmt.Errorf("cuda: step parameters: %w", err))
			return 0
		}
		s.dev = p
		s.host = make([]byte, maxStepSlots*stepSlotBytes)
	}
	o := s.n * stepSlotBytes
	binary.LittleEndian.PutUint64(s.host[o:], uint64(tab))
	binary.LittleEndian.PutUint32(s.host[o+8:], uint32(int32Of("step cache row", row)))
	binary.LittleEndian.PutUint32(s.host[o+12:], uint32(int32Of("step position", start)))
	s.n++
	return s.dev + Ptr(o)
}

// stepReads reports whether a queued launch reads the cache table at tab
// through its step slot: only such a launch can read a table before the
// host rewrites it, since kv_write launches go to the driver at once.
// Called with mu held.
func (b *Backend) stepReads(tab Ptr) bool {
	s := &b.step
	for o := 0; o < s.n*stepSlotBytes; o += stepSlotBytes {
		if Ptr(binary.LittleEndian.Uint64(s.host[o:])) == tab {
			return true
		}
	}
	return false
}

// stepStart returns the address of the position in the slot at p.
func stepStart(p Ptr) Ptr { return p + 12 }

// uploadStep copies the slots written since the last upload to the
// device, in stream order before the queued launches that read them.
// Called with mu held, just before the queue goes to the driver.
func (b *Backend) uploadStep() {
	s := &b.step
	if s.up < s.n {
		b.fail(b.copyInNoWait(s.dev+Ptr(s.up*stepSlotBytes), s.host[s.up*stepSlotBytes:s.n*stepSlotBytes]))
		s.up = s.n
	}
}

// flushQueue gives the queued launches to the driver, after the step
// parameters they read, and starts the next step's slots: the launches
// given read theirs before any later copy (the stream orders them).
// Called with mu held.
func (b *Backend) flushQueue() {
	if len(b.queue) > 0 {
		q := b.queue
		b.queue = b.queue[:0]
		b.epoch++
		if b.err == nil {
			b.uploadStep()
			if b.err == nil {
				b.fail(b.launch(q, true))
			}
		}
	}
	if len(b.enc.queued) > 0 {
		b.releaseQueued() // after the encoders that read the hot slots
	}
	b.step.n, b.step.up = 0, 0
	b.step.gen++
}

// stepSlots writes recs (a whole number of slots) to the next slots and
// returns the first one's device address, or 0 as stepSlot does when the
// step parameters are off, lack the room or their memory cannot be had.
// Called with mu held.
func (b *Backend) stepSlots(recs []byte) Ptr {
	k := len(recs) / stepSlotBytes
	s := &b.step
	if k == 0 || b.noStep || s.n+k > maxStepSlots || b.err != nil {
		return 0
	}
	first := b.stepSlot(0, 0, 0)
	if first == 0 {
		return 0
	}
	s.n += k - 1
	copy(s.host[int(first-s.dev):], recs)
	return first
}

// copySpan is bytes to copy to dst through the step parameters
// (stageCopies): a whole number of 32-bit words, dst aligned to 4 bytes.
type copySpan struct {
	dst Ptr
	src []byte
}

// stageCopies queues the copies of spans through the step parameters: a
// 16-byte record per span (its destination, then its word count and the
// offset of its words, as copy_runs reads them) and then the spans' bytes
// go into the next slots, and one copy_runs launch joins the queue. The
// bytes reach the device with the step's other slots, in the one copy made
// when the queue goes to the driver, and land in stream order: after the
// launches queued before, before those queued after. So a table rewritten
// while the device runs launched work costs the host no synchronous copy,
// which would wait for that work. It returns false, having queued nothing,
// where the step parameters cannot take the spans (off, full, their memory
// not had): the caller copies them itself. Called with mu held, nothing
// held back and no deferred cache write (the launch joins the queue as
// is, right after its slots).
func (b *Backend) stageCopies(spans []copySpan) bool {
	if len(spans) == 0 || b.noStep || b.err != nil {
		return len(spans) == 0
	}
	size := stepSlotBytes * len(spans)
	for _, sp := range spans {
		size += roundUp(len(sp.src), stepSlotBytes)
	}
	if b.step.n+size/stepSlotBytes > maxStepSlots {
		return false
	}
	recs := grow(b.step.stage, size)
	b.step.stage = recs
	clear(recs)
	off := stepSlotBytes * len(spans)
	for i, sp := range spans {
		if len(sp.src)%4 != 0 || sp.dst%4 != 0 {
			panic(fmt.Sprintf("cuda: staged copy of %d bytes to %#x: not whole aligned words", len(sp.src), uint64(sp.dst)))
		}
		binary.LittleEndian.PutUint64(recs[stepSlotBytes*i:], uint64(sp.dst))
		binary.LittleEndian.PutUint64(recs[stepSlotBytes*i+8:], uint64(len(sp.src)/4)|uint64(off/4)<<32)
		copy(recs[off:], sp.src)
		off += roundUp(len(sp.src), stepSlotBytes)
	}
	runs := b.stepSlots(recs)
	if runs == 0 {
		return false
	}
	b.gen++
	b.queue = append(b.queue, copyRunsLaunch(runs, len(spans)))
	return true
}

// stageBytes is the backend's page-locked staging memory for copies in
// that do not wait (copyInNoWait); a copy of more than half of it is
// made synchronously.
const stageBytes = 4 << 20

// hostStage is the page-locked staging memory copies in go through so
// that they wait for nothing (cuMemcpyHtoDAsync): filled from off on, and
// reused from its start only after a host wait (a copy back or a sync),
// once the stream has passed every copy from it. Guarded by Backend.mu.
type hostStage struct {
	buf  []byte
	off  int
	none bool // the driver has none: copies in are synchronous
	size int  // bytes to get, stageBytes if 0 (tests make it small)
}

// asyncCopies reports whether copyInNoWait copies without waiting,
// getting the staging memory on its first call. Called with mu held.
func (b *Backend) asyncCopies() bool {
	st := &b.stage
	if st.buf == nil && !st.none {
		size := st.size
		if size == 0 {
			size = stageBytes
		}
		buf, err := b.drv.hostStage(size)
		st.buf, st.none = buf, err != nil
	}
	return !st.none
}

// copyInNoWait copies src to dst in stream order, as copyIn, but without
// waiting for the work queued before it where the driver has page-locked
// memory (asyncCopies): src goes into the staging memory and
// copyInAsync copies it from there. The staging memory is reused only
// after a host wait (waited); when it is full the backend waits for the
// stream once (a sync) to reuse it. Called with mu held.
func (b *Backend) copyInNoWait(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	st := &b.stage
	n := roundUp(len(src), 16)
	if !b.asyncCopies() || n > len(st.buf)/2 {
		err := b.drv.copyIn(dst, src)
		if err == nil {
			b.busy = false // it waited for the stream
		}
		return err
	}
	if st.off+n > len(st.buf) {
		if err := b.drv.sync(); err != nil {
			return err
		}
		b.waited()
	}
	buf := st.buf[st.off : st.off+len(src) : st.off+len(src)]
	copy(buf, src)
	st.off += n
	return b.drv.copyInAsync(dst, buf)
}

// waited records a host wait that the stream passed everything queued
// before it: launched work is done, and the staging memory is free again.
// Called with mu held, after a successful copy back or sync.
func (b *Backend) waited() {
	b.busy = false
	b.stage.off = 0
}
