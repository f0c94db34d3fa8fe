package device

import (
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
)

func TestBackend(t *testing.T) {
	if b, err := Backend("cpu"); b != nil || err != nil {
		t.Errorf("cpu: %v, %v; want the model's default (nil)", b, err)
	}
	for _, name := range []string{"", "CPU", "gpu", "cudax", "cuda:", "cuda:-1", "cuda:a"} {
		if _, err := Backend(name); err == nil || !strings.Contains(err.Error(), "want ") {
			t.Errorf("%q: err = %v, want one naming the accepted values", name, err)
		}
	}
}

// Without the NVIDIA driver (every CI machine), --device cuda fails at
// once, naming the library it looked for and why it could not be used.
func TestCUDAWithoutDriver(t *testing.T) {
	b, err := Backend("cuda")
	if err == nil {
		b.Close()
		t.Skip("a CUDA device is present")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "--device cuda: cuda: ") {
		t.Errorf("error %q does not start with the flag and the package", msg)
	}
	// With cgo the library is looked for; without, the build says why not.
	if !strings.Contains(msg, "libcuda.so.1") && !strings.Contains(msg, "cgo") {
		t.Errorf("error %q names neither libcuda.so.1 nor the missing cgo", msg)
	}
	t.Log(msg)
}

func TestMatMul(t *testing.T) {
	for _, tt := range []struct {
		dev, in, want, err string
	}{
		{"cpu", "", "", ""},
		{"cuda", "", "", ""},
		{"cpu", "f32", "f32", ""},
		{"cuda", "f32", "", ""},
		{"cpu", "bf16", "bf16", ""},
		{"cuda:1", "bf16", "", ""},
		{"cpu", "fp16", "", `--matmul "fp16": want f32 or bf16`},
	} {
		got, err := MatMul(tt.dev, tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && err.Error() != tt.err) {
			t.Errorf("MatMul(%q, %q) = %q, %v; want %q, %q", tt.dev, tt.in, got, err, tt.want, tt.err)
		}
	}
}

// Count counts the CPU backend's seam operations through a wrapper that
// keeps its optional interfaces; a forward pass's operations all pass
// through it.
func TestCountCPU(t *testing.T) {
	cpu := cpubackend.New(1)
	defer cpu.Close()
	b, counts := Count(cpu)
	if _, ok := b.(compute.Preparer); !ok {
		t.Error("the counting backend lost compute.Preparer")
	}
	if d, ok := b.(compute.Describer); !ok || d.Describe() != cpu.Describe() {
		t.Error("the counting backend lost compute.Describer")
	}
	x := b.Alloc(8)
	b.Add(x, x)
	b.SiLUMul(x, x)
	b.RMSNorm(x, x, x, 1, 1e-6)
	if c := counts(); c.Ops != 3 || c.Driver || c.DriverCalls != 0 {
		t.Errorf("counts %+v after 3 operations, want 3 and no driver", c)
	}
	// Gemma's operations, which the CPU backend has, are kept and counted.
	a, ok := b.(compute.ArchOps)
	if _, sliding := b.(compute.SlidingKV); !ok || !sliding {
		t.Fatal("the counting backend lost compute.ArchOps or compute.SlidingKV")
	}
	a.Scale(x, 2)
	a.GELUTanhMul(x, x)
	a.Softcap(x, 30)
	if c := counts(); c.Ops != 6 {
		t.Errorf("counts %+v after 6 operations", c)
	}
}
