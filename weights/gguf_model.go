package weights

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kakeya-ai/kakeya/tensor"
)

// IsGGUF reports whether path names a GGUF file by its extension.
func IsGGUF(path string) bool { return strings.HasSuffix(strings.ToLower(path), ".gguf") }

// ggufArchs maps general.architecture to the model_type whose tensor
// table and forward pass it uses. Mistral's GGUFs are "llama".
var ggufArchs = map[string]string{"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3": "gemma3_text"}

// OpenGGUFModel opens a GGUF model file: the configuration its metadata
// describes, and a Store holding its tensors under the Hugging Face names
// of the architecture table (LayerTensors' GGUF names are what it looks
// up), checked against the configuration as CheckTensors does. The Store
// owns the mapping: closing it unmaps the file, after which g's tensor
// data must not be read (its metadata stays usable).
func OpenGGUFModel(path string) (*Config, *Store, *GGUF, error) {
	g, err := OpenGGUF(path)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := g.Config()
	if err == nil {
		var s *Store
		if s, err = g.store(c); err == nil {
			if err = c.CheckTensors(s); err == nil {
				return c, s, g, nil
			}
			s.Close()
			return nil, nil, nil, err
		}
	}
	g.Close()
	return nil, nil, nil, err
}

// Config builds the model configuration from the metadata of a GGUF
// written by llama.cpp's converters: general.architecture and its
// "<arch>.*" hyperparameters; biases, q/k norms and tied embeddings from
// the tensors present. Errors name the file and the key.
func (g *GGUF) Config() (*Config, error) {
	arch, ok, err := g.String("general.architecture")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, g.keyErr("general.architecture", "missing")
	}
	mt, ok := ggufArchs[arch]
	if !ok {
		return nil, g.keyErr("general.architecture", "%q is not supported (supported: llama, mistral, qwen2, qwen3, gemma2, gemma3)", arch)
	}
	c := &Config{ModelType: mt, HiddenAct: "silu", BOSTokenID: -1, PadTokenID: -1, RopeTheta: 10000, RMSNormEps: 1e-5}
	p := arch + "."
	ints := []struct {
		key  string
		dst  *int
		need bool
	}{
		{"embedding_length", &c.HiddenSize, true},
		{"feed_forward_length", &c.IntermediateSize, true},
		{"block_count", &c.NumLayers, true},
		{"attention.head_count", &c.NumHeads, true},
		{"attention.head_count_kv", &c.NumKVHeads, false},
		{"attention.key_length", &c.HeadDim, false},
		{"context_length", &c.MaxPositionEmbeddings, true},
	}
	for _, f := range ints {
		n, ok, err := g.Int(p + f.key)
		switch {
		case err != nil:
			return nil, err
		case !ok && f.need:
			return nil, g.keyErr(p+f.key, "missing")
		case !ok:
			continue
		case n <= 0 || n > math.MaxInt32:
			return nil, g.keyErr(p+f.key, "%d is out of range", n)
		}
		*f.dst = int(n)
	}
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumHeads != 0 {
			return nil, g.keyErr(p+"embedding_length", "%d is not a multiple of %s %d and %s is missing",
				c.HiddenSize, p+"attention.head_count", c.NumHeads, p+"attention.key_length")
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if v, ok, err := g.Int(p + "attention.value_length"); err != nil {
		return nil, err
	} else if ok && int(v) != c.HeadDim {
		return nil, g.keyErr(p+"attention.value_length", "%d differs from the key length %d, which Kakeya does not support", v, c.HeadDim)
	}
	if v, ok, err := g.Int(p + "rope.dimension_count"); err != nil {
		return nil, err
	} else if ok && int(v) != c.HeadDim {
		return nil, g.keyErr(p+"rope.dimension_count", "%d: partial rotary embeddings (head size %d) are not supported", v, c.HeadDim)
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"attention.layer_norm_rms_epsilon", &c.RMSNormEps}, {"rope.freq_base", &c.RopeTheta}} {
		if v, ok, err := g.Float(p + f.key); err != nil {
			return nil, err
		} else if ok {
			*f.dst = v
		}
	}
	if err := g.ropeScaling(c, p); err != nil {
		return nil, err
	}
	if n, ok, err := g.Int(p + "attention.sliding_window"); err != nil {
		return nil, err
	} else if ok && n > 0 {
		c.SlidingWindow = int(n)
	}
	emb, ok := g.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("weights: %s: tensor \"token_embd.weight\" is missing", g.Path)
	}
	if len(emb.Dims) != 2 {
		return nil, fmt.Errorf("weights: %s: tensor \"token_embd.weight\" has dimensions %v, want 2", g.Path, emb.Dims)
	}
	c.VocabSize = emb.Dims[1]
	if n, ok, err := g.Int(p + "vocab_size"); err != nil {
		return nil, err
	} else if ok && int(n) != c.VocabSize {
		return nil, g.keyErr(p+"vocab_size", "%d, but token_embd.weight has %d rows", n, c.VocabSize)
	}
	_, hasOut := g.Tensor("output.weight")
	c.TieWordEmbeddings = !hasOut
	has := func(name string) bool { _, ok := g.Tensor(name); return ok }
	switch mt {
	case "qwen2":
		c.AttentionBias = true
	case "qwen3":
		c.QKNorm = true
		c.AttentionBias = has("blk.0.attn_q.bias")
		c.OutputBias = has("blk.0.attn_output.bias")
	default:
		c.AttentionBias = has("blk.0.attn_q.bias")
		c.OutputBias = has("blk.0.attn_output.bias")
		c.MLPBias = has("blk.0.ffn_gate.bias")
	}
	if IsGemma(mt) {
		if err := g.gemma(c, p); err != nil {
			return nil, err
		}
	}
	if has("rope_freqs.weight") {
		return nil, fmt.Errorf("weights: %s: tensor \"rope_freqs.weight\" (Llama 3.1 style RoPE frequency factors) is not supported", g.Path)
	}
	// Special ids outside the vocabulary are dropped, as llama.cpp does
	// (converters have written such ids); the tokenizer finds its end
	// tokens by their text too.
	if id, ok := g.specialID("bos"); ok {
		c.BOSTokenID = id
	}
	if id, ok := g.specialID("eos"); ok {
		c.EOSTokenIDs = []int{id}
	}
	if id, ok := g.specialID("padding"); ok {
		c.PadTokenID = id
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("weights: %s: %w", g.Path, err)
	}
	return c, nil
}

