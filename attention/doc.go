// Package attention holds the device-independent attention algorithms that
// run in host memory: causal grouped-query attention over a sequence's
// paged KV cache, tiled so that a block's rotated keys serve a chunk of
// queries at once, and reading encoded blocks directly (decoding them, or
// through a codec's fused rotate-as-you-decode and weighted-sum paths). Its
// store (NewStore) keeps the blocks; its work runs on a kernels/cpu pool.
// The CPU backend is a thin layer over it; a GPU backend has its own
// kernels for the same contract (compute.Attention).
package attention
