//go:build !unix

package attention

// cpuSeconds is 0 where there is no getrusage: no CPU-time figure.
func cpuSeconds() float64 { return 0 }
