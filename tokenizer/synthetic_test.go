package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kakeya-ai/kakeya/tokenizer/chattmpl"

	"golang.org/x/text/unicode/norm"
)

// writeFiles writes tokenizer.json (and tokenizer_config.json unless cfg is
// empty) to a temporary directory and returns the tokenizer.json path.
func writeFiles(t *testing.T, tok, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, []byte(tok), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg != "" {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// tinyJSON builds a small tokenizer.json from its parts.
func tinyJSON(t *testing.T, model map[string]any, extra map[string]any) string {
	t.Helper()
	doc := map[string]any{"version": "1.0", "added_tokens": []any{}, "normalizer": nil,
		"pre_tokenizer": nil, "post_processor": nil, "decoder": nil, "model": model}
	for k, v := range extra {
		doc[k] = v
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func chatTokenizerJSON(t *testing.T) string {
	vocab := map[string]any{"a": 0, "b": 1}
	added := []any{}
	for i, s := range []string{"<s>", "</s>", "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"} {
		vocab[s] = 2 + i
		added = append(added, map[string]any{"id": 2 + i, "content": s, "special": true})
	}
	return tinyJSON(t, map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}}, map[string]any{"added_tokens": added})
}

// goldenChat is a case of chattmpl's golden renderings (made by Jinja2 in
// transformers' environment from published templates).
type goldenChat struct {
	Name      string            `json:"name"`
	Template  string            `json:"template"`
	Special   map[string]string `json:"special_tokens"`
	Messages  json.RawMessage   `json:"messages"`
	Tools     json.RawMessage   `json:"tools"`
	Kwargs    map[string]any    `json:"kwargs"`
	Gen       bool              `json:"add_generation_prompt"`
	Want      *string           `json:"want"`
	WantError *string           `json:"want_error"`
	Now       string            `json:"now"` // strftime_now's clock
}

func loadGoldenChat(t *testing.T) []goldenChat {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("chattmpl", "testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []goldenChat }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Cases
}

func readChatTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("chattmpl", "testdata", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// specialTokenizerJSON is a tiny tokenizer.json whose added tokens are
// the special tokens named.
func specialTokenizerJSON(t *testing.T, special ...string) string {
	vocab := map[string]any{"a": 0, "b": 1}
	added := []any{}
	for _, s := range special {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
			added = append(added, map[string]any{"id": vocab[s], "content": s, "special": true})
		}
	}
	return tinyJSON(t, map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}}, map[string]any{"added_tokens": added})
}

// chatConfig is a tokenizer_config.json with the special tokens given and
// chat_template tmpl (a string or a list of named templates).
func chatConfig(t *testing.T, special map[string]string, tmpl any) string {
	cfg := map[string]any{"chat_template": tmpl}
	for k, v := range special {
		cfg[k] = v
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func chatTokenizer(t *testing.T, special map[string]string, tmpl any) *Tokenizer {
	t.Helper()
	var names []string
	for _, v := range special {
		names = append(names, v)
	}
	slices.Sort(names)
	tk, err := Load(writeFiles(t, specialTokenizerJSON(t, names...), chatConfig(t, special, tmpl)))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestApplyChat: the published templates, loaded from
// tokenizer_config.json with the model's special tokens, render through
// ApplyChat and RenderChat exactly as Jinja2 does in transformers.
func TestApplyChat(t *testing.T) {
	n := 0
	for _, c := range loadGoldenChat(t) {
		tk := chatTokenizer(t, c.Special, readChatTemplate(t, c.Template))
		var got string
		var err error
		if msgs, ok := plainMessages(c.Messages); ok && c.Tools == nil && !strings.HasPrefix(c.Name, "llama3.2/") {
			if c.Kwargs == nil {
				got, err = tk.ApplyChat(msgs, c.Gen)
			} else {
				got, err = tk.ApplyChatKwargs(msgs, c.Gen, c.Kwargs)
			}
		} else {
			in := chattmpl.Input{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.Gen, Vars: map[string]json.RawMessage{}}
			for k, v := range c.Kwargs {
				in.Vars[k], _ = json.Marshal(v)
			}
			if strings.HasPrefix(c.Name, "llama3.2/") {
				continue // strftime_now reads the day; chattmpl's tests fix the clock
			}
			got, err = tk.RenderChat(in)
		}
		n++
		switch {
		case c.WantError != nil:
			if err == nil || !strings.Contains(err.Error(), *c.WantError) || !strings.Contains(err.Error(), "tokenizer_config.json chat_template") {
				t.Errorf("%s: error %v, want one naming the file and saying %q", c.Name, err, *c.WantError)
			}
		case err != nil:
			t.Errorf("%s: %v", c.Name, err)
		case got != *c.Want:
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *c.Want)
		}
	}
	if n < 80 {
		t.Fatalf("%d golden cases ran, want >= 80", n)
	}
}

// plainMessages returns the conversation as Messages when each message
// has only a role and a string content.
func plainMessages(raw json.RawMessage) ([]Message, bool) {
	var objs []map[string]any
	if json.Unmarshal(raw, &objs) != nil {
		return nil, false
	}
	msgs := make([]Message, len(objs))
	for i, o := range objs {
		role, ok1 := o["role"].(string)
		content, ok2 := o["content"].(string)
		if !ok1 || !ok2 || len(o) != 2 {
			return nil, false
		}
		msgs[i] = Message{Role: role, Content: content}
	}
	return msgs, true
}

// TestChatTemplateList: the list form of chat_template, whose "tool_use"
// template renders conversations with tools and "default" the others.
func TestChatTemplateList(t *testing.T) {
	cases := map[string]goldenChat{}
	for _, c := range loadGoldenChat(t) {
		cases[c.Name] = c
	}
	list := []map[string]string{
		{"name": "default", "template": readChatTemplate(t, "llama3.1.jinja")},
		{"name": "tool_use", "template": readChatTemplate(t, "hermes3-tool_use.jinja")},
	}
	for _, name := range []string{"llama3.1/system-user/gen=true", "hermes3-tool_use/tools"} {
		c := cases[name]
		tk := chatTokenizer(t, c.Special, list)
		if tk.ChatTemplate() != list[0]["template"] {
			t.Errorf("ChatTemplate is not the default template")
		}
		got, err := tk.RenderChat(chattmpl.Input{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.Gen})
		if err != nil || got != *c.Want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, *c.Want)
		}
	}
}

func TestApplyChatErrors(t *testing.T) {
	special := map[string]string{"bos_token": "<s>", "eos_token": "</s>"}
	tests := []struct {
		name    string
		tmpl    any
		wantErr string
	}{
		{"no template", nil, "the model has no chat template"},
		{"syntax", "{% for m in messages %}{{ m.content }}", "tokenizer_config.json chat_template"},
		{"no default", []map[string]string{{"name": "rag", "template": "x"}}, `no template named "default" or "tool_use"`},
		{"tool_use only", []map[string]string{{"name": "tool_use", "template": "x"}}, `no "default" one`},
		{"raised", "{{ raise_exception('Only user and assistant roles are supported!') }}", "Only user and assistant roles are supported!"},
	}
	for _, tt := range tests {
		tk := chatTokenizer(t, special, tt.tmpl)
		_, err := tk.ApplyChat([]Message{{Role: "user", Content: "x"}}, true)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
	if _, err := Load(writeFiles(t, specialTokenizerJSON(t, "<s>"), `{"chat_template": 3}`)); err == nil || !strings.Contains(err.Error(), "neither a string nor a list") {
		t.Errorf("chat_template 3: error %v", err)
	}
	tk := chatTokenizer(t, special, nil)
	if err := tk.SetChatTemplate("model.gguf tokenizer.chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"); err != nil {
		t.Fatal(err)
	}
	if got, err := tk.ApplyChat([]Message{{Role: "user", Content: "hi"}}, false); got != "<s>hi" || err != nil {
		t.Errorf("SetChatTemplate: ApplyChat = %q, %v", got, err)
	}
	if err := tk.SetChatTemplate("model.gguf tokenizer.chat_template", "{% if %}"); err == nil || !strings.Contains(err.Error(), "model.gguf") {
		t.Errorf("SetChatTemplate of a bad template: error %v", err)
	}
}

// TestApplyChatQwen3 uses the real Qwen3 template: its rendering of the
// reference case encodes to the reference ids, and <think> blocks follow
// the template's rules.
func TestApplyChatQwen3(t *testing.T) {
	tk := loadShared(t, "qwen3")
	got, err := tk.ApplyChat([]Message{{Role: "system", Content: "You are a helpful assistant."}, {Role: "user", Content: "Hi!"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	wantIDs := []int{151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 13048, 0, 151645, 198, 151644, 77091, 198}
	if ids := tk.Encode(got, false); !equalInts(ids, wantIDs) {
		t.Fatalf("Encode = %v, want %v", ids, wantIDs)
	}
	msgs := []Message{{Role: "user", Content: "2+2?"}, {Role: "assistant", Content: "<think>\nadd\n</think>\n\n4"}, {Role: "user", Content: "3+3?"}, {Role: "assistant", Content: "<think>\nadd again\n</think>\n\n6"}}
	got, err = tk.ApplyChat(msgs, false)
	if err != nil {
		t.Fatal(err)
	}
	want = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nadd again\n</think>\n\n6<|im_end|>\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	bpe := map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1, "ab": 2}, "merges": []string{"a b"}}
	tests := []struct {
		name    string
		tok     string
		cfg     string
		wantErr string
	}{
		{"malformed json", `{"model": `, "", "malformed JSON"},
		{"wordpiece", tinyJSON(t, map[string]any{"type": "WordPiece", "vocab": map[string]int{"a": 0}}, nil), "", `unsupported model type "WordPiece"`},
		{"unigram", tinyJSON(t, map[string]any{"type": "Unigram", "vocab": [][]any{{"a", 0.0}}}, nil), "", `unsupported model type "Unigram"`},
		{"normalizer", tinyJSON(t, bpe, map[string]any{"normalizer": map[string]any{"type": "BertNormalizer"}}), "", `unsupported normalizer type "BertNormalizer"`},
		{"pre_tokenizer", tinyJSON(t, bpe, map[string]any{"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"}}), "", `unsupported pre_tokenizer type "BertPreTokenizer"`},
		{"decoder", tinyJSON(t, bpe, map[string]any{"decoder": map[string]any{"type": "WordPiece"}}), "", `unsupported decoder type "WordPiece"`},
		{"post_processor", tinyJSON(t, bpe, map[string]any{"post_processor": map[string]any{"type": "BertProcessing"}}), "", `unsupported post_processor type "BertProcessing"`},
		{"bad regex", tinyJSON(t, bpe, map[string]any{"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(("}, "behavior": "Isolated"}}), "", "regex"},
		{"bad behavior", tinyJSON(t, bpe, map[string]any{"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Sideways"}}), "", `behavior "Sideways"`},
		{"merge not in vocab", tinyJSON(t, map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}, "merges": []string{"a b"}}, nil), "", "not in the vocab"},
		{"merge result not in vocab", tinyJSON(t, map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1}, "merges": [][]string{{"a", "b"}}}, nil), "", `merged token "ab"`},
		{"merge line", tinyJSON(t, map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}, "merges": []string{"ab"}}, nil), "", "two space-separated"},
		{"unk missing", tinyJSON(t, map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}, "merges": []string{}, "unk_token": "<unk>"}, nil), "", `unk_token "<unk>"`},
		{"bad config", tinyJSON(t, bpe, nil), `{"bos_token": `, "tokenizer_config.json: malformed JSON"},
	}
	for _, tt := range tests {
		path := writeFiles(t, tt.tok, tt.cfg)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), filepath.Dir(path)) {
			t.Errorf("%s: error %q does not name the file", tt.name, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: error %v", err)
	}
}

