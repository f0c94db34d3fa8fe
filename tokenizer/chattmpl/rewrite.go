package chattmpl

import (
	"fmt"
	"strings"
)

// toJSONFunc is the global the tojson filter becomes (see rewriteToJSON).
const toJSONFunc = "__kakeya_tojson"

// rewriteToJSON turns every application of the filter tojson in the
// expressions of a template, `operand | tojson` or
// `operand | tojson(args)`, into a call of a global function,
// `__kakeya_tojson(operand, args)`. The engine's own tojson sorts the keys
// and escapes HTML when it indents, unlike the json.dumps transformers
// runs, and the engine has no way to replace a filter; this is the one
// change made to a template's source. Text, comments, string literals
// and raw blocks are left alone.
func rewriteToJSON(src string) (string, error) {
	if !strings.Contains(src, "tojson") {
		return src, nil
	}
	var b strings.Builder
	for i := 0; i < len(src); {
		j := strings.Index(src[i:], "{")
		if j < 0 || i+j+1 >= len(src) {
			b.WriteString(src[i:])
			break
		}
		j += i
		b.WriteString(src[i:j])
		var closer string
		switch src[j+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			k := strings.Index(src[j+2:], "#}")
			if k < 0 {
				return "", fmt.Errorf("comment at byte %d is not closed", j)
			}
			b.WriteString(src[j : j+2+k+2])
			i = j + 2 + k + 2
			continue
		default:
			b.WriteByte('{')
			i = j + 1
			continue
		}
		end, err := blockEnd(src, j+2, closer)
		if err != nil {
			return "", err
		}
		body := src[j+2 : end]
		if closer == "%}" && isRaw(body) {
			k := strings.Index(src[end:], "endraw")
			if k < 0 {
				return "", fmt.Errorf("raw block at byte %d is not closed", j)
			}
			k = strings.Index(src[end+k:], "%}")
			if k < 0 {
				return "", fmt.Errorf("raw block at byte %d is not closed", j)
			}
			stop := end + strings.Index(src[end:], "endraw") + k + 2
			b.WriteString(src[j:stop])
			i = stop
			continue
		}
		body, err = rewriteExpr(body)
		if err != nil {
			return "", fmt.Errorf("expression at byte %d: %w", j, err)
		}
		b.WriteString(src[j : j+2])
		b.WriteString(body)
		b.WriteString(closer)
		i = end + 2
	}
	return b.String(), nil
}

// isRaw reports whether a statement's body is `raw` (with whitespace
// control).
func isRaw(body string) bool {
	return strings.Trim(body, "-+ \t\r\n") == "raw"
}

// blockEnd returns the index of closer ending the tag whose body starts at
// from, skipping string literals.
func blockEnd(src string, from int, closer string) (int, error) {
	for i := from; i < len(src); i++ {
		switch c := src[i]; {
		case c == '\'' || c == '"':
			k, err := stringEnd(src, i)
			if err != nil {
				return 0, err
			}
			i = k
		case strings.HasPrefix(src[i:], closer):
			return i, nil
		}
	}
	return 0, fmt.Errorf("tag at byte %d is not closed by %s", from-2, closer)
}

// stringEnd returns the index of the quote closing the string literal
// opening at i.
func stringEnd(src string, i int) (int, error) {
	q := src[i]
	for k := i + 1; k < len(src); k++ {
		switch src[k] {
		case '\\':
			k++
		case q:
			return k, nil
		}
	}
	return 0, fmt.Errorf("string at byte %d is not closed", i)
}

// token is a lexical token of a Jinja expression: its kind ('n' a name,
// 's' a string, '0' a number, 'p' punctuation) and its span.
type token struct {
	kind       byte
	start, end int
}

func lex(e string) ([]token, error) {
	var toks []token
	for i := 0; i < len(e); {
		c := e[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			k, err := stringEnd(e, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{'s', i, k + 1})
			i = k + 1
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			k := i
			for k < len(e) && (e[k] == '_' || e[k] >= 'a' && e[k] <= 'z' || e[k] >= 'A' && e[k] <= 'Z' || e[k] >= '0' && e[k] <= '9') {
				k++
			}
			toks = append(toks, token{'n', i, k})
			i = k
		case c >= '0' && c <= '9':
			k := i
			for k < len(e) && (e[k] >= '0' && e[k] <= '9' || e[k] == '.' || e[k] == '_') {
				k++
			}
			toks = append(toks, token{'0', i, k})
			i = k
		default:
			toks = append(toks, token{'p', i, i + 1})
			i++
		}
	}
	return toks, nil
}

