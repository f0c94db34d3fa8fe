// Package calibrate measures what a compressed KV cache needs to know of a
// model: per layer and KV head the Cholesky factor of the pre-RoPE query
// second moment (for preconditioned key codecs), Lloyd–Max codebooks
// for the Kakeya residuals of keys and values, and the principal
// components of keys and values (for kakeya-pc). Run computes a
// codec.Calibration from a model directory and some text's token ids; Save
// and Load keep it in a safetensors file, the one kakeya-eval calibrate
// writes and the tools' --calib flag reads.
package calibrate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/weights"
)

// Run's defaults.
const (
	// DefaultCtx is the window length when Options.Ctx is 0 (capped at
	// the model's context).
	DefaultCtx = 512
	// DefaultRidge is added to the query second moment before its
	// Cholesky factorization, relative to its mean eigenvalue (tr Σ / d).
	DefaultRidge = 1e-2
	// DefaultCodebookSamples bounds the residual samples a codebook is
	// trained on, per side (K or V).
	DefaultCodebookSamples = 1 << 18
	// DefaultBlockSize is the KV block length when Options.BlockSize is 0,
	// the engine's default. Codebooks are fitted to the residuals of full
	// blocks only, so a window shorter than a block gives them nothing.
	DefaultBlockSize = 16
)

// Options tune Run. The zero value calibrates the query Cholesky factors
// only, over all the ids, in windows of DefaultCtx tokens.
type Options struct {
	// Ctx is the window length in tokens: ids are cut into consecutive
	// windows, each run through a fresh sequence, starting with BOS when the
	// model has one. 0 means min(DefaultCtx, model context).
	Ctx int
	// MaxTokens caps the ids used; 0 uses all of them.
	MaxTokens int
	// Ridge is the Cholesky ridge relative to tr Σ / d; 0 means
	// DefaultRidge, a negative value means none.
	Ridge float64
	// RopeAveraged replaces each query second moment Σ by the mean of
	// R(Δ) Σ R(Δ)ᵀ over the query-key offsets Δ in [0, RopeSpan) (see
	// RopeAverage): keys are coded before RoPE but scored after it. Off by
	// default: on stories260K at equal bits the plain pre-RoPE Σ gave
	// lower KL than the average over [0, 512) (attention concentrates on
	// small offsets, where R(Δ) ≈ I).
	RopeAveraged bool
	// RopeSpan is the number of offsets averaged; 0 means Ctx.
	RopeSpan int
	// Bits lists the residual widths to train K and V codebooks for (e.g.
	// 2, 3, 4); none trains no codebooks.
	Bits []int
	// Kakeya is the codec whose residuals the codebooks are fitted to; nil
	// means codec.DefaultKakeyaOptions (its Bits and Codebook are ignored).
	Kakeya *codec.KakeyaOptions
	// BlockSize is the number of tokens per coded block; 0 means 16, the
	// engine's default.
	BlockSize int
	// CodebookSamples bounds the values collected per side for codebooks;
	// 0 means DefaultCodebookSamples.
	CodebookSamples int
	// PCA measures the principal components of every full KV block (per
	// layer and KV head for keys, per layer for values), which kakeya-pc
	// allocates its bits from; they depend on BlockSize, which should be
	// the cache's.
	PCA bool
	// Threads is the number of compute threads of the default CPU
	// backend; 0 means GOMAXPROCS.
	Threads int
	// Backend runs the model; nil means a CPU backend of Threads threads.
	Backend compute.Backend
	// Progress, if set, is called once before the first window (Windows
	// 0) and then after each window.
	Progress func(Progress)
}

// Progress is how far a Run has got.
type Progress struct {
	Windows, TotalWindows int // windows run so far, and in all
	Tokens, TotalTokens   int // tokens run so far (BOS included), and in all
}