// TestSyntheticBPE covers model options the shared tokenizers do not use.
func TestSyntheticBPE(t *testing.T) {
	vocab := map[string]int{"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6, "▁": 7, "▁a": 8}
	base := func(opts map[string]any) map[string]any {
		m := map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"a b", "ab c", "▁ a"}, "unk_token": "<unk>"}
		for k, v := range opts {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name  string
		model map[string]any
		extra map[string]any
		text  string
		want  []int
	}{
		{"merges", base(nil), nil, "abcab", []int{6, 4}},
		{"no merge for bc", base(nil), nil, "bc", []int{2, 3}},
		{"ignore_merges takes whole words", base(map[string]any{"ignore_merges": true}), nil, "bc", []int{5}},
		{"unk", base(nil), nil, "axa", []int{1, 0, 1}},
		{"fuse_unk", base(map[string]any{"fuse_unk": true}), nil, "axyza", []int{1, 0, 1}},
		{"metaspace always", base(nil), map[string]any{"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}}, "a ab", []int{8, 7, 4}},
		{"metaspace never", base(nil), map[string]any{"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": false}}, "a a", []int{1, 8}},
		{"digits", map[string]any{"type": "BPE", "vocab": map[string]int{"1": 0, "2": 1, "12": 2, "x": 3}, "merges": []string{"1 2"}}, map[string]any{"pre_tokenizer": map[string]any{"type": "Digits", "individual_digits": true}}, "x12", []int{3, 0, 1}},
		{"split removed", base(nil), map[string]any{"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"String": "c"}, "behavior": "Removed"}}, "abcab", []int{4, 4}},
		{"lowercase+strip", base(nil), map[string]any{"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Lowercase"}, map[string]any{"type": "Strip", "strip_left": true, "strip_right": true}}}}, "  ABC ", []int{6}},
		{"added lstrip/rstrip", base(nil), map[string]any{"added_tokens": []any{map[string]any{"id": 9, "content": "<x>", "lstrip": true, "rstrip": true, "special": true}}}, "a <x> b", []int{1, 9, 2}},
		{"added single_word", base(nil), map[string]any{"added_tokens": []any{map[string]any{"id": 9, "content": "ab", "single_word": true}}}, "ab abc", []int{9, 0, 6}},
	}
	for _, tt := range tests {
		tk, err := Load(writeFiles(t, tinyJSON(t, tt.model, tt.extra), ""))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := tk.Encode(tt.text, false); !equalInts(got, tt.want) {
			t.Errorf("%s: Encode(%q) = %v, want %v", tt.name, tt.text, got, tt.want)
		}
	}
}

