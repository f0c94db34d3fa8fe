// Command kakeya-formats writes the C header of the KV cache's block
// formats, codec.CHeader, which the CUDA kernels include:
//
//	go run ./internal/cmd/kakeya-formats -o kernels/cuda/formats.h
//
// (make formats). The codec package's tests fail when the committed
// header differs from what this writes.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kakeya-ai/kakeya/codec"
)

func main() {
	out := flag.String("o", "", "the header to write (standard output when empty)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kakeya-formats: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	h := codec.CHeader()
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
