package kvconfig

import (
	"errors"
	"fmt"
	"strings"
)

// A SettingError is an error in cache settings. Its message names each
// setting it is about as the library sets it, by its Spec field
// ("Spec.BlockSize 0 must be > 0"); Render says the same in other words,
// such as the tools' flags ("--block-size 0 must be > 0").
type SettingError struct {
	format string // fmt format whose {name} placeholders are settings by key name
	args   []any
}

// Errorf returns a *SettingError: format is a fmt format in which
// {block-size}, {kv-codec}, ... (the names of Grammar's keys) stand for the
// settings, and {calib} and {or-kv-policy} for hints only the tools give
// (the calibration, and a per-layer plan's other source).
func Errorf(format string, args ...any) error {
	return &SettingError{format: format, args: args}
}

func (e *SettingError) Error() string { return e.Render(fieldName) }

// Unwrap returns the error the message wraps (%w), if any.
func (e *SettingError) Unwrap() error { return errors.Unwrap(fmt.Errorf(e.format, e.args...)) }

// Render returns the message with each setting named by name(key), key
// being the setting's name in Grammar (or calib, or-kv-policy).
func (e *SettingError) Render(name func(key string) string) string {
	var b strings.Builder
	f := e.format
	for {
		i := strings.IndexByte(f, '{')
		j := -1
		if i >= 0 {
			j = strings.IndexByte(f[i+1:], '}')
		}
		if j < 0 {
			b.WriteString(f)
			break
		}
		b.WriteString(f[:i])
		// The name is a literal in a fmt format: a % in it stays one.
		b.WriteString(strings.ReplaceAll(name(f[i+1:i+1+j]), "%", "%%"))
		f = f[i+2+j:]
	}
	return fmt.Errorf(b.String(), e.args...).Error()
}

// fieldName returns the Spec field a setting's key name stands for,
// "Spec.BlockSize" for "block-size"; "" for the tools' hints.
func fieldName(key string) string {
	switch key {
	case "kv-codec":
		return "Spec.KV"
	case "k-codec":
		return "Spec.K"
	case "v-codec":
		return "Spec.V"
	case "k-bits":
		return "Spec.KBits"
	case "v-bits":
		return "Spec.VBits"
	case "block-size":
		return "Spec.BlockSize"
	case "hot-window":
		return "Spec.HotWindow"
	case "sinks":
		return "Spec.Sinks"
	case "boundary":
		return "Spec.Boundary"
	case "layer-codecs", "kv-policy":
		return "Spec.Layers"
	case "precond":
		return "Spec.Precondition"
	case "calib-codebooks":
		return "Spec.Codebooks"
	case "cache-type":
		return "Spec.CacheType"
	case "calib", "or-kv-policy":
		// Said only by the tools: the library takes the calibration as
		// an argument, and Spec.Layers is both.
		return ""
	}
	return key
}
