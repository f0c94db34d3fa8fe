//go:build race

package scheduler

// raceEnabled reports a -race build, whose detector slows the model's
// steps tenfold: the tests that only count steps skip there.
const raceEnabled = true
