// Package kvconfig is the configuration of a KV cache as people write it:
// the Spec value, its text grammar (Parse and String, which round-trip),
// the checks that need no model (Spec.Check), the per-layer codec lists
// and policy files, and the Settings a Spec takes for a model. It opens no
// file and knows no command line: the tools bind flags to a Spec
// (internal/kvflags), and kvplan turns a checked Spec into a cache policy.
package kvconfig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
)

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

func parseSwitch(v string) (Switch, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "on", "yes":
		return On, nil
	case "0", "false", "off", "no":
		return Off, nil
	case "auto":
		return Auto, nil
	}
	return Auto, errors.New("want 1 or 0 (true/false, on/off) or auto")
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
	// "int8" or "kakeya:b=3,rank=4"); "" and "none" keep them uncompressed.
	KV string
	// K and V override KV for one side; "none" keeps that side
	// uncompressed, "" follows KV.
	K, V string
	// KBits and VBits set the bit width of a codec that has one (kakeya);
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
	// Codebooks gives kakeya codecs the calibration's Lloyd–Max residual
	// codebooks for their bit width instead of the Gaussian ones (keys only
	// when preconditioned: the key codebook is fitted to whitened keys).
	// Auto: on when the calibration holds a codebook for the width.
	Codebooks Switch
	// CacheType is the storage of uncompressed blocks: "bf16" (the
	// default, as llama.cpp and vLLM keep 16-bit caches) or "f32" (exact,
	// twice the memory).
	CacheType string
}

// A Key is one setting of the grammar: its name (the tools' flag has it
// too), its short aliases, and a usage line for the flag.
type Key struct {
	Name    string
	Aliases []string
	Usage   string
	set     func(p Parser, s *Spec, v string) error
	get     func(s Spec) string // "" when the field holds its default
}

// Setting returns the name of the setting k writes: its own, except for
// kv-policy, which sets layer-codecs.
func (k Key) Setting() string {
	if k.Name == "kv-policy" {
		return "layer-codecs"
	}
	return k.Name
}

// Value returns the value of k's setting in s as String writes it; "" when
// the field holds its default.
func (k Key) Value(s Spec) string { return k.get(s) }

// IsSwitch reports whether k is an on/off setting, which a flag may give
// without a value.
func (k Key) IsSwitch() bool { return k.Name == "precond" || k.Name == "calib-codebooks" }

