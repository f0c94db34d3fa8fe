//go:build !unix

package cputime

// Seconds returns 0 where there is no getrusage: no CPU-time figure.
func Seconds() float64 { return 0 }
