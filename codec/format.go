package codec

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// This file is the one description of every block format, as ggml-common.h
// is for llama.cpp's block types. A Format names a layout: the fields read
// from a block's bytes (the header's, and fixed payload fields) and the
// sections after the header, each a count of elements of a width in bits,
// laid end to end and computed from Vars. The codecs' parsers take their
// offsets from it, and kernels/cuda/formats.h, which the CUDA kernels
// include, is generated from it (CHeader; go generate ./codec, or make
// formats); TestFormatsHeader fails when the committed header is stale and
// TestFormatsAgree evaluates the header's C against the Go layout on real
// blocks.

//go:generate go run ../internal/cmd/kakeya-formats -o ../kernels/cuda/formats.h

// A FormatID identifies a block format: the codec id byte at offset 2 of
// every block's header. Ids 1..63 are the built-in formats' (Formats); a
// codec outside this package picks one above them.
type FormatID byte

// The built-in formats' ids, as block headers store them.
const (
	FormatIdentity   FormatID = 1 + iota // float32 rows (codec "f32")
	FormatBF16                           // bfloat16 rows (codec "bf16")
	FormatInt8                           // codec Int8
	FormatInt4                           // codec Int4 (int4*, int2*)
	FormatKakeya                         // codec Kakeya
	FormatTurbo                          // codec Turbo
	FormatFP8                            // codec FP8
	FormatKakeyaPC                       // codec KakeyaPC
	FormatKakeyaPCEC                     // codec KakeyaPC with entropy coding (kakeya-pc:ec=true, kvtc)
)

// A Var is one quantity a block layout is computed from: the block's
// shape, or a setting read from its bytes (a Field) or the codec's
// options.
type Var uint8

// The layout variables. Each format uses some of them; Format.Vars lists
// which.
const (
	VarN          Var = iota // rows of the block (header bytes 4..7)
	VarD                     // values per row (header bytes 8..9)
	VarBits                  // code width in bits
	VarGroup                 // values per quantization group
	VarPerChannel            // 1 when groups run along the tokens of each channel
	VarRotated               // 1 when rows are Walsh–Hadamard rotated at NextPow2(d)
	VarByteParams            // 1 for Int4's 8-bit group parameters, 0 for fp16 pairs
	VarRank                  // Kakeya's skeleton rank
	VarCoefBits              // Kakeya's skeleton coefficient width: 4, 8 or 16
	VarOutliers              // Kakeya's count of exact outliers
	VarBlock                 // Turbo's values per norm block (a power of two)
	VarMeans                 // KakeyaPC's count of stored component means
	VarCoded                 // KakeyaPC's count of coded components
	VarRowBits               // KakeyaPC's code bits per row
	VarCodeBytes             // KakeyaPC's code bytes: kakeya_pc_ec's stream length (a field), kakeya_pc's planes' total (from the codec's widths)
	NumVars                  // the number of layout variables
)

var varNames = [NumVars]string{"n", "d", "bits", "group", "per_channel", "rotated", "byte_params", "rank", "coef_bits", "outliers", "block", "means", "coded", "row_bits", "code_bytes"}

// String returns the variable's name in the C header, e.g. "coef_bits".
func (v Var) String() string {
	if v < NumVars {
		return varNames[v]
	}
	return fmt.Sprintf("Var(%d)", int(v))
}

// Vars holds a value for every layout variable, indexed by Var.
type Vars [NumVars]int

// An Expr is an integer expression over layout variables: the size of a
// section or a derived quantity. It evaluates in Go (Eval) and prints as
// C (the generated header), so both read one definition.
type Expr struct {
	op   exprOp
	k    int // a literal's value
	v    Var // a variable's index
	args []Expr
}

type exprOp uint8

const (
	opLit exprOp = iota
	opVar
	opAdd
	opMul
	opCeilDiv
	opMin
	opGt
	opSel
	opPow2
)

// Lit is the constant k.
func Lit(k int) Expr { return Expr{op: opLit, k: k} }

// V is the value of a layout variable.
func V(v Var) Expr { return Expr{op: opVar, v: v} }

// Add is the sum of its terms.
func Add(terms ...Expr) Expr { return Expr{op: opAdd, args: terms} }

// Mul is the product of its factors.
func Mul(factors ...Expr) Expr { return Expr{op: opMul, args: factors} }