// TooFewTokensError is Run's error when the ids cannot train the
// codebooks asked for: those are fitted to the Kakeya residuals of full KV
// blocks only, and the windows must hold enough of them to give at least
// one sample per level of the widest codebook.
type TooFewTokensError struct {
	Tokens    int   // ids used, after MaxTokens
	Need      int   // the fewest ids that give enough samples
	Bits      []int // the codebook widths asked for
	Blocks    int   // full KV blocks needed
	BlockSize int   // tokens per KV block
	BOS       bool  // each window starts with a BOS token of its own
}

func (e *TooFewTokensError) Error() string {
	bos := ""
	if e.BOS {
		bos = ", BOS included"
	}
	blocks := "one full KV block"
	if e.Blocks > 1 {
		blocks = strconv.Itoa(e.Blocks) + " full KV blocks"
	}
	return fmt.Sprintf("calibrate: %d tokens; training %s-bit codebooks needs at least %d (%s of %d tokens%s, whose residuals are the samples)",
		e.Tokens, joinInts(e.Bits), e.Need, blocks, e.BlockSize, bos)
}

// joinInts formats 2, 3, 4 as "2,3,4".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// Run runs the model in dir over ids and returns its calibration:
// per layer and KV head the Cholesky factor of the uncentred second moment
// of the pre-RoPE queries of all query heads sharing that KV head, and, for
// each of opt.Bits, Lloyd–Max codebooks fitted to the Kakeya residuals of
// the model's keys (whitened by those factors, as Preconditioned codes
// them) and values. It is deterministic for fixed inputs. On the default
// CPU backend the model runs exact f32 matrix products, so a calibration
// does not carry bf16 rounding of the activations.
func Run(ctx context.Context, dir string, ids []int, opt Options) (*codec.Calibration, error) {
	b := opt.Backend
	if b == nil {
		cpu, err := cpubackend.NewMatMul(opt.Threads, "f32")
		if err != nil {
			return nil, fmt.Errorf("calibrate: %w", err)
		}
		defer cpu.Close()
		b = cpu
	}
	m, err := model.Load(dir, model.Options{Backend: b})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return RunModel(ctx, m, ids, opt)
}

// RunModel is Run on a model already loaded, on its own backend and
// precision (opt.Backend and opt.Threads are not used): the model runs
// its calibration windows in a sequence of its own, which observes the
// queries through model.SequenceOptions.Observe, so m may serve other
// sequences meanwhile. A model loaded with a model.Options.Cache policy
// still calibrates over uncompressed blocks. The calibration names the
// model by m.Dir's base name.
func RunModel(ctx context.Context, m *model.Model, ids []int, opt Options) (*codec.Calibration, error) {
	dir := m.Dir()
	cfg := m.Config()
	layers, kvh, d := cfg.NumLayers, cfg.NumKVHeads, m.CacheShape().HeadDim
	o, err := calibDefaults(opt, m.MaxContext())
	if err != nil {
		return nil, err
	}
	p, err := planWindows(ids, o, cfg.BOSTokenID, layers*kvh, d)
	if err != nil {
		return nil, err
	}
	st := newCalibState(layers, cfg.NumHeads, kvh, d)
	samples := &blockSampler{stride: p.stride, layers: layers, kvHeads: kvh, blockSize: o.BlockSize}
	var pca *pcaState
	if o.PCA {
		pca = newPCAState(layers, kvh, d)
	}
	if err := feed(ctx, m, st, samples, pca, p, o); err != nil {
		return nil, err
	}

	cal := &codec.Calibration{Layers: layers, KVHeads: kvh, HeadDim: d, Chol: make([][]float32, layers*kvh), Model: filepath.Base(dir)}
	var avg func(layer int) *ropeMeans
	if o.RopeAveraged {
		// Each layer's own RoPE (Gemma 3's sliding and full layers differ).
		means := make([]*ropeMeans, layers)
		for l := range means {
			inv := m.LayerInvFreq(l)
			for j := range l {
				if slices.Equal(m.LayerInvFreq(j), inv) {
					means[l] = means[j]
					break
				}
			}
			if means[l] == nil {
				means[l] = newRopeMeans(inv, o.RopeSpan)
			}
		}
		avg = func(layer int) *ropeMeans { return means[layer] }
	}
	if err := factorCovariances(cal, st, avg, o.Ridge); err != nil {
		return nil, err
	}
	if len(o.Bits) > 0 {
		if err := trainCodebooks(cal, o, samples.k, samples.v); err != nil {
			return nil, err
		}
	}
	cal.Meta = p.meta(o, st.acc[0].Count(), len(samples.k))
	if pca != nil {
		if cal.KPCA, cal.VPCA, err = pca.stats(); err != nil {
			return nil, fmt.Errorf("calibrate: %w", err)
		}
		cal.Meta["pca_blocks"] = strconv.FormatInt(pca.v[0].Blocks(), 10)
	}
	return cal, nil
}

