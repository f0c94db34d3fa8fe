// Command kakeya-formats writes the C header of the KV cache's block
// formats, codec.CHeader, which the CUDA kernels include, and with -quant
// that of the quantized weight formats, tensor.QuantCHeader:
//
//	go run ./internal/cmd/kakeya-formats -o kernels/cuda/formats.h
//	go run ./internal/cmd/kakeya-formats -quant -o kernels/cuda/qformats.h
//
// (make formats). The codec and tensor packages' tests fail when a
// committed header differs from what this writes.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/tensor"
)

func main() {
	out := flag.String("o", "", "the header to write (standard output when empty)")
	quant := flag.Bool("quant", false, "write the quantized weight formats' header (tensor.QuantCHeader)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kakeya-formats: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	h := codec.CHeader()
	if *quant {
		h = tensor.QuantCHeader()
	}
	if *out == "" {
		if _, err := os.Stdout.Write(h); err != nil {
			fmt.Fprintf(os.Stderr, "kakeya-formats: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, h, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "kakeya-formats: %v\n", err)
		os.Exit(1)
	}
}
