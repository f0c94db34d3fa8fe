package codec

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/tensor"
)

func init() {
	Register(Registration{Name: "kakeya-pc", Principal: true, Formats: []FormatID{FormatKakeyaPC, FormatKakeyaPCEC}, New: newPCSpec})
	Register(Registration{Name: "kvtc", Principal: true, Formats: []FormatID{FormatKakeyaPCEC}, New: newPCSpec})
}

// newPCSpec builds kakeya-pc or kvtc from a spec. The statistics come from
// a calibration (kvplan builds one codec per layer side from it); this one
// only carries the settings.
func newPCSpec(s Spec, a *Args) (Codec, error) {
	o := DefaultKakeyaPCOptions()
	a.Float("rate", &o.Rate)
	a.Want("rate", o.Rate >= 0 && o.Rate <= 16, "want bits per value in 0..16")
	a.IntIn("maxbits", &o.MaxBits, 1, pcMaxBits)
	a.IntIn("coded", &o.MaxCoded, 0, math.MaxUint16)
	a.Float("codedfrac", &o.CodedFrac)
	a.Want("codedfrac", o.CodedFrac >= 0 && o.CodedFrac <= 1, "want a fraction of the head dimension in 0..1")
	a.IntIn("block", &o.Block, 1, maxRows)
	a.Bool("qw", &o.QueryWeighted)
	if s.Name == "kvtc" {
		o.Entropy, o.Uniform = true, true
	} else {
		a.Bool("ec", &o.Entropy)
	}
	a.IntIn("layout", &o.StreamLayout, 1, 2)
	if a.Err() != nil {
		return nil, nil
	}
	return NewKakeyaPC(o, nil, nil)
}

// PCAStats are the principal components of one layer side's cached
// vectors (keys before RoPE, or values), measured offline over blocks of
// a calibration text: what KakeyaPC allocates its bits from.
type PCAStats struct {
	// Mean is the mean vector, d values.
	Mean []float32
	// Basis holds the d orthonormal components as rows (d x d, row-major),
	// in decreasing order of Var: the eigenvectors of the within-block
	// covariance.
	Basis []float32
	// Var is each component's variance within a block (around the block's
	// own mean): what a coded component's quantizer sees.
	Var []float32
	// Between is the variance of each component's block mean around
	// Mean: what a component loses when a block does not store its mean.
	Between []float32
}

// Dim returns the vector dimension d.
func (s *PCAStats) Dim() int { return len(s.Mean) }

// Validate checks the shapes (d values, a d x d basis), that every value is
// finite, the variances are not negative and the basis rows are unit
// vectors to within 1e-3.
func (s *PCAStats) Validate() error {
	if s == nil {
		return fmt.Errorf("codec: pca statistics are nil")
	}
	d := len(s.Mean)
	switch {
	case d == 0 || d > maxDim:
		return fmt.Errorf("codec: pca: dimension %d not in 1..%d", d, maxDim)
	case len(s.Basis) != d*d:
		return fmt.Errorf("codec: pca: basis has %d values, want d*d = %d", len(s.Basis), d*d)
	case len(s.Var) != d || len(s.Between) != d:
		return fmt.Errorf("codec: pca: %d variances and %d between-block variances, want d = %d each", len(s.Var), len(s.Between), d)
	}
	for _, a := range []struct {
		name string
		v    []float32
		pos  bool
	}{{"mean", s.Mean, false}, {"basis", s.Basis, false}, {"variance", s.Var, true}, {"between-block variance", s.Between, true}} {
		for i, v := range a.v {
			if !finite32(v) || a.pos && v < 0 {
				return fmt.Errorf("codec: pca: %s %d is %v", a.name, i, v)
			}
		}
	}
	for j := 0; j < d; j++ {
		var nn float64
		for _, v := range s.Basis[j*d : (j+1)*d] {
			nn += float64(v) * float64(v)
		}
		if math.Abs(nn-1) > 1e-3 {
			return fmt.Errorf("codec: pca: basis row %d has squared norm %v, want 1", j, nn)
		}
	}
	return nil
}

// KakeyaPCOptions configures KakeyaPC. Start from DefaultKakeyaPCOptions.
type KakeyaPCOptions struct {
	// Rate is the payload budget in bits per value (component means,
	// scales and codes; the 22 bytes of header and counts aside), for
	// blocks of Block rows. The allocation spends at most this.
	Rate float64
	// MaxBits is the widest code a component may get, 1..pcMaxBits.
	MaxBits int
	// MaxCoded, when positive, codes at most this many components: the
	// ones of most (weighted) variance; the others keep at most their
	// block mean, and the budget they leave is not spent. A decode's
	// work on a block is proportional to its coded components (for keys,
	// rows x coded x d multiply-adds to reconstruct them before RoPE), so
	// this caps it; 0 leaves the count to the allocation.
	MaxCoded int
	// CodedFrac, when positive, caps the coded components at this
	// fraction of the vector dimension d (rounded, at least one), as
	// MaxCoded caps them at a count; with both, the smaller cap holds.
	// A fraction keeps what was measured at one head size (16 of 64
	// key components: a quarter) the same share at another (32 of 128).
	CodedFrac float64
	// Block is the block length the allocation charges a component's
	// fp16 mean and scale to (per-block costs spread over Block rows);
	// blocks of other lengths still code, at a slightly different rate.
	Block int
	// QueryWeighted asks the planner (kvplan) to weigh a key component's
	// error by the queries' second moment along it, E[(qᵀu_j)²], from the
	// calibration's query factors: the allocation then minimizes the error
	// of attention scores instead of the keys' own. Values ignore it.
	QueryWeighted bool
	// Entropy codes each block's component codes with a static rANS coder
	// over the quantizer's cell probabilities on N(0, 1) (format
	// kakeya_pc_ec), and the allocation charges a code its expected
	// entropy-coded length instead of its width: at the same rate it
	// affords more bits. Blocks then vary in size with their data. Off,
	// the codes are fixed-width (format kakeya_pc): the fast mode.
	Entropy bool
	// Uniform quantizes with the uniform quantizer of 2^b levels of least
	// Gaussian error instead of Lloyd–Max's: with Entropy, the KVTC-style
	// codec ("kvtc").
	Uniform bool
	// StreamLayout is the entropy-coded stream's layout the encoder
	// writes: 2 (the default, also for 0), 32 lanes with packed 12-bit
	// tables, or 1, 8 lanes with 14-bit tables, the one the CUDA
	// attention kernel reads. Both decode either; the allocation, the
	// codes and the tag are the same for both.
	StreamLayout int
}

// DefaultKakeyaPCOptions returns 2.5 bits per value (with the header,
// about 6.3x smaller than bf16 at d = 64 and blocks of 64), codes of up to
// 6 bits, allocated for blocks of 64 rows.
func DefaultKakeyaPCOptions() KakeyaPCOptions {
	return KakeyaPCOptions{Rate: 2.5, MaxBits: pcMaxBits, Block: 64}
}

// pcMaxBits is the widest component code: 64 levels, whose Gaussian
// Lloyd–Max codebook takes 30 ms to compute (256 levels take a second).
const pcMaxBits = 6

// A pcTables holds a family of quantizers for N(0, 1), options 1..n:
// their levels and bounds, distortions, nominal widths (what MaxBits
// limits) and the rANS tables of their cells' probabilities with the
// expected entropy-coded bits per code. Lloyd–Max's and the uniform
// family's option b is the quantizer of 2^b levels; the entropy-
// constrained family's option b is the one of least error at b/2 bits.
type pcTables struct {
	n              int
	levels, bounds [pcMaxOptions + 1][]float32
	cells          [pcMaxOptions + 1]*cellIndex // what the encoder finds a value's cell with
	dist           [pcMaxOptions + 1]float64
	width          [pcMaxOptions + 1]int
	ans            [pcMaxOptions + 1]*ransTable
	// ans2 are the same cells' layout-2 tables (12-bit frequencies), and
	// ent2 their packed entries, option b's at b << rans2ScaleBits.
	ans2 [pcMaxOptions + 1]*ransTable
	ent2 []uint32
	lk2  *cpu.RANSLookup // ent2's gather-free lookups (finish)
	// lv2 holds every option's levels end to end, option b's from
	// lv2Off[b]: what a layout-2 decode picks its levels from.
	lv2    []float32
	lv2Off [pcMaxOptions + 1]int32
	// plane holds the levels again as cpu.UnpackPlanes reads them, 64
	// slots per width.
	plane [cpu.PlaneLevels]float32
	// rans is ans as PCSettings.RANS gives it, made once (ransExport).
	ransOnce sync.Once
	rans     []RANSTable
}

