package cuda

import (
	"fmt"
	"runtime"

	"github.com/kakeya-ai/kakeya/compute"
)

// The block store keeps every part in device memory. A part is a few KiB
// (BlockSize x HeadDim values), far too small for an allocation of its
// own, so parts are slots of slabs, one slab list per slot size: hot slots
// (float32 or bf16; a block of a codec the kernels cannot read keeps its
// hot slot, holding the decoded values) and encoded slots in size classes
// of encAlign bytes. Released slots are reused; slabs are freed when the
// store is garbage collected or the backend closes.

// encAlign is the granularity of encoded slots: their byte sizes are
// rounded up to it, and it aligns every slot for the kernels' wide loads.
const encAlign = 256

// slabBytes is the target size of one slab.
const slabBytes = 1 << 20

// part is one block's keys or values for one KV head.
type part struct {
	s      *store
	addr   Ptr   // the slot: hot rows, decoded float32 rows or codec bytes
	size   int   // the slot's size class
	format int32 // how attention reads addr (partF32, partBF16, partInt8, ...)
	encLen int   // codec bytes at addr, 0 unless the kernels read them
	dec    compute.Decoder
	// enc keeps the codec bytes on the host when the device holds their
	// decoded values instead, so Read decodes them exactly.
	enc []byte
}

func (p *part) Encoded() bool { return p.dec != nil }

// slots is the device memory of one store: free slots by size, and the
// slabs they come from. It is separate from the store so that the store's
// cleanup can hold it without keeping the store reachable.
type slots struct {
	free  map[int][]Ptr
	slabs []Ptr
}

// store is the CUDA backend's compute.BlockStore.
type store struct {
	b       *Backend
	rows, d int
	bf16    bool
	mem     *slots
	parts   []*part   // released parts, for reuse
	host    []float32 // host scratch: decoded or widened rows
	host16  []uint16
	gather  map[int]Ptr // per row stride (in rows of d), the ids 0, k, 2k, ...
	// gen counts the changes of part addresses and formats, so attention
	// rescans its block tables only when one may have changed.
	gen uint64
}

// NewBlockStore returns a store of parts of rows x d values in device
// memory, hot in bf16 or float32.
func (b *Backend) NewBlockStore(rows, d int, bf16 bool) compute.BlockStore {
	s := &store{b: b, rows: rows, d: d, bf16: bf16, mem: &slots{free: map[int][]Ptr{}}, gather: map[int]Ptr{}}
	runtime.AddCleanup(s, b.freeSlabs, s.mem)
	return s
}

// freeSlabs hands a collected store's slabs to freeLater.
func (b *Backend) freeSlabs(m *slots) {
	for _, p := range m.slabs {
		b.freeLater(p)
	}
}

// AttendsEncoded reports true for every codec: a block whose codec the
// kernels read stays encoded on the device, any other holds its decoded
// values in its hot slot, so the cache may encode every block.
func (s *store) AttendsEncoded(compute.Decoder) bool { return true }

func (s *store) hotBytes() int {
	if s.bf16 {
		return 2 * s.rows * s.d
	}
	return 4 * s.rows * s.d
}

// slot returns a free slot of size bytes (a multiple of encAlign), cutting
// a new slab when there is none. Called with the backend's mu held.
func (s *store) slot(size int) (Ptr, error) {
	if f := s.mem.free[size]; len(f) > 0 {
		p := f[len(f)-1]
		s.mem.free[size] = f[:len(f)-1]
		return p, nil
	}
	n := max(1, slabBytes/size)
	slab, err := s.b.allocRaw(n * size)
	if err != nil {
		return 0, fmt.Errorf("cuda: block store slab of %d parts of %d bytes: %w", n, size, err)
	}
	s.mem.slabs = append(s.mem.slabs, slab)
	for i := n - 1; i > 0; i-- {
		s.mem.free[size] = append(s.mem.free[size], slab+Ptr(i*size))
	}
	return slab, nil
}

