package weights

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/ggufdata"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/tensor"
)

// ggufBuilder writes GGUF files for the tests, field by field, so a test
// can also write what a lying file holds.
type ggufBuilder struct {
	kv      bytes.Buffer
	nkv     int
	tinfo   bytes.Buffer
	nt      int
	data    bytes.Buffer
	align   int
	version uint32
}

func newGGUFBuilder() *ggufBuilder { return &ggufBuilder{align: 32, version: 3} }

func putStr(b *bytes.Buffer, s string) {
	binary.Write(b, binary.LittleEndian, uint64(len(s)))
	b.WriteString(s)
}

// key adds a key/value; v is a Go value of the type's Go type, or a slice
// for an array of that element type.
func (g *ggufBuilder) key(k string, typ GGUFType, v any) *ggufBuilder {
	g.nkv++
	putStr(&g.kv, k)
	binary.Write(&g.kv, binary.LittleEndian, uint32(typ))
	putValue(&g.kv, typ, v)
	return g
}

func putValue(b *bytes.Buffer, typ GGUFType, v any) {
	switch typ {
	case GGUFString:
		putStr(b, v.(string))
	case GGUFArray:
		a := v.(GGUFValue)
		binary.Write(b, binary.LittleEndian, uint32(a.Elem))
		rv := reflect.ValueOf(a.V)
		binary.Write(b, binary.LittleEndian, uint64(rv.Len()))
		for i := range rv.Len() {
			e := rv.Index(i).Interface()
			if ev, ok := e.(GGUFValue); ok {
				putValue(b, GGUFArray, ev)
				continue
			}
			putValue(b, a.Elem, e)
		}
	case GGUFBool:
		if v.(bool) {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	default:
		binary.Write(b, binary.LittleEndian, v)
	}
}

// tensor adds a tensor of type typ with dims (fastest first) and its data,
// placed at the next aligned offset.
func (g *ggufBuilder) tensor(name string, typ GGMLType, dims []int, data []byte) *ggufBuilder {
	for g.data.Len()%g.align != 0 {
		g.data.WriteByte(0)
	}
	g.nt++
	putStr(&g.tinfo, name)
	binary.Write(&g.tinfo, binary.LittleEndian, uint32(len(dims)))
	for _, d := range dims {
		binary.Write(&g.tinfo, binary.LittleEndian, uint64(d))
	}
	binary.Write(&g.tinfo, binary.LittleEndian, uint32(typ))
	binary.Write(&g.tinfo, binary.LittleEndian, uint64(g.data.Len()))
	g.data.Write(data)
	return g
}

func (g *ggufBuilder) bytes() []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint32(ggufMagic))
	binary.Write(&b, binary.LittleEndian, g.version)
	binary.Write(&b, binary.LittleEndian, uint64(g.nt))
	binary.Write(&b, binary.LittleEndian, uint64(g.nkv))
	b.Write(g.kv.Bytes())
	b.Write(g.tinfo.Bytes())
	for b.Len()%g.align != 0 {
		b.WriteByte(0)
	}
	b.Write(g.data.Bytes())
	return b.Bytes()
}