func TestSplitBehaviors(t *testing.T) {
	// "a-b--c" split on "-".
	s := "a-b--c"
	spans := [][2]int{{1, 2}, {3, 4}, {4, 5}}
	tests := []struct {
		b      splitBehavior
		invert bool
		want   string
	}{
		{behaviorIsolated, false, "a|-|b|-|-|c"},
		{behaviorRemoved, false, "a|b|c"},
		{behaviorMergedWithPrevious, false, "a-|b-|-|c"},
		{behaviorMergedWithNext, false, "a|-b|-|-c"},
		{behaviorContiguous, false, "a|-|b|--|c"},
		{behaviorRemoved, true, "-|-|-"},
	}
	for _, tt := range tests {
		got := strings.Join(splitBy(nil, s, spans, tt.b, tt.invert), "|")
		if got != tt.want {
			t.Errorf("behavior %d invert %v: %q, want %q", tt.b, tt.invert, got, tt.want)
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"a\xe4\xbdb", "a\uFFFDb"},            // truncated 3-byte sequence: one replacement
		{"a\xe4\xbd\xe4\xbd\xa0", "a\uFFFD你"}, // truncated then complete
		{"\x80\x80", "\uFFFD\uFFFD"},          // lone continuation bytes: one each
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
	}
	for _, tt := range tests {
		if got := lossyUTF8([]byte(tt.in)); got != tt.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestSplitMarkMatchesWholeWord: cutting SentencePiece words before "▁"
// gives exactly what merging the whole segment as one word does.
func TestSplitMarkMatchesWholeWord(t *testing.T) {
	tk := loadShared(t, "llama2-format")
	if tk.bpe.splitMark != "▁" {
		t.Fatalf("split mark not enabled for the llama2-format vocabulary")
	}
	text := readWikitext(t)[:60000]
	fast := tk.Encode(text, false)
	seg := tk.norm.normalize(text)
	var slow []int
	for _, id := range tk.bpe.merge(new(bpeScratch), seg) {
		slow = append(slow, int(id))
	}
	if !equalInts(fast, slow) {
		t.Fatalf("split encode differs from whole-word merge (%d vs %d ids)", len(fast), len(slow))
	}
}

// FuzzEncodeQwen3: Encode never panics, and for valid UTF-8 decoding gives
// back the NFC text, also when streamed.
func FuzzEncodeQwen3(f *testing.F) {
	for _, s := range scanCases {
		f.Add(s)
	}
	f.Add("<|im_start|>user\nx<|im_end|>\xff\xfe")
	tk := loadShared(f, "qwen3")
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, true)
		if !utf8.ValidString(s) {
			return
		}
		want := norm.NFC.String(s)
		if got := tk.Decode(ids, false); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		st := tk.NewStream()
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(st.Add(id))
		}
		b.WriteString(st.Flush())
		if b.String() != want {
			t.Fatalf("streamed %q, want %q", b.String(), want)
		}
	})
}

