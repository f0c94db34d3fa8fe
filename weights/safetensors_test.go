package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/tensor"
)

func randVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// rounded returns what a tensor of dtype dt stores for vals.
func rounded(dt tensor.DType, vals []float32) []float32 {
	out := make([]float32, len(vals))
	for i, v := range vals {
		switch dt {
		case tensor.F32:
			out[i] = v
		case tensor.F16:
			out[i] = tensor.F16ToF32(tensor.F32ToF16(v))
		case tensor.BF16:
			out[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
		}
	}
	return out
}

func TestWriteFileGoldenBytes(t *testing.T) {
	// Built by hand from the format description: little-endian u64 header
	// length, JSON header padded with spaces to 8 bytes, then the data.
	hdr := `{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} `
	want := append([]byte{byte(len(hdr)), 0, 0, 0, 0, 0, 0, 0}, hdr...)
	data, _ := hex.DecodeString("0000803f000000c0") // 1.0, -2.0
	want = append(want, data...)

	path := filepath.Join(t.TempDir(), "golden.safetensors")
	if err := WriteFile(path, []Tensor{F32Tensor("a", []int{2}, []float32{1, -2})}, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file bytes\n got %q\nwant %q", got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type spec struct {
		name  string
		dt    tensor.DType
		shape []int
	}
	specs := []spec{
		// An odd-sized 16-bit tensor first: the writer must still keep the
		// F32 tensors 4-byte aligned.
		{"odd.bf16", tensor.BF16, []int{3}},
		{"w.f32", tensor.F32, []int{5, 7}},
		{"w.f16", tensor.F16, []int{4, 6}},
		{"w.bf16", tensor.BF16, []int{6, 4}},
		{"scalar", tensor.F32, []int{}},
		{"empty", tensor.F16, []int{0, 4}},
		{"v.f32", tensor.F32, []int{3}},
	}
	var tensors []Tensor
	want := map[string][]float32{}
	for _, s := range specs {
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		vals := randVals(r, n)
		var tt Tensor
		switch s.dt {
		case tensor.F32:
			tt = F32Tensor(s.name, s.shape, vals)
		case tensor.F16:
			tt = F16Tensor(s.name, s.shape, vals)
		case tensor.BF16:
			tt = BF16Tensor(s.name, s.shape, vals)
		}
		tensors = append(tensors, tt)
		want[s.name] = rounded(s.dt, vals)
	}
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	meta := map[string]string{"format": "pt", "note": "round \"trip\""}
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(raw)
	if (8+hlen)%8 != 0 {
		t.Errorf("data section starts at %d, not 8-byte aligned", 8+hlen)
	}
	// The header keeps the caller's tensor order.
	hdr := string(raw[8 : 8+hlen])
	last := -1
	for _, s := range specs {
		i := strings.Index(hdr, `"`+s.name+`"`)
		if i < last {
			t.Errorf("tensor %q out of order in header %s", s.name, hdr)
		}
		last = i
	}

	st, err := Open(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wantNames := []string{"empty", "odd.bf16", "scalar", "v.f32", "w.bf16", "w.f16", "w.f32"}
	if got := st.Names(); !reflect.DeepEqual(got, wantNames) {
		t.Errorf("Names() = %v, want %v", got, wantNames)
	}
	if got := st.Metadata(); !reflect.DeepEqual(got, meta) {
		t.Errorf("Metadata() = %v, want %v", got, meta)
	}
	for _, s := range specs {
		tt, err := st.Tensor(s.name)
		if err != nil {
			t.Fatal(err)
		}
		if tt.DType != s.dt || !reflect.DeepEqual(tt.Shape, s.shape) {
			t.Errorf("%s: got %v %v, want %v %v", s.name, tt.DType, tt.Shape, s.dt, s.shape)
		}
		if len(tt.Data) > 0 && uintptr(unsafe.Pointer(&tt.Data[0]))%uintptr(s.dt.Size()) != 0 {
			t.Errorf("%s: data not aligned to its %d-byte elements", s.name, s.dt.Size())
		}
		got, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want[s.name]) {
			t.Errorf("%s: values %v, want %v", s.name, got, want[s.name])
		}
		if len(s.shape) != 2 {
			continue
		}
		m, err := tt.Mat()
		if err != nil {
			t.Fatal(err)
		}
		if m.Rows != s.shape[0] || m.Cols != s.shape[1] || m.DType != s.dt {
			t.Errorf("%s: Mat %v %dx%d", s.name, m.DType, m.Rows, m.Cols)
		}
		for i, w := range want[s.name] {
			var g float32
			switch s.dt {
			case tensor.F32:
				g = m.F32[i]
			case tensor.F16:
				g = tensor.F16ToF32(m.U16[i])
			case tensor.BF16:
				g = tensor.BF16ToF32(m.U16[i])
			}
			if g != w {
				t.Fatalf("%s: Mat element %d = %v, want %v", s.name, i, g, w)
			}
		}
		// The view must share the mapped bytes, not copy them.
		if s.dt == tensor.F32 && unsafe.Pointer(&m.F32[0]) != unsafe.Pointer(&tt.Data[0]) {
			t.Errorf("%s: Mat copied aligned F32 data", s.name)
		}
		if s.dt != tensor.F32 && m.Rows > 0 && unsafe.Pointer(&m.U16[0]) != unsafe.Pointer(&tt.Data[0]) {
			t.Errorf("%s: Mat copied aligned 16-bit data", s.name)
		}
	}
	if _, err := st.Tensor("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), filepath.Dir(path)) {
		t.Errorf("missing tensor error = %v, want it to name the tensor and dir", err)
	}
	if !st.Has("w.f32") || st.Has("nope") {
		t.Error("Has is wrong")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Tensor("w.f32"); err == nil {
		t.Error("Tensor after Close succeeded")
	}
}

func TestMatMisalignedAndErrors(t *testing.T) {
	vals := []float32{1, 2, 3, 4, 5, 6}
	src := F32Tensor("m", []int{2, 3}, vals)
	buf := make([]byte, len(src.Data)+1)
	copy(buf[1:], src.Data)
	tt := Tensor{Name: "m", DType: tensor.F32, Shape: []int{2, 3}, Data: buf[1:]}
	m, err := tt.Mat()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.F32, vals) {
		t.Errorf("misaligned Mat = %v, want %v", m.F32, vals)
	}
	if uintptr(unsafe.Pointer(&m.F32[0]))%4 != 0 {
		t.Error("misaligned Mat copy is itself misaligned")
	}
	bf := BF16Tensor("b", []int{3}, []float32{1, 2, 3})
	buf = make([]byte, len(bf.Data)+1)
	copy(buf[1:], bf.Data)
	tb := Tensor{Name: "b", DType: tensor.BF16, Shape: []int{1, 3}, Data: buf[1:]}
	mb, err := tb.Mat()
	if err != nil {
		t.Fatal(err)
	}
	if got := []float32{tensor.BF16ToF32(mb.U16[0]), tensor.BF16ToF32(mb.U16[2])}; got[0] != 1 || got[1] != 3 {
		t.Errorf("misaligned BF16 Mat = %v", got)
	}

	bad := []struct {
		name string
		t    Tensor
		want string
	}{
		{"1-D", F32Tensor("vec", []int{6}, vals), `"vec" has shape [6], want 2-D`},
		{"3-D", F32Tensor("cube", []int{1, 2, 3}, vals), `"cube" has shape [1 2 3]`},
		{"short data", Tensor{Name: "short", DType: tensor.F32, Shape: []int{2, 3}, Data: make([]byte, 20)}, `"short": shape [2 3] of F32 needs 24 bytes, have 20`},
		{"bad dtype", Tensor{Name: "x", DType: 0, Shape: []int{1, 1}, Data: make([]byte, 4)}, `"x": unsupported dtype`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.t.Mat(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Mat() error = %v, want it to contain %q", err, c.want)
			}
		})
	}
	if _, err := bad[2].t.Float32s(); err == nil {
		t.Error("Float32s on short data succeeded")
	}
}

func TestWriteFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"duplicate", []Tensor{F32Tensor("a", []int{1}, []float32{1}), F32Tensor("a", []int{1}, []float32{2})}, `duplicate tensor "a"`},
		{"no name", []Tensor{F32Tensor("", []int{1}, []float32{1})}, "has no name"},
		{"reserved", []Tensor{F32Tensor("__metadata__", []int{1}, []float32{1})}, "reserved"},
		{"shape mismatch", []Tensor{F32Tensor("a", []int{2, 2}, []float32{1})}, `"a": shape [2 2] of F32 needs 16 bytes, have 4`},
		{"negative", []Tensor{F32Tensor("a", []int{-1}, nil)}, "negative dimension"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "w.safetensors")
			err := WriteFile(path, c.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("WriteFile error = %v, want it to contain %q and the path", err, c.want)
			}
			if _, err := os.Stat(path); err == nil {
				t.Error("failed WriteFile left a file behind")
			}
		})
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

func writeIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestShardedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	a, b, c := randVals(r, 12), randVals(r, 8), randVals(r, 5)
	s1 := "model-00001-of-00002.safetensors"
	s2 := "model-00002-of-00002.safetensors"
	if err := WriteFile(filepath.Join(dir, s1), []Tensor{BF16Tensor("a", []int{3, 4}, a), F32Tensor("c", []int{5}, c)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, s2), []Tensor{F16Tensor("b", []int{2, 4}, b)}, nil); err != nil {
		t.Fatal(err)
	}
	writeIndex(t, dir, map[string]string{"a": s1, "b": s2, "c": s1})
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.Names(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("Names() = %v", got)
	}
	for name, want := range map[string][]float32{
		"a": rounded(tensor.BF16, a), "b": rounded(tensor.F16, b), "c": c,
	} {
		tt, err := st.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// stFile builds a safetensors file from a header string and data bytes.
func stFile(h string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(b, h...), data...)
}

