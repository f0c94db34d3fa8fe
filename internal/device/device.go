// Package device turns the tools' --device flag into a compute backend.
package device

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/compute/cudabackend"
)

// Names lists the devices --device accepts.
func Names() []string { return []string{"cpu", "cuda", "cuda:N"} }

// Backend returns the backend of a --device value, for model.Options:
// "cpu" gives nil, the model's own CPU backend of --threads threads;
// "cuda" opens CUDA device 0 and "cuda:N" device N, failing at once on a
// machine without the NVIDIA driver or a device, saying what was looked
// for.
func Backend(name string) (compute.Backend, error) { return Open(name, "") }

// Open is Backend with the --matmul value (unconverted by MatMul) that a
// GPU takes as its prefill precision: "" or "bf16" rounds the activations
// of bf16 and f16 weights' products to 16 bits for the tensor cores, "f32"
// keeps them float32 (cudabackend.Options.MatMul). The CPU's precision
// goes to OrCPU through MatMul instead.
func Open(name, matmul string) (compute.Backend, error) {
	if name == "cpu" {
		return nil, nil
	}
	if rest, ok := strings.CutPrefix(name, "cuda"); ok {
		ordinal := 0
		if rest != "" {
			n, err := strconv.Atoi(strings.TrimPrefix(rest, ":"))
			if !strings.HasPrefix(rest, ":") || err != nil || n < 0 {
				return nil, fmt.Errorf("--device %q: want cuda or cuda:N with N a device ordinal (0, 1, ...)", name)
			}
			ordinal = n
		}
		b, err := cudabackend.New(cudabackend.Options{Device: ordinal, MatMul: matmul})
		if err != nil {
			return nil, fmt.Errorf("--device %s: %w", name, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("--device %q: want one of %s", name, strings.Join(Names(), ", "))
}

// OrCPU returns b, the backend of a --device value, or for "cpu" (b nil)
// a new CPU backend of threads threads (--threads) and matmul precision
// (--matmul, as MatMul returns it). done releases what OrCPU started; the
// caller calls it once the model is closed.
func OrCPU(b compute.Backend, threads int, matmul string) (be compute.Backend, done func(), err error) {
	if b != nil {
		return b, func() {}, nil
	}
	cpu, err := cpubackend.NewMatMul(threads, matmul)
	if err != nil {
		return nil, nil, err
	}
	return cpu, func() { cpu.Close() }, nil
}

// MaxThreads returns the most compute threads the CPU backend takes
// (--threads): 64 per CPU core, at most 4096.
func MaxThreads() int { return cpubackend.MaxThreads() }

// MatMulUsage is the help text of the tools' --matmul flag.
const MatMulUsage = "precision of the activations in bf16 matrix products: bf16 (rounded first, llama.cpp's arithmetic: about 1.5x the prefill speed with AVX512_BF16; on a GPU, prefill on the bf16/f16 tensor cores) or f32 (exact)"

// MatMul checks a --matmul value and returns it as model.Options.MatMul
// takes it: the value on the CPU ("" the default precision); "" on other
// devices, which take it through Open instead (the engine's MatMul applies
// only to the CPU backend it starts).
func MatMul(dev, matmul string) (string, error) {
	switch {
	case matmul == "":
		return "", nil
	case matmul != "f32" && matmul != "bf16":
		return "", fmt.Errorf("--matmul %q: want f32 or bf16", matmul)
	case dev == "cpu":
		return matmul, nil
	}
	return "", nil
}
