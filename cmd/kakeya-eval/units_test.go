package main

import (
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/eval"
)

// unitParams fills in each mode's defaults against the model context and
// refuses windows the model cannot hold, naming the numbers.
func TestUnitParams(t *testing.T) {
	const twoDocs = "one\n\ntwo\n"
	for _, c := range []struct {
		name      string
		f         pplFlags
		maxCtx    int
		text      string
		want      eval.UnitParams
		wantChunk int
		err       string
	}{
		{name: "passages defaults", f: pplFlags{mode: eval.ModePassages, nEval: 64}, maxCtx: 2048,
			want: eval.UnitParams{Mode: eval.ModePassages, Ctx: 1024, NEval: 64, Stride: 512}, wantChunk: 1},
		{name: "passages short model", f: pplFlags{mode: eval.ModePassages, nEval: 64}, maxCtx: 512,
			want: eval.UnitParams{Mode: eval.ModePassages, Ctx: 448, NEval: 64, Stride: 224}, wantChunk: 1},
		{name: "passages as given", f: pplFlags{mode: eval.ModePassages, ctx: 32, nEval: 8, stride: 5, chunk: 4, passages: 3}, maxCtx: 512,
			want: eval.UnitParams{Mode: eval.ModePassages, Ctx: 32, NEval: 8, Stride: 5, Max: 3}, wantChunk: 4},
		{name: "passages too long", f: pplFlags{mode: eval.ModePassages, ctx: 500, nEval: 64}, maxCtx: 512,
			err: "ctx 500 + n_eval 64 = 564 tokens exceeds the model context of 512"},
		{name: "passages no room", f: pplFlags{mode: eval.ModePassages, nEval: 64}, maxCtx: 64,
			err: "ctx 0 + n_eval 64 = 64 tokens exceeds the model context of 64"},
		{name: "docs defaults", f: pplFlags{mode: eval.ModeDocs, docSep: "auto"}, maxCtx: 256, text: twoDocs,
			want: eval.UnitParams{Mode: eval.ModeDocs, Ctx: 256, Stride: 128, DocSep: eval.SepBlank}, wantChunk: 512},
		{name: "docs lines", f: pplFlags{mode: eval.ModeDocs, docSep: "auto"}, maxCtx: 256, text: "one\ntwo\n",
			want: eval.UnitParams{Mode: eval.ModeDocs, Ctx: 256, Stride: 128, DocSep: eval.SepLine}, wantChunk: 512},
		{name: "full as given", f: pplFlags{mode: eval.ModeFull, ctx: 64, stride: 16, chunk: 8, docSep: "line"}, maxCtx: 256,
			want: eval.UnitParams{Mode: eval.ModeFull, Ctx: 64, Stride: 16, DocSep: eval.SepLine}, wantChunk: 8},
		{name: "full too long", f: pplFlags{mode: eval.ModeFull, ctx: 300}, maxCtx: 256,
			err: "window ctx 300 exceeds the model context of 256"},
		{name: "bad doc sep", f: pplFlags{mode: eval.ModeDocs, docSep: "para"}, maxCtx: 256, text: twoDocs,
			err: "--doc-sep: "},
		{name: "bad mode", f: pplFlags{mode: "tokens"}, maxCtx: 256,
			err: `unknown --mode "tokens" (want passages, docs or full)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.f.unitParams(c.maxCtx, c.text)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p != c.want || c.f.chunk != c.wantChunk {
				t.Errorf("got %+v, chunk %d; want %+v, chunk %d", p, c.f.chunk, c.want, c.wantChunk)
			}
		})
	}
}