// pcaState accumulates the moments of every full KV block for PCA: keys
// per layer and KV head, values per layer (the heads pooled).
type pcaState struct {
	layers, kvHeads int
	k, v            []*codec.PCAAccumulator
}

func newPCAState(layers, kvHeads, d int) *pcaState {
	s := &pcaState{layers: layers, kvHeads: kvHeads, k: make([]*codec.PCAAccumulator, layers*kvHeads), v: make([]*codec.PCAAccumulator, layers)}
	for i := range s.k {
		s.k[i] = codec.NewPCAAccumulator(d)
	}
	for i := range s.v {
		s.v[i] = codec.NewPCAAccumulator(d)
	}
	return s
}

// add accumulates the first blocks full KV blocks of seq, of n rows each.
func (s *pcaState) add(seq *model.Sequence, blocks, n int) error {
	for b := range blocks {
		for l := range s.layers {
			for h := range s.kvHeads {
				kb, vb, err := seq.KVBlock(l, h, b)
				if err != nil {
					return err
				}
				if err := s.k[l*s.kvHeads+h].AddBlock(kb, n); err != nil {
					return fmt.Errorf("layer %d kv head %d keys: %w", l, h, err)
				}
				if err := s.v[l].AddBlock(vb, n); err != nil {
					return fmt.Errorf("layer %d kv head %d values: %w", l, h, err)
				}
			}
		}
	}
	return nil
}

// stats returns the keys' and the values' statistics.
func (s *pcaState) stats() (k, v []*codec.PCAStats, err error) {
	k, v = make([]*codec.PCAStats, len(s.k)), make([]*codec.PCAStats, len(s.v))
	for i, a := range s.k {
		if k[i], err = a.Stats(); err != nil {
			return nil, nil, fmt.Errorf("layer %d kv head %d keys: %w", i/s.kvHeads, i%s.kvHeads, err)
		}
	}
	for l, a := range s.v {
		if v[l], err = a.Stats(); err != nil {
			return nil, nil, fmt.Errorf("layer %d values: %w", l, err)
		}
	}
	return k, v, nil
}

// windowPlan is how Run covers its tokens: the windows it feeds the model
// and how densely it samples their KV blocks for codebook training.
type windowPlan struct {
	windows [][]int
	tokens  int // in all the windows, BOS included
	stride  int // keep every stride-th (block, layer, KV head) seen
}

// planWindows cuts the first o.MaxTokens of ids into windows and sets the
// sampling stride so that the codebook samples spread over all the windows
// within o.CodebookSamples. With o.Bits it checks, before any forward pass
// (codebook training would fail only after the whole run), that the
// windows hold enough full blocks for heads KV heads of size d, and
// returns a TooFewTokensError if not.
func planWindows(ids []int, o Options, bos, heads, d int) (*windowPlan, error) {
	if o.MaxTokens > 0 && len(ids) > o.MaxTokens {
		ids = ids[:o.MaxTokens]
	}
	p := &windowPlan{windows: splitWindows(ids, o.Ctx, bos), stride: 1}
	if len(p.windows) == 0 {
		return nil, fmt.Errorf("calibrate: %d tokens, want at least 2 per window", len(ids))
	}
	full := 0
	for _, w := range p.windows {
		p.tokens += len(w)
		full += len(w) / o.BlockSize
	}
	if len(o.Bits) == 0 {
		return p, nil
	}
	need, err := codebookBlocks(o, heads, d)
	if err != nil {
		return nil, err
	}
	if full < need {
		return nil, &TooFewTokensError{Tokens: len(ids), Need: minCalibTokens(need, o.Ctx, o.BlockSize, bos >= 0),
			Bits: slices.Clone(o.Bits), Blocks: need, BlockSize: o.BlockSize, BOS: bos >= 0}
	}
	p.stride = max(1, (full*heads*o.BlockSize*d+o.CodebookSamples-1)/o.CodebookSamples)
	return p, nil
}