// The planes' kernel reads every width a component may get.
var _ [cpu.PlaneMaxBits - pcMaxBits]struct{}

// pcMaxOptions is the most quantizers a family holds: the entropy-
// constrained family's half-bit steps up to pcMaxBits.
const pcMaxOptions = 2 * pcMaxBits

// codeBits returns the bits a code of option b costs: its width, or with
// entropy coding its expected length.
func (t *pcTables) codeBits(b int, entropy bool) float64 {
	if entropy {
		return t.ans[b].bits
	}
	return float64(t.width[b])
}

func (t *pcTables) set(b, width int, cb *Codebook) {
	t.levels[b], t.bounds[b], t.width[b] = cb.Levels, cb.Bounds, width
	t.cells[b] = newCellIndex(cb.Bounds)
	if width == b { // the fixed-width families: what the planes' decode reads
		copy(t.plane[b*64:(b+1)*64], cb.Levels)
	}
	t.dist[b] = codebookDistortion(cb)
	p := cellProbs(cb.Bounds)
	t.ans[b] = newRANSTable(p, ransScaleBits)
	if g := t.cells[b].grid; g != nil && !g.SetCells(cb.Levels, t.ans[b].cost) {
		t.cells[b].grid = nil // not one level and cost a cell: the loop's search
	}
	t.ans2[b] = newRANSTable(p, rans2ScaleBits)
	if need := (b + 1) << rans2ScaleBits; len(t.ent2) < need {
		t.ent2 = append(t.ent2, make([]uint32, need-len(t.ent2))...)
	}
	copy(t.ent2[b<<rans2ScaleBits:], t.ans2[b].ent)
	t.lv2Off[b] = int32(len(t.lv2))
	t.lv2 = append(t.lv2, cb.Levels...)
}

// gaussianTables computes the Lloyd–Max tables once; they are never
// written after.
var gaussianTables = sync.OnceValues(func() (*pcTables, error) { return newPCTables(GaussianCodebook) })

// uniformTables computes once the uniform quantizers of 2^b levels whose
// step minimizes the squared error on N(0, 1) (KVTC's quantizer).
var uniformTables = sync.OnceValues(func() (*pcTables, error) { return newPCTables(gaussianUniform) })

// newPCTables makes the tables of the quantizers quant returns for 1..pcMaxBits bits.
func newPCTables(quant func(bits int) (*Codebook, error)) (*pcTables, error) {
	t := &pcTables{n: pcMaxBits}
	t.dist[0] = 1
	for b := 1; b <= pcMaxBits; b++ {
		cb, err := quant(b)
		if err != nil {
			return nil, err
		}
		t.set(b, b, cb)
	}
	return t, t.finish()
}

// finish makes what the family's decoders read of all its options at once.
func (t *pcTables) finish() error {
	var err error
	if t.lk2, err = cpu.NewRANSLookupLevels(t.ent2, t.lv2, t.lv2Off[:len(t.ent2)>>rans2ScaleBits]); err != nil {
		return fmt.Errorf("codec: layout-2 tables: %w", err)
	}
	return nil
}

// ecsqTables computes once the entropy-constrained quantizers of entropy
// coding (kakeya-pc with ec=true): option b is the uniform quantizer of
// least error on N(0, 1) whose cells' entropy is b/2 bits (gaussianECSQ).
// With entropy coding a fixed number of levels is the wrong constraint:
// at the same coded length a uniform quantizer with centroid levels and
// as many cells as its step needs has about 15% less error than the
// Lloyd–Max or uniform quantizer of 2^b levels (at 1.9 bits per code,
// 0.100 against 0.1175 and 0.1189), and half-bit options let the
// allocation spend its budget more finely.
var ecsqTables = sync.OnceValues(func() (*pcTables, error) {
	t := &pcTables{n: pcMaxOptions}
	t.dist[0] = 1
	for b := 1; b <= t.n; b++ {
		cb, err := gaussianECSQ(float64(b) / 2)
		if err != nil {
			return nil, err
		}
		t.set(b, (b+1)/2, cb)
	}
	return t, t.finish()
})

// gaussianECSQ returns the uniform quantizer of least mean squared error
// on N(0, 1) among those whose cells have entropy h bits: cells of one
// step, either centred on 0 (an odd number) or bounded by it (even),
// reconstructed at their centroids, the outer two reaching to infinity.
// For each number of cells from 2^h up the step meeting h is found by
// bisection (the entropy falls as the step grows); the search over cell
// counts stops once eight more cells have not lowered the error.
func gaussianECSQ(h float64) (*Codebook, error) {
	var best *Codebook
	bestErr, since := math.Inf(1), 0
	// Fewer than 2^h cells cannot reach h bits.
	for cells := max(2, int(math.Exp2(h))); cells <= 255 && since < 8; cells++ {
		lo, hi := 1e-4, 16.0
		var cb *Codebook
		for it := 0; it < 48; it++ {
			step := (lo + hi) / 2
			cb = uniformCells(cells, step)
			if cellEntropy(cb.Bounds) > h {
				lo = step
			} else {
				hi = step
			}
		}
		cb = uniformCells(cells, hi)
		if math.Abs(cellEntropy(cb.Bounds)-h) > 1e-6 {
			continue // no step of this many cells has entropy h (two cells: always 1 bit)
		}
		if e := codebookDistortion(cb); e < bestErr {
			best, bestErr, since = cb, e, 0
		} else {
			since++
		}
	}
	if best == nil {
		return nil, fmt.Errorf("codec: entropy-constrained quantizer of %v bits: none found", h)
	}
	return best, nil
}

// uniformCells returns the quantizer of the given number of cells of
// width step, symmetric about 0, each reconstructed at its N(0, 1)
// centroid.
func uniformCells(cells int, step float64) *Codebook {
	cb := &Codebook{Levels: make([]float32, cells), Bounds: make([]float32, cells-1)}
	for i := range cb.Bounds {
		cb.Bounds[i] = float32((float64(i+1) - float64(cells)/2) * step)
	}
	for i := range cb.Levels {
		lo, hi := math.Inf(-1), math.Inf(1)
		if i > 0 {
			lo = float64(cb.Bounds[i-1])
		}
		if i < cells-1 {
			hi = float64(cb.Bounds[i])
		}
		c := (lo + hi) / 2 // a cell too thin for its mass to show
		if m := gaussMass(lo, hi); m > 1e-300 {
			c = (normPDF(lo) - normPDF(hi)) / m
		}
		cb.Levels[i] = float32(c)
	}
	return cb
}

// cellEntropy returns the entropy in bits of the N(0, 1) cells bounded by
// bounds.
func cellEntropy(bounds []float32) float64 {
	var h float64
	for _, p := range cellProbs(bounds) {
		if p > 0 {
			h -= p * math.Log2(p)
		}
	}
	return h
}

