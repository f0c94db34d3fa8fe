package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/kakeya-ai/kakeya/tensor"

	"github.com/kakeya-ai/kakeya/internal/boundedfile"
)

// maxHeaderLen bounds the JSON header like the reference implementation
// does, so a corrupt length cannot make us allocate or scan gigabytes.
const maxHeaderLen = 100 << 20

// Tensor is one named tensor of a checkpoint. Data holds its raw
// little-endian bytes; for a tensor from a Store it is a read-only view into
// the mapped file, valid until the Store is closed, and must not be written.
type Tensor struct {
	Name  string
	DType tensor.DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// check reports whether the tensor's dtype, shape and byte count agree.
func (t *Tensor) check() error {
	if t.DType.Size() == 0 && !t.DType.Quantized() {
		return fmt.Errorf("tensor %q: unsupported dtype %v", t.Name, t.DType)
	}
	// Rows of the last dimension, each of a whole number of bytes (of
	// blocks, for a quantized type).
	rows := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
		if d != 0 && rows > math.MaxInt/d {
			return fmt.Errorf("tensor %q: shape %v overflows", t.Name, t.Shape)
		}
		rows *= d
	}
	cols := 1 // a scalar
	if len(t.Shape) > 0 {
		cols = t.Shape[len(t.Shape)-1]
	}
	if cols > 0 {
		rows /= cols
	}
	rb, ok := t.DType.RowBytes(cols)
	if !ok {
		return fmt.Errorf("tensor %q: rows of %d values are not whole blocks of %v", t.Name, cols, t.DType)
	}
	if rb != 0 && rows > math.MaxInt/rb || rows*rb != len(t.Data) {
		return fmt.Errorf("tensor %q: shape %v of %v needs %d bytes, have %d",
			t.Name, t.Shape, t.DType, rows*rb, len(t.Data))
	}
	return nil
}

// Mat returns the tensor as a 2-D matrix in its stored dtype. The view shares
// the tensor's bytes when they are suitably aligned (the usual case) and is
// an aligned copy otherwise; either way it must not be modified.
func (t *Tensor) Mat() (tensor.Mat, error) {
	if len(t.Shape) != 2 {
		return tensor.Mat{}, fmt.Errorf("weights: tensor %q has shape %v, want 2-D", t.Name, t.Shape)
	}
	if err := t.check(); err != nil {
		return tensor.Mat{}, fmt.Errorf("weights: %w", err)
	}
	m := tensor.Mat{DType: t.DType, Rows: t.Shape[0], Cols: t.Shape[1]}
	n := m.Rows * m.Cols
	switch t.DType {
	case tensor.F32:
		m.F32 = f32View(t.Data, n)
	case tensor.F16, tensor.BF16:
		m.U16 = u16View(t.Data, n)
	default:
		m.Q = t.Data
	}
	return m, nil
}

