// Package kvflags binds the KV-cache settings of a kvconfig.Spec to the
// tools' command-line flags (--kv-codec, --block-size, ...) and says the
// library's errors, which name the Spec's fields, in the words of those
// flags.
package kvflags

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// Parser returns the parser of the tools' settings: the kv-policy setting
// (--kv-policy FILE, policy=FILE) reads its file from the file system.
func Parser() kvconfig.Parser { return kvconfig.Parser{ReadFile: os.ReadFile} }

// Register defines one flag per setting of kvconfig.Grammar on fs, named as
// its keys (--kv-codec, --block-size, ...), each writing into s. As in
// kvconfig.Parse, a setting given twice (--kv-policy and --layer-codecs
// are one) is an error.
func Register(fs *flag.FlagSet, s *kvconfig.Spec) {
	seen := map[string]string{}
	for _, k := range kvconfig.Grammar() {
		fs.Var(&value{s: s, key: k, seen: seen}, k.Name, k.Usage)
	}
}

// value is the flag.Value of one setting of a Spec.
type value struct {
	s    *kvconfig.Spec
	key  kvconfig.Key
	seen map[string]string // setting -> the flag and value that gave it, shared by a FlagSet's flags
}

func (v *value) String() string {
	if v.s == nil {
		// The flag package makes a zero value to tell defaults apart.
		return ""
	}
	return v.key.Value(*v.s)
}

func (v *value) Set(text string) error {
	set := v.key.Setting()
	if prev, dup := v.seen[set]; dup {
		return fmt.Errorf("--%s is already set by %s; give each setting once", set, prev)
	}
	if err := Parser().SetKey(v.s, v.key, text); err != nil {
		return err
	}
	v.seen[set] = fmt.Sprintf("--%s %q", v.key.Name, text)
	return nil
}

// IsBoolFlag lets the on/off settings be given without a value.
func (v *value) IsBoolFlag() bool { return v.key.IsSwitch() }

// Error returns err with the message of the *kvconfig.SettingError it
// wraps, if any, said with the tools' flags instead of the Spec's fields,
// for a command to print; other errors, and nil, come back as they are.
func Error(err error) error {
	var se *kvconfig.SettingError
	if !errors.As(err, &se) {
		return err
	}
	return errors.New(strings.Replace(err.Error(), se.Error(), se.Render(flagName), 1))
}

// flagName returns the tools' flag for a setting's key name, and the
// tools' hints for the placeholders only they fill.
func flagName(key string) string {
	switch key {
	case "calib":
		return " (--calib)"
	case "or-kv-policy":
		return " (or --kv-policy)"
	}
	return "--" + key
}

// Check validates the cache flags of a tool that loads one model, with
// its --calib file (empty for none): the Spec's own errors said in flag
// terms, a calibration setting asked for without --calib, and --calib for
// an uncompressed cache.
func Check(s kvconfig.Spec, calib string) error {
	if err := s.Validate(); err != nil {
		return Error(err)
	}
	if calib == "" {
		switch {
		case s.Precondition == kvconfig.On:
			return errors.New("--precond needs --calib")
		case s.Codebooks == kvconfig.On:
			return errors.New("--calib-codebooks needs --calib")
		}
	} else if !s.Compressed() {
		return errors.New("--calib: the cache is uncompressed; set --kv-codec, --k-codec or --v-codec")
	}
	return nil
}