// specialID returns tokenizer.ggml.<which>_token_id when it names a row of
// the embedding table.
func (g *GGUF) specialID(which string) (int, bool) {
	n, ok, err := g.Int("tokenizer.ggml." + which + "_token_id")
	emb, hasEmb := g.Tensor("token_embd.weight")
	if err != nil || !ok || !hasEmb || len(emb.Dims) != 2 || n < 0 || n >= int64(emb.Dims[1]) {
		return 0, false
	}
	return int(n), true
}

// ropeScaling reads <arch>.rope.scaling.*: linear scaling is supported,
// none is the default.
func (g *GGUF) ropeScaling(c *Config, p string) error {
	typ, ok, err := g.String(p + "rope.scaling.type")
	if err != nil || !ok || typ == "none" {
		return err
	}
	if typ != "linear" {
		return g.keyErr(p+"rope.scaling.type", "%q is not supported (supported: none, linear)", typ)
	}
	f, ok, err := g.Float(p + "rope.scaling.factor")
	if err != nil {
		return err
	}
	if !ok {
		return g.keyErr(p+"rope.scaling.factor", "missing for linear scaling")
	}
	c.RopeScaling = &RopeScaling{Type: "linear", Factor: f}
	if n, ok, err := g.Int(p + "rope.scaling.original_context_length"); err != nil {
		return err
	} else if ok {
		c.RopeScaling.OriginalMaxPositionEmbeddings = int(n)
	}
	return nil
}