// everyType is a file holding a key of every metadata type, arrays of
// each element type (one nested), and two tensors, with alignment 64.
func everyType() *ggufBuilder {
	g := newGGUFBuilder()
	g.align = 64
	g.key("general.alignment", GGUFUint32, uint32(64)).
		key("u8", GGUFUint8, uint8(200)).key("i8", GGUFInt8, int8(-100)).
		key("u16", GGUFUint16, uint16(60000)).key("i16", GGUFInt16, int16(-30000)).
		key("u32", GGUFUint32, uint32(4e9)).key("i32", GGUFInt32, int32(-2e9)).
		key("f32", GGUFFloat32, float32(1.5)).key("bool", GGUFBool, true).
		key("str", GGUFString, "héllo").key("u64", GGUFUint64, uint64(1<<63)).
		key("i64", GGUFInt64, int64(-1<<62)).key("f64", GGUFFloat64, math.Pi).
		key("a.str", GGUFArray, GGUFValue{Elem: GGUFString, V: []string{"a", "", "ccc"}}).
		key("a.f32", GGUFArray, GGUFValue{Elem: GGUFFloat32, V: []float32{-1, 2.5}}).
		key("a.i32", GGUFArray, GGUFValue{Elem: GGUFInt32, V: []int32{1, -2, 3}}).
		key("a.u8", GGUFArray, GGUFValue{Elem: GGUFUint8, V: []uint8{7}}).
		key("a.i8", GGUFArray, GGUFValue{Elem: GGUFInt8, V: []int8{-7}}).
		key("a.u16", GGUFArray, GGUFValue{Elem: GGUFUint16, V: []uint16{65535}}).
		key("a.i16", GGUFArray, GGUFValue{Elem: GGUFInt16, V: []int16{-5}}).
		key("a.u32", GGUFArray, GGUFValue{Elem: GGUFUint32, V: []uint32{5}}).
		key("a.u64", GGUFArray, GGUFValue{Elem: GGUFUint64, V: []uint64{9}}).
		key("a.i64", GGUFArray, GGUFValue{Elem: GGUFInt64, V: []int64{-9}}).
		key("a.f64", GGUFArray, GGUFValue{Elem: GGUFFloat64, V: []float64{0.25}}).
		key("a.bool", GGUFArray, GGUFValue{Elem: GGUFBool, V: []bool{true, false}}).
		key("a.nested", GGUFArray, GGUFValue{Elem: GGUFArray, V: []GGUFValue{{Elem: GGUFInt32, V: []int32{4}}}})
	f32 := make([]byte, 4*6)
	for i := range 6 {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(i)))
	}
	q8 := make([]byte, 2*34) // two Q8_0 blocks: one row of 64
	g.tensor("w", GGMLF32, []int{3, 2}, f32).tensor("q", GGMLQ8_0, []int{64, 1}, q8)
	return g
}

func TestGGUFEveryType(t *testing.T) {
	g, err := ParseGGUF("every.gguf", everyType().bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"u8": uint8(200), "i8": int8(-100), "u16": uint16(60000), "i16": int16(-30000),
		"u32": uint32(4e9), "i32": int32(-2e9), "f32": float32(1.5), "bool": true, "str": "héllo",
		"u64": uint64(1 << 63), "i64": int64(-1 << 62), "f64": math.Pi,
		"a.str": []string{"a", "", "ccc"}, "a.f32": []float32{-1, 2.5}, "a.i32": []int32{1, -2, 3},
		"a.u8": []uint8{7}, "a.i8": []int8{-7}, "a.u16": []uint16{65535}, "a.i16": []int16{-5},
		"a.u32": []uint32{5}, "a.u64": []uint64{9}, "a.i64": []int64{-9}, "a.f64": []float64{0.25},
		"a.bool": []bool{true, false}, "a.nested": []GGUFValue{{Type: GGUFArray, Elem: GGUFInt32, V: []int32{4}}},
	}
	for k, w := range want {
		if got := g.Metadata[k].V; !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %#v, want %#v", k, got, w)
		}
	}
	if g.Alignment != 64 || g.Version != 3 || len(g.Keys) != len(want)+1 {
		t.Errorf("alignment %d version %d keys %d", g.Alignment, g.Version, len(g.Keys))
	}
	if n, _, err := g.Int("u32"); err != nil || n != 4e9 {
		t.Errorf("Int(u32) = %d, %v", n, err)
	}
	if _, _, err := g.Int("u64"); err == nil || !strings.Contains(err.Error(), `"u64"`) {
		t.Errorf("Int(u64 1<<63): %v, want an error naming the key", err)
	}
	if _, _, err := g.String("f32"); err == nil || !strings.Contains(err.Error(), "every.gguf") {
		t.Errorf("String(f32): %v, want an error naming the file", err)
	}
	w, ok := g.Tensor("w")
	if !ok || !reflect.DeepEqual(w.Shape(), []int{2, 3}) || w.Offset%64 != 0 {
		t.Fatalf("tensor w: %+v", w)
	}
	if d := g.TensorData(w); math.Float32frombits(binary.LittleEndian.Uint32(d[20:])) != 5 {
		t.Errorf("tensor w's last value %v, want 5", d[20:])
	}
	q, _ := g.Tensor("q")
	if q.Size != 68 {
		t.Errorf("Q8_0 tensor of 64 values: %d bytes, want 68", q.Size)
	}
}