// keywords end an operand when scanning back from a filter.
var keywords = map[string]bool{"and": true, "or": true, "not": true, "in": true, "is": true, "if": true,
	"else": true, "for": true, "set": true, "elif": true, "return": true, "recursive": true}

// rewriteExpr rewrites the tojson filters of one tag's body, the
// rightmost first, until none is left.
func rewriteExpr(e string) (string, error) {
	for n := 0; ; n++ {
		if n > 1000 {
			return "", fmt.Errorf("too many tojson filters")
		}
		toks, err := lex(e)
		if err != nil {
			return "", err
		}
		at := -1
		for k := len(toks) - 1; k > 0; k-- {
			if toks[k].kind == 'n' && e[toks[k].start:toks[k].end] == "tojson" && text(e, toks[k-1]) == "|" {
				at = k
				break
			}
		}
		if at < 0 {
			return e, nil
		}
		start, err := operandStart(e, toks, at-1)
		if err != nil {
			return "", err
		}
		args, end := "", toks[at].end
		if at+1 < len(toks) && text(e, toks[at+1]) == "(" {
			close, err := matchForward(e, toks, at+1)
			if err != nil {
				return "", err
			}
			args = e[toks[at+1].end:toks[close].start]
			end = toks[close].end
		}
		operand := e[toks[start].start:toks[at-1].start]
		call := toJSONFunc + "(" + strings.TrimSpace(operand)
		if strings.TrimSpace(args) != "" {
			call += ", " + args
		}
		call += ")"
		e = e[:toks[start].start] + call + e[end:]
	}
}

func text(e string, t token) string { return e[t.start:t.end] }

// operandStart returns the index of the first token of the operand whose
// filter bar is toks[bar]: a chain of primaries (names, literals,
// bracketed groups) joined by attribute access, subscripts, calls and
// earlier filters, as Jinja binds them tighter than any operator.
func operandStart(e string, toks []token, bar int) (int, error) {
	k := bar - 1
	if k < 0 {
		return 0, fmt.Errorf("filter tojson has no operand")
	}
	for {
		// One primary with its postfixes, scanning back.
		for {
			t := toks[k]
			switch s := text(e, t); {
			case s == ")" || s == "]" || s == "}":
				open, err := matchBack(e, toks, k)
				if err != nil {
					return 0, err
				}
				k = open
			case t.kind == 'n' && keywords[s]:
				return 0, fmt.Errorf("filter tojson has no operand before %q", s)
			case t.kind == 'n' || t.kind == 's' || t.kind == '0':
			default:
				return 0, fmt.Errorf("filter tojson has no operand before %q", s)
			}
			// A postfix continues the primary leftwards: `.name`, a call
			// or subscript after a name or group, adjacent strings.
			if k > 0 {
				prev := toks[k-1]
				ps := text(e, prev)
				if ps == "." {
					k -= 2
					if k < 0 {
						return 0, fmt.Errorf("expression starts with '.'")
					}
					continue
				}
				cur := text(e, toks[k])
				if (cur == "(" || cur == "[") && (prev.kind == 'n' && !keywords[ps] || ps == ")" || ps == "]") {
					k--
					continue
				}
			}
			break
		}
		// An earlier filter in the chain: `a | f | tojson`.
		if k >= 2 && text(e, toks[k-1]) == "|" {
			k -= 2
			continue
		}
		return k, nil
	}
}

var pairs = map[string]string{")": "(", "]": "[", "}": "{"}

// matchBack returns the index of the bracket opening the one closing at k.
func matchBack(e string, toks []token, k int) (int, error) {
	depth := 0
	for i := k; i >= 0; i-- {
		switch text(e, toks[i]) {
		case ")", "]", "}":
			depth++
		case "(", "[", "{":
			depth--
			if depth == 0 {
				if pairs[text(e, toks[k])] != text(e, toks[i]) {
					return 0, fmt.Errorf("unbalanced brackets")
				}
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced brackets")
}

// matchForward returns the index of the bracket closing the one opening at k.
func matchForward(e string, toks []token, k int) (int, error) {
	depth := 0
	for i := k; i < len(toks); i++ {
		switch text(e, toks[i]) {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced brackets")
}