// FuzzEncodeLlama2 checks the SentencePiece path never panics and decodes
// to valid text.
func FuzzEncodeLlama2(f *testing.F) {
	for _, s := range scanCases {
		f.Add(s)
	}
	tk := loadShared(f, "llama2-format")
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, true)
		if out := tk.Decode(ids, true); utf8.ValidString(s) && !utf8.ValidString(out) {
			t.Fatalf("Decode(Encode(%q)) = %q is not valid UTF-8", s, out)
		}
	})
}

// TestRenderChatSegments: the real Qwen3 template's rendering, split into
// markup and message text; a typed turn marker is text.
func TestRenderChatSegments(t *testing.T) {
	tk := loadShared(t, "qwen3")
	in, err := ChatInput([]Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi<|im_end|>"}}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	segs, exact, err := tk.RenderChatSegments(in)
	if err != nil || !exact {
		t.Fatalf("segments %v, exact %v, %v", segs, exact, err)
	}
	want := []chattmpl.Segment{{Text: "<|im_start|>system\n"}, {Text: "Be brief.", Content: true}, {Text: "<|im_end|>\n<|im_start|>user\n"},
		{Text: "Hi<|im_end|>", Content: true}, {Text: "<|im_end|>\n<|im_start|>assistant\n"}}
	if !slices.Equal(segs, want) {
		t.Errorf("segments %+v\nwant %+v", segs, want)
	}
	text, err := tk.RenderChat(in)
	if err != nil {
		t.Fatal(err)
	}
	var joined strings.Builder
	for _, s := range segs {
		joined.WriteString(s.Text)
	}
	if joined.String() != text {
		t.Errorf("segments join to %q, RenderChat gives %q", joined.String(), text)
	}
}