// Every prefix of a valid file is an error naming the file, never a panic,
// and so is every single-byte corruption of its header that breaks it.
func TestGGUFTruncated(t *testing.T) {
	b := everyType().bytes()
	for n := range len(b) {
		_, err := ParseGGUF("cut.gguf", b[:n])
		if err == nil {
			t.Fatalf("%d of %d bytes parsed", n, len(b))
		}
		if !strings.Contains(err.Error(), "cut.gguf") {
			t.Fatalf("%d bytes: error %q does not name the file", n, err)
		}
	}
}

func TestGGUFLies(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "not a GGUF file"},
		{"version 1", func(b []byte) []byte { le.PutUint32(b[4:], 1); return b }, "version 1 is not supported"},
		{"big-endian", func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 3); return b }, "big-endian"},
		{"tensor count", func(b []byte) []byte { le.PutUint64(b[8:], 1<<60); return b }, "tensor count 1152921504606846976 cannot fit"},
		{"metadata count", func(b []byte) []byte { le.PutUint64(b[16:], 1<<62); return b }, "metadata count"},
		{"key length", func(b []byte) []byte { le.PutUint64(b[24:], 1<<50); return b }, "key needs 1125899906842624 bytes"},
		{"string array", func(b []byte) []byte {
			g := newGGUFBuilder().key("toks", GGUFArray, GGUFValue{Elem: GGUFString, V: []string{"x"}})
			b = g.bytes()
			i := bytes.Index(b, []byte("toks")) + 4 + 4 + 4
			le.PutUint64(b[i:], 1<<40)
			return b
		}, `metadata key "toks": array length 1099511627776 cannot fit`},
		{"alignment", func([]byte) []byte {
			return newGGUFBuilder().key("general.alignment", GGUFUint32, uint32(3)).bytes()
		}, `"general.alignment": 3`},
		{"tensor past the end", func([]byte) []byte {
			b := newGGUFBuilder().tensor("t", GGMLF32, []int{4}, make([]byte, 16)).bytes()
			return b[:len(b)-1]
		}, `tensor "t": F32 [4] needs bytes [0, 16) of the data section, which has 15`},
		{"huge dims", func([]byte) []byte {
			return newGGUFBuilder().tensor("t", GGMLF32, []int{1 << 40, 1 << 40}, nil).bytes()
		}, `tensor "t": dimension 0 is 1099511627776, larger than the file`},
		{"blocks", func([]byte) []byte {
			return newGGUFBuilder().tensor("t", GGMLQ4_K, []int{100}, make([]byte, 144)).bytes()
		}, `tensor "t": Q4_K: first dimension 100 is not a multiple of the block size 256`},
		{"unknown type", func([]byte) []byte {
			return newGGUFBuilder().tensor("t", 99, []int{4}, make([]byte, 16)).bytes()
		}, `tensor "t": unknown ggml type 99`},
		{"overlap", func([]byte) []byte {
			g := newGGUFBuilder().tensor("a", GGMLF32, []int{16}, make([]byte, 64))
			g.nt++
			putStr(&g.tinfo, "b")
			binary.Write(&g.tinfo, le, uint32(1))
			binary.Write(&g.tinfo, le, uint64(8))
			binary.Write(&g.tinfo, le, uint32(GGMLF32))
			binary.Write(&g.tinfo, le, uint64(32))
			return g.bytes()
		}, `tensors "a" and "b" overlap`},
		{"duplicate key", func([]byte) []byte {
			return newGGUFBuilder().key("k", GGUFUint8, uint8(1)).key("k", GGUFUint8, uint8(2)).bytes()
		}, `metadata key "k" appears twice`},
		{"bool", func([]byte) []byte { b := newGGUFBuilder().key("k", GGUFBool, true).bytes(); b[24+8+1+4] = 2; return b }, `metadata key "k": bool value 2`},
		{"value type", func([]byte) []byte { return newGGUFBuilder().key("k", 77, uint8(0)).bytes() }, `metadata key "k": unknown value type 77`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGGUF("lie.gguf", tc.edit(everyType().bytes()))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "lie.gguf") {
				t.Errorf("error %v, want one naming lie.gguf and saying %q", err, tc.want)
			}
		})
	}
}

// FuzzParseGGUF: no input makes the parser panic or allocate beyond the
// input's size; what parses has every tensor inside the data.
func FuzzParseGGUF(f *testing.F) {
	f.Add(everyType().bytes())
	f.Add(newGGUFBuilder().key("general.architecture", GGUFString, "llama").tensor("t", GGMLQ6_K, []int{256}, make([]byte, 210)).bytes())
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseGGUF("fuzz.gguf", b)
		if err != nil {
			return
		}
		for i := range g.Tensors {
			_ = g.TensorData(&g.Tensors[i])
		}
	})
}

