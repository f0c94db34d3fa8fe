// Package emutest runs kernels that test the kernels package's emulator
// itself (barriers, warp collectives, atomics), including kernels broken on
// purpose that a faithful emulation must catch. They are compiled into
// this package's own copy of the emulator (with cgo on Linux), never into
// the PTX or the kernels package. It lives under testdata so that only
// the kernels package's tests (emulator_test.go) build it: no program
// links it, and the layering of the module does not list it.
package emutest
