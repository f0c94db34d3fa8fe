// Package kvplan plans a model's KV cache: NewPolicy (or Build, from a
// checked configuration) turns a kvconfig.Spec, the model's shape and a
// calibration into the kvcache.Policy a cache runs, and the per-layer
// planning measures each layer side's sensitivity and allocates codecs to
// a byte budget (Sensitivity, PlanFor, Allocate), writing the policy files
// the kv-policy setting reads.
package kvplan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// NewPolicy checks s (kvconfig.Spec.Check) and builds its policy for a
// model of shape m and the calibration cal (nil for none), as Build does.
func NewPolicy(s kvconfig.Spec, m kvcache.Shape, cal *codec.Calibration) (kvcache.Policy, kvconfig.Settings, error) {
	c, err := s.Check()
	if err != nil {
		return kvcache.Policy{}, kvconfig.Settings{}, err
	}
	return Build(c, m, cal)
}

// Build resolves the configuration c, as kvconfig.Spec.Check returned it,
// for a model of shape m and the calibration cal (nil for none): it applies the defaults, checks what
// depends on the model (boundary layers in range, blocks no longer than
// the context, the calibration's shape), and builds the policy: one codec
// per layer outside the boundary (boundary layers store full blocks as
// bf16), with preconditioning one key codec per KV head whitened by
// that head's Cholesky factor, and for kakeya-pc one value codec per layer
// and one key codec per layer and KV head, built from the calibration's
// principal components (never preconditioned). It returns the policy and the settings in
// effect, whose Warning is set when the hot window and sinks leave nothing
// to compress within m.MaxContext. Errors about the settings are
// *kvconfig.SettingError.
func Build(c kvconfig.Checked, m kvcache.Shape, cal *codec.Calibration) (kvcache.Policy, kvconfig.Settings, error) {
	fail := func(err error) (kvcache.Policy, kvconfig.Settings, error) {
		return kvcache.Policy{}, kvconfig.Settings{}, err
	}
	s := c.Spec
	st, err := blocks(c, m.MaxContext)
	if err != nil {
		return fail(err)
	}
	if cal != nil {
		if err := cal.Validate(m.Layers, m.KVHeads, m.HeadDim); err != nil {
			return fail(err)
		}
	}
	p := kvcache.Policy{HotBF16: st.CacheType == "bf16"}
	if !c.Compressed() {
		if s.Precondition == kvconfig.On || s.Codebooks == kvconfig.On {
			return fail(kvconfig.Errorf("{precond} or {calib-codebooks} is on, but keys and values are uncompressed"))
		}
		return p, st, nil
	}

	window(&st, s, m.MaxContext)
	p.HotWindow, p.Sinks = st.HotWindow, st.Sinks
	plan, boundary, err := layerPlan(c, m.Layers)
	if err != nil {
		return fail(err)
	}
	st.Boundary = boundary
	// Beside full layers, which hold the long context the codec is for,
	// sliding layers keep their blocks hot until they slide out: coding
	// them would save a constant, their window, at the price of their
	// quality. A model whose every layer slides (Mistral) keeps the plan:
	// its blocks are encoded, then released as they leave the window.
	if slices.Contains(m.Windows, 0) || len(m.Windows) < m.Layers {
		for i, w := range m.Windows {
			if w > 0 {
				plan[i] = kvconfig.LayerPlan{}
				st.Sliding = append(st.Sliding, i)
			}
		}
	}
	if c.Layers != nil {
		st.Layers = plan
	}
	if st.Precondition, err = precondition(s.Precondition, plan, cal); err != nil {
		return fail(err)
	}
	if s.Codebooks == kvconfig.On && cal == nil {
		return fail(kvconfig.Errorf("{calib-codebooks} needs a calibration{calib}"))
	}
	b := builder{cal: cal, codebooks: s.Codebooks, precond: st.Precondition, block: st.BlockSize, built: map[side]codec.Codec{}}
	if p.Layers, err = b.layers(plan, m.KVHeads); err != nil {
		return fail(err)
	}
	st.Codebooks = b.usedCodebook
	return p, st, nil
}

