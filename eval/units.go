package eval

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A Unit is one independent scoring stream. A fresh sequence per
// configuration is fed Tokens[:Score] in one prefill call, whose last row
// predicts Tokens[Score]; the rest, Tokens[Score:len-1], is then fed in
// chunks (one token at a time on the decode path) and each row predicts the
// next token. So exactly len(Tokens)-Score tokens are scored, and the last
// token is only ever a target.
type Unit struct {
	Tokens []int `json:"-"`
	Score  int   `json:"score_from"`
	Doc    int   `json:"doc"` // index of the source document in docs mode, else 0
}

// Scored returns the number of predictions the unit scores.
func (u Unit) Scored() int { return len(u.Tokens) - u.Score }

// Passages cuts ids into consecutive, non-overlapping windows of ctx+nEval
// tokens, at most max of them (max <= 0: as many as fit; a tail shorter
// than a window is dropped). In each window the first ctx tokens are the
// prefix, prefilled through the serving path (blocks fill and get encoded as
// they fill), and the next nEval tokens are teacher-forced one at a time on
// the decode path. The nEval scored predictions are those of tokens
// ctx..ctx+nEval-1: the first comes from the prefill's last row, the others
// from decoding tokens ctx..ctx+nEval-2. The windows alias ids.
func Passages(ids []int, ctx, nEval, max int) ([][]int, error) {
	if ctx < 1 || nEval < 1 {
		return nil, fmt.Errorf("eval: passages need ctx >= 1 and n_eval >= 1, got ctx %d, n_eval %d", ctx, nEval)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("eval: text has no tokens")
	}
	m := ctx + nEval
	if len(ids) < m {
		return nil, fmt.Errorf("eval: text has %d tokens, one passage needs %d (ctx %d + n_eval %d)", len(ids), m, ctx, nEval)
	}
	n := len(ids) / m
	if max > 0 && n > max {
		n = max
	}
	out := make([][]int, n)
	for i := range out {
		out[i] = ids[i*m : (i+1)*m : (i+1)*m]
	}
	return out, nil
}

// PassageUnits turns Passages into units. When bos >= 0 the first token of
// every passage is replaced by BOS (as llama.cpp's perplexity tool does):
// it is prefix context, never scored, and models trained with BOS behave
// badly without one at position 0.
func PassageUnits(ids []int, ctx, nEval, max, bos int) ([]Unit, error) {
	ps, err := Passages(ids, ctx, nEval, max)
	if err != nil {
		return nil, err
	}
	us := make([]Unit, len(ps))
	for i, p := range ps {
		t := append([]int(nil), p...)
		if bos >= 0 {
			t[0] = bos
		}
		us[i] = Unit{Tokens: t, Score: ctx}
	}
	return us, nil
}

// Windows is the sliding-window perplexity of Hugging Face's stride method
// (and, with stride = ctx/2, of llama.cpp's perplexity tool): windows of ctx
// tokens start every stride tokens; each window scores only the tokens past
// the end of the previous one, so every token but ids[0] is scored exactly
// once, and the overlap serves as context (at least ctx-stride tokens of it
// after the first window). The last window ends at len(ids). When bos >= 0
// each window's first token is replaced by BOS; that token is context, never
// scored (put BOS at ids[0] to have the first text token scored too).
func Windows(ids []int, ctx, stride, bos int) ([]Unit, error) {
	if ctx < 2 {
		return nil, fmt.Errorf("eval: window ctx must be >= 2, got %d", ctx)
	}
	if stride < 1 || stride > ctx-1 {
		return nil, fmt.Errorf("eval: stride must be in 1..ctx-1 = %d, got %d", ctx-1, stride)
	}
	if len(ids) < 2 {
		return nil, fmt.Errorf("eval: text has %d tokens, need at least 2 to score one", len(ids))
	}
	var us []Unit
	prevEnd := 1 // ids[0] has no prediction
	for start := 0; ; start += stride {
		end := min(start+ctx, len(ids))
		t := append([]int(nil), ids[start:end]...)
		if bos >= 0 {
			t[0] = bos
		}
		us = append(us, Unit{Tokens: t, Score: prevEnd - start})
		if end == len(ids) {
			return us, nil
		}
		prevEnd = end
	}
}

