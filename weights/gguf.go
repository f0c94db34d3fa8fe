package weights

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/kakeya-ai/kakeya/tensor"
)

// This file reads the GGUF container (llama.cpp's model file format,
// versions 2 and 3, little-endian): a header of typed key/value metadata
// and tensor descriptions, then the tensors' data, aligned. The file is
// memory mapped and tensors are read in place. Every count, length and
// offset is checked against the bytes that are left before it sizes
// anything, so a truncated or lying file is an error naming the file and
// the key or tensor, never a panic or an allocation larger than the file.

const ggufMagic = 0x46554747 // "GGUF" little-endian

// ggufMaxDims is the most dimensions a ggml tensor has.
const ggufMaxDims = 4

// ggufMaxDepth bounds arrays nested in arrays.
const ggufMaxDepth = 4

// A GGUFType is the type tag of a GGUF metadata value.
type GGUFType uint32

// The metadata value types of the GGUF specification.
const (
	GGUFUint8 GGUFType = iota
	GGUFInt8
	GGUFUint16
	GGUFInt16
	GGUFUint32
	GGUFInt32
	GGUFFloat32
	GGUFBool
	GGUFString
	GGUFArray
	GGUFUint64
	GGUFInt64
	GGUFFloat64
)

var ggufTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t GGUFType) String() string {
	if int(t) < len(ggufTypeNames) {
		return ggufTypeNames[t]
	}
	return fmt.Sprintf("GGUFType(%d)", uint32(t))
}

// size is the width of a scalar of the type, 0 for strings and arrays.
func (t GGUFType) size() int {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFUint64, GGUFInt64, GGUFFloat64:
		return 8
	}
	return 0
}

// A GGUFValue is one metadata value. V holds, by Type: uint8, int8,
// uint16, int16, uint32, int32, float32, bool, string, uint64, int64 or
// float64; for an array, a slice of the element type ([]string,
// []float32, ...), or []GGUFValue for arrays of arrays.
type GGUFValue struct {
	Type GGUFType
	Elem GGUFType // an array's element type
	V    any
}

// A GGUFTensor describes one tensor of a GGUF file: its ggml type and its
// dimensions fastest first (ggml's ne), as the file stores them.
type GGUFTensor struct {
	Name   string
	Type   GGMLType
	Dims   []int
	Offset int64 // from the start of the data section
	Size   int64 // bytes
}

// Shape returns the dimensions slowest first, as a Hugging Face tensor's
// shape: [rows, cols] for a matrix.
func (t *GGUFTensor) Shape() []int {
	s := slices.Clone(t.Dims)
	slices.Reverse(s)
	return s
}

// GGUF is an open GGUF file: its metadata and tensor descriptions, and
// the mapped bytes the tensors are read from.
type GGUF struct {
	Path      string
	Version   uint32
	Alignment int
	// Metadata maps each key to its value; Keys lists them in file order.
	Metadata map[string]GGUFValue
	Keys     []string
	Tensors  []GGUFTensor
	byName   map[string]int
	dataOff  int64
	data     []byte // the whole file
}

// OpenGGUF maps and parses a GGUF file. Close unmaps it.
func OpenGGUF(path string) (*GGUF, error) {
	data, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	g, err := ParseGGUF(path, data)
	if err != nil {
		unmapFile(data)
		return nil, err
	}
	return g, nil
}

// Close unmaps the file; tensor data read from it must not be used after.
func (g *GGUF) Close() error {
	d := g.data
	g.data = nil
	if err := unmapFile(d); err != nil {
		return fmt.Errorf("weights: %s: %w", g.Path, err)
	}
	return nil
}

// ggufReader is a bounds-checked cursor over the header.
type ggufReader struct {
	b   []byte
	off int
	err error
	at  func() string // what is being read, for errors
}

func (r *ggufReader) need(n uint64, what string) bool {
	if r.err != nil {
		return false
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("%s: %s needs %d bytes at offset %d, the file has %d left (truncated?)", r.at(), what, n, r.off, len(r.b)-r.off)
		return false
	}
	return true
}