// store maps the tensors of c's architecture table to their Hugging Face
// names. For "llama" files it undoes convert_hf_to_gguf's permutation of
// the q and k rows (which turns Hugging Face's rotate-half RoPE pairs into
// ggml's adjacent pairs): those two matrices per layer are copied.
func (g *GGUF) store(c *Config) (*Store, error) {
	for _, t := range g.Tensors {
		rest, ok := strings.CutPrefix(t.Name, "blk.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(num); err == nil && (n < 0 || n >= c.NumLayers) {
			return nil, fmt.Errorf("weights: %s: tensor %q is past the %d layers of metadata key \"%s.block_count\"", g.Path, t.Name, c.NumLayers, g.arch())
		}
	}
	f := &mappedFile{path: g.Path, data: g.data}
	s := &Store{where: g.Path, files: []*mappedFile{f}, tensors: make(map[string]entry)}
	specs := c.ModelTensors()
	for i := range c.NumLayers {
		specs = append(specs, c.LayerTensors(i)...)
	}
	for _, ts := range specs {
		t, ok := g.Tensor(ts.GGUF)
		if !ok {
			why := ""
			if ts.Why != "" {
				why = " (" + ts.Why + ")"
			}
			return nil, fmt.Errorf("weights: %s: tensor %q is missing%s", g.Path, ts.GGUF, why)
		}
		if want := ts.Shape(); !slices.Equal(t.Shape(), want) {
			return nil, fmt.Errorf("weights: %s: tensor %q has dimensions %v, but the metadata implies %v (%s)",
				g.Path, ts.GGUF, t.Dims, reversed(want), dimFields(ts))
		}
		info := ggmlTypes[t.Type] // checkTensors knew the type
		e := entry{file: f, info: tensorInfo{
			dtypeName: info.name, dtype: info.dtype, shape: t.Shape(),
			begin: g.dataOff + t.Offset, end: g.dataOff + t.Offset + t.Size,
		}}
		if c.ModelType == "llama" && (ts.Role == Q || ts.Role == K) && info.dtype != 0 {
			heads := c.NumHeads
			if ts.Role == K {
				heads = c.NumKVHeads
			}
			rows := e.info.shape[0]
			if len(e.info.shape) != 2 || rows != heads*c.HeadDim {
				continue // the shape check reports it
			}
			e.heads = heads
		}
		s.tensors[ts.Name] = e
	}
	return s, nil
}

// unpermuteRows returns the rows of b (rows rows of equal length) in
// Hugging Face order: within each head of hd rows, the GGUF row 2i+j holds
// Hugging Face row j*hd/2+i.
func unpermuteRows(b []byte, rows, heads int) []byte {
	rb := len(b) / rows
	hd := rows / heads
	out := make([]byte, len(b))
	for h := range heads {
		for i := range hd / 2 {
			for j := range 2 {
				src := h*hd + 2*i + j
				dst := h*hd + j*hd/2 + i
				copy(out[dst*rb:(dst+1)*rb], b[src*rb:(src+1)*rb])
			}
		}
	}
	return out
}

// arch returns general.architecture, "" when it is not a string.
func (g *GGUF) arch() string {
	a, _, _ := g.String("general.architecture")
	return a
}

