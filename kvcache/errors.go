package kvcache

import (
	"errors"
	"fmt"
	"strings"
)

// A SettingError is an error in cache settings. Its message names each
// setting it is about as the library sets it, by its Spec field
// ("Spec.BlockSize 0 must be > 0"); Flags says the same with the tools'
// flags ("--block-size 0 must be > 0"), which FlagError applies to an error
// that wraps one.
type SettingError struct {
	format string // fmt format whose {name} placeholders are settings by key name
	args   []any
}

// settingErrorf returns a *SettingError: format is a fmt format in which
// {block-size}, {kv-codec}, ... (the keys' names, and {calib} for the
// calibration) stand for the settings.
func settingErrorf(format string, args ...any) error {
	return &SettingError{format: format, args: args}
}

func (e *SettingError) Error() string { return fmt.Errorf(e.render(fieldName), e.args...).Error() }

// Unwrap returns the error the message wraps (%w), if any.
func (e *SettingError) Unwrap() error { return errors.Unwrap(fmt.Errorf(e.format, e.args...)) }

// Flags returns the message with each setting named by its flag.
func (e *SettingError) Flags() string { return fmt.Errorf(e.render(flagName), e.args...).Error() }

// render replaces the format's {name} placeholders by name(placeholder).
func (e *SettingError) render(name func(string) string) string {
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
			return b.String()
		}
		b.WriteString(f[:i])
		b.WriteString(name(f[i+1 : i+1+j]))
		f = f[i+2+j:]
	}
}

// FlagError returns err with the message of the SettingError it wraps, if
// any, said with the tools' flags instead of the Spec's fields, for a
// command to print; other errors come back as they are.
func FlagError(err error) error {
	var se *SettingError
	if !errors.As(err, &se) {
		return err
	}
	return errors.New(strings.Replace(err.Error(), se.Error(), se.Flags(), 1))
}

// fieldName returns the Spec field a setting's key name stands for.
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

// flagName returns the tools' flag for a setting's key name.
func flagName(key string) string {
	switch key {
	case "calib":
		return " (--calib)"
	case "or-kv-policy":
		return " (or --kv-policy)"
	}
	return "--" + key
}
