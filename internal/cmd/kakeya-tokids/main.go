// Command kakeya-tokids writes the token ids of text files, as a training
// script reads them: uint16 little-endian, each paragraph (blank-line
// separated; line by line in a file without blank lines) prefixed by a
// separator id. It tokenizes with a model directory's (or file's)
// tokenizer.json, so a model trained on its output shares that tokenizer:
//
//	go run ./internal/cmd/kakeya-tokids -tokenizer ../shared/models/ref-qwen2-6m \
//	    -sep 4093 -o /tmp/train.u16 ../shared/data/tinystories/val.txt:0.75 ../shared/data/wikitext-2/valid.txt
//
// A FILE:F argument takes the first fraction F of the file's bytes, cut
// at a paragraph. internal/gemmatrain trains the tiny Gemma 3 on it that
// the Gemma evaluation in docs/results runs on.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/tokenizer"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kakeya-tokids:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kakeya-tokids", flag.ContinueOnError)
	tokPath := fs.String("tokenizer", "", "a model directory or tokenizer.json (required)")
	out := fs.String("o", "", "the ids file to write (required)")
	sep := fs.Int("sep", -1, "the id written before each paragraph (-1: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tokPath == "" || *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("usage: kakeya-tokids -tokenizer DIR -o FILE [-sep ID] TEXT[:FRACTION]...")
	}
	if st, err := os.Stat(*tokPath); err == nil && st.IsDir() {
		*tokPath = filepath.Join(*tokPath, "tokenizer.json")
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return err
	}
	if *sep >= 1<<16 || *sep < -1 {
		return fmt.Errorf("-sep %d: want an id below 65536 or -1", *sep)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	n, paras := 0, 0
	put := func(id int) error {
		if id < 0 || id >= 1<<16 {
			return fmt.Errorf("token id %d does not fit 16 bits", id)
		}
		n++
		return binary.Write(w, binary.LittleEndian, uint16(id))
	}
	for _, arg := range fs.Args() {
		name, frac := arg, 1.0
		if i := strings.LastIndex(arg, ":"); i > 0 {
			v, err := strconv.ParseFloat(arg[i+1:], 64)
			if err != nil || !(v > 0 && v <= 1) {
				f.Close()
				return fmt.Errorf("%s: fraction %q: want a number in (0, 1]", arg, arg[i+1:])
			}
			name, frac = arg[:i], v
		}
		b, err := os.ReadFile(name)
		if err != nil {
			f.Close()
			return err
		}
		text := string(b[:int(float64(len(b))*frac)])
		split := "\n\n"
		if !strings.Contains(text, split) {
			split = "\n"
		}
		parts := strings.Split(text, split)
		if frac < 1 && len(parts) > 1 {
			parts = parts[:len(parts)-1] // the paragraph the cut went through
		}
		for _, p := range parts {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			paras++
			if *sep >= 0 {
				if err := put(*sep); err != nil {
					f.Close()
					return err
				}
			}
			for _, id := range tok.Encode(p, false) {
				if err := put(id); err != nil {
					f.Close()
					return err
				}
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d tokens in %d paragraphs\n", *out, n, paras)
	return nil
}