func reversed(s []int) []int {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// dimFields names the sizes a tensor's dimensions come from, fastest
// first as GGUF writes them.
func dimFields(ts TensorSpec) string {
	parts := make([]string, len(ts.Dims))
	for i, d := range ts.Dims {
		parts[len(parts)-1-i] = d.Field + "=" + strconv.Itoa(d.N)
	}
	return strings.Join(parts, ", ")
}

// WeightFormats lists the --weights values ParseWeightFormat accepts.
const WeightFormats = "q8_0, q4_0, q5_0, q4_k, q5_k, q6_k, bf16"

// ParseWeightFormat returns the element type a --weights value names for
// quantize-on-load (case-insensitive): one of WeightFormats; "" is the
// stored type (0).
func ParseWeightFormat(s string) (tensor.DType, error) {
	switch strings.ToLower(s) {
	case "":
		return 0, nil
	case "q8_0":
		return tensor.Q8_0, nil
	case "q4_0":
		return tensor.Q4_0, nil
	case "q5_0":
		return tensor.Q5_0, nil
	case "q4_k":
		return tensor.Q4_K, nil
	case "q5_k":
		return tensor.Q5_K, nil
	case "q6_k":
		return tensor.Q6_K, nil
	case "bf16":
		return tensor.BF16, nil
	}
	return 0, fmt.Errorf("weights: weight format %q is not supported (supported: %s)", s, WeightFormats)
}

// fallback is the type a matrix whose rows are not whole blocks of d gets
// instead, as llama-quantize falls back: Q5_0 for Q4_K and Q5_K (llama.cpp
// takes Q5_1 for Q5_K, which Kakeya does not read), Q8_0 for Q6_K.
func fallback(d tensor.DType) tensor.DType {
	switch d {
	case tensor.Q4_K, tensor.Q5_K:
		return tensor.Q5_0
	case tensor.Q6_K:
		return tensor.Q8_0
	}
	return 0
}

// Quantize returns t, a 2-D F32, F16 or BF16 matrix, quantized to the
// format (ParseWeightFormat) row by row, the rows spread over the CPUs
// (tensor.QuantizeRow: no float32 copy of the whole matrix), in memory of
// its own. A K format whose
// blocks do not fit the rows takes its fallback (Q5_0 or Q8_0) where that
// fits; "bf16" rounds F32 and F16 matrices to BF16. ok is false, and t is
// returned as it is, for another tensor, or one no format fits.
func (t *Tensor) Quantize(format string) (q *Tensor, ok bool, err error) {
	q, _, ok, err = t.QuantizeInterleaved(format, nil)
	return q, ok, err
}

// QuantizeInterleaved is Quantize for a backend whose kernels read some
// quantized types' rows interleaved (compute.Interleaver): where
// layout(d, rows, cols) names a format f for the type d the matrix
// quantizes to, q.Data holds the rows in f at once (its first rows, a
// multiple of f.Rows, in f's groups, then the rows after them as stored:
// the bytes tensor.InterleaveRows writes from Quantize's rows, bit for
// bit) and f is returned. Each group's rows are quantized into a buffer of
// the worker's own and moved from there into place, so the matrix is
// written once, in one buffer, where Quantize and then interleaving held
// two. A nil layout, or one that returns nil, is Quantize (f nil).
func (t *Tensor) QuantizeInterleaved(format string, layout func(d tensor.DType, rows, cols int) *tensor.InterleavedFormat) (q *Tensor, f *tensor.InterleavedFormat, ok bool, err error) {
	d, err := ParseWeightFormat(format)
	if err != nil {
		return nil, nil, false, err
	}
	if len(t.Shape) != 2 || t.DType.Size() == 0 || d == 0 {
		return t, nil, false, nil
	}
	if err := t.check(); err != nil {
		return nil, nil, false, fmt.Errorf("weights: %w", err)
	}
	if d == tensor.BF16 {
		if t.DType == tensor.BF16 {
			return t, nil, false, nil
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, nil, false, err
		}
		out := make([]byte, 2*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint16(out[2*i:], tensor.F32ToBF16(f))
		}
		return &Tensor{Name: t.Name, DType: tensor.BF16, Shape: t.Shape, Data: out}, nil, true, nil
	}
	if t.Shape[1]%d.Format().Block != 0 {
		d = fallback(d)
		if d == 0 || t.Shape[1]%d.Format().Block != 0 {
			return t, nil, false, nil
		}
	}
	rows, cols := t.Shape[0], t.Shape[1]
	rb, _ := d.RowBytes(cols)
	// Work units: the groups of f's rows (none without f), then the rows
	// after them one by one, whose bytes follow the groups'.
	ng, gb, gr := 0, 0, 1
	if layout != nil {
		f = layout(d, rows, cols)
	}
	if f != nil {
		var fits bool
		gb, fits = f.GroupBytes(cols)
		if f.Base != d || !fits || gb != f.Rows*rb {
			return nil, nil, false, fmt.Errorf("weights: tensor %q: layout %s does not fit %v rows of %d values", t.Name, f.Name, d, cols)
		}
		ng, gr = rows/f.Rows, f.Rows
	}
	units := ng + rows - ng*gr
	out := make([]byte, rows*rb)
	es := t.DType.Size()
	quantRow := func(dst []byte, row []float32, r int) error {
		src := &Tensor{Name: t.Name, DType: t.DType, Shape: []int{cols}, Data: t.Data[r*cols*es : (r+1)*cols*es]}
		v, err := src.Float32s()
		if err == nil {
			copy(row, v)
			err = tensor.QuantizeRow(dst, d, row)
		}
		if err != nil {
			return fmt.Errorf("weights: tensor %q row %d: %w", t.Name, r, err)
		}
		return nil
	}
	// The units go to one goroutine per CPU in contiguous runs: the K
	// types' scale search costs ~100 ns a value, minutes for a 7B model
	// on one core.
	workers := min(runtime.GOMAXPROCS(0), max(1, rows*cols/quantizeGrain), units)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			row := make([]float32, cols)
			var group []byte
			if f != nil {
				group = make([]byte, gr*rb)
			}
			for u := w * units / workers; u < (w+1)*units/workers; u++ {
				if u >= ng {
					r := ng*gr + u - ng
					if errs[w] = quantRow(out[r*rb:(r+1)*rb], row, r); errs[w] != nil {
						return
					}
					continue
				}
				for i := range gr {
					if errs[w] = quantRow(group[i*rb:(i+1)*rb], row, u*gr+i); errs[w] != nil {
						return
					}
				}
				if errs[w] = tensor.InterleaveRows(out[u*gb:(u+1)*gb], f, group, cols); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, false, err
	}
	return &Tensor{Name: t.Name, DType: d, Shape: []int{rows, cols}, Data: out}, f, true, nil
}

// quantizeGrain is about the fewest values worth a goroutine of their own
// when quantizing a matrix.
const quantizeGrain = 1 << 16

// gemma reads a Gemma GGUF's settings as llama.cpp does: the softcaps and
// window of its keys (Gemma 2's window 4096 where absent), the sliding
// pattern of attention.sliding_window_pattern (default 2 for Gemma 2, 6
// for Gemma 3), the sliding layers' RoPE base rope.freq_base_swa (Gemma
// 3: 10000 where absent), and queries scaled by head_dim^-1/2, or
// (hidden/heads)^-1/2 for the 27B models (46 and 62 layers), where the
// Hugging Face config names query_pre_attn_scalar. The norm weights are
// stored with Gemma's 1 added (llama.cpp's converters add it).
func (g *GGUF) gemma(c *Config, p string) error {
	c.HiddenAct = "gelu_pytorch_tanh"
	gemma2 := c.ModelType == "gemma2"
	for _, f := range []struct {
		key string
		dst *float64
	}{{"attn_logit_softcapping", &c.AttnLogitSoftcap}, {"final_logit_softcapping", &c.FinalLogitSoftcap}, {"rope.freq_base_swa", &c.RopeLocalTheta}} {
		if v, ok, err := g.Float(p + f.key); err != nil {
			return err
		} else if ok {
			*f.dst = v
		}
	}
	if !gemma2 {
		c.AttnLogitSoftcap = 0 // llama.cpp's Gemma 3 has none
		if c.RopeLocalTheta == 0 {
			c.RopeLocalTheta = 10000
		}
	} else {
		c.RopeLocalTheta = 0 // Gemma 2: one base
		if c.SlidingWindow == 0 {
			c.SlidingWindow = 4096
		}
	}
	c.QueryPreAttnScalar = float64(c.HeadDim)
	if (gemma2 && c.NumLayers == 46) || (!gemma2 && c.NumLayers == 62) {
		c.QueryPreAttnScalar = float64(c.HiddenSize / c.NumHeads)
	}
	pattern := int64(6)
	if gemma2 {
		pattern = 2
	}
	if n, ok, err := g.Int(p + "attention.sliding_window_pattern"); err != nil {
		return g.keyErr(p+"attention.sliding_window_pattern", "only a pattern length is supported: %v", err)
	} else if ok {
		pattern = n
	}
	if pattern <= 0 || pattern > maxLayers {
		return g.keyErr(p+"attention.sliding_window_pattern", "%d is out of range", pattern)
	}
	if c.NumLayers > maxLayers {
		return nil // Validate names block_count
	}
	c.LayerTypes = make([]string, c.NumLayers)
	for i := range c.LayerTypes {
		c.LayerTypes[i] = SlidingAttention
		if (int64(i)+1)%pattern == 0 {
			c.LayerTypes[i] = FullAttention
		}
	}
	return nil
}