// gaussianUniform returns the midpoint-bounded uniform quantizer of 2^bits
// levels, symmetric about 0, with the step of least mean squared error on
// N(0, 1), found by golden-section search (the error is unimodal in it).
func gaussianUniform(bits int) (*Codebook, error) {
	k := 1 << bits
	make1 := func(step float64) *Codebook {
		lv := make([]float32, k)
		for i := range lv {
			lv[i] = float32((float64(i) - float64(k-1)/2) * step)
		}
		cb, err := CodebookFromLevels(lv)
		if err != nil {
			return nil
		}
		return cb
	}
	errAt := func(step float64) float64 { return codebookDistortion(make1(step)) }
	lo, hi := 0.01, 4.0
	g := (math.Sqrt(5) - 1) / 2
	a, b := hi-g*(hi-lo), lo+g*(hi-lo)
	fa, fb := errAt(a), errAt(b)
	for hi-lo > 1e-7 {
		if fa < fb {
			hi, b, fb = b, a, fa
			a = hi - g*(hi-lo)
			fa = errAt(a)
		} else {
			lo, a, fa = a, b, fb
			b = lo + g*(hi-lo)
			fb = errAt(b)
		}
	}
	cb := make1((lo + hi) / 2)
	if cb == nil {
		return nil, fmt.Errorf("codec: uniform quantizer of %d bits: no valid step", bits)
	}
	return cb, nil
}

// KakeyaPC codes a block in a calibrated principal basis with bits
// allocated per component: each row x becomes y = U(x - μ) (U and μ from
// PCAStats), and component j is, by the allocation, left out (decoded as
// μ's), stored as the block's fp16 mean of y_j only, or coded: the mean,
// an fp16 scale, and per row a code of b_j bits of the Gaussian Lloyd–Max
// quantizer (the mean subtracted, divided by the scale). The allocation
// minimizes the expected weighted squared error Σ_j w_j·E[(y_j - ŷ_j)²]
// under the bit budget by dynamic programming over the components
// (allocatePC), from the calibrated within-block and between-block
// variances. The codes are component-major: coded component t's n codes of
// b_t bits lie LSB-first in their own plane of ceil(n*b_t/8) bytes, planes
// in coded order, so a decoder unpacks one width at a time. With M means
// and C coded components the encoded length is
//
//	16 + 6 + 2M + 2C + Σ_t ceil(n*b_t/8)
//
// bytes: 16 + 6 + 2M + 2C + n*T/8 for T = Σ_t b_t bits per row when n is a
// multiple of 8. A KakeyaPC made without statistics (New with a spec, before a
// calibration gives it a basis) names its settings but encodes and
// decodes nothing: its calls return an error saying it needs a
// calibration.
type KakeyaPC struct {
	opt   KakeyaPCOptions
	d     int
	mean  []float32 // μ
	basis []float32 // U, d x d
	alloc []int8    // per component: -1 left out, 0 mean only, b > 0 coded with b bits
	// The components in block order: means (alloc >= 0), then coded.
	meanIdx, codedIdx []int
	meanRows          []float32    // the basis rows of the components with a mean, M x d
	coded             []float32    // the coded components' basis rows, C x d
	width             []uint8      // the coded components' code widths
	levOff            []int32      // where each coded component's levels start in a block's level table
	levels            int          // the level table's length, Σ 2^width
	rowBits           int          // T = Σ_t width[t]
	ans               []*ransTable // with Entropy, each coded component's coder (layout 1)
	ans2              []*ransTable // the same, layout 2
	plan2             rans2Plan    // layout 2's decode tables
	meanNorm          float32      // ||μ||, for Encode's fp16 range check
	tab               *pcTables
	tag               uint16
	pool              sync.Pool
	runPool           sync.Pool // *pcRunScratch
}

type pcScratch struct {
	y     []float32 // n x d coefficients while encoding
	lat   []float32 // decoded latents (scale times level), C x n, then for AddWeighted a row of ones and zeros (pcLatRows)
	rows  []float32 // AddWeighted: the latents row-major, n x pcLatRows(C)
	acc   []float32 // AddWeighted: m x pcLatRows(C) weighted sums of the latents
	base  []float32 // the block's constant row
	means []float32
	scale []float32
	lv    []float32          // decode: every coded component's levels times its scale
	codes []uint8            // Encode: the C x n codes
	col   []float32          // Encode: a coded component's n deviations from its mean
	trial []uint8            // Encode: a trial scale's n codes and the best one's, or every trial's (codeTrials)
	hide  []uint16           // layout 2: the means the lanes carry, fp16 bits
	r2    rans2Scratch       // layout 2: the lanes' states and the stream's tail (here, not on the stack, for the kernel's pointers)
	hid2  [rans2Lanes]uint16 // layout 2: the payloads decoded
	ans   []byte             // Encode with entropy coding: the stream, built from its end
	multi cpu.RANSStreams    // parseBlocks: the streams' lanes and positions, in the first block's scratch
	// What parseFields found for decodeCodes: the codes' bytes (in the
	// block, cleared once decoded), the stream layout and how many means
	// the lanes carry.
	stream []byte
	param  byte
	hidden int
	// trials are codeTrials's scales and sums (Encode).
	trials pcTrials
}

// pcLayout is kakeya_pc's parameter byte: the code layout. 1 is the
// component-major planes; blocks of 0 (rows of codes, one bit stream) are
// no longer read.
const pcLayout = 1

// pcECLayout is kakeya_pc_ec's parameter byte: the stream layout. 1 is
// ransLanes interleaved rANS lanes over the codes in component-major
// order; blocks of 0 (one rANS state with byte renormalization, codes row
// after row) are no longer read.
const pcECLayout = 1

// pcECLayout2 is kakeya_pc_ec's stream layout 2 (rans2.go): 32 lanes,
// 12-bit frequencies, the first 32 stored means carried by the lanes.
// An entropy-coding codec reads blocks of both layouts.
const pcECLayout2 = 2

// The sections of formatKakeyaPC.
const (
	pcInfo = iota
	pcMeans
	pcScales
	pcCodes
)

// pcScaleSteps are the factors of a coded component's RMS the encoder
// tries as its scale, keeping the one of least squared error: heavy tails
// favour wider cells than the Gaussian optimum at RMS 1.
var pcScaleSteps = [...]float32{0.8, 0.9, 1, 1.1, 1.25, 1.4, 1.6}

// pcECSQScales are the factors of the RMS the encoder tries as the scale
// of an entropy-constrained code, finer steps giving longer codes.
var pcECSQScales = [...]float32{0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1, 1.1, 1.25, 1.6}

