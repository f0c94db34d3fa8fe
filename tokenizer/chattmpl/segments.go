package chattmpl

import (
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// Segment is a run of rendered text: the template's own markup (turn
// markers, role headers, special tokens), or, with Content set, text that
// came from the messages (their content, text parts and
// reasoning_content), which a tokenizer should not parse for special
// tokens: a user who types "<|im_end|>" writes text, not a turn's end.
type Segment struct {
	Text    string
	Content bool
}

// Two noncharacters delimit message text in the marked rendering.
const (
	markOpen  = "\uFDD0"
	markClose = "\uFDD1"
)

// RenderSegments renders as Render does and splits the text into markup
// and message content. It renders a second time with each message text
// wrapped in delimiters (outside its leading and trailing whitespace, so
// trim and strip keep them) and trusts the delimiters only if, removed,
// they leave exactly Render's text: the split is then exact, and exact is
// true. A template that inspects the text in a way the delimiters change
// (content.startswith(...), a split on a marker), or message text that
// holds a delimiter itself, gives exact false and one markup segment of
// the whole text, as if no text were content.
func (t *Template) RenderSegments(in Input) (segs []Segment, exact bool, err error) {
	text, err := t.Render(in)
	if err != nil {
		return nil, false, err
	}
	whole := []Segment{{Text: text}}
	if text == "" {
		return nil, true, nil
	}
	data, err := t.variables(in)
	if err != nil {
		return nil, false, err
	}
	if !markMessages(data["messages"]) {
		return whole, false, nil
	}
	data["raise_exception"] = jinja.NewCallable("raise_exception", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		return jinja.Undefined(), errRaised
	})
	marked, err := t.execute(data)
	if err != nil {
		return whole, false, nil
	}
	segs, ok := splitMarked(marked)
	if !ok {
		return whole, false, nil
	}
	var joined strings.Builder
	for _, s := range segs {
		joined.WriteString(s.Text)
	}
	if joined.String() != text {
		return whole, false, nil
	}
	return segs, true, nil
}

// errRaised stops a marked rendering that raised where the plain one did
// not.
var errRaised = &Error{Message: "raised in the marked rendering"}

// markMessages wraps the text of each message (content as a string or as
// text parts, reasoning_content, and the string values of its tool calls'
// arguments) in the delimiters, in place. It reports false when some text
// already holds a delimiter.
func markMessages(msgs jinja.Value) bool {
	if !msgs.IsList() {
		return false
	}
	ok := true
	marked := func(s string) (string, bool) {
		if strings.Contains(s, markOpen) || strings.Contains(s, markClose) {
			ok = false
			return s, false
		}
		core := strings.TrimFunc(s, unicode.IsSpace)
		if core == "" {
			return s, false // whitespace only: no special token can hide in it
		}
		lead := s[:strings.Index(s, core)]
		trail := s[len(lead)+len(core):]
		return lead + markOpen + core + markClose + trail, true
	}
	mark := func(d *jinja.Dict, key string) {
		v, found := d.Get(key)
		if !found || !v.IsString() || v.AsString() == "" {
			return
		}
		if m, changed := marked(v.AsString()); changed {
			d.Set(key, jinja.NewString(m))
		}
	}
	// markAll marks every string in a JSON-like value (the keys aside).
	var markAll func(v jinja.Value)
	markAll = func(v jinja.Value) {
		switch {
		case v.IsDict():
			d := v.AsDict()
			for _, k := range d.Keys {
				if e, _ := d.Get(k); e.IsString() {
					mark(d, k)
				} else {
					markAll(e)
				}
			}
		case v.IsList():
			items := v.AsList().Items
			for i, e := range items {
				if e.IsString() {
					if m, changed := marked(e.AsString()); changed {
						items[i] = jinja.NewString(m)
					}
				} else {
					markAll(e)
				}
			}
		}
	}
	for _, m := range msgs.AsList().Items {
		if !m.IsDict() {
			continue
		}
		d := m.AsDict()
		mark(d, "content")
		mark(d, "reasoning_content")
		if c, found := d.Get("content"); found && c.IsList() {
			for _, p := range c.AsList().Items {
				if p.IsDict() {
					mark(p.AsDict(), "text")
				}
			}
		}
		// A call's arguments are the client's text too (the names are
		// not: templates compare them).
		if calls, found := d.Get("tool_calls"); found && calls.IsList() {
			for _, c := range calls.AsList().Items {
				if !c.IsDict() {
					continue
				}
				f := c.AsDict()
				if fn, found := f.Get("function"); found && fn.IsDict() {
					f = fn.AsDict()
				}
				if args, found := f.Get("arguments"); found && args.IsString() {
					mark(f, "arguments")
				} else if found {
					markAll(args)
				}
			}
		}
	}
	return ok
}

// splitMarked cuts a marked rendering at its delimiters; ok is false if
// they do not pair up.
func splitMarked(s string) (segs []Segment, ok bool) {
	in := false
	for s != "" {
		delim := markOpen
		if in {
			delim = markClose
		}
		i := strings.Index(s, delim)
		other := strings.Index(s, map[bool]string{false: markClose, true: markOpen}[in])
		if other >= 0 && (i < 0 || other < i) {
			return nil, false // a delimiter out of turn: nested or unpaired
		}
		if i < 0 {
			if in {
				return nil, false
			}
			segs = appendSegment(segs, Segment{Text: s})
			break
		}
		segs = appendSegment(segs, Segment{Text: s[:i], Content: in})
		s = s[i+len(delim):]
		in = !in
	}
	return segs, !in
}

// appendSegment appends seg, merging it into the last segment of the same
// kind and dropping it when empty.
func appendSegment(segs []Segment, seg Segment) []Segment {
	if seg.Text == "" {
		return segs
	}
	if n := len(segs); n > 0 && segs[n-1].Content == seg.Content {
		segs[n-1].Text += seg.Text
		return segs
	}
	return append(segs, seg)
}
