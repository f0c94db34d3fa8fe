package calibrate

import _ "embed"

// text is the calibration text built into the binary: about 67 KB of
// original English written for this project by its developers (no text
// copied from elsewhere; the project's licence covers it), in 41 short
// sections of several registers: children's stories, narrative and
// dialogue, an interview and a forum thread, a letter and essays,
// encyclopedic articles and news, source code (Go, Python, C,
// JavaScript, SQL, Rust, shell, YAML, JSON), a manual page, an HTTP API
// reference, instructions and questions and answers, licence terms and a
// privacy notice, lists and figures. Ten of the encyclopedic articles are
// written in the surface form of pre-tokenized corpora such as WikiText
// (" = Title = " headings, punctuation set off by spaces, " @-@ " inside
// hyphenated words, " @,@ " and " @.@ " inside numbers): that form, not
// the encyclopedic register, is what a model's keys and values on such
// text differ by (docs/results/2026-11-28-calibration-broad.md).
//
// An automatic calibration reads the first 4,096 tokens
// (kakeya.DefaultCalibrationTokens), so the sections are ordered for
// those to meet the registers in about equal parts: with ref-qwen2-6m's
// tokenizer (23,400 tokens in all) two stories, two articles in corpus
// form, a dialogue, a manual page and a program; Qwen3's and Llama 2's
// tokenizers (15,800 and 17,500 tokens) reach the licence terms, an
// essay and a third story as well. No 64-byte passage of it is in the
// shared data set's scored texts (TestTextNotInSharedData).
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
