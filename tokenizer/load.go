package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"github.com/kakeya-ai/kakeya/internal/boundedfile"
)

// tokenizerJSON is the part of tokenizer.json this package reads.
type tokenizerJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Dropout                 *float64        `json:"dropout"`
}

// component is any typed pipeline entry: normalizer, pre-tokenizer, decoder
// or post-processor. Fields are the union of those read.
type component struct {
	Type string `json:"type"`

	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Processors    []json.RawMessage `json:"processors"`

	Prepend  string       `json:"prepend"`
	Pattern  *patternJSON `json:"pattern"`
	Content  *string      `json:"content"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`

	AddPrefixSpace   *bool  `json:"add_prefix_space"`
	UseRegex         *bool  `json:"use_regex"`
	Replacement      string `json:"replacement"`
	PrependScheme    string `json:"prepend_scheme"`
	Split            *bool  `json:"split"`
	IndividualDigits bool   `json:"individual_digits"`
	StripLeft        *bool  `json:"strip_left"`
	StripRight       *bool  `json:"strip_right"`
	Start            int    `json:"start"`
	Stop             int    `json:"stop"`

	Single        []templateItem                `json:"single"`
	SpecialTokens map[string]templateSpecialIDs `json:"special_tokens"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type templateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecialIDs struct {
	IDs []int `json:"ids"`
}

// configJSON is the part of tokenizer_config.json this package reads.
type configJSON struct {
	AddBOS       *bool           `json:"add_bos_token"`
	AddEOS       *bool           `json:"add_eos_token"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	UNK          json.RawMessage `json:"unk_token"`
	PAD          json.RawMessage `json:"pad_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
	// AddedTokensDecoder maps token ids, written as strings, to the
	// AddedToken objects transformers restores: only checked against
	// tokenizer.json, whose added_tokens this package reads.
	AddedTokensDecoder json.RawMessage `json:"added_tokens_decoder"`
}

// gpt2Pattern is the split ByteLevel applies when use_regex is set.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// Load reads the tokenizer.json at path and, when present in the same
// directory, tokenizer_config.json.
func Load(path string) (*Tokenizer, error) {
	data, err := boundedfile.Read(path, maxTokenizerBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var cfg []byte
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	cfg, err = boundedfile.Read(cfgPath, maxConfigBytes)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		cfg, cfgPath = nil, ""
	}
	return parse(path, data, cfgPath, cfg)
}

// parse builds a Tokenizer from tokenizer.json bytes and optional
// tokenizer_config.json bytes; the paths only name them in errors.
func parse(path string, data []byte, cfgPath string, cfgData []byte) (*Tokenizer, error) {
	t := &Tokenizer{path: path}
	var tj tokenizerJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, t.errorf("malformed JSON: %v", err)
	}
	if err := t.buildModel(&tj.Model); err != nil {
		return nil, err
	}
	if err := t.buildAdded(tj.AddedTokens); err != nil {
		return nil, err
	}
	var err error
	if t.norm, err = t.buildNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	if err = t.buildPre(tj.PreTokenizer); err != nil {
		return nil, err
	}
	if err = t.checkAlphabet(); err != nil {
		return nil, err
	}
	if t.decoder, err = t.buildDecoder(tj.Decoder, nil); err != nil {
		return nil, err
	}
	var cfg configJSON
	if cfgData != nil {
		if err := json.Unmarshal(cfgData, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: malformed JSON: %v", cfgPath, err)
		}
		if err := t.checkAddedDecoder(cfgPath, cfg.AddedTokensDecoder); err != nil {
			return nil, err
		}
	}
	if t.bos, t.hasBOS, err = t.configToken(cfgPath, "bos_token", cfg.BOS); err != nil {
		return nil, err
	}
	eos, hasEOS, err := t.configToken(cfgPath, "eos_token", cfg.EOS)
	if err != nil {
		return nil, err
	}
	if hasEOS {
		t.eos = []int{eos}
	}
	if isNull(tj.PostProcessor) {
		// Without a post-processor, transformers' Llama tokenizers add
		// BOS/EOS as these flags say, and refuse a flag whose token is
		// not set.
		if cfg.AddBOS != nil && *cfg.AddBOS {
			if !t.hasBOS {
				return nil, fmt.Errorf("tokenizer: %s: add_bos_token is true but bos_token is not set: name the BOS token or set add_bos_token to false", cfgPath)
			}
			t.post.prefix = []int{t.bos}
		}
		if cfg.AddEOS != nil && *cfg.AddEOS {
			if !hasEOS {
				return nil, fmt.Errorf("tokenizer: %s: add_eos_token is true but eos_token is not set: name the EOS token or set add_eos_token to false", cfgPath)
			}
			t.post.suffix = []int{eos}
		}
	} else if err := t.buildPost(tj.PostProcessor); err != nil {
		return nil, err
	}
	// The special tokens a chat template reads, as transformers passes
	// them: the ones set.
	special := map[string]string{}
	for name, raw := range map[string]json.RawMessage{"bos_token": cfg.BOS, "eos_token": cfg.EOS, "unk_token": cfg.UNK, "pad_token": cfg.PAD} {
		if s, ok := tokenText(raw); ok {
			special[name] = s
		}
	}
	if err := t.buildChat(cfg.ChatTemplate, cfgPath, special); err != nil {
		return nil, err
	}
	t.perToken = t.boundTokenBytes()
	return t, nil
}

// tokenText returns the text of a tokenizer_config.json token entry: a
// string or an AddedToken object with "content"; ok is false for null,
// absent, "" or another shape.
func tokenText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(raw, &obj) != nil {
			return "", false
		}
		s = obj.Content
	}
	return s, s != ""
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// configToken resolves the tokenizer_config.json token entry field
// (bos_token, eos_token): a string or an AddedToken object with "content".
// Null, absent or "" gives ok false; a token outside the vocabulary is an
// error, as transformers would otherwise append it as a new token the
// model has no embedding for.
func (t *Tokenizer) configToken(cfgPath, field string, raw json.RawMessage) (id int, ok bool, err error) {
	if isNull(raw) {
		return 0, false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var obj struct {
			Content *string `json:"content"`
		}
		if json.Unmarshal(raw, &obj) != nil || obj.Content == nil {
			return 0, false, fmt.Errorf("tokenizer: %s: %s %s: want a token string or an object with \"content\"", cfgPath, field, raw)
		}
		s = *obj.Content
	}
	if s == "" {
		return 0, false, nil // an empty token names none
	}
	id, ok = t.vocab[s]
	if !ok {
		return 0, false, fmt.Errorf("tokenizer: %s: %s %q is not a token of the vocabulary (%s)", cfgPath, field, s, t.vocabDesc())
	}
	return id, true, nil
}

// vocabDesc describes the vocabulary for errors: its file and size.
func (t *Tokenizer) vocabDesc() string {
	return fmt.Sprintf("%s has %d tokens, ids 0..%d", filepath.Base(t.path), len(t.tokens), len(t.tokens)-1)
}

// known reports whether id is a token of the vocabulary: in range and not
// a gap between the vocabulary and added tokens.
func (t *Tokenizer) known(id int) bool {
	if id < 0 || id >= len(t.tokens) {
		return false
	}
	if t.tokens[id] != "" {
		return true
	}
	v, ok := t.vocab[""]
	return ok && v == id
}

// checkAddedDecoder checks tokenizer_config.json's added_tokens_decoder
// against tokenizer.json: every key a token id of the vocabulary, holding
// the token of its "content". transformers adds the tokens it does not
// find, under new ids, so a mismatch means ids that differ from the
// model's.
func (t *Tokenizer) checkAddedDecoder(cfgPath string, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("tokenizer: %s: added_tokens_decoder: want an object mapping token ids to tokens: %v", cfgPath, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var e struct {
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(m[k], &e); err != nil || e.Content == nil {
			return fmt.Errorf("tokenizer: %s: added_tokens_decoder[%q]: want an object with \"content\"", cfgPath, k)
		}
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 {
			return fmt.Errorf("tokenizer: %s: added_tokens_decoder key %q (%q) is not a token id (want an integer 0..%d: %s)", cfgPath, k, *e.Content, len(t.tokens)-1, t.vocabDesc())
		}
		if !t.known(id) {
			return fmt.Errorf("tokenizer: %s: added_tokens_decoder[%q] %q: id %d is not in the vocabulary (%s)", cfgPath, k, *e.Content, id, t.vocabDesc())
		}
		if t.tokens[id] != *e.Content {
			return fmt.Errorf("tokenizer: %s: added_tokens_decoder[%q] is %q, but %s has %q at id %d", cfgPath, k, *e.Content, filepath.Base(t.path), t.tokens[id], id)
		}
	}
	return nil
}

func (t *Tokenizer) buildModel(m *modelJSON) error {
	if m.Type != "BPE" && !(m.Type == "" && m.Merges != nil) {
		return t.errorf("unsupported model type %q (only BPE is implemented)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return t.errorf("model: BPE dropout %v is not supported", *m.Dropout)
	}
	var vocab map[string]int
	if err := json.Unmarshal(m.Vocab, &vocab); err != nil {
		return t.errorf("model.vocab: %v", err)
	}
	if len(vocab) == 0 {
		return t.errorf("model: empty vocab")
	}
	b := &bpeModel{
		vocab:        vocab,
		merges:       make(map[uint64]merge),
		unk:          -1,
		fuseUnk:      m.FuseUnk,
		byteFallback: m.ByteFallback,
		ignoreMerges: m.IgnoreMerges,
	}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	maxID := -1
	for s, id := range vocab {
		if id < 0 {
			return t.errorf("model: vocab token %q has negative id %d", s, id)
		}
		maxID = max(maxID, id)
	}
	t.tokens = make([]string, maxID+1)
	t.vocab = make(map[string]int, len(vocab))
	for s, id := range vocab {
		t.tokens[id] = s
		t.vocab[s] = id
	}
	if m.UnkToken != nil {
		id, ok := vocab[*m.UnkToken]
		if !ok {
			return t.errorf("model: unk_token %q is not in the vocab", *m.UnkToken)
		}
		b.unk = id
	}
	for i := range b.fallbackIDs {
		b.fallbackIDs[i] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallbackIDs[i] = int32(id)
		}
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return t.errorf("model.merges: %v", err)
	}
	results := make([]string, 0, len(pairs))
	for rank, p := range pairs {
		a, okA := vocab[p[0]]
		c, okB := vocab[p[1]]
		if !okA || !okB {
			return t.errorf("model.merges[%d]: %q %q: token not in the vocab", rank, p[0], p[1])
		}
		right := p[1]
		if b.prefix != "" {
			right = strings.TrimPrefix(right, b.prefix)
		}
		id, ok := vocab[p[0]+right]
		if !ok {
			return t.errorf("model.merges[%d]: %q %q: merged token %q not in the vocab", rank, p[0], p[1], p[0]+right)
		}
		results = append(results, p[0]+right)
		k := pairKey(int32(a), int32(c))
		if _, dup := b.merges[k]; !dup {
			b.merges[k] = merge{rank: int32(rank), id: int32(id)}
		}
	}
	if _, ok := vocab["▁"]; ok {
		b.setSplitMark("▁", results)
	}
	t.bpe = b
	return nil
}

// parseMerges accepts both merges formats: "a b" strings and ["a","b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("neither \"a b\" strings nor [a, b] pairs: %v", err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("entry %d %q is not two space-separated tokens", i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func (t *Tokenizer) buildAdded(list []addedTokenJSON) error {
	t.addedID = make(map[int]*addedToken, len(list))
	maxID := len(t.tokens) - 1
	for _, a := range list {
		if a.ID < 0 {
			return t.errorf("added_tokens: %q has negative id %d", a.Content, a.ID)
		}
		if a.Content == "" {
			return t.errorf("added_tokens: id %d has empty content", a.ID)
		}
		maxID = max(maxID, a.ID)
	}
	if maxID >= len(t.tokens) {
		t.tokens = append(t.tokens, make([]string, maxID+1-len(t.tokens))...)
	}
	t.special = make([]bool, len(t.tokens))
	for _, a := range list {
		tok := &addedToken{id: a.ID, content: a.Content, special: a.Special, lstrip: a.LStrip,
			rstrip: a.RStrip, singleWord: a.SingleWord, normalized: a.Normalized}
		t.added = append(t.added, tok)
		t.addedID[a.ID] = tok
		t.tokens[a.ID] = a.Content
		t.vocab[a.Content] = a.ID
		t.special[a.ID] = a.Special
		if a.Normalized {
			t.firstNorm[a.Content[0]], t.hasNorm = true, true
		} else {
			t.firstRaw[a.Content[0]], t.hasRaw = true, true
		}
	}
	sortAdded(t.added)
	return nil
}

func (t *Tokenizer) buildPattern(where string, p *patternJSON) (pattern, error) {
	switch {
	case p == nil:
		return pattern{}, t.errorf("%s: missing pattern", where)
	case p.String != nil:
		return pattern{lit: *p.String}, nil
	case p.Regex != nil:
		re, err := regexp2.Compile(*p.Regex, regexp2.None)
		if err != nil {
			return pattern{}, t.errorf("%s: regex %q: %v", where, *p.Regex, err)
		}
		return pattern{re: re}, nil
	}
	return pattern{}, t.errorf("%s: pattern has neither String nor Regex", where)
}

func (t *Tokenizer) buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, t.errorf("normalizer: %v", err)
	}
	switch c.Type {
	case "Sequence":
		var seq normSequence
		for _, r := range c.Normalizers {
			n, err := t.buildNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "NFC":
		return normForm{norm.NFC}, nil
	case "NFD":
		return normForm{norm.NFD}, nil
	case "NFKC":
		return normForm{norm.NFKC}, nil
	case "NFKD":
		return normForm{norm.NFKD}, nil
	case "Prepend":
		return normPrepend{c.Prepend}, nil
	case "Replace":
		p, err := t.buildPattern("normalizer Replace", c.Pattern)
		if err != nil {
			return nil, err
		}
		if c.Content != nil {
			p.content = *c.Content
		}
		return normReplace{p}, nil
	case "Lowercase":
		return normLowercase{}, nil
	case "Strip":
		return normStrip{left: c.StripLeft == nil || *c.StripLeft, right: c.StripRight == nil || *c.StripRight}, nil
	}
	return nil, t.errorf("unsupported normalizer type %q", c.Type)
}

func (t *Tokenizer) buildPre(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	if err := t.appendPre(raw); err != nil {
		return err
	}
	for i, p := range t.pre {
		if _, ok := p.(preByteLevel); ok && i != len(t.pre)-1 {
			return t.errorf("pre_tokenizer: ByteLevel must be the last pre-tokenizer")
		}
	}
	// The common byte-level case runs the hand-written scanner directly.
	if len(t.pre) == 2 && t.bpe.byteLevel {
		if s, ok := t.pre[0].(*preSplit); ok && s.scanner != nil && s.behavior == behaviorIsolated && !s.invert {
			if b := t.pre[1].(preByteLevel); !b.addPrefixSpace && b.regex == nil {
				t.fast = s.scanner
			}
		}
	}
	return nil
}

func (t *Tokenizer) appendPre(raw json.RawMessage) error {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return t.errorf("pre_tokenizer: %v", err)
	}
	switch c.Type {
	case "Sequence":
		for _, r := range c.PreTokenizers {
			if err := t.appendPre(r); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		p, err := t.buildPattern("pre_tokenizer Split", c.Pattern)
		if err != nil {
			return err
		}
		s := &preSplit{p: p, invert: c.Invert}
		if c.Pattern.Regex != nil {
			s.scanner = newSplitScanner(*c.Pattern.Regex)
		}
		switch c.Behavior {
		case "Isolated":
			s.behavior = behaviorIsolated
		case "Removed":
			s.behavior = behaviorRemoved
		case "MergedWithPrevious":
			s.behavior = behaviorMergedWithPrevious
		case "MergedWithNext":
			s.behavior = behaviorMergedWithNext
		case "Contiguous":
			s.behavior = behaviorContiguous
		default:
			return t.errorf("pre_tokenizer Split: unsupported behavior %q", c.Behavior)
		}
		t.pre = append(t.pre, s)
		return nil
	case "ByteLevel":
		if err := t.useByteLevel(); err != nil {
			return err
		}
		b := preByteLevel{addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			re, err := regexp2.Compile(gpt2Pattern, regexp2.None)
			if err != nil {
				return t.errorf("pre_tokenizer ByteLevel: %v", err)
			}
			b.regex = &preSplit{p: pattern{re: re}}
		}
		t.pre = append(t.pre, b)
		return nil
	case "Metaspace":
		m := preMetaspace{repl: c.Replacement, prepend: c.PrependScheme, splitOn: c.Split == nil || *c.Split}
		if m.repl == "" {
			m.repl = "▁"
		}
		if m.prepend == "" {
			m.prepend = "always"
			if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
				m.prepend = "never"
			}
		}
		if m.prepend != "always" && m.prepend != "first" && m.prepend != "never" {
			return t.errorf("pre_tokenizer Metaspace: unsupported prepend_scheme %q", m.prepend)
		}
		t.pre = append(t.pre, m)
		return nil
	case "Digits":
		t.pre = append(t.pre, preDigits{individual: c.IndividualDigits})
		return nil
	}
	return t.errorf("unsupported pre_tokenizer type %q", c.Type)
}

// bytesToChars is the GPT-2 byte-level alphabet: printable bytes map to
// themselves, the rest to code points from U+0100 upwards.
func bytesToChars() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// checkAlphabet makes sure every input byte has a token: byte-level BPE
// needs the 256 byte symbols in its vocabulary and byte fallback the 256
// <0xNN> tokens. Without them, text would silently encode to fewer tokens,
// or none.
func (t *Tokenizer) checkAlphabet() error {
	missing := func(ids *[256]int32) (n, first int) {
		first = -1
		for i, id := range ids {
			if id < 0 {
				n++
				if first < 0 {
					first = i
				}
			}
		}
		return n, first
	}
	b := t.bpe
	if b.byteLevel {
		if n, first := missing(&b.byteIDs); n > 0 {
			return t.errorf("model.vocab: byte-level BPE vocabulary lacks %d of the 256 byte symbols (first: %q for byte 0x%02X)",
				n, bytesToChars()[first], first)
		}
	}
	// A vocabulary may lack some <0xNN> tokens where the character is a
	// token of its own (Gemma's tokenizer.json has "\t", not <0x09>): a
	// character with a missing byte token and no token of its own becomes
	// the unk token, as upstream's BPE does, so only a vocabulary without
	// unk_token needs all 256.
	if b.byteFallback && b.unk < 0 {
		if n, first := missing(&b.fallbackIDs); n > 0 {
			return t.errorf("model.vocab: byte_fallback is set but the vocabulary lacks %d of the 256 byte tokens <0x00>..<0xFF> (first: <0x%02X>)",
				n, first)
		}
	}
	return nil
}

// useByteLevel switches the model to raw bytes: it records the token of
// each byte's character and a raw-bytes vocabulary for ignore_merges.
func (t *Tokenizer) useByteLevel() error {
	b := t.bpe
	if b.byteLevel {
		return nil
	}
	if b.prefix != "" || b.suffix != "" {
		return t.errorf("pre_tokenizer ByteLevel: BPE with continuing_subword_prefix/end_of_word_suffix is not supported")
	}
	b.byteLevel = true
	chars := bytesToChars()
	charByte := make(map[rune]byte, 256)
	for i, r := range chars {
		charByte[r] = byte(i)
		b.byteIDs[i] = -1
		if id, ok := b.vocab[string(r)]; ok {
			b.byteIDs[i] = int32(id)
		}
	}
	if b.ignoreMerges {
		b.rawVocab = make(map[string]int, len(b.vocab))
		buf := make([]byte, 0, 64)
		for s, id := range b.vocab {
			buf = buf[:0]
			ok := true
			for _, r := range s {
				c, found := charByte[r]
				if !found {
					ok = false
					break
				}
				buf = append(buf, c)
			}
			if ok {
				b.rawVocab[string(buf)] = id
			}
		}
	}
	return nil
}

func (t *Tokenizer) buildDecoder(raw json.RawMessage, out []decoder) ([]decoder, error) {
	if isNull(raw) {
		return out, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, t.errorf("decoder: %v", err)
	}
	switch c.Type {
	case "Sequence":
		var err error
		for _, r := range c.Decoders {
			if out, err = t.buildDecoder(r, out); err != nil {
				return nil, err
			}
		}
		return out, nil
	case "ByteLevel":
		chars := bytesToChars()
		m := make(map[rune]byte, 256)
		for i, r := range chars {
			m[r] = byte(i)
		}
		return append(out, byteLevelDecoder{m}), nil
	case "Replace":
		p, err := t.buildPattern("decoder Replace", c.Pattern)
		if err != nil {
			return nil, err
		}
		if c.Content != nil {
			p.content = *c.Content
		}
		return append(out, replaceDecoder{p}), nil
	case "ByteFallback":
		return append(out, byteFallbackDecoder{}), nil
	case "Fuse":
		return append(out, fuseDecoder{}), nil
	case "Strip":
		content := " "
		if c.Content != nil {
			content = *c.Content
		}
		r, n := utf8.DecodeRuneInString(content)
		if n == 0 || n != len(content) {
			return nil, t.errorf("decoder Strip: content %q is not one character", content)
		}
		return append(out, stripDecoder{content: r, start: c.Start, stop: c.Stop}), nil
	case "Metaspace":
		repl := c.Replacement
		if repl == "" {
			repl = "▁"
		}
		strip := c.PrependScheme != "never"
		if c.PrependScheme == "" && c.AddPrefixSpace != nil {
			strip = *c.AddPrefixSpace
		}
		return append(out, metaspaceDecoder{repl: repl, stripFirst: strip}), nil
	}
	return nil, t.errorf("unsupported decoder type %q", c.Type)
}

func (t *Tokenizer) buildPost(raw json.RawMessage) error {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return t.errorf("post_processor: %v", err)
	}
	switch c.Type {
	case "Sequence":
		for _, r := range c.Processors {
			if isNull(r) {
				continue
			}
			if err := t.buildPost(r); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		return nil // only adjusts offsets
	case "TemplateProcessing":
		seen := false
		for i, it := range c.Single {
			switch {
			case it.Sequence != nil:
				if seen {
					return t.errorf("post_processor TemplateProcessing: single has two sequences")
				}
				seen = true
			case it.SpecialToken != nil:
				sp, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return t.errorf("post_processor TemplateProcessing: single[%d]: special token %q not in special_tokens", i, it.SpecialToken.ID)
				}
				for _, id := range sp.IDs {
					if !t.known(id) {
						return t.errorf("post_processor TemplateProcessing: special token %q: id %d is not in the vocabulary (%d tokens, ids 0..%d)", it.SpecialToken.ID, id, len(t.tokens), len(t.tokens)-1)
					}
				}
				if seen {
					t.post.suffix = append(t.post.suffix, sp.IDs...)
				} else {
					t.post.prefix = append(t.post.prefix, sp.IDs...)
				}
			default:
				return t.errorf("post_processor TemplateProcessing: single[%d] is neither SpecialToken nor Sequence", i)
			}
		}
		return nil
	}
	return t.errorf("unsupported post_processor type %q", c.Type)
}
