package cudabackend

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/tensor"
)

// The block store keeps every part in device memory. A part is a few KiB
// (BlockSize x HeadDim values), far too small for an allocation of its
// own, so parts are slots of slabs, one slab list per slot size: hot slots
// (float32 or bf16; a block of a codec the kernels cannot read keeps its
// hot slot, holding the decoded values) and encoded slots in size classes
// of encAlign bytes (fixedAlign for int8 and kakeya_pc, see slotSize).
// Released slots are reused; slabs are freed when the
// store is garbage collected or the backend closes. Kakeya blocks also
// need their codec's settings (kakeyaParams), held once per codec in a
// slot of their own (kakeya_pc blocks their calibrated basis, pcParams,
// once per codec: per layer and KV head for keys), and preconditioned
// keys the inverse of their head's
// factor, held once per whitened codec (codec.Whitened, e.g.
// codec.Preconditioned: one per layer and KV head).

// encAlign is the granularity of encoded slots: their byte sizes are
// rounded up to it, and it aligns every slot for the kernels' wide loads.
// Coarse, since blocks of a variable-size codec (kakeya's outlier lists)
// would otherwise make a size class, and a slab, of each length.
const encAlign = 256

// fixedAlign is the granularity of the slots of codecs whose blocks have
// a length known ahead (encoding.slot): int8's, the same for every block,
// and kakeya_pc's, at most the bytes its rate allows (codec.PCSettings'
// MaxLen), whatever the codec's calibration, so that the key codecs of
// every layer and KV head share one size class (a codec capped well below
// its rate's bits, coded=N, takes encAlign classes instead). It is the
// kernels' widest load, 16 bytes.
const fixedAlign = 16

// slotSize returns the size of the slot of an encoded block of n bytes
// and part format format by dec: its encoding's slot where the device
// encodes dec's blocks and n is their length, else n rounded to encAlign.
// Called with the backend's mu held.
func (s *store) slotSize(dec compute.Decoder, n int) int {
	if e, ok := s.encodingOf(dec); ok && e.size == n {
		return e.slot
	}
	return roundUp(n, encAlign)
}

// slabBytes is the target size of one slab.
const slabBytes = 1 << 20

// part is one block's keys or values for one KV head.
type part struct {
	s      *store
	addr   Ptr   // the slot: hot rows, decoded float32 rows or codec bytes
	size   int   // the slot's size class
	format int32 // how attention reads addr (partF32, partBF16, partInt8, ...)
	// encLen is the codec bytes at addr, 0 unless the kernels read them;
	// a bf16 part encoded in place (queueEncode) has its bytes' length,
	// their payload (the rows) at addr.
	encLen int
	prm    Ptr // a partKakeya's kakeyaParams or a partKakeyaPC's pcParams, 0 for other formats
	linv   Ptr // a preconditioned part's inverse factor, 0 for others
	dec    compute.Decoder
	// enc keeps the codec bytes on the host when the device holds their
	// decoded values instead, so Read decodes them exactly.
	enc []byte
	// wtab is the table of kv_write launches this part leads (it is the
	// first part written of a layer's rows), nil when it leads none.
	wtab *writeTable
}

// writeTable is a device table of one run of kv_write's parts: their
// addresses, then the addresses of their sources. A layer's writes move
// down the same parts from the same sources step after step, so the table
// is uploaded when a block starts and reused until it fills.
type writeTable struct {
	addr Ptr      // a slot of the store
	size int      // its size class
	host []uint64 // what addr holds
}

func (p *part) Encoded() bool { return p.dec != nil }

// HotDecoded reports whether p is encoded by a codec the kernels cannot
// read, so that its hot slot holds the decoded values (compute.HotDecoded).
func (p *part) HotDecoded() bool { return p.dec != nil && p.encLen == 0 }

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
	tabs    []*writeTable // write tables no part leads, for reuse
	tabHost []uint64      // host scratch of writeTable
	// The device copies of kakeyaParams and pcParams, by codec and by
	// content (codecs of the same settings share one).
	prmOf  map[compute.Decoder]Ptr
	prmFor map[string]Ptr
	// The device copies of the preconditioners' inverse factors, and of
	// their factors (row-major, for enc_whiten; made on first use).
	linvOf map[compute.Decoder]Ptr
	lOf    map[compute.Decoder]Ptr
	// encOf is how the device encodes each codec's blocks.
	encOf map[compute.Decoder]encoding
	// gen counts the changes of part addresses and formats, so attention
	// rescans its block tables only when one may have changed.
	gen uint64
}