// CeilDiv is ceil(a/b) for a >= 0, b > 0.
func CeilDiv(a, b Expr) Expr { return Expr{op: opCeilDiv, args: []Expr{a, b}} }

// Min is the smaller of a and b.
func Min(a, b Expr) Expr { return Expr{op: opMin, args: []Expr{a, b}} }

// Gt is 1 when a > b, else 0.
func Gt(a, b Expr) Expr { return Expr{op: opGt, args: []Expr{a, b}} }

// Sel is a when cond is not 0, else b.
func Sel(cond, a, b Expr) Expr { return Expr{op: opSel, args: []Expr{cond, a, b}} }

// Pow2 is the smallest power of two >= a (NextPow2).
func Pow2(a Expr) Expr { return Expr{op: opPow2, args: []Expr{a}} }

// Eval returns the expression's value for v. It allocates nothing.
func (e Expr) Eval(v *Vars) int {
	switch e.op {
	case opLit:
		return e.k
	case opVar:
		return v[e.v]
	case opAdd:
		s := 0
		for _, a := range e.args {
			s += a.Eval(v)
		}
		return s
	case opMul:
		p := 1
		for _, a := range e.args {
			p *= a.Eval(v)
		}
		return p
	case opCeilDiv:
		b := e.args[1].Eval(v)
		return (e.args[0].Eval(v) + b - 1) / b
	case opMin:
		return min(e.args[0].Eval(v), e.args[1].Eval(v))
	case opGt:
		if e.args[0].Eval(v) > e.args[1].Eval(v) {
			return 1
		}
		return 0
	case opSel:
		if e.args[0].Eval(v) != 0 {
			return e.args[1].Eval(v)
		}
		return e.args[2].Eval(v)
	case opPow2:
		return NextPow2(e.args[0].Eval(v))
	}
	panic(fmt.Sprintf("codec: expression op %d", e.op))
}

// uses marks the variables e reads.
func (e Expr) uses(seen *[NumVars]bool) {
	if e.op == opVar {
		seen[e.v] = true
	}
	for _, a := range e.args {
		a.uses(seen)
	}
}

// A Field is an integer stored in a block's bytes: Bytes bytes
// little-endian at Off, shifted right by Shift and masked to Bits bits
// (all of them when Bits is 0).
type Field struct {
	Name       string
	Off, Bytes int
	Shift      uint
	Bits       uint
	// Var is the layout variable the field sets, or NumVars for none.
	Var Var
	Doc string
}

// Read returns the field's value in block b (at least Off+Bytes long).
func (f Field) Read(b []byte) int {
	var u uint64
	for i := f.Bytes - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[f.Off+i])
	}
	u >>= f.Shift
	if f.Bits > 0 {
		u &= 1<<f.Bits - 1
	}
	return int(u)
}

// A Section is a run of Count elements of Width bits each, packed
// little-endian, least significant bit first, and padded to a whole byte:
// ceil(Count*Width/8) bytes.
type Section struct {
	Name         string
	Count, Width Expr
	Doc          string
}

// A Quantity is a named value derived from the layout variables that
// readers of a format need beside its offsets (e.g. the width of an
// outlier's position).
type Quantity struct {
	Name  string
	Value Expr
	Doc   string
}

// maxSections bounds a format's sections, so a Layout is a value.
const maxSections = 8

// A Format is the layout of one kind of encoded block: the 16-byte header
// (header.go), then Sections in order. A Format is read-only once made:
// codecs hand out pointers to one shared table, and backends recognise
// the built-in formats by those pointers (BuiltinFormat).
type Format struct {
	ID   FormatID
	Name string
	// Doc describes the format for the generated header's comment.
	Doc string
	// Fields are the format's own fields beside the common header's
	// (HeaderFields), each setting a layout variable or read by kernels.
	Fields []Field
	// Vars are the layout variables the sections depend on, in the order
	// the generated C functions take them.
	Vars     []Var
	Sections []Section
	Derived  []Quantity
}

// A Layout holds the byte offsets of a block's sections: Off(i) is where
// section i starts, Size the whole block's length, header included.
type Layout struct {
	off [maxSections + 1]int
	n   int
}

// Off returns the byte offset of section i in the block.
func (l *Layout) Off(i int) int { return l.off[i] }