// NewKakeyaPC returns the codec for the statistics st (nil for a codec
// that only names its settings) with the per-component distortion weights
// w (nil weighs all components alike): for keys, E[(qᵀu_j)²] over the
// queries makes the allocation minimize the error of attention scores.
func NewKakeyaPC(o KakeyaPCOptions, st *PCAStats, w []float32) (*KakeyaPC, error) {
	switch {
	case !(o.Rate >= 0 && o.Rate <= 16):
		return nil, fmt.Errorf("codec: kakeya-pc: rate %v bits per value not in [0, 16]", o.Rate)
	case o.MaxBits < 1 || o.MaxBits > pcMaxBits:
		return nil, fmt.Errorf("codec: kakeya-pc: max bits %d not in 1..%d", o.MaxBits, pcMaxBits)
	case o.Block < 1 || o.Block > maxRows:
		return nil, fmt.Errorf("codec: kakeya-pc: block %d not in 1..%d", o.Block, maxRows)
	case o.MaxCoded < 0 || o.MaxCoded > math.MaxUint16:
		return nil, fmt.Errorf("codec: kakeya-pc: coded components %d not in 0..%d", o.MaxCoded, math.MaxUint16)
	case !(o.CodedFrac >= 0 && o.CodedFrac <= 1):
		return nil, fmt.Errorf("codec: kakeya-pc: coded fraction %v not in [0, 1]", o.CodedFrac)
	}
	k := &KakeyaPC{opt: o}
	if st == nil {
		return k, nil
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("codec: kakeya-pc: %w", err)
	}
	d := st.Dim()
	if w != nil && len(w) != d {
		return nil, fmt.Errorf("codec: kakeya-pc: %d weights for %d components", len(w), d)
	}
	for i, v := range w {
		if !finite32(v) || v < 0 {
			return nil, fmt.Errorf("codec: kakeya-pc: weight %d is %v", i, v)
		}
	}
	tables := gaussianTables
	switch {
	case o.Uniform:
		tables = uniformTables
	case o.Entropy:
		tables = ecsqTables
	}
	tab, err := tables()
	if err != nil {
		return nil, err
	}
	k.tab, k.d = tab, d
	k.mean = append([]float32(nil), st.Mean...)
	k.basis = append([]float32(nil), st.Basis...)
	k.alloc = allocatePC(st, w, o, tab)
	for j, a := range k.alloc {
		if a >= 0 {
			k.meanIdx = append(k.meanIdx, j)
			k.meanRows = append(k.meanRows, st.Basis[j*d:(j+1)*d]...)
		}
		if a > 0 {
			k.codedIdx = append(k.codedIdx, j)
			k.coded = append(k.coded, st.Basis[j*d:(j+1)*d]...)
			k.width = append(k.width, uint8(a))
			k.levOff = append(k.levOff, int32(k.levels))
			k.levels += len(tab.levels[a])
			k.rowBits += tab.width[a]
			k.ans = append(k.ans, tab.ans[a])
			k.ans2 = append(k.ans2, tab.ans2[a])
			k.plan2.entOff = append(k.plan2.entOff, int32(a)<<rans2ScaleBits)
			k.plan2.levOff = append(k.plan2.levOff, tab.lv2Off[a])
			k.plan2.nsym = append(k.plan2.nsym, int32(len(tab.levels[a])))
		}
	}
	k.plan2.ent, k.plan2.lk, k.plan2.lv = tab.ent2, tab.lk2, tab.lv2
	if len(k.plan2.entOff) > 0 {
		if k.plan2.tabs, err = cpu.NewRANSTables(tab.ent2, tab.lk2, k.plan2.entOff, tab.lv2, k.plan2.levOff, k.plan2.nsym); err != nil {
			return nil, fmt.Errorf("codec: kakeya-pc: %w", err)
		}
	}
	if k.rowBits > math.MaxUint16 {
		return nil, fmt.Errorf("codec: kakeya-pc: %d code bits per row exceed the block's 16-bit field; lower the rate or max bits", k.rowBits)
	}
	var mn float64
	for _, v := range k.mean {
		mn += float64(v) * float64(v)
	}
	k.meanNorm = float32(math.Sqrt(mn))
	// The tag binds a block to what its bytes do not carry: the basis, the
	// mean and the allocation.
	h := fnv.New32a()
	var b [4]byte
	for _, s := range [][]float32{k.mean, k.basis} {
		for _, v := range s {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
	}
	for _, a := range k.alloc {
		h.Write([]byte{byte(a)})
	}
	// The quantizer is bound too: a uniform code read with Lloyd–Max
	// levels would decode without error.
	switch {
	case o.Uniform:
		h.Write([]byte("uniform"))
	case o.Entropy:
		h.Write([]byte("ecsq"))
	}
	s := h.Sum32()
	k.tag = uint16(s ^ s>>16)
	return k, nil
}

// Options returns the codec's settings.
func (k *KakeyaPC) Options() KakeyaPCOptions { return k.opt }

// Allocation returns each component's allocation: -1 left out, 0 the
// block mean only, b > 0 coded with quantizer option b (b bits; with
// entropy coding, the entropy-constrained quantizer of b/2 bits); nil
// without statistics.
func (k *KakeyaPC) Allocation() []int {
	if k.alloc == nil {
		return nil
	}
	out := make([]int, len(k.alloc))
	for i, a := range k.alloc {
		out[i] = int(a)
	}
	return out
}

// Calibrated reports whether k has statistics, so that it can code.
func (k *KakeyaPC) Calibrated() bool { return k.alloc != nil }

// Name encodes the settings, e.g. "kakeya-pc-r2.5", "kakeya-pc-r2-ec" (entropy
// coded) or "kvtc-r2" (uniform and entropy coded).
func (k *KakeyaPC) Name() string {
	s := fmt.Sprintf("kakeya-pc-r%g", k.opt.Rate)
	if k.opt.Uniform && k.opt.Entropy {
		s = fmt.Sprintf("kvtc-r%g", k.opt.Rate)
	}
	if k.opt.MaxBits != pcMaxBits {
		s += fmt.Sprintf("-m%d", k.opt.MaxBits)
	}
	if k.opt.Block != 64 {
		s += fmt.Sprintf("-n%d", k.opt.Block)
	}
	if k.opt.MaxCoded > 0 {
		s += fmt.Sprintf("-c%d", k.opt.MaxCoded)
	}
	if k.opt.CodedFrac > 0 {
		s += fmt.Sprintf("-cf%g", k.opt.CodedFrac)
	}
	if k.opt.QueryWeighted {
		s += "-qw"
	}
	if k.opt.Entropy && !k.opt.Uniform {
		s += "-ec"
	}
	if k.opt.Uniform && !k.opt.Entropy {
		s += "-uniform"
	}
	if k.opt.Entropy && k.opt.StreamLayout == 1 {
		s += "-l1"
	}
	return s
}

// Format returns the kakeya-pc format, or with entropy coding
// kakeya-pc-ec's.
func (k *KakeyaPC) Format() *Format {
	if k.opt.Entropy {
		return formatKakeyaPCEC
	}
	return formatKakeyaPC
}

// Settings returns, for a calibrated codec, its basis, mean and
// allocation (Settings.PC), and with entropy coding its rANS tables: what
// a kernel reads its blocks with.
func (k *KakeyaPC) Settings() Settings {
	if k.alloc == nil {
		return Settings{}
	}
	return Settings{PC: k.pcSettings()}
}

func (k *KakeyaPC) scratch() *pcScratch {
	if s, ok := k.pool.Get().(*pcScratch); ok {
		return s
	}
	return new(pcScratch)
}

// ready checks that k can code blocks of n x d.
func (k *KakeyaPC) ready(n, d int) error {
	if k.alloc == nil {
		return fmt.Errorf("codec: %s: no PCA statistics: the codec needs a calibration made with them (kakeya-eval calibrate --pca)", k.Name())
	}
	if d != k.d {
		return fmt.Errorf("codec: %s: rows of %d values, the calibration's components have %d", k.Name(), d, k.d)
	}
	return checkShape("kakeya-pc", n, d, n*d, "block")
}

// Encode appends the encoded block; see the type comment for the layout.
func (k *KakeyaPC) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	const name = "kakeya-pc"
	if err := k.ready(n, d); err != nil {
		return dst, err
	}
	am, err := checkInput(name, x, n, d)
	if err != nil {
		return dst, err
	}
	// |y_j| <= ||x - μ|| <= sqrt(d)·max|x| + ||μ||; a scale is at most
	// 1.6 times a component's RMS.
	if 2*(am*float32(math.Sqrt(float64(d)))+k.meanNorm) > maxF16 {
		return dst, fmt.Errorf("codec: %s: |value| %v too large for fp16 means and scales", name, am)
	}
	sc := k.scratch()
	defer k.pool.Put(sc)
	// y = U (x - μ), one row at a time: U's rows are the components.
	sc.y = growF32(sc.y, n*d)
	sc.base = growF32(sc.base, d)
	for i := 0; i < n; i++ {
		xc := sc.base
		for a, v := range x[i*d : (i+1)*d] {
			xc[a] = v - k.mean[a]
		}
		cpu.DotBlock(sc.y[i*d:(i+1)*d], xc, k.basis, d, d)
	}
	start := len(dst)
	dst = appendHeader(dst, k.Format().ID, k.param(), n, d, k.tag)
	var info [8]byte
	hidden := k.hidden()
	binary.LittleEndian.PutUint16(info[0:], uint16(len(k.meanIdx)-hidden))
	binary.LittleEndian.PutUint16(info[2:], uint16(len(k.codedIdx)))
	infoLen := 6
	if !k.opt.Entropy {
		binary.LittleEndian.PutUint16(info[4:], uint16(k.rowBits))
	} else {
		infoLen = 8 // the stream's length, set once it is coded
	}
	dst = append(dst, info[:infoLen]...)
	sc.means = growF32(sc.means, d)
	sc.hide = sc.hide[:0]
	for t, j := range k.meanIdx {
		var s float64
		for i := 0; i < n; i++ {
			s += float64(sc.y[i*d+j])
		}
		m := roundF16(float32(s / float64(n)))
		sc.means[j] = m
		if t < hidden {
			sc.hide = append(sc.hide, float16bits(m)) // layout 2: lane t carries it
			continue
		}
		dst = binary.LittleEndian.AppendUint16(dst, float16bits(m))
	}
	c := len(k.codedIdx)
	sc.scale = growF32(sc.scale, c)
	sc.codes = growU8(sc.codes, n*c)
	// Component t's code of row i goes to codes[t*n+i], the planes' order
	// and the entropy coder's.
	cs, rs := n, 1
	slack := 0.0 // entropy-constrained codes: bits left unspent by the components before
	for t, j := range k.codedIdx {
		s := k.codeComponent(sc.codes[t*cs:], rs, sc, t, j, n, d, &slack)
		dst = binary.LittleEndian.AppendUint16(dst, float16bits(s))
	}
	if k.opt.Entropy {
		at := len(dst)
		if k.param() == pcECLayout2 {
			dst, sc.ans = rans2Encode(dst, sc.ans, sc.codes[:n*c], k.ans2, n, sc.hide)
		} else {
			dst, sc.ans = ransEncode(dst, sc.ans, sc.codes[:n*c], k.ans, n)
		}
		binary.LittleEndian.PutUint32(dst[start+headerLen+4:], uint32(len(dst)-at))
	} else {
		dst = k.packPlanes(dst, sc.codes[:n*c], n)
	}
	seal(dst[start:])
	return dst, nil
}