// NewBlockStore returns a store of parts of rows x d values in device
// memory, hot in bf16 or float32.
func (b *Backend) NewBlockStore(rows, d int, bf16 bool) compute.BlockStore {
	s := &store{b: b, rows: rows, d: d, bf16: bf16, mem: &slots{free: map[int][]Ptr{}},
		prmOf: map[compute.Decoder]Ptr{}, prmFor: map[string]Ptr{}, linvOf: map[compute.Decoder]Ptr{},
		encOf: map[compute.Decoder]encoding{}}
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

// slot returns a free slot of size bytes (a multiple of fixedAlign), cutting
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
	s.retire(p) // released before its pending writes were launched
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
	if rows == 1 {
		stride = s.d // unused: writes of one row share a run whatever their stride
	}
	if row < 0 || row+rows > s.rows || stride <= 0 || src.Len < (rows-1)*stride+s.d {
		panic(fmt.Sprintf("cuda: write of rows %d..%d (stride %d) from %d values into a part of %d rows", row, row+rows, stride, src.Len, s.rows))
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return
	}
	// Deferred to the backend's next device operation, so that the writes
	// of all the layer's heads become one launch (see kvWrites).
	b.writes = append(b.writes, kvWrite{s: s, pt: pt, dst: pt.addr, src: ptr(src), row: row, rows: rows, stride: stride, own: src.Mem})
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
	// The part's slot is its store's memory, and copyOut flushes, which
	// may free collected memory before the copy (see keep).
	defer runtime.KeepAlive(pt)
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
				dst[i] = tensor.BF16ToF32(v)
			}
		}
	default:
		enc := make([]byte, pt.encLen)
		if b.copyOut(enc, pt.addr) == nil {
			if pt.format == partKakeyaPCEC {
				enc = blockBytes(pt.dec, enc)
			}
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
		b.waited()
	}
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
	if err := checkEncoded(dec, enc, s.rows, s.d); err != nil {
		return err
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	b.flush()    // the part's pending writes first
	s.retire(pt) // an encoded part takes no more writes
	format, ok := encodedFormat(dec, s.d)
	// A preconditioned codec's bytes are its inner codec's: the settings
	// are the inner codec's, and the kernel un-whitens with the factor.
	inner, pre := dec, codec.Whitened(nil)
	if w, isPre := dec.(codec.Whitened); isPre && ok {
		inner, pre = w.Unwrap(), w
	}
	var prm, linv Ptr
	if ok && (format == partKakeya || format == partKakeyaPC || format == partKakeyaPCEC) {
		var err error
		if prm, ok, err = s.codecParams(inner, format); err != nil {
			return err
		}
	}
	if ok && pre != nil {
		var err error
		if linv, err = s.inverseFactor(pre); err != nil {
			return err
		}
	}
	if ok {
		size := s.slotSize(inner, len(enc))
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
		pt.addr, pt.size, pt.format, pt.encLen, pt.dec, pt.prm, pt.linv = addr, size, format, len(enc), dec, prm, linv
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
			s.host16[i] = tensor.F32ToBF16(v)
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

// codecParams returns the device copy of the settings attention reads
// dec's blocks of part format format with (kakeyaParams, pcParams),
// uploading it on the codec's first block, and false when the kernels
// cannot read dec's blocks after all. Called with the backend's mu held.
func (s *store) codecParams(dec compute.Decoder, format int32) (Ptr, bool, error) {
	if p, ok := s.prmOf[dec]; ok {
		return p, true, nil
	}
	var prm []byte
	var ok bool
	switch format {
	case partKakeyaPC:
		prm, ok = pcParams(dec, s.rows, s.d)
	case partKakeyaPCEC:
		// The rANS tables first, shared by every codec of the quantizer
		// family; the codec's params point at them.
		c, _, _ := builtinFormat(dec)
		tabs, off, off2, off3, tok := ransTables(c.Settings().PC)
		if !tok {
			return 0, false, nil
		}
		at, err := s.upload(tabs)
		if err != nil {
			return 0, false, err
		}
		prm, ok = pcecParams(dec, s.rows, s.d, at, off, off2, off3)
	default:
		prm, ok = kakeyaParams(dec, s.d)
	}
	if !ok {
		return 0, false, nil
	}
	p, err := s.upload(prm)
	if err != nil {
		return 0, false, err
	}
	s.prmOf[dec] = p
	return p, true, nil
}

// upload returns the device copy of b, a codec's settings, copying it in
// unless the store holds one of the same bytes. Called with the backend's
// mu held.
func (s *store) upload(b []byte) (Ptr, error) {
	if p, ok := s.prmFor[string(b)]; ok {
		return p, nil
	}
	p, err := s.slot(roundUp(len(b), encAlign))
	if err != nil {
		return 0, err
	}
	s.b.flush()
	if err := s.b.copyInNoWait(p, b); err != nil {
		s.b.fail(err)
		return 0, err
	}
	s.prmFor[string(b)] = p
	return p, nil
}

// inverseFactor returns the device copy of p's inverse factor (float32,
// in unwhitenLayout's order), uploading it on p's first block. Called with
// the backend's mu held.
func (s *store) inverseFactor(p codec.Whitened) (Ptr, error) {
	if a, ok := s.linvOf[p]; ok {
		return a, nil
	}
	_, linv := preconditioner(p, s.d)
	lay := unwhitenLayout(linv, s.d)
	a, err := s.slot(roundUp(4*len(lay), encAlign))
	if err != nil {
		return 0, err
	}
	s.b.flush()
	if err := s.b.copyInNoWait(a, bytesOf(lay)); err != nil {
		s.b.fail(err)
		return 0, err
	}
	s.linvOf[p] = a
	return a, nil
}

func (s *store) Release(p compute.Part) {
	pt := own(p)
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.retire(pt)
	s.release(pt.addr, pt.size)
	*pt = part{enc: pt.enc[:0]} // keep the host buffer for reuse
	s.parts = append(s.parts, pt)
	s.gen++
}

// writeTable returns the device table of a run of writes to the same
// rows of parts of s, led by the first write's part: the table that part
// leads, uploaded again only when its parts or sources changed. A run that
// fills its parts retires the table: those parts take no more writes.
// Called by kvWrites with the backend's mu held and the queue flushed.
func (s *store) writeTable(ws []kvWrite) (Ptr, error) {
	addr, full, err := s.table(ws)
	if full {
		s.retire(ws[0].pt)
	}
	return addr, err
}

// table is writeTable without the retiring: it reports whether the run
// fills its parts, for the caller to retire the table once no launch it
// holds back reads it (queueWrites).
func (s *store) table(ws []kvWrite) (Ptr, bool, error) {
	lead := ws[0].pt
	t := lead.wtab
	if t == nil {
		if n := len(s.tabs); n > 0 {
			t, s.tabs = s.tabs[n-1], s.tabs[:n-1]
		} else {
			t = new(writeTable)
		}
		lead.wtab = t
	}
	want := s.tabHost[:0]
	for _, w := range ws {
		want = append(want, uint64(w.dst))
	}
	for _, w := range ws {
		want = append(want, uint64(w.src))
	}
	s.tabHost = want
	if !slices.Equal(t.host, want) {
		if size := roundUp(8*len(want), encAlign); t.size < size {
			// A launch queued before may still read the old slot; the
			// stream orders whatever reuses it after that launch.
			s.release(t.addr, t.size)
			t.addr, t.size = 0, 0
			addr, err := s.slot(size)
			if err != nil {
				return 0, false, err
			}
			t.addr, t.size = addr, size
		}
		// A queued launch may read the slot's old table (one that
		// retired this step): it goes first.
		if s.b.stepReads(t.addr) {
			s.b.flushQueue()
		}
		if err := s.b.copyInNoWait(t.addr, bytesOf(want)); err != nil {
			t.host = t.host[:0]
			return 0, false, err
		}
		t.host = append(t.host[:0], want...)
	}
	return t.addr, ws[0].row+ws[0].rows == s.rows, nil
}

// retire returns the write table p leads, if any, to the store's tables.
// Called with the backend's mu held.
func (s *store) retire(p *part) {
	if p.wtab != nil {
		s.tabs = append(s.tabs, p.wtab)
		p.wtab = nil
	}
}

// checkEncoded checks bytes the kernels will read as they are, without a
// decoder's checks: a block of a format the kernels read must be whole and
// intact (codec.CheckBlock), or attention would read garbage as values.
// Bytes decoded on the host are checked by their decoder.
func checkEncoded(dec compute.Decoder, enc []byte, rows, d int) error {
	if _, ok := encodedFormat(dec, d); !ok {
		return nil
	}
	inner := dec
	if w, isPre := dec.(codec.Whitened); isPre {
		inner = w.Unwrap()
	}
	if f, ok := inner.(codec.Described); ok {
		if err := codec.CheckBlock(inner.Name(), enc, f.Format().ID, rows, d); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		if f.Format().ID == codec.FormatKakeyaPCEC {
			return checkPCEC(f, enc)
		}
	}
	return nil
}

// checkPCEC checks what the kernel takes from a kakeya_pc_ec block's
// fields against its codec and its length: its stream layout (1 or 2,
// attention_ec.cu reads both as they are), the counts of means and coded
// components its pcecParams hold (layout 2's means field counts only the
// means past those its first lanes carry), and a stream that ends where
// the block does, so that the kernel's reads, bounded by the stream's
// length, stay in the block's slot.
func checkPCEC(c codec.Described, enc []byte) error {
	if enc[3] != 1 && enc[3] != 2 {
		return fmt.Errorf("cuda: %s: entropy-coded block of stream layout %d; the CUDA attention kernel reads layouts 1 and 2", c.Name(), enc[3])
	}
	f := c.Format()
	var v codec.Vars
	if err := f.ReadFields(enc, &v); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	pc := c.Settings().PC
	coded := 0
	for _, w := range pc.Widths {
		if w > 0 {
			coded++
		}
	}
	means := len(pc.Stored)
	if enc[3] == 2 {
		means -= min(means, rans2Lanes)
	}
	if v[codec.VarMeans] != means || v[codec.VarCoded] != coded {
		return fmt.Errorf("cuda: %s: block holds %d means and %d coded components; the codec has %d and %d (stream layout %d)",
			c.Name(), v[codec.VarMeans], v[codec.VarCoded], means, coded, enc[3])
	}
	if l := f.Layout(&v); l.Size() != len(enc) {
		return fmt.Errorf("cuda: %s: block of %d bytes; its fields make it %d (code_bytes %d)", c.Name(), len(enc), l.Size(), v[codec.VarCodeBytes])
	}
	return nil
}

// blockBytes returns the block at the start of slot, the bytes of a
// variable-length format's block (kakeya_pc_ec's, as enc_pcec writes it
// into a slot of the most it is expected to take) by the lengths its fields
// give, or all of slot when they do not fit it (the codec's decoder then
// says what is wrong).
func blockBytes(dec compute.Decoder, slot []byte) []byte {
	if w, ok := dec.(codec.Whitened); ok {
		dec = w.Unwrap() // a preconditioned codec's blocks are its inner codec's
	}
	_, f, ok := builtinFormat(dec)
	if !ok {
		return slot
	}
	var v codec.Vars
	if f.ReadFields(slot, &v) != nil {
		return slot
	}
	if l := f.Layout(&v); l.Size() > 0 && l.Size() <= len(slot) {
		n := l.Size()
		return slot[:n]
	}
	return slot
}