// The configuration a converted GGUF describes is its safetensors
// directory's, and its tensors are found under the Hugging Face names.
func TestGGUFModelConfig(t *testing.T) {
	for _, model := range []string{"stories260K", "ref-qwen2-6m"} {
		t.Run(model, func(t *testing.T) {
			file := ggufdata.Convert(t, model, "native")
			c, s, g, err := OpenGGUFModel(file)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			h, err := LoadConfig(shareddata.File(t, "models", model))
			if err != nil {
				t.Fatal(err)
			}
			c.Architectures, c.TorchDType, c.Generation = h.Architectures, h.TorchDType, h.Generation
			c.RMSNormEps = h.RMSNormEps // stored as float32 in GGUF
			c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID = h.BOSTokenID, h.EOSTokenIDs, h.PadTokenID
			if !reflect.DeepEqual(c, h) {
				t.Errorf("GGUF config\n%+v\nwant\n%+v", c, h)
			}
			if arch, _, _ := g.String("general.architecture"); arch != c.ModelType {
				t.Errorf("architecture %q", arch)
			}
			hs, err := Open(shareddata.File(t, "models", model))
			if err != nil {
				t.Fatal(err)
			}
			defer hs.Close()
			for _, name := range hs.Names() {
				a, err := s.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := hs.Tensor(name)
				av, _ := a.Float32s()
				bv, _ := b.Float32s()
				if !reflect.DeepEqual(a.Shape, b.Shape) || !reflect.DeepEqual(av, bv) {
					t.Errorf("tensor %s: GGUF %v %v differs from safetensors %v %v", name, a.DType, a.Shape, b.DType, b.Shape)
				}
			}
		})
	}
}

// A file that is not a supported model names the key.
func TestGGUFModelErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		g    *ggufBuilder
		want string
	}{
		{"no arch", newGGUFBuilder(), `metadata key "general.architecture": missing`},
		{"gemma", newGGUFBuilder().key("general.architecture", GGUFString, "gemma"), `"gemma" is not supported`},
		{"arch type", newGGUFBuilder().key("general.architecture", GGUFUint8, uint8(1)), `"general.architecture": holds a uint8, want a string`},
		{"no layers", newGGUFBuilder().key("general.architecture", GGUFString, "llama").key("llama.embedding_length", GGUFUint32, uint32(8)),
			`metadata key "llama.feed_forward_length": missing`},
		{"extra layer", tinyLlama().tensor("blk.1.attn_norm.weight", GGMLF32, []int{8}, make([]byte, 32)),
			`tensor "blk.1.attn_norm.weight" is past the 1 layers of metadata key "llama.block_count"`},
		{"missing tensor", tinyLlama(), `tensor "output_norm.weight" is missing`},
		{"shape", tinyLlama().tensor("output_norm.weight", GGMLF32, []int{4}, make([]byte, 16)),
			`tensor "output_norm.weight" has dimensions [4], but the metadata implies [8] (hidden_size=8)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".gguf")
			if err := os.WriteFile(path, tc.g.bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := OpenGGUFModel(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want %q naming the file", err, tc.want)
			}
		})
	}
}

func TestUnpermuteRows(t *testing.T) {
	// Two heads of 4 rows, one byte each: GGUF rows 0..7 hold, per head,
	// Hugging Face rows 0,2,1,3.
	got := unpermuteRows([]byte{0, 2, 1, 3, 4, 6, 5, 7}, 8, 2)
	if !bytes.Equal(got, []byte{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("unpermuted %v", got)
	}
	_ = tensor.Q8_0
}

// tinyLlama is the metadata of a one-layer llama and its embedding table,
// no other tensor.
func tinyLlama() *ggufBuilder {
	return newGGUFBuilder().key("general.architecture", GGUFString, "llama").
		key("llama.embedding_length", GGUFUint32, uint32(8)).key("llama.feed_forward_length", GGUFUint32, uint32(16)).
		key("llama.block_count", GGUFUint32, uint32(1)).key("llama.attention.head_count", GGUFUint32, uint32(2)).
		key("llama.context_length", GGUFUint32, uint32(64)).
		tensor("token_embd.weight", GGMLF32, []int{8, 4}, make([]byte, 128))
}
