package cudabackend

import (
	"fmt"
	"slices"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// The store encodes full parts on the device (compute.PartEncoder) for
// four kinds of codec: codec.Int8, whose bytes enc_int8 makes bit for
// bit; codec.Int4 without rotation (int4, int2, int4-k, int2-k, a group
// of a power of two: the blocks attention reads), whose bytes enc_int4
// makes bit for bit; codec.KakeyaPC's fixed-rate format, whose bytes
// enc_pc makes by the same steps as its Encode, the rotation into the
// basis summed in another order (so a code on a quantizer cell's boundary
// may differ by one level, and a block mean by one fp16 step); and its
// entropy-coded format (kakeya_pc_ec: kakeya-pc with ec=true and kvtc,
// stream layouts 1 and 2), whose blocks enc_pcec makes by the same steps
// and the same scale rule, then the lanes' rANS coding, so that they are
// its bytes where the rotation gives the host's values (and otherwise
// differ as enc_pc's may). A kakeya_pc_ec block's length depends on its
// data: it takes a slot of the most it is expected to take (pcecSlot), which
// EncodedLen gives and the cache counts, and writes its length into its
// code_bytes field on the device, which the kernels that read it take
// from there (nothing is read back; Read trims the slot to the block).
// Every encoder writes the header and its CRC-32C; the part's bytes are
// then read by attention as SetEncoded's are, and by Read decoded on the
// host after a copy back. codec.BF16 (a side kept uncompressed: a
// boundary layer, a plan's "none") is kept as the payload of its bytes,
// the rows rounded to bf16, read as a bf16 hot part: in a store of bf16
// rows the hot slot already holds it, and in one of float32 rows enc_bf16
// rounds them into a slot of bf16 rows, bit for bit codec.BF16.Encode's
// rounding; either way the part counts at the bytes' length.
//
// Keys of a preconditioned codec (codec.Whitened with a Factor, e.g.
// codec.Preconditioned) whose inner codec is one of those four are
// whitened first by enc_whiten, y = x L into device scratch, one fused
// multiply-add a term in the host's order (so y is the host's bit for
// bit, and the block's bytes are the host's wherever the inner encoder
// makes the inner codec's), which the inner codec's encoder then reads as
// a float32 part; attention un-whitens them with the inverse factor as it
// does the blocks the host encodes (SetEncoded).

// encThreads is the block size of the encoders (a power of two: kk_seal
// combines the threads' CRCs pairwise).
const encThreads = 256

// encoding is how the device encodes one codec's blocks: its kernel, the
// encoded size and its slot's, and for kakeya_pc its settings' shape.
type encoding struct {
	// partInt8, partInt4, partKakeyaPC or partKakeyaPCEC; partBF16:
	// codec.BF16, its rows the hot slot's where that holds bf16 (slot 0),
	// else rounded into a slot of bf16 rows by enc_bf16.
	format  int32
	size    int // the encoded length (kakeya_pc_ec: the most, its slot's)
	slot    int // the size of the slot a block takes (see slotSize); 0: the hot slot kept
	shared  int // dynamic shared bytes of the kernel
	scratch int // kakeya_pc, kakeya_pc_ec, a whitened codec: bytes of device scratch
	cfg     int // int4: the header's parameter byte plus the group times 256
	// A preconditioned codec's: enc_whiten goes first, into the first
	// white bytes of the scratch (n x d floats, rounded up to encAlign),
	// the inner encoder's own scratch after them.
	white int
	ok    bool // the device encodes the codec's blocks
}

// factored is a whitened codec that gives its factor L (d x d,
// row-major, lower triangular), by which its Encode whitens the rows.
type factored interface {
	codec.Whitened
	Factor() []float32
}

// deviceEncoding returns how the device encodes dec's blocks of the
// store's shape, and false when it does not (any codec but int8, int4
// as attention reads it, kakeya_pc and kakeya_pc_ec, bf16 (in a store of
// bf16 rows the hot slot kept, of float32 rows enc_bf16's: see
// queueEncode), a whitened codec
// whose inner codec is none of those four, a head
// past maxHeadDim, a kakeya_pc block whose codes do not fit shared
// memory or whose settings pcParams cannot hold, a kakeya_pc_ec codec
// whose tables ransTables or pcecParams cannot hold). A kakeya_pc or
// kakeya_pc_ec codec's result is kept, and a whitened codec's takes its
// inner codec's kept one: its settings are a copy of its calibration, too
// large to make per block.
func (s *store) deviceEncoding(dec compute.Decoder) (encoding, bool) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.encodingOf(dec)
}

