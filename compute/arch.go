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
