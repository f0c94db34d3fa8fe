package codec

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

func init() {
	Register(Registration{Name: "kakeya-block", Deprecated: []string{"kakeya"}, MinBits: 1, MaxBits: 4, Formats: []FormatID{FormatKakeya}, New: newKakeyaSpec})
}

// newKakeyaSpec builds the per-block-basis Kakeya codec a spec names.
func newKakeyaSpec(s Spec, a *Args) (Codec, error) {
	o := DefaultKakeyaOptions()
	if s.Bits != 0 {
		o.Bits = s.Bits
	}
	a.IntIn("rank", &o.MaxRank, 0, 255)
	a.Float("var", &o.VarianceRatio)
	a.Want("var", o.VarianceRatio > 0 && o.VarianceRatio <= 1, "want a variance ratio in (0, 1]")
	a.Int("cbits", &o.CoeffBits)
	a.Want("cbits", o.CoeffBits == 4 || o.CoeffBits == 8 || o.CoeffBits == 16, "want 4, 8 or 16")
	t := float64(o.OutlierThreshold)
	a.Float("outlier", &t)
	a.Want("outlier", t >= 0 && t <= math.MaxFloat32, "want a threshold >= 0 in standard deviations (0 turns outliers off)")
	o.OutlierThreshold = float32(t)
	a.IntIn("maxout", &o.MaxOutliers, 0, 255)
	a.Bool("signs", &o.RandomSigns)
	a.Uint64("seed", &o.Seed)
	if a.Err() != nil {
		return nil, nil
	}
	return NewKakeya(o)
}

// KakeyaOptions configures the Kakeya codec. Start from
// DefaultKakeyaOptions and change fields; NewKakeya validates them all.
type KakeyaOptions struct {
	// Bits is the residual code width per rotated coordinate, 1..4.
	Bits int
	// VarianceRatio stops the PCA skeleton at the smallest rank whose
	// components explain this share of the block's centred variance, (0, 1].
	VarianceRatio float64
	// MaxRank caps the skeleton rank, 0..255; 0 codes only mean + residual.
	MaxRank int
	// CoeffBits is the width of the per-token skeleton coefficients: 16
	// stores fp16, 8 or 4 store symmetric integers with an fp16 scale per
	// component.
	CoeffBits int
	// OutlierThreshold stores a rotated, unit-variance coordinate exactly
	// (index + fp16) when its magnitude exceeds it; <= 0 turns outliers off.
	OutlierThreshold float32
	// MaxOutliers caps the exact coordinates per vector (the largest win).
	MaxOutliers int
	// Codebook is the residual quantizer in the unit-variance domain with
	// 2^Bits levels; nil uses the Gaussian Lloyd–Max codebook.
	Codebook *Codebook
	// RandomSigns flips coordinate signs (fixed by Seed) before the
	// Hadamard transform so structured vectors spread evenly.
	RandomSigns bool
	Seed        uint64
}

// DefaultKakeyaOptions returns the settings chosen from the synthetic K/V
// sweep (TestSweep): 3-bit residual, skeleton up to rank 4 with 4-bit
// coefficients, at most 4 outliers per vector above 3: about 3.9 bits per
// value at d=64 and 3.6 at d=128 for blocks of 256 tokens.
func DefaultKakeyaOptions() KakeyaOptions {
	return KakeyaOptions{
		Bits:             3,
		VarianceRatio:    0.95,
		MaxRank:          4,
		CoeffBits:        4,
		OutlierThreshold: 3,
		MaxOutliers:      4,
		RandomSigns:      true,
		Seed:             defaultSeed,
	}
}

// Kakeya codes a block as mean + low-rank PCA skeleton + a residual that is
// rotated by a randomized Walsh–Hadamard transform, scaled to unit variance
// and quantized per coordinate with a Lloyd–Max codebook, plus sparse exact
// outliers. With p = NextPow2(d), r the block's rank, c = CoeffBits, b = Bits
// and m outliers, the encoded length is
//
//	16 + 6 + 2d + 2rd + [c<16] 2r + ceil(n*r*c/8) + 2n + ceil(n*p*b/8) + m*(s+2)
//
// bytes, where s = 2 when n*p <= 65536 and 4 otherwise.
type Kakeya struct {
	opt    KakeyaOptions
	cb     *Codebook
	levels [16]float32 // cb.Levels, zero-padded for the decoding kernels
	signs  []float32
	tag    uint16
	pool   sync.Pool
}

