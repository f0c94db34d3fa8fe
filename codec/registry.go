package codec

import (
	"errors"
	"fmt"
	"maps"
	"math"
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

// names are the codecs New builds, in the order help lists them: the one
// list Names, New and the tools' help read.
var names = []string{"f32", "bf16", "fp8", "int8", "int4", "int4-rot", "int4-k", "int4-k-rot", "int2", "int2-rot", "int2-k", "int2-k-rot", "kakeya", "kakeya-pc", "kvtc", "turbo"}

// Names lists the codec names New accepts ("identity" aside, an alias of
// f32).
func Names() []string { return slices.Clone(names) }

// TakesBits reports whether the codec named name has a bit-width setting
// (b=N in its spec).
func TakesBits(name string) bool {
	_, _, ok := bitsRange(name)
	return ok
}

// ParseSpec parses "name" or "name:key=value,key=value". Keys:
//
//	int4*, int2*: group=<1..65535>, params=<8bit|f16>, seed=<uint>
//	kakeya:  b|bits=<1..4>, rank=<0..255>, var=<(0,1]>, cbits=<4|8|16>,
//	         outlier=<T >= 0, 0 off>, maxout=<0..255>, signs=<true|false>, seed=<uint>
//	kakeya-pc: rate=<bits per value, 0..16>, maxbits=<1..6>, block=<rows the allocation assumes>,
//	         qw=<true|false: weigh key components by the queries>, ec=<true|false: entropy code the codes>
//	kvtc:    KVTC-style: kakeya-pc's basis and allocation, uniform quantizers, entropy coded;
//	         rate=, maxbits=, block=, qw= as kakeya-pc's
//	turbo:   b|bits=<2..4>, group=<block: power of two, 2..1024>, seed=<uint>
//
// e.g. "kakeya:b=3,rank=8,outlier=3.5". A key given twice (b and bits
// count as one) is an error, and so is a bit width outside the codec's
// range; the other values are checked by New, whose errors name the key,
// the value and the valid range.
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
	bitsKey := "" // the key that set Bits, b or bits
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return sp, fmt.Errorf("codec: spec %q: %q is not key=value", s, kv)
		}
		if k == "b" || k == "bits" {
			if bitsKey != "" {
				return sp, fmt.Errorf("codec: spec %q: the bit width is given twice (%s=%d, then %s=%s); give it once", s, bitsKey, sp.Bits, k, v)
			}
			b, err := strconv.Atoi(v)
			if err != nil {
				return sp, fmt.Errorf("codec: spec %q: bits %q: %w", s, v, err)
			}
			// Bits 0 means "the codec's default" in a Spec, so a written
			// width must be a real one.
			if lo, hi, ok := bitsRange(sp.Name); ok && (b < lo || b > hi) {
				return sp, fmt.Errorf("codec: spec %q: %s=%d: want a bit width in %d..%d for %s", s, k, b, lo, hi, sp.Name)
			} else if !ok && b <= 0 {
				return sp, fmt.Errorf("codec: spec %q: %s=%d: want a bit width >= 1", s, k, b)
			}
			sp.Bits, bitsKey = b, k
			continue
		}
		if old, dup := sp.Params[k]; dup {
			return sp, fmt.Errorf("codec: spec %q: key %q given twice (%s=%s, then %s=%s); give it once", s, k, k, old, k, v)
		}
		sp.Params[k] = v
	}
	return sp, nil
}

