//go:build !unix

package main

// fdLimit reports no limit where there is no RLIMIT_NOFILE.
func fdLimit() (int, bool) { return 0, false }