func (s *store) release(addr Ptr, size int) {
	if addr != 0 {
		s.mem.free[size] = append(s.mem.free[size], addr)
	}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func (s *store) NewPart() (compute.Part, error) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	size := roundUp(s.hotBytes(), encAlign)
	addr, err := s.slot(size)
	if err != nil {
		return nil, err
	}
	var p *part
	if n := len(s.parts); n > 0 {
		p, s.parts = s.parts[n-1], s.parts[:n-1]
	} else {
		p = new(part)
	}
	*p = part{s: s, addr: addr, size: size, format: partF32, enc: p.enc[:0]}
	s.gen++
	if s.bf16 {
		p.format = partBF16
	}
	return p, nil
}

// own returns p as a part of this backend.
func own(p compute.Part) *part {
	pt, ok := p.(*part)
	if !ok {
		panic(fmt.Sprintf("cuda: a %T is not a part of a CUDA block store", p))
	}
	return pt
}

func (s *store) Write(p compute.Part, row int, src compute.Buffer, stride, rows int) {
	pt := own(p)
	if pt.dec != nil {
		panic("cuda: write into an encoded part")
	}
	if rows <= 0 {
		return
	}
	if row < 0 || row+rows > s.rows || src.Len < (rows-1)*stride+s.d {
		panic(fmt.Sprintf("cuda: write of rows %d..%d (stride %d) from %d values into a part of %d rows", row, row+rows, stride, src.Len, s.rows))
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return
	}
	b.fail(s.write(pt, row, ptr(src), ptr(compute.Buffer{Mem: src.Mem}), stride, rows))
}

// Read copies p's values to dst, decoding an encoded part on the host
// from its bytes read back.
func (s *store) Read(dst []float32, p compute.Part) error {
	n := s.rows * s.d
	if len(dst) < n {
		return fmt.Errorf("cuda: read of a %dx%d block into %d values", s.rows, s.d, len(dst))
	}
	pt := own(p)
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	switch {
	case pt.dec != nil && pt.encLen == 0:
		if err := pt.dec.Decode(dst[:n], pt.enc, s.rows, s.d); err != nil {
			return fmt.Errorf("cuda: %s: %w", pt.dec.Name(), err)
		}
	case pt.format == partF32:
		b.read(dst[:n], pt.addr)
	case pt.format == partBF16:
		s.host16 = grow(s.host16, n)
		if b.copyOut(bytesOf(s.host16[:n]), pt.addr) == nil {
			for i, v := range s.host16[:n] {
				dst[i] = compute.BF16ToF32(v)
			}
		}
	default:
		enc := make([]byte, pt.encLen)
		if b.copyOut(enc, pt.addr) == nil {
			if err := pt.dec.Decode(dst[:n], enc, s.rows, s.d); err != nil {
				return fmt.Errorf("cuda: %s: %w", pt.dec.Name(), err)
			}
		}
	}
	return b.err
}

// copyOut reads device bytes back after the queued work. Called with mu
// held.
func (b *Backend) copyOut(dst []byte, p Ptr) error {
	b.flush()
	b.fail(b.drv.copyOut(dst, p))
	if b.err == nil {
		b.freePending()
	}
	return b.err
}

func grow[T any](x []T, n int) []T {
	if cap(x) < n {
		return make([]T, n)
	}
	return x[:n]
}

