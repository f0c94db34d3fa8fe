package device

import (
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/computetest"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
)

// Open opens every registered backend by name through the registry: cpu
// with its threads and precision, reference; an unknown name or a bad
// ordinal is an error listing what is accepted.
func TestOpen(t *testing.T) {
	for _, name := range []string{"cpu", "reference"} {
		b, err := Open(name, 1, "f32")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b.Name() != name {
			t.Errorf("Open(%q) opened %q", name, b.Name())
		}
		b.Close()
	}
	if b, err := Open("cpu", 1, ""); err != nil || b.(*cpubackend.Backend).Threads() != 1 {
		t.Errorf("cpu with 1 thread: %v", err)
	} else {
		b.Close()
	}
	for _, name := range []string{"", "CPU", "gpu", "cudax", "cuda:", "cuda:-1", "cuda:a", "cuda:01", "cpu:1"} {
		if _, err := Open(name, 1, ""); err == nil || !strings.Contains(err.Error(), "want ") {
			t.Errorf("%q: err = %v, want one naming the accepted values", name, err)
		}
	}
	_, err := Open("tpu", 1, "")
	if err == nil || !strings.Contains(err.Error(), "cpu, cuda, reference, cuda:N") {
		t.Errorf("tpu: %v, want the registered backends listed", err)
	}
	if _, err := Open("cpu", 1, "fp16"); err == nil || err.Error() != `--matmul "fp16": want f32 or bf16` {
		t.Errorf("--matmul fp16: %v", err)
	}
	if _, err := compute.OpenBackend("tpu", compute.OpenOptions{}); err == nil || !strings.Contains(err.Error(), "registered: cpu, cuda, reference") {
		t.Errorf("compute.OpenBackend(tpu): %v", err)
	}
}

// Without the NVIDIA driver (every CI machine), --device cuda fails at
// once, naming the library it looked for and why it could not be used.
func TestCUDAWithoutDriver(t *testing.T) {
	b, err := Open("cuda", 0, "")
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

// The counting wrapper passes the compute contract with every capability
// of the CPU backend it wraps (computetest), so a kernel path a model
// would take on the CPU stays the one it takes while counted.
func TestCountConformance(t *testing.T) {
	cpu := cpubackend.New(1)
	caps := computetest.Capabilities(cpu)
	cpu.Close()
	err := computetest.Test(computetest.Config{
		Open: func() (compute.Backend, error) {
			b, err := cpubackend.NewMatMul(1, "f32")
			if err != nil {
				return nil, err
			}
			c, _ := Count(b)
			return c, nil
		},
		Capabilities: caps,
	})
	if err != nil {
		t.Fatal(err)
	}
}
