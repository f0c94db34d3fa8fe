package calibrate

import _ "embed"

// text is the calibration text built into the binary: about 63 KB of
// original English written for this project by its developers (no text
// copied from elsewhere), in 38 short sections of many registers:
// encyclopedic articles (history, science, geography, a biography, a
// storm, a ship class), stories and dialogue, an interview, a letter,
// source code (Go, Python, C, JavaScript, SQL, Rust, shell, YAML, JSON),
// a manual page and an HTTP API reference, licence terms and a privacy
// notice, news and sports reports, questions and answers and a forum
// thread, instructions, lists, tables and figures. About 22,000 tokens
// for a 4,096-token vocabulary, 15,000 for Qwen's.
//
// An automatic calibration takes windows spread evenly over the whole
// text (Options.Spread), not its first tokens; the sections are ordered
// so that the 8 windows of 512 tokens a 4,096-token calibration takes
// meet every register, with the tokenizers of ref-qwen2-6m, Qwen3 and
// Llama 2. Its variety, rather than any one domain, is what a
// calibration made without the user's text needs.
//
//go:embed text.txt
var text string

// Text returns the calibration text built into the binary, what the engine
// calibrates a model on when it needs a calibration and none is given, and
// what kakeya-eval calibrate reads with --data builtin.
func Text() string { return text }

// BuiltinData is the name the tools give the built-in calibration text in
// place of a file (kakeya-eval calibrate --data builtin) and in a
// calibration's provenance.
const BuiltinData = "builtin"
