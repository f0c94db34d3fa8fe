package kvcache

import (
	"errors"
	"flag"
	"fmt"
	"math"
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

// resolve returns the setting with def standing in for Auto.
func (s Switch) resolve(def bool) bool {
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
// and the library's options all fill one. It is independent of any model;
// NewPolicy turns it into a model's Policy and the Settings in effect. The
// zero value is an uncompressed cache at the defaults; every field's zero
// value means its default.
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
	// (ReadPlan) holds them; it replaces KV, K, V, the bit widths and
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

// A key is one setting of the grammar: its name (the flag's), its short
// aliases in --config strings, and how it reads a value into a Spec.
type key struct {
	name    string
	aliases []string
	usage   string
	set     func(s *Spec, v string) error
	get     func(s Spec) string // "" when the field holds its default
}

// setting returns the name of the setting k writes: its own, except for
// kv-policy, which sets layer-codecs.
func (k key) setting() string {
	if k.name == "kv-policy" {
		return "layer-codecs"
	}
	return k.name
}

// keys lists the grammar, in the order Spec.String writes it.
func keys() []key {
	return []key{
		{"kv-codec", []string{"kv"}, "codec `SPEC` for keys and values: none or one of " + strings.Join(codec.Names(), ", ") + ` (a spec such as "kakeya:b=3,rank=4" also works)`,
			func(s *Spec, v string) error { s.KV = codecValue(v); return nil },
			func(s Spec) string { return s.KV }},
		{"k-codec", []string{"k"}, "key codec `SPEC`, overriding --kv-codec for keys (none keeps keys uncompressed)",
			func(s *Spec, v string) error { s.K = codecValue(v); return nil },
			func(s Spec) string { return s.K }},
		{"v-codec", []string{"v"}, "value codec `SPEC`, overriding --kv-codec for values (none keeps values uncompressed)",
			func(s *Spec, v string) error { s.V = codecValue(v); return nil },
			func(s Spec) string { return s.V }},
		{"k-bits", []string{"kbits"}, "bit width `N` of the key codec, for codecs that have one (kakeya: 1-4)",
			func(s *Spec, v string) (err error) { s.KBits, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.KBits) }},
		{"v-bits", []string{"vbits"}, "bit width `N` of the value codec, for codecs that have one (kakeya: 1-4)",
			func(s *Spec, v string) (err error) { s.VBits, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.VBits) }},
		{"block-size", []string{"block"}, fmt.Sprintf("tokens per cache block `N` (default %d, or %d when a codec is set)", DefaultBlock, DefaultCodecBlock),
			func(s *Spec, v string) (err error) { s.BlockSize, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.BlockSize) }},
		{"hot-window", []string{"hot"}, "the newest `N` tokens stay uncompressed (default one block)",
			func(s *Spec, v string) error {
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
			func(s *Spec, v string) (err error) { s.Sinks, err = parseCount(v, 0); return err },
			func(s Spec) string { return itoa(s.Sinks) }},
		{"boundary", nil, "`LAYERS` that skip the codec and keep bf16 blocks, separated by , or ; and negative from the end (default " + DefaultBoundary + "; none compresses every layer)",
			func(s *Spec, v string) error {
				if _, err := ParseLayers(v); err != nil {
					return err
				}
				s.Boundary = normLayers(v)
				return nil
			},
			func(s Spec) string { return strings.ReplaceAll(s.Boundary, ",", ";") }},
		{"layer-codecs", []string{"layers"}, "per-layer `CODECS` K/V|K/V|... from layer 0 (none keeps a side bf16), replacing --kv-codec, the bit widths and --boundary",
			func(s *Spec, v string) error {
				l, err := ParseLayerCodecs(v)
				if err != nil {
					return err
				}
				s.Layers = FormatLayerCodecs(l)
				return nil
			},
			func(s Spec) string { return s.Layers }},
		{"kv-policy", []string{"policy"}, "per-layer policy `FILE` (kakeya-eval allocate): sets --layer-codecs from it",
			func(s *Spec, v string) error {
				p, err := ReadPlan(strings.TrimSpace(v))
				if err != nil {
					return err
				}
				s.Layers = FormatLayerCodecs(p.Layers)
				return nil
			},
			func(s Spec) string { return "" }},
		{"precond", []string{"precondition"}, "whiten keys by the calibration's query covariance: 1, 0 or auto (auto: on with --calib when keys are compressed)",
			func(s *Spec, v string) (err error) { s.Precondition, err = parseSwitch(v); return err },
			func(s Spec) string { return switchValue(s.Precondition) }},
		{"calib-codebooks", []string{"cb", "codebooks"}, "kakeya codecs use the calibration's Lloyd-Max codebooks: 1, 0 or auto (auto: when it has them)",
			func(s *Spec, v string) (err error) { s.Codebooks, err = parseSwitch(v); return err },
			func(s Spec) string { return switchValue(s.Codebooks) }},
		{"cache-type", nil, "storage of uncompressed KV blocks: bf16 (default) or f32 (exact, twice the memory)",
			func(s *Spec, v string) error {
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

// lookup finds a key by its name or an alias.
func lookup(name string) (key, bool) {
	for _, k := range keys() {
		if k.name == name || slices.Contains(k.aliases, name) {
			return k, true
		}
	}
	return key{}, false
}

// Keys returns the names Set accepts: each setting's flag name followed by
// its short aliases.
func Keys() []string {
	var out []string
	for _, k := range keys() {
		out = append(out, k.name)
		out = append(out, k.aliases...)
	}
	return out
}

// isKey reports whether name is a setting Set accepts.
func isKey(name string) bool {
	_, ok := lookup(name)
	return ok
}

// SettingName returns the setting a key of Keys writes, by its flag name:
// "kv-codec" for "kv" and "kv-codec", "layer-codecs" for "kv-policy"
// too. Two keys with one SettingName set the same field, so a source of
// settings that gives both gives one setting twice.
func SettingName(name string) (string, bool) {
	k, ok := lookup(name)
	if !ok {
		return "", false
	}
	return k.setting(), true
}

// Set reads one setting, named by its flag name (without dashes) or a short
// alias (see Keys), e.g. Set("block", "64") or Set("kv-codec", "int8").
func (s *Spec) Set(name, value string) error {
	k, ok := lookup(name)
	if !ok {
		return fmt.Errorf("unknown key %s (valid: %s)", name, strings.Join(Keys(), ", "))
	}
	if err := k.set(s, value); err != nil {
		return fmt.Errorf("%s %q: %w", k.name, value, err)
	}
	return nil
}

// ParseSpec reads a Spec written as comma-separated key=value pairs with
// the keys of Keys, e.g.
//
//	k=kakeya:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,precond=1
//
// Boundary layers are separated by ';' here, since ',' separates pairs. A
// codec spec may itself hold commas: a piece that does not start with a
// key and '=' continues the codec spec before it, so the example's k is
// "kakeya:b=3,rank=4". A setting given twice, under any of its names, is
// an error.
func ParseSpec(text string) (Spec, error) {
	var s Spec
	var last *string            // the codec field the previous piece set, for continuations
	seen := map[string]string{} // setting -> the piece that gave it
	for _, piece := range strings.Split(text, ",") {
		name, val, ok := strings.Cut(piece, "=")
		name = strings.TrimSpace(name)
		if !ok || !isKey(name) {
			if last != nil && *last != "" {
				*last += "," + piece
				continue
			}
			if !ok {
				return Spec{}, fmt.Errorf("%q is not key=value", piece)
			}
			return Spec{}, fmt.Errorf("unknown key %s (valid: %s)", name, strings.Join(Keys(), ", "))
		}
		k, _ := lookup(name)
		if prev, dup := seen[k.setting()]; dup {
			return Spec{}, fmt.Errorf("%s: %s is already set by %s; give each setting once", strings.TrimSpace(piece), k.setting(), strings.TrimSpace(prev))
		}
		seen[k.setting()] = piece
		if k.name == "layer-codecs" {
			// Checked once whole, after its continuations.
			s.Layers = val
		} else if err := s.Set(name, val); err != nil {
			return Spec{}, err
		}
		switch k.name {
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
		if err := s.Set("layer-codecs", s.Layers); err != nil {
			return Spec{}, err
		}
	}
	return s, nil
}

// String returns s in the grammar ParseSpec reads, with the short keys and
// only the fields that differ from their defaults; "" for the zero Spec.
func (s Spec) String() string {
	var parts []string
	for _, k := range keys() {
		if v := k.get(s); v != "" {
			short := k.name
			for _, a := range k.aliases {
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

// RegisterFlags defines one flag per setting on fs, named as in Keys
// (--kv-codec, --block-size, ...), each writing into s. As in ParseSpec,
// a setting given twice (--kv-policy and --layer-codecs are one) is an
// error.
func (s *Spec) RegisterFlags(fs *flag.FlagSet) {
	seen := map[string]string{}
	for _, k := range keys() {
		fs.Var(&specFlag{s: s, name: k.name, seen: seen}, k.name, k.usage)
	}
}

// specFlag is the flag.Value of one setting of a Spec.
type specFlag struct {
	s    *Spec
	name string
	seen map[string]string // setting -> the flag and value that gave it, shared by a FlagSet's flags
}

func (f *specFlag) String() string {
	if f.s == nil {
		return ""
	}
	k, _ := lookup(f.name)
	return k.get(*f.s)
}

func (f *specFlag) Set(v string) error {
	k, _ := lookup(f.name)
	if prev, dup := f.seen[k.setting()]; dup {
		return fmt.Errorf("--%s is already set by %s; give each setting once", k.setting(), prev)
	}
	if err := k.set(f.s, v); err != nil {
		return err
	}
	if f.seen != nil {
		f.seen[k.setting()] = fmt.Sprintf("--%s %q", f.name, v)
	}
	return nil
}

// IsBoolFlag lets the on/off settings be given without a value.
func (f *specFlag) IsBoolFlag() bool { return f.name == "precond" || f.name == "calib-codebooks" }

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

// layerPlan returns the codec specs of every layer of an m-layer model:
// "" keeps a side hot (uncompressed, never encoded), "none" stores its
// full blocks as bf16 (boundary layers, and plan sides written none).
func (s Spec) layerPlan(layers int, kSpec, vSpec string) ([]LayerPlan, []int, error) {
	if s.Layers != "" {
		plan, err := ParseLayerCodecs(s.Layers)
		if err != nil {
			return nil, nil, settingErrorf("{layer-codecs}: %w", err)
		}
		if len(plan) != layers {
			return nil, nil, settingErrorf("{layer-codecs} names %d layers, the model has %d", len(plan), layers)
		}
		return plan, nil, nil
	}
	bnd := s.Boundary
	if bnd == "" {
		bnd = DefaultBoundary
	}
	rel, _ := ParseLayers(bnd)
	boundary := make([]bool, layers)
	for _, l := range rel {
		i := l
		if i < 0 {
			i += layers
		}
		if i < 0 || i >= layers {
			return nil, nil, settingErrorf("{boundary} %q: layer %d outside a model of %d layers", bnd, l, layers)
		}
		boundary[i] = true
	}
	plan := make([]LayerPlan, layers)
	var list []int
	for i, b := range boundary {
		if b {
			plan[i] = LayerPlan{K: "none", V: "none"}
			list = append(list, i)
		} else {
			plan[i] = LayerPlan{K: kSpec, V: vSpec}
		}
	}
	return plan, list, nil
}

// coded reports whether a plan side is encoded by a codec other than the
// bf16 storage of an uncompressed side.
func coded(spec string) bool { return spec != "" && spec != "none" }

// Validate checks everything that does not depend on a model or a
// calibration: the codec specs name known codecs with valid settings,
// counts are in range, the boundary list parses, and the switches have
// something to act on. Errors are *SettingError, naming the Spec's fields
// (FlagError turns them into the tools' flags).
func (s Spec) Validate() error {
	k, v, err := s.Codecs()
	if err != nil {
		return err
	}
	switch {
	case s.BlockSize < 0:
		return settingErrorf("{block-size} %d must be > 0", s.BlockSize)
	case s.Sinks < 0:
		return settingErrorf("{sinks} %d must be >= 0", s.Sinks)
	case s.KBits < 0 || s.VBits < 0:
		return settingErrorf("{k-bits} %d, {v-bits} %d: bit widths must be > 0", s.KBits, s.VBits)
	}
	if _, err := ParseLayers(s.Boundary); err != nil {
		return settingErrorf("{boundary}: %w", err)
	}
	if s.Layers != "" {
		if s.KV != "" || s.K != "" || s.V != "" || s.KBits != 0 || s.VBits != 0 || s.Boundary != "" {
			return errPlanConflict
		}
		plan, err := ParseLayerCodecs(s.Layers)
		if err != nil {
			return settingErrorf("{layer-codecs}: %w", err)
		}
		for _, l := range plan {
			if coded(l.K) {
				k = l.K
			}
			if coded(l.V) {
				v = l.V
			}
		}
	}
	switch strings.ToLower(s.CacheType) {
	case "", "bf16", "f32":
	default:
		return settingErrorf("{cache-type} %q: want bf16 or f32", s.CacheType)
	}
	if s.Precondition == On && k == "" {
		return settingErrorf("{precond}: preconditioning wraps the key codec, but keys are uncompressed (set {kv-codec} or {k-codec})")
	}
	if s.Codebooks == On && k == "" && v == "" {
		return settingErrorf("{calib-codebooks}: calibrated codebooks need a codec, but keys and values are uncompressed")
	}
	return nil
}

// A Shape is what NewPolicy needs to know of a model.
type Shape struct {
	Layers, KVHeads, HeadDim int
	// MaxContext is the longest sequence the cache will hold (0: unknown);
	// no block may be longer.
	MaxContext int
}

// Settings are the values a Spec takes for one model and calibration, the
// defaults applied: what a report records and a stats line names.
type Settings struct {
	// K and V are the codec specs in effect ("" for uncompressed).
	K string `json:"k"`
	V string `json:"v"`
	// BlockSize is tokens per block.
	BlockSize int `json:"block"`
	// HotWindow and Sinks are the tokens kept uncompressed at the end and
	// at the start of the sequence (0 for an uncompressed cache).
	HotWindow int `json:"hot"`
	Sinks     int `json:"sinks"`
	// Boundary lists the layers kept bf16, as indices from 0, ascending.
	Boundary []int `json:"boundary"`
	// Precondition and Codebooks say whether keys are whitened and whether
	// any codec uses the calibration's codebooks.
	Precondition bool `json:"precond"`
	Codebooks    bool `json:"cb"`
	// CacheType is the storage of uncompressed blocks, bf16 or f32.
	CacheType string `json:"cache_type"`
	// Layers holds a per-layer plan's codecs (K and V are then empty).
	Layers []LayerPlan `json:"layers,omitempty"`
	// Warning is what NewPolicy found wrong without it being an error: a
	// compressed cache that never encodes a block within the model's
	// context (see NothingCompressed); nil when all is well. Tools print
	// it (FlagError words it with their flags); reports do not record it.
	Warning error `json:"-"`
}

// Compressed reports whether any codec is in effect.
func (st Settings) Compressed() bool { return st.K != "" || st.V != "" || len(st.Layers) > 0 }

// FirstEncoded returns how many tokens a sequence holds when the cache
// encodes its first block: the sinks rounded up to whole blocks, one
// block, and the hot window (a block is encoded once it is full, past the
// sinks and older than the hot window); math.MaxInt when that overflows,
// and 0 for an uncompressed cache.
func (st Settings) FirstEncoded() int {
	bs := st.BlockSize
	if !st.Compressed() || bs <= 0 {
		return 0
	}
	if bs > math.MaxInt/4 || st.Sinks > math.MaxInt-2*bs {
		return math.MaxInt
	}
	n := (st.Sinks+bs-1)/bs*bs + bs
	if st.HotWindow > math.MaxInt-n {
		return math.MaxInt
	}
	return n + st.HotWindow
}

// NothingCompressed returns a warning, a *SettingError, when a compressed
// cache encodes no block of a sequence of up to n tokens because the hot
// window and the sinks cover it all, and nil otherwise (an uncompressed
// cache, or n <= 0, unknown). Such a cache costs and measures as much as
// an uncompressed one.
func (st Settings) NothingCompressed(n int) error {
	first := st.FirstEncoded()
	if first == 0 || n <= 0 || first <= n {
		return nil
	}
	need := fmt.Sprintf("%d tokens", first)
	if first == math.MaxInt {
		need = fmt.Sprintf("more than %d tokens", n)
	}
	return settingErrorf("nothing will be compressed: with {hot-window} %d, {sinks} %d and %d-token blocks the first block is encoded once a sequence holds %s, and sequences here hold at most %d; lower {hot-window} or {sinks} (or {block-size})",
		st.HotWindow, st.Sinks, st.BlockSize, need, n)
}

// String describes the settings in one line, e.g. "k=int8 v=int8 block 64,
// hot 64, boundary 0;23, bf16 hot blocks".
func (st Settings) String() string {
	if !st.Compressed() {
		return fmt.Sprintf("uncompressed %s, block %d", st.CacheType, st.BlockSize)
	}
	side := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	var b strings.Builder
	if len(st.Layers) > 0 {
		fmt.Fprintf(&b, "per-layer k/v %s, block %d, hot %d", FormatLayerCodecs(st.Layers), st.BlockSize, st.HotWindow)
	} else {
		fmt.Fprintf(&b, "k=%s v=%s block %d, hot %d", side(st.K), side(st.V), st.BlockSize, st.HotWindow)
	}
	if st.Sinks > 0 {
		fmt.Fprintf(&b, ", sinks %d", st.Sinks)
	}
	if len(st.Boundary) > 0 {
		b.WriteString(", boundary ")
		for i, l := range st.Boundary {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(strconv.Itoa(l))
		}
	}
	if st.Precondition {
		b.WriteString(", preconditioned")
	}
	if st.Codebooks {
		b.WriteString(", calibrated codebooks")
	}
	fmt.Fprintf(&b, ", %s hot blocks", st.CacheType)
	return b.String()
}

// NewPolicy resolves s for a model of shape m and the calibration cal (nil
// for none): it applies the defaults, checks what depends on the model
// (boundary layers in range, blocks no longer than the context, the
// calibration's shape), and builds the policy: one codec per layer outside
// the boundary (boundary layers store full blocks as bf16), and with
// preconditioning one key codec per KV head whitened by that head's
// Cholesky factor. It returns the policy and the settings in effect, whose
// Warning is set when the hot window and sinks leave nothing to compress
// within m.MaxContext.
func NewPolicy(s Spec, m Shape, cal *codec.Calibration) (Policy, Settings, error) {
	if err := s.Validate(); err != nil {
		return Policy{}, Settings{}, err
	}
	kSpec, vSpec, _ := s.Codecs()
	st := Settings{K: kSpec, V: vSpec, BlockSize: s.BlockSize, CacheType: strings.ToLower(s.CacheType)}
	if st.CacheType == "" {
		st.CacheType = "bf16"
	}
	compressed := s.Compressed()
	if st.BlockSize == 0 {
		st.BlockSize = DefaultBlock
		if compressed {
			st.BlockSize = DefaultCodecBlock
		}
		if m.MaxContext > 0 {
			st.BlockSize = min(st.BlockSize, m.MaxContext)
		}
	}
	if m.MaxContext > 0 && st.BlockSize > m.MaxContext {
		return Policy{}, Settings{}, settingErrorf("{block-size} %d exceeds the context of %d tokens", st.BlockSize, m.MaxContext)
	}
	if cal != nil {
		if err := cal.Validate(m.Layers, m.KVHeads, m.HeadDim); err != nil {
			return Policy{}, Settings{}, err
		}
	}
	p := Policy{HotBF16: st.CacheType == "bf16"}
	if !compressed {
		if s.Precondition == On || s.Codebooks == On {
			return Policy{}, Settings{}, settingErrorf("{precond} or {calib-codebooks} is on, but keys and values are uncompressed")
		}
		return p, st, nil
	}

	st.Sinks = s.Sinks
	switch {
	case s.HotWindow == 0:
		st.HotWindow = st.BlockSize
	case s.HotWindow > 0:
		st.HotWindow = s.HotWindow
	}
	p.HotWindow, p.Sinks = st.HotWindow, st.Sinks
	st.Warning = st.NothingCompressed(m.MaxContext)
	plan, boundary, err := s.layerPlan(m.Layers, kSpec, vSpec)
	if err != nil {
		return Policy{}, Settings{}, err
	}
	st.Boundary = boundary
	if s.Layers != "" {
		st.Layers = plan
	}
	anyK := false
	for _, l := range plan {
		anyK = anyK || coded(l.K)
	}

	hasChol := cal != nil && cal.Chol != nil
	st.Precondition = anyK && s.Precondition.resolve(hasChol)
	if st.Precondition && !hasChol {
		return Policy{}, Settings{}, settingErrorf("{precond} needs a calibration with query Cholesky factors{calib}")
	}
	if s.Codebooks == On && cal == nil {
		return Policy{}, Settings{}, settingErrorf("{calib-codebooks} needs a calibration{calib}")
	}
	// build makes (once per spec and side) the codec of a plan side, with
	// the calibrated codebook for its width when the settings ask.
	type sideSpec struct {
		spec string
		kv   int
	}
	built := map[sideSpec]codec.Codec{}
	build := func(spec string, kv int) (codec.Codec, error) {
		switch spec {
		case "":
			return nil, nil
		case "none":
			return codec.BF16{}, nil
		}
		if c, ok := built[sideSpec{spec, kv}]; ok {
			return c, nil
		}
		side := "value codec"
		if kv == 0 {
			side = "key codec"
		}
		c, err := newCodec(spec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", side, err)
		}
		// The key codebook is fitted to whitened keys: only preconditioned
		// keys use it.
		if cal != nil && s.Codebooks != Off && (kv == 1 || st.Precondition) {
			cbs := cal.VCodebooks
			if kv == 0 {
				cbs = cal.KCodebooks
			}
			var used bool
			if c, used, err = withCodebook(c, cbs, s.Codebooks == On); err != nil {
				return nil, fmt.Errorf("%s: %w", side, err)
			}
			st.Codebooks = st.Codebooks || used
		}
		built[sideSpec{spec, kv}] = c
		return c, nil
	}

	p.Layers = make([]LayerCodecs, m.Layers)
	for l, lp := range plan {
		k, err := build(lp.K, 0)
		if err != nil {
			return Policy{}, Settings{}, err
		}
		if p.Layers[l].V, err = build(lp.V, 1); err != nil {
			return Policy{}, Settings{}, err
		}
		switch {
		case k == nil:
		case st.Precondition && coded(lp.K):
			ks := make([]codec.Codec, m.KVHeads)
			for h := range ks {
				L := cal.Chol[l*cal.KVHeads+h]
				if L == nil {
					return Policy{}, Settings{}, fmt.Errorf("calibration has no Cholesky factor for layer %d kv head %d", l, h)
				}
				if ks[h], err = codec.NewPreconditioned(k, L, cal.HeadDim); err != nil {
					return Policy{}, Settings{}, fmt.Errorf("layer %d kv head %d: %w", l, h, err)
				}
			}
			p.Layers[l].K = ks
		default:
			p.Layers[l].K = []codec.Codec{k}
		}
	}
	return p, st, nil
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

// withBits checks one side's codec spec (given by codecFlag) and applies
// the bit width of bitsFlag to it, returning the canonical spec string.
func withBits(spec string, bits int, codecKey, bitsKey string) (string, error) {
	c, b := "{"+codecKey+"}", "{"+bitsKey+"}"
	if spec == "" {
		if bits != 0 {
			return "", settingErrorf(b+" %d: no codec is set for that side (use "+c+")", bits)
		}
		return "", nil
	}
	sp, err := codec.ParseSpec(spec)
	if err != nil {
		return "", settingErrorf(c+" %q: %w", spec, err)
	}
	if bits != 0 {
		if !codec.TakesBits(sp.Name) {
			return "", settingErrorf(b+" %d: codec %s has a fixed width (only kakeya and turbo take a bit width)", bits, sp.Name)
		}
		if sp.Bits != 0 && sp.Bits != bits {
			return "", settingErrorf(b+" %d contradicts b=%d in "+c+" %q", bits, sp.Bits, spec)
		}
		sp.Bits = bits
	}
	if _, err := codec.New(sp); err != nil {
		if bits != 0 {
			return "", settingErrorf(b+" %d: %w", bits, err)
		}
		return "", settingErrorf(c+" %q: %w", spec, err)
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
