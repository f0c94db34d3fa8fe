// Package model runs decoders (Llama 2/3, Mistral, SmolLM2, Qwen2/Qwen2.5,
// Qwen3, Gemma 2, Gemma 3) loaded from a Hugging Face model directory or a
// GGUF file: one generic forward pass over a paged, optionally compressed
// KV cache, reading each family's description (package model/arch). The pass names no device: its operations run on a
// compute.Backend the caller chooses (the CPU's is compute/cpubackend).
package model

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model/arch"
	"github.com/kakeya-ai/kakeya/tensor"
	"github.com/kakeya-ai/kakeya/weights"
)

// Options tune how a model runs. Backend is required; the other fields'
// zero values are defaults.
type Options struct {
	// Backend runs the forward pass; it is required, and stays the
	// caller's: Close does not close it.
	Backend compute.Backend
	// BlockSize is the number of tokens per KV cache block; 0 means 16
	// (or the context, if that is shorter). It may not exceed the context.
	BlockSize int
	// MaxContext caps the tokens a sequence may hold; 0 means the model's
	// max_position_embeddings, at most DefaultMaxContext. It may exceed
	// max_position_embeddings only as far as config.json's rope_scaling
	// extends the context (factor times the original length).
	MaxContext int
	// Cache says which KV blocks are compressed and how.
	Cache kvcache.Policy
	// Observe, if set, is called for every layer of every forward chunk with
	// the chunk's queries (n rows of heads*head_dim) and keys (n rows of
	// kv_heads*head_dim) at positions start..start+n-1, after biases and
	// QK-norm and before RoPE: what calibration needs. The slices are valid
	// only during the call and must not be modified. Observe must not close
	// the model or run forward passes on it.
	Observe func(layer, start, n int, q, k []float32)
	// Weights, when set (q8_0, q4_0, q5_0, q4_k, q5_k, q6_k or bf16; see
	// weights.ParseWeightFormat), quantizes the F32, F16 and BF16 matrices
	// as they load (a K type's fallback where rows are not whole blocks,
	// see weights.Tensor.Quantize; bf16 rounds F32 and F16 ones); "" keeps
	// every tensor in its stored type.
	Weights string
}

// DefaultMaxContext bounds the default context so that RoPE tables and
// attention scratch stay small for models trained on very long contexts.
const DefaultMaxContext = 32768

// prefillChunk is the most tokens one pass through the layers handles;
// longer inputs are split, bounding the activation scratch.
const prefillChunk = 512

// Model is a loaded decoder. Its methods are safe for concurrent use; each
// Sequence is used by one goroutine at a time.
type Model struct {
	// mu is held shared by every forward pass and exclusively by Close, so
	// Close waits for the passes in flight before unmapping the weights.
	mu     sync.RWMutex
	closed bool

	cfg   *weights.Config
	dir   string
	store *weights.Store
	b     compute.Backend

	blockSize, maxCtx int
	policy            kvcache.Policy
	observeAll        func(layer, start, n int, q, k []float32) // Options.Observe
	headDim           int
	eps               float32

	// desc is the architecture the forward pass follows; ops runs what it
	// adds to the Llama family's operations (nil when it adds nothing).
	desc *arch.Description
	ops  compute.ArchOps

	// weightBytes is the bytes of the matrices uploaded, per element type
	// (its lower-case name).
	weightBytes map[string]int64

	embed  compute.Weight
	layers []layer
	norm   compute.Buffer
	lmHead compute.Weight

	// ropes are the RoPE tables of each of desc.Kinds; cos and sin are
	// the first kind's (the only one of the Llama family), which the fused
	// steps read.
	ropes    []rope
	invFreq  []float32
	cos, sin compute.Buffer // RoPE angles, HeadDim/2 per position

	fused compute.Fused // the backend's fused steps, nil if it has none
	// normAdd runs a sandwich norm and its residual add in one step, nil
	// if the backend cannot
	normAdd compute.NormAdder
	// batch attends over every sequence of a step at once, nil if the
	// backend cannot
	batch compute.BatchAttention
	// greedy picks greedy tokens on the device, nil if the backend cannot
	greedy compute.Greedy
	// draw draws sampled tokens on the device, nil if the backend cannot
	// (compute.Draw).
	draw compute.Draw
}