// encodingOf is deviceEncoding with the backend's mu held.
func (s *store) encodingOf(dec compute.Decoder) (encoding, bool) {
	if w, ok := dec.(codec.Whitened); ok {
		inner, ok := whitenable(w, s.d)
		if !ok {
			return encoding{}, false
		}
		e, ok := s.encodingOf(inner)
		if !ok || e.format == partBF16 { // whitened rows are no hot slot's
			return encoding{}, false
		}
		return whitened(e, s.rows, s.d), true
	}
	_, f, ok := builtinFormat(dec)
	if ok && f.ID == codec.FormatBF16 {
		// A side kept uncompressed (a boundary layer, a plan's "none"):
		// in a store of bf16 rows the hot slot holds the values bf16's
		// Decode gives already, and the part keeps it (queueEncode);
		// float32 rows are rounded by enc_bf16 into a slot of bf16 rows,
		// half the hot slot's size.
		l := f.Layout(&codec.Vars{codec.VarN: s.rows, codec.VarD: s.d})
		e := encoding{format: partBF16, size: l.Size(), ok: true}
		if !s.bf16 {
			e.slot = roundUp(2*s.rows*s.d, encAlign)
		}
		return e, true
	}
	if !ok || f.ID != codec.FormatKakeyaPC && f.ID != codec.FormatKakeyaPCEC {
		return deviceEncoding(dec, s.rows, s.d)
	}
	// A built-in format's codec: *codec.KakeyaPC, a valid map key.
	e, ok := s.encOf[dec]
	if !ok {
		e, e.ok = deviceEncoding(dec, s.rows, s.d)
		s.encOf[dec] = e
	}
	return e, e.ok
}

// deviceEncoding returns how the device encodes dec's blocks of n rows of
// d values (see store.deviceEncoding).
func deviceEncoding(dec compute.Decoder, n, d int) (encoding, bool) {
	if w, ok := dec.(codec.Whitened); ok {
		return whitenedEncoding(w, n, d)
	}
	c, f, ok := builtinFormat(dec)
	if !ok || d > maxHeadDim {
		return encoding{}, false
	}
	seal := 4 * (2*encThreads + 33)
	switch f.ID {
	case codec.FormatInt8:
		l := f.Layout(&codec.Vars{codec.VarN: n, codec.VarD: d})
		size := l.Size()
		return encoding{format: partInt8, size: size, slot: roundUp(size, fixedAlign), shared: seal}, true
	case codec.FormatInt4:
		// The blocks attention reads (no rotation, a group of a power of
		// two), whose codes fit shared memory.
		if pf, ok := encodedFormat(dec, d); !ok || pf != partInt4 {
			return encoding{}, false
		}
		st := c.Settings()
		v := codec.Vars{codec.VarN: n, codec.VarD: d, codec.VarBits: st.Bits, codec.VarGroup: st.Group,
			codec.VarPerChannel: b2i(st.PerChannel), codec.VarByteParams: b2i(st.ByteParams)}
		l := f.Layout(&v)
		codes := l.Len(len(f.Sections) - 1)
		param := st.Bits | 0x10*b2i(st.PerChannel) | 0x40*b2i(st.ByteParams)
		e := encoding{format: partInt4, size: l.Size(), slot: roundUp(l.Size(), fixedAlign),
			shared: 4*ceilDiv(codes, 4) + seal + 4, cfg: param | st.Group<<8}
		return e, e.shared <= attnSharedCap
	case codec.FormatKakeyaPC:
		pc := c.Settings().PC
		if pc == nil || len(pc.Mean) != d {
			return encoding{}, false
		}
		if _, ok := pcParams(dec, n, d); !ok {
			return encoding{}, false // enc_pc reads its settings there
		}
		coded := pc.Coded()
		rowBits := 0
		for _, w := range coded {
			rowBits += w
		}
		v := codec.Vars{codec.VarN: n, codec.VarD: d, codec.VarMeans: len(pc.Stored), codec.VarCoded: len(coded),
			codec.VarRowBits: rowBits, codec.VarCodeBytes: pc.CodeBytes(n)}
		l := f.Layout(&v)
		codes := l.Len(len(f.Sections) - 1)
		e := encoding{format: partKakeyaPC, size: l.Size(), slot: roundUp(l.Size(), encAlign), scratch: 4 * n * len(pc.Stored)}
		// The slot of the most bytes the rate allows, one size class for
		// every layer's and KV head's codec, where that wastes at most a
		// quarter of the block: a codec capped below its rate's bits
		// (coded=16, the kakeya preset's keys) spends far fewer (a d=128
		// block of 64 rows: 1,078 bytes, the rate's bound 2,582), and
		// keeps its own size class, so the cap saves device memory too.
		if bound, ok := pc.MaxLen(n, d); ok && e.size <= bound && bound <= e.size+e.size/4 {
			e.slot = roundUp(bound, fixedAlign)
		}
		m := len(pc.Stored)
		xs := roundUp(max(pcChunk(n, d, m, encThreads)*d, 16*m), 4) // staged rows, then the scale errors
		e.shared = 4*(xs+2*m+len(coded)+ceilDiv(codes, 4)) + seal
		return e, e.shared <= attnSharedCap
	case codec.FormatKakeyaPCEC:
		pc := c.Settings().PC
		if pc == nil || !pc.Entropy || len(pc.Mean) != d || pc.Param != 1 && pc.Param != 2 {
			return encoding{}, false
		}
		_, off, off2, off3, ok := ransTables(pc)
		if !ok {
			return encoding{}, false
		}
		if _, ok := pcecParams(dec, n, d, 0, off, off2, off3); !ok {
			return encoding{}, false // enc_pcec reads its settings there
		}
		m, c := len(pc.Stored), len(pc.Coded())
		slot := pcecSlot(pc, n, d)
		e := encoding{format: partKakeyaPCEC, size: slot, slot: slot, scratch: pcecScratch(n, m, c, len(pc.ScaleSteps), pcecLanes(pc.Param))}
		e.shared = 4*(pcecStaged(pcChunk(n, d, m, encThreads), d, m, c, len(pc.ScaleSteps), encThreads)+2*m+c) + seal + 4
		return e, e.shared <= attnSharedCap
	}
	return encoding{}, false
}