func corruptFiles() []struct {
	name string
	file []byte
	want string
} {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	big := binary.LittleEndian.AppendUint64(nil, 200<<20)
	return []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "file too short"},
		{"short file", []byte{1, 2, 3}, "file too short"},
		{"huge header length", append(big, "{}"...), "exceeds the 104857600 byte limit"},
		{"header longer than file", append(binary.LittleEndian.AppendUint64(nil, 1000), `{"a":1}`...), "header length 1000 exceeds the file size"},
		{"invalid json", stFile(`{"a":{"dtype":"F32",}`, nil), "invalid header JSON"},
		{"not an object", stFile(`[1,2]`, nil), "not a JSON object"},
		{"blank header", stFile(`        `, nil), "not a JSON object"},
		{"entry not an object", stFile(`{"a":3}`, nil), `tensor "a": invalid entry`},
		{"missing data_offsets", stFile(`{"a":{"dtype":"F32","shape":[2]}}`, make([]byte, 8)), "needs dtype, shape and data_offsets"},
		{"unknown dtype", stFile(`{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), `unknown dtype "Q4" for tensor "a"`},
		{"three offsets", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, make([]byte, 8)), "must hold two numbers"},
		{"offsets out of range", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8)), "data_offsets [0, 16] out of range for 8 data bytes"},
		{"negative offset", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, make([]byte, 8)), "out of range"},
		{"reversed offsets", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, make([]byte, 8)), "out of range"},
		{"truncated data", stFile(ok, make([]byte, 5)), "out of range for 5 data bytes"},
		{"wrong byte count", stFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), "needs 12 bytes, data_offsets [0, 8] hold 8"},
		{"wrong byte count bf16", stFile(`{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}}`, make([]byte, 8)), "needs 12 bytes"},
		{"negative dim", stFile(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, make([]byte, 8)), "negative dimension"},
		{"fractional dim", stFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}}`, make([]byte, 8)), "invalid entry"},
		{"shape overflow", stFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}`, make([]byte, 8)), "larger than the file"},
		{"overlap", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), `tensors "a" and "b" overlap`},
		{"same range", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), "overlap"},
		{"bad metadata", stFile(`{"__metadata__":{"k":1}}`, nil), "__metadata__ must map strings to strings"},
	}
}

func TestCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	for i, c := range corruptFiles() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "corrupt"+string(rune('a'+i))+".safetensors")
			if err := os.WriteFile(path, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := OpenFile(path)
			if err == nil {
				st.Close()
				t.Fatalf("OpenFile succeeded, want error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error = %q, want it to contain %q and %q", err, c.want, path)
			}
		})
	}
}

func TestUnsupportedDTypeIsLazy(t *testing.T) {
	// Checkpoints sometimes carry integer buffers next to the weights; the
	// file opens and only asking for such a tensor fails.
	path := filepath.Join(t.TempDir(), "mixed.safetensors")
	f := stFile(`{"pos":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}}`, make([]byte, 20))
	if err := os.WriteFile(path, f, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Tensor("w"); err != nil {
		t.Fatal(err)
	}
	_, err = st.Tensor("pos")
	if err == nil || !strings.Contains(err.Error(), `unsupported dtype I64 for tensor "pos"`) || !strings.Contains(err.Error(), path) {
		t.Errorf("error = %v, want unsupported dtype naming tensor and file", err)
	}
}

func TestOpenDirErrors(t *testing.T) {
	good := func(t *testing.T, dir, name string, tensors ...string) {
		var ts []Tensor
		for _, n := range tensors {
			ts = append(ts, F32Tensor(n, []int{1}, []float32{1}))
		}
		if err := WriteFile(filepath.Join(dir, name), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string // also checked: the error names this file (relative to dir)
		file  string
	}{
		{"empty dir", func(t *testing.T, dir string) {}, "no model.safetensors", ""},
		{"missing tensor in shard", func(t *testing.T, dir string) {
			good(t, dir, "s1.safetensors", "a")
			good(t, dir, "s2.safetensors", "b")
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"})
		}, `tensor "c" listed in model.safetensors.index.json is missing from the shard`, "s2.safetensors"},
		{"missing shard", func(t *testing.T, dir string) {
			good(t, dir, "s1.safetensors", "a")
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s9.safetensors"})
		}, "no such file", "s9.safetensors"},
		{"shard escapes dir", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"a": "../x.safetensors"})
		}, "leaves the model directory", "model.safetensors.index.json"},
		{"corrupt shard", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "s1.safetensors"), []byte("garbage!garbage"), 0o644)
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors"})
		}, "header length", "s1.safetensors"},
		{"index invalid json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte("{"), 0o644)
		}, "invalid JSON", "model.safetensors.index.json"},
		{"index without weight_map", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"metadata":{}}`), 0o644)
		}, "weight_map is missing", "model.safetensors.index.json"},
		{"several files, no index", func(t *testing.T, dir string) {
			good(t, dir, "x.safetensors", "a")
			good(t, dir, "y.safetensors", "b")
		}, "several safetensors files (x.safetensors, y.safetensors)", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			st, err := Open(dir)
			if err == nil {
				st.Close()
				t.Fatalf("Open succeeded, want error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, c.file)) {
				t.Errorf("error = %q, want it to contain %q and %q", err, c.want, filepath.Join(dir, c.file))
			}
		})
	}

	t.Run("single other name", func(t *testing.T) {
		dir := t.TempDir()
		good(t, dir, "weights.safetensors", "a", "b")
		st, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if got := st.Names(); !reflect.DeepEqual(got, []string{"a", "b"}) {
			t.Errorf("Names() = %v", got)
		}
	})
}