type kakeyaScratch struct {
	xc    []float32 // centred block, then the residual
	mean  []float32
	basis []float32 // r x d, fp16-rounded
	coef  []float32 // n x r, as decoded
	v     []float32 // one padded row
	cov   []float64
	cov32 []float32
	eig   []float64
	codes []uint8
	cand  []int32
	opos  []int32
	oval  []float32
	mb    []float32 // decode: the mean, then the r basis rows
	norms []float32 // decode: the rows' residual norms / p: their level scales
	acc   []float32 // AddWeighted: m rotated-domain sums of p values, Σw and r coefficient sums
	lat   []float32 // AddWeighted: the rows' rotated-domain forms, 1 and coefficients

	// topEigen scratch
	qv, zv, tv, wv, smallWork []float64
	smallWorkM                int
}

// The sections and fields of formatKakeya.
const (
	kkInfo = iota
	kkMean
	kkBasis
	kkCoefScales
	kkCoefs
	kkNorms
	kkCodes
	kkOutliers

	kkFieldOutliers = 3
)

// Format returns the kakeya format.
func (k *Kakeya) Format() *Format { return formatKakeya }

// Settings returns the residual's code width, its codebook levels and the
// rotation's signs (all 1 without RandomSigns).
func (k *Kakeya) Settings() Settings {
	return Settings{Bits: k.opt.Bits, Rotated: true, Levels: append([]float32(nil), k.cb.Levels...), signs: k.signs}
}

// NewKakeya validates o and returns the codec.
func NewKakeya(o KakeyaOptions) (*Kakeya, error) {
	switch {
	case o.Bits < 1 || o.Bits > 4:
		return nil, fmt.Errorf("codec: kakeya: bits %d not in 1..4", o.Bits)
	case !(o.VarianceRatio > 0 && o.VarianceRatio <= 1):
		return nil, fmt.Errorf("codec: kakeya: variance ratio %v not in (0, 1]", o.VarianceRatio)
	case o.MaxRank < 0 || o.MaxRank > 255:
		return nil, fmt.Errorf("codec: kakeya: max rank %d not in 0..255", o.MaxRank)
	case o.CoeffBits != 4 && o.CoeffBits != 8 && o.CoeffBits != 16:
		return nil, fmt.Errorf("codec: kakeya: coefficient bits %d not 4, 8 or 16", o.CoeffBits)
	case o.MaxOutliers < 0 || o.MaxOutliers > 255:
		return nil, fmt.Errorf("codec: kakeya: max outliers %d not in 0..255", o.MaxOutliers)
	case !finite32(o.OutlierThreshold):
		return nil, fmt.Errorf("codec: kakeya: outlier threshold %v", o.OutlierThreshold)
	}
	cb := o.Codebook
	if cb == nil {
		var err error
		if cb, err = GaussianCodebook(o.Bits); err != nil {
			return nil, err
		}
	} else {
		if err := cb.Validate(); err != nil {
			return nil, fmt.Errorf("codec: kakeya: %w", err)
		}
		if cb.Bits() != o.Bits {
			return nil, fmt.Errorf("codec: kakeya: codebook has %d levels, want %d for %d bits", len(cb.Levels), 1<<o.Bits, o.Bits)
		}
		cb = &Codebook{Levels: slices.Clone(cb.Levels), Bounds: slices.Clone(cb.Bounds)}
	}
	k := &Kakeya{opt: o, cb: cb}
	copy(k.levels[:], cb.Levels)
	k.signs = make([]float32, maxDim)
	if o.RandomSigns {
		k.signs = randomSigns(maxDim, o.Seed)
	} else {
		for i := range k.signs {
			k.signs[i] = 1
		}
	}
	// The tag binds a block to the settings its payload does not describe:
	// the codebook and the rotation signs.
	h := fnv.New32a()
	var b [8]byte
	for _, l := range cb.Levels {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(l))
		h.Write(b[:4])
	}
	if o.RandomSigns {
		binary.LittleEndian.PutUint64(b[:], o.Seed)
		h.Write(b[:])
	}
	s := h.Sum32()
	k.tag = uint16(s ^ s>>16)
	return k, nil
}

// Options returns the codec's settings.
func (k *Kakeya) Options() KakeyaOptions { return k.opt }

