// Package term answers whether output goes to a terminal, which decides
// between progress lines redrawn in place and plain log lines.
package term

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
