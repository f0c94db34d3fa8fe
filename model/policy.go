package model

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/weights"
)

// CacheSpec describes a KV-cache compression setting in the terms the tools
// use (codec spec strings, layer indices), independent of any one model.
// The zero value keeps everything uncompressed.
type CacheSpec struct {
	// K and V are codec spec strings (see codec.ParseSpec), e.g. "int8" or
	// "kakeya:b=3,rank=4"; "" keeps that side uncompressed.
	K, V string
	// Boundary lists layers that skip the codecs and keep their full blocks
	// in bf16, as an uncompressed bf16 cache would; negative indices count
	// from the end (-1 is the last layer).
	Boundary []int
	// HotWindow is how many of the newest tokens always stay uncompressed.
	HotWindow int
	// Sinks is how many of the first tokens stay uncompressed.
	Sinks int
	// Precondition whitens each KV head's keys by the calibrated query
	// covariance before the K codec; it needs a calibration.
	Precondition bool
	// HotBF16 stores uncompressed blocks (hot window, sinks, every block of
	// an uncompressed cache) as bf16 instead of float32.
	HotBF16 bool
	// Codebooks gives Kakeya codecs the calibration's Lloyd–Max residual
	// codebooks for their bit width instead of the Gaussian ones. Keys use
	// the key codebook only when preconditioned, the domain it was fitted in.
	Codebooks bool
}

// Compressed reports whether the spec compresses anything.
func (s CacheSpec) Compressed() bool { return s.K != "" || s.V != "" }

// Validate checks what does not depend on a model: the codec specs parse
// and name known codecs, counts are non-negative, no boundary layer is
// listed twice, and preconditioning has a key codec to wrap.
func (s CacheSpec) Validate() error {
	if s.HotWindow < 0 || s.Sinks < 0 {
		return fmt.Errorf("model: cache: hot window %d and sinks %d must not be negative", s.HotWindow, s.Sinks)
	}
	seen := make(map[int]bool, len(s.Boundary))
	for _, l := range s.Boundary {
		if seen[l] {
			return fmt.Errorf("model: cache: boundary layer %d listed twice", l)
		}
		seen[l] = true
	}
	for _, side := range []struct{ name, spec string }{{"K", s.K}, {"V", s.V}} {
		if side.spec == "" {
			continue
		}
		if _, err := newCodec(side.spec); err != nil {
			return fmt.Errorf("model: cache: %s codec: %w", side.name, err)
		}
	}
	if s.Precondition && s.K == "" {
		return errors.New("model: cache: preconditioning wraps the key codec, but K is uncompressed")
	}
	if s.Codebooks && !s.Compressed() {
		return errors.New("model: cache: calibrated codebooks need a codec, but K and V are uncompressed")
	}
	return nil
}

// Policy turns spec into the cache policy of m; see NewPolicy.
func (m *Model) Policy(spec CacheSpec, cal *codec.Calibration) (kvcache.Policy, error) {
	return NewPolicy(m.cfg, spec, cal)
}