// Signs returns the first n signs (±1) of the codec's randomized Hadamard
// rotation (all 1 without RandomSigns), for a backend that decodes its
// blocks itself. n may not exceed the largest head dim a codec takes.
func (k *Kakeya) Signs(n int) []float32 { return slices.Clone(k.signs[:n]) }

// Name encodes the settings, e.g. "kakeya-b3-r4v0.5c8-o3x4".
func (k *Kakeya) Name() string {
	o := k.opt
	s := fmt.Sprintf("kakeya-b%d", o.Bits)
	if o.MaxRank > 0 {
		s += fmt.Sprintf("-r%dv%gc%d", o.MaxRank, o.VarianceRatio, o.CoeffBits)
	}
	if o.OutlierThreshold > 0 && o.MaxOutliers > 0 {
		s += fmt.Sprintf("-o%gx%d", o.OutlierThreshold, o.MaxOutliers)
	}
	if o.Codebook != nil {
		s += "-cal"
	}
	if !o.RandomSigns {
		s += "-nosign"
	}
	return s
}

func (k *Kakeya) scratch() *kakeyaScratch {
	if s, ok := k.pool.Get().(*kakeyaScratch); ok {
		return s
	}
	return new(kakeyaScratch)
}

// skeleton centres x into sc.xc, fits the PCA skeleton and leaves the
// residual (as the decoder will see it) in sc.xc. It returns the rank.
func (k *Kakeya) skeleton(sc *kakeyaScratch, x []float32, n, d int) int {
	sc.mean = growF32(sc.mean, d)
	sc.xc = growF32(sc.xc, n*d)
	sc.cov = growF64(sc.cov, d*d)
	acc := sc.cov[:d]
	clear(acc)
	for i := 0; i < n; i++ {
		for j, v := range x[i*d : (i+1)*d] {
			acc[j] += float64(v)
		}
	}
	for j := range sc.mean {
		sc.mean[j] = roundF16(float32(acc[j] / float64(n)))
	}
	for i := 0; i < n; i++ {
		row, xr := sc.xc[i*d:(i+1)*d], x[i*d:(i+1)*d]
		for j := range row {
			row[j] = xr[j] - sc.mean[j]
		}
	}
	maxR := min(k.opt.MaxRank, n, d)
	if maxR == 0 {
		return 0
	}
	// Upper triangle of the centred scatter matrix, accumulated by float32
	// vector rank-1 updates (the rows are centred, so no large common term
	// cancels), then widened for the eigensolver.
	c32 := growF32(sc.cov32, d*d)
	sc.cov32 = c32
	clear(c32)
	for i := 0; i < n; i++ {
		row := sc.xc[i*d : (i+1)*d]
		for a, va := range row {
			if va != 0 {
				cpu.Axpy(va, row[a:], c32[a*d+a:(a+1)*d])
			}
		}
	}
	cov := sc.cov
	for a := 0; a < d; a++ {
		for b := a; b < d; b++ {
			cov[a*d+b] = float64(c32[a*d+b])
		}
	}
	total := 0.0
	for a := 0; a < d; a++ {
		total += cov[a*d+a]
	}
	if !(total > 0) {
		return 0
	}
	for a := 0; a < d; a++ { // mirror the upper triangle for the products
		for b := 0; b < a; b++ {
			cov[a*d+b] = cov[b*d+a]
		}
	}
	sc.eig = growF64(sc.eig, maxR)
	sc.basis = growF32(sc.basis, maxR*d)
	topEigen(cov, d, maxR, sc.basis, sc.eig, sc)
	r, expl := 0, 0.0
	for r < maxR && expl < k.opt.VarianceRatio*total {
		expl += max(sc.eig[r], 0)
		r++
	}
	for i, v := range sc.basis[:r*d] {
		sc.basis[i] = roundF16(v)
	}
	sc.coef = growF32(sc.coef, n*r)
	for i := 0; i < n; i++ {
		row := sc.xc[i*d : (i+1)*d]
		for c := 0; c < r; c++ {
			var s float32
			for a, v := range sc.basis[c*d : (c+1)*d] {
				s += v * row[a]
			}
			sc.coef[i*r+c] = s
		}
	}
	return r
}

