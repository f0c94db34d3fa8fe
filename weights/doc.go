// Package weights reads what a Hugging Face model directory holds besides the
// tokenizer: safetensors checkpoints (one file or a sharded index, memory
// mapped and read zero-copy), config.json for the supported decoder
// architectures, and the resolution of a model name to a local directory,
// either as given, from the standard Hugging Face cache, or downloaded from
// the Hub into that cache.
//
// It also writes safetensors files, for tests that build tiny checkpoints and
// for calibration artifacts.
package weights
