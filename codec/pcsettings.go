package codec

// PCSettings are what a reader of kakeya_pc and kakeya_pc_ec blocks needs
// beyond their bytes, from a calibrated KakeyaPC (Settings.PC): the
// components with a stored block mean (M of them, increasing), their
// basis rows, the calibration mean, each one's code width (with entropy
// coding, its quantizer option) and the quantizers' tables. A block's row
// i is
//
//	x_i = Mean + Σ_k (m_k + s_t·Levels[Widths[k]][c_it]) Basis[k]
//
// over the stored components k, m_k the block's mean of component k, and,
// for the coded ones (Widths[k] > 0, the t-th such), s_t the block's
// scale and c_it the row's code, at CodeBit(t, i, n) of the codes
// section (CodeBytes(n) long). With Entropy (kakeya_pc_ec) the codes are
// instead the rANS stream of the format's description, coded component t's
// symbols under RANS[Widths[k]], its level Levels[Widths[k]][symbol].
type PCSettings struct {
	// Mean is the calibration mean μ, d values.
	Mean []float32
	// Stored lists the components with a stored block mean, increasing.
	Stored []int
	// Basis holds the stored components' basis rows, len(Stored) x d.
	Basis []float32
	// Widths is each stored component's code width, 0 for the mean only;
	// with Entropy its quantizer option b (Levels[b]), 0 for the mean only.
	Widths []int
	// Levels[b] and Bounds[b] are the quantizer of b bits on N(0, 1)
	// (b = 1..6; index 0 is empty): its 2^b levels in code order and the
	// 2^b - 1 cell bounds between them. With Entropy, option b's (b = 1..
	// len(Levels)-1), whose levels need not number a power of two.
	Levels, Bounds [][]float32
	// Entropy is set for the entropy-coded format, kakeya_pc_ec: Coded,
	// CodeBit, CodeBytes and MaxLen describe the fixed-rate format's
	// planes only, and RANS[b] (b = 1..len(Levels)-1; index 0 is empty)
	// is the static rANS table of option b's symbols (shared by every
	// codec of the quantizer family: read only).
	Entropy bool
	RANS    []RANSTable
	// RANS2 holds, with Entropy, stream layout 2's tables: option b's
	// packed entries (one per slot x, symbol | freq<<8 | (x - start)<<20,
	// the format's scale_bits2 bits of slots) at RANS2[b<<scale_bits2:],
	// option 0's zeros (shared by every codec of the family: read only).
	RANS2 []uint32
	// ScaleSteps are the factors of a coded component's RMS the encoder
	// tries as its scale, in order, keeping the first of least error.
	ScaleSteps []float32
	// CodeCost and CodeBits are, with Entropy, what the encoder's scale
	// rule charges a code: CodeCost[b][s] the length in bits of option
	// b's symbol s (layout 1's tables, whatever the stream layout) and
	// CodeBits[b] the option's expected length per symbol on N(0, 1)
	// (index 0 empty). With Constrained (kakeya-pc with ec=true, not
	// kvtc) a coded component of option b takes, of ScaleSteps, the scale
	// of least squared error whose n codes cost at most n·CodeBits[b]
	// plus what the components before it left unspent, or where none
	// does the cheapest (see KakeyaPC.Encode); without it the scale of
	// least error. Read only.
	CodeCost    [][]float32
	CodeBits    []float64
	Constrained bool
	// Tag is the blocks' configuration tag (header bytes 10..11), Param
	// their parameter byte (header byte 3: the code layout).
	Tag   uint16
	Param byte
	// Rate and Block are the allocation's budget (KakeyaPCOptions): its
	// means, scales and codes take at most Rate bits per value in blocks
	// of Block rows, so such a block (Block a multiple of 8) is at most
	// MaxLen bytes, whatever the codec's calibration.
	Rate  float64
	Block int
}

// A RANSTable is the static rANS table of one quantizer's codes, as
// kakeya_pc_ec's stream uses it (see formatKakeyaPCEC): symbol s owns the
// Freq[s] slots from Start[s] among the len(Slot) (2^scale_bits), and
// Slot[x] is the symbol owning slot x. A decoder at state x takes symbol
// s = Slot[x mod len(Slot)] and moves to Freq[s]*(x / len(Slot)) +
// x mod len(Slot) - Start[s].
type RANSTable struct {
	Freq, Start []uint32
	Slot        []uint8
}

