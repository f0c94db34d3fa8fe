package compute

// BatchAttention is implemented by a backend that runs the attention of
// every sequence of a forward step as one call per layer (the CUDA
// backend: one kernel launch over every sequence's paged blocks), where
// Attention.Forward is one sequence's. A model calls it once per layer for
// a step of several sequences, each pass at its own positions over its own
// cache, after every pass's keys and values were appended; a backend
// without it has each sequence's Attention.Forward called in turn. The
// results are those of the passes' Forward calls up to float32 rounding.
type BatchAttention interface {
	// AttendBatch sets out to the attention of q for every pass: the
	// passes' rows follow one another in q and out (rows of
	// Heads*HeadDim values, Heads and HeadDim those every pass's
	// Attention was made with), pass i's N rows at positions
	// Start..Start+N-1 over KV, as passes[i].Attention.Forward would.
	// layer is the decoder layer's index (the same layer for every
	// pass), which the backend may key state kept between steps by.
	// cos and sin are the RoPE tables, as for Forward. With rotate set, q
	// holds the queries before RoPE: the call rotates them at their
	// positions (as Backend.RoPE would) and leaves q as it is. A failure
	// names the pass; like Forward's, it may leave out partly written.
	AttendBatch(out, q Buffer, rotate bool, layer int, passes []AttentionPass, cos, sin Buffer) error
}

// AttentionPass is one sequence's rows of a BatchAttention call: N
// queries at positions Start.. over the layer KV of the sequence whose
// attention (made by the same backend's NewAttention) is Attention.
type AttentionPass struct {
	Attention Attention
	KV        KVLayer
	N, Start  int
}