// SetEncoded stores enc in place of p's hot rows: as codec bytes when the
// kernels read dec's codec, else as the rows dec decodes them to, in the
// hot type.
func (s *store) SetEncoded(p compute.Part, enc []byte, dec compute.Decoder) error {
	pt := own(p)
	if dec == nil {
		return fmt.Errorf("cuda: encoded block without a decoder")
	}
	if pt.dec != nil {
		return fmt.Errorf("cuda: part already encoded by %s", pt.dec.Name())
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	if format, ok := encodedFormat(dec.Name()); ok {
		size := roundUp(len(enc), encAlign)
		addr, err := s.slot(size)
		if err != nil {
			return err
		}
		b.flush()
		if err := b.drv.copyIn(addr, enc); err != nil {
			b.fail(err)
			return err
		}
		// The hot slot goes back to the store: anything reading it is
		// queued before whatever will write it next.
		s.release(pt.addr, pt.size)
		pt.addr, pt.size, pt.format, pt.encLen, pt.dec = addr, size, format, len(enc), dec
		s.gen++
		return nil
	}
	// A codec the kernels cannot read: its decoded values take the hot
	// slot, in the hot type (bf16 rounding is far below any lossy
	// codec's error, and a float32 copy would make the "compressed" block
	// twice a bf16 one), and its bytes stay on the host for Read.
	n := s.rows * s.d
	s.host = grow(s.host, n)
	if err := dec.Decode(s.host, enc, s.rows, s.d); err != nil {
		return fmt.Errorf("cuda: %s: %w", dec.Name(), err)
	}
	src := bytesOf(s.host)
	if s.bf16 {
		s.host16 = grow(s.host16, n)
		for i, v := range s.host {
			s.host16[i] = compute.F32ToBF16(v)
		}
		src = bytesOf(s.host16)
	}
	b.flush()
	if err := b.drv.copyIn(pt.addr, src); err != nil {
		b.fail(err)
		return err
	}
	pt.enc, pt.dec = append(pt.enc[:0], enc...), dec
	return nil
}

func (s *store) Release(p compute.Part) {
	pt := own(p)
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.release(pt.addr, pt.size)
	*pt = part{enc: pt.enc[:0]} // keep the host buffer for reuse
	s.parts = append(s.parts, pt)
	s.gen++
}

// write copies rows rows of d float32 values, row i at src+4*i*stride, to
// rows row.. of the hot part pt; base is the start of src's allocation.
// Called with the backend's mu held.
func (s *store) write(pt *part, row int, src, base Ptr, stride, rows int) error {
	b, d := s.b, s.d
	if !s.bf16 {
		dst := pt.addr + Ptr(4*row*d)
		if stride == d {
			b.flush()
			return b.drv.copyDevice(dst, src, 4*rows*d)
		}
		if stride%d == 0 {
			// Gather the rows with the embedding kernel: src is a table
			// of rows of d values and row i is its row i*stride/d.
			ids, err := s.gatherIDs(stride / d)
			if err != nil {
				return err
			}
			b.enqueue(embedLaunch(compute.F32, dst, src, ids, rows, d), true)
			return nil
		}
		b.flush()
		for i := range rows {
			if err := b.drv.copyDevice(dst+Ptr(4*i*d), src+Ptr(4*i*stride), 4*d); err != nil {
				return err
			}
		}
		return nil
	}
	// bf16 rows: no kernel narrows float32 on the device, so the rows make
	// a round trip through the host, deferred to the backend's next device
	// operation so that the writes of all heads of a layer share one wait.
	b.narrow = append(b.narrow, narrowWrite{dst: pt.addr + Ptr(2*row*d), src: src, base: base, stride: stride, rows: rows, d: d})
	return nil
}

// gatherIDs returns device ids 0, k, 2k, ... for s.rows rows, uploaded
// once per k.
func (s *store) gatherIDs(k int) (Ptr, error) {
	if p, ok := s.gather[k]; ok {
		return p, nil
	}
	ids := make([]int32, s.rows)
	for i := range ids {
		ids[i] = int32(i * k)
	}
	p, err := s.slot(roundUp(4*s.rows, encAlign))
	if err != nil {
		return 0, err
	}
	s.b.flush()
	if err := s.b.drv.copyIn(p, bytesOf(ids)); err != nil {
		return 0, err
	}
	s.gather[k] = p
	return p, nil
}