// quantCoef rounds the coefficients to what the decoder will see and
// appends their encoding.
func (k *Kakeya) quantCoef(dst []byte, sc *kakeyaScratch, n, r int) []byte {
	cbits := k.opt.CoeffBits
	coef := sc.coef[:n*r]
	if cbits == 16 {
		dst = grow(dst, 2*n*r)
		p := dst[len(dst)-2*n*r:]
		for i, v := range coef {
			putF16(p[2*i:], v)
			coef[i] = roundF16(v)
		}
		return dst
	}
	qmax := float32(int(1)<<(cbits-1) - 1)
	off := float32(int(1) << (cbits - 1))
	dst = grow(dst, 2*r)
	sp := dst[len(dst)-2*r:]
	sc.codes = growU8(sc.codes, n*r)
	codes := sc.codes[:n*r]
	for c := 0; c < r; c++ {
		var m float32
		for i := 0; i < n; i++ {
			m = max(m, float32(math.Abs(float64(coef[i*r+c]))))
		}
		s := roundF16(m / qmax)
		putF16(sp[2*c:], s)
		var inv float32
		if s > 0 {
			inv = 1 / s
		}
		for i := 0; i < n; i++ {
			q := float32(math.RoundToEven(float64(coef[i*r+c] * inv)))
			q = max(-qmax, min(qmax, q))
			codes[i*r+c] = uint8(q + off)
			coef[i*r+c] = q * s
		}
	}
	return PackBits(dst, codes, cbits)
}

// checkKakeyaInput checks an input block and that its norms and skeleton
// coefficients fit fp16.
func checkKakeyaInput(name string, x []float32, n, d int) error {
	am, err := checkInput(name, x, n, d)
	if err != nil {
		return err
	}
	if 2*am*float32(math.Sqrt(float64(d))) > maxF16 {
		return fmt.Errorf("codec: %s: |value| %v too large for fp16 norms and coefficients", name, am)
	}
	return nil
}

// Encode appends the encoded block; see the type comment for the layout.
func (k *Kakeya) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	const name = "kakeya"
	if err := checkKakeyaInput(name, x, n, d); err != nil {
		return dst, err
	}
	x = x[:n*d]
	p := NextPow2(d)
	sc := k.scratch()
	defer k.pool.Put(sc)
	r := k.skeleton(sc, x, n, d)

	start := len(dst)
	dst = appendHeader(dst, FormatKakeya, byte(k.opt.Bits), n, d, k.tag)
	dst = append(dst, byte(r), byte(k.opt.CoeffBits), 0, 0, 0, 0)
	dst = grow(dst, 2*d+2*r*d)
	q := dst[len(dst)-2*d-2*r*d:]
	for j, v := range sc.mean {
		putF16(q[2*j:], v)
	}
	for j, v := range sc.basis[:r*d] {
		putF16(q[2*d+2*j:], v)
	}
	if r > 0 {
		dst = k.quantCoef(dst, sc, n, r)
		subtractSkeleton(sc, n, d, r)
	}

	// Residual: rotate, scale to unit variance, quantize, pick outliers.
	dst = grow(dst, 2*n)
	norms := dst[len(dst)-2*n:]
	sc.codes = growU8(sc.codes, n*p)
	sc.opos = sc.opos[:0]
	sc.oval = sc.oval[:0]
	for i := 0; i < n; i++ {
		nrm, cand := k.residualRow(sc, i, d, p)
		putF16(norms[2*i:], nrm)
		codes := sc.codes[i*p : (i+1)*p]
		if nrm == 0 {
			clear(codes)
			continue
		}
		for j, u := range sc.v[:p] {
			codes[j] = uint8(k.cb.Quantize(u))
		}
		for _, j := range cand {
			sc.opos = append(sc.opos, int32(i*p)+j)
			sc.oval = append(sc.oval, sc.v[j])
		}
	}
	dst = PackBits(dst, sc.codes[:n*p], k.opt.Bits)
	m := len(sc.opos)
	binary.LittleEndian.PutUint32(dst[start+formatKakeya.Fields[kkFieldOutliers].Off:], uint32(m))
	wide := n*p > 1<<16
	for t, pos := range sc.opos {
		if wide {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(pos))
		} else {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(pos))
		}
		dst = binary.LittleEndian.AppendUint16(dst, float16bits(sc.oval[t]))
	}
	seal(dst[start:])
	return dst, nil
}

// subtractSkeleton leaves in sc.xc the residual of the n x d centred block
// after its rank-r skeleton, with the coefficients as the decoder sees them.
func subtractSkeleton(sc *kakeyaScratch, n, d, r int) {
	for i := 0; i < n; i++ {
		row := sc.xc[i*d : (i+1)*d]
		for c := 0; c < r; c++ {
			cf := sc.coef[i*r+c]
			for a, bv := range sc.basis[c*d : (c+1)*d] {
				row[a] -= cf * bv
			}
		}
	}
}

