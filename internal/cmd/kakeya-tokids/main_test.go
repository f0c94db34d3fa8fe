package main

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// The ids file holds each paragraph's ids after the separator, as the
// tokenizer encodes them; a fraction cuts at a paragraph; bad arguments
// are errors naming them.
func TestTokIDs(t *testing.T) {
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	tmp := t.TempDir()
	text := filepath.Join(tmp, "t.txt")
	paras := []string{"Once upon a time, there was a cat.", "It sat on the mat.", "The end."}
	if err := os.WriteFile(text, []byte(strings.Join(paras, "\n\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) []int {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int, len(b)/2)
		for i := range ids {
			ids[i] = int(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return ids
	}
	out := filepath.Join(tmp, "ids.u16")
	if err := run([]string{"-tokenizer", dir, "-sep", "4093", "-o", out, text}, io.Discard); err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, p := range paras {
		want = append(append(want, 4093), tok.Encode(p, false)...)
	}
	if got := read(out); !slices.Equal(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	// Two thirds of the bytes end inside the second paragraph: the first only.
	if err := run([]string{"-tokenizer", dir, "-o", out, text + ":0.66"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, want := read(out), tok.Encode(paras[0], false); !slices.Equal(got, want) {
		t.Errorf("with :0.66, ids %v, want %v", got, want)
	}
	for _, args := range [][]string{
		{"-tokenizer", dir, "-o", out},
		{"-tokenizer", dir, "-o", out, text + ":1.5"},
		{"-tokenizer", dir, "-o", out, "-sep", "70000", text},
		{"-tokenizer", filepath.Join(tmp, "none"), "-o", out, text},
	} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
