package eval

import (
	"reflect"
	"strings"
	"testing"
)

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestPassages(t *testing.T) {
	tests := []struct {
		name             string
		n, ctx, nEval, m int
		want             [][]int
		err              string
	}{
		{name: "two exact", n: 10, ctx: 3, nEval: 2, want: [][]int{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}},
		{name: "tail dropped", n: 12, ctx: 3, nEval: 2, want: [][]int{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}},
		{name: "max", n: 12, ctx: 3, nEval: 2, m: 1, want: [][]int{{0, 1, 2, 3, 4}}},
		{name: "max above available", n: 10, ctx: 3, nEval: 2, m: 9, want: [][]int{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}},
		{name: "exactly one", n: 5, ctx: 4, nEval: 1, want: [][]int{{0, 1, 2, 3, 4}}},
		{name: "too short", n: 4, ctx: 3, nEval: 2, err: "text has 4 tokens, one passage needs 5"},
		{name: "empty", n: 0, ctx: 3, nEval: 2, err: "text has no tokens"},
		{name: "zero ctx", n: 10, ctx: 0, nEval: 2, err: "ctx >= 1"},
		{name: "zero n_eval", n: 10, ctx: 3, nEval: 0, err: "n_eval >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Passages(seq(tt.n), tt.ctx, tt.nEval, tt.m)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPassageUnits(t *testing.T) {
	ids := []int{7, 8, 9, 10, 11, 12, 13, 14}
	us, err := PassageUnits(ids, 2, 2, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Unit{{Tokens: []int{1, 8, 9, 10}, Score: 2}, {Tokens: []int{1, 12, 13, 14}, Score: 2}}
	if !reflect.DeepEqual(us, want) {
		t.Errorf("got %v, want %v", us, want)
	}
	if ids[0] != 7 || ids[4] != 11 {
		t.Errorf("PassageUnits changed its input: %v", ids)
	}
	for _, u := range us {
		if u.Scored() != 2 {
			t.Errorf("unit %v scores %d, want n_eval 2", u, u.Scored())
		}
	}
}

func TestWindows(t *testing.T) {
	got, err := Windows(seq(10), 4, 2, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Unit{
		{Tokens: []int{0, 1, 2, 3}, Score: 1}, // scores 1,2,3
		{Tokens: []int{2, 3, 4, 5}, Score: 2}, // scores 4,5
		{Tokens: []int{4, 5, 6, 7}, Score: 2},
		{Tokens: []int{6, 7, 8, 9}, Score: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	got, err = Windows(seq(6), 4, 3, 99)
	if err != nil {
		t.Fatal(err)
	}
	want = []Unit{{Tokens: []int{99, 1, 2, 3}, Score: 1}, {Tokens: []int{99, 4, 5}, Score: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with BOS: got %v, want %v", got, want)
	}

	// Every token but the first is scored exactly once, with at least
	// ctx-stride tokens of context after the first window.
	for _, c := range []struct{ n, ctx, stride int }{{2, 2, 1}, {3, 8, 4}, {100, 16, 8}, {101, 16, 5}, {57, 10, 9}, {64, 32, 1}} {
		us, err := Windows(seq(c.n), c.ctx, c.stride, -1)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		count := make([]int, c.n)
		for i, u := range us {
			if len(u.Tokens) > c.ctx || u.Score < 1 || u.Score >= len(u.Tokens) {
				t.Fatalf("%+v: window %d bad: %d tokens, score from %d", c, i, len(u.Tokens), u.Score)
			}
			if i > 0 && u.Score < c.ctx-c.stride {
				t.Errorf("%+v: window %d has %d tokens of context, want >= %d", c, i, u.Score, c.ctx-c.stride)
			}
			for _, tok := range u.Tokens[u.Score:] {
				count[tok]++
			}
		}
		for tok, k := range count {
			if want := min(tok, 1); k != want {
				t.Errorf("%+v: token %d scored %d times, want %d", c, tok, k, want)
			}
		}
	}

	for _, c := range []struct{ n, ctx, stride int }{{10, 1, 1}, {10, 4, 0}, {10, 4, 4}, {1, 4, 2}} {
		if _, err := Windows(seq(c.n), c.ctx, c.stride, -1); err == nil {
			t.Errorf("Windows(%+v): want an error", c)
		}
	}
}

func TestDocUnits(t *testing.T) {
	docs := [][]int{{1, 5, 6}, {1}, {}, {1, 2, 3, 4, 5, 6, 7}}
	got, err := DocUnits(docs, 4, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Unit{
		{Tokens: []int{1, 5, 6}, Score: 1, Doc: 0},
		// doc 3 is longer than ctx 4: windows of 4, stride 2, BOS at each start
		{Tokens: []int{1, 2, 3, 4}, Score: 1, Doc: 3},
		{Tokens: []int{1, 4, 5, 6}, Score: 2, Doc: 3},
		{Tokens: []int{1, 6, 7}, Score: 2, Doc: 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := DocUnits([][]int{{1}, {}}, 4, 2, 1); err == nil {
		t.Error("no scorable document: want an error")
	}
}

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name, text, sep string
		want            []string
		err             bool
	}{
		{name: "blank", sep: SepBlank, text: "a b\n\nc\n\n\nd\n", want: []string{"a b", "c", "d"}},
		{name: "blank crlf and spaces", sep: SepBlank, text: "\r\n a\r\nb \r\n  \r\nc\r\n", want: []string{"a\nb", "c"}},
		{name: "line", sep: SepLine, text: " = T = \r\n\r\n x y \r\nz", want: []string{"= T =", "x y", "z"}},
		{name: "empty", sep: SepBlank, text: "\n \n", err: true},
		{name: "auto blank", sep: SepAuto, text: "a\nb\n \nc\n", want: []string{"a\nb", "c"}},
		{name: "auto line", sep: SepAuto, text: "a\nb\n\n", want: []string{"a", "b"}},
		{name: "bad sep", sep: "para", text: "a", err: true},
	}
	for _, tt := range tests {
		got, err := SplitDocuments(tt.text, tt.sep)
		if (err != nil) != tt.err {
			t.Errorf("%s: err = %v", tt.name, err)
			continue
		}
		if !tt.err && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestResolveDocSep(t *testing.T) {
	tests := []struct {
		name, sep, text, want string
	}{
		{"blank kept", SepBlank, "a\nb", SepBlank},
		{"line kept", SepLine, "a\n\nb", SepLine},
		{"auto paragraphs", SepAuto, "a\nb\n\nc", SepBlank},
		{"auto crlf", SepAuto, "a\r\n\r\nb\r\n", SepBlank},
		{"auto white-space line", SepAuto, "a\n \t\nb", SepBlank},
		{"auto lines", SepAuto, "= T =\nx y\nz\n", SepLine},
		{"auto blank only at the ends", SepAuto, "\n\na\nb\n\n\n", SepLine},
		{"empty is auto", "", "a\n\nb", SepBlank},
		{"auto empty text", SepAuto, "", SepLine},
	}
	for _, tt := range tests {
		got, err := ResolveDocSep(tt.sep, tt.text)
		if err != nil || got != tt.want {
			t.Errorf("%s: ResolveDocSep(%q, %q) = %q, %v; want %q", tt.name, tt.sep, tt.text, got, err, tt.want)
		}
	}
	// The error names the value and every valid one, auto included.
	for _, f := range []func() error{
		func() error { _, err := ResolveDocSep("para", "a"); return err },
		func() error { _, err := SplitDocuments("a", "para"); return err },
		func() error {
			_, err := BuildUnits("a", byteTok{true}, UnitParams{Mode: ModeDocs, Ctx: 4, DocSep: "para"})
			return err
		},
	} {
		const want = `unknown document separator "para" (want blank, line or auto)`
		if err := f(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one containing %q", err, want)
		}
	}
}

// byteTok encodes each byte of the text as its value + 3; BOS is 1.
type byteTok struct{ bos bool }

func (b byteTok) Encode(text string, addSpecial bool) []int {
	var ids []int
	if addSpecial && b.bos {
		ids = append(ids, 1)
	}
	for i := 0; i < len(text); i++ {
		ids = append(ids, int(text[i])+3)
	}
	return ids
}

func (b byteTok) BOS() (int, bool) { return 1, b.bos }

func TestBuildUnits(t *testing.T) {
	text := "ab\n\ncde\n\nf"
	tests := []struct {
		name string
		tok  byteTok
		p    UnitParams
		want []Unit
		err  string
	}{
		{name: "docs", tok: byteTok{true}, p: UnitParams{Mode: ModeDocs, Ctx: 16, DocSep: SepBlank},
			want: []Unit{{Tokens: []int{1, 'a' + 3, 'b' + 3}, Score: 1}, {Tokens: []int{1, 'c' + 3, 'd' + 3, 'e' + 3}, Score: 1, Doc: 1}, {Tokens: []int{1, 'f' + 3}, Score: 1, Doc: 2}}},
		{name: "docs max", tok: byteTok{true}, p: UnitParams{Mode: ModeDocs, Ctx: 16, DocSep: SepBlank, Max: 1},
			want: []Unit{{Tokens: []int{1, 'a' + 3, 'b' + 3}, Score: 1}}},
		{name: "docs auto", tok: byteTok{true}, p: UnitParams{Mode: ModeDocs, Ctx: 16, DocSep: SepAuto, Max: 1},
			want: []Unit{{Tokens: []int{1, 'a' + 3, 'b' + 3}, Score: 1}}},
		{name: "docs no bos", tok: byteTok{false}, p: UnitParams{Mode: ModeDocs, Ctx: 16, DocSep: SepBlank},
			want: []Unit{{Tokens: []int{'a' + 3, 'b' + 3}, Score: 1}, {Tokens: []int{'c' + 3, 'd' + 3, 'e' + 3}, Score: 1, Doc: 1}}},
		{name: "passages", tok: byteTok{true}, p: UnitParams{Mode: ModePassages, Ctx: 3, NEval: 2},
			want: []Unit{{Tokens: []int{1, 'b' + 3, '\n' + 3, '\n' + 3, 'c' + 3}, Score: 3}, {Tokens: []int{1, 'e' + 3, '\n' + 3, '\n' + 3, 'f' + 3}, Score: 3}}},
		{name: "full", tok: byteTok{true}, p: UnitParams{Mode: ModeFull, Ctx: 8},
			want: []Unit{
				{Tokens: []int{1, 'a' + 3, 'b' + 3, '\n' + 3, '\n' + 3, 'c' + 3, 'd' + 3, 'e' + 3}, Score: 1},
				{Tokens: []int{1, 'c' + 3, 'd' + 3, 'e' + 3, '\n' + 3, '\n' + 3, 'f' + 3}, Score: 4},
			}},
		{name: "passages too short", tok: byteTok{true}, p: UnitParams{Mode: ModePassages, Ctx: 10, NEval: 4}, err: "text has 10 tokens, one passage needs 14"},
		{name: "bad mode", tok: byteTok{true}, p: UnitParams{Mode: "chunks", Ctx: 4}, err: "unknown mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BuildUnits(text, tt.tok, tt.p)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestDocRange(t *testing.T) {
	text := "a\n\nb\n\nc\n\nd\n"
	for _, tt := range []struct {
		in, want string
		first    int
		err      string
	}{
		{"1:3", "b\n\nc\n", 1, ""},
		{"2:", "c\n\nd\n", 2, ""},
		{":1", "a\n", 0, ""},
		{"0.75:1", "d\n", 3, ""},
		{"0.5:", "c\n\nd\n", 2, ""},
		{"25%:75%", "b\n\nc\n", 1, ""},
		{"1:100", "b\n\nc\n\nd\n", 1, ""},
		{"4:9", "", 0, "select nothing"},
		{"3:1", "", 0, "selects nothing"},
		{"x:1", "", 0, `"x" is not a document index`},
		{"1.5:2", "", 0, "a fraction above 1"},
		{"7", "", 0, "want FROM:TO"},
		{"-1:2", "", 0, `"-1" is not`},
	} {
		r, err := ParseDocRange(tt.in)
		var got string
		var first, end, total int
		if err == nil {
			got, first, end, total, err = SelectDocuments(text, SepAuto, r)
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want || first != tt.first || total != 4 || end-first != strings.Count(got, "\n")-strings.Count(got, "\n\n") {
			t.Errorf("%q: %q, [%d, %d) of %d, %v; want %q, first %d of 4", tt.in, got, first, end, total, err, tt.want, tt.first)
		}
	}
}