// whitenedEncoding returns how the device encodes the blocks of the
// whitened codec w (n rows of d values): enc_whiten, then the encoder of
// its inner codec (int8, int4 as attention reads it, kakeya_pc or
// kakeya_pc_ec), when the device encodes that and whitenable allows;
// else false.
func whitenedEncoding(w codec.Whitened, n, d int) (encoding, bool) {
	inner, ok := whitenable(w, d)
	if !ok {
		return encoding{}, false
	}
	e, ok := deviceEncoding(inner, n, d)
	if !ok {
		return encoding{}, false
	}
	return whitened(e, n, d), true
}

// whitenable returns the inner codec of w, and whether enc_whiten can
// whiten its blocks of d values: w gives its factor, the factor and its
// inverse are d x d, and the kernels undo w (see preconditioner).
func whitenable(w codec.Whitened, d int) (compute.Decoder, bool) {
	f, ok := w.(factored)
	inner, linv := preconditioner(w, d)
	if !ok || linv == nil || len(f.Factor()) != d*d {
		return nil, false
	}
	return inner, true
}

// whitened returns the encoding of a whitened codec whose inner codec's
// is e, for blocks of n rows of d values: e's kernel reads the n x d
// floats enc_whiten writes at the start of the scratch, its own scratch
// after them.
func whitened(e encoding, n, d int) encoding {
	e.white = roundUp(4*n*d, encAlign)
	e.scratch += e.white
	return e
}

// pcecStaged returns the floats of enc_pcec's shared memory where it
// stages rows (r rows of d), in which the c x steps trials' errors and
// lengths (float64) lie after the projection where the kernel's shared
// memory then stays within attnSharedCap (else they lie in the scratch),
// as kk_pcec_staged (kernels/cuda/encode.cu) does.
func pcecStaged(r, d, m, c, steps, threads int) int {
	rows, trials := roundUp(r*d, 4), 4*c*steps
	with := 4*(max(trials, rows)+2*m+c) + 4*(2*threads+32) + 8
	if with <= attnSharedCap && trials > rows {
		return trials
	}
	return rows
}

