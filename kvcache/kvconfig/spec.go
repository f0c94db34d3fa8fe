// Package kvconfig is the configuration of a KV cache as people write it:
// the Spec value, its text grammar (Parse and String, which round-trip),
// the checks that need no model (Spec.Check), the per-layer codec lists
// and policy files, and the Settings a Spec takes for a model. It opens no
// file and knows no command line: the tools bind flags to a Spec
// (internal/kvflags), and kvplan turns a checked Spec into a cache policy.
package kvconfig

// Block sizes a Spec uses when it names none. Codec blocks are longer
// because kakeya stores a basis per block: at head_dim 128 its bytes per
// value fall by about a quarter from 16 to 64 tokens, while int8 and int4
// barely change.
const (
	DefaultBlock      = 16
	DefaultCodecBlock = 64
)

// DefaultBoundary is the boundary-layer list of a compressed cache that
// names none: the first and the last layer, the most sensitive to key and
// value error.
const DefaultBoundary = "0,-1"

// A Switch is an on/off setting whose zero value, Auto, leaves the choice to
// the setting's documented default.
type Switch int8

// Switch values.
const (
	Auto Switch = iota
	On
	Off
)

// String returns "auto", "on" or "off".
func (s Switch) String() string {
	switch s {
	case On:
		return "on"
	case Off:
		return "off"
	}
	return "auto"
}

// Or returns the setting with def standing in for Auto.
func (s Switch) Or(def bool) bool {
	if s == Auto {
		return def
	}
	return s == On
}

// A Spec is a KV-cache setting as people write it: the flags of kakeya-run
// and kakeya-eval, kakeya-eval's --config strings and configuration files,
// and the library's options all fill one. It is independent of any model:
// Check reads and checks its text once, and kvplan turns the result into a
// model's kvcache.Policy and the Settings in effect. The zero value is an
// uncompressed cache at the defaults; every field's zero value means its
// default.
type Spec struct {
	// KV is the codec spec for keys and values (codec.ParseSpec, e.g.
	// "int8" or "kakeya-block:b=3,rank=4"); "" and "none" keep them uncompressed.
	KV string
	// K and V override KV for one side; "none" keeps that side
	// uncompressed, "" follows KV.
	K, V string
	// KBits and VBits set the bit width of a codec that has one (kakeya-block, turbo);
	// 0 keeps the codec's own.
	KBits, VBits int
	// BlockSize is tokens per cache block: 0 means DefaultBlock, or
	// DefaultCodecBlock when a codec is set.
	BlockSize int
	// HotWindow is how many of the newest tokens stay uncompressed: 0
	// means one block, a negative value none.
	HotWindow int
	// Sinks is how many of the first tokens stay uncompressed.
	Sinks int
	// Boundary lists the layers that skip the codecs and keep their full
	// blocks as bf16, separated by commas or semicolons, negative from the
	// end: "" means DefaultBoundary, "none" no layer.
	Boundary string
	// Layers sets every layer's key and value codecs at once, one "K/V"
	// pair per layer separated by "|" (ParseLayerCodecs), as a policy file
	// (Plan) holds them; it replaces KV, K, V, the bit widths and
	// Boundary. A side written "none" keeps bf16 blocks.
	Layers string
	// Precondition whitens each KV head's keys by the calibrated query
	// covariance before the key codec. Auto: on when a calibration is given
	// and keys are compressed.
	Precondition Switch
	// Codebooks gives kakeya-block codecs the calibration's Lloyd–Max residual
	// codebooks for their bit width instead of the Gaussian ones (keys only
	// when preconditioned: the key codebook is fitted to whitened keys).
	// Auto: on when the calibration holds a codebook for the width.
	Codebooks Switch
	// CacheType is the storage of uncompressed blocks: "bf16" (the
	// default, as llama.cpp and vLLM keep 16-bit caches) or "f32" (exact,
	// twice the memory).
	CacheType string
}

// Inherit returns s with every field left at its default taken from base:
// a configuration that names only what differs from a tool's flags.
func (s Spec) Inherit(base Spec) Spec {
	if s.KV == "" && s.K == "" && s.V == "" && s.Layers == "" {
		s.KV, s.K, s.V, s.Layers = base.KV, base.K, base.V, base.Layers
	}
	fill := func(dst *int, v int) {
		if *dst == 0 {
			*dst = v
		}
	}
	// A per-layer plan names every layer's codecs: the base's bit widths
	// and boundary layers do not apply to it.
	if s.Layers == "" {
		fill(&s.KBits, base.KBits)
		fill(&s.VBits, base.VBits)
		if s.Boundary == "" {
			s.Boundary = base.Boundary
		}
	}
	fill(&s.BlockSize, base.BlockSize)
	fill(&s.HotWindow, base.HotWindow)
	fill(&s.Sinks, base.Sinks)
	if s.Precondition == Auto {
		s.Precondition = base.Precondition
	}
	if s.Codebooks == Auto {
		s.Codebooks = base.Codebooks
	}
	if s.CacheType == "" {
		s.CacheType = base.CacheType
	}
	return s
}

// Compressed reports whether s names a codec for keys or values.
func (s Spec) Compressed() bool {
	k, v, _, _ := s.sides()
	return k != "" || v != "" || s.Layers != ""
}