func (r *ggufReader) bytes(n uint64, what string) []byte {
	if !r.need(n, what) {
		return nil
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b
}

func (r *ggufReader) u32(what string) uint32 {
	b := r.bytes(4, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *ggufReader) u64(what string) uint64 {
	b := r.bytes(8, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *ggufReader) str(what string) string {
	n := r.u64(what + " length")
	return string(r.bytes(n, what))
}

// count reads an element count and checks that count elements of at least
// min bytes each fit in what is left, so nothing is sized by a lie.
func (r *ggufReader) count(what string, min int) int {
	n := r.u64(what)
	if r.err != nil {
		return 0
	}
	left := uint64(len(r.b) - r.off)
	if min > 0 && n > left/uint64(min) {
		r.err = fmt.Errorf("%s: %s %d cannot fit in the %d bytes left", r.at(), what, n, left)
		return 0
	}
	return int(n)
}

// ParseGGUF parses the GGUF file held in data (the whole file); path only
// names it in errors. The GGUF keeps data: tensors are views into it.
func ParseGGUF(path string, data []byte) (*GGUF, error) {
	g := &GGUF{Path: path, data: data, Metadata: map[string]GGUFValue{}, Alignment: 32}
	where := "header"
	r := &ggufReader{b: data, at: func() string { return where }}
	fail := func(err error) (*GGUF, error) { return nil, fmt.Errorf("weights: %s: %w", path, err) }
	if len(data) < 4 || binary.LittleEndian.Uint32(data) != ggufMagic {
		return fail(fmt.Errorf("not a GGUF file (no GGUF magic at offset 0)"))
	}
	r.off = 4
	g.Version = r.u32("version")
	if r.err == nil && g.Version != 2 && g.Version != 3 {
		if g.Version > 0xffff && bits32Swap(g.Version) <= 3 {
			return fail(fmt.Errorf("big-endian GGUF (version %d byte-swapped) is not supported", bits32Swap(g.Version)))
		}
		return fail(fmt.Errorf("GGUF version %d is not supported (want 2 or 3)", g.Version))
	}
	// A tensor description takes at least 8+4+4+8 bytes, a key/value at
	// least 8+4+1.
	nTensors := r.count("tensor count", 24)
	nKV := r.count("metadata count", 13)
	for i := 0; i < nKV && r.err == nil; i++ {
		where = fmt.Sprintf("metadata entry %d", i)
		key := r.str("key")
		if r.err != nil {
			break
		}
		where = fmt.Sprintf("metadata key %q", key)
		if _, dup := g.Metadata[key]; dup {
			return fail(fmt.Errorf("%s appears twice", where))
		}
		typ := GGUFType(r.u32("value type"))
		v := r.value(typ, 0)
		if r.err != nil {
			break
		}
		g.Metadata[key] = v
		g.Keys = append(g.Keys, key)
	}
	if r.err != nil {
		return fail(r.err)
	}
	if v, ok := g.Metadata["general.alignment"]; ok {
		a, ok := v.V.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return fail(fmt.Errorf("metadata key \"general.alignment\": %v (%s), want a power of two uint32", v.V, v.Type))
		}
		g.Alignment = int(a)
	}
	g.byName = make(map[string]int, nTensors)
	g.Tensors = make([]GGUFTensor, 0, nTensors)
	for i := 0; i < nTensors && r.err == nil; i++ {
		where = fmt.Sprintf("tensor %d", i)
		t := GGUFTensor{Name: r.str("name")}
		if r.err != nil {
			break
		}
		where = fmt.Sprintf("tensor %q", t.Name)
		if _, dup := g.byName[t.Name]; dup {
			return fail(fmt.Errorf("%s appears twice", where))
		}
		nd := r.u32("dimension count")
		if r.err == nil && (nd == 0 || nd > ggufMaxDims) {
			return fail(fmt.Errorf("%s: %d dimensions, want 1 to %d", where, nd, ggufMaxDims))
		}
		for j := uint32(0); j < nd && r.err == nil; j++ {
			d := r.u64("dimension")
			if d > uint64(len(data)) && d != 0 {
				return fail(fmt.Errorf("%s: dimension %d is %d, larger than the file", where, j, d))
			}
			t.Dims = append(t.Dims, int(d))
		}
		t.Type = GGMLType(r.u32("type"))
		off := r.u64("offset")
		if r.err != nil {
			break
		}
		if off > uint64(len(data)) {
			return fail(fmt.Errorf("%s: offset %d is past the end of the file", where, off))
		}
		t.Offset = int64(off)
		g.byName[t.Name] = len(g.Tensors)
		g.Tensors = append(g.Tensors, t)
	}
	if r.err != nil {
		return fail(r.err)
	}
	g.dataOff = (int64(r.off) + int64(g.Alignment) - 1) / int64(g.Alignment) * int64(g.Alignment)
	if err := g.checkTensors(); err != nil {
		return fail(err)
	}
	return g, nil
}

func bits32Swap(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}

// checkTensors sizes each tensor from its type and dimensions and checks
// it lies, aligned, inside the data section without overlapping another.
func (g *GGUF) checkTensors() error {
	dataLen := int64(len(g.data)) - g.dataOff
	if len(g.Tensors) > 0 && dataLen < 0 {
		return fmt.Errorf("the data section starts at %d, past the end of the file (%d bytes)", g.dataOff, len(g.data))
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		where := fmt.Sprintf("tensor %q", t.Name)
		info, ok := ggmlTypes[t.Type]
		if !ok {
			return fmt.Errorf("%s: unknown ggml type %d", where, uint32(t.Type))
		}
		if t.Dims[0]%info.block != 0 {
			return fmt.Errorf("%s: %s: first dimension %d is not a multiple of the block size %d", where, info.name, t.Dims[0], info.block)
		}
		n := int64(1)
		for _, d := range t.Dims {
			if d != 0 && n > dataLen/int64(d) {
				return fmt.Errorf("%s: dimensions %v are larger than the file's data section (%d bytes)", where, t.Dims, dataLen)
			}
			n *= int64(d)
		}
		t.Size = n / int64(info.block) * int64(info.bytes)
		if t.Offset%int64(g.Alignment) != 0 {
			return fmt.Errorf("%s: offset %d is not a multiple of the alignment %d", where, t.Offset, g.Alignment)
		}
		if t.Size > dataLen || t.Offset > dataLen-t.Size {
			return fmt.Errorf("%s: %s %v needs bytes [%d, %d) of the data section, which has %d (truncated?)",
				where, info.name, t.Dims, t.Offset, t.Offset+t.Size, dataLen)
		}
	}
	idx := make([]int, 0, len(g.Tensors))
	for i := range g.Tensors {
		if g.Tensors[i].Size > 0 {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return g.Tensors[idx[a]].Offset < g.Tensors[idx[b]].Offset })
	for k := 1; k < len(idx); k++ {
		p, c := &g.Tensors[idx[k-1]], &g.Tensors[idx[k]]
		if c.Offset < p.Offset+p.Size {
			return fmt.Errorf("tensors %q and %q overlap", p.Name, c.Name)
		}
	}
	return nil
}

// value reads one value of type typ.
func (r *ggufReader) value(typ GGUFType, depth int) GGUFValue {
	v := GGUFValue{Type: typ}
	switch typ {
	case GGUFString:
		v.V = r.str("string value")
	case GGUFArray:
		if depth >= ggufMaxDepth {
			r.err = fmt.Errorf("%s: arrays nested deeper than %d", r.at(), ggufMaxDepth)
			return v
		}
		v.Elem = GGUFType(r.u32("array element type"))
		if r.err != nil {
			return v
		}
		v.V = r.array(v.Elem, depth)
	default:
		sz := typ.size()
		if sz == 0 {
			if r.err == nil {
				r.err = fmt.Errorf("%s: unknown value type %d", r.at(), uint32(typ))
			}
			return v
		}
		b := r.bytes(uint64(sz), typ.String()+" value")
		if b == nil {
			return v
		}
		v.V = scalar(typ, b)
		if typ == GGUFBool && b[0] > 1 {
			r.err = fmt.Errorf("%s: bool value %d, want 0 or 1", r.at(), b[0])
		}
	}
	return v
}

func scalar(typ GGUFType, b []byte) any {
	le := binary.LittleEndian
	switch typ {
	case GGUFUint8:
		return b[0]
	case GGUFInt8:
		return int8(b[0])
	case GGUFUint16:
		return le.Uint16(b)
	case GGUFInt16:
		return int16(le.Uint16(b))
	case GGUFUint32:
		return le.Uint32(b)
	case GGUFInt32:
		return int32(le.Uint32(b))
	case GGUFFloat32:
		return math.Float32frombits(le.Uint32(b))
	case GGUFBool:
		return b[0] != 0
	case GGUFUint64:
		return le.Uint64(b)
	case GGUFInt64:
		return int64(le.Uint64(b))
	case GGUFFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	return nil
}

// array reads an array's count and elements of type elem.
func (r *ggufReader) array(elem GGUFType, depth int) any {
	switch elem {
	case GGUFString:
		n := r.count("array length", 8)
		s := make([]string, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			s = append(s, r.str("string element"))
		}
		return s
	case GGUFArray:
		n := r.count("array length", 12)
		s := make([]GGUFValue, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			s = append(s, r.value(GGUFArray, depth+1))
		}
		return s
	}
	sz := elem.size()
	if sz == 0 {
		r.err = fmt.Errorf("%s: unknown array element type %d", r.at(), uint32(elem))
		return nil
	}
	n := r.count("array length", sz)
	b := r.bytes(uint64(n)*uint64(sz), "array elements")
	if b == nil {
		return nil
	}
	switch elem {
	case GGUFUint8:
		return slices.Clone(b)
	case GGUFInt8:
		return fill(n, sz, b, func(b []byte) int8 { return int8(b[0]) })
	case GGUFBool:
		for i, c := range b {
			if c > 1 {
				r.err = fmt.Errorf("%s: bool element %d is %d, want 0 or 1", r.at(), i, c)
				return nil
			}
		}
		return fill(n, sz, b, func(b []byte) bool { return b[0] != 0 })
	case GGUFUint16:
		return fill(n, sz, b, binary.LittleEndian.Uint16)
	case GGUFInt16:
		return fill(n, sz, b, func(b []byte) int16 { return int16(binary.LittleEndian.Uint16(b)) })
	case GGUFUint32:
		return fill(n, sz, b, binary.LittleEndian.Uint32)
	case GGUFInt32:
		return fill(n, sz, b, func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) })
	case GGUFFloat32:
		return fill(n, sz, b, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
	case GGUFUint64:
		return fill(n, sz, b, binary.LittleEndian.Uint64)
	case GGUFInt64:
		return fill(n, sz, b, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) })
	}
	return fill(n, sz, b, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) })
}