// rope is one layer kind's RoPE: inverse frequencies, and cos and sin of
// every position's angles on the backend (HeadDim/2 per position).
type rope struct {
	invFreq  []float32
	cos, sin compute.Buffer
}

// layer holds one decoder layer's weights on the backend; a bias or norm
// the architecture lacks is an empty Buffer.
type layer struct {
	kind int // index of the layer's attention in the description's Kinds

	inNorm, postNorm compute.Buffer
	// attnOutNorm and ffnOutNorm normalise the attention's and the MLP's
	// outputs (Gemma's sandwich norms).
	attnOutNorm, ffnOutNorm compute.Buffer
	q, k, v, o              compute.Weight
	qBias, kBias            compute.Buffer
	vBias, oBias            compute.Buffer
	qNorm, kNorm            compute.Buffer
	gate, up, down          compute.Weight
	gateBias, upBias        compute.Buffer
	downBias                compute.Buffer

	// The layer's fused steps, for a backend that implements
	// compute.Fused (set by Model.fuse).
	qkv compute.QKV
	mlp compute.SwiGLU
}

// mat returns the field of the matrix of role r, nil if r is not a matrix.
func (l *layer) mat(r weights.Role) *compute.Weight {
	switch r {
	case weights.Q:
		return &l.q
	case weights.K:
		return &l.k
	case weights.V:
		return &l.v
	case weights.O:
		return &l.o
	case weights.Gate:
		return &l.gate
	case weights.Up:
		return &l.up
	case weights.Down:
		return &l.down
	}
	return nil
}

// vec returns the field of the vector of role r (a norm's weight, a
// bias), nil if r is not a vector.
func (l *layer) vec(r weights.Role) *compute.Buffer {
	switch r {
	case weights.InputNorm:
		return &l.inNorm
	case weights.PostNorm:
		return &l.postNorm
	case weights.QBias:
		return &l.qBias
	case weights.KBias:
		return &l.kBias
	case weights.VBias:
		return &l.vBias
	case weights.OBias:
		return &l.oBias
	case weights.QNorm:
		return &l.qNorm
	case weights.KNorm:
		return &l.kNorm
	case weights.GateBias:
		return &l.gateBias
	case weights.UpBias:
		return &l.upBias
	case weights.DownBias:
		return &l.downBias
	case weights.AttnOutNorm:
		return &l.attnOutNorm
	case weights.FFNOutNorm:
		return &l.ffnOutNorm
	}
	return nil
}

// isNorm reports whether role r is an RMSNorm's weight, to which the
// architecture's NormOffset is added.
func isNorm(r weights.Role) bool {
	switch r {
	case weights.FinalNorm, weights.InputNorm, weights.PostNorm, weights.QNorm, weights.KNorm, weights.AttnOutNorm, weights.FFNOutNorm:
		return true
	}
	return false
}