// residualRow rotates residual row i of sc.xc into sc.v[:p], rounds its
// norm to fp16 and, unless that is zero, scales the row to unit variance
// and picks the coordinates stored exactly: those above the outlier
// threshold, the largest MaxOutliers of them, in increasing index order.
func (k *Kakeya) residualRow(sc *kakeyaScratch, i, d, p int) (float32, []int32) {
	v := growF32(sc.v, p)[:p]
	sc.v = v
	copy(v, sc.xc[i*d:(i+1)*d])
	clear(v[d:])
	for j := range v {
		v[j] *= k.signs[j]
	}
	fwht(v)
	var ss float64
	for _, t := range v {
		ss += float64(t) * float64(t)
	}
	nrm := roundF16(float32(math.Sqrt(ss)))
	if nrm == 0 {
		return 0, nil
	}
	scale := float32(math.Sqrt(float64(p))) / nrm
	thr := k.opt.OutlierThreshold
	useOut := thr > 0 && k.opt.MaxOutliers > 0
	cand := growI32(sc.cand, p)[:0]
	for j, t := range v {
		u := t * scale
		v[j] = u
		if useOut && (u > thr || u < -thr) {
			cand = append(cand, int32(j))
		}
	}
	if len(cand) > k.opt.MaxOutliers {
		// Keep the largest magnitudes, then restore index order.
		slices.SortFunc(cand, func(a, b int32) int {
			return cmpDesc(abs32(v[a]), abs32(v[b]))
		})
		cand = cand[:k.opt.MaxOutliers]
		slices.Sort(cand)
	}
	sc.cand = cand
	return nrm, cand
}

// kakeyaBlock is a parsed block: what Decode and AddWeighted share, plus the
// cursor over its outliers (sorted by position, consumed row by row).
type kakeyaBlock struct {
	n, p, r   int
	m, posLen int
	outs      []byte
	codes     []byte // the packed residual codes, n*p of them
	rowBytes  int    // bytes per row of codes; 0 when rows do not start on a byte
	// The cursor: outlier next (pos = n*p once all are used) and the
	// position of the one before it.
	next, pos, prevPos int
	val                float32
}

