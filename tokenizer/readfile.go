package tokenizer

// The most bytes Load reads of tokenizer.json and tokenizer_config.json:
// several times the largest tokenizers' (a 256k vocabulary with its merges
// is ~35 MB; a config with chat templates well under 1 MB), so that a wrong
// path (/dev/zero, a named pipe) is an error, not memory grown without
// bound.
const (
	maxTokenizerBytes = 256 << 20
	maxConfigBytes    = 32 << 20
)
