//go:build unix

package main

import "syscall"

// fdLimit returns the process's soft limit of open files.
func fdLimit() (int, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return int(min(lim.Cur, 1<<30)), true
}