// blocks returns the settings of every cache, compressed or not: the codec
// specs, the cache type and the block size, which defaults to
// kvconfig.DefaultBlock (kvconfig.DefaultCodecBlock with a codec) within
// the context and may not exceed it.
func blocks(c kvconfig.Checked, maxContext int) (kvconfig.Settings, error) {
	st := kvconfig.Settings{K: c.KCodec, V: c.VCodec, BlockSize: c.Spec.BlockSize, CacheType: strings.ToLower(c.Spec.CacheType), Preset: c.Preset}
	if st.CacheType == "" {
		st.CacheType = "bf16"
	}
	if st.BlockSize == 0 {
		st.BlockSize = kvconfig.DefaultBlock
		if c.Compressed() {
			st.BlockSize = kvconfig.DefaultCodecBlock
		}
		if maxContext > 0 {
			st.BlockSize = min(st.BlockSize, maxContext)
		}
	}
	if maxContext > 0 && st.BlockSize > maxContext {
		return kvconfig.Settings{}, kvconfig.Errorf("{block-size} %d exceeds the context of %d tokens", st.BlockSize, maxContext)
	}
	return st, nil
}

// NeedsPCA reports whether the configuration c codes some layer side with
// a codec built from a calibration's principal components (kakeya-pc,
// kvtc), and returns the block size, for a model of context maxContext,
// that its calibration must measure them over: c's block size with the
// defaults applied, or Build's error when it exceeds the context. It lets
// a caller that has no calibration make one (kakeya.Load does) before
// Build.
func NeedsPCA(c kvconfig.Checked, maxContext int) (blockSize int, need bool, err error) {
	sides := []string{c.KCodec, c.VCodec}
	for _, l := range c.Layers {
		sides = append(sides, l.K, l.V)
	}
	if !slices.ContainsFunc(sides, principal) {
		return 0, false, nil
	}
	st, err := blocks(c, maxContext)
	if err != nil {
		return 0, false, err
	}
	return st.BlockSize, true, nil
}

// window sets the tokens a compressed cache keeps uncompressed, the hot
// window defaulting to one block, and warns when they cover the context.
func window(st *kvconfig.Settings, s kvconfig.Spec, maxContext int) {
	st.Sinks = s.Sinks
	switch {
	case s.HotWindow == 0:
		st.HotWindow = st.BlockSize
	case s.HotWindow > 0:
		st.HotWindow = s.HotWindow
	}
	st.Warning = st.NothingCompressed(maxContext)
}

// layerPlan returns the codec specs of every layer of a model of the given
// number of layers, and the boundary layers among them, ascending: in the
// plan "" keeps a side hot (uncompressed, never encoded), "none" stores
// its full blocks as bf16 (boundary layers, and plan sides written none).
func layerPlan(c kvconfig.Checked, layers int) ([]kvconfig.LayerPlan, []int, error) {
	if c.Layers != nil {
		if len(c.Layers) != layers {
			return nil, nil, kvconfig.Errorf("{layer-codecs} names %d layers, the model has %d", len(c.Layers), layers)
		}
		return c.Layers, nil, nil
	}
	boundary := make([]bool, layers)
	for _, l := range c.Boundary {
		i := l
		if i < 0 {
			i += layers
		}
		if i < 0 || i >= layers {
			bnd := c.Spec.Boundary
			if bnd == "" {
				bnd = kvconfig.DefaultBoundary
			}
			return nil, nil, kvconfig.Errorf("{boundary} %q: layer %d outside a model of %d layers", bnd, l, layers)
		}
		boundary[i] = true
	}
	plan := make([]kvconfig.LayerPlan, layers)
	var list []int
	for i, b := range boundary {
		if b {
			plan[i] = kvconfig.LayerPlan{K: "none", V: "none"}
			list = append(list, i)
		} else {
			plan[i] = kvconfig.LayerPlan{K: c.KCodec, V: c.VCodec}
		}
	}
	return plan, list, nil
}

// precondition resolves the precondition switch for a plan: on when keys
// are encoded somewhere and the switch says so, or says auto and the
// calibration has query Cholesky factors.
func precondition(sw kvconfig.Switch, plan []kvconfig.LayerPlan, cal *codec.Calibration) (bool, error) {
	anyK := slices.ContainsFunc(plan, func(l kvconfig.LayerPlan) bool { return coded(l.K) && !principal(l.K) })
	hasChol := cal != nil && cal.Chol != nil
	on := anyK && sw.Or(hasChol)
	if on && !hasChol {
		return false, kvconfig.Errorf("{precond} needs a calibration with query Cholesky factors{calib}")
	}
	return on, nil
}