// pcecScratch returns the bytes of device scratch enc_pcec takes for a
// block of n rows of m stored components, c coded, with steps scale steps
// and lanes rANS lanes (encode.cu): y (n x m floats, rounded up to 16
// bytes), each trial's squared error and code length (c x steps float64
// each), a symbol word per code (c x n) and the stream's buffer (4 + 4
// lanes + 2 c n bytes).
func pcecScratch(n, m, c, steps, lanes int) int {
	return roundUp(4*n*m, 16) + 16*c*steps + 4*c*n + 4 + 4*lanes + 2*c*n
}

// EncodedLen implements compute.PartEncoder: int8, int4 (as attention
// reads it), kakeya_pc (fixed rate), kakeya_pc_ec (entropy-coded: the
// length of its slot, pcecSlot, the most its blocks take) and bf16 blocks
// are encoded on the device, and so are those of a preconditioned codec
// whose inner codec is one of the first four.
func (s *store) EncodedLen(dec compute.Decoder) (int, bool) {
	e, ok := s.deviceEncoding(dec)
	return e.size, ok
}

var _ compute.PartsEncoder = (*store)(nil)

// EncodePart implements compute.PartEncoder: EncodeParts of one part.
func (s *store) EncodePart(p compute.Part, dec compute.Decoder) error {
	return s.EncodeParts([]compute.Part{p}, []compute.Decoder{dec})
}

// EncodeParts implements compute.PartsEncoder: enc_int8, enc_int4,
// enc_pc, enc_pcec or enc_bf16 writes each part's encoding into an encoded
// slot, which takes the place of its hot slot (bf16 over bf16 rows keeps
// the hot slot); nothing crosses to the host. The parts are encoded by one
// launch per kernel and hot format (emitEncodes) before EncodeParts
// returns: a step's filled blocks of a layer, keys and values of every
// KV head (64 parts for a 512-token 7B prefill), a launch, not one each.
func (s *store) EncodeParts(ps []compute.Part, decs []compute.Decoder) error {
	if len(ps) != len(decs) {
		return fmt.Errorf("cuda: %d parts to encode with %d codecs", len(ps), len(decs))
	}
	es := make([]encoding, len(ps))
	for i, dec := range decs {
		if dec == nil {
			return fmt.Errorf("cuda: encoding a part without a codec")
		}
		e, ok := s.deviceEncoding(dec)
		if !ok {
			return fmt.Errorf("cuda: %s blocks are not encoded on the device", dec.Name())
		}
		es[i] = e
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	// The parts' last rows may still wait among the deferred writes,
	// through the parts' write tables: they go first, before the tables
	// return to the store and the parts' addresses move. A held norm_qkv
	// launch that makes them joins the queue (resolveHeld), before the
	// encoders; only writes of their own (kv_write, launched at once)
	// need the queue given to the driver, so a decode step that fills a
	// block stays one run of launches.
	if b.holding {
		b.resolveHeld()
	}
	if len(b.writes) > 0 {
		b.flush()
	}
	var err error
	for i, p := range ps {
		if err = s.queueEncode(own(p), decs[i], es[i]); err != nil {
			break
		}
	}
	b.emitEncodes() // what was queued, also when a later part failed
	if err != nil {
		return err
	}
	return b.err
}

// queueEncode makes the job that encodes pt by dec (encoding e) into a
// new encoded slot, which takes the place of pt's hot slot; emitEncodes
// launches it. Called with mu held.
func (s *store) queueEncode(pt *part, dec compute.Decoder, e encoding) error {
	b := s.b
	if pt.dec != nil {
		return fmt.Errorf("cuda: part already encoded by %s", pt.dec.Name())
	}
	// A whitened codec's factor for enc_whiten and inverse for
	// attention, each uploaded on the codec's first block.
	var l, linv Ptr
	inner := dec // whose settings the encoder reads
	if e.white > 0 {
		var err error
		w := dec.(factored) // whitenable checked it
		inner = w.Unwrap()
		if l, err = s.factor(w); err != nil {
			return err
		}
		if linv, err = s.inverseFactor(w); err != nil {
			return err
		}
	}
	s.retire(pt) // an encoded part takes no more writes
	if e.format == partBF16 && e.slot == 0 {
		// codec.BF16 in a store of bf16 rows (encodingOf): the hot slot
		// stays and nothing is launched. Its rows are the payload of
		// bf16's bytes (each float32 value rounded to nearest even, as
		// Encode rounds it), which attention and Read read as a hot
		// part's; the cache counts the part encoded, at the bytes'
		// length, as on the CPU (encLen set: not HotDecoded). Over
		// float32 rows enc_bf16 writes that payload into a slot of its
		// own (the job below), which the part then reads as bf16 rows.
		pt.dec, pt.encLen = dec, e.size
		return nil
	}
	var prm Ptr
	if e.format == partKakeyaPC || e.format == partKakeyaPCEC {
		var ok bool
		var err error
		if prm, ok, err = s.codecParams(inner, e.format); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("cuda: %s: no device settings for its blocks", dec.Name())
		}
	}
	size := e.slot
	addr, err := s.slot(size)
	if err != nil {
		return err
	}
	b.enc.jobs = append(b.enc.jobs, encJob{s: s, e: e, dst: addr, src: pt.addr, prm: prm, l: l, bf16: pt.format == partBF16, hotSize: pt.size})
	pt.addr, pt.size, pt.format, pt.encLen, pt.dec, pt.prm, pt.linv = addr, size, e.format, e.size, dec, prm, linv
	s.gen++
	return nil
}