// Len returns the byte length of section i.
func (l *Layout) Len(i int) int { return l.off[i+1] - l.off[i] }

// Size returns the length of the whole block.
func (l *Layout) Size() int { return l.off[l.n] }

// Layout returns the offsets of the sections of a block of f with the
// variables v. It allocates nothing.
func (f *Format) Layout(v *Vars) Layout {
	l := Layout{n: len(f.Sections)}
	off := headerLen
	for i, s := range f.Sections {
		l.off[i] = off
		off += (s.Count.Eval(v)*s.Width.Eval(v) + 7) / 8
	}
	l.off[l.n] = off
	return l
}

// ReadFields sets the variables f's fields carry from block b, whose
// header has been checked, returning an error when b is too short for
// them. VarN and VarD come from the header, which must be whole.
func (f *Format) ReadFields(b []byte, v *Vars) error {
	for _, fl := range headerFields[4:6] {
		v[fl.Var] = fl.Read(b)
	}
	for _, fl := range f.Fields {
		if len(b) < fl.Off+fl.Bytes {
			return fmt.Errorf("codec: %s: block of %d bytes lacks field %s (bytes %d..%d)", f.Name, len(b), fl.Name, fl.Off, fl.Off+fl.Bytes-1)
		}
		if fl.Var < NumVars {
			v[fl.Var] = fl.Read(b)
		}
	}
	return nil
}