// parse checks src (header, lengths, every fixed field, and the first
// outlier: the cursor checks each as it reaches it) and leaves the mean and
// basis (sc.mb), the skeleton coefficients (sc.coef) and the rows' level
// scales (sc.norms) of the block in sc; the residual codes stay packed.
func (k *Kakeya) parse(sc *kakeyaScratch, src []byte, n, d int) (kakeyaBlock, error) {
	const name = "kakeya"
	pl, err := checkHeader(name, src, FormatKakeya, byte(k.opt.Bits), n, d, k.tag)
	if err != nil {
		return kakeyaBlock{}, err
	}
	if len(pl) < 6 {
		return kakeyaBlock{}, fmt.Errorf("codec: %s: payload of %d bytes lacks the 6-byte block header", name, len(pl))
	}
	var v Vars
	if err := formatKakeya.ReadFields(src, &v); err != nil {
		return kakeyaBlock{}, err
	}
	r, cbits, m := v[VarRank], v[VarCoefBits], v[VarOutliers]
	p := NextPow2(d)
	switch {
	case r > min(n, d):
		return kakeyaBlock{}, fmt.Errorf("codec: %s: rank %d exceeds min(n=%d, d=%d)", name, r, n, d)
	case cbits != 4 && cbits != 8 && cbits != 16:
		return kakeyaBlock{}, fmt.Errorf("codec: %s: coefficient width %d not 4, 8 or 16", name, cbits)
	case m > n*p || m > n*255:
		return kakeyaBlock{}, fmt.Errorf("codec: %s: %d outliers for %d coordinates", name, m, n*p)
	}
	l := formatKakeya.Layout(&v)
	if len(src) != l.Size() {
		return kakeyaBlock{}, fmt.Errorf("codec: %s: payload is %d bytes, want %d for rank %d and %d outliers", name, len(pl), l.Size()-headerLen, r, m)
	}
	// The mean and the basis rows are adjacent in the block and in sc.mb,
	// so the mean is row 0 of the combination AddWeighted adds.
	mean, basis := src[l.Off(kkMean):], src[l.Off(kkBasis):]
	sc.mb = growF32(sc.mb, (r+1)*d)
	if !cpu.WidenF16(sc.mb[:(r+1)*d], mean) {
		if err := readF16s(sc.mb[:d], mean, name, "mean"); err != nil {
			return kakeyaBlock{}, err
		}
		if err := readF16s(sc.mb[d:(r+1)*d], basis, name, "basis"); err != nil {
			return kakeyaBlock{}, err
		}
	}
	sc.coef = growF32(sc.coef, n*r)
	if cbits == 16 {
		if err := readF16s(sc.coef, src[l.Off(kkCoefs):], name, "coefficient"); err != nil {
			return kakeyaBlock{}, err
		}
	} else if r > 0 {
		if err := k.parseCoef(sc, src[l.Off(kkCoefScales):], src[l.Off(kkCoefs):], n, r, cbits); err != nil {
			return kakeyaBlock{}, err
		}
	}
	norms := src[l.Off(kkNorms):]
	sc.norms = growF32(sc.norms, n)
	ok := cpu.WidenF16(sc.norms, norms)
	for _, v := range sc.norms {
		ok = ok && v >= 0
	}
	if !ok {
		for i := range sc.norms {
			if v := getF16(norms[2*i:]); !finite32(v) || v < 0 {
				return kakeyaBlock{}, fmt.Errorf("codec: %s: norm of token %d is %v", name, i, v)
			}
		}
	}
	// A row's unit-variance levels times nrm/sqrt(p), then the orthonormal
	// transform's 1/sqrt(p): one scale per row, applied to the levels.
	// p is a power of two, so multiplying by 1/p is exactly dividing by it.
	cpu.Scale(sc.norms, 1/float32(p))
	posLen := kakeyaPosBytes.Eval(&v)
	b := kakeyaBlock{n: n, p: p, r: r, m: m, posLen: posLen, prevPos: -1}
	// The codes stay packed: latents unpacks them straight into their
	// levels.
	b.codes = src[l.Off(kkCodes) : l.Off(kkCodes)+l.Len(kkCodes)]
	if p*k.opt.Bits%8 == 0 {
		b.rowBytes = p * k.opt.Bits / 8
	}
	b.outs = src[l.Off(kkOutliers):]
	if err := b.load(); err != nil {
		return kakeyaBlock{}, err
	}
	return b, nil
}

// parseCoef decodes the n x r skeleton coefficients of cbits (4 or 8) bits
// and their fp16 scales from src into sc.coef.
func (k *Kakeya) parseCoef(sc *kakeyaScratch, scaleBytes, codeBytes []byte, n, r, cbits int) error {
	const name = "kakeya"
	sc.v = growF32(sc.v, r)
	scales := sc.v[:r]
	if err := readF16s(scales, scaleBytes, name, "coefficient scale"); err != nil {
		return err
	}
	half := float32(int(1) << (cbits - 1))
	coef := sc.coef[:n*r]
	if cbits == 4 {
		// Code c stands for c - half: a lookup table gives those values
		// (exactly, as float32(c) - half does) without an array of codes.
		var t [16]float32
		for c := range t {
			t[c] = float32(c) - half
		}
		cpu.UnpackLookup(coef, codeBytes, cbits, &t)
	} else {
		sc.codes = growU8(sc.codes, n*r)
		if err := UnpackBits(sc.codes[:n*r], codeBytes, cbits); err != nil {
			return fmt.Errorf("codec: %s: %w", name, err)
		}
		for i, c := range sc.codes[:n*r] {
			coef[i] = float32(c) - half
		}
	}
	if cbits == 4 && !hasZeroNibble(codeBytes[:(n*r+1)/2], n*r) {
		// No code 0 (the check below, done on the packed bytes).
		for i := 0; i+r <= len(coef); i += r {
			row, s := coef[i:i+r], scales[:r]
			for c := range row {
				row[c] *= s[c]
			}
		}
		return nil
	}
	for i := 0; i+r <= len(coef); i += r {
		row, s := coef[i:i+r], scales[:r]
		for c, q := range row {
			if q == -half { // code 0
				return fmt.Errorf("codec: %s: coefficient code 0 at token %d outside the symmetric range", name, i/r)
			}
			row[c] = q * s[c]
		}
	}
	return nil
}

