package codec

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Spec names a codec and its settings, as parsed from a command-line flag.
type Spec struct {
	// Name is one of Names().
	Name string
	// Bits is the codec's bit width, b=N, for a codec that has one
	// (Registration.MinBits); 0 keeps the default.
	Bits int
	// Params holds the remaining key=value settings (see ParseSpec).
	Params map[string]string
}

// A Registration describes one codec to the registry: its name, what its
// settings are and how New builds it. Each codec's file registers its
// codecs from an init function, one Register call each, as image formats
// and database/sql drivers do; the registry names no codec itself.
type Registration struct {
	// Name is the codec's name in specs, lower case, e.g. "int8".
	Name string
	// Aliases are other names ParseSpec accepts for it ("identity" for
	// f32).
	Aliases []string
	// Deprecated are old names ParseSpec still accepts for it, logging a
	// one-line deprecation message the first time each is read.
	Deprecated []string
	// MinBits and MaxBits bound the codec's bit width (b=N); both zero for
	// a codec without a bit-width setting.
	MinBits, MaxBits int
	// Principal marks a codec in a principal basis calibrated per layer
	// side: it needs a calibration's statistics to encode, which the
	// planner (kvplan) supplies, and its keys are weighed by the queries
	// rather than whitened. New builds one that carries only the settings.
	Principal bool
	// Formats are the block formats (format.go) the codec writes; the
	// first is the one its default settings write.
	Formats []FormatID
	// New builds the codec s names, reading its settings from a (s.Bits is
	// already checked against MinBits..MaxBits). Settings a never reads are
	// reported as unknown keys; the first error a records wins over err.
	New func(s Spec, a *Args) (Codec, error)
}

// The registry: written by Register, from the codecs' init functions, and
// read after; mu makes a later Register safe all the same.
var (
	mu       sync.RWMutex
	registry []*Registration              // in registration order
	byName   = map[string]*Registration{} // names and aliases, lower case
	oldNames = map[string]bool{}          // the Deprecated names
	warned   sync.Map                     // deprecated names already logged
)

// lookup returns the registration of name (exact, lower case) and whether
// it is an old spelling.
func lookup(name string) (r *Registration, old, ok bool) {
	mu.RLock()
	defer mu.RUnlock()
	r, ok = byName[name]
	return r, oldNames[name], ok
}

// Register adds a codec to the registry. It panics, as database/sql.Register
// does, when the name or an alias is taken (registering nothing), the
// registration has no name, no formats or no New, or its bit range is
// inverted: a programming error found at start-up.
func Register(r Registration) {
	if r.Name == "" || r.New == nil || len(r.Formats) == 0 || r.MinBits > r.MaxBits || (r.MaxBits > 0) != (r.MinBits > 0) {
		panic(fmt.Sprintf("codec: Register(%q): incomplete registration", r.Name))
	}
	reg := &r
	names := slices.Concat([]string{r.Name}, r.Aliases, r.Deprecated)
	mu.Lock()
	defer mu.Unlock()
	for _, n := range names {
		if n != strings.ToLower(n) {
			panic(fmt.Sprintf("codec: Register(%q): name %q is not lower case", r.Name, n))
		}
		if _, dup := byName[n]; dup {
			panic(fmt.Sprintf("codec: Register(%q): name %q registered twice", r.Name, n))
		}
	}
	for _, n := range names {
		byName[n] = reg
	}
	for _, n := range r.Deprecated {
		oldNames[n] = true
	}
	registry = append(registry, reg)
}

// sorted returns the registrations in the order help lists them: by
// their first format, then in registration order.
func sorted() []*Registration {
	mu.RLock()
	rs := slices.Clone(registry)
	mu.RUnlock()
	slices.SortStableFunc(rs, func(a, b *Registration) int { return int(a.Formats[0]) - int(b.Formats[0]) })
	return rs
}

// Registered returns every registered codec, in the order Names lists
// them. The slices in them are shared: do not modify them.
func Registered() []Registration {
	var out []Registration
	for _, r := range sorted() {
		out = append(out, *r)
	}
	return out
}

// Lookup returns the registration of the codec named name (or one of its
// aliases, old names included), and whether there is one.
func Lookup(name string) (Registration, bool) {
	r, _, ok := lookup(strings.ToLower(name))
	if !ok {
		return Registration{}, false
	}
	return *r, true
}

// Names lists the codec names New accepts (aliases aside): every
// registered codec, by format.
func Names() []string {
	var out []string
	for _, r := range sorted() {
		out = append(out, r.Name)
	}
	return out
}

// TakesBits reports whether the codec named name has a bit-width setting
// (b=N in its spec).
func TakesBits(name string) bool {
	_, _, ok := bitsRange(name)
	return ok
}

// IsPrincipal reports whether the codec spec s names a codec in a
// calibrated principal basis (Registration.Principal): kakeya-pc, kvtc.
// An invalid spec is not one.
func IsPrincipal(s string) bool {
	sp, err := ParseSpec(s)
	if err != nil {
		return false
	}
	r, ok := Lookup(sp.Name)
	return ok && r.Principal
}

// canonical returns the registered name of name, logging a deprecation
// message (once per process and name) when name is an old spelling.
// Unknown names come back unchanged.
func canonical(name string) string {
	r, old, ok := lookup(name)
	if !ok {
		return name
	}
	if old {
		if _, done := warned.LoadOrStore(name, true); !done {
			slog.Warn(fmt.Sprintf("codec: %q is deprecated, write %q: the same codec (%q alone is the kakeya cache preset)", name, r.Name, name))
		}
	}
	return r.Name
}

