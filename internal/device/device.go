// Package device turns the tools' --device, --threads and --matmul flags
// into a compute backend, opened by name through the backend registry
// (compute.OpenBackend). It imports the backends the tools offer, cpu,
// reference and cuda, for their registration.
package device

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	_ "github.com/kakeya-ai/kakeya/compute/cudabackend" // registers "cuda"
	_ "github.com/kakeya-ai/kakeya/compute/reference"   // registers "reference"
)

// Names lists the devices --device accepts: the registered backends, a
// device with several ordinals also as NAME:N.
func Names() []string {
	names := compute.Backends()
	if slices.Contains(names, "cuda") {
		names = append(names, "cuda:N")
	}
	return names
}

// Check reports whether name is a --device value Open takes, without
// opening it: a registered backend, with a device ordinal (cuda:N) only on
// a backend that has several.
func Check(name string) error {
	kind, ord, hasOrd := strings.Cut(name, ":")
	if !slices.Contains(compute.Backends(), kind) || (hasOrd && kind != "cuda") {
		return fmt.Errorf("--device %q: want one of %s", name, strings.Join(Names(), ", "))
	}
	if hasOrd {
		var n int
		if _, err := fmt.Sscanf(ord, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != ord {
			return fmt.Errorf("--device %q: want cuda or cuda:N with N a device ordinal (0, 1, ...)", name)
		}
	}
	return nil
}

// Open opens the backend of a --device value: "cpu" a CPU backend of
// threads threads (--threads, 0 for GOMAXPROCS) and matmul precision,
// "reference" the float64 oracle, "cuda" CUDA device 0 and "cuda:N" device
// N, failing at once on a machine without the NVIDIA driver or a device,
// saying what was looked for. matmul (--matmul, "" for the default) is
// the CPU's precision of bf16 products, or a GPU's of prefill (see
// cudabackend.Options.MatMul). The caller closes the backend once the
// model on it is closed.
func Open(name string, threads int, matmul string) (compute.Backend, error) {
	if err := Check(name); err != nil {
		return nil, err
	}
	if err := CheckMatMul(matmul); err != nil {
		return nil, err
	}
	b, err := compute.OpenBackend(name, compute.OpenOptions{Threads: threads, MatMul: matmul})
	if err != nil {
		return nil, fmt.Errorf("--device %s: %w", name, err)
	}
	return b, nil
}

// MaxThreads returns the most compute threads the CPU backend takes
// (--threads): 64 per CPU core, at most 4096.
func MaxThreads() int { return cpubackend.MaxThreads() }

// MatMulUsage is the help text of the tools' --matmul flag.
const MatMulUsage = "precision of the activations in bf16 matrix products: bf16 (rounded first, llama.cpp's arithmetic: about 1.5x the prefill speed with AVX512_BF16; on a GPU, prefill on the bf16/f16 tensor cores) or f32 (exact)"

// CheckMatMul checks a --matmul value: "" (the default), f32 or bf16.
func CheckMatMul(matmul string) error {
	if matmul != "" && matmul != "f32" && matmul != "bf16" {
		return fmt.Errorf("--matmul %q: want f32 or bf16", matmul)
	}
	return nil
}