// DocUnits scores each document on its own: the tokens of docs[i] (which
// should start with BOS where the model has one) are one unit scoring every
// token after the first. A document longer than ctx is not truncated: it is
// scored by Windows with the given stride, so each of its tokens is still
// scored once, with at least ctx-stride tokens of context (BOS is put at
// each window start when bos >= 0). Documents of fewer than 2 tokens have
// nothing to score and are skipped.
func DocUnits(docs [][]int, ctx, stride, bos int) ([]Unit, error) {
	var us []Unit
	for i, d := range docs {
		if len(d) < 2 {
			continue
		}
		if len(d) <= ctx {
			us = append(us, Unit{Tokens: append([]int(nil), d...), Score: 1, Doc: i})
			continue
		}
		ws, err := Windows(d, ctx, stride, bos)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		for j := range ws {
			ws[j].Doc = i
		}
		us = append(us, ws...)
	}
	if len(us) == 0 {
		return nil, fmt.Errorf("eval: no document has a token to score")
	}
	return us, nil
}

// Document separators for SplitDocuments.
const (
	SepBlank = "blank" // paragraphs separated by blank lines (TinyStories val.txt)
	SepLine  = "line"  // every non-empty line (wiki.test.raw)
	SepAuto  = "auto"  // SepBlank if the text has a blank line between two others, else SepLine
)

// ResolveDocSep returns the separator SplitDocuments uses for sep on text:
// SepBlank and SepLine as they are; for SepAuto (or "") SepBlank when the
// text has a blank line (empty or white space only) between two non-empty
// lines, else SepLine. Any other sep is an error listing the valid ones.
func ResolveDocSep(sep, text string) (string, error) {
	switch sep {
	case SepBlank, SepLine:
		return sep, nil
	case SepAuto, "":
		if hasBlankLine(text) {
			return SepBlank, nil
		}
		return SepLine, nil
	}
	return "", fmt.Errorf("eval: unknown document separator %q (want %s, %s or %s)", sep, SepBlank, SepLine, SepAuto)
}

// hasBlankLine reports whether a white-space-only line separates two
// non-empty lines of text.
func hasBlankLine(text string) bool {
	seenText, blank := false, false
	for l := range strings.Lines(text) {
		if strings.TrimSpace(l) == "" {
			blank = seenText
			continue
		}
		if blank {
			return true
		}
		seenText = true
	}
	return false
}

// SplitDocuments cuts text into documents: paragraphs between blank lines
// for SepBlank, non-empty lines for SepLine, either as ResolveDocSep
// chooses for SepAuto. Each document is trimmed of surrounding white space
// (CR of CRLF line ends included); lines inside a paragraph keep their "\n"
// joins.
func SplitDocuments(text, sep string) ([]string, error) {
	sep, err := ResolveDocSep(sep, text)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(text, "\n")
	var docs []string
	switch sep {
	case SepLine:
		for _, l := range lines {
			if t := strings.TrimSpace(l); t != "" {
				docs = append(docs, t)
			}
		}
	case SepBlank:
		var cur []string
		flush := func() {
			if len(cur) > 0 {
				docs = append(docs, strings.TrimSpace(strings.Join(cur, "\n")))
				cur = cur[:0]
			}
		}
		for _, l := range lines {
			l = strings.TrimRight(l, "\r")
			if strings.TrimSpace(l) == "" {
				flush()
				continue
			}
			cur = append(cur, l)
		}
		flush()
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("eval: text has no documents")
	}
	return docs, nil
}

// Evaluation modes.
const (
	ModePassages = "passages" // Passages: prefix prefill + teacher-forced decode
	ModeDocs     = "docs"     // DocUnits: every document on its own from BOS
	ModeFull     = "full"     // Windows: sliding-window perplexity of the whole text
)

// A Tokenizer turns text into token ids.
type Tokenizer interface {
	Encode(text string, addSpecial bool) []int
	BOS() (int, bool)
}

// UnitParams choose how BuildUnits cuts a text.
type UnitParams struct {
	Mode   string // ModePassages, ModeDocs or ModeFull
	Ctx    int    // passages: prefix length; docs and full: window length
	NEval  int    // passages: teacher-forced tokens per passage
	Stride int    // docs and full: window stride (0: Ctx/2)
	Max    int    // at most this many passages, documents or windows (0: all)
	DocSep string // docs: SepBlank, SepLine or SepAuto ("" too); see ResolveDocSep
}