// Load reads the model in dir (a local Hugging Face model directory): its
// config.json and safetensors weights. It checks every tensor's presence,
// dtype and shape; large matrices stay in their stored dtype, mapped from
// the files, while norms and biases are converted to float32.
//
// dir may instead name a GGUF file (weights.IsGGUF): its metadata is the
// configuration and its tensors, of any type the backend takes (quantized
// ones included), are read in place.
func Load(dir string, opt Options) (*Model, error) {
	if weights.IsGGUF(dir) {
		return loadGGUF(dir, opt)
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m, err := newModel(dir, cfg, opt)
	if err != nil {
		return nil, err
	}
	if m.store, err = weights.Open(dir); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	// The tensors present must match config.json before anything sized by
	// it is allocated: a config claiming a billion layers fails here.
	if err := cfg.CheckTensors(m.store); err != nil {
		m.store.Close()
		return nil, fmt.Errorf("model: %w", err)
	}
	return m.finish(opt)
}

// loadGGUF loads a GGUF file: OpenGGUFModel checks its tensors against its
// metadata before anything is sized by it.
func loadGGUF(path string, opt Options) (*Model, error) {
	cfg, store, _, err := weights.OpenGGUFModel(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m, err := newModel(path, cfg, opt)
	if err != nil {
		store.Close()
		return nil, err
	}
	m.store = store
	return m.finish(opt)
}

// finish uploads the tensors of the opened, checked store.
func (m *Model) finish(opt Options) (*Model, error) {
	m.b = opt.Backend
	if _, err := weights.ParseWeightFormat(opt.Weights); err != nil {
		m.store.Close()
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := m.loadTensors(opt.Weights); err != nil {
		m.store.Close()
		return nil, err
	}
	return m, nil
}

// Backend returns the backend the model runs on.
func (m *Model) Backend() compute.Backend { return m.b }

// newModel checks the options against the configuration and computes the
// RoPE frequencies.
func newModel(dir string, cfg *weights.Config, opt Options) (*Model, error) {
	// config.json was validated once, as weights.ParseConfig read it
	// (supported model_type, sizes, head_dim); what is left here are the
	// options.
	hd := cfg.HeadDim
	if opt.Backend == nil {
		return nil, errors.New("model: Options.Backend is nil: the model needs a compute backend (compute/cpubackend's for the CPU)")
	}
	desc, err := arch.Describe(cfg)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	m := &Model{cfg: cfg, dir: dir, headDim: hd, eps: float32(cfg.RMSNormEps), policy: opt.Cache, observeAll: opt.Observe, desc: desc}
	if !desc.Plain() {
		// The architecture's own operations need a backend that runs them.
		ops, ok := opt.Backend.(compute.ArchOps)
		if !ok {
			return nil, fmt.Errorf("model: %s: model_type %s needs %s, which the %s backend does not implement (compute.ArchOps)",
				dir, cfg.ModelType, strings.Join(desc.Needs(), ", "), opt.Backend.Name())
		}
		m.ops = ops
	}
	m.maxCtx = opt.MaxContext
	if m.maxCtx == 0 {
		m.maxCtx = min(cfg.MaxPositionEmbeddings, DefaultMaxContext)
	}
	if m.maxCtx < 0 {
		return nil, fmt.Errorf("model: max context %d, want > 0", opt.MaxContext)
	}
	if err := checkContext(dir, cfg, m.maxCtx); err != nil {
		return nil, err
	}
	m.blockSize = opt.BlockSize
	if m.blockSize == 0 {
		m.blockSize = min(16, m.maxCtx)
	}
	if err := checkBlockSize(m.blockSize, m.maxCtx); err != nil {
		return nil, err
	}
	m.ropes = make([]rope, len(desc.Kinds))
	for i, k := range desc.Kinds {
		if m.ropes[i].invFreq, err = invFreq(hd, k.RopeTheta, k.RopeScaling); err != nil {
			return nil, fmt.Errorf("model: %s: config.json: %w", dir, err)
		}
	}
	m.invFreq = m.ropes[0].invFreq
	return m, nil
}

// contextLimit returns the most positions the model's RoPE is meant for:
// max_position_embeddings, or factor times the original length where
// rope_scaling (linear or llama3) extends it. The second result says whether
// rope_scaling raised the limit.
func contextLimit(cfg *weights.Config) (int, bool) {
	n := cfg.MaxPositionEmbeddings
	rs := cfg.RopeScaling
	if rs == nil || (rs.Type != "linear" && rs.Type != "llama3") {
		return n, false
	}
	orig := n
	if rs.OriginalMaxPositionEmbeddings > 0 {
		orig = rs.OriginalMaxPositionEmbeddings
	}
	ext := rs.Factor * float64(orig)
	if !(ext > float64(n)) {
		return n, false
	}
	return int(min(ext, math.MaxInt32)), true
}

// checkContext is the one rule for how long a context may be: at most
// contextLimit. A max_position_embeddings that is not positive says
// nothing, so any context passes.
func checkContext(dir string, cfg *weights.Config, ctx int) error {
	if cfg.MaxPositionEmbeddings <= 0 {
		return nil
	}
	limit, extended := contextLimit(cfg)
	switch {
	case ctx <= limit:
		return nil
	case extended:
		rs := cfg.RopeScaling
		return fmt.Errorf("model: context %d exceeds %d, the max_position_embeddings %d of %s as its rope_scaling (%s, factor %g) extends it",
			ctx, limit, cfg.MaxPositionEmbeddings, dir, rs.Type, rs.Factor)
	default:
		return fmt.Errorf("model: context %d exceeds max_position_embeddings %d of %s and config.json has no rope_scaling that extends it",
			ctx, cfg.MaxPositionEmbeddings, dir)
	}
}

// checkBlockSize rejects KV cache blocks longer than the context: a block
// is allocated whole, so they would only waste memory.
func checkBlockSize(bs, ctx int) error {
	switch {
	case bs <= 0:
		return fmt.Errorf("model: block size %d, want > 0", bs)
	case bs > ctx:
		return fmt.Errorf("model: block size %d exceeds the context of %d tokens", bs, ctx)
	}
	return nil
}

// loader fetches tensors by name, keeping the first error.
type loader struct {
	dir     string
	store   *weights.Store
	weights string // quantize matrices to this format on load; "": keep them
	b       compute.Backend
	err     error
	mats    []namedWeight // the matrices uploaded, in order
	bytes   map[string]int64
}

// namedWeight is an uploaded matrix and the tensor it came from.
type namedWeight struct {
	name string
	w    compute.Weight
}

func (ld *loader) tensor(ts weights.TensorSpec) *weights.Tensor {
	name, shape := ts.Name, ts.Shape()
	if ld.err != nil {
		return nil
	}
	if !ld.store.Has(name) {
		ld.err = fmt.Errorf("model: %s: tensor %s is missing", ld.dir, name)
		return nil
	}
	t, err := ld.store.Tensor(name)
	if err != nil {
		ld.err = fmt.Errorf("model: %s: tensor %s: %w", ld.dir, name, err)
		return nil
	}
	if !slices.Equal(t.Shape, shape) {
		ld.err = fmt.Errorf("model: %s: tensor %s has shape %v, want %v", ld.dir, name, t.Shape, shape)
		return nil
	}
	if t.DType.Size() == 0 && !t.DType.Quantized() {
		ld.err = fmt.Errorf("model: %s: tensor %s has dtype %v, want F32, F16, BF16 or a quantized type", ld.dir, name, t.DType)
		return nil
	}
	return t
}

// mat uploads a matrix to the backend in its stored dtype.
func (ld *loader) mat(ts weights.TensorSpec) compute.Weight {
	name := ts.Name
	t := ld.tensor(ts)
	if t == nil {
		return nil
	}
	// Quantizing on load for a backend that reads the type's rows
	// interleaved writes them so at once (one pass, one buffer) rather
	// than have its Prepare copy them.
	var layout *tensor.InterleavedFormat
	if ld.weights != "" {
		var interleaved func(d tensor.DType, rows, cols int) *tensor.InterleavedFormat
		if iv, ok := ld.b.(compute.Interleaver); ok {
			interleaved = iv.Interleaved
		}
		q, f, ok, err := t.QuantizeInterleaved(ld.weights, interleaved)
		if err != nil {
			ld.err = fmt.Errorf("model: %s: tensor %s: %w", ld.dir, name, err)
			return nil
		}
		if ok {
			t, layout = q, f
			ld.store.Evict(name) // the stored matrix is not read again
		}
	}
	m, err := t.Mat()
	if err != nil {
		ld.err = fmt.Errorf("model: %s: tensor %s: %w", ld.dir, name, err)
		return nil
	}
	var w compute.Weight
	if layout != nil {
		w, err = ld.b.(compute.Interleaver).UploadInterleaved(m, layout)
	} else {
		w, err = ld.b.Upload(m)
	}
	if err != nil {
		ld.err = fmt.Errorf("model: %s: tensor %s: %w", ld.dir, name, err)
		return nil
	}
	ld.mats = append(ld.mats, namedWeight{name, w})
	if ld.bytes == nil {
		ld.bytes = map[string]int64{}
	}
	ld.bytes[strings.ToLower(m.DType.String())] += int64(len(m.Q) + 2*len(m.U16) + 4*len(m.F32))
	return w
}

// vec uploads a vector (a norm's weight, a bias) as float32, plus
// offset (in float32) to every value.
func (ld *loader) vec(ts weights.TensorSpec, offset float32) compute.Buffer {
	name := ts.Name
	t := ld.tensor(ts)
	if t == nil {
		return compute.Buffer{}
	}
	v, err := t.Float32s()
	if err != nil {
		ld.err = fmt.Errorf("model: %s: tensor %s: %w", ld.dir, name, err)
		return compute.Buffer{}
	}
	if offset != 0 {
		v = slices.Clone(v) // the tensor's values may be the mapped file's
		for i := range v {
			v[i] += offset
		}
	}
	return ld.upload(v)
}

// upload copies host values into a new backend buffer.
func (ld *loader) upload(v []float32) compute.Buffer {
	b := ld.b.Alloc(len(v))
	ld.b.Write(b, v)
	return b
}

// loadTensors uploads the tensors weights' architecture table lists for
// the configuration (the table CheckTensors checked them against), each to
// its place in the forward pass.
func (m *Model) loadTensors(wf string) error {
	c := m.cfg
	ld := &loader{dir: m.dir, store: m.store, b: m.b, weights: wf}
	// Gemma's RMSNorm weighs by 1 + w: the offset is added as the weights
	// load (in float32, as transformers does), so RMSNorm stays x̂·w. A
	// GGUF file's norms have it added already (llama.cpp's converter
	// does).
	offset := m.desc.NormOffset
	if weights.IsGGUF(m.dir) {
		offset = 0
	}
	normOffset := func(r weights.Role) float32 {
		if isNorm(r) {
			return offset
		}
		return 0
	}
	for _, t := range c.ModelTensors() {
		switch t.Role {
		case weights.Embed:
			m.embed = ld.mat(t)
		case weights.FinalNorm:
			m.norm = ld.vec(t, offset)
		case weights.LMHead:
			m.lmHead = ld.mat(t)
		}
	}
	if c.TieWordEmbeddings {
		m.lmHead = m.embed
	}
	m.layers = make([]layer, c.NumLayers)
	for i := range m.layers {
		l := &m.layers[i]
		l.kind = m.desc.LayerKind[i]
		for _, t := range c.LayerTensors(i) {
			if mat := l.mat(t.Role); mat != nil {
				*mat = ld.mat(t)
			} else if vec := l.vec(t.Role); vec != nil {
				*vec = ld.vec(t, normOffset(t.Role))
			} else {
				return fmt.Errorf("model: %s: tensor %s has a role the forward pass does not know (%d)", m.dir, t.Name, t.Role)
			}
		}
	}
	for i := range m.ropes {
		r := &m.ropes[i]
		if j := sameRope(m.ropes[:i], r.invFreq); j >= 0 {
			r.cos, r.sin = m.ropes[j].cos, m.ropes[j].sin
			continue
		}
		cos, sin := ropeTables(r.invFreq, m.maxCtx)
		r.cos, r.sin = ld.upload(cos), ld.upload(sin)
	}
	m.cos, m.sin = m.ropes[0].cos, m.ropes[0].sin
	if ld.err == nil {
		m.prepare(ld.mats)
		m.fuse()
	}
	m.weightBytes = ld.bytes
	return ld.err
}

// fuse describes each layer's fused steps for a backend that runs them
// (compute.Fused); the forward pass hands them over by pointer, so a step
// allocates nothing.
func (m *Model) fuse() {
	m.greedy, _ = m.b.(compute.Greedy)
	m.draw, _ = m.b.(compute.Draw)
	m.batch, _ = m.b.(compute.BatchAttention)
	m.normAdd, _ = m.b.(compute.NormAdder)
	f, ok := m.b.(compute.Fused)
	if !ok || !m.desc.Plain() && m.ops == nil {
		// The fused steps are the Llama family's layer, and, on a
		// backend with compute.ArchOps, Gemma's: the layer kind's RoPE
		// tables and GELU-tanh gating (its sandwich norms, scales and
		// softcaps run outside them).
		return
	}
	m.fused = f
	c := m.cfg
	for i := range m.layers {
		l := &m.layers[i]
		rp := &m.ropes[l.kind]
		l.qkv = compute.QKV{
			Norm: l.inNorm, Eps: m.eps, Q: l.q, K: l.k, V: l.v,
			QBias: l.qBias, KBias: l.kBias, VBias: l.vBias, QNorm: l.qNorm, KNorm: l.kNorm,
			Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: m.headDim, Cos: rp.cos, Sin: rp.sin,
		}
		l.mlp = compute.SwiGLU{Norm: l.postNorm, Eps: m.eps, Gate: l.gate, Up: l.up, GateBias: l.gateBias, UpBias: l.upBias,
			GELUTanh: m.desc.Act == arch.GELUTanh}
	}
}

// prepare has a backend that lays weights out for its kernels do so now for
// every matrix the forward pass multiplies (the embedding table only where
// it is also the output head), and lets go of the mapped pages of those it
// copied: the checkpoint's pages would otherwise stay resident beside the
// copy. (Embed reads the few rows it needs back from the page cache, or,
// where the CPU backend interleaved a quantized table, from its copy.)
func (m *Model) prepare(mats []namedWeight) {
	p, ok := m.b.(compute.Preparer)
	if !ok {
		return
	}
	for _, nw := range mats {
		if nw.name == m.cfg.TensorPrefix+"model.embed_tokens.weight" && !m.cfg.TieWordEmbeddings {
			continue
		}
		if p.Prepare(nw.w) {
			m.store.Evict(nw.name)
		}
	}
}

// DeviceGreedy reports whether the model's backend picks greedy tokens on
// its device (compute.Greedy), so that a Greedy BatchItem reads back its
// token id rather than its logits.
func (m *Model) DeviceGreedy() bool { return m.greedy != nil }

// DeviceDraw reports whether the model's backend draws sampled tokens on
// its device (compute.Draw), so that a BatchItem with a Draw reads back
// its token id rather than its logits.
func (m *Model) DeviceDraw() bool { return m.draw != nil }

// Config returns the model's configuration. It must not be modified.
// Dir returns the directory or GGUF file the model was loaded from.
func (m *Model) Dir() string { return m.dir }

func (m *Model) Config() *weights.Config { return m.cfg }

// Weights describes the matrices as they were uploaded: each element type
// with its bytes, largest first, then the total, e.g. "q4_k 3.38 MiB,
// q6_k 1.46 MiB (4.84 MiB)". A tied output matrix is the embedding's.
func (m *Model) Weights() string {
	type part struct {
		d string
		n int64
	}
	var parts []part
	var total int64
	for d, n := range m.weightBytes {
		parts = append(parts, part{d, n})
		total += n
	}
	slices.SortFunc(parts, func(a, b part) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.d, b.d)) })
	var sb strings.Builder
	for i, p := range parts {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s %s", p.d, mibString(p.n))
	}
	fmt.Fprintf(&sb, " (%s)", mibString(total))
	return sb.String()
}