// Grammar returns the settings Parse reads, in the order String writes
// them.
func Grammar() []Key {
	return []Key{
		{"kv-codec", []string{"kv"}, "codec `SPEC` for keys and values: none or one of " + strings.Join(codec.Names(), ", ") + ` (a spec such as "kakeya:b=3,rank=4" also works)`,
			func(_ Parser, s *Spec, v string) error { s.KV = codecValue(v); return nil },
			func(s Spec) string { return s.KV }},
		{"k-codec", []string{"k"}, "key codec `SPEC`, overriding --kv-codec for keys (none keeps keys uncompressed)",
			func(_ Parser, s *Spec, v string) error { s.K = codecValue(v); return nil },
			func(s Spec) string { return s.K }},
		{"v-codec", []string{"v"}, "value codec `SPEC`, overriding --kv-codec for values (none keeps values uncompressed)",
			func(_ Parser, s *Spec, v string) error { s.V = codecValue(v); return nil },
			func(s Spec) string { return s.V }},
		{"k-bits", []string{"kbits"}, "bit width `N` of the key codec, for codecs that have one (kakeya: 1-4)",
			func(_ Parser, s *Spec, v string) (err error) { s.KBits, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.KBits) }},
		{"v-bits", []string{"vbits"}, "bit width `N` of the value codec, for codecs that have one (kakeya: 1-4)",
			func(_ Parser, s *Spec, v string) (err error) { s.VBits, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.VBits) }},
		{"block-size", []string{"block"}, fmt.Sprintf("tokens per cache block `N` (default %d, or %d when a codec is set)", DefaultBlock, DefaultCodecBlock),
			func(_ Parser, s *Spec, v string) (err error) { s.BlockSize, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.BlockSize) }},
		{"hot-window", []string{"hot"}, "the newest `N` tokens stay uncompressed (default one block)",
			func(_ Parser, s *Spec, v string) error {
				n, err := parseCount(v, 0)
				if err != nil {
					return err
				}
				// 0 tokens is stored as negative: a zero field means the default.
				if s.HotWindow = n; n == 0 {
					s.HotWindow = -1
				}
				return nil
			},
			func(s Spec) string {
				if s.HotWindow < 0 {
					return "0"
				}
				return itoa(s.HotWindow)
			}},
		{"sinks", nil, "the first `N` tokens stay uncompressed (attention sinks)",
			func(_ Parser, s *Spec, v string) (err error) { s.Sinks, err = parseCount(v, 0); return err },
			func(s Spec) string { return itoa(s.Sinks) }},
		{"boundary", nil, "`LAYERS` that skip the codec and keep bf16 blocks, separated by , or ; and negative from the end (default " + DefaultBoundary + "; none compresses every layer)",
			func(_ Parser, s *Spec, v string) error {
				if _, err := ParseLayers(v); err != nil {
					return err
				}
				s.Boundary = normLayers(v)
				return nil
			},
			func(s Spec) string { return strings.ReplaceAll(s.Boundary, ",", ";") }},
		{"layer-codecs", []string{"layers"}, "per-layer `CODECS` K/V|K/V|... from layer 0 (none keeps a side bf16), replacing --kv-codec, the bit widths and --boundary",
			func(_ Parser, s *Spec, v string) error {
				l, err := ParseLayerCodecs(v)
				if err != nil {
					return err
				}
				s.Layers = FormatLayerCodecs(l)
				return nil
			},
			func(s Spec) string { return s.Layers }},
		{"kv-policy", []string{"policy"}, "per-layer policy `FILE` (kakeya-eval allocate): sets --layer-codecs from it",
			func(p Parser, s *Spec, v string) error {
				pl, err := p.ReadPlan(strings.TrimSpace(v))
				if err != nil {
					return err
				}
				s.Layers = FormatLayerCodecs(pl.Layers)
				return nil
			},
			func(s Spec) string { return "" }},
		{"precond", []string{"precondition"}, "whiten keys by the calibration's query covariance: 1, 0 or auto (auto: on with --calib when keys are compressed)",
			func(_ Parser, s *Spec, v string) (err error) { s.Precondition, err = parseSwitch(v); return err },
			func(s Spec) string { return switchValue(s.Precondition) }},
		{"calib-codebooks", []string{"cb", "codebooks"}, "kakeya codecs use the calibration's Lloyd-Max codebooks: 1, 0 or auto (auto: when it has them)",
			func(_ Parser, s *Spec, v string) (err error) { s.Codebooks, err = parseSwitch(v); return err },
			func(s Spec) string { return switchValue(s.Codebooks) }},
		{"cache-type", nil, "storage of uncompressed KV blocks: bf16 (default) or f32 (exact, twice the memory)",
			func(_ Parser, s *Spec, v string) error {
				v = strings.ToLower(strings.TrimSpace(v))
				if v != "bf16" && v != "f32" {
					return errors.New("want bf16 or f32")
				}
				s.CacheType = v
				return nil
			},
			func(s Spec) string { return s.CacheType }},
	}
}

// Lookup finds a key by its name or an alias.
func Lookup(name string) (Key, bool) {
	for _, k := range Grammar() {
		if k.Name == name || slices.Contains(k.Aliases, name) {
			return k, true
		}
	}
	return Key{}, false
}

// Keys returns the names Parse accepts: each setting's flag name followed
// by its short aliases.
func Keys() []string {
	var out []string
	for _, k := range Grammar() {
		out = append(out, k.Name)
		out = append(out, k.Aliases...)
	}
	return out
}

// SettingName returns the setting a key of Keys writes, by its flag name:
// "kv-codec" for "kv" and "kv-codec", "layer-codecs" for "kv-policy"
// too. Two keys with one SettingName set the same field, so a source of
// settings that gives both gives one setting twice.
func SettingName(name string) (string, bool) {
	k, ok := Lookup(name)
	if !ok {
		return "", false
	}
	return k.Setting(), true
}

// A Parser reads the grammar. Every key but kv-policy (alias policy) is
// read from its text alone; kv-policy names a policy file, which ReadFile
// reads (os.ReadFile in the tools): the package itself opens no file, and
// with ReadFile nil that key is an error. The zero Parser is ready to use.
type Parser struct {
	ReadFile func(name string) ([]byte, error)
}

// Parse reads a Spec as the zero Parser does (a policy file is an error):
// see Parser.Parse.
func Parse(text string) (Spec, error) { return Parser{}.Parse(text) }

// Set reads one setting into s, named by its flag name (without dashes) or
// a short alias (see Keys), e.g. Set(&s, "block", "64") or
// Set(&s, "kv-codec", "int8"). The error names the key and the value.
func (p Parser) Set(s *Spec, name, value string) error {
	k, ok := Lookup(name)
	if !ok {
		return fmt.Errorf("unknown key %s (valid: %s)", name, strings.Join(Keys(), ", "))
	}
	if err := p.SetKey(s, k, value); err != nil {
		return fmt.Errorf("%s %q: %w", k.Name, value, err)
	}
	return nil
}

// SetKey reads one setting into s, like Set, with an error that says only
// what is wrong with the value: a flag package names the flag itself.
func (p Parser) SetKey(s *Spec, k Key, value string) error { return k.set(p, s, value) }

