//go:build !(linux || darwin)

package main

import "testing"

// mknodNull skips the test: device nodes are made on Linux and macOS only.
func mknodNull(t *testing.T, _ string) string {
	t.Skip("no device nodes on this platform")
	return ""
}