// codeComponent picks the scale of coded component t (component j) and
// sets its n codes, row i's at codes[i*stride], returning the scale.
// An entropy-constrained code may also spend *slack, the bits the
// components before it left unspent, and leaves there what it does not.
// Each trial scale's cells come from the quantizer's cellIndex, and the
// best trial's codes are kept rather than found again: the same codes,
// scale and slack a binary search of the bounds per value gives. Where
// the CPU has a kernel for it (cpu.PCScaleTrials: AVX2 and AVX-512) the
// trials run side by side in its lanes, each trial's sums those of the
// loop below bit for bit; the choice among them is the loop's.
func (k *KakeyaPC) codeComponent(codes []uint8, stride int, sc *pcScratch, t, j, n, d int, slack *float64) float32 {
	b := int(k.width[t])
	m := sc.means[j]
	// The component's deviations from its mean, gathered once.
	sc.col = growF32(sc.col, n)
	col := sc.col
	var ss float64
	for i := range col {
		r := sc.y[i*d+j] - m
		col[i] = r
		ss += float64(r) * float64(r)
	}
	rms := float32(math.Sqrt(ss / float64(n)))
	best, bestErr := float32(0), math.Inf(1)
	lv, cells := k.tab.levels[b], k.tab.cells[b]
	steps := pcScaleSteps[:]
	// Entropy-constrained codes: the allocation charged n codes their
	// expected length on N(0, 1); real components, heavier tailed, code
	// shorter at the RMS, so the scale is the one of least error whose
	// codes fit that charge plus what the components before left unspent
	// (or, where none fits, the shortest), and the block spends about
	// what it was allotted.
	var ecCost []float32
	ecBudget, bestLen := 0.0, math.Inf(1)
	if k.opt.Entropy && !k.opt.Uniform {
		steps = pcECSQScales[:]
		ecCost, ecBudget = k.ans[t].cost, float64(n)*k.ans[t].bits+*slack
	}
	if cells.grid != nil {
		if s, ok := k.codeTrials(codes, stride, sc, cells.grid, col, rms, steps, ecCost, ecBudget, slack); ok {
			return s
		}
	}
	sc.trial = growU8(sc.trial, 2*n)
	cur, kept := sc.trial[:n], sc.trial[n:]
	for _, f := range steps {
		s := roundF16(rms * f)
		if !(s > 0) {
			continue
		}
		inv := 1 / s
		var e, l float64
		if ecCost != nil {
			for i, r := range col {
				q := cells.cell(r * inv)
				cur[i] = uint8(q)
				v := lv[q] * s
				e += float64(r-v) * float64(r-v)
				l += float64(ecCost[q])
			}
		} else {
			for i, r := range col {
				q := cells.cell(r * inv)
				cur[i] = uint8(q)
				v := lv[q] * s
				e += float64(r-v) * float64(r-v)
			}
		}
		if betterScale(e, l, bestErr, bestLen, ecCost != nil, ecBudget) {
			best, bestErr, bestLen = s, e, l
			cur, kept = kept, cur
		}
	}
	if ecCost != nil && best != 0 {
		*slack = ecBudget - bestLen
	}
	if best == 0 {
		// A constant component: any code decodes to the mean when the
		// scale is 0; code the middle one.
		for i := 0; i < n; i++ {
			codes[i*stride] = uint8(len(lv) / 2)
		}
		return 0
	}
	for i, q := range kept {
		codes[i*stride] = q
	}
	return best
}

// codeTrials is codeComponent's search through cpu.PCScaleTrials: the
// trial scales of the factors steps of rms that are above 0 in one
// kernel call (the cells' levels and costs the grid's, set from the
// option's codebook and rANS table, which ecCost is: costs are summed
// where it is not nil), then the loop's choice among them, in order,
// from their sums. It reports false where the CPU has no kernel.
func (k *KakeyaPC) codeTrials(codes []uint8, stride int, sc *pcScratch, g *cpu.CellGrid, col []float32, rms float32, steps []float32, ecCost []float32, ecBudget float64, slack *float64) (float32, bool) {
	tr := &sc.trials
	nt := 0
	for _, f := range steps {
		if s := roundF16(rms * f); s > 0 {
			tr.scale[nt], tr.inv[nt] = s, 1/s
			nt++
		}
	}
	n := len(col)
	sc.trial = growU8(sc.trial, n*cpu.PCMaxTrials)
	if nt == 0 || !cpu.PCScaleTrials(g, col, tr.scale[:nt], tr.inv[:nt], ecCost != nil, tr.e[:nt], tr.l[:nt], sc.trial) {
		return 0, false
	}
	best, bestErr, bestLen, at := float32(0), math.Inf(1), math.Inf(1), 0
	for i, s := range tr.scale[:nt] {
		e, l := tr.e[i], tr.l[i]
		if betterScale(e, l, bestErr, bestLen, ecCost != nil, ecBudget) {
			best, bestErr, bestLen, at = s, e, l, i
		}
	}
	if ecCost != nil {
		*slack = ecBudget - bestLen
	}
	for i := range n {
		codes[i*stride] = sc.trial[i*cpu.PCMaxTrials+at]
	}
	return best, true
}

// betterScale reports whether a trial scale of squared error e and code
// length l beats the best so far (bestErr, bestLen): the least error, or,
// entropy-coded (ec), a scale whose codes fit budget beats one whose codes
// do not; among those that fit the least error wins, among those that do
// not the shortest.
func betterScale(e, l, bestErr, bestLen float64, ec bool, budget float64) bool {
	if !ec {
		return e < bestErr
	}
	fits, bestFits := l <= budget, bestLen <= budget
	return fits && (!bestFits || e < bestErr) || !fits && !bestFits && l < bestLen
}

// pcTrials holds codeTrials's trial scales and sums (here, not on the
// stack, for the kernel's pointers).
type pcTrials struct {
	scale, inv [cpu.PCMaxTrials]float32
	e, l       [cpu.PCMaxTrials]float64
}

// A cellIndex finds which of a quantizer's cells a value falls in, the
// number of its sorted bounds below the value, in about constant time: a
// grid of cellGrid steps from the first bound to the last gives the
// number of bounds below each step's start, and comparisons against the
// bounds themselves, up or down from there, reach the exact count. It is
// the count a binary search gives for every value, infinities and NaN
// (cell 0) included, whatever the grid's rounding.
type cellIndex struct {
	bounds  []float32
	lo, inv float32
	first   [cellGrid]uint8
	// grid is the same grid as a cpu.CellGrid, where its steps each span
	// at most one bound (every quantizer of the families here): a value's
	// count is then its step's plus at most one, one compare; nil
	// elsewhere.
	grid *cpu.CellGrid
}