func TestStories260K(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	names := st.Names()
	if len(names) != 47 {
		t.Errorf("%d tensors, want 47 (embed, final norm, 5 layers x 9)", len(names))
	}
	if md := st.Metadata(); md["format"] != "pt" {
		t.Errorf("metadata = %v, want format=pt", md)
	}
	shapes := map[string][]int{
		"model.embed_tokens.weight":                      {512, 64},
		"model.norm.weight":                              {64},
		"model.layers.0.input_layernorm.weight":          {64},
		"model.layers.0.post_attention_layernorm.weight": {64},
		"model.layers.0.self_attn.q_proj.weight":         {64, 64},
		"model.layers.0.self_attn.k_proj.weight":         {32, 64},
		"model.layers.0.self_attn.v_proj.weight":         {32, 64},
		"model.layers.0.self_attn.o_proj.weight":         {64, 64},
		"model.layers.0.mlp.gate_proj.weight":            {172, 64},
		"model.layers.0.mlp.up_proj.weight":              {172, 64},
		"model.layers.4.mlp.down_proj.weight":            {64, 172},
	}
	for name, shape := range shapes {
		tt, err := st.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if tt.DType != tensor.F32 || !reflect.DeepEqual(tt.Shape, shape) {
			t.Errorf("%s: %v %v, want F32 %v", name, tt.DType, tt.Shape, shape)
		}
	}
	if st.Has("lm_head.weight") {
		t.Error("stories260K ties its embeddings but has lm_head.weight")
	}

	// Reference values read with Python's struct module from the same file.
	refs := []struct {
		name        string
		first, last float32
		sum         float64
	}{
		{"model.embed_tokens.weight", -0.29474878311157227, -0.424032598733902, -752.3677446640068},
		{"model.norm.weight", 2.4583089351654053, 1.7077769041061401, 115.95276230573654},
		{"model.layers.4.self_attn.k_proj.weight", -0.025860849767923355, -0.2651301622390747, 2.2722628523088133},
	}
	for _, ref := range refs {
		tt, err := st.Tensor(ref.name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, x := range v {
			sum += float64(x)
		}
		if v[0] != ref.first || v[len(v)-1] != ref.last || math.Abs(sum-ref.sum) > 1e-9*math.Max(1, math.Abs(ref.sum)) {
			t.Errorf("%s: first %v last %v sum %v, want %v %v %v", ref.name, v[0], v[len(v)-1], sum, ref.first, ref.last, ref.sum)
		}
	}
	emb, _ := st.Tensor("model.embed_tokens.weight")
	m, err := emb.Mat()
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != 512 || m.Cols != 64 || m.F32[0] != -0.29474878311157227 || m.F32[512*64-1] != -0.424032598733902 {
		t.Errorf("embed Mat %dx%d [0]=%v [last]=%v", m.Rows, m.Cols, m.F32[0], m.F32[512*64-1])
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(stFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(stFile(`{"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}`, make([]byte, 16)))
	f.Add(stFile(`{}`, nil))
	for _, c := range corruptFiles() {
		f.Add(c.file)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader("fuzz.safetensors", b, int64(len(b)))
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.safetensors") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		// Whatever parses must be safe to slice.
		for name, ti := range h.tensors {
			if ti.begin < h.dataStart || ti.end < ti.begin || ti.end > int64(len(b)) {
				t.Fatalf("tensor %q: range [%d, %d) outside data [%d, %d)", name, ti.begin, ti.end, h.dataStart, len(b))
			}
			_ = b[ti.begin:ti.end]
		}
	})
}

func BenchmarkOpenStories260K(b *testing.B) {
	dir := shareddata.File(b, "models", "stories260K")
	for b.Loop() {
		st, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Tensor("model.embed_tokens.weight"); err != nil {
			b.Fatal(err)
		}
		st.Close()
	}
}

func BenchmarkFloat32sBF16(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	tt := BF16Tensor("w", []int{896, 896}, randVals(r, 896*896))
	b.SetBytes(int64(len(tt.Data)))
	for b.Loop() {
		if _, err := tt.Float32s(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEvict: a tensor's data reads the same after Evict drops its pages
// (several pages' worth, with neighbours on either side), and Evict of an
// unknown name or on a closed store does nothing.
func TestEvict(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tensors := []Tensor{
		F32Tensor("before", []int{3}, randVals(r, 3)),
		BF16Tensor("big", []int{5, 3001}, randVals(r, 5*3001)),
		F32Tensor("after", []int{2}, randVals(r, 2)),
	}
	path := filepath.Join(t.TempDir(), "evict.safetensors")
	if err := WriteFile(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, name := range s.Names() {
		tt, err := s.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = bytes.Clone(tt.Data)
	}
	s.Evict("big")
	s.Evict("no such tensor")
	for name, w := range want {
		tt, err := s.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tt.Data, w) {
			t.Errorf("%s: data changed after Evict", name)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Evict("big")
}
