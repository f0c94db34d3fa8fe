//go:build !race

package scheduler

// raceEnabled reports a -race build (see race_test.go).
const raceEnabled = false