// meta records how the calibration was made: the plan's coverage, o's
// settings, the query vectors per accumulator and, with o.Bits, the
// blocks sampled for codebooks.
func (p *windowPlan) meta(o Options, queries int64, sampled int) map[string]string {
	meta := map[string]string{
		"tokens":        strconv.Itoa(p.tokens),
		"windows":       strconv.Itoa(len(p.windows)),
		"ctx":           strconv.Itoa(o.Ctx),
		"ridge":         strconv.FormatFloat(o.Ridge, 'g', -1, 64),
		"rope_averaged": strconv.FormatBool(o.RopeAveraged),
		"rope_span":     strconv.Itoa(o.RopeSpan),
		"block_size":    strconv.Itoa(o.BlockSize),
		"query_vectors": strconv.FormatInt(queries, 10),
	}
	if len(o.Bits) > 0 {
		meta["codebook_blocks"] = strconv.Itoa(sampled)
	}
	return meta
}

// feed runs each window of p through m from an empty cache, so that m's
// Observe hook fills st, and with o.Bits hands each window's full KV
// blocks to samples. It reports progress through o.Progress and stops
// when ctx is done.
func feed(ctx context.Context, m *model.Model, st *calibState, samples *blockSampler, pca *pcaState, p *windowPlan, o Options) error {
	seq, err := m.NewSequenceOpts(model.SequenceOptions{BlockSize: o.BlockSize, KeepAll: true, Observe: st.observeHook})
	if err != nil {
		return err
	}
	defer seq.Close()
	done := 0
	if o.Progress != nil {
		o.Progress(Progress{TotalWindows: len(p.windows), TotalTokens: p.tokens})
	}
	for i, w := range p.windows {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		seq.Reset()
		if _, err := seq.Forward(w, false); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		if st.err != nil {
			return fmt.Errorf("calibrate: %w", st.err)
		}
		if len(o.Bits) > 0 {
			if err := samples.sample(seq, len(w)/o.BlockSize); err != nil {
				return fmt.Errorf("calibrate: %w", err)
			}
		}
		if pca != nil {
			if err := pca.add(seq, len(w)/o.BlockSize, o.BlockSize); err != nil {
				return fmt.Errorf("calibrate: %w", err)
			}
		}
		done += len(w)
		if o.Progress != nil {
			o.Progress(Progress{Windows: i + 1, TotalWindows: len(p.windows), Tokens: done, TotalTokens: p.tokens})
		}
	}
	return nil
}

// blockSampler keeps every stride-th KV block a run sees, counting across
// windows block by block, then layer, then KV head, for codebook training.
type blockSampler struct {
	stride, layers, kvHeads, blockSize int

	seen int          // blocks seen so far
	k, v []calibBlock // the kept blocks, copied out of the cache
}

// sample looks at the first blocks full KV blocks of seq.
func (s *blockSampler) sample(seq *model.Sequence, blocks int) error {
	for b := range blocks {
		for l := range s.layers {
			for h := range s.kvHeads {
				s.seen++
				if (s.seen-1)%s.stride != 0 {
					continue
				}
				kb, vb, err := seq.KVBlock(l, h, b)
				if err != nil {
					return err
				}
				s.k = append(s.k, calibBlock{l*s.kvHeads + h, slices.Clone(kb)})
				s.v = append(s.v, calibBlock{l*s.kvHeads + h, slices.Clone(vb)})
			}
		}
	}
	return nil
}