// mibString is n bytes in MiB, or GiB from 10 GiB up.
func mibString(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

// ContextLimit returns the most positions Options.MaxContext may ask for:
// max_position_embeddings, or as far as rope_scaling extends it (0 where
// config.json sets no limit).
func (m *Model) ContextLimit() int {
	if m.cfg.MaxPositionEmbeddings <= 0 {
		return 0
	}
	n, _ := contextLimit(m.cfg)
	return n
}

// A ContextError is a prompt that does not fit a sequence's context.
type ContextError struct {
	Tokens  int // the prompt's tokens, those already in the sequence included
	Context int // the context: Options.MaxContext, or the model's default
	Limit   int // the most Options.MaxContext may be (ContextLimit), 0 if none
	// Generate says the prompt must also leave room for a generated token.
	Generate bool
}

func (e *ContextError) Error() string { return e.Explain("Options.MaxContext") }

// Explain says what is wrong and what to do, naming raise as the setting
// that raises the context (a command names its flag).
func (e *ContextError) Explain(raise string) string {
	what := fmt.Sprintf("the prompt is %d tokens, more than the context of %d", e.Tokens, e.Context)
	if e.Generate && e.Tokens == e.Context {
		what = fmt.Sprintf("the prompt is %d tokens and fills the context of %d, leaving no room to generate", e.Tokens, e.Context)
	}
	switch {
	case e.Limit == 0:
		return fmt.Sprintf("%s: raise %s or shorten the prompt", what, raise)
	case e.Limit > e.Context:
		return fmt.Sprintf("%s: raise %s (this model allows up to %d) or shorten the prompt", what, raise, e.Limit)
	}
	return fmt.Sprintf("%s, the most this model allows: shorten the prompt", what)
}

// MaxContext returns the most tokens a sequence may hold.
func (m *Model) MaxContext() int { return m.maxCtx }

// BlockSize returns the KV cache block size of the model's Options, the
// default of SequenceOptions.BlockSize.
func (m *Model) BlockSize() int { return m.blockSize }

// InvFreq returns the RoPE inverse frequencies, rope_scaling applied: of
// the first layer (see LayerInvFreq).
func (m *Model) InvFreq() []float32 { return slices.Clone(m.invFreq) }

// LayerInvFreq returns layer i's RoPE inverse frequencies: Gemma 3's
// sliding and full layers have different bases.
func (m *Model) LayerInvFreq(i int) []float32 {
	return slices.Clone(m.ropes[m.layers[i].kind].invFreq)
}

// Arch returns the model's architecture description. It must not be
// modified.
func (m *Model) Arch() *arch.Description { return m.desc }

// Close unmaps the weights (the backend stays the caller's), after waiting for
// the forward passes in flight. Afterwards every method of the model and of
// its sequences that returns an error returns one matching ErrClosed; the
// others stay harmless. Closing twice is not an error.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	if m.store != nil {
		if err := m.store.Close(); err != nil {
			return fmt.Errorf("model: %s: %w", m.dir, err)
		}
	}
	return nil
}