// cellGrid is a cellIndex's steps: 16 or more per cell for the fixed-
// width families' up to 64 levels, 4 for the entropy-constrained
// family's widest (255 cells), so the count is mostly exact from the grid.
const cellGrid = 1024

// newCellIndex returns the index of bounds, sorted ascending, at most 255
// of them.
func newCellIndex(bounds []float32) *cellIndex {
	if len(bounds) > math.MaxUint8 {
		panic(fmt.Sprintf("codec: cell index of %d bounds", len(bounds)))
	}
	c := &cellIndex{bounds: bounds, inv: 1, grid: cpu.NewCellGrid(bounds)}
	if len(bounds) == 0 {
		return c
	}
	lo, hi := float64(bounds[0]), float64(bounds[len(bounds)-1])
	width := (hi - lo) / (cellGrid - 1)
	if !(width > 0) {
		width = 1
	}
	c.lo, c.inv = float32(lo), float32(1/width)
	q := 0
	for g := range c.first {
		start := lo + float64(g)*width
		for q < len(bounds) && float64(bounds[q]) < start {
			q++
		}
		c.first[g] = uint8(q)
	}
	return c
}

// cell returns the number of bounds below x.
func (c *cellIndex) cell(x float32) int {
	if c.grid != nil {
		return c.grid.Cell(x)
	}
	g := 0
	if t := (x - c.lo) * c.inv; t > 0 {
		g = cellGrid - 1
		if t < cellGrid-1 {
			g = int(t)
		}
	}
	q, bd := int(c.first[g]), c.bounds
	for q < len(bd) && x > bd[q] {
		q++
	}
	for q > 0 && !(x > bd[q-1]) {
		q--
	}
	return q
}

// param returns the header's parameter byte: pcLayout, or pcECLayout
// with entropy coding.
func (k *KakeyaPC) param() byte {
	switch {
	case k.opt.Entropy && k.opt.StreamLayout == 1:
		return pcECLayout
	case k.opt.Entropy:
		return pcECLayout2
	}
	return pcLayout
}

// hidden returns how many stored means the stream's lanes carry in the
// blocks k writes: layout 2's rans2Hidden, else none.
func (k *KakeyaPC) hidden() int {
	if k.param() == pcECLayout2 {
		return rans2Hidden(len(k.meanIdx))
	}
	return 0
}

// planeBytes returns the length of a plane of n codes of w bits.
func planeBytes(n int, w uint8) int { return (n*int(w) + 7) / 8 }

// codeBytes returns the length of a block's code planes, Σ_t
// ceil(n*width[t]/8): the format's code_bytes.
func (k *KakeyaPC) codeBytes(n int) int {
	s := 0
	for _, w := range k.width {
		s += planeBytes(n, w)
	}
	return s
}

// packPlanes appends the codes (C x n, component t of width width[t]) as
// one plane per component: its n codes LSB-first, padded to a byte.
func (k *KakeyaPC) packPlanes(dst []byte, codes []uint8, n int) []byte {
	total := k.codeBytes(n)
	dst = grow(dst, total)
	out := dst[len(dst)-total:]
	clear(out)
	for t, w := range k.width {
		plane := out[:planeBytes(n, w)]
		out = out[len(plane):]
		pos := 0
		for _, v := range codes[t*n : (t+1)*n] {
			u := uint16(v) << (pos & 7)
			plane[pos>>3] |= byte(u)
			if hi := byte(u >> 8); hi != 0 {
				plane[pos>>3+1] |= hi
			}
			pos += int(w)
		}
	}
	return dst
}

// parseFields checks src's header and fields, reads its means and
// scales into sc, and leaves in sc its codes' bytes, stream layout
// (param) and the means its lanes carry (hidden), for decodeCodes.
func (k *KakeyaPC) parseFields(sc *pcScratch, src []byte, n, d int) error {
	const name = "kakeya-pc"
	if err := k.ready(n, d); err != nil {
		return err
	}
	f := k.Format()
	param := k.param()
	if k.opt.Entropy && len(src) >= headerLen && (src[3] == pcECLayout || src[3] == pcECLayout2) {
		param = src[3] // an entropy-coding codec reads both stream layouts
	}
	if len(src) >= headerLen && src[2] == byte(f.ID) && src[3] != param {
		if k.opt.Entropy {
			return fmt.Errorf("codec: %s: block has stream layout %d (0: one rANS state, codes row after row, before layout 1's %d interleaved lanes); this codec reads layouts %d and %d: re-encode the cache",
				name, src[3], ransLanes, pcECLayout, pcECLayout2)
		}
		return fmt.Errorf("codec: %s: block has code layout %d (0: rows of codes, before version 1's component planes); this codec reads layout %d: re-encode the cache", name, src[3], pcLayout)
	}
	if _, err := checkHeader(name, src, f.ID, param, n, d, k.tag); err != nil {
		return err
	}
	hidden := 0
	if param == pcECLayout2 {
		hidden = rans2Hidden(len(k.meanIdx))
	}
	var v Vars
	if err := f.ReadFields(src, &v); err != nil {
		return err
	}
	if !k.opt.Entropy {
		if v[VarRowBits] != k.rowBits {
			return fmt.Errorf("codec: %s: block holds codes of %d bits per row; the codec has %d", name, v[VarRowBits], k.rowBits)
		}
		v[VarCodeBytes] = k.codeBytes(n)
	}
	if v[VarMeans]+hidden != len(k.meanIdx) || v[VarCoded] != len(k.codedIdx) {
		return fmt.Errorf("codec: %s: block holds %d means (and %d in its lanes) and %d coded components; the codec has %d and %d",
			name, v[VarMeans], hidden, v[VarCoded], len(k.meanIdx), len(k.codedIdx))
	}
	l := f.Layout(&v)
	if len(src) != l.Size() {
		return fmt.Errorf("codec: %s: block is %d bytes, want %d", name, len(src), l.Size())
	}
	mc := len(k.meanIdx)
	sc.means = growF32(sc.means, mc)
	if err := readF16s(sc.means[hidden:], src[l.Off(pcMeans):], name, "component mean"); err != nil {
		return err
	}
	c := len(k.codedIdx)
	sc.scale = growF32(sc.scale, c)
	if err := readF16s(sc.scale, src[l.Off(pcScales):], name, "component scale"); err != nil {
		return err
	}
	// The coded components' means are in the base row; their latents are
	// the scaled levels alone. AddWeighted fills the rows past them.
	sc.lat = growF32(sc.lat, pcLatRows(c)*n)
	sc.stream = src[l.Off(pcCodes) : l.Off(pcCodes)+l.Len(pcCodes)]
	sc.param, sc.hidden = param, hidden
	return nil
}

// parse checks src and leaves in sc.base the block's constant row μ +
// Σ_j m_j u_j over the stored means, and in sc.lat (C x n) each coded
// component's latents, scale times level, one component per row.
func (k *KakeyaPC) parse(sc *pcScratch, src []byte, n, d int) error {
	if err := k.parseFields(sc, src, n, d); err != nil {
		return err
	}
	err := k.decodeCodes(sc, n)
	sc.stream = nil // the block's bytes, not to be kept in the pool
	if err != nil {
		return err
	}
	k.setBase(sc, d)
	return nil
}

