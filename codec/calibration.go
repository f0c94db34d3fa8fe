package codec

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Calibration holds what the codecs learn from a model offline: per layer
// and KV head the Cholesky factor of the pooled query second moment (for
// Preconditioned keys), residual codebooks for keys and values by width,
// and the principal components KakeyaPC allocates its bits from.
type Calibration struct {
	Layers, KVHeads, HeadDim int
	// Chol is indexed layer*KVHeads+head; each entry is a d x d row-major
	// lower-triangular L, or nil when that head has none.
	Chol       [][]float32
	KCodebooks map[int]*Codebook // by bits
	VCodebooks map[int]*Codebook // by bits
	// KPCA holds the keys' (before RoPE) principal components per layer
	// and KV head, indexed layer*KVHeads+head; VPCA the values' per layer,
	// the KV heads pooled (a layer has one value codec). Both nil when the
	// calibration has none.
	KPCA  []*PCAStats
	VPCA  []*PCAStats
	Model string
	// Meta holds provenance (how the calibration was made: data, tokens,
	// ridge, ...) stored as extra file metadata; it cannot override the
	// keys Metadata sets itself.
	Meta map[string]string
}

// Validate checks c against a model's shape and its own consistency.
func (c *Calibration) Validate(layers, kvHeads, headDim int) error {
	if c == nil {
		return fmt.Errorf("codec: calibration is nil")
	}
	if c.Layers != layers || c.KVHeads != kvHeads || c.HeadDim != headDim {
		return fmt.Errorf("codec: calibration for %q is for %d layers x %d kv heads x head_dim %d, model has %d x %d x %d",
			c.Model, c.Layers, c.KVHeads, c.HeadDim, layers, kvHeads, headDim)
	}
	if c.Chol != nil && len(c.Chol) != layers*kvHeads {
		return fmt.Errorf("codec: calibration: %d cholesky entries, want layers*kv_heads = %d", len(c.Chol), layers*kvHeads)
	}
	for i, l := range c.Chol {
		if l == nil {
			continue
		}
		if len(l) != headDim*headDim {
			return fmt.Errorf("codec: calibration: layer %d kv head %d: cholesky has %d values, want %d",
				i/kvHeads, i%kvHeads, len(l), headDim*headDim)
		}
		for r := 0; r < headDim; r++ {
			if !(l[r*headDim+r] > 0) {
				return fmt.Errorf("codec: calibration: layer %d kv head %d: cholesky diagonal %d is %v, want > 0",
					i/kvHeads, i%kvHeads, r, l[r*headDim+r])
			}
			for k := r + 1; k < headDim; k++ {
				if l[r*headDim+k] != 0 {
					return fmt.Errorf("codec: calibration: layer %d kv head %d: cholesky [%d][%d] = %v above the diagonal",
						i/kvHeads, i%kvHeads, r, k, l[r*headDim+k])
				}
			}
		}
	}
	if err := c.validatePCA(layers, kvHeads, headDim); err != nil {
		return err
	}
	for _, set := range []struct {
		name string
		m    map[int]*Codebook
	}{{"k", c.KCodebooks}, {"v", c.VCodebooks}} {
		for bits, cb := range set.m {
			if err := cb.Validate(); err != nil {
				return fmt.Errorf("codec: calibration: %s codebook b%d: %w", set.name, bits, err)
			}
			if cb.Bits() != bits {
				return fmt.Errorf("codec: calibration: %s codebook b%d has %d levels", set.name, bits, len(cb.Levels))
			}
		}
	}
	return nil
}

