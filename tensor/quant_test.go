package tensor_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/ggufdata"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/tensor"
)

// RandomBlocks returns n blocks of format f with random codes and scales
// (the f16 fields finite, of either sign), seeded.
func randomBlocks(f *tensor.QuantFormat, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n*f.Bytes)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for k := range n {
		for _, fl := range f.Fields {
			if fl.Kind == tensor.FieldF16 {
				v := float32(r.NormFloat64() * 0.01)
				binary.LittleEndian.PutUint16(b[k*f.Bytes+fl.Offset:], tensor.F32ToF16(v))
			}
		}
	}
	return b
}

// The formats' sizes add up, and no two fields overlap.
func TestFormatsLayout(t *testing.T) {
	for _, f := range tensor.Formats {
		used := make([]bool, f.Bytes)
		for _, fl := range f.Fields {
			w := map[tensor.FieldKind]int{tensor.FieldF16: 2, tensor.FieldU8: 1, tensor.FieldI8: 1}[fl.Kind]
			for i := fl.Offset; i < fl.Offset+fl.Count*w; i++ {
				if i >= f.Bytes || used[i] {
					t.Fatalf("%s: field %s overlaps or overflows", f.Name, fl.Name)
				}
				used[i] = true
			}
		}
		for i, u := range used {
			if !u {
				t.Errorf("%s: byte %d is in no field", f.Name, i)
			}
		}
		if f.DType.String() != f.Name || f.DType.Format() != &tensor.Formats[indexOf(f.DType)] {
			t.Errorf("%s: DType %v", f.Name, f.DType)
		}
	}
}

func indexOf(d tensor.DType) int {
	for i, f := range tensor.Formats {
		if f.DType == d {
			return i
		}
	}
	return -1
}

// DequantizeRow gives, bit for bit, what llama.cpp's gguf-py (an
// independent transcription of ggml's dequantize_row_* in numpy, float32
// throughout) gives for the same random blocks.
func TestDequantizeMatchesGGUFPy(t *testing.T) {
	shareddata.Dir(t)
	py := ggufdata.PyPath()
	if _, err := os.Stat(filepath.Join(py, "gguf", "quants.py")); err != nil {
		if shareddata.Required() {
			t.Fatalf("gguf-py not found at %s (make gguf-py)", py)
		}
		t.Skipf("gguf-py not found at %s (make gguf-py)", py)
	}
	ggml := map[tensor.DType]int{tensor.Q8_0: 8, tensor.Q4_0: 2, tensor.Q5_0: 6, tensor.Q4_K: 12, tensor.Q5_K: 13, tensor.Q6_K: 14}
	dir := t.TempDir()
	for _, f := range tensor.Formats {
		t.Run(f.Name, func(t *testing.T) {
			const blocks = 64
			raw := randomBlocks(&f, blocks, uint64(ggml[f.DType]))
			in := filepath.Join(dir, f.Name+".bin")
			out := filepath.Join(dir, f.Name+".f32")
			if err := os.WriteFile(in, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			script := fmt.Sprintf(`import numpy as np, gguf
from gguf import quants
raw = np.fromfile(%q, dtype=np.uint8)
quants.dequantize(raw, gguf.GGMLQuantizationType(%d)).astype(np.float32).tofile(%q)`, in, ggml[f.DType], out)
			cmd := exec.Command(ggufdata.Python, "-c", script)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+py)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gguf-py: %v\n%s", err, b)
			}
			ref, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, blocks*f.Block)
			if err := tensor.DequantizeRow(got, f.DType, raw); err != nil {
				t.Fatal(err)
			}
			if len(ref) != 4*len(got) {
				t.Fatalf("gguf-py gave %d values, want %d", len(ref)/4, len(got))
			}
			for i, g := range got {
				w := math.Float32frombits(binary.LittleEndian.Uint32(ref[4*i:]))
				if math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("value %d (block %d): %v (%#x), gguf-py %v (%#x)", i, i/f.Block, g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
		})
	}
}

func TestDequantizeRowErrors(t *testing.T) {
	if err := tensor.DequantizeRow(make([]float32, 32), tensor.F32, nil); err == nil {
		t.Error("F32: no error")
	}
	if err := tensor.DequantizeRow(make([]float32, 33), tensor.Q8_0, make([]byte, 68)); err == nil {
		t.Error("33 values: no error")
	}
	if err := tensor.DequantizeRow(make([]float32, 64), tensor.Q8_0, make([]byte, 67)); err == nil {
		t.Error("short blocks: no error")
	}
}

// QuantizeRow gives gguf-py's quantize (llama.cpp's Python transcription of
// quantize_row_q8_0_ref and quantize_row_q4_0_ref) byte for byte.
func TestQuantizeMatchesGGUFPy(t *testing.T) {
	shareddata.Dir(t)
	py := ggufdata.PyPath()
	if _, err := os.Stat(filepath.Join(py, "gguf", "quants.py")); err != nil {
		if shareddata.Required() {
			t.Fatalf("gguf-py not found at %s (make gguf-py)", py)
		}
		t.Skipf("gguf-py not found at %s (make gguf-py)", py)
	}
	r := rand.New(rand.NewPCG(9, 9))
	x := make([]float32, 64*32)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Exp(r.NormFloat64()))
	}
	clear(x[:32]) // an all-zero block
	dir := t.TempDir()
	in := filepath.Join(dir, "x.f32")
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    tensor.DType
		ggml int
	}{{tensor.Q8_0, 8}, {tensor.Q4_0, 2}} {
		t.Run(tc.d.String(), func(t *testing.T) {
			out := filepath.Join(dir, tc.d.String()+".bin")
			script := fmt.Sprintf(`import numpy as np, gguf
from gguf import quants
x = np.fromfile(%q, dtype=np.float32).reshape(-1, 32)
quants.quantize(x, gguf.GGMLQuantizationType(%d)).tofile(%q)`, in, tc.ggml, out)
			cmd := exec.Command(ggufdata.Python, "-c", script)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+py)
			if o, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gguf-py: %v\n%s", err, o)
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := tc.d.RowBytes(len(x))
			got := make([]byte, rb)
			if err := tensor.QuantizeRow(got, tc.d, x); err != nil {
				t.Fatal(err)
			}
			if len(want) != len(got) {
				t.Fatalf("gguf-py wrote %d bytes, want %d", len(want), len(got))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("byte %d (block %d): %#x, gguf-py %#x", i, i/tc.d.Format().Bytes, got[i], want[i])
				}
			}
		})
	}
	if err := tensor.QuantizeRow(make([]byte, 144), tensor.Q4_K, make([]float32, 256)); err == nil {
		t.Error("Q4_K: no error")
	}
}