// hasZeroNibble reports whether any of the first n 4-bit codes packed in b
// (two per byte) is 0, eight bytes at a time.
func hasZeroNibble(b []byte, n int) bool {
	const ones = 0x1111111111111111
	i := 0
	for ; 2*(i+8) <= n; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		x |= x >> 1
		x |= x >> 2 // bit 0 of each nibble: the nibble is not 0
		if x&ones != ones {
			return true
		}
	}
	for j := 2 * i; j < n; j++ {
		if b[j/2]>>(4*(j%2))&15 == 0 {
			return true
		}
	}
	return false
}

// load reads outlier b.next into the cursor (b.pos = n*p past the last),
// checking that positions increase and stay inside the block and that the
// value is finite.
func (b *kakeyaBlock) load() error {
	if b.next >= b.m {
		b.pos = b.n * b.p
		return nil
	}
	e := b.outs[b.next*(b.posLen+2):]
	var pos int
	if b.posLen == 2 {
		pos = int(binary.LittleEndian.Uint16(e))
	} else {
		pos = int(binary.LittleEndian.Uint32(e))
	}
	if pos <= b.prevPos || pos >= b.n*b.p {
		return fmt.Errorf("codec: kakeya: outlier %d at position %d out of order or outside %d coordinates", b.next, pos, b.n*b.p)
	}
	val := getF16(e[b.posLen:])
	if !finite32(val) {
		return fmt.Errorf("codec: kakeya: outlier %d value is %v", b.next, val)
	}
	b.pos, b.val = pos, val
	return nil
}

// advance moves the cursor past the current outlier.
func (b *kakeyaBlock) advance() error {
	b.prevPos = b.pos
	b.next++
	return b.load()
}

// allOutliersUsed checks, once every row has been read, that no outlier
// lies past the block's last row.
func (b *kakeyaBlock) allOutliersUsed() error {
	if b.next != b.m {
		return fmt.Errorf("codec: kakeya: outlier %d lies outside the block", b.next)
	}
	return nil
}

// skipTo moves the outlier cursor past the rows before row i.
func (b *kakeyaBlock) skipTo(i int) error {
	for b.pos < i*b.p {
		if err := b.advance(); err != nil {
			return err
		}
	}
	return nil
}

// latents sets row i-lo of lat (at (i-lo)*stride) to the p values of row
// i's residual in the rotated domain, for lo <= i < hi, scaled so that
// signs ⊙ fwhtRaw(row) is the residual itself: the form in which rows
// combine linearly. The outlier cursor must be at row lo; it ends at hi.
func (k *Kakeya) latents(b *kakeyaBlock, scales, lat []float32, stride, lo, hi int) error {
	p, bits := b.p, k.opt.Bits
	if b.rowBytes > 0 {
		cpu.UnpackLookupRows(lat, stride, p, b.codes[lo*b.rowBytes:], bits, &k.levels, scales[lo:hi])
	} else {
		for i := lo; i < hi; i++ {
			var lv [16]float32
			for c, l := range k.levels {
				lv[c] = l * scales[i]
			}
			unpackLookupAt(lat[(i-lo)*stride:(i-lo)*stride+p], b.codes, i*p*bits, bits, &lv)
		}
	}
	for b.pos < hi*p {
		i := b.pos / p
		lat[(i-lo)*stride+b.pos-i*p] = b.val * scales[i]
		if err := b.advance(); err != nil {
			return err
		}
	}
	return nil
}

// finish sets out (d values) to signs ⊙ fwhtRaw(v) + z plus w[c] times row c
// of rows, in that order: a row's or a weighted sum's way back from the
// rotated domain. v is overwritten.
func (k *Kakeya) finish(out, v, z, w, rows []float32) {
	d := len(out)
	if len(v) >= 8 {
		cpu.FWHTAxpy(out, v, k.signs[:d], z, w, rows)
		return
	}
	fwhtRaw(v)
	cpu.MulAdd(out, v[:d], k.signs[:d], z)
	cpu.AxpyBlock(out, w, rows, len(w), d)
}

// Decode reconstructs the block, checking every stored field.
func (k *Kakeya) Decode(dst []float32, src []byte, n, d int) error {
	return k.decode(dst, src, n, d, nil, nil)
}

// DecodeRotated implements RotaryDecoder: the rotation joins the last pass
// over each row.
func (k *Kakeya) DecodeRotated(dst []float32, src []byte, n, d int, cos, sin []float32) error {
	if d%2 != 0 || len(cos) < n*d/2 || len(sin) < n*d/2 {
		return fmt.Errorf("codec: kakeya: RoPE of %d rows of %d values with %d cosines and %d sines", n, d, len(cos), len(sin))
	}
	return k.decode(dst, src, n, d, cos, sin)
}