// factorCovariances sets cal.Chol to the Cholesky factor of each KV head's
// query second moment in st, RoPE-averaged by avg(layer) when avg is not
// nil, with ridge the relative ridge of Options.Ridge.
func factorCovariances(cal *codec.Calibration, st *calibState, avg func(layer int) *ropeMeans, ridge float64) error {
	for i, acc := range st.acc {
		cov := acc.Cov()
		if avg != nil {
			cov = avg(i/st.kvHeads).apply(cov, st.d)
		}
		var err error
		if cal.Chol[i], err = codec.Cholesky(cov, st.d, ridge); err != nil {
			return fmt.Errorf("calibrate: layer %d kv head %d: %w", i/st.kvHeads, i%st.kvHeads, err)
		}
	}
	return nil
}

// calibDefaults fills in and checks the options.
func calibDefaults(o Options, maxCtx int) (Options, error) {
	if o.Ctx == 0 {
		o.Ctx = min(DefaultCtx, maxCtx)
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.RopeSpan == 0 {
		o.RopeSpan = o.Ctx
	}
	if o.CodebookSamples == 0 {
		o.CodebookSamples = DefaultCodebookSamples
	}
	switch {
	case o.Ridge == 0:
		o.Ridge = DefaultRidge
	case o.Ridge < 0:
		o.Ridge = 0
	case math.IsNaN(o.Ridge) || math.IsInf(o.Ridge, 0):
		return o, fmt.Errorf("calibrate: ridge %v must be finite", o.Ridge)
	}
	switch {
	case o.Ctx < 2 || o.Ctx > maxCtx:
		return o, fmt.Errorf("calibrate: window of %d tokens, want 2..%d (the model context)", o.Ctx, maxCtx)
	case o.RopeSpan < 0:
		return o, fmt.Errorf("calibrate: rope span %d, want >= 0", o.RopeSpan)
	case o.MaxTokens < 0:
		return o, fmt.Errorf("calibrate: max tokens %d, want >= 0", o.MaxTokens)
	case o.BlockSize < 0:
		return o, fmt.Errorf("calibrate: block size %d, want > 0", o.BlockSize)
	case len(o.Bits) > 0 && o.Ctx < o.BlockSize:
		return o, fmt.Errorf("calibrate: a window of %d tokens holds no full KV block of %d, whose residuals the codebooks are trained on; want a window of at least %d tokens, or no codebook bits",
			o.Ctx, o.BlockSize, o.BlockSize)
	case o.PCA && o.Ctx < o.BlockSize:
		return o, fmt.Errorf("calibrate: a window of %d tokens holds no full KV block of %d, whose principal components PCA measures; want a window of at least %d tokens",
			o.Ctx, o.BlockSize, o.BlockSize)
	case o.CodebookSamples < 0:
		return o, fmt.Errorf("calibrate: codebook samples %d, want > 0", o.CodebookSamples)
	}
	seen := map[int]bool{}
	for _, b := range o.Bits {
		if b < 1 || b > 4 || seen[b] {
			return o, fmt.Errorf("calibrate: codebook bits %v: each must be 1..4 and listed once", o.Bits)
		}
		seen[b] = true
	}
	return o, nil
}

// kakeyaOptions returns the options of the codec the codebooks are fitted
// to, with the Bits and Codebook the residual does not depend on.
func kakeyaOptions(o Options) codec.KakeyaOptions {
	ko := codec.DefaultKakeyaOptions()
	if o.Kakeya != nil {
		ko = *o.Kakeya
	}
	ko.Bits, ko.Codebook = 3, nil
	return ko
}

// codebookBlocks returns how many full KV blocks (each one per layer and KV
// head, heads of them) give at least one residual sample per level of the
// widest codebook in o.Bits, for head dimension d. A row yields
// ScaledResiduals' coordinates: p = NextPow2(d) of them less its exact
// outliers, at most MaxOutliers and, since the p scaled coordinates have
// mean square 1, fewer than p/OutlierThreshold² (rows the skeleton fits
// exactly, which real keys and values are not, yield none).
func codebookBlocks(o Options, heads, d int) (int, error) {
	ko := kakeyaOptions(o)
	p := codec.NextPow2(d)
	outliers := 0
	if thr := float64(ko.OutlierThreshold); thr > 0 && ko.MaxOutliers > 0 {
		outliers = min(ko.MaxOutliers, p)
		if thr >= 1 {
			outliers = min(outliers, int(float64(p)/(thr*thr)))
		}
	}
	perBlock := heads * o.BlockSize * (p - outliers)
	if perBlock == 0 {
		return 0, fmt.Errorf("calibrate: the codec keeps all %d residual coordinates of a row exact (max outliers %d), leaving no codebook samples", p, ko.MaxOutliers)
	}
	need := 1 << slices.Max(o.Bits)
	return (need + perBlock - 1) / perBlock, nil
}

// minCalibTokens returns the fewest ids whose windows (splitWindows) hold
// blocks full KV blocks of size bs, for windows of ctx >= bs tokens that
// start with BOS when bos is set.
func minCalibTokens(blocks, ctx, bs int, bos bool) int {
	b := 0
	if bos {
		b = 1
	}
	perWindow := ctx / bs                   // full blocks in a full window
	fullWindows := (blocks - 1) / perWindow // windows filled before the last
	rest := blocks - fullWindows*perWindow
	return fullWindows*(ctx-b) + rest*bs - b
}

// splitWindows cuts ids into consecutive windows of at most ctx tokens, each
// starting with bos when bos >= 0; a last window shorter than 2 tokens is
// dropped.
func splitWindows(ids []int, ctx, bos int) [][]int {
	per := ctx
	if bos >= 0 {
		per--
	}
	var out [][]int
	for i := 0; i < len(ids); i += per {
		chunk := ids[i:min(len(ids), i+per)]
		var w []int
		if bos >= 0 {
			w = append(w, bos)
		}
		w = append(w, chunk...)
		if len(w) >= 2 {
			out = append(out, w)
		}
	}
	return out
}

// calibState collects the query second moments during Forward.
type calibState struct {
	heads, kvHeads, d int
	acc               []*codec.CovAccumulator // layer*kvHeads + kv head
	err               error
}

// newCalibState returns an empty calibState for a model of layers layers,
// heads query heads and kvHeads KV heads of size d.
func newCalibState(layers, heads, kvHeads, d int) *calibState {
	st := &calibState{heads: heads, kvHeads: kvHeads, d: d, acc: make([]*codec.CovAccumulator, layers*kvHeads)}
	for i := range st.acc {
		st.acc[i] = codec.NewCovAccumulator(d)
	}
	return st
}

// observe pools each query head into the accumulator of its KV head
// (query heads g*j .. g*j+g-1 share KV head j, as in repeat_kv).
// observeHook is observe as a model.SequenceOptions.Observe.
func (s *calibState) observeHook(layer, _, n int, q, _ []float32) { s.observe(layer, n, q) }

func (s *calibState) observe(layer, n int, q []float32) {
	if s.err != nil {
		return
	}
	d, g := s.d, s.heads/s.kvHeads
	for r := 0; r < n; r++ {
		row := q[r*s.heads*d : (r+1)*s.heads*d]
		for h := 0; h < s.heads; h++ {
			if err := s.acc[layer*s.kvHeads+h/g].Add(row[h*d : (h+1)*d]); err != nil {
				s.err = fmt.Errorf("layer %d query head %d: %w", layer, h, err)
				return
			}
		}
	}
}

// calibBlock is one cached block of one KV head: BlockSize rows of d.
type calibBlock struct {
	head int // layer*kvHeads + kv head
	x    []float32
}

// trainCodebooks fits the K and V residual codebooks of cal from the
// collected blocks; keys are whitened by their head's factor first.
func trainCodebooks(cal *codec.Calibration, o Options, kBlocks, vBlocks []calibBlock) error {
	kk, err := codec.NewKakeya(kakeyaOptions(o))
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	d, n := cal.HeadDim, o.BlockSize
	y := make([]float32, n*d)
	var ks, vs []float32
	for _, b := range kBlocks {
		L := cal.Chol[b.head]
		for r := 0; r < n; r++ {
			whiten(y[r*d:(r+1)*d], b.x[r*d:(r+1)*d], L, d)
		}
		if ks, err = kk.ScaledResiduals(ks, y, n, d); err != nil {
			return fmt.Errorf("calibrate: key residuals: %w", err)
		}
	}
	for _, b := range vBlocks {
		if vs, err = kk.ScaledResiduals(vs, b.x, n, d); err != nil {
			return fmt.Errorf("calibrate: value residuals: %w", err)
		}
	}
	cal.KCodebooks, cal.VCodebooks = map[int]*codec.Codebook{}, map[int]*codec.Codebook{}
	for _, bits := range o.Bits {
		if cal.KCodebooks[bits], err = codec.TrainLloydMax(ks, bits); err != nil {
			return fmt.Errorf("calibrate: key codebook: %w", err)
		}
		if cal.VCodebooks[bits], err = codec.TrainLloydMax(vs, bits); err != nil {
			return fmt.Errorf("calibrate: value codebook: %w", err)
		}
	}
	return nil
}

// whiten sets y = x·L for the row vector x and the lower-triangular L
// (d x d), the transform codec.Preconditioned applies to keys.
func whiten(y, x, L []float32, d int) {
	clear(y[:d])
	for i := 0; i < d; i++ {
		xi := x[i]
		for j, v := range L[i*d : i*d+i+1] {
			y[j] += xi * v
		}
	}
}

// RopeAverage returns the mean over Δ in [0, span) of R(Δ) Σ R(Δ)ᵀ, where
// R(Δ) is the RoPE rotation (Hugging Face rotate_half layout: coordinate i
// pairs with i+d/2 at angle Δ·invFreq[i]) and Σ the d x d matrix cov.
//
// Keys are coded before RoPE, but a query at position p_q scores a key at
// p_k = p_q - Δ as q_preᵀ R(-Δ) k_pre, so a key error e costs
// E[(qᵀ R(-Δ) e)²] = eᵀ R(Δ) Σ R(Δ)ᵀ e. Averaged over offsets, pairs with
// low frequencies keep their correlations while fast-rotating pairs keep
// only the rotation-invariant part.
func RopeAverage(cov []float64, d int, invFreq []float32, span int) ([]float64, error) {
	switch {
	case d <= 0 || d%2 != 0 || len(cov) != d*d:
		return nil, fmt.Errorf("calibrate: rope average: %d values for an even d = %d", len(cov), d)
	case len(invFreq) != d/2:
		return nil, fmt.Errorf("calibrate: rope average: %d inverse frequencies, want d/2 = %d", len(invFreq), d/2)
	case span < 1:
		return nil, fmt.Errorf("calibrate: rope average: span %d, want >= 1", span)
	}
	return newRopeMeans(invFreq, span).apply(cov, d), nil
}

// ropeMeans holds E[cos_a cos_b], E[sin_a sin_b] and E[cos_a sin_b] over
// the offsets, for the angles Δ·f_a and Δ·f_b of frequency pairs a and b.
type ropeMeans struct {
	h          int
	cc, ss, cs []float64 // h x h
}

func newRopeMeans(inv []float32, span int) *ropeMeans {
	h := len(inv)
	r := &ropeMeans{h: h, cc: make([]float64, h*h), ss: make([]float64, h*h), cs: make([]float64, h*h)}
	c, s := make([]float64, h), make([]float64, h)
	for delta := 0; delta < span; delta++ {
		for a, f := range inv {
			// The angle in float32 as the model's RoPE tables compute it.
			ang := float64(float32(delta) * f)
			c[a], s[a] = math.Cos(ang), math.Sin(ang)
		}
		for a := 0; a < h; a++ {
			ca, sa := c[a], s[a]
			cc, ss, cs := r.cc[a*h:(a+1)*h], r.ss[a*h:(a+1)*h], r.cs[a*h:(a+1)*h]
			for b := 0; b < h; b++ {
				cc[b] += ca * c[b]
				ss[b] += sa * s[b]
				cs[b] += ca * s[b]
			}
		}
	}
	inv1 := 1 / float64(span)
	for i := range r.cc {
		r.cc[i] *= inv1
		r.ss[i] *= inv1
		r.cs[i] *= inv1
	}
	return r
}

// apply averages R Σ Rᵀ blockwise. With R = [[C, -S], [S, C]] (C, S the
// diagonal cos and sin) and Σ = [[P, Q], [Qᵀ, T]], each entry (a, b) of a
// quarter is a combination of P, Q, Qᵀ, T at (a, b) weighted by the means.
func (r *ropeMeans) apply(cov []float64, d int) []float64 {
	h := r.h
	out := make([]float64, d*d)
	at := func(i, j int) float64 { return cov[i*d+j] }
	for a := 0; a < h; a++ {
		for b := 0; b < h; b++ {
			cc, ss := r.cc[a*h+b], r.ss[a*h+b]
			cs, sc := r.cs[a*h+b], r.cs[b*h+a] // sc = E[sin_a cos_b]
			p, q, qt, t := at(a, b), at(a, h+b), at(h+a, b), at(h+a, h+b)
			out[a*d+b] = cc*p - sc*qt - cs*q + ss*t
			out[a*d+h+b] = cs*p - ss*qt + cc*q - sc*t
			out[(h+a)*d+b] = sc*p + cc*qt - ss*q - cs*t
			out[(h+a)*d+h+b] = ss*p + cs*qt + sc*q + cc*t
		}
	}
	return out
}

// Save writes c to path as safetensors (tensors named as
// codec.Calibration.Tensors does, shape and provenance in the metadata),
// atomically.
func Save(path string, c *codec.Calibration) error {
	if c == nil {
		return fmt.Errorf("calibrate: save %s: calibration is nil", path)
	}
	if err := c.Validate(c.Layers, c.KVHeads, c.HeadDim); err != nil {
		return fmt.Errorf("calibrate: save %s: %w", path, err)
	}
	ts := c.Tensors()
	out := make([]weights.Tensor, 0, len(ts))
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		out = append(out, weights.F32Tensor(name, ts[name].Shape, ts[name].Data))
	}
	if err := weights.WriteFile(path, out, c.Metadata()); err != nil {
		return fmt.Errorf("calibrate: save: %w", err)
	}
	return nil
}