func fill[T any](n, sz int, b []byte, get func([]byte) T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = get(b[i*sz:])
	}
	return s
}

// Tensor returns the named tensor's description, false when absent.
func (g *GGUF) Tensor(name string) (*GGUFTensor, bool) {
	i, ok := g.byName[name]
	if !ok {
		return nil, false
	}
	return &g.Tensors[i], true
}

// TensorData returns the bytes of t, a view into the mapped file.
func (g *GGUF) TensorData(t *GGUFTensor) []byte {
	lo := g.dataOff + t.Offset
	return g.data[lo : lo+t.Size : lo+t.Size]
}

// keyErr names the file and key of a metadata problem.
func (g *GGUF) keyErr(key, format string, args ...any) error {
	return fmt.Errorf("weights: %s: metadata key %q: "+format, append([]any{g.Path, key}, args...)...)
}

// Has reports whether the metadata holds key.
func (g *GGUF) Has(key string) bool {
	_, ok := g.Metadata[key]
	return ok
}

// String returns a string value; ok is false when the key is absent, and
// err is set when it holds another type.
func (g *GGUF) String(key string) (s string, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return "", false, nil
	}
	s, isStr := v.V.(string)
	if !isStr {
		return "", true, g.keyErr(key, "holds a %s, want a string", v.Type)
	}
	return s, true, nil
}