// NewPolicy turns spec into the cache policy of a model with configuration
// cfg: one codec per layer outside the boundary (boundary layers store full
// blocks as bf16), and with Precondition one
// key codec per KV head whitened by that head's Cholesky factor in cal
// (which must match the model's shape). cal may be nil otherwise.
func NewPolicy(cfg *weights.Config, spec CacheSpec, cal *codec.Calibration) (kvcache.Policy, error) {
	if err := spec.Validate(); err != nil {
		return kvcache.Policy{}, err
	}
	layers := cfg.NumLayers
	boundary := make([]bool, layers)
	for _, l := range spec.Boundary {
		i := l
		if i < 0 {
			i += layers
		}
		if i < 0 || i >= layers {
			return kvcache.Policy{}, fmt.Errorf("model: cache: boundary layer %d outside a model of %d layers", l, layers)
		}
		boundary[i] = true
	}
	if spec.Codebooks && cal == nil {
		return kvcache.Policy{}, errors.New("model: cache: calibrated codebooks need a calibration")
	}
	if spec.Precondition {
		if cal == nil || cal.Chol == nil {
			return kvcache.Policy{}, errors.New("model: cache: preconditioning needs a calibration with query Cholesky factors")
		}
		if err := cal.Validate(layers, cfg.NumKVHeads, headDimOf(cfg)); err != nil {
			return kvcache.Policy{}, fmt.Errorf("model: cache: %w", err)
		}
	}
	p := kvcache.Policy{HotWindow: spec.HotWindow, Sinks: spec.Sinks, HotBF16: spec.HotBF16}
	if !spec.Compressed() {
		return p, nil
	}
	var k, v codec.Codec
	var err error
	if spec.K != "" {
		if k, err = newCodec(spec.K); err != nil {
			return kvcache.Policy{}, fmt.Errorf("model: cache: K codec: %w", err)
		}
	}
	if spec.V != "" {
		if v, err = newCodec(spec.V); err != nil {
			return kvcache.Policy{}, fmt.Errorf("model: cache: V codec: %w", err)
		}
	}
	if spec.Codebooks {
		if spec.Precondition {
			if k, err = withCodebook(k, cal.KCodebooks); err != nil {
				return kvcache.Policy{}, fmt.Errorf("model: cache: K codec: %w", err)
			}
		}
		if v, err = withCodebook(v, cal.VCodebooks); err != nil {
			return kvcache.Policy{}, fmt.Errorf("model: cache: V codec: %w", err)
		}
	}
	p.Layers = make([]kvcache.LayerCodecs, layers)
	for l := range p.Layers {
		if boundary[l] {
			p.Layers[l] = kvcache.LayerCodecs{K: []codec.Codec{codec.BF16{}}, V: codec.BF16{}}
			continue
		}
		p.Layers[l].V = v
		switch {
		case k == nil:
		case spec.Precondition:
			ks := make([]codec.Codec, cal.KVHeads)
			for h := range ks {
				L := cal.Chol[l*cal.KVHeads+h]
				if L == nil {
					return kvcache.Policy{}, fmt.Errorf("model: cache: calibration has no Cholesky factor for layer %d kv head %d", l, h)
				}
				if ks[h], err = codec.NewPreconditioned(k, L, cal.HeadDim); err != nil {
					return kvcache.Policy{}, fmt.Errorf("model: cache: layer %d kv head %d: %w", l, h, err)
				}
			}
			p.Layers[l].K = ks
		default:
			p.Layers[l].K = []codec.Codec{k}
		}
	}
	return p, nil
}

// withCodebook rebuilds a Kakeya codec c with the codebook in cbs for its
// bit width; other codecs, and Kakeya codecs given an explicit codebook,
// come back unchanged.
func withCodebook(c codec.Codec, cbs map[int]*codec.Codebook) (codec.Codec, error) {
	kk, ok := c.(*codec.Kakeya)
	if !ok || kk.Options().Codebook != nil {
		return c, nil
	}
	o := kk.Options()
	cb := cbs[o.Bits]
	if cb == nil {
		have := make([]int, 0, len(cbs))
		for b := range cbs {
			have = append(have, b)
		}
		slices.Sort(have)
		return nil, fmt.Errorf("calibration has no %d-bit codebook (it has %v; calibrate with --bits %d)", o.Bits, have, o.Bits)
	}
	o.Codebook = cb
	return codec.NewKakeya(o)
}

// headDimOf returns the per-head width the model uses for cfg.
func headDimOf(cfg *weights.Config) int {
	if cfg.HeadDim != 0 {
		return cfg.HeadDim
	}
	if cfg.NumHeads > 0 {
		return cfg.HiddenSize / cfg.NumHeads
	}
	return 0
}

// newCodec builds the codec of a spec string through the codec registry.
func newCodec(spec string) (codec.Codec, error) {
	sp, err := codec.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return codec.New(sp)
}

// ParseLayers reads a list of layer indices separated by commas or
// semicolons, e.g. "0,1,-2,-1" (negative from the end). "" and "none" give
// no layers; a repeated layer is an error.
func ParseLayers(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(strings.ReplaceAll(s, ";", ","), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("layer list %q: %q is not an integer", s, f)
		}
		if seen[n] {
			return nil, fmt.Errorf("layer list %q: layer %d listed twice", s, n)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}