// parseBlocks is parse of up to MaxBlocks blocks, whose layout-2
// streams, if all are, it decodes side by side (rans2DecodeStreams). Its
// callers leave naming the block of an error to their one-block calls.
func (k *KakeyaPC) parseBlocks(sc []*pcScratch, src [][]byte, n, d int) error {
	defer func() {
		for _, s := range sc {
			s.stream = nil
		}
	}()
	all2 := len(sc) > 1
	for j := range sc {
		if err := k.parseFields(sc[j], src[j], n, d); err != nil {
			return err
		}
		all2 = all2 && sc[j].param == pcECLayout2
	}
	if all2 {
		var (
			out   [MaxBlocks][]float32
			codes [MaxBlocks][]byte
			scale [MaxBlocks][]float32
			hide  [MaxBlocks][]uint16
			r2    [MaxBlocks]*rans2Scratch
		)
		c := len(k.width)
		for j, s := range sc {
			out[j], codes[j], scale[j], hide[j], r2[j] = s.lat[:c*n], s.stream, s.scale, s.hid2[:s.hidden], &s.r2
		}
		ns := len(sc)
		if _, err := rans2DecodeStreams(out[:ns], codes[:ns], n, &k.plan2, scale[:ns], hide[:ns], r2[:ns], &sc[0].multi); err != nil {
			return fmt.Errorf("codec: kakeya-pc: %w", err)
		}
		for j := range sc {
			if err := sc[j].hiddenMeans(); err != nil {
				return fmt.Errorf("codec: kakeya-pc: %w", err)
			}
		}
	} else {
		for j := range sc {
			if err := k.decodeCodes(sc[j], n); err != nil {
				return err
			}
		}
	}
	for j := range sc {
		k.setBase(sc[j], d)
	}
	return nil
}

// decodeCodes sets sc.lat's rows from the codes parseFields found.
func (k *KakeyaPC) decodeCodes(sc *pcScratch, n int) error {
	const name = "kakeya-pc"
	switch {
	case sc.param == pcECLayout2:
		if err := k.decodeStream2(sc, sc.stream, n, sc.hidden); err != nil {
			return fmt.Errorf("codec: %s: %w", name, err)
		}
	case k.opt.Entropy:
		if err := k.decodeStream(sc, sc.stream, n); err != nil {
			return fmt.Errorf("codec: %s: %w", name, err)
		}
	default:
		cpu.UnpackPlanes(sc.lat, n, n, sc.stream, k.width, sc.scale, &k.tab.plane)
	}
	return nil
}

// setBase sets sc.base, the block's constant row, from its means: one
// MixBlock row over the means' rows sums them in order.
func (k *KakeyaPC) setBase(sc *pcScratch, d int) {
	mc := len(k.meanIdx)
	sc.base = growF32(sc.base, d)
	copy(sc.base, k.mean)
	if mc > 0 {
		cpu.MixBlock(sc.base, 1, sc.means, mc, k.meanRows, mc, d)
	}
}

// decodeStream sets sc.lat's rows from an entropy-coded stream, whose
// codes run component after component.
func (k *KakeyaPC) decodeStream(sc *pcScratch, codes []byte, n int) error {
	// Every coded component's levels times its scale, in one table.
	sc.lv = growF32(sc.lv, k.levels)
	for t, w := range k.width {
		lv, s := sc.lv[k.levOff[t]:], sc.scale[t]
		for j, v := range k.tab.levels[w] {
			lv[j] = v * s
		}
	}
	return ransDecode(sc.lat[:len(k.width)*n], codes, n, k.ans, sc.lv, k.levOff)
}

// decodeStream2 is decodeStream for a layout-2 stream, whose first
// hidden lanes carry the first hidden stored means, which it sets in
// sc.means.
func (k *KakeyaPC) decodeStream2(sc *pcScratch, codes []byte, n, hidden int) error {
	if err := rans2Decode(sc.lat[:len(k.width)*n], codes, n, &k.plan2, sc.scale, sc.hid2[:hidden], &sc.r2); err != nil {
		return err
	}
	return sc.hiddenMeans()
}

// hiddenMeans sets the first sc.hidden means from the payloads a layout-2
// stream's lanes carried.
func (sc *pcScratch) hiddenMeans() error {
	for i, h := range sc.hid2[:sc.hidden] {
		v := tensor.F16ToF32(h)
		if !finite32(v) {
			return fmt.Errorf("component mean %d (in lane %d's state) is %v", i, i, v)
		}
		sc.means[i] = v
	}
	return nil
}

// Decode reconstructs the block, checking every stored field.
func (k *KakeyaPC) Decode(dst []float32, src []byte, n, d int) error {
	if err := checkShape("kakeya-pc", n, d, len(dst), "destination"); err != nil {
		return err
	}
	sc := k.scratch()
	defer k.pool.Put(sc)
	if err := k.parse(sc, src, n, d); err != nil {
		return err
	}
	// Every row at once: dst = base + latᵀ · coded, in MixBlock's tiles
	// and order (the base row first, then the components in turn).
	cpu.MixBlockT(dst, n, sc.base, sc.lat, n, k.coded, len(k.codedIdx), d)
	return nil
}

// DecodeRotated implements RotaryDecoder: Decode, then RoPE, bit for bit,
// the rows rotated as they are mixed (attention's key tiles).
func (k *KakeyaPC) DecodeRotated(dst []float32, src []byte, n, d int, cos, sin []float32) error {
	if d%2 != 0 || len(cos) < n*d/2 || len(sin) < n*d/2 {
		return fmt.Errorf("codec: kakeya-pc: RoPE of %d rows of %d values with %d cosines and %d sines", n, d, len(cos), len(sin))
	}
	if err := checkShape("kakeya-pc", n, d, len(dst), "destination"); err != nil {
		return err
	}
	sc := k.scratch()
	defer k.pool.Put(sc)
	if err := k.parse(sc, src, n, d); err != nil {
		return err
	}
	cpu.MixBlockTRoPE(dst, n, sc.base, sc.lat, n, k.coded, len(k.codedIdx), d, cos, sin)
	return nil
}

// AddWeighted implements RowCombiner: the weighted sums of the rows'
// latents (and of 1, for the constant row) are taken first, so each weight
// row costs one C x d product per block rather than one per block row.
func (k *KakeyaPC) AddWeighted(dst []float32, m int, w []float32, wStride int, src []byte, n, d, lo, hi int) error {
	if err := checkCombine("kakeya-pc", dst, m, w, wStride, n, d, lo, hi); err != nil {
		return err
	}
	sc := k.scratch()
	defer k.pool.Put(sc)
	if err := k.parse(sc, src, n, d); err != nil {
		return err
	}
	k.addWeighted(sc, dst, m, w, wStride, n, d, lo, hi)
	return nil
}

// addWeighted is AddWeighted's sums over the block parse left in sc.
func (k *KakeyaPC) addWeighted(sc *pcScratch, dst []float32, m int, w []float32, wStride int, n, d, lo, hi int) {
	if m == 0 || hi == lo {
		return
	}
	// The latents turned row-major (n x q), each row's C latents followed
	// by a 1 for the constant row and zeros, so acc (m x q) = w·lat sums
	// the weights too; then dst += acc · coded and each weight row's sum
	// times the base row.
	c, q := len(k.codedIdx), pcLatRows(len(k.codedIdx))
	for i := range n {
		sc.lat[c*n+i] = 1
	}
	clear(sc.lat[(c+1)*n : q*n])
	sc.rows = growF32(sc.rows, n*q)
	cpu.Transpose(sc.rows[lo*q:], q, sc.lat[lo:], n, q, hi-lo) // rows [lo, hi) only
	sc.acc = growF32(sc.acc, m*q)
	clear(sc.acc)
	cpu.MixBlock(sc.acc, m, w[lo:], wStride, sc.rows[lo*q:], hi-lo, q)
	cpu.MixBlock(dst, m, sc.acc, q, k.coded, c, d)
	cpu.MixBlock(dst, m, sc.acc[c:], q, sc.base, 1, d)
}

// scratches returns n scratches from the pool in sc's first n, which it
// returns; putScratches gives them back.
func (k *KakeyaPC) scratches(sc *[MaxBlocks]*pcScratch, n int) []*pcScratch {
	for j := range n {
		sc[j] = k.scratch()
	}
	return sc[:n]
}

// putScratches returns scratches to the pool.
func (k *KakeyaPC) putScratches(sc []*pcScratch) {
	for _, s := range sc {
		k.pool.Put(s)
	}
}

