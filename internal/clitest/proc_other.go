//go:build unix && !linux

package clitest

import "time"

// cpuTime reports false: only Linux's /proc is read.
func cpuTime(int) (time.Duration, bool) { return 0, false }

// asleep reports false: only Linux's /proc is read.
func asleep(int) (bool, bool) { return false, false }
