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
	}{{tensor.Q8_0, 8}, {tensor.Q4_0, 2}, {tensor.Q5_0, 6}} {
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
	if err := tensor.QuantizeRow(make([]byte, 144), tensor.F16, make([]float32, 256)); err == nil {
		t.Error("F16: no error")
	}
	if err := tensor.QuantizeRow(make([]byte, 144), tensor.Q4_K, make([]float32, 255)); err == nil {
		t.Error("Q4_K of 255 values: no error")
	}
}

// The K quantizers' blocks dequantize close to their input: over Gaussian
// rows (with an all-zero block, a constant one and outliers), the RMS error
// relative to the values' RMS is within each type's bound (4, 5 and 6 bits
// of code per value, the scales searched), and so is the largest error of
// any value relative to its block's largest magnitude. A zero block stays
// zero, a constant one within 1%.
func TestQuantizeKBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, 256*64)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	clear(x[:256])
	for i := 256; i < 512; i++ {
		x[i] = 0.75
	}
	x[1000], x[3000] = 12, -9
	for _, tc := range []struct {
		d        tensor.DType
		rel, abs float64
	}{{tensor.Q4_K, 0.11, 0.12}, {tensor.Q5_K, 0.055, 0.06}, {tensor.Q6_K, 0.03, 0.04}, {tensor.Q5_0, 0.07, 0.07}} {
		t.Run(tc.d.String(), func(t *testing.T) {
			rb, _ := tc.d.RowBytes(len(x))
			q := make([]byte, rb)
			if err := tensor.QuantizeRow(q, tc.d, x); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, len(x))
			if err := tensor.DequantizeRow(y, tc.d, q); err != nil {
				t.Fatal(err)
			}
			var se, ss, worst float64
			for b := 0; b < len(x); b += 256 {
				var amax float64
				for _, v := range x[b : b+256] {
					amax = max(amax, math.Abs(float64(v)))
				}
				for i := b; i < b+256; i++ {
					e := float64(y[i] - x[i])
					se += e * e
					ss += float64(x[i]) * float64(x[i])
					if amax > 0 {
						worst = max(worst, math.Abs(e)/amax)
					} else if e != 0 {
						t.Fatalf("all-zero block: value %d dequantizes to %v", i, y[i])
					}
				}
			}
			rel := math.Sqrt(se / ss)
			t.Logf("%v: RMS error %.4f of the RMS, max error %.4f of the block's max magnitude", tc.d, rel, worst)
			if rel > tc.rel || worst > tc.abs {
				t.Errorf("%v: RMS error %.4f (want <= %g), max %.4f (want <= %g)", tc.d, rel, tc.rel, worst, tc.abs)
			}
			for i := 256; i < 512; i++ {
				if math.Abs(float64(y[i]-0.75)) > 0.75*0.01 {
					t.Fatalf("constant block: %v for 0.75", y[i])
				}
			}
		})
	}
}

// BenchmarkQuantizeRow quantizes a row of 4,096 Gaussian values per type:
// the cost of quantizing weights on load (--weights), per value.
func BenchmarkQuantizeRow(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, d := range []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		b.Run(d.String(), func(b *testing.B) {
			rb, _ := d.RowBytes(len(x))
			q := make([]byte, rb)
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				if err := tensor.QuantizeRow(q, d, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
