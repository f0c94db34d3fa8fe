//go:build cgo

package cli

// cgoBuild says whether the binary was built with cgo.
const cgoBuild = true
