package tokenizer

import (
	"encoding/json"
	"strings"
)

// A Segment is a stretch of a prompt with how its added tokens are read.
// A chat template's own markup is Special: its spellings of special tokens
// (<|im_start|>, <|eot_id|>, <s>) are those tokens. Message content is
// plain: a special token's spelling there is only text, so a user cannot
// forge a turn, as with Hugging Face's split_special_tokens. Added tokens
// not flagged special (such as <think> in some vocabularies) are tokens in
// either.
type Segment struct {
	Text    string
	Special bool
}

// EncodeSegments returns the token ids of the segments' text, joined, as
// Encode does, except that an added token flagged special is recognised
// only where all of its text lies in Special segments. Text between the
// tokens recognised is encoded as one stretch across segment boundaries,
// so where no plain segment spells a special token the ids are exactly
// Encode's of the joined text.
func (t *Tokenizer) EncodeSegments(segs []Segment, addSpecial bool) []int {
	text := joinSegments(segs)
	var plain [][2]int
	at := 0
	for _, s := range segs {
		if !s.Special && s.Text != "" {
			if n := len(plain); n > 0 && plain[n-1][1] == at {
				plain[n-1][1] = at + len(s.Text)
			} else {
				plain = append(plain, [2]int{at, at + len(s.Text)})
			}
		}
		at += len(s.Text)
	}
	ids := make([]int, 0, len(text)/3+4)
	ids = t.encodeAdded(ids, text, plain)
	if addSpecial {
		ids = t.post.apply(ids)
	}
	return ids
}

// joinSegments returns the segments' text.
func joinSegments(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String()
}

// plainSpans tracks, along a left-to-right scan, the plain spans of a text
// (sorted, disjoint) in which special tokens are not recognised.
type plainSpans struct {
	spans [][2]int
	k     int // the first span that does not end at or before the scan
}

// overlaps reports whether [s, e) touches a plain span; s never decreases
// from one call to the next.
func (p *plainSpans) overlaps(s, e int) bool {
	for p.k < len(p.spans) && p.spans[p.k][1] <= s {
		p.k++
	}
	return p.k < len(p.spans) && p.spans[p.k][0] < e
}

// ApplyChatSegments renders msgs as ApplyChatKwargs does, as segments: the
// template's own markup Special, the messages' text plain, so that
// EncodeSegments reads a special token's spelling inside a message as text
// and a user cannot forge a turn. The split is chattmpl's
// (Template.RenderSegments: a second rendering with each message's text
// marked). Where it cannot be made (a template that rewrites the text, as
// Qwen3's does a <think> block, or text holding a mark), every message's
// text that appears verbatim in the rendering is plain, and what is left
// is markup.
func (t *Tokenizer) ApplyChatSegments(msgs []Message, addGenerationPrompt bool, kwargs map[string]any) ([]Segment, error) {
	return t.ApplyChatToolsSegments(msgs, nil, addGenerationPrompt, kwargs)
}

// ApplyChatToolsSegments is ApplyChatSegments with the tools the model may
// call: a JSON array of tool definitions ({"type": "function", "function":
// {...}}) passed to the template as its variable tools, as transformers'
// apply_chat_template(tools=...) does; nil for none.
func (t *Tokenizer) ApplyChatToolsSegments(msgs []Message, tools json.RawMessage, addGenerationPrompt bool, kwargs map[string]any) ([]Segment, error) {
	in, err := ChatInput(msgs, addGenerationPrompt, kwargs)
	if err != nil {
		return nil, err
	}
	in.Tools = tools
	parts, exact, err := t.RenderChatSegments(in)
	if err != nil {
		return nil, err
	}
	if !exact {
		var text strings.Builder
		for _, p := range parts {
			text.WriteString(p.Text)
		}
		return verbatimSegments(text.String(), msgs), nil
	}
	var b chatBuilder
	for _, p := range parts {
		b.add(p.Text, !p.Content)
	}
	return b.segs, nil
}

// verbatimSegments marks plain, in order, each message's trimmed text
// where it appears in text, and the rest markup.
func verbatimSegments(text string, msgs []Message) []Segment {
	var b chatBuilder
	for _, m := range msgs {
		core := strings.TrimSpace(m.Content)
		if core == "" {
			continue
		}
		if i := strings.Index(text, core); i >= 0 {
			b.WriteString(text[:i])
			b.content(core)
			text = text[i+len(core):]
		}
	}
	b.WriteString(text)
	return b.segs
}

// chatBuilder collects a chat template's rendering as Segments: its
// WriteString is the template's markup (Special), content a message's
// text (plain).
type chatBuilder struct{ segs []Segment }

func (b *chatBuilder) WriteString(s string) { b.add(s, true) }

func (b *chatBuilder) content(s string) { b.add(s, false) }

func (b *chatBuilder) add(s string, special bool) {
	if s == "" {
		return
	}
	if n := len(b.segs); n > 0 && b.segs[n-1].Special == special {
		b.segs[n-1].Text += s
		return
	}
	b.segs = append(b.segs, Segment{Text: s, Special: special})
}