// validatePCA checks the principal components: all present or none, of
// dimension headDim.
func (c *Calibration) validatePCA(layers, kvHeads, headDim int) error {
	if c.KPCA == nil && c.VPCA == nil {
		return nil
	}
	if len(c.KPCA) != layers*kvHeads || len(c.VPCA) != layers {
		return fmt.Errorf("codec: calibration: %d key and %d value PCA entries, want layers*kv_heads = %d and layers = %d",
			len(c.KPCA), len(c.VPCA), layers*kvHeads, layers)
	}
	for i, st := range c.KPCA {
		if err := st.Validate(); err != nil {
			return fmt.Errorf("codec: calibration: layer %d kv head %d keys: %w", i/kvHeads, i%kvHeads, err)
		}
		if st.Dim() != headDim {
			return fmt.Errorf("codec: calibration: layer %d kv head %d keys: PCA of dimension %d, want %d", i/kvHeads, i%kvHeads, st.Dim(), headDim)
		}
	}
	for l, st := range c.VPCA {
		if err := st.Validate(); err != nil {
			return fmt.Errorf("codec: calibration: layer %d values: %w", l, err)
		}
		if st.Dim() != headDim {
			return fmt.Errorf("codec: calibration: layer %d values: PCA of dimension %d, want %d", l, st.Dim(), headDim)
		}
	}
	return nil
}

// pcaParts names the arrays of a PCAStats in its tensors' names.
var pcaParts = []string{"mean", "basis", "var", "between"}

// pcaTensors adds st's arrays to out under prefix + "." + part.
func pcaTensors(out map[string]Tensor, prefix string, st *PCAStats) {
	d := st.Dim()
	out[prefix+".mean"] = Tensor{Shape: []int{d}, Data: st.Mean}
	out[prefix+".basis"] = Tensor{Shape: []int{d, d}, Data: st.Basis}
	out[prefix+".var"] = Tensor{Shape: []int{d}, Data: st.Var}
	out[prefix+".between"] = Tensor{Shape: []int{d}, Data: st.Between}
}

// setPCAPart stores tensor t as part of st, checking its shape for d.
func setPCAPart(st *PCAStats, part, name string, t Tensor, d int) error {
	want := []int{d}
	if part == "basis" {
		want = []int{d, d}
	}
	if !slices.Equal(t.Shape, want) {
		return fmt.Errorf("codec: calibration: tensor %s has shape %v, want %v", name, t.Shape, want)
	}
	v := slices.Clone(t.Data)
	switch part {
	case "mean":
		st.Mean = v
	case "basis":
		st.Basis = v
	case "var":
		st.Var = v
	case "between":
		st.Between = v
	}
	return nil
}

// Tensor is a named flat array with its shape, ready for safetensors.
type Tensor struct {
	Shape []int
	Data  []float32
}

// Tensors names c's arrays for serialisation:
//
//	"layers.{l}.kv_heads.{h}.chol"  [d, d]    lower-triangular L
//	"codebook.k.b{bits}"            [2^bits]  key residual levels
//	"codebook.v.b{bits}"            [2^bits]  value residual levels
//	"layers.{l}.kv_heads.{h}.pca.k.{mean,basis,var,between}"  [d] ([d, d] for basis)  keys' PCAStats
//	"layers.{l}.pca.v.{mean,basis,var,between}"               [d] ([d, d] for basis)  values' PCAStats
//
// Shape and model travel as Metadata. The slices are shared, not copied.
func (c *Calibration) Tensors() map[string]Tensor {
	out := make(map[string]Tensor)
	d := c.HeadDim
	for i, l := range c.Chol {
		if l != nil {
			out[fmt.Sprintf("layers.%d.kv_heads.%d.chol", i/c.KVHeads, i%c.KVHeads)] = Tensor{Shape: []int{d, d}, Data: l}
		}
	}
	for i, st := range c.KPCA {
		pcaTensors(out, fmt.Sprintf("layers.%d.kv_heads.%d.pca.k", i/c.KVHeads, i%c.KVHeads), st)
	}
	for l, st := range c.VPCA {
		pcaTensors(out, fmt.Sprintf("layers.%d.pca.v", l), st)
	}
	for bits, cb := range c.KCodebooks {
		out[fmt.Sprintf("codebook.k.b%d", bits)] = Tensor{Shape: []int{len(cb.Levels)}, Data: cb.Levels}
	}
	for bits, cb := range c.VCodebooks {
		out[fmt.Sprintf("codebook.v.b%d", bits)] = Tensor{Shape: []int{len(cb.Levels)}, Data: cb.Levels}
	}
	return out
}