// Parse reads a Spec written as comma-separated key=value pairs with the
// keys of Keys, e.g.
//
//	k=kakeya:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,precond=1
//
// Boundary layers are separated by ';' here, since ',' separates pairs. A
// codec spec may itself hold commas: a piece that does not start with a
// key and '=' continues the codec spec before it, so the example's k is
// "kakeya:b=3,rank=4". A setting given twice, under any of its names, is
// an error. Parse(s.String()) == s for every Spec Parse returns but the
// zero one, whose String "" is not a setting.
func (p Parser) Parse(text string) (Spec, error) {
	var s Spec
	var last *string            // the codec field the previous piece set, for continuations
	seen := map[string]string{} // setting -> the piece that gave it
	for _, piece := range strings.Split(text, ",") {
		name, val, ok := strings.Cut(piece, "=")
		name = strings.TrimSpace(name)
		k, known := Lookup(name)
		if !ok || !known {
			if last != nil && *last != "" {
				*last += "," + piece
				continue
			}
			if !ok {
				return Spec{}, fmt.Errorf("%q is not key=value", piece)
			}
			return Spec{}, fmt.Errorf("unknown key %s (valid: %s)", name, strings.Join(Keys(), ", "))
		}
		if prev, dup := seen[k.Setting()]; dup {
			return Spec{}, fmt.Errorf("%s: %s is already set by %s; give each setting once", strings.TrimSpace(piece), k.Setting(), strings.TrimSpace(prev))
		}
		seen[k.Setting()] = piece
		if k.Name == "layer-codecs" {
			// Checked once whole, after its continuations.
			s.Layers = val
		} else if err := p.Set(&s, name, val); err != nil {
			return Spec{}, err
		}
		switch k.Name {
		case "kv-codec":
			last = &s.KV
		case "k-codec":
			last = &s.K
		case "v-codec":
			last = &s.V
		case "layer-codecs":
			last = &s.Layers
		default:
			last = nil
		}
	}
	if s.Layers != "" {
		if err := p.Set(&s, "layer-codecs", s.Layers); err != nil {
			return Spec{}, err
		}
	}
	return s, nil
}

// String returns s in the grammar Parse reads, with the short keys and
// only the fields that differ from their defaults; "" for the zero Spec.
func (s Spec) String() string {
	var parts []string
	for _, k := range Grammar() {
		if v := k.get(s); v != "" {
			short := k.Name
			for _, a := range k.Aliases {
				if len(a) < len(short) {
					short = a
				}
			}
			parts = append(parts, short+"="+v)
		}
	}
	return strings.Join(parts, ",")
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

// Codecs returns the key and value codec specs s selects, with the bit
// widths applied and each written as codec.Spec.String does; "" for an
// uncompressed side.
func (s Spec) Codecs() (k, v string, err error) {
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

// Compressed reports whether s names a codec for keys or values.
func (s Spec) Compressed() bool {
	k, v, _, _ := s.sides()
	return k != "" || v != "" || s.Layers != ""
}

// coded reports whether a plan side is encoded by a codec other than the
// bf16 storage of an uncompressed side.
func coded(spec string) bool { return spec != "" && spec != "none" }

// A Checked is a Spec that passed Check, its text read once: what
// kvplan builds a policy from without reading the Spec again.
type Checked struct {
	// Spec is the Spec as written.
	Spec Spec
	// KCodec and VCodec are the codec specs of keys and values with the bit widths
	// applied, as codec.Spec.String writes them; "" for an uncompressed
	// side, and both "" with a per-layer plan.
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
// something to act on. It returns the Spec with its text read. Errors are
// *SettingError, naming the Spec's fields.
func (s Spec) Check() (Checked, error) {
	k, v, err := s.Codecs()
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
	c := Checked{Spec: s, KCodec: k, VCodec: v}
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
			return "", Errorf(b+" %d: codec %s has a fixed width (only kakeya and turbo take a bit width)", bits, sp.Name)
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
	if s == "" || strings.EqualFold(s, "none") {
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

// normLayers writes a valid layer list with commas, "none" as itself.
func normLayers(s string) string {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "none") {
		return "none"
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, ";", ","), " ", "")
}

// codecValue trims a codec setting and writes "none" in lower case.
func codecValue(v string) string {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "none") {
		return "none"
	}
	return v
}

// effective maps "none" to "", the uncompressed side.
func effective(v string) string {
	if v = codecValue(v); v == "none" {
		return ""
	}
	return v
}

func parseCount(v string, least int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < least {
		if least == 0 {
			return 0, errors.New("want an integer >= 0")
		}
		return 0, fmt.Errorf("want an integer >= %d", least)
	}
	return n, nil
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func switchValue(s Switch) string {
	switch s {
	case On:
		return "1"
	case Off:
		return "0"
	}
	return ""
}