// Section returns the index of the section named name, or -1.
func (f *Format) Section(name string) int {
	for i, s := range f.Sections {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// HeaderFields returns the fields of the 16-byte header every block starts
// with (see header.go).
func HeaderFields() []Field { return append([]Field(nil), headerFields[:]...) }

var headerFields = [...]Field{
	{Name: "magic", Off: 0, Bytes: 1, Var: NumVars, Doc: "0x4B ('K')"},
	{Name: "version", Off: 1, Bytes: 1, Var: NumVars, Doc: "format version (1)"},
	{Name: "id", Off: 2, Bytes: 1, Var: NumVars, Doc: "format id (FormatID)"},
	{Name: "param", Off: 3, Bytes: 1, Var: NumVars, Doc: "the codec's parameter byte (bits, mode flags)"},
	{Name: "n", Off: 4, Bytes: 4, Var: VarN, Doc: "rows"},
	{Name: "d", Off: 8, Bytes: 2, Var: VarD, Doc: "values per row"},
	{Name: "tag", Off: 10, Bytes: 2, Var: NumVars, Doc: "configuration tag: a hash of settings the payload does not carry"},
	{Name: "crc", Off: 12, Bytes: 4, Var: NumVars, Doc: "CRC-32C of the block with these four bytes left out"},
}

var (
	n, d = V(VarN), V(VarD)
	// kakeyaP and int4P are the coded row widths.
	kakeyaP = Pow2(d)
	int4P   = Sel(V(VarRotated), Pow2(d), d)
	// int4GroupCount is the number of quantization groups of a block.
	int4GroupCount = Sel(V(VarPerChannel),
		Mul(int4P, CeilDiv(n, V(VarGroup))),
		Mul(n, CeilDiv(int4P, V(VarGroup))))
	turboB = Min(V(VarBlock), Pow2(d))
	turboP = Mul(CeilDiv(d, turboB), turboB)
	// kakeyaPosBytes is the width of an outlier's position.
	kakeyaPosBytes = Sel(Gt(Mul(n, kakeyaP), Lit(65536)), Lit(4), Lit(2))
)

// The built-in formats; Formats lists them.
var (
	formatIdentity = &Format{
		ID: FormatIdentity, Name: "f32",
		Doc:      "Raw float32 rows: lossless.",
		Vars:     []Var{VarN, VarD},
		Sections: []Section{{Name: "values", Count: Mul(n, d), Width: Lit(32), Doc: "n*d float32, row-major"}},
	}
	formatBF16 = &Format{
		ID: FormatBF16, Name: "bf16",
		Doc:      "bfloat16 rows, rounded to nearest even.",
		Vars:     []Var{VarN, VarD},
		Sections: []Section{{Name: "values", Count: Mul(n, d), Width: Lit(16), Doc: "n*d bfloat16, row-major"}},
	}
	formatInt8 = &Format{
		ID: FormatInt8, Name: "int8",
		Doc:  "llama.cpp's q8_0 per row: groups of 32 values share an fp16 scale absmax/127; codes are int8 in -127..127. The tag holds the group, 32.",
		Vars: []Var{VarN, VarD},
		Sections: []Section{
			{Name: "scales", Count: Mul(n, CeilDiv(d, Lit(int8Group))), Width: Lit(16), Doc: "fp16 scale of group col/32 of row: element row*ceil(d/32) + col/32"},
			{Name: "codes", Count: Mul(n, d), Width: Lit(8), Doc: "int8 codes, row-major"},
		},
	}
	formatFP8 = &Format{
		ID: FormatFP8, Name: "fp8",
		Doc:  "OCP FP8 E4M3 (e4m3fn: bias 7, max 448, no infinities, NaN 0x7f/0xff never written) times one float32 scale per block, absmax/448.",
		Vars: []Var{VarN, VarD},
		Sections: []Section{
			{Name: "scale", Count: Lit(1), Width: Lit(32), Doc: "the block's float32 scale"},
			{Name: "codes", Count: Mul(n, d), Width: Lit(8), Doc: "E4M3 codes, row-major"},
		},
	}
	formatInt4 = &Format{
		ID: FormatInt4, Name: "int4",
		Doc: "Asymmetric group quantization (int4*, int2*): value = min + code*step per group of `group` values, along each row of p = d " +
			"(NextPow2(d) when rotated) values, or along the tokens of each channel. With byte_params the group's step is " +
			"S*2^(-e/16) (stepScale) for the block's fp16 step S and the group's step code e, and its minimum z*step for its signed zero point z.",
		Fields: []Field{
			{Name: "bits", Off: 3, Bytes: 1, Bits: 4, Var: VarBits, Doc: "code width, 2 or 4"},
			{Name: "per_channel", Off: 3, Bytes: 1, Shift: 4, Bits: 1, Var: VarPerChannel, Doc: "groups run along the tokens of each channel"},
			{Name: "rotated", Off: 3, Bytes: 1, Shift: 5, Bits: 1, Var: VarRotated, Doc: "rows are rotated by a randomized Walsh–Hadamard transform"},
			{Name: "byte_params", Off: 3, Bytes: 1, Shift: 6, Bits: 1, Var: VarByteParams, Doc: "8-bit group parameters (else fp16 min and step)"},
			{Name: "group", Off: 10, Bytes: 2, Var: NumVars, Doc: "the group size, when not rotated (a rotated block's tag mixes seed bits into its high byte)"},
		},
		Vars: []Var{VarN, VarD, VarBits, VarGroup, VarPerChannel, VarRotated, VarByteParams},
		Sections: []Section{
			{Name: "step", Count: V(VarByteParams), Width: Lit(16), Doc: "with byte_params, the block's fp16 step S"},
			{Name: "groups", Count: int4GroupCount, Width: Sel(V(VarByteParams), Lit(16), Lit(32)),
				Doc: "per group: step code e (uint8) and zero point z (int8) with byte_params, else fp16 min and fp16 step; " +
					"group row*ceil(p/group) + col/group per row, col*ceil(n/group) + row/group per channel"},
			{Name: "codes", Count: Mul(n, int4P), Width: V(VarBits), Doc: "codes of the n x p matrix, row-major, one bit stream"},
		},
		Derived: []Quantity{
			{Name: "p", Value: int4P, Doc: "coded values per row"},
			{Name: "groups", Value: int4GroupCount, Doc: "quantization groups of the block"},
		},
	}
	formatKakeya = &Format{
		ID: FormatKakeya, Name: "kakeya",
		Doc: "Mean + rank-r PCA skeleton + a residual rotated by a randomized Walsh–Hadamard transform at p = NextPow2(d), " +
			"quantized per coordinate by a codebook of 2^bits levels and scaled by the row's norm/sqrt(p), plus exact outliers. " +
			"The codebook levels and the rotation's signs are the codec's settings, bound by the tag.",
		Fields: []Field{
			{Name: "bits", Off: 3, Bytes: 1, Var: VarBits, Doc: "residual code width, 1..4"},
			{Name: "rank", Off: 16, Bytes: 1, Var: VarRank, Doc: "skeleton rank r <= min(n, d)"},
			{Name: "coef_bits", Off: 17, Bytes: 1, Var: VarCoefBits, Doc: "coefficient width: 16 (fp16) or 4, 8 (symmetric codes c - 2^(cbits-1))"},
			{Name: "outliers", Off: 18, Bytes: 4, Var: VarOutliers, Doc: "count m of exact outliers"},
		},
		Vars: []Var{VarN, VarD, VarBits, VarRank, VarCoefBits, VarOutliers},
		Sections: []Section{
			{Name: "info", Count: Lit(6), Width: Lit(8), Doc: "rank, coef_bits, outliers (the fields above)"},
			{Name: "mean", Count: d, Width: Lit(16), Doc: "fp16 mean row"},
			{Name: "basis", Count: Mul(V(VarRank), d), Width: Lit(16), Doc: "fp16 basis rows, r x d"},
			{Name: "coef_scales", Count: Mul(V(VarRank), Gt(Lit(16), V(VarCoefBits))), Width: Lit(16), Doc: "fp16 scale per component when coef_bits < 16"},
			{Name: "coefs", Count: Mul(n, V(VarRank)), Width: V(VarCoefBits), Doc: "n x r coefficients: fp16, or codes times their component's scale"},
			{Name: "norms", Count: n, Width: Lit(16), Doc: "fp16 residual norm per row"},
			{Name: "codes", Count: Mul(n, kakeyaP), Width: V(VarBits), Doc: "residual codes of the n x p rotated rows, row-major, one bit stream"},
			{Name: "outliers", Count: V(VarOutliers), Width: Mul(Lit(8), Add(kakeyaPosBytes, Lit(2))),
				Doc: "by increasing position row*p + col: the position (pos_bytes bytes) then the fp16 unit-variance value"},
		},
		Derived: []Quantity{
			{Name: "p", Value: kakeyaP, Doc: "rotated values per row"},
			{Name: "pos_bytes", Value: kakeyaPosBytes, Doc: "bytes of an outlier's position"},
		},
	}
	formatKakeyaPC = &Format{
		ID: FormatKakeyaPC, Name: "kakeya_pc",
		Doc: "Rows in a calibrated principal basis (y = U(x - mu), U and mu the codec's settings, bound by the tag) with bits allocated per component: " +
			"a component is left out, stored as the block's fp16 mean only, or coded with that mean, an fp16 scale and per row a code of its width " +
			"(the Gaussian Lloyd-Max level times the scale, plus the mean). Which components, and their widths, are the codec's settings.",
		Fields: []Field{
			{Name: "layout", Off: 3, Bytes: 1, Var: NumVars, Doc: "code layout (the parameter byte): 1, component planes; 0 (rows of codes, one bit stream) is no longer read"},
			pcMeansField, pcCodedField,
			{Name: "row_bits", Off: 20, Bytes: 2, Var: VarRowBits, Doc: "code bits per row, the sum of the coded components' widths"},
		},
		Vars: []Var{VarN, VarD, VarMeans, VarCoded, VarCodeBytes},
		Sections: []Section{
			{Name: "info", Count: Lit(6), Width: Lit(8), Doc: "means, coded, row_bits (the fields above)"},
			pcMeansSection, pcScalesSection,
			{Name: "codes", Count: V(VarCodeBytes), Width: Lit(8),
				Doc: "component-major: per coded component t, by increasing component, a plane of its n codes of width w_t, LSB first, " +
					"padded to a byte (ceil(n*w_t/8) bytes); code_bytes, their sum, comes from the codec's widths, not the block"},
		},
	}
	formatKakeyaPCEC = &Format{
		ID: FormatKakeyaPCEC, Name: "kakeya_pc_ec",
		Doc: "kakeya_pc with its codes entropy coded: the same means and scales, then a rANS stream of L interleaved lanes (32-bit states, " +
			"16-bit renormalization, frequencies of S bits) of the codes component after component, by increasing component, each component's " +
			"n codes by increasing row, symbol k (in that order) coded by lane k mod L under the static table of its component's width " +
			"(the N(0,1) probabilities of its quantizer's cells, Lloyd-Max or, for kvtc, uniform, rounded to S bits). " +
			"Layout 1: L = 8, S = 14 (the derived quantities below); the stream starts with the 8 lanes' final " +
			"states (uint32 little-endian, lane 0 first), then the 16-bit words little-endian in decode order: after decoding symbol k, " +
			"lane k mod L reads the next word when its state is below 2^16. " +
			"Layout 2: L = 32, S = 12, and lane i < min(M', 32) of the codec's M' stored means ends in state 2^16 + the fp16 bits of stored mean i " +
			"(the others in 2^16): field means and section means hold only the M' - min(M', 32) means after them; the stream starts with a " +
			"uint32 mask, bit i set when lane i's final state takes 4 bytes (it is 2^24 or more), then the states in 3 or 4 bytes little-endian, " +
			"lane 0 first, then the words as layout 1's. Which components, their widths and the quantizer are the codec's settings.",
		Fields: []Field{
			{Name: "layout", Off: 3, Bytes: 1, Var: NumVars, Doc: "stream layout (the parameter byte): 1, 8 interleaved lanes; 2, 32 lanes carrying the first means; 0 (one state, byte renormalization, codes row after row) is no longer read"},
			pcMeansField, pcCodedField,
			{Name: "code_bytes", Off: 20, Bytes: 4, Var: VarCodeBytes, Doc: "length of the rANS stream in bytes"},
		},
		Vars: []Var{VarN, VarD, VarMeans, VarCoded, VarCodeBytes},
		Sections: []Section{
			{Name: "info", Count: Lit(8), Width: Lit(8), Doc: "means, coded, code_bytes (the fields above)"},
			pcMeansSection, pcScalesSection,
			{Name: "codes", Count: V(VarCodeBytes), Width: Lit(8), Doc: "the rANS stream of the C x n codes: the lanes' states (layout 1: 8 of 4 bytes; layout 2: a mask and 32 of 3 or 4 bytes), then 16-bit words"},
		},
		Derived: []Quantity{
			{Name: "lanes", Value: Lit(ransLanes), Doc: "layout 1's interleaved rANS lanes: symbol k is lane k mod lanes's (layout 2: 32)"},
			{Name: "scale_bits", Value: Lit(ransScaleBits), Doc: "layout 1's frequency bits: a table's frequencies sum to 2^scale_bits (layout 2: 12)"},
			{Name: "word_bits", Value: Lit(bits.Len(ransWordL) - 1), Doc: "bits of a renormalization word: a lane reads one when its state falls below 2^word_bits"},
			{Name: "lanes2", Value: Lit(rans2Lanes), Doc: "layout 2's rANS lanes"},
			{Name: "scale_bits2", Value: Lit(rans2ScaleBits), Doc: "layout 2's frequency bits; its packed entry per slot is symbol | freq<<8 | (slot - start)<<20"},
		},
	}
	formatTurbo = &Format{
		ID: FormatTurbo, Name: "turbo",
		Doc: "TurboQuant-style: each row cut into blocks of b = min(block, NextPow2(d)) values (d padded to p, a multiple of b), " +
			"each rotated at unit norm and coded by the Gaussian Lloyd–Max quantizer, with a corrected fp16 norm per block.",
		Fields: []Field{
			{Name: "bits", Off: 3, Bytes: 1, Var: VarBits, Doc: "code width, 2..4"},
			{Name: "block", Off: 10, Bytes: 2, Bits: 11, Var: VarBlock, Doc: "values per norm (the tag's low 11 bits)"},
		},
		Vars: []Var{VarN, VarD, VarBits, VarBlock},
		Sections: []Section{
			{Name: "norms", Count: Mul(n, CeilDiv(d, turboB)), Width: Lit(16), Doc: "fp16 norm of block k of row i: element i*p/b + k"},
			{Name: "codes", Count: Mul(n, turboP), Width: V(VarBits), Doc: "codes of the n x p rows, row-major, one bit stream"},
		},
		Derived: []Quantity{
			{Name: "b", Value: turboB, Doc: "values per norm block"},
			{Name: "p", Value: turboP, Doc: "padded values per row"},
		},
	}
)

// The fields and sections kakeya_pc and kakeya_pc_ec share.
var (
	pcMeansField    = Field{Name: "means", Off: 16, Bytes: 2, Var: VarMeans, Doc: "count M of components with a stored mean"}
	pcCodedField    = Field{Name: "coded", Off: 18, Bytes: 2, Var: VarCoded, Doc: "count C of coded components"}
	pcMeansSection  = Section{Name: "means", Count: V(VarMeans), Width: Lit(16), Doc: "fp16 block mean of each component with one, by increasing component"}
	pcScalesSection = Section{Name: "scales", Count: V(VarCoded), Width: Lit(16), Doc: "fp16 scale of each coded component, by increasing component"}
)

var builtinFormats = []*Format{formatIdentity, formatBF16, formatInt8, formatInt4, formatKakeya, formatTurbo, formatFP8, formatKakeyaPC, formatKakeyaPCEC}

// Formats returns the built-in block formats in id order.
func Formats() []*Format { return append([]*Format(nil), builtinFormats...) }

// BuiltinFormat returns the built-in format of id, and false when id is
// none of theirs.
func BuiltinFormat(id FormatID) (*Format, bool) {
	for _, f := range builtinFormats {
		if f.ID == id {
			return f, true
		}
	}
	return nil, false
}

// Settings are what a reader of a codec's blocks needs beyond their bytes
// and layout: the codec's options and tables. Fields a format does not use
// are zero.
type Settings struct {
	Bits       int  // code width
	Group      int  // values per quantization group (Int4)
	PerChannel bool // Int4 groups run along the tokens
	Rotated    bool // rows are rotated by a randomized Walsh–Hadamard transform
	ByteParams bool // Int4's 8-bit group parameters
	Block      int  // values per norm (Turbo)
	// Levels are the codebook's values in code order (Kakeya, Turbo).
	Levels []float32
	// PC is a calibrated kakeya_pc codec's basis, mean and allocation
	// (KakeyaPC without entropy coding), nil for other codecs.
	PC    *PCSettings
	signs []float32
}

// Signs returns the first n (at most 32768) signs (±1) of the randomized
// Hadamard rotation, or nil for a codec that does not rotate.
func (s Settings) Signs(n int) []float32 {
	if s.signs == nil {
		return nil
	}
	return append([]float32(nil), s.signs[:n]...)
}

// A Described codec names the format of the blocks it writes and the
// settings a reader of them needs: what a backend's kernels dispatch on,
// instead of the codec's Go type.
type Described interface {
	Codec
	// Format returns the block format; a built-in codec returns its
	// BuiltinFormat.
	Format() *Format
	// Settings returns the codec's settings.
	Settings() Settings
}

// A Whitened codec encodes its rows multiplied by a lower-triangular factor
// through an inner codec and decodes them back through the factor's
// inverse: its blocks are the inner codec's (Preconditioned is one).
type Whitened interface {
	Codec
	// Unwrap returns the inner codec.
	Unwrap() Codec
	// InverseFactor returns the inverse factor, d x d row-major and lower
	// triangular; the caller must not modify it.
	InverseFactor() []float32
}

// AppendHeader appends a block header of format id with the codec's
// parameter byte, shape and configuration tag, its checksum zero: Seal
// sets it once the payload follows. For codecs outside this package.
func AppendHeader(dst []byte, id FormatID, param byte, n, d int, tag uint16) []byte {
	return appendHeader(dst, id, param, n, d, tag)
}

// Seal sets the checksum of block, which starts with its header.
func Seal(block []byte) { seal(block) }

// CheckBlock checks that src is a whole, intact block of format id with n
// rows of d values: its header (magic, version, format, shape) and its
// checksum over the whole block, which a truncated or corrupted block
// fails. It is for a store that hands blocks to kernels which read them
// without a decoder's checks.
func CheckBlock(name string, src []byte, id FormatID, n, d int) error {
	if len(src) < headerLen {
		return fmt.Errorf("codec: %s: block of %d bytes is shorter than the %d-byte header", name, len(src), headerLen)
	}
	_, err := checkHeader(name, src, id, src[3], n, d, binary.LittleEndian.Uint16(src[10:]))
	return err
}

// CheckHeader checks src's header against the decoding codec (named name
// in errors), its format id, parameter byte and tag and the shape, and the
// checksum against the whole block, returning the payload.
func CheckHeader(name string, src []byte, id FormatID, param byte, n, d int, tag uint16) ([]byte, error) {
	return checkHeader(name, src, id, param, n, d, tag)
}
