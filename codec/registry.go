package codec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Spec names a codec and its settings, as parsed from a command-line flag.
type Spec struct {
	// Name is one of Names().
	Name string
	// Bits is the residual width for kakeya (0 keeps the default).
	Bits int
	// Params holds the remaining key=value settings (see ParseSpec).
	Params map[string]string
}

// Names lists the codec names New accepts.
func Names() []string {
	return []string{"f32", "bf16", "int8", "int4", "int4-rot", "int4-k", "int4-k-rot", "int2", "int2-k", "kakeya", "turbo"}
}

// TakesBits reports whether the codec named name has a bit-width setting
// (b=N in its spec).
func TakesBits(name string) bool { return name == "kakeya" || name == "turbo" }

// ParseSpec parses "name" or "name:key=value,key=value". Keys:
//
//	int4*, int2*: group=<G>, params=<8bit|f16>, seed=<uint>
//	kakeya:  b|bits=<1..4>, rank=<0..255>, var=<(0,1]>, cbits=<4|8|16>,
//	         outlier=<T, 0 off>, maxout=<0..255>, signs=<true|false>, seed=<uint>
//	turbo:   b|bits=<2..4>, group=<block: power of two>, seed=<uint>
//
// e.g. "kakeya:b=3,rank=8,outlier=3.5". Values are checked by New.
func ParseSpec(s string) (Spec, error) {
	name, rest, has := strings.Cut(strings.TrimSpace(s), ":")
	sp := Spec{Name: strings.ToLower(name)}
	if sp.Name == "" {
		return sp, fmt.Errorf("codec: spec %q: empty codec name (valid: %s)", s, strings.Join(Names(), ", "))
	}
	if !has {
		return sp, nil
	}
	sp.Params = make(map[string]string)
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return sp, fmt.Errorf("codec: spec %q: %q is not key=value", s, kv)
		}
		if k == "b" || k == "bits" {
			b, err := strconv.Atoi(v)
			if err != nil {
				return sp, fmt.Errorf("codec: spec %q: bits %q: %w", s, v, err)
			}
			sp.Bits = b
			continue
		}
		if _, dup := sp.Params[k]; dup {
			return sp, fmt.Errorf("codec: spec %q: key %q given twice", s, k)
		}
		sp.Params[k] = v
	}
	return sp, nil
}

// String formats s in the grammar ParseSpec reads, keys sorted.
func (s Spec) String() string {
	var kv []string
	if s.Bits != 0 {
		kv = append(kv, "b="+strconv.Itoa(s.Bits))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Params)) {
		kv = append(kv, k+"="+s.Params[k])
	}
	if len(kv) == 0 {
		return s.Name
	}
	return s.Name + ":" + strings.Join(kv, ",")
}

// New builds the codec s describes; unknown names or keys are errors.
func New(s Spec) (Codec, error) {
	p := params{spec: s, used: map[string]bool{}}
	var c Codec
	var err error
	switch s.Name {
	case "f32", "identity":
		c = Identity{}
	case "bf16":
		c = BF16{}
	case "int8":
		c = Int8{}
	case "int4", "int4-rot", "int4-k", "int4-k-rot", "int2", "int2-rot", "int2-k", "int2-k-rot":
		o := DefaultInt4Options()
		if strings.HasPrefix(s.Name, "int2") {
			o.Bits = 2
		}
		o.PerChannel = strings.Contains(s.Name, "-k")
		o.Rotate = strings.HasSuffix(s.Name, "-rot")
		p.int("group", &o.Group)
		p.uint64("seed", &o.Seed)
		if v, ok := p.get("params"); ok {
			switch v {
			case "f16":
				o.F16Params = true
			case "8bit":
			default:
				p.fail("params", v, errors.New("want 8bit (the default) or f16"))
			}
		}
		if p.err == nil {
			c, err = NewInt4(o)
		}
	case "kakeya":
		o := DefaultKakeyaOptions()
		if s.Bits != 0 {
			o.Bits = s.Bits
		}
		p.int("rank", &o.MaxRank)
		p.float("var", &o.VarianceRatio)
		p.int("cbits", &o.CoeffBits)
		var t float64 = float64(o.OutlierThreshold)
		p.float("outlier", &t)
		o.OutlierThreshold = float32(t)
		p.int("maxout", &o.MaxOutliers)
		p.bool("signs", &o.RandomSigns)
		p.uint64("seed", &o.Seed)
		if p.err == nil {
			c, err = NewKakeya(o)
		}
	case "turbo":
		o := DefaultTurboOptions()
		if s.Bits != 0 {
			o.Bits = s.Bits
		}
		p.int("group", &o.Block)
		p.uint64("seed", &o.Seed)
		if p.err == nil {
			c, err = NewTurbo(o)
		}
	default:
		return nil, fmt.Errorf("codec: unknown codec %q (valid: %s)", s.Name, strings.Join(Names(), ", "))
	}
	if p.err != nil {
		return nil, p.err
	}
	if err != nil {
		return nil, fmt.Errorf("codec: spec %s: %w", s, err)
	}
	if s.Bits != 0 && !TakesBits(s.Name) {
		return nil, fmt.Errorf("codec: spec %s: %s takes no bits setting", s, s.Name)
	}
	for k := range s.Params {
		if !p.used[k] {
			return nil, fmt.Errorf("codec: spec %s: unknown key %q for %s", s, k, s.Name)
		}
	}
	return c, nil
}

// params reads typed values out of a Spec, keeping the first error.
type params struct {
	spec Spec
	used map[string]bool
	err  error
}

func (p *params) get(k string) (string, bool) {
	v, ok := p.spec.Params[k]
	if ok {
		p.used[k] = true
	}
	return v, ok && p.err == nil
}

func (p *params) fail(k, v string, err error) {
	p.err = fmt.Errorf("codec: spec %s: %s=%q: %w", p.spec, k, v, err)
}

func (p *params) int(k string, dst *int) {
	if v, ok := p.get(k); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			p.fail(k, v, err)
			return
		}
		*dst = n
	}
}

func (p *params) uint64(k string, dst *uint64) {
	if v, ok := p.get(k); ok {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			p.fail(k, v, err)
			return
		}
		*dst = n
	}
}

func (p *params) float(k string, dst *float64) {
	if v, ok := p.get(k); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			p.fail(k, v, err)
			return
		}
		*dst = f
	}
}

func (p *params) bool(k string, dst *bool) {
	if v, ok := p.get(k); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.fail(k, v, err)
			return
		}
		*dst = b
	}
}
