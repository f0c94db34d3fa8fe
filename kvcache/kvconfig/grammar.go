package kvconfig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
)

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
		{"kv-codec", []string{"kv"}, "codec `SPEC` for keys and values: none or one of " + strings.Join(codec.Names(), ", ") + ` (a spec such as "kakeya-block:b=3,rank=4" also works; kakeya alone is the kakeya preset: keys ` + PresetKCodec + `, values ` + PresetVCodec + `, on every layer in blocks of ` + strconv.Itoa(PresetBlock) + ` with a hot window of ` + strconv.Itoa(PresetHotWindow) + `)`,
			func(_ Parser, s *Spec, v string) error { s.KV = codecValue(v); return nil },
			func(s Spec) string { return s.KV }},
		{"k-codec", []string{"k"}, "key codec `SPEC`, overriding --kv-codec for keys (none keeps keys uncompressed)",
			func(_ Parser, s *Spec, v string) error { s.K = codecValue(v); return nil },
			func(s Spec) string { return s.K }},
		{"v-codec", []string{"v"}, "value codec `SPEC`, overriding --kv-codec for values (none keeps values uncompressed)",
			func(_ Parser, s *Spec, v string) error { s.V = codecValue(v); return nil },
			func(s Spec) string { return s.V }},
		{"k-bits", []string{"kbits"}, "bit width `N` of the key codec, for codecs that have one (kakeya-block: 1-4, turbo: 2-4)",
			func(_ Parser, s *Spec, v string) (err error) { s.KBits, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.KBits) }},
		{"v-bits", []string{"vbits"}, "bit width `N` of the value codec, for codecs that have one (kakeya-block: 1-4, turbo: 2-4)",
			func(_ Parser, s *Spec, v string) (err error) { s.VBits, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.VBits) }},
		{"block-size", []string{"block"}, fmt.Sprintf("tokens per cache block `N` (default %d, or %d when a codec is set)", DefaultBlock, DefaultCodecBlock),
			func(_ Parser, s *Spec, v string) (err error) { s.BlockSize, err = parseCount(v, 1); return err },
			func(s Spec) string { return itoa(s.BlockSize) }},
		{"hot-window", []string{"hot"}, "the newest `N` tokens stay uncompressed (default one block; " + strconv.Itoa(PresetHotWindow) + " for the kakeya preset)",
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
		{"boundary", nil, "`LAYERS` that skip the codec and keep bf16 blocks, separated by , or ; and negative from the end (default " + DefaultBoundary + ", " + PresetBoundary + " for the kakeya preset; none compresses every layer)",
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
		{"calib-codebooks", []string{"cb", "codebooks"}, "kakeya-block codecs use the calibration's Lloyd-Max codebooks: 1, 0 or auto (auto: when it has them)",
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

// lookup finds a key by its name or an alias.
func lookup(name string) (Key, bool) {
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
	k, ok := lookup(name)
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
	k, ok := lookup(name)
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
//	k=kakeya-block:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,precond=1
//
// Boundary layers are separated by ';' here, since ',' separates pairs. A
// codec spec may itself hold commas: a piece that does not start with a
// key and '=' continues the codec spec before it, so the example's k is
// "kakeya-block:b=3,rank=4". A setting given twice, under any of its names, is
// an error. Parse(s.String()) == s for every Spec Parse returns but the
// zero one, whose String "" is not a setting.
func (p Parser) Parse(text string) (Spec, error) {
	var s Spec
	var last *string            // the codec field the previous piece set, for continuations
	seen := map[string]string{} // setting -> the piece that gave it
	for _, piece := range strings.Split(text, ",") {
		name, val, ok := strings.Cut(piece, "=")
		name = strings.TrimSpace(name)
		k, known := lookup(name)
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
