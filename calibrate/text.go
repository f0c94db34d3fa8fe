package calibrate

import _ "embed"

// text is the calibration text built into the binary: original English
// prose written for this purpose (narrative, dialogue, exposition,
// instructions, a letter, some code and numbers), about 8,000 tokens for
// a 4,096-token vocabulary. Its variety, rather than any one domain, is
// what a calibration made without the user's text needs.
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