// acquire keeps the weights mapped until release, failing once Close has
// begun. Hold it for no longer than a forward pass and never twice on one
// goroutine: a pending Close blocks new holders.
func (m *Model) acquire() error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return errModelClosed
	}
	return nil
}

func (m *Model) release() { m.mu.RUnlock() }

// checkOpen returns ErrClosed once the model is closed.
func (m *Model) checkOpen() error {
	if err := m.acquire(); err != nil {
		return err
	}
	m.release()
	return nil
}

// Logits runs ids through a fresh sequence and returns one row of
// vocab_size logits per position.
func (m *Model) Logits(ids []int) ([][]float32, error) {
	s, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	flat, err := s.Forward(ids, true)
	if err != nil {
		return nil, err
	}
	v := m.cfg.VocabSize
	rows := make([][]float32, len(ids))
	for i := range rows {
		rows[i] = flat[i*v : (i+1)*v : (i+1)*v]
	}
	return rows, nil
}

// ErrClosed is the error of a method called on a closed Model or Sequence,
// or on a Sequence whose Model is closed (and of a closed kakeya.Engine). The errors returned
// name what was closed; test for them with errors.Is(err, ErrClosed).
var ErrClosed = errors.New("model: closed")

// closedError names what was closed; it matches ErrClosed.
type closedError string

func (e closedError) Error() string        { return "model: the " + string(e) + " is closed" }
func (e closedError) Is(target error) bool { return target == ErrClosed }

const (
	errModelClosed    = closedError("model")
	errSequenceClosed = closedError("sequence")
)
