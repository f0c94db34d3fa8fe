package tokenizer

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// tokenizer_config.json names tokens by their strings and ids; every one
// must be a token of tokenizer.json's vocabulary, and errors name the file,
// the field, the value and the vocabulary's size.
func TestConfigTokensInVocabulary(t *testing.T) {
	tok := chatTokenizerJSON(t) // a, b, then <s>=2, </s>=3, ... <|endoftext|>=9: 10 tokens
	withPost := tinyJSON(t, map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "<s>": 1}, "merges": []string{}},
		map[string]any{"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"ids": []int{50}}}}})
	gap := tinyJSON(t, map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1}, "merges": []string{}},
		map[string]any{"added_tokens": []any{map[string]any{"id": 4, "content": "<s>", "special": true}}})
	const vocab10 = "(tokenizer.json has 10 tokens, ids 0..9)"
	tests := []struct {
		name, tok, cfg string
		want           string // "" for success
	}{
		{"consistent", tok, `{"bos_token": "<s>", "eos_token": {"content": "</s>", "__type": "AddedToken"}, "pad_token": null,
			"added_tokens_decoder": {"2": {"content": "<s>", "special": true}, "9": {"content": "<|endoftext|>"}}}`, ""},
		{"empty bos names none", tok, `{"bos_token": "", "eos_token": "</s>"}`, ""},
		{"eos not in the vocabulary", tok, `{"eos_token": "<|im_endd|>"}`,
			`tokenizer_config.json: eos_token "<|im_endd|>" is not a token of the vocabulary ` + vocab10},
		{"bos object not in the vocabulary", tok, `{"bos_token": {"content": "<bos>", "lstrip": false}}`,
			`tokenizer_config.json: bos_token "<bos>" is not a token of the vocabulary ` + vocab10},
		{"bos a number", tok, `{"bos_token": 2}`,
			`tokenizer_config.json: bos_token 2: want a token string or an object with "content"`},
		{"decoder id past the vocabulary", tok, `{"added_tokens_decoder": {"10": {"content": "<x>"}}}`,
			`tokenizer_config.json: added_tokens_decoder["10"] "<x>": id 10 is not in the vocabulary ` + vocab10},
		{"decoder id in a gap", gap, `{"added_tokens_decoder": {"3": {"content": "<x>"}}}`,
			`tokenizer_config.json: added_tokens_decoder["3"] "<x>": id 3 is not in the vocabulary (tokenizer.json has 5 tokens, ids 0..4)`},
		{"decoder content differs", tok, `{"added_tokens_decoder": {"2": {"content": "</s>"}}}`,
			`tokenizer_config.json: added_tokens_decoder["2"] is "</s>", but tokenizer.json has "<s>" at id 2`},
		{"decoder key not an id", tok, `{"added_tokens_decoder": {"-1": {"content": "<s>"}}}`,
			`tokenizer_config.json: added_tokens_decoder key "-1" ("<s>") is not a token id (want an integer 0..9: tokenizer.json has 10 tokens, ids 0..9)`},
		{"decoder not an object", tok, `{"added_tokens_decoder": [2]}`,
			"tokenizer_config.json: added_tokens_decoder: want an object mapping token ids to tokens"},
		{"decoder entry without content", tok, `{"added_tokens_decoder": {"2": {"special": true}}}`,
			`tokenizer_config.json: added_tokens_decoder["2"]: want an object with "content"`},
		{"add_bos_token without bos", tok, `{"add_bos_token": true, "eos_token": "</s>"}`,
			"tokenizer_config.json: add_bos_token is true but bos_token is not set"},
		{"add_eos_token without eos", tok, `{"add_eos_token": true, "bos_token": "<s>"}`,
			"tokenizer_config.json: add_eos_token is true but eos_token is not set"},
		{"template id not in the vocabulary", withPost, "",
			`tokenizer.json: post_processor TemplateProcessing: special token "<s>": id 50 is not in the vocabulary (2 tokens, ids 0..1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFiles(t, tt.tok, tt.cfg)
			tk, err := Load(path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if id, ok := tk.BOS(); ok && tk.Token(id) != "<s>" {
					t.Errorf("BOS %d = %q", id, tk.Token(id))
				}
				if eos := tk.EOS(); len(eos) != 1 || tk.Token(eos[0]) != "</s>" {
					t.Errorf("EOS %v", eos)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "tokenizer: "+filepath.Dir(path)) {
				t.Errorf("error = %q\nwant it to contain %q after the file's path", err, tt.want)
			}
		})
	}
}

// fuzzTokenizerJSON is a small tokenizer.json with a gap in its ids: a, b,
// ab, <s>=4, </s>=5, <|im_end|>=6.
func fuzzTokenizerJSON() []byte {
	doc := map[string]any{"version": "1.0", "normalizer": nil, "pre_tokenizer": nil, "post_processor": nil, "decoder": nil,
		"added_tokens": []any{
			map[string]any{"id": 4, "content": "<s>", "special": true},
			map[string]any{"id": 5, "content": "</s>", "special": true},
			map[string]any{"id": 6, "content": "<|im_end|>", "special": true},
		},
		"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1, "ab": 2}, "merges": []string{"a b"}}}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzTokenizerConfig loads a fixed tokenizer.json with arbitrary
// tokenizer_config.json content. It must never panic, must fail with an
// error naming a file, or yield special tokens (BOS, EOS, chat stops, the
// ids Encode adds) that are all tokens of the vocabulary.
func FuzzTokenizerConfig(f *testing.F) {
	tok := fuzzTokenizerJSON()
	for _, s := range []string{
		`{"add_bos_token": true, "add_eos_token": false, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": null}`,
		`{"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "<|im_end|>", "added_tokens_decoder": {"4": {"content": "<s>", "special": true}}}`,
		`{"eos_token": "<|im_end|>", "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"}`,
		`{"added_tokens_decoder": {"3": {"content": "x"}}}`, `{"add_eos_token": true}`, `{"bos_token": 4}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, cfg []byte) {
		tk, err := parse("fuzz/tokenizer.json", tok, "fuzz/tokenizer_config.json", cfg)
		if err != nil {
			if tk != nil {
				t.Errorf("returned a tokenizer with error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "tokenizer: fuzz/tokenizer") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		check := func(what string, ids []int) {
			for _, id := range ids {
				if !tk.known(id) || id >= tk.VocabSize() {
					t.Fatalf("%s id %d is not a token of the vocabulary of %d (config %q)", what, id, tk.VocabSize(), cfg)
				}
			}
		}
		if id, ok := tk.BOS(); ok {
			check("BOS", []int{id})
		}
		check("EOS", tk.EOS())
		check("chat stop", tk.ChatStopIDs())
		check("encoded", tk.Encode("ab<s>a</s>", true))
	})
}
