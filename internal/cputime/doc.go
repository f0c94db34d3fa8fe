// Package cputime reads the process's CPU time, for benchmarks that report
// work per CPU-second: on a shared machine wall-clock rates swing with the
// load while CPU time counts only what the process ran.
package cputime
