package cudabackend

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// The store encodes full parts on the device (compute.PartEncoder) for
// two codecs: codec.Int8, whose bytes enc_int8 makes bit for bit, and
// codec.KakeyaPC's fixed-rate format, whose bytes enc_pc makes by the same
// steps as its Encode, the rotation into the basis summed in another
// order (so a code on a quantizer cell's boundary may differ by one level,
// and a block mean by one fp16 step). Both write the header and its
// CRC-32C; the part's bytes are then read by attention as SetEncoded's
// are, and by Read decoded on the host after a copy back.

// encThreads is the block size of the encoders (a power of two: kk_seal
// combines the threads' CRCs pairwise).
const encThreads = 256

// encoding is how the device encodes one codec's blocks: its kernel, the
// encoded size and its slot's, and for kakeya_pc its settings' shape.
type encoding struct {
	format  int32 // partInt8 or partKakeyaPC
	size    int   // the encoded length
	slot    int   // the size of the slot a block takes (see slotSize)
	shared  int   // dynamic shared bytes of the kernel
	scratch int   // kakeya_pc: bytes of device scratch (y)
	ok      bool  // the device encodes the codec's blocks
}

// deviceEncoding returns how the device encodes dec's blocks of the
// store's shape, and false when it does not (any codec but int8 and
// kakeya_pc, a whitened codec, a head past maxHeadDim, a kakeya_pc block
// whose codes do not fit shared memory or whose settings pcParams cannot
// hold). A kakeya_pc codec's result is kept: its settings are a copy of
// its calibration, too large to make per block.
func (s *store) deviceEncoding(dec compute.Decoder) (encoding, bool) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.encodingOf(dec)
}

// encodingOf is deviceEncoding with the backend's mu held.
func (s *store) encodingOf(dec compute.Decoder) (encoding, bool) {
	_, f, ok := builtinFormat(dec)
	if !ok || f.ID != codec.FormatKakeyaPC {
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
	if _, ok := dec.(codec.Whitened); ok {
		return encoding{}, false
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
		if bound, ok := pc.MaxLen(n, d); ok && e.size <= bound {
			e.slot = roundUp(bound, fixedAlign)
		}
		e.shared = 4*(len(pc.Stored)+len(coded)+ceilDiv(codes, 4)) + seal
		return e, e.shared <= attnSharedCap
	}
	return encoding{}, false
}

// EncodedLen implements compute.PartEncoder: int8 and kakeya_pc (fixed
// rate) blocks are encoded on the device.
func (s *store) EncodedLen(dec compute.Decoder) (int, bool) {
	e, ok := s.deviceEncoding(dec)
	return e.size, ok
}

// EncodePart implements compute.PartEncoder: one launch of enc_int8 or
// enc_pc writes the part's encoding into an encoded slot, which takes the
// place of its hot slot; nothing crosses to the host.
func (s *store) EncodePart(p compute.Part, dec compute.Decoder) error {
	pt := own(p)
	if dec == nil {
		return fmt.Errorf("cuda: encoding a part without a codec")
	}
	if pt.dec != nil {
		return fmt.Errorf("cuda: part already encoded by %s", pt.dec.Name())
	}
	e, ok := s.deviceEncoding(dec)
	if !ok {
		return fmt.Errorf("cuda: %s blocks are not encoded on the device", dec.Name())
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	s.retire(pt) // an encoded part takes no more writes
	var prm Ptr
	if e.format == partKakeyaPC {
		var err error
		if prm, ok, err = s.codecParams(dec, partKakeyaPC); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("cuda: %s: no device settings for its blocks", dec.Name())
		}
		if s.encN < e.scratch {
			// Launches queued before may still use the old scratch; the
			// stream orders whatever reuses its slot after them.
			s.release(s.enc, s.encN)
			s.enc, s.encN = 0, 0
			a, err := s.slot(roundUp(e.scratch, encAlign))
			if err != nil {
				return err
			}
			s.enc, s.encN = a, roundUp(e.scratch, encAlign)
		}
	}
	size := e.slot
	addr, err := s.slot(size)
	if err != nil {
		return err
	}
	if e.format == partInt8 {
		b.enqueue(encInt8Launch(addr, pt.addr, pt.format == partBF16, s.rows, s.d, e.shared), true)
	} else {
		b.enqueue(encPCLaunch(addr, pt.addr, pt.format == partBF16, s.rows, s.d, prm, s.enc, e.shared), true)
	}
	if b.err != nil {
		s.release(addr, size)
		return b.err
	}
	// The hot slot goes back to the store: the encoder reading it is
	// queued before whatever will write it next.
	s.release(pt.addr, pt.size)
	pt.addr, pt.size, pt.format, pt.encLen, pt.dec, pt.prm, pt.linv = addr, size, e.format, e.size, dec, prm, 0
	s.gen++
	return nil
}

// encInt8Launch encodes the hot part at src (n rows of d values, bf16 or
// float32) as codec.Int8 into dst, header and CRC included, in one block.
// Kernel: enc_int8(uint8 *dst, const void *src, int bf16, int n, int d).
func encInt8Launch(dst, src Ptr, bf16 bool, n, d, shared int) Launch {
	positive("enc_int8", n, d)
	int32Of("enc_int8 values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d)
	return Launch{Kernel: "enc_int8", Grid: Dim3{1, 1, 1}, Block: Dim3{encThreads, 1, 1}, Shared: uint32(shared), Args: a.b, Params: a.offs}
}

// encPCLaunch encodes the hot part at src (n rows of d values, bf16 or
// float32) as codec.KakeyaPC's fixed-rate format into dst, header and CRC
// included, in one block, with the codec's pcParams at prm and n x M
// floats of scratch at y.
// Kernel: enc_pc(uint8 *dst, const void *src, int bf16, int n, int d, const float *prm, float *y).
func encPCLaunch(dst, src Ptr, bf16 bool, n, d int, prm, y Ptr, shared int) Launch {
	positive("enc_pc", n, d)
	int32Of("enc_pc values", n*d)
	a := new(args).ptr(dst).ptr(src).i32("bf16", b2i(bf16)).i32("n", n).i32("d", d).ptr(prm).ptr(y)
	return Launch{Kernel: "enc_pc", Grid: Dim3{1, 1, 1}, Block: Dim3{encThreads, 1, 1}, Shared: uint32(shared), Args: a.b, Params: a.offs}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