// DecodeRotatedBlocks implements BlocksDecoder: DecodeRotated of each
// block, their layout-2 streams decoded side by side.
func (k *KakeyaPC) DecodeRotatedBlocks(dst [][]float32, src [][]byte, n, d int, cos, sin [][]float32) error {
	nb := len(src)
	if nb == 0 || nb > MaxBlocks || len(dst) != nb || len(cos) != nb || len(sin) != nb {
		return fmt.Errorf("codec: kakeya-pc: %d blocks (at most %d) into %d destinations with %d and %d RoPE tables", nb, MaxBlocks, len(dst), len(cos), len(sin))
	}
	for j := range nb {
		if d%2 != 0 || len(cos[j]) < n*d/2 || len(sin[j]) < n*d/2 {
			return fmt.Errorf("codec: kakeya-pc: RoPE of %d rows of %d values with %d cosines and %d sines", n, d, len(cos[j]), len(sin[j]))
		}
		if err := checkShape("kakeya-pc", n, d, len(dst[j]), "destination"); err != nil {
			return err
		}
	}
	var arr [MaxBlocks]*pcScratch
	sc := k.scratches(&arr, nb)
	defer k.putScratches(sc)
	if err := k.parseBlocks(sc, src, n, d); err != nil {
		return err
	}
	for j := range nb {
		cpu.MixBlockTRoPE(dst[j], n, sc[j].base, sc[j].lat, n, k.coded, len(k.codedIdx), d, cos[j], sin[j])
	}
	return nil
}

// AddWeightedBlocks implements BlocksDecoder: AddWeighted of each block in
// turn, their layout-2 streams decoded side by side first.
func (k *KakeyaPC) AddWeightedBlocks(dst []float32, m int, w [][]float32, wStride int, src [][]byte, n, d int, lo, hi []int) error {
	nb := len(src)
	if nb == 0 || nb > MaxBlocks || len(w) != nb || len(lo) != nb || len(hi) != nb {
		return fmt.Errorf("codec: kakeya-pc: %d blocks (at most %d) with %d weights and %d, %d row ranges", nb, MaxBlocks, len(w), len(lo), len(hi))
	}
	for j := range nb {
		if err := checkCombine("kakeya-pc", dst, m, w[j], wStride, n, d, lo[j], hi[j]); err != nil {
			return err
		}
	}
	var arr [MaxBlocks]*pcScratch
	sc := k.scratches(&arr, nb)
	defer k.putScratches(sc)
	if err := k.parseBlocks(sc, src, n, d); err != nil {
		return err
	}
	for j := range nb {
		k.addWeighted(sc[j], dst, m, w[j], wStride, n, d, lo[j], hi[j])
	}
	return nil
}

// pcLatRows returns the rows of a block's latents AddWeighted uses for c
// coded components: theirs, one of ones, zeros to a multiple of 8.
func pcLatRows(c int) int { return (c + 1 + 7) &^ 7 }

// allocatePC chooses each component's state (-1 left out, 0 mean only, b
// coded with b bits) minimizing Σ_j w_j·D_j under the budget of o.Rate
// bits per value for blocks of o.Block rows, by dynamic programming over
// the components in units of the per-block costs' common divisor. D_j is
// Var_j + Between_j left out, Var_j with the mean only and Var_j·G(b)
// coded, G(b) the quantizer's Gaussian distortion at b bits; a mean costs
// 16 bits per block, a coded component 32 plus per row b, or with
// o.Entropy the code's expected entropy-coded length (and the stream's
// lanes 16 bits each).
func allocatePC(st *PCAStats, w []float32, o KakeyaPCOptions, tab *pcTables) []int8 {
	d, n := st.Dim(), o.Block
	// Costs in units of their common divisor, exact in the common case
	// (bits, with entropy-constrained codes);
	// a budget of more than pcMaxStates/d units (long blocks, wide heads)
	// takes coarser units, each cost rounded up, so that the table stays
	// small and the allocation still never exceeds the budget.
	unit := gcd(16, n)
	if o.Entropy && !o.Uniform {
		// The entropy-constrained codes' expected lengths sit just above
		// multiples of 16 bits (n·b/2 and a little): whole units of 16
		// would round each component's cost up by about 15 bits, leaving
		// a twentieth of the budget unspent. (kvtc keeps the units it
		// was measured with.)
		unit = 1
	}
	for o.Rate*float64(n*d)/float64(unit) > float64(max(pcMaxStates/d, 1)) {
		unit *= 2
	}
	units := func(bits int) int { return (bits + unit - 1) / unit }
	total := o.Rate * float64(n*d)
	if o.Entropy {
		// The stream's lanes each end in a 32-bit state that starts at
		// 2^16: about 16 bits a lane beyond the codes' lengths.
		total = max(0, total-16*ransLanes)
	}
	budget := int(total / float64(unit))
	type option struct {
		state int8
		cost  int // units
		dist  float64
	}
	weight := func(j int) float64 {
		if w == nil {
			return 1
		}
		return float64(w[j])
	}
	// With a cap (MaxCoded, or CodedFrac of d), only the capped count of
	// components of most weighted variance (the first in a tie) may be
	// coded.
	maxCoded := o.MaxCoded
	if o.CodedFrac > 0 {
		c := max(1, int(math.Round(o.CodedFrac*float64(d))))
		if maxCoded <= 0 || c < maxCoded {
			maxCoded = c
		}
	}
	codable := make([]bool, d)
	order := make([]int, d)
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(weight(b)*float64(st.Var[b]), weight(a)*float64(st.Var[a]))
	})
	for i, j := range order {
		codable[j] = maxCoded <= 0 || i < maxCoded
	}
	opts := make([][]option, d)
	for j := 0; j < d; j++ {
		wj := weight(j)
		v, bt := float64(st.Var[j]), float64(st.Between[j])
		o2 := []option{{-1, 0, wj * (v + bt)}, {0, units(16), wj * v}}
		for b := 1; codable[j] && b <= tab.n && tab.width[b] <= o.MaxBits; b++ {
			bits := 32 + int(math.Ceil(float64(n)*tab.codeBits(b, o.Entropy)))
			o2 = append(o2, option{int8(b), units(bits), wj * v * tab.dist[b]})
		}
		opts[j] = o2
	}
	// best[c] is the least distortion of the components so far in at most
	// c units; choice[j][c] the state component j took there.
	best := make([]float64, budget+1)
	next := make([]float64, budget+1)
	choice := make([][]int8, d)
	for j := 0; j < d; j++ {
		choice[j] = make([]int8, budget+1)
		for c := 0; c <= budget; c++ {
			next[c] = math.Inf(1)
			for t, op := range opts[j] {
				if op.cost > c {
					continue
				}
				if v := best[c-op.cost] + op.dist; v < next[c] {
					next[c], choice[j][c] = v, int8(t)
				}
			}
		}
		best, next = next, best
	}
	alloc := make([]int8, d)
	c := budget
	for j := d - 1; j >= 0; j-- {
		op := opts[j][choice[j][c]]
		alloc[j] = op.state
		c -= op.cost
	}
	return alloc
}

// pcMaxStates bounds the dynamic program's table, components times
// budget units: 4 MB of choices.
const pcMaxStates = 1 << 22

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// codebookDistortion returns the mean squared error of cb on N(0, 1),
// integrated exactly over its cells.
func codebookDistortion(cb *Codebook) float64 {
	var e float64
	k := len(cb.Levels)
	for i := 0; i < k; i++ {
		lo, hi := math.Inf(-1), math.Inf(1)
		if i > 0 {
			lo = float64(cb.Bounds[i-1])
		}
		if i < k-1 {
			hi = float64(cb.Bounds[i])
		}
		y := float64(cb.Levels[i])
		mass := gaussMass(lo, hi)
		m1 := normPDF(lo) - normPDF(hi)
		m2 := mass + xPDF(lo) - xPDF(hi)
		e += m2 - 2*y*m1 + y*y*mass
	}
	return e
}

// xPDF is x·φ(x), 0 at ±∞.
func xPDF(x float64) float64 {
	if math.IsInf(x, 0) {
		return 0
	}
	return x * normPDF(x)
}
