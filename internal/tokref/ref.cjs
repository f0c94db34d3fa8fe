// ref.cjs encodes texts with an independent implementation of Hugging Face
// tokenizers (@lenml/tokenizers, a port of transformers.js's), for the
// comparison in tokref_test.go. Usage:
//
//	node ref.cjs NODE_MODULES_DIR TOKENIZER_DIR < request.json
//
// request.json is {"texts": [...]}; it writes {"ids": [[...], ...],
// "decoded": [...]}: each text encoded with the tokenizer's special tokens
// (add_special_tokens, as transformers' default) and those ids decoded
// without the special tokens.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require(path.join(process.argv[2], "@lenml", "tokenizers"));
const dir = process.argv[3];
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const req = JSON.parse(fs.readFileSync(0, "utf8"));
const ids = req.texts.map((t) => tok.encode(t));
const decoded = ids.map((x) => tok.decode(x, { skip_special_tokens: true }));
process.stdout.write(JSON.stringify({ ids, decoded }));
