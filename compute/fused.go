package compute

// Fused is implemented by a backend that runs a run of a decoder layer's
// operations as one step of its own: the CUDA backend's decode fusions,
// one kernel each where the separate operations take several. A model
// calls a method where its backend implements the interface. Each method
// reports false, having done nothing, for arguments it does not fuse
// (prefill's many rows, say); the caller then runs the separate
// operations. A fused method's results are those of the operations it
// replaces up to float32 rounding, and it records its failures for Err as
// they do.
type Fused interface {
	// NormQKV sets q, k and v (n = len(pos) rows of p.Heads, p.KVHeads
	// and p.KVHeads heads of p.HeadDim values) to the n rows of x
	// normalised by RMSNorm (weight p.Norm, p.Eps) times p.Q, p.K and p.V
	// transposed, plus their biases; then normalises each head of q and k
	// by RMSNorm (p.QNorm, p.KNorm) when the layer has those weights, and
	// rotates the heads of row i of q at position pos[i] by p.Cos and
	// p.Sin as RoPE does (a step's rows may be several sequences'). k is
	// left unrotated, as the KV cache stores it.
	NormQKV(q, k, v, x Buffer, pos []int, p *QKV) bool
	// NormSwiGLU sets gate (n rows of p.Gate's Rows) to silu(xn Wg^T + bg)
	// * (xn Wu^T + bu), xn being the n rows of x normalised by RMSNorm
	// (weight p.Norm, p.Eps): a SwiGLU feed-forward up to its down
	// projection; with p.GELUTanh, gelu_tanh in place of silu (GeGLU, as
	// ArchOps.GELUTanhMul).
	NormSwiGLU(gate, x Buffer, n int, p *SwiGLU) bool
	// MatMulAdd adds x (n rows of w's Cols) times w transposed, plus bias
	// (none when bias.Len is 0) to each row, to acc: a projection added to
	// the residual stream.
	MatMulAdd(acc, x Buffer, n int, w Weight, bias Buffer) bool
	// NormMatMul sets out (n rows of w's Rows) to the n rows of x
	// normalised by RMSNorm (weight norm, eps) times w transposed: the
	// final norm and the output head.
	NormMatMul(out, x, norm Buffer, eps float32, n int, w Weight) bool
}

// NormAdder is implemented by a backend that adds normalised rows to the
// residual stream in one step of its own (the CUDA backend's rmsnorm_add
// kernel): Gemma's sandwich norms, which normalise a layer's attention
// and MLP outputs before adding them. A model calls it where its backend
// implements it; the results are RMSNorm into a scratch then Add's,
// bit for bit.
type NormAdder interface {
	// NormAdd adds to acc the n rows of x normalised by RMSNorm (weight
	// norm, eps).
	NormAdd(acc, x, norm Buffer, n int, eps float32)
}

// QKV is a decoder layer's attention input, for Fused.NormQKV: the
// normalisation before attention, the three projections and their biases
// (empty Buffers where the layer has none), the per-head norms of Qwen3
// (empty where absent), and the geometry and RoPE tables (HeadDim/2
// values per position) of the query rotation.
type QKV struct {
	Norm                Buffer
	Eps                 float32
	Q, K, V             Weight
	QBias, KBias, VBias Buffer
	QNorm, KNorm        Buffer

	Heads, KVHeads, HeadDim int
	Cos, Sin                Buffer
}

// SwiGLU is a decoder layer's feed-forward up to its down projection, for
// Fused.NormSwiGLU: the normalisation before it, the gate and up
// projections and their biases (empty Buffers where the layer has none).
// GELUTanh gates by GELU's tanh approximation rather than SiLU (Gemma's
// GeGLU); only a backend that implements ArchOps is given it.
type SwiGLU struct {
	Norm             Buffer
	Eps              float32
	Gate, Up         Weight
	GateBias, UpBias Buffer
	GELUTanh         bool
}