// Load reads a calibration file written by Save and checks it fits a model
// with configuration cfg: same layers, KV heads and head_dim, and a
// Cholesky factor for every layer and KV head.
func Load(path string, cfg *weights.Config) (*codec.Calibration, error) {
	if cfg == nil {
		return nil, errors.New("calibrate: load: config is nil")
	}
	st, err := weights.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("calibrate: load: %w", err)
	}
	defer st.Close()
	ts := make(map[string]codec.Tensor)
	for _, name := range st.Names() {
		t, err := st.Tensor(name)
		if err != nil {
			return nil, fmt.Errorf("calibrate: load %s: %w", path, err)
		}
		data, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("calibrate: load %s: tensor %s: %w", path, name, err)
		}
		ts[name] = codec.Tensor{Shape: slices.Clone(t.Shape), Data: data}
	}
	cal, err := codec.FromTensors(st.Metadata(), ts)
	if err != nil {
		return nil, fmt.Errorf("calibrate: load %s: %w", path, err)
	}
	hd := cfg.HeadDim // weights.ParseConfig fills in the default
	for _, f := range []struct {
		what       string
		have, want int
	}{{"layers", cal.Layers, cfg.NumLayers}, {"kv heads", cal.KVHeads, cfg.NumKVHeads}, {"head_dim", cal.HeadDim, hd}} {
		if f.have != f.want {
			return nil, fmt.Errorf("calibrate: %s has %d %s, model has %d", path, f.have, f.what, f.want)
		}
	}
	for i := 0; i < cal.Layers*cal.KVHeads; i++ {
		if cal.Chol == nil || cal.Chol[i] == nil {
			return nil, fmt.Errorf("calibrate: %s has no Cholesky factor for layer %d kv head %d", path, i/cal.KVHeads, i%cal.KVHeads)
		}
	}
	return cal, nil
}