// Int returns an integer value of any integer type (or a bool as 0/1).
func (g *GGUF) Int(key string) (n int64, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return 0, false, nil
	}
	switch x := v.V.(type) {
	case uint8:
		return int64(x), true, nil
	case int8:
		return int64(x), true, nil
	case uint16:
		return int64(x), true, nil
	case int16:
		return int64(x), true, nil
	case uint32:
		return int64(x), true, nil
	case int32:
		return int64(x), true, nil
	case int64:
		return x, true, nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, true, g.keyErr(key, "%d does not fit an int64", x)
		}
		return int64(x), true, nil
	case bool:
		if x {
			return 1, true, nil
		}
		return 0, true, nil
	}
	return 0, true, g.keyErr(key, "holds a %s, want an integer", v.Type)
}

// Float returns a float or integer value as float64.
func (g *GGUF) Float(key string) (f float64, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return 0, false, nil
	}
	switch x := v.V.(type) {
	case float32:
		return float64(x), true, nil
	case float64:
		return x, true, nil
	}
	n, ok, err := g.Int(key)
	if err != nil {
		return 0, true, g.keyErr(key, "holds a %s, want a number", v.Type)
	}
	return float64(n), ok, nil
}

// Bool returns a bool value.
func (g *GGUF) Bool(key string) (b, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return false, false, nil
	}
	b, isBool := v.V.(bool)
	if !isBool {
		return false, true, g.keyErr(key, "holds a %s, want a bool", v.Type)
	}
	return b, true, nil
}

