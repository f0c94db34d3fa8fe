package codec

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const committedHeader = "../kernels/cuda/formats.h"

// TestFormatsHeader fails when the committed C header is not what the
// format table generates (run make formats).
func TestFormatsHeader(t *testing.T) {
	got, err := os.ReadFile(committedHeader)
	if err != nil {
		t.Fatal(err)
	}
	if want := CHeader(); !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run make formats (go generate ./codec) and commit it", committedHeader)
	}
}

// TestFormatTable checks the table itself: distinct ids and names, at most
// maxSections sections, and every variable a section or derived quantity
// reads declared in Vars (the C functions take only those).
func TestFormatTable(t *testing.T) {
	ids, names := map[FormatID]bool{}, map[string]bool{}
	for _, f := range Formats() {
		if ids[f.ID] || names[f.Name] {
			t.Errorf("format %s (id %d) repeats an id or name", f.Name, f.ID)
		}
		ids[f.ID], names[f.Name] = true, true
		if g, ok := BuiltinFormat(f.ID); !ok || g != f {
			t.Errorf("BuiltinFormat(%d) = %v, %v, want %s", f.ID, g, ok, f.Name)
		}
		if len(f.Sections) > maxSections {
			t.Errorf("format %s has %d sections, at most %d", f.Name, len(f.Sections), maxSections)
		}
		var used [NumVars]bool
		for _, s := range f.Sections {
			s.Count.uses(&used)
			s.Width.uses(&used)
		}
		for _, q := range f.Derived {
			q.Value.uses(&used)
		}
		declared := map[Var]bool{}
		for _, v := range f.Vars {
			declared[v] = true
		}
		for v, u := range used {
			if u && !declared[Var(v)] {
				t.Errorf("format %s reads %s, which its Vars do not declare", f.Name, Var(v))
			}
		}
	}
	if _, ok := BuiltinFormat(0); ok {
		t.Error("BuiltinFormat(0) found a format")
	}
}

// cHeader is the generated header's functions, parsed for evaluation: each
// is one return expression in C's syntax shared with Go's (+ - * / >> &,
// calls, parentheses), so go/parser reads it.
type cHeader struct {
	fns     map[string]cFunc
	formats map[int64]string // id → function prefix
}

type cFunc struct {
	params []string // "b" for the block
	body   ast.Expr
}

var (
	cFuncRE   = regexp.MustCompile(`(?m)^KK_FORMAT_FN long long (\w+)\(([^)]*)\) \{ return (.*); \}$`)
	cFormatRE = regexp.MustCompile(`(?m)^#define KK_FORMAT_(\w+) (\d+)$`)
)

func parseCHeader(t *testing.T, src []byte) *cHeader {
	h := &cHeader{fns: map[string]cFunc{}, formats: map[int64]string{}}
	for _, m := range cFuncRE.FindAllSubmatch(src, -1) {
		if strings.HasPrefix(string(m[1]), "kk_fmt_") {
			continue // the helpers, which eval implements
		}
		e, err := parser.ParseExpr(string(m[3]))
		if err != nil {
			t.Fatalf("%s: %q: %v", m[1], m[3], err)
		}
		var ps []string
		for _, p := range strings.Split(string(m[2]), ",") {
			f := strings.Fields(strings.TrimSpace(p))
			ps = append(ps, strings.TrimPrefix(f[len(f)-1], "*"))
		}
		h.fns[string(m[1])] = cFunc{params: ps, body: e}
	}
	for _, m := range cFormatRE.FindAllSubmatch(src, -1) {
		id, _ := strconv.ParseInt(string(m[2]), 10, 64)
		h.formats[id] = "kk_" + strings.ToLower(string(m[1]))
	}
	if len(h.fns) == 0 || len(h.formats) == 0 {
		t.Fatal("no functions or formats found in the header")
	}
	return h
}

// call evaluates function fn of the header with the arguments args and the
// block b.
func (h *cHeader) call(fn string, b []byte, args ...int64) (int64, error) {
	f, ok := h.fns[fn]
	if !ok {
		return 0, fmt.Errorf("no function %s", fn)
	}
	env := map[string]int64{}
	for i, p := range f.params {
		if p == "b" {
			continue
		}
		if i >= len(args) {
			return 0, fmt.Errorf("%s: %d arguments for %d parameters", fn, len(args), len(f.params))
		}
		env[p] = args[i]
	}
	return h.eval(f.body, env, b)
}

