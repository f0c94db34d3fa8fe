package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// A Config is one KV-cache setting to evaluate against the reference: a
// name for the tables and a kvconfig.Spec, in the grammar the tools' cache
// flags share.
type Config struct {
	Name string
	Spec kvconfig.Spec
	// Settings are the values Spec took for the model evaluated, defaults
	// applied; the tool fills them in so that reports record them.
	Settings *kvconfig.Settings
}

// Reference returns the uncompressed configuration every run compares to.
func Reference() Config { return Config{Name: "ref"} }

// IsReference reports whether c stores K and V uncompressed everywhere.
func (c Config) IsReference() bool { return !c.Spec.Compressed() }

// String returns c in the grammar ParseConfig reads; a name that is the
// settings as written is left out.
func (c Config) String() string {
	s := c.Spec.String()
	if c.Name == s {
		return s
	}
	if s != "" {
		return "name=" + c.Name + "," + s
	}

	return "name=" + c.Name
}

// MarshalJSON writes the name, the spec as written (ParseConfig's grammar)
// and, when known, the settings in effect.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name     string             `json:"name"`
		Spec     string             `json:"spec"`
		Settings *kvconfig.Settings `json:"settings,omitempty"`
	}{c.Name, c.Spec.String(), c.Settings})
}

// ParseConfig reads one configuration written as comma-separated key=value
// pairs: an optional name=NAME and the settings of kvconfig.Parse, e.g.
//
//	name=kk3,k=kakeya-block:b=3,v=int4,boundary=0;1;-2;-1,block=256,hot=64,sinks=4,precond=1
//
// Without a name the configuration is named by its settings as written.
// The keys are those of the tools' cache flags (kv-codec, block-size,
// hot-window, ...) or their short forms (kv, k, v, block, hot, sinks,
// boundary, precond, cb, ...); see kvconfig.Keys. Codec specs are checked
// by Validate.
func ParseConfig(s string) (Config, error) {
	var c Config
	var rest []string
	for _, piece := range strings.Split(s, ",") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(piece), "name="); ok {
			if c.Name != "" {
				return Config{}, fmt.Errorf("eval: config %q: name given twice", s)
			}
			if name == "" {
				return Config{}, fmt.Errorf("eval: config %q: empty name", s)
			}
			c.Name = name
			continue
		}
		rest = append(rest, piece)
	}
	if len(rest) > 0 {
		var err error
		if c.Spec, err = specParser().Parse(strings.Join(rest, ",")); err != nil {
			return Config{}, fmt.Errorf("eval: config %q: %w", s, err)
		}
	}
	if err := c.nameBySpec(); err != nil {
		return Config{}, fmt.Errorf("eval: config %q: %w", s, err)
	}
	return c, nil
}

// specParser returns the parser of the cache settings in configurations:
// policy=FILE reads its file.
func specParser() kvconfig.Parser { return kvconfig.Parser{ReadFile: os.ReadFile} }

// nameBySpec names an unnamed configuration by its settings as written,
// then checks the name.
func (c *Config) nameBySpec() error {
	if c.Name == "" {
		c.Name = c.Spec.String()
	}
	return c.validateName()
}

// validateName checks the name a configuration file or flag gave.
func (c Config) validateName() error {
	if c.Name == "" {
		return fmt.Errorf("name is missing")
	}
	if strings.ContainsAny(c.Name, "\t\n\r") {
		return fmt.Errorf("name %q holds a tab or a line break", c.Name)
	}
	return nil
}

// Validate checks c's settings as far as they do not depend on a model.
func (c Config) Validate() error {
	if err := c.validateName(); err != nil {
		return err
	}
	return c.Spec.Validate()
}

// ParseConfigsJSON reads a JSON list of configurations: objects with an
// optional "name" and the keys of ParseConfig, e.g.
// {"name": "kk3", "k": "kakeya-block:b=3", "boundary": [0, -1], "block": 64,
// "precond": true}. Numbers, booleans and lists of layers are read as
// their text; unknown keys, and two keys of one setting (kv and
// kv-codec), are errors.
func ParseConfigsJSON(data []byte) ([]Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var objs []map[string]any
	if err := dec.Decode(&objs); err != nil {
		return nil, fmt.Errorf("eval: configs: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("eval: configs: trailing data after the list")
	}
	cs := make([]Config, 0, len(objs))
	for i, obj := range objs {
		c, err := configFromJSON(obj)
		if err != nil {
			return nil, fmt.Errorf("eval: configs: entry %d: %w", i, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// configFromJSON reads one object of a configuration list through the same
// setter as the flags and --config strings.
func configFromJSON(obj map[string]any) (Config, error) {
	var c Config
	seen := map[string]string{} // setting -> the key that gave it
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		text, err := jsonText(obj[k])
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", k, err)
		}
		if k == "name" {
			c.Name = text
			continue
		}
		// Two keys of one setting (kv and kv-codec) would leave it to
		// whichever came last.
		if set, ok := kvconfig.SettingName(k); ok {
			if prev, dup := seen[set]; dup {
				return Config{}, fmt.Errorf("%s: %s is already set by %s; give each setting once", k, set, prev)
			}
			seen[set] = k
		}
		if err := specParser().Set(&c.Spec, k, text); err != nil {
			return Config{}, err
		}
	}
	if err := c.nameBySpec(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// jsonText writes a decoded JSON value as the text a flag would hold.
func jsonText(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	case []any:
		if len(v) == 0 {
			return "none", nil
		}
		parts := make([]string, len(v))
		for i, e := range v {
			n, ok := e.(json.Number)
			if !ok {
				return "", fmt.Errorf("list element %v is not a number", e)
			}
			if _, err := strconv.Atoi(n.String()); err != nil {
				return "", fmt.Errorf("list element %v is not an integer", e)
			}
			parts[i] = n.String()
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("unsupported JSON value %v", v)
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