// Strings returns an array of strings.
func (g *GGUF) Strings(key string) (s []string, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return nil, false, nil
	}
	s, isStrs := v.V.([]string)
	if !isStrs {
		return nil, true, g.keyErr(key, "holds a %s of %s, want an array of strings", v.Type, v.Elem)
	}
	return s, true, nil
}

// Float32s returns an array of float32 values.
func (g *GGUF) Float32s(key string) (f []float32, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return nil, false, nil
	}
	f, isF := v.V.([]float32)
	if !isF {
		return nil, true, g.keyErr(key, "holds a %s of %s, want an array of float32", v.Type, v.Elem)
	}
	return f, true, nil
}

// Int32s returns an array of int32 values (uint32 and int32 arrays).
func (g *GGUF) Int32s(key string) (s []int32, ok bool, err error) {
	v, ok := g.Metadata[key]
	if !ok {
		return nil, false, nil
	}
	switch x := v.V.(type) {
	case []int32:
		return x, true, nil
	case []uint32:
		out := make([]int32, len(x))
		for i, u := range x {
			if u > math.MaxInt32 {
				return nil, true, g.keyErr(key, "element %d is %d, too large", i, u)
			}
			out[i] = int32(u)
		}
		return out, true, nil
	}
	return nil, true, g.keyErr(key, "holds a %s of %s, want an array of int32", v.Type, v.Elem)
}

// A GGMLType is a ggml tensor element type as GGUF stores it.
type GGMLType uint32

// The ggml types whose values Kakeya reads; ggmlTypes knows the layout of
// more, so that files holding others still open.
const (
	GGMLF32  GGMLType = 0
	GGMLF16  GGMLType = 1
	GGMLQ4_0 GGMLType = 2
	GGMLQ5_0 GGMLType = 6
	GGMLQ8_0 GGMLType = 8
	GGMLQ4_K GGMLType = 12
	GGMLQ5_K GGMLType = 13
	GGMLQ6_K GGMLType = 14
	GGMLBF16 GGMLType = 30
)

// ggmlInfo is a ggml type's name, values per block and bytes per block.
type ggmlInfo struct {
	name         string
	block, bytes int
	dtype        tensor.DType // 0 where Kakeya does not compute in it
}

// ggmlTypes are the ggml types with their block geometry (ggml.c's
// type_traits), so any file's tensors can be sized and bounds-checked.
var ggmlTypes = map[GGMLType]ggmlInfo{
	0: {"F32", 1, 4, tensor.F32}, 1: {"F16", 1, 2, tensor.F16}, 30: {"BF16", 1, 2, tensor.BF16},
	2: {"Q4_0", 32, 18, tensor.Q4_0}, 3: {"Q4_1", 32, 20, 0}, 6: {"Q5_0", 32, 22, tensor.Q5_0}, 7: {"Q5_1", 32, 24, 0},
	8: {"Q8_0", 32, 34, tensor.Q8_0}, 9: {"Q8_1", 32, 36, 0},
	10: {"Q2_K", 256, 84, 0}, 11: {"Q3_K", 256, 110, 0}, 12: {"Q4_K", 256, 144, tensor.Q4_K},
	13: {"Q5_K", 256, 176, tensor.Q5_K}, 14: {"Q6_K", 256, 210, tensor.Q6_K}, 15: {"Q8_K", 256, 292, 0},
	16: {"IQ2_XXS", 256, 66, 0}, 17: {"IQ2_XS", 256, 74, 0}, 18: {"IQ3_XXS", 256, 98, 0}, 19: {"IQ1_S", 256, 50, 0},
	20: {"IQ4_NL", 32, 18, 0}, 21: {"IQ3_S", 256, 110, 0}, 22: {"IQ2_S", 256, 82, 0}, 23: {"IQ4_XS", 256, 136, 0},
	24: {"I8", 1, 1, 0}, 25: {"I16", 1, 2, 0}, 26: {"I32", 1, 4, 0}, 27: {"I64", 1, 8, 0}, 28: {"F64", 1, 8, 0},
	29: {"IQ1_M", 256, 56, 0}, 34: {"TQ1_0", 256, 54, 0}, 35: {"TQ2_0", 256, 66, 0}, 39: {"MXFP4", 32, 17, 0},
}

func (t GGMLType) String() string {
	if info, ok := ggmlTypes[t]; ok {
		return info.name
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}