// Metadata returns the string metadata stored beside the tensors.
func (c *Calibration) Metadata() map[string]string {
	m := maps.Clone(c.Meta)
	if m == nil {
		m = make(map[string]string)
	}
	maps.Copy(m, map[string]string{
		"format":   "kakeya-calibration-v1",
		"layers":   strconv.Itoa(c.Layers),
		"kv_heads": strconv.Itoa(c.KVHeads),
		"head_dim": strconv.Itoa(c.HeadDim),
		"model":    c.Model,
	})
	return m
}

// FromTensors rebuilds a Calibration from Metadata and Tensors output,
// rejecting unknown names, bad shapes and out-of-range indexes.
func FromTensors(meta map[string]string, ts map[string]Tensor) (*Calibration, error) {
	if f := meta["format"]; f != "kakeya-calibration-v1" {
		return nil, fmt.Errorf("codec: calibration: metadata format %q, want kakeya-calibration-v1", f)
	}
	var c Calibration
	for _, f := range []struct {
		key string
		dst *int
	}{{"layers", &c.Layers}, {"kv_heads", &c.KVHeads}, {"head_dim", &c.HeadDim}} {
		v, err := strconv.Atoi(meta[f.key])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("codec: calibration: metadata %s = %q, want a positive integer", f.key, meta[f.key])
		}
		*f.dst = v
	}
	c.Model = meta["model"]
	for k, v := range meta {
		switch k {
		case "format", "layers", "kv_heads", "head_dim", "model":
		default:
			if c.Meta == nil {
				c.Meta = make(map[string]string)
			}
			c.Meta[k] = v
		}
	}
	d := c.HeadDim
	// Sorted so the first error reported is deterministic.
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		t := ts[name]
		prod := 1
		for _, s := range t.Shape {
			prod *= s
		}
		if prod != len(t.Data) {
			return nil, fmt.Errorf("codec: calibration: tensor %s has shape %v but %d values", name, t.Shape, len(t.Data))
		}
		var l, h, bits int
		var which, part string
		switch {
		case pcaName(name, &l, &h, &which, &part):
			if l < 0 || l >= c.Layers || which == "k" && (h < 0 || h >= c.KVHeads) {
				return nil, fmt.Errorf("codec: calibration: tensor %s outside %d layers x %d kv heads", name, c.Layers, c.KVHeads)
			}
			if c.KPCA == nil {
				c.KPCA, c.VPCA = make([]*PCAStats, c.Layers*c.KVHeads), make([]*PCAStats, c.Layers)
			}
			slot := &c.VPCA[l]
			if which == "k" {
				slot = &c.KPCA[l*c.KVHeads+h]
			}
			if *slot == nil {
				*slot = new(PCAStats)
			}
			if err := setPCAPart(*slot, part, name, t, d); err != nil {
				return nil, err
			}
		case scan(name, "layers.%d.kv_heads.%d.chol", &l, &h):
			if l < 0 || l >= c.Layers || h < 0 || h >= c.KVHeads {
				return nil, fmt.Errorf("codec: calibration: tensor %s outside %d layers x %d kv heads", name, c.Layers, c.KVHeads)
			}
			if !slices.Equal(t.Shape, []int{d, d}) {
				return nil, fmt.Errorf("codec: calibration: tensor %s has shape %v, want [%d %d]", name, t.Shape, d, d)
			}
			if c.Chol == nil {
				c.Chol = make([][]float32, c.Layers*c.KVHeads)
			}
			c.Chol[l*c.KVHeads+h] = slices.Clone(t.Data)
		case scan(name, "codebook.%1s.b%d", &which, &bits) && (which == "k" || which == "v"):
			if len(t.Shape) != 1 {
				return nil, fmt.Errorf("codec: calibration: tensor %s has shape %v, want one dimension", name, t.Shape)
			}
			cb, err := CodebookFromLevels(t.Data)
			if err != nil {
				return nil, fmt.Errorf("codec: calibration: tensor %s: %w", name, err)
			}
			if cb.Bits() != bits {
				return nil, fmt.Errorf("codec: calibration: tensor %s has %d levels, want %d", name, len(t.Data), 1<<bits)
			}
			m := &c.KCodebooks
			if which == "v" {
				m = &c.VCodebooks
			}
			if *m == nil {
				*m = make(map[int]*Codebook)
			}
			(*m)[bits] = cb
		default:
			return nil, fmt.Errorf("codec: calibration: unknown tensor %q", name)
		}
	}
	for i, st := range c.KPCA {
		if st == nil {
			return nil, fmt.Errorf("codec: calibration: no key PCA for layer %d kv head %d", i/c.KVHeads, i%c.KVHeads)
		}
	}
	for l, st := range c.VPCA {
		if st == nil {
			return nil, fmt.Errorf("codec: calibration: no value PCA for layer %d", l)
		}
	}
	if err := c.Validate(c.Layers, c.KVHeads, c.HeadDim); err != nil {
		return nil, err
	}
	return &c, nil
}