// Float32s returns the elements converted to float32, always as a new slice.
func (t *Tensor) Float32s() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	n := t.NumElements()
	out := make([]float32, n)
	switch t.DType {
	case tensor.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case tensor.F16:
		for i := range out {
			out[i] = tensor.F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case tensor.BF16:
		for i := range out {
			out[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	default:
		if err := tensor.DequantizeRow(out, t.DType, t.Data); err != nil {
			return nil, fmt.Errorf("weights: tensor %q: %w", t.Name, err)
		}
	}
	return out, nil
}

// hostLittleEndian is fixed for the process; the zero-copy views are only
// valid when the host order matches the file order.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func f32View(b []byte, n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	if hostLittleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func u16View(b []byte, n int) []uint16 {
	if n == 0 {
		return []uint16{}
	}
	if hostLittleEndian && uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

// dtypeSizes lists every dtype name the safetensors format defines with a
// whole-byte element, so files holding tensors we cannot compute with (an
// I64 position buffer, say) still validate and open; only asking for such a
// tensor fails.
var dtypeSizes = map[string]int{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U64": 8, "U32": 4, "U16": 2, "U8": 1,
	"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8,
}

func supportedDType(name string) tensor.DType {
	switch name {
	case "F32":
		return tensor.F32
	case "F16":
		return tensor.F16
	case "BF16":
		return tensor.BF16
	}
	return 0
}

// tensorInfo is one validated header entry; begin and end are offsets into
// the file (not into the data section).
type tensorInfo struct {
	dtypeName  string
	dtype      tensor.DType // 0 when the format knows the dtype but we do not compute in it
	shape      []int
	begin, end int64
}

type header struct {
	dataStart int64
	tensors   map[string]tensorInfo
	metadata  map[string]string
}

type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader validates the header at the start of b, the first bytes (or
// all) of a safetensors file of fileSize bytes. It never trusts a length or
// offset before checking it against fileSize, so it is safe on any input.
func parseHeader(path string, b []byte, fileSize int64) (*header, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("weights: %s: "+format, append([]any{path}, args...)...)
	}
	if fileSize < 8 || len(b) < 8 {
		return nil, fail("file too short for a safetensors header (%d bytes)", fileSize)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeaderLen {
		return nil, fail("header length %d exceeds the %d byte limit", n, maxHeaderLen)
	}
	if int64(n) > fileSize-8 {
		return nil, fail("header length %d exceeds the file size %d", n, fileSize)
	}
	if uint64(len(b)-8) < n {
		return nil, fail("truncated header: need %d bytes, have %d", n, len(b)-8)
	}
	js := b[8 : 8+n]
	if len(bytes.TrimSpace(js)) == 0 || bytes.TrimSpace(js)[0] != '{' {
		return nil, fail("header is not a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fail("invalid header JSON: %v", err)
	}
	h := &header{dataStart: 8 + int64(n), tensors: make(map[string]tensorInfo, len(raw))}
	dataLen := fileSize - h.dataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.metadata); err != nil {
				return nil, fail("__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var e rawEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fail("tensor %q: invalid entry: %v", name, err)
		}
		if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
			return nil, fail("tensor %q: entry needs dtype, shape and data_offsets", name)
		}
		size, ok := dtypeSizes[*e.DType]
		if !ok {
			return nil, fail("unknown dtype %q for tensor %q", *e.DType, name)
		}
		if len(*e.DataOffsets) != 2 {
			return nil, fail("tensor %q: data_offsets %v must hold two numbers", name, *e.DataOffsets)
		}
		begin, end := (*e.DataOffsets)[0], (*e.DataOffsets)[1]
		if begin < 0 || end < begin || end > dataLen {
			return nil, fail("tensor %q: data_offsets [%d, %d] out of range for %d data bytes", name, begin, end, dataLen)
		}
		shape := make([]int, len(*e.Shape))
		elems := int64(1)
		for i, d := range *e.Shape {
			if d < 0 {
				return nil, fail("tensor %q: negative dimension in shape %v", name, *e.Shape)
			}
			// Any real tensor has fewer elements than the file has bytes,
			// which also keeps the product from overflowing.
			if d != 0 && elems > dataLen/d {
				return nil, fail("tensor %q: shape %v is larger than the file", name, *e.Shape)
			}
			elems *= d
			shape[i] = int(d)
		}
		if elems*int64(size) != end-begin {
			return nil, fail("tensor %q: shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d",
				name, *e.Shape, *e.DType, elems*int64(size), begin, end, end-begin)
		}
		h.tensors[name] = tensorInfo{
			dtypeName: *e.DType,
			dtype:     supportedDType(*e.DType),
			shape:     shape,
			begin:     h.dataStart + begin,
			end:       h.dataStart + end,
		}
	}
	if err := checkOverlap(h.tensors); err != nil {
		return nil, fail("%v", err)
	}
	return h, nil
}

func checkOverlap(ts map[string]tensorInfo) error {
	names := make([]string, 0, len(ts))
	for name, t := range ts {
		if t.end > t.begin { // empty tensors occupy no bytes
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := ts[names[i]], ts[names[j]]
		if a.begin != b.begin {
			return a.begin < b.begin
		}
		return names[i] < names[j]
	})
	for i := 1; i < len(names); i++ {
		prev, cur := ts[names[i-1]], ts[names[i]]
		if cur.begin < prev.end {
			return fmt.Errorf("tensors %q and %q overlap", names[i-1], names[i])
		}
	}
	return nil
}

// mappedFile is one open safetensors file.
type mappedFile struct {
	path string
	data []byte // the whole file
	hdr  *header
}

type entry struct {
	file *mappedFile
	info tensorInfo
	// heads, when set, is a GGUF q or k matrix's head count: each read
	// returns its rows put back in Hugging Face order (unpermuteRows), in
	// memory of the reader's own, which the store does not hold (so that
	// a backend that lays the matrix out anew can let go of the only
	// other copy).
	heads int
}

// Store gives access to the tensors of one checkpoint, which may span several
// files. It is safe for concurrent reads; Close invalidates every Tensor it
// handed out.
type Store struct {
	where   string // the file, or the directory of a sharded checkpoint, for errors
	files   []*mappedFile
	tensors map[string]entry
	closed  bool
}

// OpenFile opens a single safetensors file.
func OpenFile(path string) (*Store, error) {
	f, err := openMapped(path)
	if err != nil {
		return nil, err
	}
	s := &Store{where: path, files: []*mappedFile{f}, tensors: make(map[string]entry, len(f.hdr.tensors))}
	for name, info := range f.hdr.tensors {
		s.tensors[name] = entry{file: f, info: info}
	}
	return s, nil
}

func openMapped(path string) (*mappedFile, error) {
	data, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	h, err := parseHeader(path, data, int64(len(data)))
	if err != nil {
		unmapFile(data)
		return nil, err
	}
	return &mappedFile{path: path, data: data, hdr: h}, nil
}

// indexFile is the layout of model.safetensors.index.json.
type indexFile struct {
	WeightMap map[string]string `json:"weight_map"`
}

// Open opens the checkpoint in a model directory: model.safetensors, else
// the shards listed by model.safetensors.index.json, else the only
// *.safetensors file there.
func Open(dir string) (*Store, error) {
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		return OpenFile(single)
	}
	index := filepath.Join(dir, "model.safetensors.index.json")
	if _, err := os.Stat(index); err == nil {
		return openIndex(dir, index)
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", dir, err)
	}
	switch len(matches) {
	case 0:
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("weights: %w", err)
		}
		return nil, fmt.Errorf("weights: %s: no model.safetensors, model.safetensors.index.json or other *.safetensors file", dir)
	case 1:
		return OpenFile(matches[0])
	}
	for i := range matches {
		matches[i] = filepath.Base(matches[i])
	}
	return nil, fmt.Errorf("weights: %s: several safetensors files (%s) and no model.safetensors.index.json to say how they fit together",
		dir, strings.Join(matches, ", "))
}