// coded reports whether a plan side is encoded by a codec other than the
// bf16 storage of an uncompressed side.
func coded(spec string) bool { return spec != "" && spec != "none" }

// principal reports whether a plan side's codec is in a calibrated
// principal basis (codec.Registration.Principal: kakeya-pc, kvtc), whose
// keys are never whitened (they weigh them by the queries instead).
func principal(spec string) bool { return codec.IsPrincipal(spec) }

// A side is one codec spec on one side (kv 0 keys, 1 values).
type side struct {
	spec string
	kv   int
}

// A builder makes the codecs of a plan, each spec and side once, with the
// calibration's codebooks and Cholesky factors as the settings ask.
type builder struct {
	cal          *codec.Calibration // nil for none
	codebooks    kvconfig.Switch
	precond      bool
	block        int // the cache's block size: what kakeya-pc and kvtc allocate for
	built        map[side]codec.Codec
	usedCodebook bool // some codec took a calibrated codebook
}

// layers returns the codecs of every layer of plan.
func (b *builder) layers(plan []kvconfig.LayerPlan, kvHeads int) ([]kvcache.LayerCodecs, error) {
	out := make([]kvcache.LayerCodecs, len(plan))
	for l, lp := range plan {
		k, err := b.codec(side{lp.K, 0})
		if err != nil {
			return nil, err
		}
		if out[l].V, err = b.codec(side{lp.V, 1}); err != nil {
			return nil, err
		}
		if pc, ok := out[l].V.(*codec.KakeyaPC); ok {
			if out[l].V, err = b.pcValues(b.pcOptions(pc, lp.V), l); err != nil {
				return nil, err
			}
		}
		pc, isPC := k.(*codec.KakeyaPC)
		switch {
		case k == nil:
		case isPC:
			if out[l].K, err = b.pcKeys(b.pcOptions(pc, lp.K), l, kvHeads); err != nil {
				return nil, err
			}
		case b.precond && coded(lp.K):
			if out[l].K, err = b.preconditioned(k, l, kvHeads); err != nil {
				return nil, err
			}
		default:
			out[l].K = []codec.Codec{k}
		}
	}
	return out, nil
}

// pcCalibration checks that the calibration has the principal components
// a kakeya-pc codec is built from.
func (b *builder) pcCalibration() error {
	if b.cal == nil || b.cal.KPCA == nil {
		return kvconfig.Errorf("kakeya-pc needs a calibration with principal components (kakeya-eval calibrate --pca){calib}")
	}
	return nil
}

// pcOptions returns the options of the kakeya-pc (or kvtc) codec pc,
// parsed from spec, with the allocation's block the cache's own block
// size where spec does not name one (block=): the budget then charges
// each component's mean and scale to the rows a block of this cache
// holds, as kakeya-eval project counts them. An explicit block= is kept.
// Before 2026-11-29 every cache allocated for the codec's default block
// (64), whatever its own block size.
func (b *builder) pcOptions(pc *codec.KakeyaPC, spec string) codec.KakeyaPCOptions {
	o := pc.Options()
	if sp, err := codec.ParseSpec(spec); err == nil && sp.Params["block"] == "" && b.block > 0 {
		o.Block = b.block
	}
	return o
}

// pcValues returns the value codec of layer l for the kakeya-pc options
// o: the layer's value statistics (its KV heads pooled).
func (b *builder) pcValues(o codec.KakeyaPCOptions, l int) (codec.Codec, error) {
	if err := b.pcCalibration(); err != nil {
		return nil, err
	}
	c, err := codec.NewKakeyaPC(o, b.cal.VPCA[l], nil)
	if err != nil {
		return nil, fmt.Errorf("layer %d value codec: %w", l, err)
	}
	return c, nil
}