// factor returns the device copy of w's factor L (float32, row-major),
// which enc_whiten reads, uploading it on w's first block. Called with the
// backend's mu held.
func (s *store) factor(w factored) (Ptr, error) {
	if a, ok := s.lOf[w]; ok {
		return a, nil
	}
	l := w.Factor()
	a, err := s.slot(roundUp(4*len(l), encAlign))
	if err != nil {
		return 0, err
	}
	s.b.flush()
	if err := s.b.copyInNoWait(a, bytesOf(l)); err != nil {
		s.b.fail(err)
		return 0, err
	}
	if s.lOf == nil {
		s.lOf = map[compute.Decoder]Ptr{}
	}
	s.lOf[w] = a
	return a, nil
}

// encWhitenLaunch whitens the hot part at src (n rows of d values, bf16
// or float32) by the factor l (d x d floats, row-major, lower
// triangular) into dst, n x d floats, in one block; with jobs set (a
// device array of count kk_enc_job entries: dst, src tagged by encJobBF16
// where its rows are bf16, l, unused), count parts, a block each, dst,
// src, bf16 and l then unused.
// Kernel: enc_whiten(float *dst, const void *src, int bf16, int n, int d, const float *L, const uint64 *jobs).
func encWhitenLaunch(dst, src Ptr, bf16 bool, n, d int, l, jobs Ptr, count int) Launch {
	positive("enc_whiten", n, d, count)
	int32Of("enc_whiten values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).ptr(l).ptr(jobs)
	return Launch{Kernel: "enc_whiten", Grid: Dim3{u32("enc_whiten parts", count), 1, 1}, Block: Dim3{encThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// encInt8Launch encodes the hot part at src (n rows of d values, bf16 or
// float32) as codec.Int8 into dst, header and CRC included, in one block;
// with jobs set (a device array of count kk_enc_job entries: dst, src
// tagged by encJobBF16 where its rows are bf16, prm, y), count parts, a
// block each, dst, src and bf16 then unused.
// Kernel: enc_int8(uint8 *dst, const void *src, int bf16, int n, int d, const uint64 *jobs).
func encInt8Launch(dst, src Ptr, bf16 bool, n, d, shared int, jobs Ptr, count int) Launch {
	positive("enc_int8", n, d, count)
	int32Of("enc_int8 values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).ptr(jobs)
	return Launch{Kernel: "enc_int8", Grid: Dim3{u32("enc_int8 parts", count), 1, 1}, Block: Dim3{encThreads, 1, 1}, Shared: uint32(shared), Args: a.b, Params: a.offs}
}

// encBF16Launch rounds the hot part at src (n rows of d float32 values)
// to bf16, to nearest even as codec.BF16.Encode rounds them, into dst (n
// x d bf16 values: the payload of bf16's bytes, which attention reads as
// a bf16 hot part), in one block; bf16 rows are copied as they are. With
// jobs set, count parts, as encInt8Launch, dst, src and bf16 then unused.
// Kernel: enc_bf16(uint16 *dst, const void *src, int bf16, int n, int d, const uint64 *jobs).
func encBF16Launch(dst, src Ptr, bf16 bool, n, d int, jobs Ptr, count int) Launch {
	positive("enc_bf16", n, d, count)
	int32Of("enc_bf16 values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).ptr(jobs)
	return Launch{Kernel: "enc_bf16", Grid: Dim3{u32("enc_bf16 parts", count), 1, 1}, Block: Dim3{encThreads, 1, 1}, Args: a.b, Params: a.offs}
}

// encInt4Launch encodes the hot part at src (n rows of d values, bf16 or
// float32) as codec.Int4 (no rotation) into dst, header and CRC included,
// in one block; cfg is the header's parameter byte plus the group times
// 256. With jobs set, count parts, as encInt8Launch, each job's cfg in
// its third word.
// Kernel: enc_int4(uint8 *dst, const void *src, int bf16, int n, int d, int cfg, const uint64 *jobs).
func encInt4Launch(dst, src Ptr, bf16 bool, n, d, cfg, shared int, jobs Ptr, count int) Launch {
	positive("enc_int4", n, d, count)
	int32Of("enc_int4 values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).i32("cfg", cfg).ptr(jobs)
	return Launch{Kernel: "enc_int4", Grid: Dim3{u32("enc_int4 parts", count), 1, 1}, Block: Dim3{encThreads, 1, 1}, Shared: uint32(shared), Args: a.b, Params: a.offs}
}

// encPCLaunch encodes the hot part at src (n rows of d values, bf16 or
// float32) as codec.KakeyaPC's fixed-rate format into dst, header and CRC
// included, in one block, with the codec's pcParams at prm and n x M
// floats of scratch at y; with jobs set, count parts, as encInt8Launch.
// Kernel: enc_pc(uint8 *dst, const void *src, int bf16, int n, int d, const float *prm, float *y, const uint64 *jobs).
func encPCLaunch(dst, src Ptr, bf16 bool, n, d int, prm, y Ptr, shared int, jobs Ptr, count int) Launch {
	positive("enc_pc", n, d, count)
	int32Of("enc_pc values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).ptr(prm).ptr(y).ptr(jobs)
	return Launch{Kernel: "enc_pc", Grid: Dim3{u32("enc_pc parts", count), 1, 1}, Block: Dim3{encThreads, 1, 1}, Shared: uint32(shared), Args: a.b, Params: a.offs}
}

// encPCECLaunch encodes the hot part at src (n rows of d values, bf16 or
// float32) as codec.KakeyaPC's entropy-coded format (kakeya_pc_ec, the
// codec's stream layout) into dst, a slot of the bytes its pcecParams
// say, header and CRC included, in one block, with the codec's pcecParams
// at prm and pcecScratch bytes of scratch; with jobs set, count parts, as
// encInt8Launch.
// Kernel: enc_pcec(uint8 *dst, const void *src, int bf16, int n, int d, const float *prm, uint8 *scratch, const uint64 *jobs).
func encPCECLaunch(dst, src Ptr, bf16 bool, n, d int, prm, scratch Ptr, shared int, jobs Ptr, count int) Launch {
	positive("enc_pcec", n, d, count)
	int32Of("enc_pcec values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).ptr(prm).ptr(scratch).ptr(jobs)
	return Launch{Kernel: "enc_pcec", Grid: Dim3{u32("enc_pcec parts", count), 1, 1}, Block: Dim3{encThreads, 1, 1}, Shared: uint32(shared), Args: a.b, Params: a.offs}
}

// encJobBF16 tags a kk_enc_job entry's hot part address (its second
// word, 16-byte aligned) whose rows are bf16: the encoders read each
// part's format from its entry, so that one launch encodes a layer's
// whitened keys (float32 rows, enc_whiten's) and its bf16 values.
const encJobBF16 = 1

// hotWord returns a kk_enc_job entry's second word: the hot part's
// address, tagged by encJobBF16 where its rows are bf16.
func hotWord(src Ptr, bf16 bool) uint64 {
	return uint64(src) | uint64(b2i(bf16))*encJobBF16
}

// encJob is one part's encode, launched with the others of its
// EncodeParts call (emitEncodes).
type encJob struct {
	s        *store
	e        encoding
	dst, src Ptr // the encoded slot, the hot slot
	prm      Ptr // kakeya_pc: the codec's pcParams; kakeya_pc_ec: its pcecParams
	l        Ptr // a whitened codec's factor: enc_whiten whitens the part into the job's scratch first
	bf16     bool
	hotSize  int // the hot slot's size, released once the encode is queued
}

// encBatch is the backend's state for batched encodes. Guarded by
// Backend.mu.
type encBatch struct {
	jobs []encJob
	tab  Ptr // the jobs' kk_enc_job entries on the device, without step parameters
	tabN int // entries tab holds
	y    Ptr // enc_pc's, enc_pcec's and enc_whiten's scratch, every job's
	yN   int // bytes y holds
	host []uint64
	// whiten is emitEncodes's scratch: the enc_whiten jobs of a batch.
	whiten []encJob
	// queued are the jobs whose encoders wait in the launch queue: their
	// hot slots go back to their stores once the queue is given to the
	// driver (releaseQueued), so that whatever writes a slot next is
	// ordered after the encoder that reads it.
	queued []encJob
}

// emitEncodes launches the jobs EncodeParts made, after the work queued
// and the cache writes deferred before them (EncodeParts launched those
// or folded them into the held norm_qkv):
// one launch per kernel and block shape (enc_int8, enc_int4, enc_pc,
// enc_pcec, enc_bf16; bf16 and float32 parts alike, each job's entry saying which:
// encJobBF16), a block each, after one enc_whiten launch for the whitened
// parts (whose encoders read its float32 rows). So a layer whose keys and
// values share a codec makes one encoder launch, whitened keys or not. The jobs' table (kk_enc_job entries) goes into
// the step parameters and the launches join the queue, so that neither
// the table's copy nor the launches cost the host a wait of their own:
// the table reaches the device with the step's other slots, in the one
// copy made when the queue goes to the driver, and a decode step's
// encoders are part of its run of launches. The parts' hot slots go back
// to their stores when the queue goes to the driver. Without step
// parameters (Options.NoStepGraph, or the step's slots full) the table is
// copied in and the encoders launched at once, as before, and the hot
// slots given back then. Called with mu held, no cache write deferred.
func (b *Backend) emitEncodes() {
	eb := &b.enc
	jobs := eb.jobs
	eb.jobs = nil
	queued := false
	defer func() {
		if queued {
			eb.queued = append(eb.queued, jobs...)
		} else {
			for _, j := range jobs {
				j.s.release(j.src, j.hotSize)
			}
		}
		clear(jobs)
		eb.jobs = jobs[:0]
	}()
	if b.err != nil {
		return
	}
	// The encoders' scratch: each enc_pc job's n x M floats, each
	// enc_pcec job's pcecScratch, each whitened job's n x d floats.
	need := 0
	for _, j := range jobs {
		need += roundUp(j.e.scratch, encAlign)
	}
	if need > eb.yN {
		if eb.y != 0 {
			b.freeLater(eb.y) // launched encoders may still use it
		}
		size := max(need, 2*eb.yN)
		eb.y, eb.yN = 0, 0
		p, err := b.allocRaw(size)
		if err != nil {
			b.fail(fmt.Errorf("cuda: scratch of %d batched kakeya_pc encodes: %w", len(jobs), err))
			return
		}
		eb.y, eb.yN = p, size
	}
	// A launch per kernel and block shape: the jobs sorted by them
	// (stably: each launch's parts in the order asked), a launch per run
	// of equal ones.
	kind := func(j encJob) [3]int { return [3]int{int(j.e.format), j.s.rows, j.s.d} }
	slices.SortStableFunc(jobs, func(a, b encJob) int {
		ka, kb := kind(a), kind(b)
		return slices.Compare(ka[:], kb[:])
	})
	host := eb.host[:0]
	y := eb.y
	whiten := eb.whiten[:0]
	for _, j := range jobs {
		var jy Ptr
		if j.e.scratch > 0 {
			jy = y
			y += Ptr(roundUp(j.e.scratch, encAlign))
		}
		third := uint64(j.prm)
		if j.e.format == partInt4 {
			third = uint64(j.e.cfg) // enc_int4 reads its settings there
		}
		src := hotWord(j.src, j.bf16)
		if j.e.white > 0 {
			// enc_whiten writes the whitened rows (float32) at the
			// start of the job's scratch, which the encoder reads as
			// its part, its own scratch after them.
			whiten = append(whiten, encJob{s: j.s, dst: jy, src: j.src, l: j.l, bf16: j.bf16})
			src = hotWord(jy, false)
			if j.e.scratch > j.e.white {
				jy += Ptr(j.e.white)
			} else {
				jy = 0
			}
		}
		host = append(host, uint64(j.dst), src, third, uint64(jy))
	}
	// enc_whiten's entries follow the encoders': a launch per block
	// shape.
	wkind := func(j encJob) [2]int { return [2]int{j.s.rows, j.s.d} }
	slices.SortStableFunc(whiten, func(a, b encJob) int {
		ka, kb := wkind(a), wkind(b)
		return slices.Compare(ka[:], kb[:])
	})
	for _, j := range whiten {
		host = append(host, uint64(j.dst), hotWord(j.src, j.bf16), uint64(j.l), 0)
	}
	eb.host = host
	defer func() {
		clear(whiten)
		eb.whiten = whiten[:0]
	}()
	// A job's entry is 32 bytes: two step slots.
	tab := b.stepSlots(bytesOf(host))
	queued = tab != 0
	if !queued {
		// Launched at once: the queued launches (a held norm_qkv that
		// wrote the parts' last rows among them) go first.
		b.flushQueue()
		if n := len(host); n > eb.tabN {
			if eb.tab != 0 {
				b.freeLater(eb.tab)
			}
			size := max(n, 2*eb.tabN, 256)
			eb.tab, eb.tabN = 0, 0
			p, err := b.allocRaw(8 * size)
			if err != nil {
				b.fail(fmt.Errorf("cuda: table of %d batched encodes: %w", len(jobs), err))
				return
			}
			eb.tab, eb.tabN = p, size
		}
		// Launched encoders read the table before this copy lands: the
		// stream orders them.
		if err := b.copyInNoWait(eb.tab, bytesOf(host)); err != nil {
			b.fail(err)
			return
		}
		tab = eb.tab
	}
	// The whitening first, in the same run of launches: each encoder
	// reads what it wrote, the stream ordering them.
	for first := 0; first < len(whiten); {
		j, end := whiten[first], first
		for ; end < len(whiten) && wkind(whiten[end]) == wkind(j); end++ {
		}
		l := encWhitenLaunch(0, 0, false, j.s.rows, j.s.d, 0, tab+Ptr(32*(len(jobs)+first)), end-first)
		if queued {
			b.gen++
			b.queue = append(b.queue, l)
		} else {
			b.fail(b.launch([]Launch{l}, false))
		}
		first = end
	}
	for first := 0; first < len(jobs); {
		j, end, shared := jobs[first], first, 0
		for ; end < len(jobs) && kind(jobs[end]) == kind(j); end++ {
			shared = max(shared, jobs[end].e.shared)
		}
		jt := tab + Ptr(32*first)
		var l Launch
		switch j.e.format {
		case partBF16:
			l = encBF16Launch(0, 0, false, j.s.rows, j.s.d, jt, end-first)
		case partInt8:
			l = encInt8Launch(0, 0, false, j.s.rows, j.s.d, shared, jt, end-first)
		case partInt4:
			l = encInt4Launch(0, 0, false, j.s.rows, j.s.d, 0, shared, jt, end-first)
		case partKakeyaPCEC:
			l = encPCECLaunch(0, 0, false, j.s.rows, j.s.d, 0, 0, shared, jt, end-first)
		default:
			l = encPCLaunch(0, 0, false, j.s.rows, j.s.d, 0, 0, shared, jt, end-first)
		}
		if queued {
			// Static: a decode step that fills a block has the same
			// encoders, reading their parts from the step parameters.
			b.gen++
			b.queue = append(b.queue, l)
		} else {
			b.fail(b.launch([]Launch{l}, false))
		}
		first = end
	}
}

// releaseQueued gives the hot slots of the encoded parts whose encoders
// were in the queue just given to the driver back to their stores.
// Called with mu held by flushQueue.
func (b *Backend) releaseQueued() {
	eb := &b.enc
	for _, j := range eb.queued {
		j.s.release(j.src, j.hotSize)
	}
	clear(eb.queued)
	eb.queued = eb.queued[:0]
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// pcXS is enc_pc's most floats of staged rows (KK_PC_XS in encode.cu).
const pcXS = 4096

// pcChunk returns the rows enc_pc stages at a time for n rows of d values
// and m stored components over threads threads, as kk_pc_chunk
// (kernels/cuda/encode.cu) does: at most 32 a thread (threads / m threads
// share a component) and pcXS floats.
func pcChunk(n, d, m, threads int) int {
	g := 1
	if m > 0 && m <= threads {
		g = threads / m
	}
	return max(1, min(32*g, pcXS/d, n))
}