// BuildUnits tokenizes text and cuts it into units for p.Mode. The text is
// encoded without special tokens; BOS, where the tokenizer has one, starts
// every document (docs), the whole text (full) and takes the place of the
// first, context-only token of every passage or window.
func BuildUnits(text string, tok Tokenizer, p UnitParams) ([]Unit, error) {
	bos, ok := tok.BOS()
	if !ok {
		bos = -1
	}
	stride := p.Stride
	if stride == 0 {
		stride = p.Ctx / 2
	}
	switch p.Mode {
	case ModePassages:
		return PassageUnits(tok.Encode(text, false), p.Ctx, p.NEval, p.Max, bos)
	case ModeFull:
		ids := tok.Encode(text, false)
		if bos >= 0 {
			ids = append([]int{bos}, ids...)
		}
		us, err := Windows(ids, p.Ctx, stride, bos)
		if err != nil {
			return nil, err
		}
		if p.Max > 0 && len(us) > p.Max {
			us = us[:p.Max]
		}
		return us, nil
	case ModeDocs:
		docs, err := SplitDocuments(text, p.DocSep)
		if err != nil {
			return nil, err
		}
		if p.Max > 0 && len(docs) > p.Max {
			docs = docs[:p.Max]
		}
		ids := make([][]int, len(docs))
		for i, d := range docs {
			ids[i] = tok.Encode(d, false)
			if bos >= 0 {
				ids[i] = append([]int{bos}, ids[i]...)
			}
		}
		return DocUnits(ids, p.Ctx, stride, bos)
	}
	return nil, fmt.Errorf("eval: unknown mode %q (want %s, %s or %s)", p.Mode, ModePassages, ModeDocs, ModeFull)
}

// A DocRange selects the documents [From, To) of a text: by index, or,
// when Fraction is set, by fractions of the document count (From 0.75, To
// 1: the last quarter).
type DocRange struct {
	From, To float64
	Fraction bool
}

// ParseDocRange reads FROM:TO, where each end is a document index (0-based,
// TO excluded) or, when either end has a decimal point or a percent sign,
// a fraction of the documents ("0.75:1", "75%:"). An empty FROM means the
// first document, an empty TO the end.
func ParseDocRange(s string) (DocRange, error) {
	from, to, ok := strings.Cut(s, ":")
	if !ok {
		return DocRange{}, fmt.Errorf("eval: document range %q: want FROM:TO (e.g. 3226:4302 or 0.75:1)", s)
	}
	r := DocRange{Fraction: strings.ContainsAny(s, ".%")}
	parse := func(v string, empty float64) (float64, error) {
		v = strings.TrimSpace(v)
		if v == "" {
			return empty, nil
		}
		scale := 1.0
		if p, ok := strings.CutSuffix(v, "%"); ok {
			v, scale = p, 0.01
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || (!r.Fraction && f != math.Trunc(f)) {
			return 0, fmt.Errorf("eval: document range %q: %q is not a document index or fraction", s, v)
		}
		return f * scale, nil
	}
	var err error
	if r.From, err = parse(from, 0); err != nil {
		return DocRange{}, err
	}
	end := math.Inf(1)
	if r.Fraction {
		end = 1
	}
	if r.To, err = parse(to, end); err != nil {
		return DocRange{}, err
	}
	if r.Fraction && r.To > 1 {
		return DocRange{}, fmt.Errorf("eval: document range %q: a fraction above 1", s)
	}
	if r.To <= r.From {
		return DocRange{}, fmt.Errorf("eval: document range %q selects nothing", s)
	}
	return r, nil
}

// SelectDocuments returns the documents of text (split by sep, see
// SplitDocuments) that r selects, joined again by the separator, with the
// range [first, end) they were and the document count. A fraction f of n
// documents starts at document floor(f*n).
func SelectDocuments(text, sep string, r DocRange) (selected string, first, end, total int, err error) {
	sep, err = ResolveDocSep(sep, text)
	if err != nil {
		return "", 0, 0, 0, err
	}
	docs, err := SplitDocuments(text, sep)
	if err != nil {
		return "", 0, 0, 0, err
	}
	n := float64(len(docs))
	from, to := r.From, min(r.To, n)
	if r.Fraction {
		from, to = math.Floor(r.From*n), math.Floor(r.To*n)
	}
	if from >= to || from >= n {
		return "", 0, 0, 0, fmt.Errorf("eval: documents [%g, %g) of a text of %d documents select nothing", from, to, len(docs))
	}
	join := "\n"
	if sep == SepBlank {
		join = "\n\n"
	}
	return strings.Join(docs[int(from):int(to)], join) + "\n", int(from), int(to), len(docs), nil
}
