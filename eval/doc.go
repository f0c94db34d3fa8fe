// Package eval measures how a compressed KV cache changes a model's
// predictions: teacher-forced perplexity, KL divergence and top-1 agreement
// against an uncompressed reference run over the same token windows, with
// verdicts, JSON reports and a readable table.
//
// The core is independent of the engine: metrics are pure functions over
// logits rows, windows are slices of token ids, and the runner drives any
// Engine that can open a Sequence for a Config.
package eval

// Version is the engine version recorded in every report.
const Version = "kakeya 0.1.0-dev"
