package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// A Vocab is a tokenizer as a GGUF file's tokenizer.ggml.* keys describe
// it: llama.cpp's "gpt2" (byte-level BPE with merges) or "llama"
// (SentencePiece: pieces with scores, byte fallback) model.
type Vocab struct {
	Model  string    // tokenizer.ggml.model: "gpt2" or "llama"
	Pre    string    // tokenizer.ggml.pre: the pre-tokenizer of a gpt2 model
	Tokens []string  // tokenizer.ggml.tokens
	Types  []int32   // tokenizer.ggml.token_type (TokenNormal...), nil: all normal
	Scores []float32 // tokenizer.ggml.scores (llama: the merge priorities)
	Merges []string  // tokenizer.ggml.merges, "a b" (gpt2)
	// Special token ids, -1 where the file names none (or names an id
	// outside Tokens: llama.cpp ignores those too).
	BOS, EOS, Unk  int
	AddBOS, AddEOS bool
	// AddSpacePrefix is tokenizer.ggml.add_space_prefix (llama; true when
	// absent).
	AddSpacePrefix bool
	ChatTemplate   string // tokenizer.chat_template, "" when absent
}

// The token types of tokenizer.ggml.token_type (llama.cpp's
// llama_token_type).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)

// Pre-tokenizer patterns of llama.cpp's gpt2 pre types, as the Hugging
// Face tokenizer.json of those models writes them.
var ggufPre = map[string]struct {
	regex string // "" for GPT-2's own split
	nfc   bool
}{
	"qwen2":     {`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, true},
	"llama-bpe": {`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, false},
	"gpt-2":     {"", false},
	"default":   {"", false},
}

// eogTexts are end-of-generation tokens llama.cpp recognizes by their text,
// the EOS where a file names none that is valid.
var eogTexts = []string{"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>"}

// FromVocab builds the tokenizer a GGUF file describes: the pipeline of
// the Hugging Face tokenizer.json of the same model (byte-level BPE with
// its pre-tokenizer; or SentencePiece BPE with byte fallback and merges
// ranked by the pieces' scores, as transformers' converter derives them),
// control and user-defined tokens as added tokens. name (the file) prefixes
// errors.
func FromVocab(name string, v *Vocab) (*Tokenizer, error) {
	fail := func(format string, args ...any) (*Tokenizer, error) {
		return nil, fmt.Errorf("tokenizer: %s: "+format, append([]any{name}, args...)...)
	}
	n := len(v.Tokens)
	if n == 0 {
		return fail("tokenizer.ggml.tokens is empty")
	}
	if v.Types != nil && len(v.Types) != n {
		return fail("tokenizer.ggml.token_type has %d entries for %d tokens", len(v.Types), n)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return fail("tokenizer.ggml.scores has %d entries for %d tokens", len(v.Scores), n)
	}
	typ := func(i int) int32 {
		if v.Types == nil {
			return TokenNormal
		}
		return v.Types[i]
	}
	vocab := make(map[string]int, n)
	var added []addedTokenJSON
	for i, s := range v.Tokens {
		if _, dup := vocab[s]; !dup {
			vocab[s] = i
		}
		switch typ(i) {
		case TokenControl, TokenUserDefined:
			if s != "" {
				added = append(added, addedTokenJSON{ID: i, Content: s, Special: typ(i) == TokenControl})
			}
		}
	}
	valid := func(id int) bool { return id >= 0 && id < n }
	var tj tokenizerJSON
	tj.AddedTokens = added
	tj.Model.Type = "BPE"
	var err error
	if tj.Model.Vocab, err = json.Marshal(vocab); err != nil {
		return fail("%v", err)
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	switch v.Model {
	case "gpt2":
		pre, ok := ggufPre[v.Pre]
		if !ok {
			keys := make([]string, 0, len(ggufPre))
			for k := range ggufPre {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return fail("tokenizer.ggml.pre %q is not supported (supported: %s)", v.Pre, strings.Join(keys, ", "))
		}
		if pre.regex == "" {
			tj.PreTokenizer = raw(`{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`)
		} else {
			tj.PreTokenizer = raw(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + str(pre.regex) +
				`},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]}`)
		}
		if pre.nfc {
			tj.Normalizer = raw(`{"type":"NFC"}`)
		}
		tj.Decoder = raw(`{"type":"ByteLevel"}`)
		if tj.Model.Merges, err = json.Marshal(v.Merges); err != nil {
			return fail("%v", err)
		}
	case "llama":
		if v.Scores == nil {
			return fail("tokenizer.ggml.scores is missing: a llama (SentencePiece) vocabulary ranks its merges by them")
		}
		tj.Model.ByteFallback, tj.Model.FuseUnk = true, true
		if valid(v.Unk) {
			tj.Model.UnkToken = &v.Tokens[v.Unk]
		}
		merges := spmMerges(v, vocab, typ)
		if tj.Model.Merges, err = json.Marshal(merges); err != nil {
			return fail("%v", err)
		}
		if v.AddSpacePrefix {
			tj.Normalizer = raw(`{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]}`)
			tj.Decoder = raw(`{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`)
		} else {
			tj.Normalizer = raw(`{"type":"Replace","pattern":{"String":" "},"content":"▁"}`)
			tj.Decoder = raw(`{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}]}`)
		}
	default:
		return fail("tokenizer.ggml.model %q is not supported (supported: gpt2, llama)", v.Model)
	}
	data, err := json.Marshal(tj)
	if err != nil {
		return fail("%v", err)
	}
	cfg := map[string]any{"add_bos_token": v.AddBOS, "add_eos_token": v.AddEOS}
	if valid(v.BOS) {
		cfg["bos_token"] = v.Tokens[v.BOS]
	}
	eos := v.EOS
	if !valid(eos) {
		eos = -1
		for _, s := range eogTexts {
			if id, ok := vocab[s]; ok && typ(id) == TokenControl {
				eos = id
				break
			}
		}
	}
	if eos >= 0 {
		cfg["eos_token"] = v.Tokens[eos]
	}
	if v.ChatTemplate != "" {
		cfg["chat_template"] = v.ChatTemplate
	}
	cfgData, err := json.Marshal(cfg)
	if err != nil {
		return fail("%v", err)
	}
	return parse(name, data, name+" (tokenizer.ggml.*)", cfgData)
}

// spmMerges derives a SentencePiece vocabulary's merges as transformers'
// SentencePieceExtractor does: every split of a piece into two pieces of
// the vocabulary, ordered by the piece's score (highest first), then by
// the piece's id and the two parts' ids.
func spmMerges(v *Vocab, vocab map[string]int, typ func(int) int32) [][2]string {
	type m struct {
		l, r   string
		score  float32
		id     int
		li, ri int
	}
	var ms []m
	for id, s := range v.Tokens {
		if t := typ(id); t != TokenNormal && t != TokenUserDefined {
			continue
		}
		if vocab[s] != id {
			continue // a duplicate
		}
		for i := 1; i < len(s); i++ {
			l, r := s[:i], s[i:]
			li, okL := vocab[l]
			ri, okR := vocab[r]
			if okL && okR {
				ms = append(ms, m{l, r, v.Scores[id], id, li, ri})
			}
		}
	}
	slices.SortStableFunc(ms, func(a, b m) int {
		switch {
		case a.score != b.score:
			if a.score > b.score {
				return -1
			}
			return 1
		case a.id != b.id:
			return a.id - b.id
		case a.li != b.li:
			return a.li - b.li
		}
		return a.ri - b.ri
	})
	out := make([][2]string, len(ms))
	for i, x := range ms {
		out[i] = [2]string{x.l, x.r}
	}
	return out
}
