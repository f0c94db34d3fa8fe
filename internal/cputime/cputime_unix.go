//go:build unix

package cputime

import "syscall"

// Seconds returns the process's user and system CPU time, all threads
// together, in seconds (0 if getrusage fails).
func Seconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