func (h *cHeader) eval(e ast.Expr, env map[string]int64, b []byte) (int64, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		return strconv.ParseInt(e.Value, 0, 64)
	case *ast.Ident:
		v, ok := env[e.Name]
		if !ok {
			return 0, fmt.Errorf("unbound %s", e.Name)
		}
		return v, nil
	case *ast.ParenExpr:
		return h.eval(e.X, env, b)
	case *ast.BinaryExpr:
		x, err := h.eval(e.X, env, b)
		if err != nil {
			return 0, err
		}
		y, err := h.eval(e.Y, env, b)
		if err != nil {
			return 0, err
		}
		switch e.Op {
		case token.ADD:
			return x + y, nil
		case token.SUB:
			return x - y, nil
		case token.MUL:
			return x * y, nil
		case token.QUO:
			return x / y, nil
		case token.SHR:
			return x >> y, nil
		case token.AND:
			return x & y, nil
		}
		return 0, fmt.Errorf("operator %s", e.Op)
	case *ast.CallExpr:
		name := e.Fun.(*ast.Ident).Name
		var args []int64
		for _, a := range e.Args {
			if id, ok := a.(*ast.Ident); ok && id.Name == "b" {
				continue // the block, passed along
			}
			v, err := h.eval(a, env, b)
			if err != nil {
				return 0, err
			}
			args = append(args, v)
		}
		// The helpers, as their C bodies define them.
		switch name {
		case "kk_fmt_u":
			var u uint64
			for i := args[1] - 1; i >= 0; i-- {
				u = u<<8 | uint64(b[args[0]+i])
			}
			return int64(u), nil
		case "kk_fmt_min":
			return min(args[0], args[1]), nil
		case "kk_fmt_gt":
			if args[0] > args[1] {
				return 1, nil
			}
			return 0, nil
		case "kk_fmt_sel":
			if args[0] != 0 {
				return args[1], nil
			}
			return args[2], nil
		case "kk_fmt_pow2":
			p := int64(1)
			for p < args[0] {
				p <<= 1
			}
			return p, nil
		}
		return h.call(name, b, args...)
	}
	return 0, fmt.Errorf("expression %T", e)
}