func openIndex(dir, index string) (*Store, error) {
	b, err := boundedfile.Read(index, MaxIndexBytes)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var idx indexFile
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("weights: %s: invalid JSON: %v", index, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: weight_map is missing or empty", index)
	}
	s := &Store{where: dir, tensors: make(map[string]entry, len(idx.WeightMap))}
	shards := make(map[string]*mappedFile)
	names := make([]string, 0, len(idx.WeightMap))
	for name := range idx.WeightMap {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic errors and open order
	for _, name := range names {
		shard := idx.WeightMap[name]
		if !filepath.IsLocal(shard) || strings.Contains(shard, `\`) {
			s.Close()
			return nil, fmt.Errorf("weights: %s: tensor %q: shard name %q leaves the model directory", index, name, shard)
		}
		f := shards[shard]
		if f == nil {
			f, err = openMapped(filepath.Join(dir, shard))
			if err != nil {
				s.Close()
				return nil, err
			}
			shards[shard] = f
			s.files = append(s.files, f)
		}
		info, ok := f.hdr.tensors[name]
		if !ok {
			s.Close()
			return nil, fmt.Errorf("weights: %s: tensor %q listed in %s is missing from the shard", f.path, name, filepath.Base(index))
		}
		s.tensors[name] = entry{file: f, info: info}
	}
	return s, nil
}

// Tensor returns the named tensor, its Data a view into the mapped file.
func (s *Store) Tensor(name string) (*Tensor, error) {
	if s.closed {
		return nil, fmt.Errorf("weights: %s: tensor %q requested from a closed store", s.where, name)
	}
	e, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("weights: %s: tensor %q not found", s.where, name)
	}
	if e.info.dtype == 0 {
		return nil, fmt.Errorf("weights: %s: unsupported dtype %s for tensor %q (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)",
			e.file.path, e.info.dtypeName, name)
	}
	data := e.file.data[e.info.begin:e.info.end:e.info.end]
	if e.heads > 0 {
		data = unpermuteRows(data, e.info.shape[0], e.heads)
	}
	return &Tensor{
		Name:  name,
		DType: e.info.dtype,
		Shape: slices.Clone(e.info.shape),
		Data:  data,
	}, nil
}

// Evict tells the operating system that the named tensor's mapped pages
// are not needed now, when a backend has copied it into a layout of its
// own: they leave the process's resident memory and, if the tensor is read
// again, come back from the page cache. The tensor's data stays valid.
// Where the store read its files instead of mapping them it does nothing,
// as it does for an unknown name or a closed store.
func (s *Store) Evict(name string) {
	if e, ok := s.tensors[name]; ok && !s.closed {
		evict(e.file.data[e.info.begin:e.info.end])
	}
}

// Has reports whether the store holds a tensor of that name.
func (s *Store) Has(name string) bool {
	_, ok := s.tensors[name]
	return ok
}

// Names returns the tensor names, sorted.
func (s *Store) Names() []string {
	names := make([]string, 0, len(s.tensors))
	for name := range s.tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Metadata returns the union of the files' __metadata__ maps (a new map).
func (s *Store) Metadata() map[string]string {
	m := make(map[string]string)
	for _, f := range s.files {
		if f.hdr == nil { // a GGUF file: its metadata is the GGUF's
			continue
		}
		for k, v := range f.hdr.metadata {
			m[k] = v
		}
	}
	return m
}

// Close unmaps the files. Tensors obtained from the store must not be used
// afterwards.
func (s *Store) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, f := range s.files {
		if err := unmapFile(f.data); err != nil {
			errs = append(errs, fmt.Errorf("weights: %s: %w", f.path, err))
		}
		f.data = nil
	}
	return errors.Join(errs...)
}