// pcaName matches the name of a PCA tensor, setting the layer, the KV
// head (keys only), the side ("k" or "v") and the part.
func pcaName(name string, l, h *int, which, part *string) bool {
	for _, p := range pcaParts {
		if scan(name, "layers.%d.kv_heads.%d.pca.k."+p, l, h) {
			*which, *part = "k", p
			return true
		}
		if scan(name, "layers.%d.pca.v."+p, l) {
			*which, *part = "v", p
			return true
		}
	}
	return false
}

// scan matches name against format exactly (fmt.Sscanf plus a round trip,
// so "layers.01..." or trailing text do not match).
func scan(name, format string, args ...any) bool {
	if _, err := fmt.Sscanf(name, format, args...); err != nil {
		return false
	}
	vals := make([]any, len(args))
	for i, a := range args {
		switch p := a.(type) {
		case *int:
			vals[i] = *p
		case *string:
			vals[i] = *p
		}
	}
	return fmt.Sprintf(format, vals...) == name
}

// CovAccumulator sums outer products of query vectors to estimate the
// (uncentred) second moment E[q qᵀ], the matrix in E_q[(q·Δk)²] = Δkᵀ Σ Δk.
// Pool all query heads that share a KV head into one accumulator.
type CovAccumulator struct {
	d     int
	n     int64
	upper []float64 // row-major d x d, upper triangle used
}

// NewCovAccumulator returns an empty accumulator for dimension d.
func NewCovAccumulator(d int) *CovAccumulator {
	return &CovAccumulator{d: d, upper: make([]float64, d*d)}
}

// Add accumulates one query vector of length d.
func (a *CovAccumulator) Add(q []float32) error {
	if len(q) != a.d {
		return fmt.Errorf("codec: covariance: vector of %d values, want %d", len(q), a.d)
	}
	for i, qi := range q {
		if !finite32(qi) {
			return fmt.Errorf("codec: covariance: value %d is %v", i, qi)
		}
	}
	d := a.d
	for i, qi := range q {
		fi := float64(qi)
		row := a.upper[i*d : (i+1)*d]
		for j := i; j < d; j++ {
			row[j] += fi * float64(q[j])
		}
	}
	a.n++
	return nil
}

// Count returns the number of vectors added.
func (a *CovAccumulator) Count() int64 { return a.n }

// Cov returns the full symmetric d x d estimate of E[q qᵀ] (zeros when
// nothing was added).
func (a *CovAccumulator) Cov() []float64 {
	d := a.d
	out := make([]float64, d*d)
	if a.n == 0 {
		return out
	}
	inv := 1 / float64(a.n)
	for i := 0; i < d; i++ {
		for j := i; j < d; j++ {
			v := a.upper[i*d+j] * inv
			out[i*d+j], out[j*d+i] = v, v
		}
	}
	return out
}