// ransExport returns t's rANS tables as RANSTables, index 0 empty, made
// on the first call and shared by every codec of the family after.
func (t *pcTables) ransExport() []RANSTable {
	t.ransOnce.Do(func() {
		t.rans = make([]RANSTable, t.n+1)
		for b := 1; b <= t.n; b++ {
			t.rans[b] = exportRANS(t.ans[b])
		}
	})
	return t.rans
}

// exportRANS returns t as a RANSTable, read through its accessors.
func exportRANS(t *ransTable) RANSTable {
	n := t.symbols()
	r := RANSTable{Freq: make([]uint32, n), Start: make([]uint32, n), Slot: make([]uint8, 1<<ransScaleBits)}
	for s := range n {
		r.Freq[s], r.Start[s] = t.freqStart(s)
	}
	for x := range r.Slot {
		r.Slot[x] = t.symbolAt(uint32(x))
	}
	return r
}

// MaxLen returns the most bytes a block of n rows of d values takes under
// s's rate, whatever the calibration (every codec of the same options
// fits it), and false where the budget does not bound it: n other than
// the allocation's Block, or not a multiple of 8 (each code plane's
// padding to a byte then costs more than its bits).
func (s *PCSettings) MaxLen(n, d int) (int, bool) {
	if s.Entropy || n != s.Block || n%8 != 0 {
		return 0, false
	}
	return headerLen + 6 + int(s.Rate*float64(n*d))/8, true
}

// Coded returns the code widths of the coded components, in block order.
func (s *PCSettings) Coded() []int {
	var w []int
	for _, b := range s.Widths {
		if b > 0 {
			w = append(w, b)
		}
	}
	return w
}

// CodeBit returns the bit offset, in the codes section of a block of n
// rows, of the code of row i of coded component t (counted in block
// order): each coded component's n codes lie in a plane of their own,
// LSB first, padded to a byte, the planes in block order.
func (s *PCSettings) CodeBit(t, i, n int) int {
	w := s.Coded()
	before := 0
	for _, b := range w[:t] {
		before += planeBytes(n, uint8(b))
	}
	return 8*before + i*w[t]
}

// CodeBytes returns the length of the codes section of a block of n rows
// (the format's code_bytes).
func (s *PCSettings) CodeBytes(n int) int {
	total := 0
	for _, b := range s.Coded() {
		total += planeBytes(n, uint8(b))
	}
	return total
}

// pcSettings returns k's PCSettings; k is calibrated.
func (k *KakeyaPC) pcSettings() *PCSettings {
	d := k.d
	s := &PCSettings{
		Mean:       append([]float32(nil), k.mean...),
		Stored:     append([]int(nil), k.meanIdx...),
		Basis:      make([]float32, 0, len(k.meanIdx)*d),
		Widths:     make([]int, len(k.meanIdx)),
		Levels:     make([][]float32, k.tab.n+1),
		Bounds:     make([][]float32, k.tab.n+1),
		ScaleSteps: append([]float32(nil), pcScaleSteps[:]...),
		Entropy:    k.opt.Entropy,
		Tag:        k.tag,
		Param:      k.param(),
		Rate:       k.opt.Rate,
		Block:      k.opt.Block,
	}
	for t, j := range k.meanIdx {
		s.Basis = append(s.Basis, k.basis[j*d:(j+1)*d]...)
		s.Widths[t] = int(k.alloc[j])
	}
	if k.opt.Entropy && !k.opt.Uniform {
		s.ScaleSteps = append(s.ScaleSteps[:0], pcECSQScales[:]...)
	}
	for b := 1; b <= k.tab.n; b++ {
		s.Levels[b] = append([]float32(nil), k.tab.levels[b]...)
		s.Bounds[b] = append([]float32(nil), k.tab.bounds[b]...)
	}
	if k.opt.Entropy {
		s.Constrained = !k.opt.Uniform
		s.CodeCost = make([][]float32, k.tab.n+1)
		s.CodeBits = make([]float64, k.tab.n+1)
		for b := 1; b <= k.tab.n; b++ {
			s.CodeCost[b], s.CodeBits[b] = k.tab.ans[b].cost, k.tab.ans[b].bits
		}
	}
	if k.opt.Entropy {
		s.RANS = k.tab.ransExport()
		s.RANS2 = k.tab.ent2[: (k.tab.n+1)<<rans2ScaleBits : (k.tab.n+1)<<rans2ScaleBits]
	}
	return s
}