// bitsRange returns the bit widths (b=N) the codec named name accepts, and
// false for a codec without a bit-width setting.
func bitsRange(name string) (lo, hi int, ok bool) {
	switch name {
	case "kakeya":
		return 1, 4, true
	case "turbo":
		return 2, 4, true
	}
	return 0, 0, false
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

// Parse builds the codec a spec string names: ParseSpec, then New.
func Parse(spec string) (Codec, error) {
	sp, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return New(sp)
}

// New builds the codec s describes; unknown names or keys are errors.
func New(s Spec) (Codec, error) {
	p := params{spec: s, used: map[string]bool{}}
	if s.Name != "identity" && !slices.Contains(names, s.Name) {
		return nil, fmt.Errorf("codec: unknown codec %q (valid: %s)", s.Name, strings.Join(names, ", "))
	}
	var c Codec
	var err error
	switch s.Name {
	case "f32", "identity":
		c = Identity{}
	case "bf16":
		c = BF16{}
	case "fp8":
		c = FP8{}
	case "int8":
		c = Int8{}
	case "int4", "int4-rot", "int4-k", "int4-k-rot", "int2", "int2-rot", "int2-k", "int2-k-rot":
		o := DefaultInt4Options()
		if strings.HasPrefix(s.Name, "int2") {
			o.Bits = 2
		}
		o.PerChannel = strings.Contains(s.Name, "-k")
		o.Rotate = strings.HasSuffix(s.Name, "-rot")
		p.intIn("group", &o.Group, 1, 65535)
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
		p.intIn("rank", &o.MaxRank, 0, 255)
		p.float("var", &o.VarianceRatio)
		p.want("var", o.VarianceRatio > 0 && o.VarianceRatio <= 1, "want a variance ratio in (0, 1]")
		p.int("cbits", &o.CoeffBits)
		p.want("cbits", o.CoeffBits == 4 || o.CoeffBits == 8 || o.CoeffBits == 16, "want 4, 8 or 16")
		var t float64 = float64(o.OutlierThreshold)
		p.float("outlier", &t)
		p.want("outlier", t >= 0 && t <= math.MaxFloat32, "want a threshold >= 0 in standard deviations (0 turns outliers off)")
		o.OutlierThreshold = float32(t)
		p.intIn("maxout", &o.MaxOutliers, 0, 255)
		p.bool("signs", &o.RandomSigns)
		p.uint64("seed", &o.Seed)
		if p.err == nil {
			c, err = NewKakeya(o)
		}
	case "kakeya-pc", "kvtc":
		// The statistics come from a calibration (kvplan builds one codec
		// per layer side from it); this one only carries the settings.
		o := DefaultKakeyaPCOptions()
		p.float("rate", &o.Rate)
		p.want("rate", o.Rate >= 0 && o.Rate <= 16, "want bits per value in 0..16")
		p.intIn("maxbits", &o.MaxBits, 1, pcMaxBits)
		p.intIn("block", &o.Block, 1, maxRows)
		p.bool("qw", &o.QueryWeighted)
		if s.Name == "kvtc" {
			o.Entropy, o.Uniform = true, true
		} else {
			p.bool("ec", &o.Entropy)
		}
		if p.err == nil {
			c, err = NewKakeyaPC(o, nil, nil)
		}
	case "turbo":
		o := DefaultTurboOptions()
		if s.Bits != 0 {
			o.Bits = s.Bits
		}
		p.int("group", &o.Block)
		p.want("group", o.Block >= 2 && o.Block <= 1024 && o.Block&(o.Block-1) == 0, "want a power of two in 2..1024")
		p.uint64("seed", &o.Seed)
		if p.err == nil {
			c, err = NewTurbo(o)
		}
	default:
		return nil, fmt.Errorf("codec: %q is listed but New does not build it", s.Name)
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

// intIn reads an integer setting that must lie in lo..hi.
func (p *params) intIn(k string, dst *int, lo, hi int) {
	p.int(k, dst)
	p.want(k, *dst >= lo && *dst <= hi, fmt.Sprintf("want an integer in %d..%d", lo, hi))
}

// want fails setting k, when it was given and read, unless ok; what says
// which values are valid.
func (p *params) want(k string, ok bool, what string) {
	if v, given := p.spec.Params[k]; given && p.err == nil && !ok {
		p.fail(k, v, errors.New(what))
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