// decode is Decode, with each row then rotated by RoPE when cos is not nil.
func (k *Kakeya) decode(dst []float32, src []byte, n, d int, cos, sin []float32) error {
	if err := checkShape("kakeya", n, d, len(dst), "destination"); err != nil {
		return err
	}
	sc := k.scratch()
	defer k.pool.Put(sc)
	b, err := k.parse(sc, src, n, d)
	if err != nil {
		return err
	}
	p, r := b.p, b.r
	sc.lat = growF32(sc.lat, n*p)
	if err := k.latents(&b, sc.norms, sc.lat, p, 0, n); err != nil {
		return err
	}
	mean, basis := sc.mb[:d], sc.mb[d:(r+1)*d]
	switch {
	case p >= 8 && cos != nil:
		cpu.FWHTAxpyRoPERows(dst, sc.lat, k.signs[:d], mean, sc.coef[:n*r], basis, n, d, p, r, cos, sin)
	case p >= 8:
		cpu.FWHTAxpyRows(dst, sc.lat, k.signs[:d], mean, sc.coef[:n*r], basis, n, d, p, r)
	default:
		for i := 0; i < n; i++ {
			k.finish(dst[i*d:(i+1)*d], sc.lat[i*p:(i+1)*p], mean, sc.coef[i*r:(i+1)*r], basis)
		}
		if cos != nil {
			cpu.RoPEBlock(dst, dst, cos, sin, n, d)
		}
	}
	return b.allOutliersUsed()
}

// AddWeighted implements RowCombiner. Rows combine in the rotated domain,
// so each weight row costs one inverse transform per block rather than one
// per block row.
func (k *Kakeya) AddWeighted(dst []float32, m int, w []float32, wStride int, src []byte, n, d, lo, hi int) error {
	if err := checkCombine("kakeya", dst, m, w, wStride, n, d, lo, hi); err != nil {
		return err
	}
	sc := k.scratch()
	defer k.pool.Put(sc)
	b, err := k.parse(sc, src, n, d)
	if err != nil {
		return err
	}
	p, r := b.p, b.r
	rows := hi - lo
	// Row i of the block as q values: its latent form, then 1 and its r
	// skeleton coefficients, padded to whole vectors. One MixBlock then
	// sums, for every weight row, Σ_i w_i·latent_i, Σ_i w_i and Σ_i w_i·coef_i
	// together.
	q := p + (r+1+7)&^7
	sc.lat = growF32(sc.lat, rows*q)
	if err := b.skipTo(lo); err != nil {
		return err
	}
	if err := k.latents(&b, sc.norms, sc.lat, q, lo, hi); err != nil {
		return err
	}
	for i := lo; i < hi; i++ {
		row := sc.lat[(i-lo)*q : (i-lo+1)*q]
		row[p] = 1
		copy(row[p+1:], sc.coef[i*r:(i+1)*r])
		clear(row[p+1+r:])
	}
	if hi == n {
		if err := b.allOutliersUsed(); err != nil {
			return err
		}
	}
	sc.acc = growF32(sc.acc, m*q)
	clear(sc.acc)
	// One pass over the rows for all m weight rows: each latent row is
	// loaded once.
	cpu.MixBlock(sc.acc, m, w[lo:], wStride, sc.lat, rows, q)
	for j := 0; j < m; j++ {
		acc := sc.acc[j*q : (j+1)*q]
		// out += signs ⊙ fwhtRaw(Σ w·latent) + (Σw)·mean + Σ_c (Σ w·coef_c)·basis_c
		out := dst[j*d : (j+1)*d]
		k.finish(out, acc[:p], out, acc[p:p+1+r], sc.mb[:(r+1)*d])
	}
	return nil
}

// readF16s widens len(dst) fp16 values from src, rejecting non-finite ones.
func readF16s(dst []float32, src []byte, name, what string) error {
	if cpu.WidenF16(dst, src) {
		return nil
	}
	for i := range dst {
		if v := getF16(src[2*i:]); !finite32(v) {
			return fmt.Errorf("codec: %s: %s %d is %v", name, what, i, v)
		}
	}
	return nil
}

func float16bits(v float32) uint16 {
	var b [2]byte
	putF16(b[:], v)
	return binary.LittleEndian.Uint16(b[:])
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