// TestFormatsAgree encodes blocks of every codec over a range of shapes
// and settings and checks, on each, that the committed C header, evaluated
// on the block's bytes, puts every section where the Go layout the codec's
// parser uses does, and that its size is the block's length: the kernels
// and the parsers read one layout.
func TestFormatsAgree(t *testing.T) {
	src, err := os.ReadFile(committedHeader)
	if err != nil {
		t.Fatal(err)
	}
	h := parseCHeader(t, src)
	var codecs []Described
	add := func(c Codec, err error) {
		if err != nil {
			t.Fatal(err)
		}
		codecs = append(codecs, c.(Described))
	}
	add(Identity{}, nil)
	add(BF16{}, nil)
	add(Int8{}, nil)
	for _, bits := range []int{2, 4} {
		for _, g := range []int{16, 32, 48} {
			for _, ch := range []bool{false, true} {
				for _, rot := range []bool{false, true} {
					for _, f16 := range []bool{false, true} {
						add(NewInt4(Int4Options{Bits: bits, Group: g, PerChannel: ch, Rotate: rot, F16Params: f16, Seed: 3}))
					}
				}
			}
		}
	}
	for _, bits := range []int{1, 2, 3, 4} {
		for _, rank := range []int{0, 3} {
			for _, cb := range []int{4, 8, 16} {
				o := DefaultKakeyaOptions()
				o.Bits, o.MaxRank, o.CoeffBits, o.OutlierThreshold = bits, rank, cb, 2
				add(NewKakeya(o))
			}
		}
	}
	for _, bits := range []int{2, 3, 4} {
		for _, blk := range []int{8, 32, 128} {
			add(NewTurbo(TurboOptions{Bits: bits, Block: blk, Seed: 5}))
		}
	}
	for _, d := range []int{2, 48, 64, 100, 128} {
		st := pcStats(t, pcBlocks(rand.New(rand.NewPCG(uint64(d), 3)), 4, 8, d), 8, d)
		for _, rate := range []float64{0.1, 1, 2.5, 7} {
			o := DefaultKakeyaPCOptions()
			o.Rate = rate
			add(NewKakeyaPC(o, st, nil))
			o.Entropy = true
			add(NewKakeyaPC(o, st, nil))
			o.Uniform = true
			add(NewKakeyaPC(o, st, nil))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := [][2]int{{1, 2}, {7, 48}, {32, 64}, {33, 100}, {256, 128}, {600, 128}}
	checked := 0
	for _, c := range codecs {
		f, st := c.Format(), c.Settings()
		for _, sh := range shapes {
			n, d := sh[0], sh[1]
			if n*d > 256*128 && f.ID != FormatKakeya {
				continue // the wide outlier positions are Kakeya's alone
			}
			if pc, ok := c.(*KakeyaPC); ok && pc.d != d {
				continue // a calibrated basis fits one dimension
			}
			x := make([]float32, n*d)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
				if rng.IntN(50) == 0 {
					x[i] *= 8
				}
			}
			enc, err := c.Encode(nil, x, n, d)
			if err != nil {
				t.Fatalf("%s %dx%d: %v", c.Name(), n, d, err)
			}
			// The Go side: the fields and settings the parser reads.
			var v Vars
			if err := f.ReadFields(enc, &v); err != nil {
				t.Fatal(err)
			}
			v[VarGroup], v[VarBlock] = st.Group, st.Block
			if pc, ok := c.(*KakeyaPC); ok && f.ID == FormatKakeyaPC {
				v[VarCodeBytes] = pc.codeBytes(n) // the planes' total, from the widths
			}
			gl := f.Layout(&v)
			if gl.Size() != len(enc) {
				t.Fatalf("%s %dx%d: Go layout size %d, block %d bytes", c.Name(), n, d, gl.Size(), len(enc))
			}
			// The C side: the header's functions on the same bytes.
			id, err := h.call("kk_hdr_id", enc)
			if err != nil {
				t.Fatal(err)
			}
			pre, ok := h.formats[id]
			if !ok || pre != "kk_"+f.Name {
				t.Fatalf("%s: header id %d is C format %q, want kk_%s", c.Name(), id, pre, f.Name)
			}
			args := make([]int64, len(f.Vars))
			for i, vr := range f.Vars {
				fn := pre + "_" + vr.String()
				if vr == VarN || vr == VarD {
					fn = "kk_hdr_" + vr.String()
				}
				var val int64
				if _, ok := h.fns[fn]; ok && !(vr == VarGroup && st.Rotated) {
					if val, err = h.call(fn, enc); err != nil {
						t.Fatal(err)
					}
				} else {
					val = int64(v[vr]) // a setting the bytes do not hold
				}
				if val != int64(v[vr]) {
					t.Errorf("%s %dx%d: C reads %s = %d, Go %d", c.Name(), n, d, vr, val, v[vr])
				}
				args[i] = val
			}
			for i, s := range f.Sections {
				off, err := h.call(pre+"_"+s.Name+"_off", nil, args...)
				if err != nil {
					t.Fatal(err)
				}
				ln, err := h.call(pre+"_"+s.Name+"_len", nil, args...)
				if err != nil {
					t.Fatal(err)
				}
				if int(off) != gl.Off(i) || int(ln) != gl.Len(i) {
					t.Errorf("%s %dx%d: section %s at %d (%d bytes) in C, %d (%d bytes) in Go", c.Name(), n, d, s.Name, off, ln, gl.Off(i), gl.Len(i))
				}
			}
			for _, q := range f.Derived {
				got, err := h.call(pre+"_"+q.Name, nil, args...)
				if err != nil {
					t.Fatal(err)
				}
				if want := q.Value.Eval(&v); int(got) != want {
					t.Errorf("%s %dx%d: %s is %d in C, %d in Go", c.Name(), n, d, q.Name, got, want)
				}
			}
			size, err := h.call(pre+"_size", nil, args...)
			if err != nil {
				t.Fatal(err)
			}
			if int(size) != len(enc) {
				t.Errorf("%s %dx%d: C size %d, block %d bytes", c.Name(), n, d, size, len(enc))
			}
			checked++
		}
	}
	if checked < 300 {
		t.Fatalf("checked %d blocks, want at least 300", checked)
	}
}
