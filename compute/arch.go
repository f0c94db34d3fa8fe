package compute

// ArchOps is implemented by a backend that runs what architectures beyond
// the Llama family add to Backend's operations (Gemma 2 and Gemma 3):
// scaled embeddings, GELU-tanh gating and softcapped logits, and, in the
// attention NewAttention makes, AttentionParams' Scale and Softcap. A
// model whose architecture needs any of them refuses a backend without
// it, naming what is missing. Failures are recorded as for Backend's
// operations without an error.
type ArchOps interface {
	// Scale multiplies x by s element by element.
	Scale(x Buffer, s float32)
	// GELUTanhMul sets gate to gelu_tanh(gate) * up element by element,
	// gelu_tanh(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715*g^3))).
	GELUTanhMul(gate, up Buffer)
	// Softcap sets each value v of x to c*tanh(v/c).
	Softcap(x Buffer, c float32)
}

// SlidingKV is implemented by a backend whose attention, made with a
// Window, reads no KV block that ends before the window of the call's
// first query (position start-Window+1): a KV cache may then release
// those blocks (kvcache's sliding layers), leaving their parts nil. A
// model gives the cache its layers' windows only on such a backend.
type SlidingKV interface {
	SlidingKV()
}
