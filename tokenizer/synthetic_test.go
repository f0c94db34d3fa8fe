package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

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

func chatConfig(t *testing.T, bos, eos, tmpl string) string {
	b, err := json.Marshal(map[string]any{"bos_token": bos, "eos_token": eos, "chat_template": tmpl})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Chat templates as published with the models (abridged where the parts
// left out concern tools only).
const (
	qwen25Template  = `{%- if tools %}{{- '<|im_start|>system\n' }}{%- else %}{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- endif %}{%- for message in messages %}{%- if (message.role == "user") or (message.role == "system" and not loop.first) %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- elif message.role == "assistant" %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`
	llama3Template  = `{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`
	llama31Template = `{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}{{- "Cutting Knowledge Date: December 2023\n" }}{{- "Today Date: " + date_string + "\n\n" }}{{- system_message }}{{- "<|eot_id|>" }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}`
	llama2Template  = `{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}`
	mistralTemplate = `{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}`
)

func TestApplyChat(t *testing.T) {
	conv := []Message{{"system", "Be brief."}, {"user", " Hi! "}, {"assistant", "Hello."}, {"user", "Bye"}}
	noSys := conv[1:]
	tests := []struct {
		name   string
		tmpl   string
		bos    string
		eos    string
		format ChatFormat
		msgs   []Message
		gen    bool
		want   string
	}{
		{"qwen2.5 system", qwen25Template, "", "<|im_end|>", ChatML, conv, true,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2.5 default system", qwen25Template, "", "<|im_end|>", ChatML, noSys[:1], false,
			"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"},
		{"llama3", llama3Template, "<|begin_of_text|>", "<|eot_id|>", ChatLlama3, conv, true,
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3.1", llama31Template, "<|begin_of_text|>", "<|eot_id|>", ChatLlama3, conv[:2], true,
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama2", llama2Template, "<s>", "</s>", ChatLlama2, conv, true,
			"<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi! [/INST] Hello. </s><s>[INST] Bye [/INST]"},
		{"llama2 no system", llama2Template, "<s>", "</s>", ChatLlama2, noSys[:1], false,
			"<s>[INST] Hi! [/INST]"},
		{"mistral", mistralTemplate, "<s>", "</s>", ChatLlama2, noSys, true,
			"<s>[INST]  Hi!  [/INST]Hello.</s>[INST] Bye [/INST]"},
	}
	for _, tt := range tests {
		tk, err := Load(writeFiles(t, chatTokenizerJSON(t), chatConfig(t, tt.bos, tt.eos, tt.tmpl)))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if f := tk.ChatTemplate(); f != tt.format {
			t.Errorf("%s: ChatTemplate = %v, want %v", tt.name, f, tt.format)
		}
		got, err := tk.ApplyChat(tt.msgs, tt.gen)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestApplyChatErrors(t *testing.T) {
	tests := []struct {
		name, tmpl string
		msgs       []Message
		wantErr    string
	}{
		{"no template", "", []Message{{"user", "x"}}, "no recognised chat_template"},
		{"unknown role", qwen25Template, []Message{{"tool", "x"}}, `unsupported role "tool"`},
		{"not alternating", llama2Template, []Message{{"user", "x"}, {"user", "y"}}, "must alternate"},
		{"mistral system", mistralTemplate, []Message{{"system", "s"}, {"user", "y"}}, "no system role"},
	}
	for _, tt := range tests {
		tk, err := Load(writeFiles(t, chatTokenizerJSON(t), chatConfig(t, "<s>", "</s>", tt.tmpl)))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, err = tk.ApplyChat(tt.msgs, true)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestApplyChatQwen3 uses the real Qwen3 template: its rendering of the
// reference case encodes to the reference ids, and <think> blocks follow
// the template's rules.
func TestApplyChatQwen3(t *testing.T) {
	tk := loadShared(t, "qwen3")
	got, err := tk.ApplyChat([]Message{{"system", "You are a helpful assistant."}, {"user", "Hi!"}}, true)
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
	msgs := []Message{{"user", "2+2?"}, {"assistant", "<think>\nadd\n</think>\n\n4"}, {"user", "3+3?"}, {"assistant", "<think>\nadd again\n</think>\n\n6"}}
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
