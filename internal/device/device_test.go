package device

import (
	"strings"
	"testing"
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
