package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// --verbose names the device on stderr: the CPU's kernels after the load.
func TestRunVerboseCPU(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	var errOut bytes.Buffer
	args := []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "2", "--quiet", "--verbose"}
	if err := run(context.Background(), args, nil, io.Discard, &errOut); err != nil {
		t.Fatal(err)
	}
	if got := errOut.String(); !strings.HasPrefix(got, "kakeya-run: device: cpu, kernels: ") {
		t.Errorf("stderr %q", got)
	}
}

// gpuBackend stands in for the CUDA backend: a description and a search.
type gpuBackend struct{ compute.Backend }

func (gpuBackend) Describe() string {
	return "CUDA X, prefill GEMM cuBLAS 13.1.1 (TF32) from /w/libcublas.so.13"
}
func (gpuBackend) CUBLASSearch() string {
	return "cuBLAS search (the first library that loads is used):\n  KAKEYA_CUBLAS: unset\n  loaded /w/libcublas.so.13\n"
}

// For a GPU, --verbose prints the description and the cuBLAS search.
func TestPrintDevice(t *testing.T) {
	var w bytes.Buffer
	printDevice(&w, gpuBackend{})
	want := "kakeya-run: device: CUDA X, prefill GEMM cuBLAS 13.1.1 (TF32) from /w/libcublas.so.13\n" +
		"kakeya-run: cuBLAS search (the first library that loads is used):\n  KAKEYA_CUBLAS: unset\n  loaded /w/libcublas.so.13\n"
	if w.String() != want {
		t.Errorf("printDevice wrote\n%s\nwant\n%s", w.String(), want)
	}
	w.Reset()
	printDevice(&w, nil)
	if w.Len() != 0 {
		t.Errorf("the CPU's nil backend: %q", w.String())
	}
}
