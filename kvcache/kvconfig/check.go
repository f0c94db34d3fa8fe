package kvconfig

import (
	"slices"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
)

// A Checked is a Spec that passed Check, its text read once: what
// kvplan builds a policy from without reading the Spec again.
type Checked struct {
	// Spec is the Spec as written, with the kakeya preset expanded when
	// it names it (Preset says so): the settings kvplan builds.
	Spec Spec
	// Preset is PresetName when Spec was written as the kakeya preset
	// (Spec.IsPreset), "" otherwise.
	Preset string
	// KCodec and VCodec are the codec specs of keys and values with the
	// bit widths applied, as codec.Spec.String writes them; "" for an
	// uncompressed side, and both "" with a per-layer plan.
	KCodec, VCodec string
	// Boundary lists the boundary layers, negative from the end, with
	// DefaultBoundary applied (nil for "none", for an uncompressed cache,
	// and with a per-layer plan).
	Boundary []int
	// Layers is the per-layer plan read from Spec.Layers; nil without one.
	Layers []LayerPlan
}

// Compressed reports whether any codec is in effect.
func (c Checked) Compressed() bool { return c.KCodec != "" || c.VCodec != "" || len(c.Layers) > 0 }

// KeysCoded reports whether some layer encodes its keys with a codec
// other than the bf16 storage of a side written "none".
func (c Checked) KeysCoded() bool {
	return c.KCodec != "" || slices.ContainsFunc(c.Layers, func(l LayerPlan) bool { return coded(l.K) })
}

// ValuesCoded reports whether some layer encodes its values, as KeysCoded
// does for keys.
func (c Checked) ValuesCoded() bool {
	return c.VCodec != "" || slices.ContainsFunc(c.Layers, func(l LayerPlan) bool { return coded(l.V) })
}

// Validate checks everything that does not depend on a model or a
// calibration, as Check does.
func (s Spec) Validate() error {
	_, err := s.Check()
	return err
}

// Check checks everything that does not depend on a model or a
// calibration: the codec specs name known codecs with valid settings,
// counts are in range, the boundary list parses, and the switches have
// something to act on. It returns the Spec with its text read and, when s
// is the kakeya preset (IsPreset), expanded to the settings the preset
// stands for. Errors are *SettingError, naming the Spec's fields.
func (s Spec) Check() (Checked, error) {
	var preset string
	if s.IsPreset() {
		s, preset = s.expandPreset(), PresetName
	}
	k, v, err := s.codecs()
	if err != nil {
		return Checked{}, err
	}
	switch {
	case s.BlockSize < 0:
		return Checked{}, Errorf("{block-size} %d must be > 0", s.BlockSize)
	case s.Sinks < 0:
		return Checked{}, Errorf("{sinks} %d must be >= 0", s.Sinks)
	case s.KBits < 0 || s.VBits < 0:
		return Checked{}, Errorf("{k-bits} %d, {v-bits} %d: bit widths must be > 0", s.KBits, s.VBits)
	}
	c := Checked{Spec: s, Preset: preset, KCodec: k, VCodec: v}
	if c.Boundary, err = ParseLayers(s.Boundary); err != nil {
		return Checked{}, Errorf("{boundary}: %w", err)
	}
	if s.Boundary == "" {
		c.Boundary, _ = ParseLayers(DefaultBoundary)
	}
	if s.Layers != "" {
		if s.KV != "" || s.K != "" || s.V != "" || s.KBits != 0 || s.VBits != 0 || s.Boundary != "" {
			return Checked{}, errPlanConflict
		}
		if c.Layers, err = ParseLayerCodecs(s.Layers); err != nil {
			return Checked{}, Errorf("{layer-codecs}: %w", err)
		}
		if len(c.Layers) == 0 {
			return Checked{}, Errorf("{layer-codecs} %q names no layer", s.Layers)
		}
		c.Boundary = nil
	}
	if !c.Compressed() {
		c.Boundary = nil
	}
	switch strings.ToLower(s.CacheType) {
	case "", "bf16", "f32":
	default:
		return Checked{}, Errorf("{cache-type} %q: want bf16 or f32", s.CacheType)
	}
	if s.Precondition == On && !c.KeysCoded() {
		return Checked{}, Errorf("{precond}: preconditioning wraps the key codec, but keys are uncompressed (set {kv-codec} or {k-codec})")
	}
	if s.Codebooks == On && !c.KeysCoded() && !c.ValuesCoded() {
		return Checked{}, Errorf("{calib-codebooks}: calibrated codebooks need a codec, but keys and values are uncompressed")
	}
	return c, nil
}