// ParseSpec parses "name" or "name:key=value,key=value". Keys:
//
//	int4*, int2*: group=<1..65535>, params=<8bit|f16>, seed=<uint>
//	kakeya-block: b|bits=<1..4>, rank=<0..255>, var=<(0,1]>, cbits=<4|8|16>,
//	         outlier=<T >= 0, 0 off>, maxout=<0..255>, signs=<true|false>, seed=<uint>
//	kakeya-pc: rate=<bits per value, 0..16>, maxbits=<1..6>, block=<rows the allocation assumes>,
//	         qw=<true|false: weigh key components by the queries>, ec=<true|false: entropy code the codes>,
//	         layout=<1|2: the entropy-coded stream's layout, default 2; 1 is what the CUDA kernel reads>,
//	         coded=<N: code at most N components, 0 no cap; caps a key block's decode work>
//	kvtc:    KVTC-style: kakeya-pc's basis and allocation, uniform quantizers, entropy coded;
//	         rate=, maxbits=, block=, qw=, layout=, coded= as kakeya-pc's
//	turbo:   b|bits=<2..4>, group=<block: power of two, 2..1024>, seed=<uint>
//
// e.g. "kakeya-block:b=3,rank=8,outlier=3.5". The name is returned as
// registered: an alias becomes the codec's name, and the old spelling
// "kakeya" of kakeya-block is accepted with a deprecation message. A key
// given twice (b and bits count as one) is an error, and so is a bit
// width outside the codec's range; the other values are checked by New,
// whose errors name the key, the value and the valid range.
func ParseSpec(s string) (Spec, error) {
	name, rest, has := strings.Cut(strings.TrimSpace(s), ":")
	sp := Spec{Name: canonical(strings.ToLower(strings.TrimSpace(name)))}
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
	r, _, found := lookup(name)
	if !found || r.MaxBits == 0 {
		return 0, 0, false
	}
	return r.MinBits, r.MaxBits, true
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

// New builds the codec s describes through its registration; unknown
// names or keys are errors.
func New(s Spec) (Codec, error) {
	s.Name = canonical(s.Name)
	r, _, ok := lookup(s.Name)
	if !ok {
		return nil, fmt.Errorf("codec: unknown codec %q (valid: %s)", s.Name, strings.Join(Names(), ", "))
	}
	if s.Bits != 0 && r.MaxBits == 0 {
		return nil, fmt.Errorf("codec: spec %s: %s takes no bits setting", s, r.Name)
	}
	a := &Args{spec: s, used: map[string]bool{}}
	c, err := r.New(s, a)
	if a.err != nil {
		return nil, a.err
	}
	if err != nil {
		return nil, fmt.Errorf("codec: spec %s: %w", s, err)
	}
	for k := range s.Params {
		if !a.used[k] {
			return nil, fmt.Errorf("codec: spec %s: unknown key %q for %s", s, k, r.Name)
		}
	}
	return c, nil
}

// Args reads a Spec's settings for a codec's New, keeping the first
// error, which names the spec, the key, the value and what is valid.
type Args struct {
	spec Spec
	used map[string]bool
	err  error
}

// Err returns the first error recorded, or nil: a New stops building when
// it is set.
func (p *Args) Err() error { return p.err }

// Get returns setting k as written, marking it read.
func (p *Args) Get(k string) (string, bool) {
	v, ok := p.spec.Params[k]
	if ok {
		p.used[k] = true
	}
	return v, ok && p.err == nil
}

// Fail records that setting k=v is invalid because of err.
func (p *Args) Fail(k, v string, err error) {
	p.err = fmt.Errorf("codec: spec %s: %s=%q: %w", p.spec, k, v, err)
}

// Int reads integer setting k into dst, when given.
func (p *Args) Int(k string, dst *int) {
	if v, ok := p.Get(k); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			p.Fail(k, v, err)
			return
		}
		*dst = n
	}
}

// IntIn reads an integer setting that must lie in lo..hi.
func (p *Args) IntIn(k string, dst *int, lo, hi int) {
	p.Int(k, dst)
	p.Want(k, *dst >= lo && *dst <= hi, fmt.Sprintf("want an integer in %d..%d", lo, hi))
}

// Want fails setting k, when it was given and read, unless ok; what says
// which values are valid.
func (p *Args) Want(k string, ok bool, what string) {
	if v, given := p.spec.Params[k]; given && p.err == nil && !ok {
		p.Fail(k, v, errors.New(what))
	}
}

// Uint64 reads unsigned integer setting k (0x.. allowed) into dst.
func (p *Args) Uint64(k string, dst *uint64) {
	if v, ok := p.Get(k); ok {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			p.Fail(k, v, err)
			return
		}
		*dst = n
	}
}

// Float reads floating-point setting k into dst, when given.
func (p *Args) Float(k string, dst *float64) {
	if v, ok := p.Get(k); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			p.Fail(k, v, err)
			return
		}
		*dst = f
	}
}

// Bool reads boolean setting k into dst, when given.
func (p *Args) Bool(k string, dst *bool) {
	if v, ok := p.Get(k); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.Fail(k, v, err)
			return
		}
		*dst = b
	}
}
