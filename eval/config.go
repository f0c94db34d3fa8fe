package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A Config is one KV-cache setting to evaluate against the reference.
type Config struct {
	Name string `json:"name"`
	// K and V are codec spec strings (see codec.ParseSpec); "" keeps that
	// side uncompressed.
	K string `json:"k,omitempty"`
	V string `json:"v,omitempty"`
	// Boundary lists layers that skip the codecs and keep bf16 blocks;
	// negative indices count from the end (-1 is the last layer).
	Boundary []int `json:"boundary,omitempty"`
	// BlockSize is tokens per cache block (0: the run's default).
	BlockSize int `json:"block,omitempty"`
	// HotWindow is how many most recent tokens stay uncompressed.
	HotWindow int `json:"hot,omitempty"`
	// Sinks is how many first tokens stay uncompressed.
	Sinks int `json:"sinks,omitempty"`
	// Precondition whitens K by the calibrated query covariance (needs a
	// calibration file).
	Precondition bool `json:"precond,omitempty"`
	// Codebooks uses the calibration's Lloyd–Max residual codebooks in
	// Kakeya codecs (needs a calibration file).
	Codebooks bool `json:"cb,omitempty"`
}

// Reference returns the uncompressed configuration every run compares to.
func Reference() Config { return Config{Name: "ref"} }

// IsReference reports whether c stores K and V uncompressed everywhere.
func (c Config) IsReference() bool { return c.K == "" && c.V == "" }

// String returns c in the grammar ParseConfig reads.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("name=" + c.Name)
	if c.K != "" {
		b.WriteString(",k=" + c.K)
	}
	if c.V != "" {
		b.WriteString(",v=" + c.V)
	}
	if len(c.Boundary) > 0 {
		b.WriteString(",boundary=")
		for i, l := range c.Boundary {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(strconv.Itoa(l))
		}
	}
	if c.BlockSize != 0 {
		fmt.Fprintf(&b, ",block=%d", c.BlockSize)
	}
	if c.HotWindow != 0 {
		fmt.Fprintf(&b, ",hot=%d", c.HotWindow)
	}
	if c.Sinks != 0 {
		fmt.Fprintf(&b, ",sinks=%d", c.Sinks)
	}
	if c.Precondition {
		b.WriteString(",precond=1")
	}
	if c.Codebooks {
		b.WriteString(",cb=1")
	}
	return b.String()
}

// isConfigKey reports whether key belongs to the --config grammar.
func isConfigKey(key string) bool {
	switch key {
	case "name", "k", "v", "kv", "boundary", "block", "hot", "sinks", "precond", "cb":
		return true
	}
	return false
}

// ParseConfig reads one configuration written as comma-separated key=value
// pairs, e.g.
//
//	name=kk3,k=kakeya:b=3,v=int4,boundary=0;1;-2;-1,block=256,hot=64,sinks=4,precond=1
//
// Keys: name (required), k and v (codec specs), kv (the same spec for both),
// boundary (layer indices separated by ';', negative from the end), block,
// hot, sinks (non-negative integers; block positive), precond and cb (0/1,
// true/false). A codec spec may itself hold commas: a comma-separated piece
// that does not start with one of the keys above and '=' continues the k,
// v or kv value before it, so "k=kakeya:b=3,r=4,v=int4" gives k
// "kakeya:b=3,r=4". Codec specs are checked by the caller.
func ParseConfig(s string) (Config, error) {
	var c Config
	seen := map[string]bool{}
	var last string // key of the previous piece, for codec-spec continuations
	for _, piece := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(piece, "=")
		if !ok || !isConfigKey(key) {
			if last == "k" || last == "v" || last == "kv" {
				if last != "v" {
					c.K += "," + piece
				}
				if last != "k" {
					c.V += "," + piece
				}
				continue
			}
			if !ok {
				return Config{}, fmt.Errorf("eval: config %q: %q is not key=value", s, piece)
			}
			return Config{}, fmt.Errorf("eval: config %q: unknown key %q (want name, k, v, kv, boundary, block, hot, sinks, precond or cb)", s, key)
		}
		if seen[key] || (key == "kv" && (seen["k"] || seen["v"])) || ((key == "k" || key == "v") && seen["kv"]) {
			return Config{}, fmt.Errorf("eval: config %q: %s given twice", s, key)
		}
		seen[key] = true
		last = key
		var err error
		switch key {
		case "name":
			c.Name = val
		case "k":
			c.K = val
		case "v":
			c.V = val
		case "kv":
			c.K, c.V = val, val
		case "boundary":
			c.Boundary, err = parseLayers(val)
		case "block":
			c.BlockSize, err = parseCount(val)
			if err == nil && c.BlockSize == 0 {
				err = fmt.Errorf("must be positive")
			}
		case "hot":
			c.HotWindow, err = parseCount(val)
		case "sinks":
			c.Sinks, err = parseCount(val)
		case "precond":
			c.Precondition, err = parseFlag(val)
		case "cb":
			c.Codebooks, err = parseFlag(val)
		}
		if err != nil {
			return Config{}, fmt.Errorf("eval: config %q: %s=%q: %w", s, key, val, err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("eval: config %q: %w", s, err)
	}
	return c, nil
}

// Validate checks the fields that do not depend on the codec registry.
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("name is missing")
	}
	if strings.ContainsAny(c.Name, ",= \t\n") {
		return fmt.Errorf("name %q holds a comma, '=' or space", c.Name)
	}
	if c.BlockSize < 0 || c.HotWindow < 0 || c.Sinks < 0 {
		return fmt.Errorf("block %d, hot %d, sinks %d: none may be negative", c.BlockSize, c.HotWindow, c.Sinks)
	}
	seen := map[int]bool{}
	for _, l := range c.Boundary {
		if seen[l] {
			return fmt.Errorf("boundary layer %d listed twice", l)
		}
		seen[l] = true
	}
	return nil
}

func parseLayers(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("no layers (separate layer indices with ';')")
	}
	var out []int
	for _, f := range strings.Split(s, ";") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("layer %q is not an integer (separate layer indices with ';')", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a non-negative integer")
	}
	return n, nil
}

func parseFlag(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want 0 or 1")
}

// ParseConfigsJSON reads a JSON list of configurations with the field
// names of Config ("name", "k", "v", "boundary": [0, -1], "block", "hot",
// "sinks", "precond": true, "cb": true). Unknown fields are errors.
func ParseConfigsJSON(data []byte) ([]Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cs []Config
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf("eval: configs: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("eval: configs: trailing data after the list")
	}
	for i, c := range cs {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("eval: configs: entry %d (%q): %w", i, c.Name, err)
		}
	}
	return cs, nil
}

// LoadConfigs reads a JSON configuration list from a file.
func LoadConfigs(path string) ([]Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	cs, err := ParseConfigsJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cs, nil
}

// CheckNames reports an error when two configurations share a name or one
// takes the reference's name.
func CheckNames(cs []Config) error {
	seen := map[string]bool{Reference().Name: true}
	for _, c := range cs {
		if seen[c.Name] {
			return fmt.Errorf("eval: configuration name %q used twice (%q is the reference)", c.Name, Reference().Name)
		}
		seen[c.Name] = true
	}
	return nil
}