// errPlanConflict is returned by Check when a per-layer plan is combined
// with settings it replaces.
var errPlanConflict = Errorf("{layer-codecs}{or-kv-policy} sets every layer's codecs: drop {kv-codec}, {k-codec}, {v-codec}, {k-bits}, {v-bits} and {boundary}")

// codecs returns the key and value codec specs s selects, with the bit
// widths applied and each written as codec.Spec.String does; "" for an
// uncompressed side.
func (s Spec) codecs() (k, v string, err error) {
	k, v, kFlag, vFlag := s.sides()
	if k, err = withBits(k, s.KBits, kFlag, "k-bits"); err != nil {
		return "", "", err
	}
	if v, err = withBits(v, s.VBits, vFlag, "v-bits"); err != nil {
		return "", "", err
	}
	return k, v, nil
}

// sides returns the key and value codec specs as written ("" for none),
// K and V overriding KV, and the keys of the settings that set them.
func (s Spec) sides() (k, v, kFlag, vFlag string) {
	k, v, kFlag, vFlag = s.KV, s.KV, "kv-codec", "kv-codec"
	if s.K != "" {
		k, kFlag = s.K, "k-codec"
	}
	if s.V != "" {
		v, vFlag = s.V, "v-codec"
	}
	return effective(k), effective(v), kFlag, vFlag
}

// withBits checks one side's codec spec (given by codecFlag) and applies
// the bit width of bitsFlag to it, returning the canonical spec string.
func withBits(spec string, bits int, codecKey, bitsKey string) (string, error) {
	c, b := "{"+codecKey+"}", "{"+bitsKey+"}"
	if spec == "" {
		if bits != 0 {
			return "", Errorf(b+" %d: no codec is set for that side (use "+c+")", bits)
		}
		return "", nil
	}
	sp, err := codec.ParseSpec(spec)
	if err != nil {
		return "", Errorf(c+" %q: %w", spec, err)
	}
	if bits != 0 {
		if !codec.TakesBits(sp.Name) {
			return "", Errorf(b+" %d: codec %s has a fixed width (only %s take a bit width)", bits, sp.Name, bitCodecs())
		}
		if sp.Bits != 0 && sp.Bits != bits {
			return "", Errorf(b+" %d contradicts b=%d in "+c+" %q", bits, sp.Bits, spec)
		}
		sp.Bits = bits
	}
	if _, err := codec.New(sp); err != nil {
		if bits != 0 {
			return "", Errorf(b+" %d: %w", bits, err)
		}
		return "", Errorf(c+" %q: %w", spec, err)
	}
	return sp.String(), nil
}

// coded reports whether a plan side is encoded by a codec other than the
// bf16 storage of an uncompressed side.
func coded(spec string) bool { return spec != "" && spec != "none" }

// effective maps "none" to "", the uncompressed side.
func effective(v string) string {
	if v = codecValue(v); v == "none" {
		return ""
	}
	return v
}

// bitCodecs lists the registered codecs that take a bit width, for
// errors: "kakeya-block and turbo".
func bitCodecs() string {
	var names []string
	for _, r := range codec.Registered() {
		if r.MaxBits > 0 {
			names = append(names, r.Name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