// pcKeys returns the key codecs of layer l, one per KV head, for the
// kakeya-pc options o: each head's statistics and, with
// QueryWeighted, each component u weighed by uᵀ L Lᵀ u, the queries'
// second moment along it (L the head's factor). Keys coded in a principal
// basis are not whitened: the weights take the queries into account.
func (b *builder) pcKeys(o codec.KakeyaPCOptions, l, kvHeads int) ([]codec.Codec, error) {
	if err := b.pcCalibration(); err != nil {
		return nil, err
	}
	ks := make([]codec.Codec, kvHeads)
	for h := range ks {
		i := l*b.cal.KVHeads + h
		st := b.cal.KPCA[i]
		var w []float32
		if o.QueryWeighted {
			L := b.cal.Chol[i]
			if L == nil {
				return nil, fmt.Errorf("layer %d kv head %d key codec: query weights need the calibration's Cholesky factor", l, h)
			}
			w = queryWeights(st, L, b.cal.HeadDim)
		}
		var err error
		if ks[h], err = codec.NewKakeyaPC(o, st, w); err != nil {
			return nil, fmt.Errorf("layer %d kv head %d key codec: %w", l, h, err)
		}
	}
	return ks, nil
}

// queryWeights returns ||Lᵀu_j||² = u_jᵀ L Lᵀ u_j for each component u_j
// of st, L lower-triangular d x d.
func queryWeights(st *codec.PCAStats, L []float32, d int) []float32 {
	w := make([]float32, d)
	for j := range w {
		u := st.Basis[j*d : (j+1)*d]
		var s float64
		for c := 0; c < d; c++ { // (Lᵀu)_c = Σ_r L[r][c] u_r over r >= c
			var t float64
			for r := c; r < d; r++ {
				t += float64(L[r*d+c]) * float64(u[r])
			}
			s += t * t
		}
		w[j] = float32(s)
	}
	return w
}

// preconditioned wraps the key codec k of layer l once per KV head, each
// whitening keys by its head's Cholesky factor.
func (b *builder) preconditioned(k codec.Codec, l, kvHeads int) ([]codec.Codec, error) {
	ks := make([]codec.Codec, kvHeads)
	for h := range ks {
		L := b.cal.Chol[l*b.cal.KVHeads+h]
		if L == nil {
			return nil, fmt.Errorf("calibration has no Cholesky factor for layer %d kv head %d", l, h)
		}
		var err error
		if ks[h], err = codec.NewPreconditioned(k, L, b.cal.HeadDim); err != nil {
			return nil, fmt.Errorf("layer %d kv head %d: %w", l, h, err)
		}
	}
	return ks, nil
}

// codec returns the codec of a plan side: nil for "" (hot), bf16 for
// "none", else the spec's codec with the calibrated codebook for its width
// when the settings ask.
func (b *builder) codec(sd side) (codec.Codec, error) {
	switch sd.spec {
	case "":
		return nil, nil
	case "none":
		return codec.BF16{}, nil
	}
	if c, ok := b.built[sd]; ok {
		return c, nil
	}
	name := "value codec"
	if sd.kv == 0 {
		name = "key codec"
	}
	c, err := codec.Parse(sd.spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// The key codebook is fitted to whitened keys: only preconditioned
	// keys use it.
	if b.cal != nil && b.codebooks != kvconfig.Off && (sd.kv == 1 || b.precond) {
		cbs := b.cal.VCodebooks
		if sd.kv == 0 {
			cbs = b.cal.KCodebooks
		}
		var used bool
		if c, used, err = withCodebook(c, cbs, b.codebooks == kvconfig.On); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		b.usedCodebook = b.usedCodebook || used
	}
	b.built[sd] = c
	return c, nil
}

// withCodebook rebuilds a kakeya codec c with the codebook in cbs for its
// bit width and reports whether it did. Other codecs, nil, and kakeya
// codecs given an explicit codebook come back unchanged; a missing
// codebook is an error only when must is set.
func withCodebook(c codec.Codec, cbs map[int]*codec.Codebook, must bool) (codec.Codec, bool, error) {
	kk, ok := c.(*codec.Kakeya)
	if !ok || kk.Options().Codebook != nil {
		return c, false, nil
	}
	o := kk.Options()
	cb := cbs[o.Bits]
	if cb == nil {
		if !must {
			return c, false, nil
		}
		have := make([]int, 0, len(cbs))
		for b := range cbs {
			have = append(have, b)
		}
		slices.Sort(have)
		return nil, false, fmt.Errorf("calibration has no %d-bit codebook (it has %v; calibrate %d-bit codebooks too)", o.Bits, have, o.Bits)
	}
	o.Codebook = cb
	out, err := codec.NewKakeya(o)
	return out, err == nil, err
}
