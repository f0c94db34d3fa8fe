package chattmpl

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// filterToJSON is transformers' tojson filter: Python's
// json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), the arguments given by position or by name.
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	var o jsonOptions
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	opts := map[string]jinja.Value{}
	for i, a := range args[1:] {
		if i >= len(names) {
			return jinja.Undefined(), fmt.Errorf("tojson: %d arguments, want at most %d", len(args)-1, len(names))
		}
		opts[names[i]] = a
	}
	for k, v := range kwargs {
		if _, dup := opts[k]; dup {
			return jinja.Undefined(), fmt.Errorf("tojson: argument %s given twice", k)
		}
		opts[k] = v
	}
	for k, v := range opts {
		if v.IsNone() || v.IsUndefined() {
			continue
		}
		switch k {
		case "ensure_ascii":
			o.ensureASCII = v.IsTruthy()
		case "sort_keys":
			o.sortKeys = v.IsTruthy()
		case "indent":
			switch {
			case v.IsInt():
				o.indent, o.indented = strings.Repeat(" ", int(max(0, min(v.AsInt(), 64)))), true
			case v.IsString():
				o.indent, o.indented = v.AsString(), true
			default:
				return jinja.Undefined(), fmt.Errorf("tojson: indent %s: want an integer or a string", v)
			}
		case "separators":
			if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
				return jinja.Undefined(), fmt.Errorf("tojson: separators %s: want two strings", v)
			}
			o.itemSep, o.keySep, o.seps = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString(), true
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: unknown argument %s", k)
		}
	}
	if !o.seps {
		// json.dumps: ", " between items, "," when indenting.
		o.itemSep, o.keySep = ", ", ": "
		if o.indented {
			o.itemSep = ","
		}
	}
	var b strings.Builder
	if err := o.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

type jsonOptions struct {
	ensureASCII, sortKeys, indented, seps bool
	indent, itemSep, keySep               string
}

// maxJSONDepth bounds the nesting tojson follows (Python's recursion
// limit plays this part there), so a cycle made in a template errors.
const maxJSONDepth = 1000

func (o *jsonOptions) newline(b *strings.Builder, level int) {
	if o.indented {
		b.WriteByte('\n')
		for range level {
			b.WriteString(o.indent)
		}
	}
}

func (o *jsonOptions) encode(b *strings.Builder, v jinja.Value, level int) error {
	if level > maxJSONDepth {
		return errors.New("tojson: value nested too deeply (a cycle?)")
	}
	switch {
	case v.IsUndefined():
		return errors.New("tojson: an undefined value is not JSON serializable")
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		o.encodeString(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			if err := o.encode(b, it, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		if o.sortKeys {
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			o.encodeString(b, k)
			b.WriteString(o.keySep)
			val, _ := d.Get(k)
			if err := o.encode(b, val, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: %s is not JSON serializable", v)
	}
	return nil
}

// encodeString writes s as json.dumps does: the escapes \" \\ \n \r \t
// \b \f, other control characters as \u00XX, and with ensure_ascii every
// non-ASCII character as \uXXXX (a surrogate pair above U+FFFF). Invalid
// UTF-8 becomes U+FFFD, as it does on its way into a Python str.
func (o *jsonOptions) encodeString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&0xf])
		b.WriteByte(hex[r>>8&0xf])
		b.WriteByte(hex[r>>4&0xf])
		b.WriteByte(hex[r&0xf])
	}
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			u4(r)
		case r < utf8.RuneSelf || !o.ensureASCII:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			u4(0xd800 + r>>10)
			u4(0xdc00 + r&0x3ff)
		default:
			u4(r)
		}
	}
	b.WriteByte('"')
}

// pyFloat formats f as Python's repr (which json.dumps uses): the
// shortest digits that round-trip, positional for exponents in [-4, 16),
// otherwise d.ddde±XX; integral values keep a ".0".
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	i := strings.LastIndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
